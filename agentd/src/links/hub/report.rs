//! Change-only reports (the heartbeat rules): which report body a poll carries.
//!
//! Every report is numbered (`seq`, starting at the agent's start time in Unix
//! milliseconds, so numbers keep increasing across restarts). The agent keeps the
//! report the hub acknowledged (the hub answered with `report_seq` equal to the
//! number sent) and sends only what changed since then. It sends a full report:
//! - after it starts (nothing acknowledged yet),
//! - after a failed poll (it cannot know what the hub applied; this is also the full
//!   report after a reconnect),
//! - when the hub asks (`full_report: true`, e.g. it lost or restored its state, or
//!   the delta's base was not the report it holds),
//! - when the hub does not number reports (an older hub answers without
//!   `report_seq`).

use bosun_errchain::error_chain;
use bosun_proto::delta::ReportDelta;
use bosun_proto::report::{BackupReport, RestoreTestReport, StateReport};
use uuid::Uuid;

use crate::ops::journal::JournalHandle;

/// What a poll carries: exactly one of the two.
#[derive(Debug, Clone, PartialEq)]
pub enum ReportBody {
    /// The whole report.
    Full(StateReport),
    /// What changed since the acknowledged report.
    Delta(ReportDelta),
}

impl ReportBody {
    /// The body's sequence number.
    pub fn seq(&self) -> u64 {
        match self {
            Self::Full(r) => r.seq,
            Self::Delta(d) => d.seq,
        }
    }

    /// Whether this is a full report.
    pub fn is_full(&self) -> bool {
        matches!(self, Self::Full(_))
    }
}

/// The agent's side of the report sequence.
#[derive(Debug)]
pub struct Reporter {
    next_seq: u64,
    /// The report the hub holds, as far as the agent knows (audit entries left out).
    acked: Option<StateReport>,
    /// The report the last poll would make the hub hold, until answered, and
    /// whether it went out whole.
    sent: Option<(StateReport, bool)>,
}

impl Reporter {
    /// A reporter numbering from `first_seq` (use the start time in Unix ms).
    pub fn new(first_seq: u64) -> Self {
        Self {
            next_seq: first_seq.max(1),
            acked: None,
            sent: None,
        }
    }

    /// The body for the next poll, given what the agent observes now.
    pub fn body(&mut self, mut current: StateReport) -> ReportBody {
        let seq = self.next_seq;
        self.next_seq += 1;
        current.seq = seq;
        let mut state = current.clone();
        state.audit.clear();
        let body = match &self.acked {
            // The host's keys travel in full reports only: a new one (K recovered from the
            // escrow) goes out in full at once.
            Some(base)
                if base.storage_recipient == current.storage_recipient
                    && base.pbs_key_fingerprint == current.pbs_key_fingerprint =>
            {
                ReportBody::Delta(ReportDelta::between(base, base.seq, &current, seq))
            }
            _ => ReportBody::Full(current),
        };
        self.sent = Some((state, body.is_full()));
        body
    }

    /// The hub answered the last poll. Returns whether a full report should go
    /// out at once: the hub asked after a delta. (A full report answered with
    /// `full_report` — another poll of this host overtook it — is not repeated at
    /// once; the next regular poll sends one, so two pollers cannot spin.)
    pub fn answered(&mut self, report_seq: Option<u64>, full_report: bool) -> bool {
        match self.sent.take() {
            Some((state, _)) if !full_report && report_seq == Some(state.seq) => {
                self.acked = Some(state);
                false
            }
            Some((_, was_full)) => {
                self.acked = None;
                full_report && !was_full
            }
            None => {
                self.acked = None;
                false
            }
        }
    }

    /// The last poll was abandoned after it was sent (something to report at once).
    /// Whether the hub recorded it is unknown, so the next delta still builds on the
    /// last acknowledged report: the hub keeps the report before its latest one and
    /// merges into whichever of the two the delta names.
    pub fn abandoned(&mut self) {
        self.sent = None;
    }

    /// The last poll failed: the next report is full.
    pub fn failed(&mut self) {
        self.sent = None;
        self.acked = None;
    }
}

/// The newest finished backup per (guest, storage), from the journal (the source of
/// truth, so a restarted agent reports them again), each with the newest good one to the
/// same storage. Backups of guests without a hub id are left out.
pub async fn last_backups(journal: &JournalHandle) -> Vec<BackupReport> {
    match journal.last_backups().await {
        Ok(rows) => rows
            .into_iter()
            .filter_map(|b| match Uuid::parse_str(&b.guest_id) {
                Ok(guest_id) => Some(BackupReport {
                    guest_id,
                    // A tier's run is reported under its manifest target.
                    target: b.target.clone().unwrap_or_else(|| b.storage.clone()),
                    finished_at: b.finished_at,
                    ok: b.ok,
                    size_bytes: b.size_bytes,
                    tier: b.tier,
                    archive: b.archive.clone(),
                    duration_seconds: b.started_at.and_then(|start| {
                        u64::try_from(b.finished_at.duration_since(start).as_secs()).ok()
                    }),
                    warnings: b.warnings,
                    encrypted: b.encrypted,
                    error: b.error.clone(),
                    last_ok_at: b.last_ok_at,
                }),
                Err(_) => {
                    tracing::debug!(guest_id = %b.guest_id, op_id = %b.op_id, "backup of a guest without a hub id; not reported");
                    None
                }
            })
            .collect(),
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "last backups unreadable; report sent without them");
            Vec::new()
        }
    }
}

