//! The start-up side of the protocol: what a crash or stop left `running`, sorted by the
//! replayer its kind names, and the closing of an operation's open step that every
//! replayer does first.

use bosun_errchain::error_chain;
use bosun_pve::{Pve, Upid, Vmid};
use serde_json::{Value, json};

use super::look::find_task;
use super::steps::OpJournal;
use crate::ops::journal::{
    AuditEvent, JournalError, JournalHandle, OpStatus, StepOutcome, StepState, UnfinishedOperation,
};
use crate::ops::operation::{OpKind, Replayer, StepName};

/// The unfinished operations, one list per replayer. Taking it apart by name makes every
/// replayer's list visible where the agent starts, so none is left unread.
#[derive(Debug, Default)]
pub struct Unfinished {
    /// For [`crate::guests::reconcile::replay`].
    pub reconcile: Vec<UnfinishedOperation>,
    /// For [`crate::ops::jobs::runner::JobRunner::resume`].
    pub jobs: Vec<UnfinishedOperation>,
    /// For the backup service's start-up pass.
    pub backups: Vec<UnfinishedOperation>,
    /// For the local API's start-up pass.
    pub local_api: Vec<UnfinishedOperation>,
    /// For the restore tester's start-up pass.
    pub restore_tests: Vec<UnfinishedOperation>,
    /// Operations of a kind no entry names, already closed failed.
    pub unregistered: usize,
}

/// Reads the unfinished operations and sorts them by replayer. An operation whose kind the
/// table does not hold is closed `failed` and audited: nothing here knows how to finish it,
/// and leaving it `running` would hold its guest's place in every start-up for ever.
pub async fn sort(journal: &JournalHandle) -> Result<Unfinished, JournalError> {
    let mut sorted = Unfinished::default();
    for unfinished in journal.unfinished_operations().await? {
        let Some(kind) = unfinished.operation.op_kind() else {
            close_unregistered(journal, &unfinished).await?;
            sorted.unregistered += 1;
            continue;
        };
        let list = match kind.replayer() {
            Replayer::Reconcile => &mut sorted.reconcile,
            Replayer::Job => &mut sorted.jobs,
            Replayer::Backup => &mut sorted.backups,
            Replayer::LocalApi => &mut sorted.local_api,
            Replayer::RestoreTest => &mut sorted.restore_tests,
        };
        list.push(unfinished);
    }
    Ok(sorted)
}

async fn close_unregistered(
    journal: &JournalHandle,
    unfinished: &UnfinishedOperation,
) -> Result<(), JournalError> {
    let operation = &unfinished.operation;
    let kind: String = operation.kind.chars().take(64).collect();
    tracing::error!(op_id = %operation.op_id, kind = %kind, "an unfinished operation of a kind this agent does not know; closed failed, not replayed");
    let mut event = AuditEvent::new("operation.unregistered");
    event.guest_id = operation.guest_id.clone();
    event.vmid = operation.vmid;
    event.detail = json!({ "op_id": operation.op_id.to_string(), "kind": kind });
    journal.append_audit(event).await?;
    journal
        .finish_operation(
            operation.op_id,
            OpStatus::Failed,
            Some(format!("operation kind {kind:?} has no replay entry")),
        )
        .await
}

/// Closes the last step of an interrupted operation, so the step records what happened in
/// Proxmox: a sent task is waited for; an intent whose call starts a task of a known type
/// is looked up in the node's task list (found: followed like a sent one; not found: the
/// call never reached Proxmox); any other intent is recorded failed with its outcome
/// unknown, for the replayer to look at the guest itself. An open step whose name the step
/// table does not hold (a journal written by another version) is reported and recorded
/// failed as such: nothing here knows its call.
pub async fn close_open_step<P: Pve>(pve: &P, op: &OpJournal, unfinished: &UnfinishedOperation) {
    let Some(step) = &unfinished.last_step else {
        return;
    };
    if matches!(step.state, StepState::Ok | StepState::Failed) {
        return;
    }
    let Some(name) = StepName::parse(&step.name) else {
        let stored: String = step.name.chars().take(64).collect();
        tracing::error!(op_id = %op.op_id(), step = %stored, "an open step of a name this agent does not know; recorded failed, not replayed");
        let outcome = StepOutcome::Failed {
            error: format!("interrupted; step {stored:?} has no entry in this agent's step table"),
        };
        let _ = op.record_end(&stored, step.seq, outcome).await;
        return;
    };
    let upid = match step.state {
        StepState::Ok | StepState::Failed => return,
        StepState::Sent => step.upid.as_deref().and_then(|u| Upid::parse(u).ok()),
        StepState::Intent => {
            let vmid = step
                .detail
                .get("vmid")
                .and_then(Value::as_u64)
                .and_then(|v| u32::try_from(v).ok())
                .and_then(|v| Vmid::new(v).ok());
            let (Some(task_type), Some(vmid)) = (name.task_type(), vmid) else {
                let outcome = StepOutcome::Failed {
                    error: "interrupted; the call may or may not have been sent".into(),
                };
                let _ = op.finished(name, step.seq, outcome).await;
                return;
            };
            match find_task(pve, vmid, task_type, step.intent_at).await {
                Ok(Some(upid)) => {
                    tracing::info!(op_id = %op.op_id(), step = %step.name, upid = %upid, "the interrupted call's task was found; following it");
                    let _ = op.sent(name, step.seq, &upid).await;
                    Some(upid)
                }
                Ok(None) => {
                    let outcome = StepOutcome::Failed {
                        error: format!(
                            "interrupted before the call reached proxmox (no {task_type} task on {vmid})"
                        ),
                    };
                    let _ = op.finished(name, step.seq, outcome).await;
                    return;
                }
                Err(e) => {
                    let outcome = StepOutcome::Failed {
                        error: format!(
                            "interrupted; looking for its {task_type} task failed: {}",
                            error_chain(&e)
                        ),
                    };
                    let _ = op.finished(name, step.seq, outcome).await;
                    return;
                }
            }
        }
    };
    let outcome = match upid {
        Some(upid) => match pve.wait_task(name.task_op(), &upid).await {
            Ok(done) => StepOutcome::Ok {
                warnings: done.warnings,
            },
            Err(e) => StepOutcome::Failed {
                error: error_chain(&e),
            },
        },
        None => StepOutcome::Failed {
            error: "interrupted; the call's outcome is unknown".into(),
        },
    };
    let _ = op.finished(name, step.seq, outcome).await;
}

