//! The VM of step 36 goes through the lifecycle the containers go through (DESIGN §8b,
//! decisions 0118, 0120, 0121, 0123).
//!
//! - **Backed up.** Its controller, quiescing the apps for a backup, leaves the restore check
//!   in the VM (the checksums of the apps' data and `/etc/bosun/restore-check`; the demo writes
//!   them as a program in the guest would, the simulator running nothing). A signed
//!   `force-backup` backs the VM up to its first tier: vzdump freezes the VM's filesystems
//!   through its guest agent and the archive is a `vzdump-qemu-…` one; the simulator shows the
//!   freeze window.
//! - **Restore-tested.** The agent restores that archive into a scratch VM with every link down
//!   in the restore request itself, boots it, runs the guest's own check through the guest
//!   agent's `exec` in the scratch VM only, and destroys it with `purge`; the hub shows the test
//!   passed.
//! - **Recovered.** Root on the node stops and destroys the VM behind Bosun's back
//!   (`qm stop; qm destroy --purge`). The agent finds it lost and restores it from its newest
//!   verified archive into its old vmid with the MAC the archive's config holds, so cloud-init
//!   sees the same instance; the hub's `guest_restored` alert gives the RPO and RTO.

use std::path::Path;
use std::time::Instant;

use bosun_proto::admin::AlertKind;
use bosun_proto::report::RestoreTestOutcome;
use bosun_pve::{Op, Pve as _, PveQemu as _, Vmid};
use bosunctl::client::HubClient;
use bosunctl::status::FleetStatus;
use serde_json::json;
use sha2::Digest as _;
use uuid::Uuid;

use super::backup_tiers::{report, set_desired};
use super::boot_order::current_desired;
use super::children::Children;
use super::recovery::signed_job;
use super::restore_check::DATA;
use super::scenario::{check, converge, observed, write_json};
use super::sim::{self, SimEndpoint};
use super::vm_guest::VmOutcome;
use super::{DemoError, Narrator};

/// Where the VM's controller keeps the checksums its check verifies.
const CHECKSUMS: &str = "/var/lib/bosun-guest/restore-check.sha256";
/// The VM's orders, the data its check verifies.
const ORDERS: &[u8] = b"vm-shop's orders: 4 lamps\n";

/// What the three steps established.
#[derive(Debug, Clone, Default)]
pub struct VmLifecycleOutcome {
    /// The VM's archive the signed force-backup made.
    pub archive: String,
    /// How long vzdump held the VM's filesystems frozen for it.
    pub freeze: std::time::Duration,
    /// Its restore test's outcome, detail and time in seconds.
    pub restore_test: Option<(RestoreTestOutcome, String, u64)>,
    /// Its `net0` before it was destroyed and after DR brought it back.
    pub net0: (String, String),
    /// The `guest_restored` alert's message.
    pub alert: String,
}

/// The newest good backup of `guest` that is a VM's archive: its finish time and archive.
fn newest_vm_archive(fleet: &FleetStatus, guest: Uuid) -> Option<(jiff::Timestamp, String)> {
    report(fleet)?
        .last_backups
        .iter()
        .filter(|b| b.guest_id == guest && b.ok)
        .filter_map(|b| Some((b.finished_at, b.archive.clone()?)))
        .filter(|(_, a)| a.contains("vzdump-qemu-"))
        .max()
}

fn pve_error(what: &'static str) -> impl FnOnce(bosun_pve::PveError) -> DemoError {
    move |source| DemoError::Pve { what, source }
}

fn vmid(vm: &VmOutcome) -> Result<Vmid, DemoError> {
    Vmid::new(vm.vmid).map_err(|e| DemoError::Check(format!("vmid {}: {e}", vm.vmid)))
}