/// The newest restore test per (guest, tier storage), from the journal.
pub async fn restore_tests(journal: &JournalHandle) -> Vec<RestoreTestReport> {
    use crate::ops::journal::TestOutcome;
    use bosun_proto::report::RestoreTestOutcome;
    match journal.last_restore_tests().await {
        Ok(rows) => rows
            .into_iter()
            .filter_map(|t| {
                let guest_id = Uuid::parse_str(&t.result.guest_id).ok()?;
                let outcome = match t.result.outcome {
                    TestOutcome::Passed => RestoreTestOutcome::Passed,
                    TestOutcome::Failed => RestoreTestOutcome::Failed,
                    TestOutcome::Interrupted => RestoreTestOutcome::Interrupted,
                    TestOutcome::NotChecked => RestoreTestOutcome::NotChecked,
                };
                Some(RestoreTestReport {
                    guest_id,
                    finished_at: t.finished_at,
                    passed: t.result.outcome == TestOutcome::Passed,
                    duration_seconds: t.result.duration_ms / 1000,
                    detail: t.result.detail.clone().unwrap_or_default(),
                    outcome: Some(outcome),
                    tier: Some(t.result.storage.clone()),
                    archive: t.result.archive.clone(),
                    last_passed_at: t.last_passed_at,
                })
            })
            .collect(),
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "restore tests unreadable; report sent without them");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use bosun_proto::report::{GuestReport, GuestStatus, HostMetrics, Versions};

    use super::*;

    fn observed(guests: &[(u32, GuestStatus)]) -> StateReport {
        StateReport {
            schema: bosun_proto::report::SCHEMA.to_owned(),
            seq: 0,
            host: Some(HostMetrics::default()),
            guests: guests
                .iter()
                .map(|(vmid, status)| GuestReport {
                    guest_id: None,
                    vmid: *vmid,
                    kind: bosun_proto::desired::GuestKind::Lxc,
                    hostname: String::new(),
                    status: *status,
                    resources: None,
                    controller_digest: None,
                    controller_expected: None,
                    addresses: Vec::new(),
                })
                .collect(),
            storage: Vec::new(),
            last_backups: Vec::new(),
            last_restore_test: None,
            tunnel: None,
            versions: Versions {
                agent: "0.1.0".into(),
                ..Versions::default()
            },
            audit: Vec::new(),
            storage_recipient: None,
            pbs_key_fingerprint: None,
            tiers: Vec::new(),
            bulk_volumes: Vec::new(),
            restore_tests: Vec::new(),
            verifications: Vec::new(),
            host_health: None,
            data_plan: None,
            refused: Vec::new(),
            golden: None,
        }
    }

    #[test]
    fn full_first_then_deltas_against_the_acknowledged_report() {
        let mut r = Reporter::new(1000);
        let first = r.body(observed(&[(100, GuestStatus::Running)]));
        assert!(first.is_full());
        assert_eq!(first.seq(), 1000);
        assert!(!r.answered(Some(1000), false));
        let ReportBody::Delta(d) = r.body(observed(&[(100, GuestStatus::Broken)])) else {
            panic!("expected a delta");
        };
        assert_eq!((d.base_seq, d.seq), (1000, 1001));
        assert_eq!(d.guests[0].status, GuestStatus::Broken);
        r.answered(Some(1001), false);
        let ReportBody::Delta(d) = r.body(observed(&[])) else {
            panic!("expected a delta");
        };
        assert_eq!(d.removed_guests, vec![100]);
        assert_eq!(d.base_seq, 1001);
    }

    #[test]
    fn a_changed_key_goes_out_in_a_full_report() {
        let mut r = Reporter::new(1);
        let first = r.body(observed(&[]));
        r.answered(Some(first.seq()), false);
        assert!(!r.body(observed(&[])).is_full());
        r.answered(Some(2), false);
        let mut recovered = observed(&[]);
        recovered.pbs_key_fingerprint = Some("ab:cd".into());
        assert!(r.body(recovered).is_full(), "K came back: full");
    }

    #[test]
    fn a_failure_a_request_or_an_unnumbering_hub_means_full() {
        let mut r = Reporter::new(1);
        r.body(observed(&[]));
        r.answered(Some(1), false);
        r.body(observed(&[]));
        r.failed();
        assert!(r.body(observed(&[])).is_full(), "after a failed poll");
        assert!(
            !r.answered(Some(2), true),
            "a full report is not repeated at once"
        );
        assert!(r.body(observed(&[])).is_full(), "but the next one is full");
        r.answered(Some(4), false);
        assert!(!r.body(observed(&[])).is_full());
        assert!(r.answered(Some(4), true), "the hub asked after a delta");
        assert!(r.body(observed(&[])).is_full(), "after the hub asked");
        assert!(!r.answered(None, false));
        assert!(
            r.body(observed(&[])).is_full(),
            "an older hub numbers nothing"
        );
    }

    #[test]
    fn an_abandoned_poll_leaves_the_base_where_it_was() {
        let mut r = Reporter::new(1);
        r.body(observed(&[]));
        r.answered(Some(1), false);
        r.body(observed(&[(100, GuestStatus::Running)]));
        r.abandoned();
        let ReportBody::Delta(d) = r.body(observed(&[(100, GuestStatus::Running)])) else {
            panic!("expected a delta");
        };
        assert_eq!((d.base_seq, d.seq), (1, 3));
        assert_eq!(
            d.guests.len(),
            1,
            "everything since the acknowledged report"
        );
    }
}
