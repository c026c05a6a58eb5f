//! Undoing a failed provisioning: destroy only what the operation created, through the
//! reversibility gate, retried while Proxmox is busy; and the tag that lets journal replay
//! tell the operation's own guest from one that took the vmid meanwhile.

use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_pve::{Op, Pve, Vmid};
use serde_json::json;

use crate::ops::operation::StepName;
use crate::ops::operation::{OpJournal, StepError};
use crate::trust::gate::{self, Action as GateAction, Authority, GateRequest, Provenance, Target};

/// The Proxmox tag a provisioning operation puts on the guest it restores, so
/// replay can tell its own guest from one that took the vmid meanwhile.
pub fn op_tag(op: &OpJournal) -> String {
    crate::ops::journal::identity_tag(op.op_id())
}

/// How often a rollback is tried before the operation is left `running` for replay.
const ROLLBACK_ATTEMPTS: u32 = 5;

/// [`compensate`], tried again with backoff while the failure is transient (Proxmox
/// busy, a dropped connection, a lock). A rollback that still fails leaves the operation
/// `running`, so the next start's journal replay finishes it.
pub(crate) async fn compensate_with_retries<P: Pve>(
    pve: &P,
    op: &OpJournal,
    created: Option<Vmid>,
) -> Result<(), StepError> {
    let mut delay = Duration::from_millis(250);
    let mut attempt = 1;
    loop {
        match compensate(pve, op, created).await {
            Ok(()) => return Ok(()),
            Err(err) if attempt < ROLLBACK_ATTEMPTS && !is_gate_denial(&err) => {
                tracing::warn!(op_id = %op.op_id(), attempt, error = %error_chain(&err), "rollback failed; trying again");
                tokio::time::sleep(delay).await;
                delay = delay.saturating_mul(2);
                attempt += 1;
            }
            Err(err) => return Err(err),
        }
    }
}

fn is_gate_denial(err: &StepError) -> bool {
    matches!(err, StepError::Other { step, .. } if step == "compensate")
}

/// Rolls back what `op` created: stops and destroys `vmid` if (and only if)
/// the gate allows it as compensation of `op`, then forgets its provenance.
pub async fn compensate<P: Pve>(
    pve: &P,
    op: &OpJournal,
    created: Option<Vmid>,
) -> Result<(), StepError> {
    let Some(vmid) = created else {
        return Ok(());
    };
    let provenance = op
        .journal()
        .provenance(vmid.get())
        .await
        .map_err(|source| StepError::Journal {
            op_id: op.op_id(),
            step: "compensate".into(),
            source,
        })?;
    let provenance = Provenance::from_journal(provenance.as_ref());
    destroy_own_creation(pve, op, vmid, op.op_id(), provenance).await?;
    op.journal()
        .forget_guest(op.op_id(), vmid.get())
        .await
        .map_err(|source| StepError::Journal {
            op_id: op.op_id(),
            step: "compensate".into(),
            source,
        })?;
    Ok(())
}

/// Stops and destroys `vmid`, in `op`'s journal, if the gate allows it as compensation of
/// operation `owner` (the one whose creation it is, by `provenance`). A guest already gone
/// is fine: nothing was left to undo.
pub(crate) async fn destroy_own_creation<P: Pve>(
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
        tracing::error!(vmid = vmid.get(), op_id = %owner, reason = %decision.reason(), "rollback refused by the gate; guest left in place");
        return Err(StepError::Other {
            op_id: op.op_id(),
            step: "compensate".into(),
            reason: format!("gate denied: {}", decision.reason()),
        });
    }
    let status = match pve.ct_status(vmid).await {
        Ok(status) => status,
        Err(e) if e.is_missing() => return Ok(()),
        Err(source) => {
            return Err(StepError::Pve {
                op_id: op.op_id(),
                step: "compensate".into(),
                source,
            });
        }
    };
    if status.status == bosun_pve::GuestStatus::Running {
        op.task(
            pve,
            Op::StopCt,
            StepName::CompensateStop,
            json!({ "vmid": vmid.get() }),
            pve.stop_ct(vmid),
        )
        .await?;
    }
    op.task(
        pve,
        Op::DestroyCt,
        StepName::CompensateDestroy,
        json!({ "vmid": vmid.get(), "purge": true }),
        pve.destroy_ct(vmid, true),
    )
    .await?;
    tracing::info!(vmid = vmid.get(), op_id = %owner, "rolled back a half-built guest");
    Ok(())
}
