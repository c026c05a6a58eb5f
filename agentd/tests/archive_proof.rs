//! What proves an archive, against the simulator's real listings and files and the helper's
//! own hashing verb: on a box that took over a lost host (its journal knows no archive), a
//! PBS archive comes back only for the guest its K-keyed binding names — notes rewritten to
//! name another guest, or notes without a binding, prove nothing. A restore takes the
//! newest verified archive across the tiers, whatever order the tiers are in; a file
//! archive whose bytes changed is passed over for the next one.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;
use crate::two_tiers;

use std::collections::BTreeSet;
use std::sync::Arc;

use bosun_agentd::data::backup::ArchiveProver;
use bosun_agentd::data::backup::tiers::{self, TierPlan};
use bosun_agentd::data::recovery::host_loss::HostLossSearch;
use bosun_agentd::data::recovery::newest_surviving;
use bosun_agentd::ops::journal::JournalHandle;
use bosun_proto::desired::{DesiredState, GuestSpec, Retention};
use bosun_pve::{Pve, StorageId, VolumeId};
use localapi_support::Harness;
use tokio::sync::watch;
use uuid::Uuid;

/// Harness guest `n` as desired state names it.
fn spec_of(h: &Harness, n: usize) -> GuestSpec {
    let guest = h.guest(n);
    serde_json::from_value(serde_json::json!({
        "guest_id": guest.guest_id,
        "hostname": format!("shop{n}"),
        "vmid": guest.vmid,
        "customer": { "customer_id": format!("c{n}"), "display_name": "C" },
        "resources": { "cores": 1, "memory_mib": 512, "rootfs_gib": 8 },
        "power": "running",
        "golden": { "volid": "local:backup/golden.tar.zst", "sha256": "0".repeat(64) }
    }))
    .unwrap()
}

/// Both harness guests, backed up to local then to PBS, and the two-tier plan.
async fn two_guests_on_two_tiers(h: &Harness) -> (DesiredState, TierPlan, StorageId) {
    let pbs = two_tiers::register_pbs_with(&h.sim, &*h.pve, Some(&h.pbs_key)).await;
    for guest in &h.guests {
        localapi_support::record_own_guest(&h.journal, &guest.guest_id, guest.vmid).await;
    }
    let mut desired = two_tiers::desired(Retention::default(), Retention::default());
    desired.guests = vec![spec_of(h, 0), spec_of(h, 1)];
    let plan = tiers::plan(&desired, None, None, &StorageId::new("local").unwrap(), 0);
    assert_eq!(plan.tiers.len(), 2);
    (desired, plan, pbs)
}

async fn back_up(h: &Harness, n: usize, storage: &str) -> String {
    let guest = h.guest(n);
    localapi_support::journaled_backup(
        &h.pve,
        &h.journal,
        &h.prover,
        &guest.guest_id,
        guest.vmid,
        storage,
    )
    .await
}

