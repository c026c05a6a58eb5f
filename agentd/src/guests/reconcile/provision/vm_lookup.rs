//! A VM restore whose outcome is unknown (DESIGN §9), looked up as a container's is
//! ([`crate::guests::reconcile::lookup`]): while qemu-server restores, the VM's config holds
//! only `lock: create`; the operation's tag arrives when the restore ends, so a look waits
//! for the lock to go before deciding. A restore whose answer was lost is watched for a
//! landing window, at the VM and at the node's task list (`qmrestore`), before its absence
//! counts. And the replay of a `provision_vm` a crash left running: the VM it may have
//! created is looked at, then the provisioning resumed or rolled back.

use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestSpec;
use bosun_pve::{Op, PveQemu, VmRestoreRequest, Vmid, find_task};
use serde_json::json;
use uuid::Uuid;

use super::op_tag;
use super::restore::Sent;
use super::vm::VmProvisioner;
use crate::guests::reconcile::lookup::{RestoreSeen, has_tag, landing_window};
use crate::ops::journal::{OpStatus, StepOutcome, StepState};
use crate::ops::operation::{OpJournal, StepError, StepName};

/// Pause between two looks.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// How long a look waits for a restore still holding its lock.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

/// The task type of a VM restore.
const RESTORE_TASK: &str = "qmrestore";

/// The SMBIOS uuid the `restore_vm` step of `op` sent for `vmid`, if it got that far.
pub(super) async fn journaled_uuid(op: &OpJournal, vmid: Vmid) -> Result<Option<Uuid>, StepError> {
    let steps = op
        .journal()
        .steps(op.op_id())
        .await
        .map_err(|source| StepError::Journal {
            op_id: op.op_id(),
            step: StepName::RestoreVm.as_str().into(),
            source,
        })?;
    Ok(steps
        .iter()
        .rev()
        .filter(|s| s.name == StepName::RestoreVm)
        .filter(|s| {
            s.detail.get("vmid").and_then(serde_json::Value::as_u64) == Some(u64::from(vmid.get()))
        })
        .find_map(|s| {
            s.detail
                .get("smbios_uuid")
                .and_then(serde_json::Value::as_str)
                .and_then(|u| Uuid::parse_str(u).ok())
        }))
}

/// Sends `request` as the `restore_vm` step (its vmid recorded in `created` first) and
/// follows its task; a lost answer is looked up before anything is decided, and a vmid
/// someone else took meanwhile is forgotten and given back as [`Sent::Taken`].
pub(super) async fn send_restore<Q: PveQemu + 'static>(
    vms: &VmProvisioner<Q>,
    op: &OpJournal,
    request: &VmRestoreRequest,
    detail: serde_json::Value,
    created: &mut Option<Vmid>,
) -> Result<Sent, StepError> {
    let pve = &*vms.base.pve;
    let vmid = request.vmid;
    let seq = op.intent(StepName::RestoreVm, detail).await?;
    *created = Some(vmid);
    let asked_at = jiff::Timestamp::now();
    let e = match pve.restore_vm(request).await {
        Ok(upid) => {
            op.sent(StepName::RestoreVm, seq, &upid).await?;
            op.wait(pve, Op::RestoreVm, StepName::RestoreVm, seq, &upid)
                .await?;
            return Ok(Sent::Restored(vmid));
        }
        Err(e) if e.is_outcome_unknown() => {
            let window = landing_window(pve.retry_policy());
            let seen = await_landing(pve, vmid, &op_tag(op), asked_at, window).await;
            tracing::info!(vmid = vmid.get(), op_id = %op.op_id(), ?seen, "looked at a vm restore whose answer was lost");
            if matches!(seen, Ok(RestoreSeen::Ours)) {
                op.finished(StepName::RestoreVm, seq, StepOutcome::Ok { warnings: 0 })
                    .await?;
                return Ok(Sent::Restored(vmid));
            }
            if matches!(seen, Ok(RestoreSeen::Unlanded)) {
                crate::guests::reconcile::late_landing::watch(op, vmid, asked_at)
                    .await
                    .map_err(|source| StepError::Journal {
                        op_id: op.op_id(),
                        step: StepName::RestoreVm.as_str().into(),
                        source,
                    })?;
            }
            if matches!(seen, Ok(RestoreSeen::Foreign)) {
                *created = None;
                let _ = op.journal().forget_guest(op.op_id(), vmid.get()).await;
            }
            e
        }
        Err(e) => {
            if e.is_already_exists() {
                *created = None;
                let _ = op.journal().forget_guest(op.op_id(), vmid.get()).await;
            }
            e
        }
    };
    let taken = e.is_already_exists();
    op.finished(
        StepName::RestoreVm,
        seq,
        StepOutcome::Failed {
            error: error_chain(&e),
        },
    )
    .await?;
    let failed = StepError::Pve {
        op_id: op.op_id(),
        step: StepName::RestoreVm.as_str().into(),
        source: e,
    };
    if taken {
        Ok(Sent::Taken(failed))
    } else {
        Err(failed)
    }
}

