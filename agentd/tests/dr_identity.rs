//! A DR restore whose source may still run (the lost guest's vmid holds a container) needs
//! the helper to reset the restored guest's machine id and SSH host keys inside it
//! (decision 0027). An agent without a helper refuses that DR before Proxmox is asked to
//! restore anything: a second guest with the source's identity is never brought up.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;

use std::sync::Arc;

use bosun_agentd::clock::SystemClock;
use bosun_agentd::data::recovery::BackupSource;
use bosun_agentd::guests::reconcile::golden::GoldenCheck;
use bosun_agentd::guests::reconcile::provision::{ProvisionError, Provisioner, Recovery};
use bosun_agentd::ops::journal::OpStatus;
use bosun_proto::desired::GuestSpec;
use bosun_pve::{StorageId, VolumeId};
use localapi_support::{Harness, Options};

fn spec(guest_id: &str) -> GuestSpec {
    serde_json::from_value(serde_json::json!({
        "guest_id": guest_id,
        "hostname": "customer",
        "customer": { "customer_id": "c1", "display_name": "C1" },
        "resources": { "cores": 1, "memory_mib": 512, "rootfs_gib": 4 },
        "power": "running",
        "golden": { "volid": "local:backup/golden.tar.zst", "sha256": "0".repeat(64) }
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_helper_a_dr_whose_source_may_still_run_is_refused_before_any_restore() {
    let h = Harness::start_with(Options {
        guests: 1,
        ..Options::default()
    })
    .await;
    let guest = h.guest(0).clone();
    localapi_support::record_own_guest(&h.journal, &guest.guest_id, guest.vmid).await;
    let archive = localapi_support::journaled_backup(
        &h.pve,
        &h.journal,
        &h.prover,
        &guest.guest_id,
        guest.vmid,
        "local",
    )
    .await;
    let lost_since = h
        .journal
        .note_lost(guest.guest_id.clone(), guest.vmid)
        .await
        .unwrap();
    // No `with_guest_helper`: the agent runs without a helper.
    let provisioner = Provisioner::new(
        h.pve.clone(),
        h.journal.clone(),
        StorageId::new("local-lvm").unwrap(),
        512,
        Arc::new(GoldenCheck::new(
            h.journal.clone(),
            None,
            h.dir.path().join("allowed_signers"),
            uuid::Uuid::new_v4(),
            SystemClock::shared(),
        )),
    );
    let guests_before = h.sim.guest_ids();
    h.sim.clear_requests();

    // The guest's vmid still holds a container: the source may still run.
    let recovery = Recovery {
        lost_vmid: guest.vmid,
        source: BackupSource {
            tier: 0,
            storage: StorageId::new("local").unwrap(),
            archive: VolumeId::new(archive).unwrap(),
            taken_at: jiff::Timestamp::now(),
            retired_key: None,
        },
        lost_since,
        trigger: "auto",
    };
    let err = provisioner
        .recover(&spec(&guest.guest_id), recovery, None)
        .await
        .unwrap_err();
    assert!(matches!(err, ProvisionError::RolledBack { .. }), "{err:?}");
    let text = bosun_errchain::error_chain(&err);
    assert!(
        text.contains("no [helper] is configured") && text.contains("machine id"),
        "{text}"
    );
    // Nothing reached Proxmox beyond reads: no vmid asked for, no restore, no start.
    let mutations: Vec<String> = h
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(mutations, Vec::<String>::new());
    assert_eq!(h.sim.guest_ids(), guests_before);
    // The operation is closed, the guest still noted lost for a later pass.
    let operations = h.journal.recent_operations(10).await.unwrap();
    let (dr, steps) = operations
        .iter()
        .find(|(o, _)| o.kind == "dr_restore")
        .expect("the DR operation is journaled");
    assert_eq!(dr.status, OpStatus::Compensated, "{dr:?}");
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert!(!names.contains(&"restore"), "{names:?}");
    assert!(
        h.journal
            .lost_guests()
            .await
            .unwrap()
            .iter()
            .any(|(g, _, _)| *g == guest.guest_id)
    );
    h.shutdown().await;
}
