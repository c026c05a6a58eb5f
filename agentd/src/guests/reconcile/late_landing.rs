//! Restores that land after the agent stopped waiting for them (DESIGN §9).
//!
//! A restore whose answer was lost is watched for a landing window
//! ([`super::lookup::await_landing`]); when the window passes with no guest and no task, the
//! provisioning closes and its next attempt takes another vmid. Proxmox may still carry the
//! request out later. [`watch`] records the vmid, the sending operation and the tag the guest
//! would carry; every reconcile pass [`sweep`]s those records:
//!
//! - a guest at the vmid carrying the operation's tag landed late: it is stopped and
//!   destroyed through the gate as that operation's own creation, in an operation of its
//!   own (`late_landing_sweep`), and the watch ends `destroyed`;
//! - a guest without the tag is someone else's: never touched, the watch ends `foreign`
//!   (the vmid is not held meanwhile: if a later provisioning restores onto it first, Proxmox
//!   refuses the late restore, since it never overwrites an existing guest without `force`;
//!   if the late restore lands first, the later one is refused and takes another id);
//! - no guest, or a restore still running: looked at again next pass, until the watch
//!   expires ([`LATE_LANDING_WATCH`] after the request) and ends `expired`.
//!
//! A vmid is looked at as a container, then as a VM: a VM restore (`provision_vm`) is watched
//! the same way, and a VM that landed late is stopped and destroyed as a container would be
//! (decision 0117).

use bosun_errchain::error_chain;
use bosun_pve::{Op, PveQemu, Vmid};
use serde_json::json;

use super::compensate::destroy_own_creation;
use super::lookup::{LATE_LANDING_WATCH, carries_identity};
use crate::ops::journal::{JournalError, JournalHandle, LateLanding, NewOperation, OpStatus};
use crate::ops::operation::OpKind;
use crate::ops::operation::StepName;
use crate::ops::operation::{OpJournal, StepError};
use crate::trust::gate::{self, Action as GateAction, Authority, GateRequest, Provenance, Target};

/// Records, while `op` is still running, that its restore onto `vmid`, sent at `asked_at`,
/// has not landed within its window: the vmid stays reserved and is watched.
pub async fn watch(
    op: &OpJournal,
    vmid: Vmid,
    asked_at: jiff::Timestamp,
) -> Result<(), JournalError> {
    let guest_id = op
        .journal()
        .provenance(vmid.get())
        .await?
        .and_then(|p| p.guest_id().map(str::to_owned));
    let until = asked_at
        .checked_add(jiff::SignedDuration::try_from(LATE_LANDING_WATCH).unwrap_or_default())
        .unwrap_or(asked_at);
    tracing::warn!(vmid = vmid.get(), op_id = %op.op_id(), "a restore whose answer was lost did not land in its window; its vmid is watched for a late landing");
    op.journal()
        .watch_late_landing(op.op_id(), vmid.get(), guest_id, asked_at, until)
        .await
}

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepSummary {
    /// Late guests destroyed.
    pub destroyed: usize,
    /// Watches ended without anything landing, or with another guest at the vmid.
    pub ended: usize,
    /// Watches still open.
    pub watching: usize,
}

/// Looks at every watched vmid once and acts on what it finds (the module doc).
pub async fn sweep<P: PveQemu>(pve: &P, journal: &JournalHandle) -> SweepSummary {
    let mut summary = SweepSummary::default();
    let watched = match journal.late_landings().await {
        Ok(watched) if watched.is_empty() => return summary,
        Ok(watched) => watched,
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "could not read the restores watched for a late landing");
            return summary;
        }
    };
    let now = match journal.now().await {
        Ok(now) => now,
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "could not read the journal's clock");
            return summary;
        }
    };
    for landing in watched {
        match sweep_one(pve, journal, &landing, now).await {
            Ok(Swept::Destroyed) => summary.destroyed += 1,
            Ok(Swept::Ended) => summary.ended += 1,
            Ok(Swept::Watching) => summary.watching += 1,
            Err(reason) => {
                summary.watching += 1;
                tracing::warn!(vmid = landing.vmid, op_id = %landing.op_id, error = %reason, "could not settle a restore watched for a late landing; looking again next pass");
            }
        }
    }
    summary
}

enum Swept {
    Destroyed,
    Ended,
    Watching,
}