/// Ends an operation whose work is one final Proxmox step: after its open step is closed,
/// it is `done` if `final_step` ended well and `failed` otherwise (interrupted before the
/// final step, or the step failed). Gives the status recorded.
pub async fn close_by_final_step<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    unfinished: &UnfinishedOperation,
    kind: OpKind,
    final_step: StepName,
) -> Result<OpStatus, JournalError> {
    let op = OpJournal::resume(journal, unfinished.operation.op_id, kind);
    close_open_step(pve, &op, unfinished).await;
    let steps = journal.steps(op.op_id()).await?;
    let last = steps.iter().rev().find(|s| s.name == final_step);
    let (status, error) = match last {
        Some(s) if s.state == StepState::Ok => (OpStatus::Done, None),
        Some(s) => (
            OpStatus::Failed,
            Some(format!(
                "{final_step}: {}",
                s.error.as_deref().unwrap_or("interrupted; did not finish")
            )),
        ),
        None => (
            OpStatus::Failed,
            Some(format!("interrupted before {final_step} was sent")),
        ),
    };
    journal
        .finish_operation(op.op_id(), status, error)
        .await
        .map(|()| status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::ops::journal::NewOperation;

    fn new_op(kind: OpKind) -> NewOperation {
        NewOperation {
            kind,
            guest_id: Some("g".into()),
            vmid: Some(100),
            job_id: None,
            request_id: None,
        }
    }

    /// Every kind lands with the replayer the table names; a kind no entry names (written
    /// by another version) is closed failed and audited, never left running.
    #[tokio::test]
    async fn unfinished_operations_go_to_their_replayer_and_unregistered_ones_are_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.sqlite");
        let journal = JournalHandle::open(&path, SystemClock::shared())
            .await
            .unwrap();
        for kind in OpKind::ALL {
            journal.begin_operation(new_op(*kind)).await.unwrap();
        }
        let stranger = journal
            .begin_operation(new_op(OpKind::Provision))
            .await
            .unwrap();
        journal.close().await.unwrap();
        let db = rusqlite::Connection::open(&path).unwrap();
        db.execute(
            "UPDATE operations SET kind = 'restore-test' WHERE op_id = ?1",
            [stranger.to_string()],
        )
        .unwrap();
        drop(db);

        let journal = JournalHandle::open(&path, SystemClock::shared())
            .await
            .unwrap();
        let sorted = sort(&journal).await.unwrap();
        assert_eq!(sorted.unregistered, 1);
        let lists = [
            (Replayer::Reconcile, &sorted.reconcile),
            (Replayer::Job, &sorted.jobs),
            (Replayer::Backup, &sorted.backups),
            (Replayer::LocalApi, &sorted.local_api),
            (Replayer::RestoreTest, &sorted.restore_tests),
        ];
        let mut seen = 0;
        for (replayer, list) in lists {
            for unfinished in list {
                let kind = unfinished.operation.op_kind().unwrap();
                assert_eq!(kind.replayer(), replayer, "{kind} in the wrong list");
                seen += 1;
            }
        }
        assert_eq!(
            seen,
            OpKind::ALL.len(),
            "every kind is handed to a replayer"
        );
        let closed = journal.operation(stranger).await.unwrap().unwrap();
        assert_eq!(closed.status, OpStatus::Failed);
        assert!(closed.error.unwrap().contains("no replay entry"));
        let audit = journal.audit_since(0, 100).await.unwrap();
        assert!(
            audit
                .iter()
                .any(|e| e.event.event == "operation.unregistered"),
            "{audit:?}"
        );
        // Closed once: the next start finds it no more.
        let again = sort(&journal).await.unwrap();
        assert_eq!(again.unregistered, 0);
    }
}