/// Step 37: the check left in the VM, a signed force-backup, vzdump's freeze.
pub(super) async fn backed_up(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    (host_id, vm): (Uuid, &VmOutcome),
    outcome: &mut VmLifecycleOutcome,
) -> Result<(), DemoError> {
    // Restore tests paused while the VM is backed up: the tester wakes on a desired change,
    // and step 38's turns them on again for the archive that holds the check.
    let mut document = current_desired(&FleetStatus::fetch(client, 50).await?)?;
    document["restore_test_policy"]["enabled"] = json!(false);
    let file = out.join("operator/desired-vm-backup.json");
    write_json(&file, &document)?;
    set_desired(bins, out, &host_id.to_string(), &file).await?;
    n.detail("$ bosunctl desired set --host … desired-vm-backup.json   (restore tests paused while vm-shop is backed up)");
    let check_path = bosun_proto::helper::RESTORE_CHECK_PATH;
    let sums = format!("{:x}  {DATA}\n", sha2::Sha256::digest(ORDERS));
    let script = format!(
        "#!/bin/sh -e\n\
         # Bosun's restore check, written by bosun-guest when it quiesced the apps for a\n\
         # backup: a guest restored from that backup has the data it summed.\n\
         /usr/bin/sha256sum --check --strict --quiet {CHECKSUMS}\n"
    );
    sim::sim_vm_write_file(sim, vm.vmid, (DATA, "644"), ORDERS).await?;
    sim::sim_vm_write_file(sim, vm.vmid, (CHECKSUMS, "644"), sums.as_bytes()).await?;
    sim::sim_vm_write_file(sim, vm.vmid, (check_path, "755"), script.as_bytes()).await?;
    n.detail(format!(
        "guest vm-shop: bosun-guest, quiescing its apps for a backup, sums {DATA} into {CHECKSUMS} and writes {check_path} (sha256sum --check of it)"
    ));
    let before = newest_vm_archive(&FleetStatus::fetch(client, 50).await?, vm.guest_id);
    let freezes_before = sim::sim_vm_freezes(sim, vm.vmid).await?.len();
    signed_job(
        (bins, out),
        "job-backup-vm-shop",
        ("force-backup", host_id, vm.guest_id, vm.vmid),
        &[],
    )
    .await?;
    let fleet = converge(children, client, "vm-shop's signed force-backup", |f| {
        newest_vm_archive(f, vm.guest_id).map(|b| b.0) > before.as_ref().map(|b| b.0)
    })
    .await?;
    let archive = newest_vm_archive(&fleet, vm.guest_id)
        .map(|b| b.1)
        .ok_or_else(|| DemoError::Check("no backup of vm-shop reported".to_owned()))?;
    n.detail(format!(
        "$ bosunctl job new|sign|submit --kind force-backup …   (vm-shop backed up to its first tier: {archive})"
    ));
    let freezes = sim::sim_vm_freezes(sim, vm.vmid).await?;
    let freeze = freezes.get(freezes_before).copied();
    check(freeze.is_some(), || {
        format!("vzdump froze nothing in vm-shop: freezes {freezes:?}")
    })?;
    let freeze = freeze.unwrap_or_default();
    n.detail(format!(
        "simulator: vzdump froze vm-shop's filesystems through its guest agent (fsfreeze-freeze … fsfreeze-thaw) for {freeze:?}"
    ));
    outcome.archive = archive;
    outcome.freeze = freeze;
    Ok(())
}

