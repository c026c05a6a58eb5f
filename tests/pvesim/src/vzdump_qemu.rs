//! vzdump of a QEMU guest (`PVE::VZDump::QemuServer`): `lock: backup`, the mode (a stopped VM
//! is backed up in `stop` mode by a paused QEMU started for the job), the guest agent's
//! filesystem freeze around the start of the backup job, and a `vzdump-qemu-…vma…` (PBS:
//! `vm/…`) archive that holds the VM's config (`qemu-server.conf`) and its disks' files.
//!
//! The freeze follows `qga_fs_freeze` / `qga_fs_thaw`: only for a VM with the agent
//! configured, in a mode other than `stop`, running when the job began; an agent that does not
//! answer is skipped with an INFO line and the backup goes on without a freeze; a freeze the
//! agent refuses is logged as an error and the thaw is still issued; `freeze-fs-on-backup=0`
//! in the `agent` option turns it off.

use std::time::Instant;

use crate::archive::{archive_name, format_size, render_notes};
use crate::state::{Archive, StorageKind, Volume};
use crate::tasks::TaskCtx;
use crate::vzdump::{Job, prune_backups};

/// One freeze vzdump issued through the guest agent, and its thaw.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BackupFreeze {
    pub(crate) frozen_at: Instant,
    pub(crate) thawed_at: Instant,
}

/// Whether the VM's `agent` option leaves `freeze-fs-on-backup` on (its default).
fn freeze_on_backup(agent: &str) -> bool {
    !agent.split(',').any(|part| {
        matches!(
            part.split_once('='),
            Some(("freeze-fs-on-backup", "0" | "off" | "no" | "false"))
        )
    })
}

/// Backs VM `vmid` up for `job`; `Err` is the text after "Backup of VM … failed - ".
pub(crate) async fn backup_vm(
    t: &TaskCtx,
    job: &Job,
    vmid: u32,
    started: &jiff::Zoned,
) -> Result<(), String> {
    let conf = {
        let mut st = t.shared.state.lock();
        let vm = st
            .vms
            .get_mut(&vmid)
            .ok_or_else(|| format!("unable to find VM '{vmid}'"))?;
        t.log(format!(
            "INFO: status = {}",
            if vm.running() { "running" } else { "stopped" }
        ));
        vm.check_lock()?;
        let mut conf = vm.conf.clone();
        vm.conf.insert("lock".to_owned(), "backup".to_owned());
        conf.remove("lock");
        conf
    };
    let result = backup_locked(t, job, vmid, started, &conf).await;
    let mut st = t.shared.state.lock();
    if let Some(vm) = st.vms.get_mut(&vmid) {
        vm.conf.remove("lock");
    }
    result
}

