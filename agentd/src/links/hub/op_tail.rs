//! The operation-journal tail the hub is sent, so `bosunctl explain` works through the hub.
//!
//! Each poll carries the newest [`MAX_PER_POLL`] operations of the journal that changed since
//! the hub last answered (a new step, a new status); after a failed poll, and whenever the poll
//! carries a full report, the whole tail goes again. Records are cut to the wire bounds
//! ([`bosun_proto::oplog`]): the newest [`MAX_STEPS`] steps, texts of at most `MAX_TEXT_BYTES`,
//! a step detail larger than [`MAX_DETAIL_BYTES`] replaced by its size. Step details hold
//! facts about Proxmox calls, never a secret (the journal's rule).

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash as _, Hasher as _};

use bosun_errchain::error_chain;
use bosun_proto::oplog::{
    MAX_DETAIL_BYTES, MAX_PER_POLL, MAX_STEPS, OperationRecord, OperationStep, clip, detail_len,
};
use uuid::Uuid;

use crate::ops::journal::{JournalHandle, Operation, Step};

/// What the hub holds of the tail, as far as the agent knows.
#[derive(Debug, Default)]
pub struct OpTail {
    /// Records the hub acknowledged, by id, as they were sent.
    acked: HashMap<Uuid, Sent>,
    /// Records the last poll carried, until it is answered.
    sent: Vec<(Uuid, Sent)>,
}

/// A record as a poll carried it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sent {
    /// A digest of the record.
    digest: u64,
    /// Whether its operation had ended: then the record can never change, and its steps are
    /// not read again while the hub holds it.
    ended: bool,
}

impl OpTail {
    /// A tail the hub holds nothing of yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The records the next poll carries: the tail's records the hub has not acknowledged as
    /// they are now (every one of them when `full`).
    pub async fn pending(&mut self, journal: &JournalHandle, full: bool) -> Vec<OperationRecord> {
        let limit = u32::try_from(MAX_PER_POLL).unwrap_or(u32::MAX);
        if full {
            self.acked.clear();
        }
        let ended_known: HashSet<Uuid> = self
            .acked
            .iter()
            .filter(|(_, sent)| sent.ended)
            .map(|(id, _)| *id)
            .collect();
        let tail = match journal.recent_operations_but(limit, ended_known).await {
            Ok(tail) => tail,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "operation journal unreadable; poll sent without its tail");
                self.sent.clear();
                return Vec::new();
            }
        };
        // Only what is still in the tail needs remembering.
        let in_tail: HashSet<Uuid> = tail.iter().map(|(op, _)| op.op_id.as_uuid()).collect();
        self.acked.retain(|id, _| in_tail.contains(id));
        // An ended operation the hub holds comes without its steps: it is unchanged.
        let changed: Vec<(OperationRecord, Sent)> = tail
            .iter()
            .rev()
            .filter_map(|(op, steps)| {
                let record = record(op, steps.as_deref()?);
                let sent = Sent {
                    digest: digest(&record),
                    ended: op.status.is_terminal(),
                };
                (self.acked.get(&record.op_id) != Some(&sent)).then_some((record, sent))
            })
            .collect();
        self.sent = changed.iter().map(|(r, sent)| (r.op_id, *sent)).collect();
        changed.into_iter().map(|(r, _)| r).collect()
    }

    /// The hub answered the poll that carried the last records.
    pub fn answered(&mut self) {
        self.acked.extend(self.sent.drain(..));
    }

    /// The last poll failed or was abandoned: what it carried may not have arrived.
    pub fn unanswered(&mut self) {
        self.sent.clear();
    }
}