/// Step 38: the restore test of the archive of step 37, in a scratch VM with its links down.
pub(super) async fn restore_tested(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    (host_id, vm): (Uuid, &VmOutcome),
    outcome: &mut VmLifecycleOutcome,
) -> Result<(), DemoError> {
    let pve = sim::pve_client(sim)?;
    let vms_before = vm_ids(&pve).await?;
    // Only what reaches Proxmox from here on is this step's.
    let seen = sim::sim_requests(sim).await?.len();
    let mut document = current_desired(&FleetStatus::fetch(client, 50).await?)?;
    document["restore_test_policy"] =
        json!({ "enabled": true, "interval_days": 1, "timeout_minutes": 10 });
    let file = out.join("operator/desired-vm-tests.json");
    write_json(&file, &document)?;
    set_desired(bins, out, &host_id.to_string(), &file).await?;
    n.detail("$ bosunctl desired set --host … desired-vm-tests.json   (restore tests on again: vm-shop has never been tested, so it is due)");
    let archive = outcome.archive.clone();
    let fleet = converge(children, client, "vm-shop's restore test", |f| {
        report(f).is_some_and(|r| {
            r.restore_tests.iter().any(|t| {
                t.guest_id == vm.guest_id
                    && t.outcome.is_some()
                    && t.archive.as_deref() == Some(archive.as_str())
            })
        })
    })
    .await?;
    let test = report(&fleet)
        .and_then(|r| r.restore_tests.iter().find(|t| t.guest_id == vm.guest_id))
        .cloned()
        .ok_or_else(|| DemoError::Check("no restore test of vm-shop reported".to_owned()))?;
    check(test.outcome == Some(RestoreTestOutcome::Passed), || {
        format!("vm-shop's restore test did not pass: {test:?}")
    })?;

    // What reached Proxmox: the scratch VM restored with its links down in the request, the
    // check run through its guest agent, the scratch destroyed with purge.
    let requests: Vec<sim::SimRequest> = sim::sim_requests(sim)
        .await?
        .into_iter()
        .skip(seen)
        .collect();
    let qemu = format!("/nodes/{}/qemu", sim.node);
    let scratch = requests
        .iter()
        .filter(|r| r.method == "POST" && r.path == qemu)
        .find(|r| r.param("archive") == Some(archive.as_str()))
        .ok_or_else(|| DemoError::Check(format!("no scratch VM restored from {archive}")))?;
    let scratch_vmid = scratch.param("vmid").unwrap_or_default().to_owned();
    let links: Vec<(&str, &str)> = scratch
        .params
        .iter()
        .filter(|(k, _)| k.starts_with("net"))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    check(
        !links.is_empty() && links.iter().all(|(_, v)| v.contains("link_down=1")),
        || format!("the scratch VM's restore request left a link up: {links:?}"),
    )?;
    check(scratch_vmid != vm.vmid.to_string(), || {
        "the restore test restored over vm-shop itself".to_owned()
    })?;
    let scratch_path = format!("{qemu}/{scratch_vmid}");
    let execs: Vec<&sim::SimRequest> = requests
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/agent/exec"))
        .collect();
    check(
        !execs.is_empty()
            && execs
                .iter()
                .all(|r| r.path.starts_with(&format!("{scratch_path}/"))),
        || format!("the guest agent's exec reached a VM other than the scratch: {execs:?}"),
    )?;
    let destroyed = requests
        .iter()
        .any(|r| r.method == "DELETE" && r.path == scratch_path && r.param("purge") == Some("1"));
    check(destroyed, || {
        format!("the scratch VM {scratch_vmid} was not destroyed with purge")
    })?;
    let vms_after = vm_ids(&pve).await?;
    check(vms_before == vms_after, || {
        format!("the scratch VM is left: VMs {vms_before:?} became {vms_after:?}")
    })?;
    n.detail(format!(
        "agent: restored {archive} into scratch VM {scratch_vmid} (every netN link_down=1 in the restore request), booted it, ran the guest's own check through its guest agent's exec in the scratch only ({} exec call(s)), destroyed it with purge; passed in {} s",
        execs.len(),
        test.duration_seconds
    ));
    n.detail(format!(
        "simulator: VMs {vms_before:?} before the test, {vms_after:?} after"
    ));
    let lines: Vec<String> = bosunctl::status::render(&fleet)
        .into_iter()
        .skip_while(|l| !l.trim_start().starts_with("guest vm-shop "))
        .take_while(|l| {
            !l.trim_start().starts_with("guest ") || l.trim_start().starts_with("guest vm-shop ")
        })
        .filter(|l| l.contains("guest vm-shop ") || l.contains("restore-test"))
        .map(|l| l.trim().to_owned())
        .collect();
    check(
        lines
            .iter()
            .any(|l| l.contains("restore-test") && l.contains("passed")),
        || format!("`bosunctl status` does not show vm-shop's passed test: {lines:?}"),
    )?;
    n.detail("$ bosunctl status   (vm-shop's lines)");
    for line in lines {
        n.detail(format!("  {line}"));
    }
    outcome.restore_test = Some((
        RestoreTestOutcome::Passed,
        test.detail.clone(),
        test.duration_seconds,
    ));
    Ok(())
}

