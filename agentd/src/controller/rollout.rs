//! One controller rollout, a journaled operation of kind `controller_update_job` run by the job
//! runner in the guest's queue slot after its `accepted` step:
//!
//! | step | what | on a crash (resumed from the journal's steps) |
//! |---|---|---|
//! | `snapshot` | snapshot the guest (`bosun-ctl-…`), task looked up if its answer was lost | a snapshot that did not end well is taken again |
//! | `announce` | journal and serve the new digest (`rolling_out`) | repeated (idempotent) |
//! | `await_health` | wait for the controller's healthy report of that digest | an interrupted wait waits again |
//! | `commit` | journal it `running` | repeated |
//! | `revert` | on an unhealthy report or silence: serve the previous digest again (`rolled_back`) | repeated |
//! | `rollback` | gate (own snapshot), then roll the guest back to the snapshot and start it | a rollback that did not end well is sent again |
//!
//! The job succeeds when the digest is committed and fails when the guest was rolled back.

use std::sync::Arc;

use bosun_proto::error_chain;
use serde_json::{Value, json};

use super::board::{Announced, ControllerBoard};
use super::{COMMITTED_ACTION, ControllerSettings, ROLLED_BACK_ACTION};
use crate::gate::{self, Action, Authority, GateRequest, JobAuthority, Provenance, Target};
use crate::journal::{AuditEvent, JournalHandle, Step, StepState};
use crate::operation::{OpJournal, StepError};
use crate::pve::{GuestOps, Op, SnapName, Vmid};

/// Prefix of the snapshots a rollout takes.
pub const ROLLOUT_SNAPSHOT_PREFIX: &str = "bosun-ctl-";

/// What a rollout needs besides its operation.
#[derive(Debug, Clone)]
pub struct RolloutContext {
    /// Proxmox, scoped per call to the guest's vmid.
    pub ops: Arc<dyn GuestOps>,
    /// The journal.
    pub journal: JournalHandle,
    /// What controllers are told and what they report.
    pub board: ControllerBoard,
    /// Timings.
    pub settings: ControllerSettings,
}

/// What a signed `controller-update` job asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    /// The guest.
    pub guest_id: String,
    /// Its vmid.
    pub vmid: u32,
    /// The signed digest.
    pub digest: String,
}

/// Where an operation stands, from its journaled steps (none but `accepted` on a fresh run).
#[derive(Debug, Default, PartialEq, Eq)]
struct Progress {
    snapshot: Option<String>,
    announced: bool,
    /// `Some(Ok)`: healthy; `Some(Err)`: the reason it was not; `None`: not judged yet (or
    /// the wait was interrupted by a crash, which is no verdict on the controller).
    health: Option<Result<(), String>>,
    committed: bool,
    reverted: bool,
    rolled_back: bool,
}

impl Progress {
    fn of(steps: &[Step]) -> Self {
        let mut progress = Self::default();
        for step in steps {
            let ok = step.state == StepState::Ok;
            match step.name.as_str() {
                "snapshot" if ok => {
                    progress.snapshot = step
                        .detail
                        .get("snapshot")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                }
                "announce" if ok => progress.announced = true,
                "await_health" if ok => progress.health = Some(Ok(())),
                "await_health" if step.state == StepState::Failed => {
                    let error = step.error.clone().unwrap_or_default();
                    if !error.starts_with("interrupted") {
                        progress.health = Some(Err(error));
                    }
                }
                "commit" if ok => progress.committed = true,
                "revert" if ok => progress.reverted = true,
                "rollback" if ok => progress.rolled_back = true,
                _ => {}
            }
        }
        progress
    }
}

fn step_text(e: StepError) -> String {
    error_chain(&e)
}