fn digest(record: &OperationRecord) -> u64 {
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(record)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

/// A journal operation as the wire carries it, cut to the wire's bounds.
pub fn record(op: &Operation, steps: &[Step]) -> OperationRecord {
    let omitted = steps.len().saturating_sub(MAX_STEPS);
    OperationRecord {
        op_id: op.op_id.as_uuid(),
        kind: op.kind.clone(),
        guest_id: op.guest_id.as_deref().map(short),
        vmid: op.vmid,
        job_id: op.job_id.as_deref().map(short),
        request_id: op.request_id.as_deref().map(short),
        correlation_id: op
            .correlation_id
            .clone()
            .filter(|id| bosun_proto::oplog::check_correlation_id("correlation_id", id).is_ok()),
        status: op.status.as_str().to_owned(),
        error: op.error.as_deref().map(clip),
        started_at: op.started_at,
        ended_at: op.ended_at,
        steps: steps[omitted..]
            .iter()
            .map(|s| OperationStep {
                seq: s.seq,
                name: s.name.chars().take(64).collect(),
                state: s.state.as_str().to_owned(),
                detail: match detail_len(&s.detail) {
                    len if len > MAX_DETAIL_BYTES => serde_json::json!({ "truncated": len }),
                    _ => s.detail.clone(),
                },
                upid: s.upid.as_deref().map(clip),
                warnings: s.warnings,
                error: s.error.as_deref().map(clip),
                intent_at: s.intent_at,
                ended_at: s.ended_at,
            })
            .collect(),
        steps_omitted: u32::try_from(omitted).unwrap_or(u32::MAX),
    }
}

/// An id field cut to the wire's bound for ids.
fn short(text: &str) -> String {
    text.chars()
        .take(bosun_proto::oplog::MAX_CORRELATION_ID)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::journal::{OpId, OpStatus, StepState};
    use bosun_proto::oplog::MAX_TEXT_BYTES;
    use jiff::Timestamp;

    fn op() -> Operation {
        Operation {
            op_id: OpId::new(),
            kind: "provision".into(),
            guest_id: Some(Uuid::nil().to_string()),
            vmid: Some(100),
            job_id: None,
            request_id: Some("r".into()),
            correlation_id: Some("bad id with spaces".into()),
            status: OpStatus::Failed,
            error: Some("x".repeat(MAX_TEXT_BYTES * 3)),
            started_at: Timestamp::UNIX_EPOCH,
            ended_at: None,
        }
    }

    fn step(seq: u32, detail: serde_json::Value) -> Step {
        Step {
            op_id: OpId::new(),
            seq,
            name: "restore".into(),
            detail,
            state: StepState::Ok,
            upid: None,
            warnings: None,
            error: None,
            intent_at: Timestamp::UNIX_EPOCH,
            sent_at: None,
            ended_at: None,
        }
    }

    #[test]
    fn a_record_is_cut_to_the_wire_bounds_and_validates() {
        let steps: Vec<Step> = (1..=u32::try_from(MAX_STEPS).unwrap() + 5)
            .map(|seq| step(seq, serde_json::json!({ "seq": seq })))
            .chain([step(
                999,
                serde_json::json!({ "blob": "y".repeat(MAX_DETAIL_BYTES * 2) }),
            )])
            .collect();
        let record = record(&op(), &steps);
        record.validate().unwrap();
        assert_eq!(record.steps.len(), MAX_STEPS);
        assert_eq!(record.steps_omitted, 6);
        assert_eq!(record.steps.last().unwrap().seq, 999);
        assert!(
            record
                .steps
                .last()
                .unwrap()
                .detail
                .get("truncated")
                .is_some()
        );
        assert!(record.error.as_ref().unwrap().len() <= MAX_TEXT_BYTES);
        // An id the wire would refuse is left out rather than failing the poll.
        assert_eq!(record.correlation_id, None);
    }

    /// The op ids of `records`, in order.
    fn ids(records: &[OperationRecord]) -> Vec<Uuid> {
        records.iter().map(|r| r.op_id).collect()
    }

    #[tokio::test]
    async fn only_what_the_hub_does_not_hold_goes_again_and_ended_operations_are_not_read_again() {
        use crate::ops::journal::{NewOperation, StepOutcome};
        use crate::ops::op_kind::OpKind;
        let dir = tempfile::tempdir().unwrap();
        let journal = JournalHandle::open(
            &dir.path().join("journal.sqlite"),
            crate::clock::SystemClock::shared(),
        )
        .await
        .unwrap();
        let new = || NewOperation {
            kind: OpKind::Provision,
            guest_id: Some("g-1".into()),
            vmid: Some(101),
            job_id: None,
            request_id: None,
        };
        let ended = journal.begin_operation(new()).await.unwrap();
        let seq = journal
            .step_intent(ended, "restore", serde_json::json!({}))
            .await
            .unwrap();
        journal
            .step_finished(ended, seq, StepOutcome::Ok { warnings: 0 })
            .await
            .unwrap();
        journal
            .finish_operation(ended, OpStatus::Done, None)
            .await
            .unwrap();
        let running = journal.begin_operation(new()).await.unwrap();
        let seq = journal
            .step_intent(running, "start", serde_json::json!({}))
            .await
            .unwrap();

        let mut tail = OpTail::new();
        let both = vec![ended.as_uuid(), running.as_uuid()];
        assert_eq!(ids(&tail.pending(&journal, false).await), both);
        // Unanswered: the same records go again.
        tail.unanswered();
        assert_eq!(ids(&tail.pending(&journal, false).await), both);
        tail.answered();
        assert!(tail.pending(&journal, false).await.is_empty());
        tail.answered();

        // The journal skips the steps of the ended operation the hub holds, not the running
        // one's, and not an ended one the caller does not name.
        let known: HashSet<Uuid> = tail.acked.keys().copied().collect();
        let read = journal.recent_operations_but(32, known).await.unwrap();
        let skipped: Vec<(Uuid, bool)> = read
            .iter()
            .map(|(op, steps)| (op.op_id.as_uuid(), steps.is_none()))
            .collect();
        assert_eq!(
            skipped,
            vec![(running.as_uuid(), false), (ended.as_uuid(), true)]
        );
        let read = journal
            .recent_operations_but(32, HashSet::new())
            .await
            .unwrap();
        assert!(read.iter().all(|(_, steps)| steps.is_some()));

        // A new step of the running operation sends it, and only it, again.
        journal
            .step_finished(running, seq, StepOutcome::Ok { warnings: 0 })
            .await
            .unwrap();
        let changed = tail.pending(&journal, false).await;
        assert_eq!(ids(&changed), vec![running.as_uuid()]);
        assert_eq!(changed[0].steps[0].state, "ok");
        tail.answered();
        // Once it ends, one more time; then nothing.
        journal
            .finish_operation(running, OpStatus::Done, None)
            .await
            .unwrap();
        assert_eq!(
            ids(&tail.pending(&journal, false).await),
            vec![running.as_uuid()]
        );
        tail.answered();
        assert!(tail.pending(&journal, false).await.is_empty());
        // A full report sends the whole tail, steps and all.
        let full = tail.pending(&journal, true).await;
        assert_eq!(ids(&full), both);
        assert!(full.iter().all(|r| r.steps.len() == 1));
    }
}
