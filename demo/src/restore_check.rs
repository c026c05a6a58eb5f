//! The guests' own restore checks in the demo, and its step where one fails.
//!
//! A guest's controller (bosun-guest) writes a restore check when it quiesces its apps for a
//! backup: the checksums of the apps' data and `/etc/bosun/restore-check`, a script that
//! verifies them; it removes both when the apps run again. The backup taken in between carries
//! them, and the agent's restore test runs the script inside the scratch guest, links down,
//! through the helper's `restore_check`. The demo's guests run no controller inside (the
//! simulator runs nothing), so the demo writes what bosun-guest would, with root's `pct` on the
//! node, around a signed `force-backup`.
//!
//! The step: guest charlie is added and backed up with its check; the archive's copy of its
//! orders is then torn (the simulator's `corrupt_data` damage: its init is whole). Restore tests
//! switched on, the agent restores the archive into a scratch guest, which boots and stays up:
//! only the guest's own check finds the damage. The test fails with the check's words, the hub
//! raises `restore_test_failed`, `bosunctl status` shows it, and the scratch guest is gone.

use std::path::Path;

use bosun_proto::admin::AlertKind;
use bosun_proto::report::RestoreTestOutcome;
use serde_json::json;
use sha2::Digest as _;
use uuid::Uuid;

use super::backup_tiers::{read_json, report, set_desired};
use super::children::Children;
use super::recovery::signed_job;
use super::scenario::{applied, check, converge, observed, vmid_of, write_json};
use super::sim::{self, SimEndpoint};
use super::{DemoError, Narrator};
use bosunctl::client::HubClient;
use bosunctl::status;

/// The guests' application data their check verifies.
pub(super) const DATA: &str = "/srv/shop/orders.db";
/// Where bosun-guest keeps the checksums.
const CHECKSUMS: &str = "/var/lib/bosun-guest/restore-check.sha256";

/// What the step established.
#[derive(Debug, Clone, Default)]
pub struct RestoreCheckOutcome {
    /// The archive whose data was torn.
    pub archive: String,
    /// How charlie's restore test ended.
    pub outcome: Option<RestoreTestOutcome>,
    /// Its detail (the check's first lines).
    pub detail: String,
    /// The `restore_test_failed` alert's message.
    pub alert: String,
    /// Guests on the node before and after the test (the scratch guest is gone).
    pub guests_around_test: (Vec<u32>, Vec<u32>),
}

/// What bosun-guest writes as the check (`RestoreCheck::script_text` with its default list).
fn script() -> String {
    format!(
        "#!/bin/sh -e\n\
         # Bosun's restore check, written by bosun-guest when it quiesced the apps for a\n\
         # backup and removed when they ran again: a guest restored from that backup has\n\
         # the data it summed, or this fails with the files that differ.\n\
         /usr/bin/sha256sum --check --strict --quiet {CHECKSUMS}\n"
    )
}

/// Backs up guest `name` (`vmid`) with a signed `force-backup` while it holds the restore check
/// of `data` (written at [`DATA`]), as bosun-guest quiescing for that backup leaves it, and
/// removes the check afterwards; gives the archive.
#[expect(
    clippy::too_many_arguments,
    reason = "the demo's running parts, passed as they are"
)]
pub(super) async fn backed_up_with_check(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    host_id: Uuid,
    (guest, vmid, name): (Uuid, u32, &str),
    data: &[u8],
) -> Result<String, DemoError> {
    let id = vmid.to_string();
    let check_path = bosun_proto::helper::RESTORE_CHECK_PATH;
    let dirs = ["/srv/shop", "/etc/bosun", "/var/lib/bosun-guest"];
    let mut mkdir = vec!["exec", id.as_str(), "--", "/usr/bin/mkdir", "-p"];
    mkdir.extend(dirs);
    sim::sim_pct(sim, &mkdir, None).await?;
    sim::sim_pct(sim, &["push", &id, "/tmp/orders.db", DATA], Some(data)).await?;
    let sums = format!("{:x}  {DATA}\n", sha2::Sha256::digest(data));
    sim::sim_pct(
        sim,
        &["push", &id, "/tmp/sums", CHECKSUMS],
        Some(sums.as_bytes()),
    )
    .await?;
    let push = ["push", &id, "/tmp/check", check_path, "--perms", "0755"];
    sim::sim_pct(sim, &push, Some(script().as_bytes())).await?;
    n.detail(format!(
        "guest {name}: bosun-guest, quiescing its apps for a backup, sums {DATA} into {CHECKSUMS} and writes {check_path} (sha256sum --check of it)"
    ));
    let before = newest_backup(
        &bosunctl::status::FleetStatus::fetch(client, 50).await?,
        guest,
    );
    signed_job(
        (bins, out),
        &format!("job-backup-{name}-checked"),
        ("force-backup", host_id, guest, vmid),
        &[],
    )
    .await?;
    let fleet = converge(
        children,
        client,
        &format!("{name}'s signed force-backup"),
        |f| newest_backup(f, guest).map(|b| b.0) > before.as_ref().map(|b| b.0),
    )
    .await?;
    let archive = newest_backup(&fleet, guest)
        .map(|b| b.1)
        .ok_or_else(|| DemoError::Check(format!("no backup of {name} reported")))?;
    let remove = [
        "exec",
        &id,
        "--",
        "/usr/bin/rm",
        "-f",
        check_path,
        CHECKSUMS,
    ];
    sim::sim_pct(sim, &remove, None).await?;
    n.detail(format!(
        "$ bosunctl job new|sign|submit --kind force-backup …   ({name} backed up with its check: {archive}); apps running again, bosun-guest removes the check from the live guest"
    ));
    Ok(archive)
}