/// Looks at VM `vmid` until no restore is in flight on it (or [`SETTLE_LIMIT`] passes), then
/// says whether it carries `tag`.
pub(super) async fn settle<Q: PveQemu>(
    pve: &Q,
    vmid: Vmid,
    tag: &str,
) -> Result<RestoreSeen, String> {
    let deadline = tokio::time::Instant::now() + SETTLE_LIMIT;
    loop {
        let seen = match pve.vm_config(vmid).await {
            Err(e) if e.is_missing() => return Ok(RestoreSeen::Absent),
            Err(e) if e.is_transient() || e.status().is_some_and(|s| s >= 500) => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(error_chain(&e));
                }
                None
            }
            Err(e) => return Err(error_chain(&e)),
            Ok(config) if config.lock().as_deref() == Some("create") => {
                Some(RestoreSeen::StillRunning)
            }
            Ok(config) if has_tag(config.get_str("tags").as_deref(), tag) => {
                return Ok(RestoreSeen::Ours);
            }
            Ok(_) => return Ok(RestoreSeen::Foreign),
        };
        if tokio::time::Instant::now() >= deadline {
            return Ok(seen.unwrap_or(RestoreSeen::StillRunning));
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// Watches for a VM restore sent at `asked_at` whose answer was lost, until the VM appears
/// (then settled), a `qmrestore` task for it started since `asked_at` is found (followed to
/// its end, then looked at once more), or `window` passes (`Unlanded`).
pub(super) async fn await_landing<Q: PveQemu>(
    pve: &Q,
    vmid: Vmid,
    tag: &str,
    asked_at: jiff::Timestamp,
    window: Duration,
) -> Result<RestoreSeen, String> {
    let deadline = tokio::time::Instant::now() + window;
    let mut followed = false;
    loop {
        let seen = settle(pve, vmid, tag).await?;
        if seen != RestoreSeen::Absent || followed {
            return Ok(seen);
        }
        match find_task(pve, vmid, RESTORE_TASK, asked_at).await {
            Ok(Some(upid)) => {
                let ended = pve.wait_task(Op::RestoreVm, &upid).await;
                tracing::info!(%vmid, %upid, ok = ended.is_ok(), "the vm restore whose answer was lost ran");
                followed = true;
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(%vmid, error = %error_chain(&e), "could not read the node's task list while a lost vm restore may still land");
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(RestoreSeen::Unlanded);
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// How a replayed VM operation goes on once its VM is found.
pub(super) enum Resume {
    /// A `provision_vm`: its steps after `restore_vm`.
    Provision,
    /// A `dr_restore_vm`: its steps after `restore_vm`, from the source it journaled.
    Recover(Box<super::dr_restore::Recovery>),
    /// A `dr_restore_vm` that journaled no source: rolled back.
    Nothing,
}

/// Replays `op`, a `provision_vm` (or `dr_restore_vm`, as `resume` says) a crash left running: each vmid it recorded is looked at
/// (a restore whose answer never arrived watched for its landing window first); one carrying
/// its tag is its VM, every other row is forgotten. No VM: the operation closes
/// `compensated` (the next pass provisions afresh). Its VM, its restore not failed and the
/// guest still desired: the provisioning resumes after `restore_vm`; otherwise it is rolled
/// back. Gives whether it resumed.
pub(super) async fn replay<Q: PveQemu + 'static>(
    vms: &VmProvisioner<Q>,
    op: &OpJournal,
    spec: Option<&GuestSpec>,
    resume: Resume,
) -> Result<bool, String> {
    let pve = &*vms.base.pve;
    let journal = op.journal();
    let created: Vec<u32> = journal
        .all_provenance()
        .await
        .map_err(|e| error_chain(&e))?
        .into_iter()
        .filter(|p| p.created_by_op() == op.op_id())
        .map(|p| p.vmid())
        .collect();
    let steps = journal
        .steps(op.op_id())
        .await
        .map_err(|e| error_chain(&e))?;
    let last_restore = steps.iter().rev().find(|s| s.name == StepName::RestoreVm);
    let unanswered_since = last_restore
        .filter(|s| s.upid.is_none())
        .map(|s| s.intent_at);
    let mut ours = None;
    for vmid in created {
        let pve_vmid = Vmid::new(vmid).map_err(|e| e.to_string())?;
        let seen = match unanswered_since {
            Some(asked_at) => {
                let window = landing_window(pve.retry_policy());
                await_landing(pve, pve_vmid, &op_tag(op), asked_at, window).await?
            }
            None => settle(pve, pve_vmid, &op_tag(op)).await?,
        };
        tracing::info!(vmid, op_id = %op.op_id(), ?seen, "replay looked at a vm the operation may have created");
        match seen {
            RestoreSeen::StillRunning => {
                return Err(format!(
                    "a restore is still running on vm {vmid}; left for the next start"
                ));
            }
            RestoreSeen::Ours => ours = Some(pve_vmid),
            RestoreSeen::Absent | RestoreSeen::Foreign | RestoreSeen::Unlanded => {
                if let (RestoreSeen::Unlanded, Some(asked_at)) = (&seen, unanswered_since) {
                    crate::guests::reconcile::late_landing::watch(op, pve_vmid, asked_at)
                        .await
                        .map_err(|e| error_chain(&e))?;
                }
                op.local(StepName::ForgetUnclaimed, json!({ "vmid": vmid }), async {
                    Ok::<(), String>(())
                })
                .await
                .map_err(|e| error_chain(&e))?;
                journal
                    .forget_guest(op.op_id(), vmid)
                    .await
                    .map_err(|e| error_chain(&e))?;
            }
        }
    }
    let Some(vmid) = ours else {
        op.finish(
            OpStatus::Compensated,
            Some("interrupted before a vm existed".into()),
        )
        .await
        .map_err(|e| error_chain(&e))?;
        return Ok(false);
    };
    let restore_failed =
        last_restore.is_some_and(|s| s.state == StepState::Failed && s.upid.is_some());
    match (spec, resume) {
        (Some(spec), Resume::Provision) if !restore_failed => {
            vms.drive(op, spec, Some(vmid))
                .await
                .map_err(|e| error_chain(&e))?;
            Ok(true)
        }
        (Some(spec), Resume::Recover(recovery)) if !restore_failed => {
            vms.drive_recovery(op, spec, Some(vmid), &recovery)
                .await
                .map_err(|e| error_chain(&e))?;
            Ok(true)
        }
        _ => {
            super::vm_steps::compensate_vm_with_retries(pve, op, Some(vmid))
                .await
                .map_err(|e| error_chain(&e))?;
            op.finish(
                OpStatus::Compensated,
                Some("interrupted; rolled back on start".into()),
            )
            .await
            .map_err(|e| error_chain(&e))?;
            Ok(false)
        }
    }
}
