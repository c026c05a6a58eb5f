//! Journal replay on start (DESIGN §9): every operation a crash left
//! `running` is resumed or rolled back before the first reconcile pass.
//!
//! - `provision`: rolled back. A task still running from the restore step is
//!   waited for first. A guest is destroyed only when the journal records that
//!   this operation created it **and** the guest carries this operation's tag
//!   (a restore whose intent was written but which never reached Proxmox may
//!   leave a provenance row for a vmid someone else took meanwhile); the gate
//!   decides as for any compensation. The next pass provisions afresh.
//! - reconcile actions (`set_spec`, `grow_rootfs`, `start`, `stop`): their
//!   task, if sent, is waited for; the operation is closed `failed` and the
//!   next pass looks again.
//! - signed jobs are resumed by [`crate::jobs::runner`], not here.

use serde_json::json;

use super::observe::is_missing;
use super::provision::{compensate, op_tag};
use super::steps::{OpJournal, error_chain};
use crate::journal::{JournalError, JournalHandle, OpStatus, StepState, UnfinishedOperation};
use crate::pve::{Op, Pve, Upid, Vmid};

/// The operation kinds replay handles here.
pub const RECONCILE_KINDS: &[&str] = &["provision", "set_spec", "grow_rootfs", "start", "stop"];

/// What replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Provisions rolled back.
    pub rolled_back: usize,
    /// Reconcile actions closed as interrupted.
    pub closed: usize,
    /// Operations whose rollback failed; left `running` for the next start.
    pub stuck: usize,
}

/// Replays the unfinished reconcile operations.
pub async fn replay<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
) -> Result<ReplaySummary, JournalError> {
    let mut summary = ReplaySummary::default();
    for unfinished in journal.unfinished_operations().await? {
        let kind = unfinished.operation.kind.clone();
        if !RECONCILE_KINDS.contains(&kind.as_str()) {
            continue;
        }
        let op = OpJournal::resume(journal, unfinished.operation.op_id, kind.clone());
        wait_for_sent_task(pve, &unfinished).await;
        if kind == "provision" {
            match roll_back_provision(pve, journal, &op).await {
                Ok(()) => {
                    let _ = op
                        .finish(
                            OpStatus::Compensated,
                            Some("interrupted; rolled back on start".into()),
                        )
                        .await;
                    summary.rolled_back += 1;
                    tracing::info!(op_id = %op.op_id(), "replay rolled back an interrupted provision");
                }
                Err(reason) => {
                    summary.stuck += 1;
                    tracing::error!(op_id = %op.op_id(), error = %reason, "replay could not roll back an interrupted provision");
                }
            }
        } else {
            let _ = op
                .finish(
                    OpStatus::Failed,
                    Some("interrupted; retried by reconcile".into()),
                )
                .await;
            summary.closed += 1;
        }
    }
    Ok(summary)
}

async fn wait_for_sent_task<P: Pve>(pve: &P, unfinished: &UnfinishedOperation) {
    let Some(step) = &unfinished.last_step else {
        return;
    };
    if step.state != StepState::Sent {
        return;
    }
    let Some(upid) = step.upid.as_deref().and_then(|u| Upid::parse(u).ok()) else {
        return;
    };
    let op = match step.name.as_str() {
        "restore" => Op::RestoreCt,
        "start" => Op::StartCt,
        "resize_rootfs" => Op::ResizeDisk,
        "shutdown" => Op::ShutdownCt,
        "compensate_stop" => Op::StopCt,
        "compensate_destroy" => Op::DestroyCt,
        _ => Op::TaskStatus,
    };
    if let Err(e) = pve.wait_task(op, &upid).await {
        tracing::info!(upid = %upid, error = %error_chain(&e), "interrupted task did not succeed");
    }
}

async fn roll_back_provision<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    op: &OpJournal,
) -> Result<(), String> {
    let created: Vec<u32> = journal
        .all_provenance()
        .await
        .map_err(|e| error_chain(&e))?
        .into_iter()
        .filter(|p| p.created_by_op() == op.op_id())
        .map(|p| p.vmid())
        .collect();
    for vmid in created {
        let pve_vmid = Vmid::new(vmid).map_err(|e| e.to_string())?;
        let ours = match pve.ct_config(pve_vmid).await {
            Ok(config) => config
                .get_str("tags")
                .is_some_and(|tags| tags.split([';', ',', ' ']).any(|t| t == op_tag(op))),
            Err(e) if is_missing(&e) => false,
            Err(e) => return Err(error_chain(&e)),
        };
        if ours {
            compensate(pve, op, Some(pve_vmid))
                .await
                .map_err(|e| error_chain(&e))?;
        } else {
            // Never created by this operation (or already gone): drop the row.
            let _ = op
                .local("forget_unclaimed", json!({ "vmid": vmid }), async {
                    Ok::<(), String>(())
                })
                .await;
            journal
                .forget_guest(op.op_id(), vmid)
                .await
                .map_err(|e| error_chain(&e))?;
        }
    }
    Ok(())
}