async fn backup_locked(
    t: &TaskCtx,
    job: &Job,
    vmid: u32,
    started: &jiff::Zoned,
    conf: &crate::state::Conf,
) -> Result<(), String> {
    let shared = &t.shared;
    let name = conf
        .get("name")
        .cloned()
        .unwrap_or_else(|| format!("VM {vmid}"));
    t.log(format!("INFO: VM Name: {name}"));
    for (key, value) in conf.iter().filter(|(k, _)| crate::qemu::is_disk_key(k)) {
        if value.contains("media=cdrom") || value.contains("cloudinit") {
            continue;
        }
        let volume = value.split(',').next().unwrap_or_default();
        // `PVE::VZDump::QemuServer::prepare`: a drive with `backup=0` is left out of the
        // archive's data; the archive's config keeps its line.
        if crate::qemu_disks::excluded_from_backup(value) {
            t.log(format!("INFO: exclude disk '{key}' '{volume}' (backup=no)"));
            continue;
        }
        t.log(format!("INFO: include disk '{key}' '{volume}'"));
    }
    let (running, agent) = {
        let st = shared.state.lock();
        let vm = st
            .vms
            .get(&vmid)
            .ok_or_else(|| format!("unable to find VM '{vmid}'"))?;
        (vm.running(), vm.agent_configured())
    };
    let mode = if running { job.mode.as_str() } else { "stop" };
    t.log(format!("INFO: backup mode: {mode}"));
    t.log("INFO: ionice priority: 7");
    let (volid, format, shown) = archive_name(
        &shared.state.lock(),
        &job.storage,
        &job.compress,
        vmid,
        started,
        true,
    )
    .ok_or_else(|| format!("unable to name an archive on storage '{}'", job.storage))?;
    let kind = shared
        .state
        .lock()
        .storages
        .get(&job.storage)
        .map(|s| s.kind.clone())
        .ok_or_else(|| format!("storage '{}' does not exist", job.storage))?;
    match kind {
        StorageKind::Pbs { .. } => t.log(format!(
            "INFO: creating Proxmox Backup Server archive '{shown}'"
        )),
        _ => t.log(format!("INFO: creating vzdump archive '{shown}'")),
    }
    if !running {
        t.log("INFO: starting kvm to execute backup task");
    }
    // qga_fs_freeze, then the backup job starts (its point in time is the disks' state now),
    // then qga_fs_thaw: the files the archive holds are the guest's at the freeze.
    let frozen_at = if agent && mode != "stop" {
        freeze(t, vmid)
    } else {
        None
    };
    let files = shared
        .state
        .lock()
        .vms
        .get(&vmid)
        .map(|vm| vm.files.clone())
        .unwrap_or_default();
    t.log(format!(
        "INFO: started backup task '{}'",
        uuid::Uuid::new_v4()
    ));
    if let Some(frozen_at) = frozen_at {
        thaw(t, vmid, frozen_at);
    }
    if running {
        t.log("INFO: resuming VM again");
    }
    if let Err(e) = crate::hung_mounts::io(shared, &job.storage).await {
        return Err(format!(
            "job failed with err -5 - Input/output error ({shown}: {e})"
        ));
    }
    t.work(shared.config.durations.vzdump).await?;
    t.checkpoint()?;
    // A cloud image's used blocks, compressed: the model keeps no disk contents.
    let size = (64 << 20) + u64::from(vmid);
    t.log(format!(
        "INFO: 100% ({} of {}) in 1s, read: 120 MiB/s, write: 120 MiB/s",
        format_size(size * 2),
        format_size(size * 2)
    ));
    t.log("INFO: backup is sparse: 0 B (0%) total zero data");
    t.log("INFO: transferred 0 B in 1 seconds (0 B/s)");
    if !matches!(kind, StorageKind::Pbs { .. }) {
        t.log(format!("INFO: archive file size: {}", format_size(size)));
    }
    let notes = match &job.notes_template {
        Some(tpl) => {
            t.log("INFO: adding notes to backup");
            Some(render_notes(tpl, &name, shared.node(), vmid)?)
        }
        None => None,
    };
    if job.protected {
        t.log("INFO: marking backup as protected");
    }
    {
        let mut st = shared.state.lock();
        let storage = st
            .storages
            .get(&job.storage)
            .ok_or_else(|| format!("storage '{}' does not exist", job.storage))?;
        let encrypted = match storage.kind {
            StorageKind::Pbs { .. } => storage
                .options
                .get("encryption-key")
                .filter(|fp| fp.as_str() != "1")
                .cloned(),
            _ => None,
        };
        st.push_volume(Volume {
            volid,
            content: "backup".to_owned(),
            format,
            size,
            ctime: started.timestamp().as_second(),
            vmid: Some(vmid),
            notes,
            protected: job.protected,
            encrypted,
            archive: Some(Archive::new(conf.clone(), files)),
        });
    }
    if let Some(prune) = &job.prune {
        prune_backups(t, job, vmid, prune);
    }
    let elapsed = (shared.clock.epoch() - started.timestamp().as_second()).max(0);
    t.log(format!(
        "INFO: Finished Backup of VM {vmid} ({:02}:{:02}:{:02})",
        elapsed / 3600,
        (elapsed / 60) % 60,
        elapsed % 60
    ));
    t.log(format!(
        "INFO: Backup finished at {}",
        shared.clock.now().strftime("%Y-%m-%d %H:%M:%S")
    ));
    Ok(())
}

/// `qga_fs_freeze`: `Some(when)` when a thaw must follow (the freeze was issued, even if the
/// agent refused it), `None` when it was skipped.
fn freeze(t: &TaskCtx, vmid: u32) -> Option<Instant> {
    let mut st = t.shared.state.lock();
    let vm = st.vms.get_mut(&vmid)?;
    if !vm.agent_answers() {
        t.log("INFO: skipping guest-agent 'fs-freeze', agent configured but not running?");
        return None;
    }
    if !vm.conf.get("agent").is_some_and(|a| freeze_on_backup(a)) {
        t.log("INFO: skipping guest-agent 'fs-freeze', disabled in VM options");
        return None;
    }
    t.log("INFO: issuing guest-agent 'fs-freeze' command");
    if vm.frozen {
        t.log(format!(
            "ERROR: VM {vmid} qga command 'guest-fsfreeze-freeze' failed - The command guest-fsfreeze-freeze has been disabled for this instance"
        ));
    }
    vm.frozen = true;
    Some(Instant::now())
}

/// `qga_fs_thaw`: thaws and records the window.
fn thaw(t: &TaskCtx, vmid: u32, frozen_at: Instant) {
    t.log("INFO: issuing guest-agent 'fs-thaw' command");
    let mut st = t.shared.state.lock();
    let Some(vm) = st.vms.get_mut(&vmid) else {
        return;
    };
    if !vm.agent_answers() {
        t.log(format!(
            "ERROR: VM {vmid} qga command 'guest-fsfreeze-thaw' failed - got timeout"
        ));
        return;
    }
    vm.frozen = false;
    vm.backup_freezes.push(BackupFreeze {
        frozen_at,
        thawed_at: Instant::now(),
    });
}

#[cfg(test)]
mod tests {
    use super::freeze_on_backup;

    #[test]
    fn freeze_on_backup_is_on_unless_the_agent_option_turns_it_off() {
        assert!(freeze_on_backup("1"));
        assert!(freeze_on_backup("enabled=1,fstrim_cloned_disks=1"));
        assert!(!freeze_on_backup("enabled=1,freeze-fs-on-backup=0"));
    }
}