/// Carries the rollout on from where the journal shows it stands; `Ok` with the job's output
/// once committed, `Err` with the reason otherwise (`rolled_back: …` after a rollback).
pub async fn run(
    ctx: &RolloutContext,
    op: &OpJournal,
    rollout: &Rollout,
    authority: &JobAuthority,
) -> Result<Value, String> {
    let vmid = Vmid::new(rollout.vmid).map_err(|e| e.to_string())?;
    let journal = &ctx.journal;
    // Reports from here on count: a fast controller may answer before the wait begins.
    let after = ctx.board.seq();
    let steps = journal
        .steps(op.op_id())
        .await
        .map_err(|e| error_chain(&e))?;
    let mut progress = Progress::of(&steps);

    let snapshot = match progress.snapshot.clone() {
        Some(name) => name,
        None => take_snapshot(ctx, op, rollout, vmid, authority).await?,
    };
    if !progress.announced {
        let previous = ctx
            .board
            .announced(&rollout.guest_id)
            .and_then(|a| a.digest);
        op.local(
            "announce",
            json!({ "vmid": rollout.vmid, "digest": rollout.digest, "previous": previous }),
            async {
                journal
                    .controller_announce(
                        rollout.guest_id.clone(),
                        rollout.vmid,
                        rollout.digest.clone(),
                        op.op_id(),
                    )
                    .await
                    .map_err(|e| error_chain(&e))?;
                mirror(ctx, rollout).await;
                Ok(())
            },
        )
        .await
        .map_err(step_text)?;
        tracing::info!(guest_id = %rollout.guest_id, vmid = rollout.vmid, digest = %rollout.digest, "controller digest announced");
    } else {
        mirror(ctx, rollout).await;
    }
    if progress.health.is_none() && !progress.reverted {
        let window = ctx.settings.health_window;
        let waited = op
            .local(
                "await_health",
                json!({ "vmid": rollout.vmid, "digest": rollout.digest, "window_ms": window.as_millis() }),
                async {
                    ctx.board
                        .wait_healthy(&rollout.guest_id, &rollout.digest, after, window)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                },
            )
            .await;
        progress.health = Some(match waited {
            Ok(()) => Ok(()),
            Err(StepError::Other { reason, .. }) => Err(reason),
            Err(e) => return Err(step_text(e)),
        });
    }
    match progress.health.clone() {
        Some(Ok(())) if !progress.reverted => {
            if !progress.committed {
                commit(ctx, op, rollout).await?;
            }
            Ok(
                json!({ "vmid": rollout.vmid, "digest": rollout.digest, "snapshot": snapshot, "state": "running" }),
            )
        }
        health => {
            let reason = match health {
                Some(Err(reason)) => reason,
                _ => "reverted before it was committed".to_owned(),
            };
            roll_back(ctx, op, rollout, vmid, &snapshot, &reason, &progress).await
        }
    }
}

/// Serves what the journal now holds for the guest.
async fn mirror(ctx: &RolloutContext, rollout: &Rollout) {
    match ctx.journal.controllers().await {
        Ok(records) => {
            if let Some(record) = records.iter().find(|r| r.guest_id == rollout.guest_id) {
                ctx.board.announce(
                    &record.guest_id,
                    record.vmid,
                    Announced {
                        digest: record.digest.clone(),
                        state: record.state,
                        op_id: record.op_id,
                    },
                );
            }
        }
        Err(e) => {
            tracing::error!(guest_id = %rollout.guest_id, error = %error_chain(&e), "could not read the controller record back");
        }
    }
}

async fn take_snapshot(
    ctx: &RolloutContext,
    op: &OpJournal,
    rollout: &Rollout,
    vmid: Vmid,
    authority: &JobAuthority,
) -> Result<String, String> {
    ask_gate(
        &ctx.journal,
        GateRequest {
            action: Action::Snapshot,
            target: Target::Guest { vmid: rollout.vmid },
            authority: Authority::SignedJob(authority.clone()),
            provenance: Provenance::unknown(),
        },
    )
    .await?;
    let ops = ctx.ops.as_ref();
    let existing: Vec<String> = ops
        .list_snapshots(vmid)
        .await
        .map_err(|e| error_chain(&e))?
        .into_iter()
        .map(|s| s.name)
        .collect();
    // Named by the wall clock, as Proxmox stamps its tasks.
    let name = snapshot_name(jiff::Timestamp::now(), &existing)?;
    let description = format!("before controller {}", rollout.digest);
    let detail = json!({ "vmid": rollout.vmid, "snapshot": name.as_str() });
    op.task_looked(
        "snapshot",
        detail,
        ops.create_snapshot(vmid, &name, Some(&description)),
        |asked_at| ops.find_task(vmid, "vzsnapshot", asked_at),
        |upid| async move { ops.wait_task(Op::CreateSnapshot, &upid).await },
    )
    .await
    .map_err(|e| {
        format!(
            "snapshot failed, nothing changed in the guest: {}",
            step_text(e)
        )
    })?;
    Ok(name.to_string())
}

