//! Steps 10 and 11 of the demo: the backups of step 9 are proven and used.
//!
//! Step 10 backs guest alpha up while it holds its restore check (what its controller writes
//! when it quiesces for a backup: `restore_check.rs`) and turns the restore-test policy on. The
//! agent restores alpha's newest backup into a scratch guest with every network link down and
//! no mounts, starts it, checks it stays up, runs the guest's own check inside it through the
//! helper, and destroys it; the result reaches the hub per guest and tier, and `bosunctl
//! status` shows it.
//!
//! Step 11 writes a file into guest alpha, backs it up with a signed `force-backup`, and
//! destroys the guest behind Bosun's back (root's `pct destroy` on the node). The agent
//! finds it lost and, under the default `auto` DR policy, restores it from its newest backup
//! that passes its check, across the tiers, into its old vmid with the MAC the journal
//! recorded for it; the file is back, and the hub's `guest_restored` alert gives the RPO and
//! RTO.
//!
//! Step 12 changes the file behind alpha's newest backup on `local`, as anyone who can write
//! the backup storage could, and the operator signs a `restore-now` naming it. The agent
//! hashes the file through the helper, finds it is not the archive it backed up, refuses it
//! before anything reaches Proxmox (alpha keeps running, untouched) and the hub raises
//! `archive_rejected`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use bosun_proto::admin::AlertKind;
use bosun_proto::report::RestoreTestOutcome;
use serde_json::json;
use uuid::Uuid;

use super::backup_tiers::{read_json, report, set_desired};
use super::children::Children;
use super::scenario::{applied, check, converge, has_alert, observed, write_json};
use super::sim::{self, SimEndpoint};
use super::stack;
use super::{DemoError, Narrator};
use bosunctl::client::HubClient;
use bosunctl::status;

/// What steps 10 and 11 established.
#[derive(Debug, Clone, Default)]
pub struct RecoveryOutcome {
    /// Step 10: alpha's restore test (`passed`) and the tier storage it restored from.
    pub restore_test: Option<(String, String)>,
    /// Step 10: guests on the node before and after the test (the scratch guest is gone).
    pub guests_around_test: Option<(Vec<u32>, Vec<u32>)>,
    /// Step 11: the vmid alpha came back at, and whether the file written before the backup
    /// is in it.
    pub restored: Option<(u32, bool)>,
    /// Step 11: the `guest_restored` alert's message (RPO and RTO).
    pub alert: Option<String>,
    /// Step 12: the signed `restore-now` naming the changed archive (its outcome and
    /// detail), and the `archive_rejected` alert's message.
    pub changed_archive: Option<(String, String, String)>,
    /// Step 12: the archive file changed on the storage and its length before the change,
    /// so a kept demo can put it back as it was.
    pub altered_archive: Option<(PathBuf, u64)>,
}