/// Waits until the simulator's clock is in a later second (archives are named by it).
async fn next_second(h: &Harness) {
    let now = h.sim.now().as_second();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    while h.sim.now().as_second() <= now {
        assert!(tokio::time::Instant::now() < deadline, "the clock stands");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A box that took over the host: an empty journal, the same K, the same tiers.
async fn new_box(
    h: &Harness,
    plan: TierPlan,
) -> (HostLossSearch<bosun_pve::PveClient>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let journal = JournalHandle::open(
        &dir.path().join("journal.db"),
        bosun_agentd::clock::SystemClock::shared(),
    )
    .await
    .unwrap();
    let reader = localapi_support::VerbReader {
        roots: h.sim.files_root().into_iter().collect(),
    };
    let prover = ArchiveProver::new(
        bosun_pve::PveOps::shared(h.pve.clone()),
        Some(Arc::new(reader)),
        Some(h.pbs_key.clone()),
        journal.clone(),
    );
    let (_tx, rx) = watch::channel(plan);
    let search = HostLossSearch::new(
        h.pve.clone(),
        journal,
        h.pbs_key.clone(),
        rx,
        jiff::Timestamp::now(),
        prover,
    );
    (search, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notes_that_name_another_guest_prove_nothing_on_a_new_box() {
    let h = Harness::start().await;
    let (desired, plan, pbs) = two_guests_on_two_tiers(&h).await;
    let (a, b) = (h.guest(0).guest_id.clone(), h.guest(1).guest_id.clone());
    let b_uuid = Uuid::parse_str(&b).unwrap();
    let b_own = back_up(&h, 1, pbs.as_str()).await;
    next_second(&h).await;
    let a_newer = back_up(&h, 0, pbs.as_str()).await;

    // The new box finds each guest's own archive.
    let (search, _dir) = new_box(&h, plan.clone()).await;
    let view = search.look(&desired, &BTreeSet::new()).await;
    assert_eq!(view.sources[&b_uuid].1.archive.as_str(), b_own);

    // Whoever can edit PBS notes rewrites A's newer archive to name B, keeping A's binding,
    // then again with no binding at all: either way B still comes back from its own.
    let volume = VolumeId::new(a_newer.clone()).unwrap();
    let attributes = h.pve.volume_attributes(&volume).await.unwrap();
    let notes = attributes.notes.unwrap();
    assert!(notes.starts_with(&format!("bosun-guest {a} ")), "{notes}");
    let a_binding = notes.split_whitespace().nth(2).unwrap().to_owned();
    for forged in [
        format!("bosun-guest {b} {a_binding}"),
        format!("bosun-guest {b}"),
    ] {
        h.pve.set_volume_notes(&volume, &forged).await.unwrap();
        let (search, _dir) = new_box(&h, plan.clone()).await;
        let view = search.look(&desired, &BTreeSet::new()).await;
        assert_eq!(
            view.sources[&b_uuid].1.archive.as_str(),
            b_own,
            "notes {forged:?} must not make A's archive B's"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_takes_the_newest_verified_archive_whatever_the_tier_order() {
    let h = Harness::start().await;
    let (_, plan, pbs) = two_guests_on_two_tiers(&h).await;
    let guest = h.guest(0).guest_id.clone();
    let local_old = back_up(&h, 0, "local").await;
    next_second(&h).await;
    let pbs_new = back_up(&h, 0, pbs.as_str()).await;

    // Tier 0 (local) holds an older archive than tier 1 (PBS): the newer one is taken.
    let source = newest_surviving(&*h.pve, &h.journal, &h.prover, &guest, &plan)
        .await
        .unwrap();
    assert_eq!(source.archive.as_str(), pbs_new);

    // Reordered (PBS first) and a newer local archive: still the newest.
    next_second(&h).await;
    let local_new = back_up(&h, 0, "local").await;
    let mut reordered = plan.clone();
    reordered.tiers.reverse();
    let source = newest_surviving(&*h.pve, &h.journal, &h.prover, &guest, &reordered)
        .await
        .unwrap();
    assert_eq!(source.archive.as_str(), local_new);

    // The newest local file changed on the storage: it is passed over for the next newest.
    let other = back_up(&h, 1, "local").await;
    h.sim.plant_archive(&local_new, &other).unwrap();
    let source = newest_surviving(&*h.pve, &h.journal, &h.prover, &guest, &plan)
        .await
        .unwrap();
    assert_eq!(source.archive.as_str(), pbs_new);
    let _ = local_old;
}

/// Whoever can write a storage can list any number of bad archives: each refusal is audited
/// once, and the audited ones stop at a bound (256 per run), so the audit log is not theirs
/// to fill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_archives_are_audited_once_each_and_within_a_bound() {
    let h = Harness::start().await;
    for n in 0..300 {
        let volid = format!("local:backup/vzdump-lxc-100-2026_01_01-00_00_{n:03}.tar.zst");
        h.prover
            .reject(
                "some-guest",
                &volid,
                &bosun_agentd::data::backup::ProofError::NoProof,
            )
            .await;
        h.prover
            .reject(
                "some-guest",
                &volid,
                &bosun_agentd::data::backup::ProofError::NoProof,
            )
            .await;
    }
    let audited = h
        .journal
        .audit_since(0, 10_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.event.event == "archive.rejected")
        .count();
    assert_eq!(audited, 256);
}
