//! The host row as a poll reads it ([`HOST_ROW_COLUMNS`], read by both stores' statement),
//! checked against the poll ([`HostRow::checked`]: the host's key and status), and what it
//! and the waiting desired state and jobs make of the poll's answer ([`Pending::view`]).

use bosun_proto::admin::HostStatus;

use super::codec::{host_status, unsigned};
use super::host_key_rotation::HostKeyFacts;
use super::stored_report::Base;
use super::tx::Row;
use super::{PollRecord, PollView, StoreError, StoreResult};
use crate::secret::SecretHash;

/// The columns of the host row a poll reads, as both stores' statement selects them
/// ([`HostRow::read`] reads them in this order), then what waits for the host
/// ([`super::pending::WAITING_COLUMNS`]).
pub(super) const HOST_ROW_COLUMNS: &str = "h.hostname, h.overdue_since_ms, h.alert_state, \
    h.applied_generation, h.status, h.key_hash, h.full_report_wanted, h.report_seq, h.prev_seq, \
    h.live, h.prev_live, h.prev_base, h.audit_seq, h.poll_interval_s, h.stopped_ms, \
    h.next_key_hash, h.key_issued_ms, h.key_rotate_ms, h.base_digest, h.last_seen_ms IS NULL";

/// How many columns [`HOST_ROW_COLUMNS`] names.
pub(super) const HOST_ROW_WIDTH: usize = 20;

/// What the host row says to a poll's answer.
#[derive(Debug, Clone, Copy)]
pub(super) struct HostFacts {
    pub poll_interval_s: u32,
    /// The highest audit sequence stored.
    pub audit_acked_seq: Option<u64>,
    /// The stored report's number.
    pub report_seq: Option<u64>,
    /// Where the host's key is in its rotation.
    pub host_key: HostKeyFacts,
}

/// What waits for a host (`pending::pending`).
#[derive(Debug)]
pub(super) struct Pending {
    /// The current desired generation (0: none).
    pub generation: u64,
    /// Its document, unless the agent knows that generation.
    pub desired_json: Option<String>,
    /// Queued jobs: exact signed bytes and armored signature.
    pub jobs: Vec<(Vec<u8>, String)>,
    /// The operator's correlation id of the generation.
    pub correlation_id: Option<String>,
}

impl Pending {
    /// The poll's answer with what the host row says.
    pub fn view(self, facts: HostFacts) -> PollView {
        PollView {
            generation: self.generation,
            desired_json: self.desired_json,
            jobs: self.jobs,
            poll_interval_s: facts.poll_interval_s,
            audit_acked_seq: facts.audit_acked_seq,
            report_seq: facts.report_seq,
            correlation_id: self.correlation_id,
            host_key: facts.host_key,
        }
    }
}

/// The host row as a poll needs it, as read; [`HostRow::checked`] makes it usable.
#[derive(Debug, Clone)]
pub(super) struct RawHostRow {
    hostname: String,
    overdue_since: Option<i64>,
    alert_state: String,
    old_applied: i64,
    status: String,
    key_hash: Vec<u8>,
    keys_wanted: bool,
    stored: Stored,
    audit_seq: Option<i64>,
    poll_interval_s: u32,
    stopped_since: Option<i64>,
    host_key: HostKeyFacts,
    never_polled: bool,
}

impl RawHostRow {
    /// Reads [`HOST_ROW_COLUMNS`] from the start of `row`.
    pub fn read(row: &Row<'_, '_>) -> rusqlite::Result<Self> {
        Ok(Self {
            hostname: row.get(0)?,
            overdue_since: row.get(1)?,
            alert_state: row.get(2)?,
            old_applied: row.get(3)?,
            status: row.get(4)?,
            key_hash: row.get(5)?,
            keys_wanted: row.get(6)?,
            stored: Stored {
                seq: row.get::<Option<i64>>(7)?.map(unsigned),
                prev_seq: row.get::<Option<i64>>(8)?.map(unsigned),
                live: row.get(9)?,
                prev_live: row.get(10)?,
                prev_base: if row.get::<i64>(11)? == 1 {
                    Base::Previous
                } else {
                    Base::Current
                },
                base_digest: row.get(18)?,
            },
            audit_seq: row.get(12)?,
            poll_interval_s: row.get(13)?,
            stopped_since: row.get(14)?,
            host_key: super::host_key_rotation::facts(row, 15)?,
            never_polled: row.get(19)?,
        })
    }
}

/// The host row as a poll needs it.
#[derive(Debug)]
pub(super) struct HostRow {
    pub hostname: String,
    /// Since when the host is overdue, if it is.
    pub overdue_since: Option<i64>,
    /// Whether its overdue alert was sent (`deadman::AlertState`).
    pub alert_state: String,
    /// The generation it reported applied before this poll.
    pub old_applied: u64,
    /// Its stored report's numbers and live parts.
    pub stored: Stored,
    /// The hub wants a full report (the host's keys) after an escrow blob it could not verify.
    pub keys_wanted: bool,
    /// The highest audit sequence stored before the poll.
    pub audit_seq: Option<u64>,
    /// The host's poll interval.
    pub poll_interval_s: u32,
    /// When its last poll before this one announced a planned stop, if it did.
    pub stopped_since: Option<i64>,
    /// Where its key is in its rotation.
    pub host_key: HostKeyFacts,
    /// This is its first poll (it is not counted as monitored yet).
    pub never_polled: bool,
}

impl HostRow {
    /// The row of the polling host, once the poll's key matches the stored one and the host
    /// is active. (The handler checked the key against a cache; a restore-mode enrollment may
    /// have given the host a new one since.)
    pub fn checked(raw: RawHostRow, poll: &PollRecord) -> StoreResult<Self> {
        if !SecretHash::from_slice(&raw.key_hash)
            .is_some_and(|stored| stored.matches(&poll.key_hash))
        {
            return Err(StoreError::WrongHostKey {
                host_id: poll.host_id,
            });
        }
        let status = host_status(&raw.status)?;
        if status != HostStatus::Active {
            return Err(StoreError::HostNotActive {
                host_id: poll.host_id,
                status,
            });
        }
        Ok(Self {
            hostname: raw.hostname,
            overdue_since: raw.overdue_since,
            alert_state: raw.alert_state,
            old_applied: unsigned(raw.old_applied),
            stored: raw.stored,
            keys_wanted: raw.keys_wanted,
            audit_seq: raw.audit_seq.map(unsigned),
            poll_interval_s: raw.poll_interval_s,
            stopped_since: raw.stopped_since,
            host_key: raw.host_key,
            never_polled: raw.never_polled,
        })
    }
}

/// What the host row says of its stored reports.
#[derive(Debug, Clone, Default)]
pub(super) struct Stored {
    /// The stored report's number (`None`: no report).
    pub seq: Option<u64>,
    /// The number of the report before it, if kept.
    pub prev_seq: Option<u64>,
    /// The stored report's live part (`None`: its base's).
    pub live: Option<String>,
    /// The previous report's live part (`None`: its base's).
    pub prev_live: Option<String>,
    /// Which base the previous report is built on.
    pub prev_base: Base,
    /// What identifies the stored base's content, when known.
    pub base_digest: Option<Vec<u8>>,
}