/// Step 39: the VM destroyed behind Bosun's back and recovered by DR, same vmid and MAC.
pub(super) async fn recovered(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    sim: &SimEndpoint,
    vm: &VmOutcome,
    outcome: &mut VmLifecycleOutcome,
) -> Result<(), DemoError> {
    let pve = sim::pve_client(sim)?;
    let id = vmid(vm)?;
    let net0 = |config: &bosun_pve::VmConfig| config.get_str("net0").unwrap_or_default();
    let before = net0(
        &pve.vm_config(id)
            .await
            .map_err(pve_error("reading vm-shop's config"))?,
    );
    let newest_alert = FleetStatus::fetch(client, 50)
        .await?
        .alerts
        .iter()
        .map(|a| a.id)
        .max()
        .unwrap_or_default();

    let root = sim::root_pve_client(sim)?;
    let upid = root.stop_vm(id).await.map_err(pve_error("qm stop"))?;
    root.wait_task(Op::StopVm, &upid)
        .await
        .map_err(pve_error("qm stop"))?;
    let upid = root
        .destroy_vm(id, true)
        .await
        .map_err(pve_error("qm destroy"))?;
    root.wait_task(Op::DestroyVm, &upid)
        .await
        .map_err(pve_error("qm destroy"))?;
    let lost_at = Instant::now();
    n.detail(format!(
        "# qm stop {id} && qm destroy {id} --purge 1   (root on the node, behind Bosun's back)"
    ));
    // Only vm-shop is lost: a new `guest_restored` is its.
    let restored = |f: &FleetStatus| {
        f.alerts
            .iter()
            .any(|a| a.id > newest_alert && a.kind == AlertKind::GuestRestored)
    };
    let fleet = converge(children, client, "vm-shop restored by DR", |f| {
        restored(f) && observed(f, vm.guest_id) == "running"
    })
    .await?;
    let took = lost_at.elapsed();
    let now_vmid = super::scenario::vmid_of(&fleet, vm.guest_id)?;
    check(now_vmid == vm.vmid, || {
        format!("vm-shop came back at vmid {now_vmid}, not {}", vm.vmid)
    })?;
    let after = net0(
        &pve.vm_config(id)
            .await
            .map_err(pve_error("reading vm-shop's config"))?,
    );
    let mac = |net: &str| {
        net.split(',')
            .next()
            .and_then(|model| model.split_once('='))
            .map(|(_, mac)| mac.to_ascii_uppercase())
    };
    check(
        mac(&before).is_some() && mac(&before) == mac(&after),
        || format!("vm-shop's net0 was {before:?}, is {after:?} after DR"),
    )?;
    n.detail(format!(
        "agent: vm-shop lost, restored from its newest verified archive into vmid {id} with the MAC its archive holds ({}: the same cloud-init instance), running again after {}",
        mac(&after).unwrap_or_default(),
        super::narrate::seconds(took)
    ));
    let alert = fleet
        .alerts
        .iter()
        .filter(|a| a.id > newest_alert && a.kind == AlertKind::GuestRestored)
        .max_by_key(|a| a.id)
        .map(|a| a.message.clone())
        .unwrap_or_default();
    check(
        alert.contains(&format!("(vmid {id})"))
            && alert.contains("vzdump-qemu-")
            && alert.contains("RPO")
            && alert.contains("RTO"),
        || format!("guest_restored is not vm-shop's from its VM archive with RPO and RTO: {alert}"),
    )?;
    n.detail(format!("hub: guest_restored: {alert}"));
    outcome.net0 = (before, after);
    outcome.alert = alert;
    Ok(())
}

/// The VMs on the node.
async fn vm_ids(pve: &bosun_pve::PveClient) -> Result<Vec<u32>, DemoError> {
    let mut ids: Vec<u32> = pve
        .list_vms()
        .await
        .map_err(pve_error("listing VMs"))?
        .into_iter()
        .map(|v| v.vmid.get())
        .collect();
    ids.sort_unstable();
    Ok(ids)
}