/// `bosun-ctl-YYYYMMDD-HHMMSS`, with `-N` appended while the name is taken.
fn snapshot_name(now: jiff::Timestamp, taken: &[String]) -> Result<SnapName, String> {
    let base = format!("{ROLLOUT_SNAPSHOT_PREFIX}{}", now.strftime("%Y%m%d-%H%M%S"));
    let mut name = base.clone();
    let mut n = 2u32;
    while taken.contains(&name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    SnapName::new(name).map_err(|e| format!("cannot name the snapshot: {e}"))
}

async fn commit(ctx: &RolloutContext, op: &OpJournal, rollout: &Rollout) -> Result<(), String> {
    let journal = &ctx.journal;
    op.local(
        "commit",
        json!({ "vmid": rollout.vmid, "digest": rollout.digest }),
        async {
            journal
                .controller_commit(rollout.guest_id.clone(), rollout.digest.clone())
                .await
                .map_err(|e| error_chain(&e))
        },
    )
    .await
    .map_err(step_text)?;
    mirror(ctx, rollout).await;
    let mut event = AuditEvent::new(COMMITTED_ACTION);
    event.op_id = Some(op.op_id());
    event.guest_id = Some(rollout.guest_id.clone());
    event.vmid = Some(rollout.vmid);
    event.detail =
        json!({ "guest_id": rollout.guest_id, "vmid": rollout.vmid, "digest": rollout.digest });
    let _ = journal.append_audit(event).await;
    tracing::info!(guest_id = %rollout.guest_id, vmid = rollout.vmid, digest = %rollout.digest, "controller rollout committed");
    Ok(())
}

async fn ask_gate(journal: &JournalHandle, request: GateRequest) -> Result<(), String> {
    let decision = gate::decide(&request);
    let _ = journal.append_audit(decision.audit_event(&request)).await;
    if decision.is_allowed() {
        Ok(())
    } else {
        Err(format!(
            "gate denied {:?}: {}",
            request.action,
            decision.reason()
        ))
    }
}

async fn roll_back(
    ctx: &RolloutContext,
    op: &OpJournal,
    rollout: &Rollout,
    vmid: Vmid,
    snapshot: &str,
    reason: &str,
    progress: &Progress,
) -> Result<Value, String> {
    let journal = &ctx.journal;
    if !progress.reverted {
        op.local(
            "revert",
            json!({ "vmid": rollout.vmid, "digest": rollout.digest, "reason": reason }),
            async {
                journal
                    .controller_revert(rollout.guest_id.clone())
                    .await
                    .map_err(|e| error_chain(&e))
            },
        )
        .await
        .map_err(step_text)?;
    }
    mirror(ctx, rollout).await;
    let rolled_back = if progress.rolled_back {
        Ok(())
    } else {
        rollback_to(ctx, op, rollout, vmid, snapshot).await
    };
    let mut event = AuditEvent::new(ROLLED_BACK_ACTION);
    event.op_id = Some(op.op_id());
    event.guest_id = Some(rollout.guest_id.clone());
    event.vmid = Some(rollout.vmid);
    event.detail = json!({
        "guest_id": rollout.guest_id,
        "vmid": rollout.vmid,
        "digest": rollout.digest,
        "snapshot": snapshot,
        "reason": reason,
        "rolled_back": rolled_back.is_ok(),
        "error": rolled_back.as_ref().err(),
    });
    let _ = journal.append_audit(event).await;
    match rolled_back {
        Ok(()) => {
            tracing::warn!(guest_id = %rollout.guest_id, vmid = rollout.vmid, digest = %rollout.digest, snapshot, reason, "controller rollout rolled back");
            Err(format!(
                "rolled_back: {reason}; guest {} is back on snapshot {snapshot}",
                rollout.vmid
            ))
        }
        Err(e) => {
            tracing::error!(guest_id = %rollout.guest_id, vmid = rollout.vmid, snapshot, error = %e, "rolling the guest back after a failed controller rollout failed");
            Err(format!(
                "rollback_failed: {reason}; rolling back to {snapshot}: {e}"
            ))
        }
    }
}

async fn rollback_to(
    ctx: &RolloutContext,
    op: &OpJournal,
    rollout: &Rollout,
    vmid: Vmid,
    snapshot: &str,
) -> Result<(), String> {
    let journal = &ctx.journal;
    let own = journal
        .own_snapshot(op.op_id(), rollout.vmid, snapshot.to_owned())
        .await
        .map_err(|e| error_chain(&e))?
        .ok_or_else(|| {
            format!("the journal shows no snapshot {snapshot} taken by this operation")
        })?;
    ask_gate(
        journal,
        GateRequest {
            action: Action::RollbackToSnapshot,
            target: Target::Guest { vmid: rollout.vmid },
            authority: Authority::OwnSnapshotRollback {
                op_id: op.op_id(),
                snapshot: own,
            },
            provenance: Provenance::unknown(),
        },
    )
    .await?;
    let name = SnapName::new(snapshot.to_owned()).map_err(|e| e.to_string())?;
    let ops = ctx.ops.as_ref();
    // The rolled-back filesystem holds the bootstrap of the snapshot's time: a token minted
    // since then is revoked, so the reconciler issues a fresh one (as for any rollback).
    let taken_at = ops
        .list_snapshots(vmid)
        .await
        .ok()
        .and_then(|all| all.into_iter().find(|s| s.name == snapshot))
        .and_then(|s| s.snaptime);
    op.local(
        "check_bootstrap",
        json!({ "vmid": rollout.vmid, "snapshot_time": taken_at }),
        async {
            crate::credentials::stale::revoke_if_minted_after(
                journal,
                &rollout.guest_id,
                rollout.vmid,
                taken_at,
                "controller rollback",
            )
            .await
            .map(|_| ())
            .map_err(|e| error_chain(&e))
        },
    )
    .await
    .map_err(step_text)?;
    op.task_looked(
        "rollback",
        json!({ "vmid": rollout.vmid, "snapshot": snapshot }),
        ops.rollback(vmid, &name),
        |asked_at| ops.find_task(vmid, "vzrollback", asked_at),
        |upid| async move { ops.wait_task(Op::RollbackSnapshot, &upid).await },
    )
    .await
    .map(|_| ())
    .map_err(step_text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::OpId;

    fn step(name: &str, state: StepState, error: Option<&str>, detail: Value) -> Step {
        Step {
            op_id: OpId::new(),
            seq: 1,
            name: name.into(),
            detail,
            state,
            upid: None,
            warnings: None,
            error: error.map(str::to_owned),
            intent_at: jiff::Timestamp::now(),
            sent_at: None,
            ended_at: None,
        }
    }

    #[test]
    fn progress_reads_what_the_steps_settled() {
        let snap = step(
            "snapshot",
            StepState::Ok,
            None,
            json!({ "vmid": 101, "snapshot": "bosun-ctl-1" }),
        );
        let announce = step("announce", StepState::Ok, None, Value::Null);
        assert_eq!(Progress::of(&[]), Progress::default());
        let p = Progress::of(&[snap.clone(), announce.clone()]);
        assert_eq!(p.snapshot.as_deref(), Some("bosun-ctl-1"));
        assert!(p.announced && p.health.is_none());
        // A crash during the wait is no verdict: the wait is repeated.
        let interrupted = step(
            "await_health",
            StepState::Failed,
            Some("interrupted; the call may or may not have been sent"),
            Value::Null,
        );
        assert_eq!(
            Progress::of(&[snap.clone(), announce.clone(), interrupted]).health,
            None
        );
        let silent = step(
            "await_health",
            StepState::Failed,
            Some("no healthy report"),
            Value::Null,
        );
        assert_eq!(
            Progress::of(&[snap.clone(), announce.clone(), silent.clone()]).health,
            Some(Err("no healthy report".into()))
        );
        // A snapshot whose task failed is no snapshot to roll back to.
        let failed_snap = step(
            "snapshot",
            StepState::Failed,
            Some("x"),
            json!({ "snapshot": "s" }),
        );
        assert_eq!(Progress::of(&[failed_snap]).snapshot, None);
        let rolled = step("rollback", StepState::Ok, None, Value::Null);
        let revert = step("revert", StepState::Ok, None, Value::Null);
        let p = Progress::of(&[snap, announce, silent, revert, rolled]);
        assert!(p.reverted && p.rolled_back && !p.committed);
    }

    #[test]
    fn snapshot_names_are_valid_and_unique() {
        let now: jiff::Timestamp = "2026-03-14T12:34:56Z".parse().unwrap();
        let first = snapshot_name(now, &[]).unwrap();
        assert_eq!(first.as_str(), "bosun-ctl-20260314-123456");
        let second = snapshot_name(now, &[first.to_string()]).unwrap();
        assert_eq!(second.as_str(), "bosun-ctl-20260314-123456-2");
    }
}