/// Step 10; see the module documentation.
#[expect(
    clippy::too_many_arguments,
    reason = "the demo's running parts, passed as they are"
)]
pub(super) async fn restore_test(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    host_id: Uuid,
    alpha: Uuid,
    outcome: &mut RecoveryOutcome,
) -> Result<(), DemoError> {
    let fleet = bosunctl::status::FleetStatus::fetch(client, 50).await?;
    let alpha_vmid = super::scenario::vmid_of(&fleet, alpha)?;
    let orders: &[u8] = b"alpha's orders: 2 chairs\n";
    super::restore_check::backed_up_with_check(
        n,
        children,
        client,
        (bins, out),
        sim,
        host_id,
        (alpha, alpha_vmid, "alpha"),
        orders,
    )
    .await?;
    let pve = sim::pve_client(sim)?;
    let before = guest_ids(&pve).await?;
    let mut document = read_json(&out.join("operator/desired-5.json"))?;
    document["restore_test_policy"] =
        json!({ "enabled": true, "interval_days": 1, "timeout_minutes": 10 });
    let file = out.join("operator/desired-6.json");
    write_json(&file, &document)?;
    set_desired(bins, out, &host_id.to_string(), &file).await?;
    n.detail("$ bosunctl desired set --host … desired-6.json   (generation 6: restore_test_policy enabled, every day, 10 min timeout)");
    let test = reported_test(children, client, 6, (alpha, "alpha")).await?;
    check(test.outcome == Some(RestoreTestOutcome::Passed), || {
        format!("alpha's restore test did not pass: {test:?}")
    })?;
    let tier = test.tier.clone().unwrap_or_default();
    n.detail(format!(
        "agent: restored {} into a scratch guest (links down, no mounts, no bootstrap), started it, it stayed up, the guest's own check passed inside it (helper restore_check); passed in {} s, scratch guest destroyed",
        test.archive.as_deref().unwrap_or("?"),
        test.duration_seconds
    ));
    let after = guest_ids(&pve).await?;
    check(before == after, || {
        format!("the scratch guest is left: guests {before:?} became {after:?}")
    })?;
    n.detail(format!(
        "simulator: guests {before:?} before the test, {after:?} after"
    ));
    // What `bosunctl status` shows now that the test is reported: the lines are read after
    // it, not before, so they say what the step saw.
    let fleet = bosunctl::status::FleetStatus::fetch(client, 50).await?;
    let lines: Vec<String> = status::render(&fleet)
        .into_iter()
        .filter(|l| l.contains("restore-test"))
        .map(|l| l.trim().to_owned())
        .collect();
    check(
        lines.iter().any(|l| l.contains("passed"))
            && !lines
                .iter()
                .any(|l| l.starts_with("last restore-test never")),
        || format!("`bosunctl status` does not show the passed test: {lines:?}"),
    )?;
    n.detail("$ bosunctl status   (its restore-test lines)");
    for line in lines {
        n.detail(format!("  {line}"));
    }
    outcome.restore_test = Some(("passed".to_owned(), tier));
    outcome.guests_around_test = Some((before, after));
    Ok(())
}

/// Step 11; see the module documentation.
#[expect(
    clippy::too_many_arguments,
    reason = "the demo's running parts, passed as they are"
)]
pub(super) async fn guest_loss(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    host_id: Uuid,
    (alpha, alpha_vmid): (Uuid, u32),
    outcome: &mut RecoveryOutcome,
) -> Result<(), DemoError> {
    let vmid = alpha_vmid.to_string();
    let marker = "/root/orders.db";
    sim::sim_pct(
        sim,
        &["push", &vmid, "/tmp/orders.db", marker],
        Some(b"alpha's orders, written before the backup"),
    )
    .await?;
    n.detail(format!("customer: writes {marker} in guest alpha"));
    signed_job(
        (bins, out),
        "job-backup-alpha",
        ("force-backup", host_id, alpha, alpha_vmid),
        &[],
    )
    .await?;
    let before = report(&bosunctl::status::FleetStatus::fetch(client, 50).await?).and_then(|r| {
        r.last_backups
            .iter()
            .filter(|b| b.guest_id == alpha)
            .map(|b| b.finished_at)
            .max()
    });
    converge(children, client, "the signed force-backup", |f| {
        report(f).is_some_and(|r| {
            r.last_backups
                .iter()
                .filter(|b| b.guest_id == alpha && b.ok)
                .map(|b| b.finished_at)
                .max()
                > before
        })
    })
    .await?;
    n.detail(
        "$ bosunctl job new|sign|submit --kind force-backup …   (alpha backed up with the file)",
    );

    sim::sim_pct(sim, &["stop", &vmid], None).await?;
    sim::sim_pct(sim, &["destroy", &vmid, "--purge", "1"], None).await?;
    let lost_at = Instant::now();
    n.detail(format!(
        "# pct stop {vmid} && pct destroy {vmid} --purge 1   (root on the node, behind Bosun's back)"
    ));
    let fleet = converge(children, client, "guest alpha restored", |f| {
        has_alert(f, AlertKind::GuestRestored) && observed(f, alpha) == "running"
    })
    .await?;
    n.detail(format!(
        "agent: alpha lost, restored from its newest verified backup into vmid {vmid}, running again after {}",
        super::narrate::seconds(lost_at.elapsed())
    ));
    let alert = fleet
        .alerts
        .iter()
        .filter(|a| a.kind == AlertKind::GuestRestored)
        .max_by_key(|a| a.id)
        .map(|a| a.message.clone())
        .unwrap_or_default();
    n.detail(format!("hub: guest_restored: {alert}"));
    let file = sim::sim_guest_file(sim, alpha_vmid, marker).await?;
    let kept = file.is_some_and(|f| {
        f.content()
            .is_ok_and(|c| c == b"alpha's orders, written before the backup")
    });
    check(kept, || {
        format!("{marker} did not come back in guest alpha")
    })?;
    n.detail(format!(
        "simulator: {marker} is back in guest alpha, as backed up"
    ));
    check(alert.contains("RPO") && alert.contains("RTO"), || {
        format!("guest_restored without RPO and RTO: {alert}")
    })?;
    outcome.restored = Some((alpha_vmid, kept));
    outcome.alert = Some(alert);
    Ok(())
}