/// The finish time and archive of `guest`'s newest good backup on `local`, the first tier.
fn newest_backup(fleet: &status::FleetStatus, guest: Uuid) -> Option<(jiff::Timestamp, String)> {
    report(fleet)?
        .last_backups
        .iter()
        .filter(|b| b.guest_id == guest && b.ok)
        .filter_map(|b| Some((b.finished_at, b.archive.clone()?)))
        .filter(|(_, a)| a.starts_with("local:backup/"))
        .max()
}

/// The step; see the module documentation.
pub(super) async fn corrupt_data(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    host_id: Uuid,
) -> Result<RestoreCheckOutcome, DemoError> {
    let charlie = Uuid::new_v4();
    let host_arg = host_id.to_string();
    let mut document = read_json(&out.join("operator/desired-6.json"))?;
    let alpha = document["guests"][0].clone();
    let mut spec = alpha;
    spec["guest_id"] = json!(charlie);
    spec["hostname"] = json!("charlie");
    spec["customer"] = json!({ "customer_id": "cust-charlie", "display_name": "Customer charlie" });
    if let Some(guests) = document["guests"].as_array_mut() {
        guests.push(spec);
    }
    // Restore tests paused while charlie is set up, so none runs before its archive is torn.
    document["restore_test_policy"]["enabled"] = json!(false);
    let file = out.join("operator/desired-7.json");
    write_json(&file, &document)?;
    set_desired(bins, out, &host_arg, &file).await?;
    n.detail("$ bosunctl desired set --host … desired-7.json   (generation 7: guest charlie; restore tests paused)");
    let fleet = converge(children, client, "guest charlie running", |f| {
        applied(f, 7) && observed(f, charlie) == "running"
    })
    .await?;
    let vmid = vmid_of(&fleet, charlie)?;
    let orders: &[u8] = b"charlie's orders: 12 chairs, 3 tables\n";
    let archive = backed_up_with_check(
        n,
        children,
        client,
        (bins, out),
        sim,
        host_id,
        (charlie, vmid, "charlie"),
        orders,
    )
    .await?;
    sim::sim_damage_archive(sim, &archive, &json!({ "corrupt_data": { "path": DATA } })).await?;
    n.detail(format!(
        "simulator: the archive's copy of {DATA} torn (its first byte flipped: a copy that went wrong); its init is whole"
    ));

    let pve = sim::pve_client(sim)?;
    let before = super::recovery::guest_ids(&pve).await?;
    document["restore_test_policy"]["enabled"] = json!(true);
    let file = out.join("operator/desired-8.json");
    write_json(&file, &document)?;
    set_desired(bins, out, &host_arg, &file).await?;
    n.detail(
        "$ bosunctl desired set --host … desired-8.json   (generation 8: restore tests on again)",
    );
    let test = super::recovery::reported_test(children, client, 8, (charlie, "charlie")).await?;
    check(
        test.outcome == Some(RestoreTestOutcome::Failed)
            && test.archive.as_deref() == Some(archive.as_str())
            && test.detail.contains(&format!("{DATA}: FAILED")),
        || format!("charlie's restore test did not fail on its check: {test:?}"),
    )?;
    n.detail(format!(
        "agent: restored {archive} into a scratch guest (links down), started it, it stayed up; the guest's check ran inside it (helper restore_check): {}",
        test.detail
    ));
    let after = super::recovery::guest_ids(&pve).await?;
    check(before == after, || {
        format!("the scratch guest is left: guests {before:?} became {after:?}")
    })?;
    let fleet = converge(children, client, "the restore_test_failed alert", |f| {
        f.alerts
            .iter()
            .any(|a| a.kind == AlertKind::RestoreTestFailed && a.message.contains("charlie"))
    })
    .await?;
    let alert = fleet
        .alerts
        .iter()
        .filter(|a| a.kind == AlertKind::RestoreTestFailed)
        .max_by_key(|a| a.id)
        .map(|a| a.message.clone())
        .unwrap_or_default();
    n.detail(format!("hub: restore_test_failed: {alert}"));
    // `bosunctl status`, charlie's lines.
    let mut charlies = false;
    for line in status::render(&fleet) {
        if line.starts_with("  guest ") {
            charlies = line.contains("charlie");
        }
        if charlies && (line.starts_with("  guest ") || line.contains("restore-test")) {
            n.detail(format!("  {}", line.trim()));
        }
    }
    Ok(RestoreCheckOutcome {
        archive,
        outcome: test.outcome,
        detail: test.detail,
        alert,
        guests_around_test: (before, after),
    })
}