async fn sweep_one<P: PveQemu>(
    pve: &P,
    journal: &JournalHandle,
    landing: &LateLanding,
    now: jiff::Timestamp,
) -> Result<Swept, String> {
    let end = |outcome: &'static str| async move {
        journal
            .end_late_landing(landing.op_id, landing.vmid, outcome)
            .await
            .map_err(|e| error_chain(&e))
    };
    let vmid = Vmid::new(landing.vmid).map_err(|e| e.to_string())?;
    let (config, vm) = match pve.ct_config(vmid).await {
        Ok(config) => (config, false),
        Err(e) if e.is_missing() => match pve.vm_config(vmid).await {
            Ok(config) => (config, true),
            Err(e) if e.is_missing() => {
                if now >= landing.watch_until {
                    tracing::info!(vmid = landing.vmid, op_id = %landing.op_id, "a restore watched for a late landing never landed; the watch ends");
                    end("expired").await?;
                    return Ok(Swept::Ended);
                }
                return Ok(Swept::Watching);
            }
            Err(e) => return Err(error_chain(&e)),
        },
        Err(e) => return Err(error_chain(&e)),
    };
    if config.lock().as_deref() == Some("create") {
        // A restore still running: its tag arrives when it ends.
        return Ok(Swept::Watching);
    }
    if !carries_identity(&config, &landing.tag()) {
        tracing::info!(vmid = landing.vmid, op_id = %landing.op_id, "another guest holds a vmid watched for a late landing; never touched");
        end("foreign").await?;
        return Ok(Swept::Ended);
    }
    tracing::warn!(vmid = landing.vmid, op_id = %landing.op_id, "a restore taken as never carried out landed late; destroying it as its operation's own creation");
    let op = OpJournal::begin(
        journal,
        NewOperation {
            kind: OpKind::LateLandingSweep,
            guest_id: landing.guest_id.clone(),
            vmid: Some(landing.vmid),
            job_id: None,
            request_id: None,
        },
    )
    .await
    .map_err(|e| error_chain(&e))?;
    let record = op
        .local(
            StepName::LateLanding,
            json!({ "vmid": landing.vmid, "sent_by": landing.op_id.to_string(), "tag": landing.tag() }),
            async { Ok::<(), String>(()) },
        )
        .await;
    let provenance = Provenance::late_landing_of(landing.op_id);
    let destroyed = match record {
        Ok(()) if vm => destroy_late_vm(pve, &op, vmid, landing.op_id, provenance).await,
        Ok(()) => destroy_own_creation(pve, &op, vmid, landing.op_id, provenance).await,
        Err(e) => Err(e),
    };
    if let Err(e) = destroyed {
        let reason = error_chain(&e);
        let _ = op.finish(OpStatus::Failed, Some(reason.clone())).await;
        return Err(reason);
    }
    end("destroyed").await?;
    op.finish(OpStatus::Done, None)
        .await
        .map_err(|e| error_chain(&e))?;
    Ok(Swept::Destroyed)
}

/// Stops and destroys VM `vmid`, in `op`'s journal, if the gate allows it as compensation of
/// operation `owner`, whose creation it is (`provenance`): the VM counterpart of
/// [`destroy_own_creation`].
async fn destroy_late_vm<P: PveQemu>(
    pve: &P,
    op: &OpJournal,
    vmid: Vmid,
    owner: crate::ops::journal::OpId,
    provenance: Provenance,
) -> Result<(), StepError> {
    let request = GateRequest {
        action: GateAction::DestroyGuest,
        target: Target::Guest { vmid: vmid.get() },
        authority: Authority::Compensation { op_id: owner },
        provenance,
    };
    let decision = gate::decide(&request);
    let _ = op
        .journal()
        .append_audit(decision.audit_event(&request))
        .await;
    if !decision.is_allowed() {
        tracing::error!(vmid = vmid.get(), op_id = %owner, reason = %decision.reason(), "a late vm's destroy refused by the gate; left in place");
        return Err(StepError::Other {
            op_id: op.op_id(),
            step: "compensate".into(),
            reason: format!("gate denied: {}", decision.reason()),
        });
    }
    let pve_failed = |source| StepError::Pve {
        op_id: op.op_id(),
        step: "compensate".into(),
        source,
    };
    let status = match pve.vm_status(vmid).await {
        Ok(status) => status,
        Err(e) if e.is_missing() => return Ok(()),
        Err(e) => return Err(pve_failed(e)),
    };
    if status.status == bosun_pve::GuestStatus::Running {
        op.task(
            pve,
            Op::StopVm,
            StepName::CompensateStopVm,
            json!({ "vmid": vmid.get() }),
            pve.stop_vm(vmid),
        )
        .await?;
    }
    op.task(
        pve,
        Op::DestroyVm,
        StepName::CompensateDestroyVm,
        json!({ "vmid": vmid.get(), "purge": true }),
        pve.destroy_vm(vmid, true),
    )
    .await?;
    tracing::info!(vmid = vmid.get(), op_id = %owner, "destroyed a vm that landed late");
    Ok(())
}