/// Step 12; see the module documentation.
#[expect(
    clippy::too_many_arguments,
    reason = "the demo's running parts, passed as they are"
)]
pub(super) async fn changed_archive(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    host_id: Uuid,
    (alpha, alpha_vmid): (Uuid, u32),
    outcome: &mut RecoveryOutcome,
) -> Result<(), DemoError> {
    let fleet = bosunctl::status::FleetStatus::fetch(client, 50).await?;
    let volid = report(&fleet)
        .and_then(|r| {
            r.last_backups
                .iter()
                .filter(|b| b.guest_id == alpha && b.ok)
                .filter_map(|b| b.archive.clone())
                .find(|a| a.starts_with("local:backup/"))
        })
        .ok_or_else(|| DemoError::Check("the hub shows no backup of alpha on local".to_owned()))?;
    let name = volid.trim_start_matches("local:backup/");
    let file = sim.archives.join("dump").join(name);
    let length = std::fs::metadata(&file)
        .map_err(|source| DemoError::Artifact {
            path: file.clone(),
            source,
        })?
        .len();
    outcome.altered_archive = Some((file.clone(), length));
    {
        use std::io::Write as _;
        let mut archive = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .map_err(|source| DemoError::Artifact {
                path: file.clone(),
                source,
            })?;
        archive
            .write_all(b"\nwritten by whoever holds the share\n")
            .map_err(|source| DemoError::Artifact {
                path: file.clone(),
                source,
            })?;
    }
    n.detail(format!(
        "# echo … >> {}   (the file behind alpha's newest backup, {volid}, is changed on the storage)",
        file.display()
    ));
    let creates_before = sim::sim_requests(sim)
        .await?
        .iter()
        .filter(|r| r.creates_container())
        .count();

    let backup_param = format!("backup={volid}");
    let submitted = signed_job(
        (bins, out),
        "job-restore-changed",
        ("restore-now", host_id, alpha, alpha_vmid),
        &["--param", &backup_param],
    )
    .await?;
    n.detail(format!(
        "$ bosunctl job new --kind restore-now --param backup={volid} …; job sign; job submit"
    ));
    let result = super::scenario::converge_job(
        children,
        bins,
        out,
        &host_id.to_string(),
        &submitted["job_id"],
    )
    .await?;
    let job_outcome = result["outcome"].as_str().unwrap_or_default().to_owned();
    let detail = result["detail"].as_str().unwrap_or_default().to_owned();
    check(
        job_outcome != "succeeded" && detail.contains("failed its check"),
        || format!("the restore-now of a changed archive ended {result}"),
    )?;
    n.detail(format!("agent: restore-now {job_outcome}: {detail}"));
    let fleet = converge(children, client, "the archive_rejected alert", |f| {
        has_alert(f, AlertKind::ArchiveRejected)
    })
    .await?;
    let alert = fleet
        .alerts
        .iter()
        .filter(|a| a.kind == AlertKind::ArchiveRejected)
        .max_by_key(|a| a.id)
        .map(|a| a.message.clone())
        .unwrap_or_default();
    n.detail(format!("hub: archive_rejected: {alert}"));
    let creates_after = sim::sim_requests(sim)
        .await?
        .iter()
        .filter(|r| r.creates_container())
        .count();
    check(creates_after == creates_before, || {
        format!("a container was restored after the refusal ({creates_before} → {creates_after})")
    })?;
    check(observed(&fleet, alpha) == "running", || {
        format!(
            "alpha is {} after the refused restore",
            observed(&fleet, alpha)
        )
    })?;
    n.detail("simulator: no container restored; alpha still running as it was");
    outcome.changed_archive = Some((job_outcome, detail, alert));
    Ok(())
}

