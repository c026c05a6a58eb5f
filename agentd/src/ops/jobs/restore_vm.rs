//! `restore-now` over an existing VM guest (decision 0123): the VM (shown to carry the
//! journal's identity, recorded as a VM) is overwritten with `qmrestore` `force=1` at its own
//! vmid, only from one of its own journaled VM archives that passes its proof as a VM's
//! (`ArchiveProver::check_as` with `qemu`), checked once before anything is stopped and again
//! right before the restore.
//!
//! ```text
//! accepted ─► source (check_as qemu) ─► stop (if running) ─► check_bootstrap
//!          ─► check again (check_as qemu) ─► restore_overwrite (force=1) ─► start (if it ran)
//! ```
//!
//! A job resumed after a crash reads its own steps first: a `restore_overwrite` that ended
//! well is never sent again (only the start that follows it, when the VM ran and no `start`
//! ended well), and a `stop` that ended well says the VM ran before the job, so it is started
//! again whatever its state when the job resumed. So a crash between any two steps ends with
//! the VM restored once and running again if it ran.

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestKind;
use bosun_pve::{Op, Pve, PveQemu, VmRestoreRequest, Vmid};
use serde_json::{Value, json};

use super::decommission::refused_for_now;
use super::error::JobError;
use super::execute::{GuestWork, backup_ctime, storage_of};
use super::power::{start_again, stop_if_running};
use crate::ops::journal::StepState;
use crate::ops::operation::{OpJournal, StepName};

/// What the job's own steps say it did before it was interrupted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Done {
    /// The VM was stopped by the job: it ran before.
    stopped: bool,
    /// The restore ended well.
    restored: bool,
    /// The start after the restore ended well.
    started: bool,
}

impl Done {
    async fn read(op: &OpJournal) -> Result<Self, JobError> {
        let steps = op
            .journal()
            .steps(op.op_id())
            .await
            .map_err(JobError::journal("reading the job's steps"))?;
        let ok = |name: StepName| {
            steps
                .iter()
                .any(|s| s.name == name.as_str() && s.state == StepState::Ok)
        };
        Ok(Self {
            stopped: ok(StepName::Stop),
            restored: ok(StepName::RestoreOverwrite),
            started: ok(StepName::Start),
        })
    }
}

/// Restores the job's VM guest `vmid` from one of its own proven VM archives, once.
pub(super) async fn restore_vm<P: Pve + PveQemu + 'static>(
    work: GuestWork<'_, P>,
    vmid: Vmid,
) -> Result<Value, JobError> {
    let GuestWork {
        pve,
        journal,
        op,
        job,
        storage,
        mut patience,
        recovery,
        ..
    } = work;
    let recovery = recovery.ok_or(JobError::NotSetUp {
        kind: job.kind.as_str(),
        missing: "backup records to check the archive against",
    })?;
    let done = Done::read(op).await?;
    if done.restored {
        tracing::info!(%vmid, "the VM was restored before the job was interrupted; not again");
        if done.stopped && !done.started {
            start_again(pve, op, GuestKind::Qemu, vmid, &mut patience).await?;
        }
        return Ok(json!({ "vmid": job.vmid, "kind": "qemu", "resumed": true }));
    }
    // Chosen and proven before anything is stopped: a refused archive changes nothing.
    let source = recovery
        .source_as(pve, journal, job, GuestKind::Qemu)
        .await?;
    let backup = source.archive.to_string();
    let taken_at = backup_ctime(pve, &source.archive).await;
    let was_running =
        stop_if_running(pve, op, GuestKind::Qemu, vmid, &mut patience).await? || done.stopped;
    let storage = storage_of(job, storage)?;
    // The restored disk holds the backup's bootstrap (see `credentials::stale`): a token
    // minted after the backup is revoked before the restore, and delivered again after.
    let guest_id = job.guest_id.to_string();
    op.local_typed(
        StepName::CheckBootstrap,
        json!({ "vmid": job.vmid, "backup_ctime": taken_at }),
        crate::guests::credentials::stale::revoke_if_minted_after(
            journal, &guest_id, job.vmid, taken_at, "restore",
        ),
    )
    .await?;
    // Checked again right before Proxmox reads it: still this guest's, still a VM's.
    let source = recovery
        .proven(
            pve,
            journal,
            job,
            &source.archive,
            source.tier,
            GuestKind::Qemu,
        )
        .await?;
    let mut request = VmRestoreRequest::new(vmid, source.restore_volume(), storage);
    // The same guest: its MACs and identity stay (DESIGN §8), its pool membership too.
    request.unique = false;
    request.force = true;
    loop {
        let restored = op
            .task(
                pve,
                Op::RestoreVm,
                StepName::RestoreOverwrite,
                json!({ "vmid": job.vmid, "backup": backup, "kind": "qemu", "force": true }),
                pve.restore_vm(&request),
            )
            .await;
        match restored {
            Ok(_) => break,
            Err(e) if e.pve().is_some_and(refused_for_now) && patience.pause().await => {
                tracing::info!(%vmid, error = %error_chain(&e), "VM restore refused for now; trying again");
            }
            Err(e) => return Err(e.into()),
        }
    }
    if was_running {
        start_again(pve, op, GuestKind::Qemu, vmid, &mut patience).await?;
    }
    Ok(json!({ "vmid": job.vmid, "kind": "qemu", "backup": backup }))
}
