//! The operation-journal tail the hub is sent, so `bosunctl explain` works through the hub.
//!
//! Each poll carries the newest [`MAX_PER_POLL`] operations of the journal that changed since
//! the hub last answered (a new step, a new status); after a failed poll, and whenever the poll
//! carries a full report, the whole tail goes again. Records are cut to the wire bounds
//! ([`bosun_proto::oplog`]): the newest [`MAX_STEPS`] steps, texts of at most `MAX_TEXT_BYTES`,
//! a step detail larger than [`MAX_DETAIL_BYTES`] replaced by its size. Step details hold
//! facts about Proxmox calls, never a secret (the journal's rule).

use std::collections::HashMap;
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
    /// Records the hub acknowledged, by id, with a digest of what was sent.
    acked: HashMap<Uuid, u64>,
    /// Records the last poll carried, until it is answered.
    sent: Vec<(Uuid, u64)>,
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
        let tail = match journal.recent_operations(limit).await {
            Ok(tail) => tail,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "operation journal unreadable; poll sent without its tail");
                self.sent.clear();
                return Vec::new();
            }
        };
        if full {
            self.acked.clear();
        }
        let records: Vec<(OperationRecord, u64)> = tail
            .iter()
            .rev()
            .map(|(op, steps)| {
                let record = record(op, steps);
                let digest = digest(&record);
                (record, digest)
            })
            .collect();
        // Only what is still in the tail needs remembering.
        self.acked
            .retain(|id, _| records.iter().any(|(r, _)| r.op_id == *id));
        let changed: Vec<(OperationRecord, u64)> = records
            .into_iter()
            .filter(|(r, digest)| self.acked.get(&r.op_id) != Some(digest))
            .collect();
        self.sent = changed.iter().map(|(r, d)| (r.op_id, *d)).collect();
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
}