/// Writes the operator's job `kind` for `guest` at `vmid` on `host` (with `extra` arguments,
/// e.g. `--param`) to `operator/<name>.json`, signs it with the operator's key and submits
/// it; gives what `bosunctl job submit` printed (its `job_id`).
pub(super) async fn signed_job(
    (bins, out): (&Path, &Path),
    name: &str,
    (kind, host, guest, vmid): (&str, Uuid, Uuid, u32),
    extra: &[&str],
) -> Result<serde_json::Value, DemoError> {
    let doc_arg = out
        .join(format!("operator/{name}.json"))
        .display()
        .to_string();
    let key_arg = out.join("operator/id_ed25519").display().to_string();
    let sig_arg = format!("{doc_arg}.sig");
    let (host, guest, vmid) = (host.to_string(), guest.to_string(), vmid.to_string());
    let mut new = vec![
        "job", "new", "-o", &doc_arg, "--kind", kind, "--host", &host,
    ];
    new.extend(["--guest", guest.as_str(), "--vmid", vmid.as_str()]);
    new.extend(extra);
    let _ = stack::ctl_text(bins, out, &new).await?;
    let _ = stack::ctl_text(bins, out, &["job", "sign", &doc_arg, "-f", &key_arg]).await?;
    stack::ctl(bins, out, &["job", "submit", &doc_arg, &sig_arg]).await
}

/// The containers on the node.
/// Waits until generation `generation` is applied and the restore test of `guest` (named
/// `name`) is reported with an outcome; gives it.
pub(super) async fn reported_test(
    children: &mut Children,
    client: &HubClient,
    generation: u64,
    (guest, name): (Uuid, &str),
) -> Result<bosun_proto::report::RestoreTestReport, DemoError> {
    let fleet = converge(children, client, &format!("{name}'s restore test"), |f| {
        applied(f, generation)
            && report(f).is_some_and(|r| {
                r.restore_tests
                    .iter()
                    .any(|t| t.guest_id == guest && t.outcome.is_some())
            })
    })
    .await?;
    report(&fleet)
        .and_then(|r| r.restore_tests.iter().find(|t| t.guest_id == guest))
        .cloned()
        .ok_or_else(|| DemoError::Check(format!("no restore test of {name} reported")))
}

pub(super) async fn guest_ids(pve: &bosun_pve::PveClient) -> Result<Vec<u32>, DemoError> {
    use bosun_pve::Pve as _;
    let mut ids: Vec<u32> = pve
        .list_cts()
        .await
        .map_err(|source| DemoError::Pve {
            what: "listing containers",
            source,
        })?
        .into_iter()
        .map(|c| c.vmid.get())
        .collect();
    ids.sort_unstable();
    Ok(ids)
}
