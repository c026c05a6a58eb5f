//! The values the store takes and gives back: what a call writes and what a read returns.

use bosun_proto::admin::{Alert, HostStatus};
use bosun_proto::delta::ReportDelta;
use bosun_proto::desired_status::DesiredRevision;
use bosun_proto::enroll::ReplacedHost;
use bosun_proto::oplog::OperationRecord;
use bosun_proto::report::{AuditEntry, StateReport};
use uuid::Uuid;

use super::error::{StoreError, StoreResult};
use super::stored_report;
use crate::report_alerts::WatchKind;
use crate::secret::SecretHash;

/// A new enrollment token.
#[derive(Debug, Clone)]
pub struct NewEnrollToken {
    /// Its hash.
    pub hash: SecretHash,
    /// Creation time, Unix ms.
    pub created_ms: i64,
    /// Expiry, Unix ms.
    pub expires_ms: i64,
    /// Hosts need approval.
    pub require_approval: bool,
    /// Operator's note.
    pub note: Option<String>,
    /// Restore mode: the revoked host the enrolling box takes over.
    pub restore_host: Option<Uuid>,
}

/// An enrollment attempt.
#[derive(Debug, Clone)]
pub struct Enrollment {
    /// Hash of the presented token.
    pub token_hash: SecretHash,
    /// The new host's id (unused when the token is a restore-mode token: the box takes the
    /// replaced host's id).
    pub host_id: Uuid,
    /// Hash of the new host key.
    pub key_hash: SecretHash,
    /// Host name.
    pub hostname: String,
    /// Agent version.
    pub agent_version: String,
    /// PVE version.
    pub pve_version: Option<String>,
    /// Poll interval given to the host, seconds.
    pub poll_interval_s: u32,
    /// Now, Unix ms.
    pub now_ms: i64,
}

/// What an enrollment did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enrolled {
    /// The host: the new one, or the replaced one (restore mode).
    pub host_id: Uuid,
    /// Its status now.
    pub status: HostStatus,
    /// The lost box this one took over, when the token was a restore-mode token.
    pub replaced: Option<ReplacedHost>,
}

/// What the hub needs to authenticate a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCredentials {
    /// Hash of its key.
    pub key_hash: SecretHash,
    /// Its status.
    pub status: HostStatus,
    /// The next key its agent made, accepted beside the current one until first presented
    /// (decision 0044).
    pub next_key_hash: Option<SecretHash>,
    /// When the current key was issued (`None`: before keys rotated).
    pub key_issued_ms: Option<i64>,
}

/// Which of a host's keys a request presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyMatch {
    /// Its current key.
    Current,
    /// The next key its agent made: the rotation completes with this request.
    Next,
}

impl HostCredentials {
    /// Which key `presented` is, if either (compared in constant time, both always).
    pub fn matches(&self, presented: &SecretHash) -> Option<KeyMatch> {
        let current = self.key_hash.matches(presented);
        let next = self
            .next_key_hash
            .is_some_and(|next| next.matches(presented));
        match (current, next) {
            (true, _) => Some(KeyMatch::Current),
            (false, true) => Some(KeyMatch::Next),
            (false, false) => None,
        }
    }
}

/// How often the hub makes the polls that could wait durable ([`Store::flush`](crate::store::PollStore::flush)): the most
/// heartbeats a power loss may take back (decision 0045).
pub const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// One poll to record.
#[derive(Debug, Clone)]
pub struct PollRecord {
    /// The host.
    pub host_id: Uuid,
    /// Hash of the key the poll presented, checked again in the poll's transaction (the
    /// handler checked it against a cache; a restore-mode enrollment may have replaced it).
    pub key_hash: SecretHash,
    /// Now, Unix ms.
    pub now_ms: i64,
    /// Generation the agent holds.
    pub known_generation: u64,
    /// Generation the agent converged to.
    pub applied_generation: u64,
    /// Jobs to mark acked.
    pub acked_jobs: Vec<Uuid>,
    /// The report: whole, or what changed.
    pub report: ReportUpdate,
    /// Agent and controller versions, when the poll names them (always in a full report,
    /// in a delta only when they changed).
    pub versions: Option<(String, Option<String>)>,
    /// Audit entries to keep.
    pub audit: Vec<AuditEntry>,
    /// Operation-journal records the poll carried (validated, bounded).
    pub operations: Vec<OperationRecord>,
    /// The agent said this is its last poll before a planned stop: the host shows `stopped`
    /// (and gets its stop bound) until its next poll.
    pub stopping: bool,
    /// The pins the agent trusts the hub by (a sorted JSON array), when the poll said them.
    pub hub_pins: Option<String>,
    /// What the host is and has, when the poll said it (validated).
    pub capabilities: Option<bosun_proto::capabilities::HostCapabilities>,
}

impl PollRecord {
    /// Whether the poll, as sent, may be made durable after it is answered: a delta carrying
    /// nothing the agent forgets once answered (decision 0045). What the poll finds may still
    /// make it durable ([`PollRecorded::durable`]).
    pub fn may_wait(&self) -> bool {
        matches!(self.report, ReportUpdate::Delta(_))
            && self.audit.is_empty()
            && self.acked_jobs.is_empty()
            && self.operations.is_empty()
            && self.versions.is_none()
            && self.hub_pins.is_none()
            && self.capabilities.is_none()
            && !self.stopping
    }
}

/// The state report a poll carries.
#[derive(Debug, Clone)]
pub enum ReportUpdate {
    /// A full report: replaces the stored one.
    Full {
        /// Its sequence number.
        seq: u64,
        /// The report as JSON, audit entries left out.
        json: String,
        /// The report, parsed (audit entries left out).
        report: Box<StateReport>,
        /// What identifies its base content (`stored_report::digest`).
        digest: [u8; 16],
    },
    /// Changes on top of the stored report numbered `base_seq`.
    Delta(Box<ReportDelta>),
}

impl ReportUpdate {
    /// A full report as a poll carries it: `report` with its audit entries left out, stored
    /// as JSON.
    pub fn full(mut report: StateReport) -> StoreResult<Self> {
        report.audit.clear();
        let json = serde_json::to_string(&report).map_err(|e| StoreError::Corrupt {
            what: "state report",
            reason: e.to_string(),
        })?;
        Ok(Self::Full {
            seq: report.seq,
            json,
            digest: stored_report::digest(&report)?,
            report: Box::new(report),
        })
    }
}

/// What recording a poll changed.
#[derive(Debug, Clone, Default)]
pub struct PollRecorded {
    /// The agent must send a full report: the poll carried a delta the hub had no base for,
    /// or the hub wants the host's keys (they travel in full reports only) after an escrow
    /// blob the stored report could not verify.
    pub full_report_required: bool,
    /// The host was overdue and is heard from again.
    pub recovered: bool,
    /// Alert raised by the recovery (only when the overdue alert had been sent).
    pub alert: Option<Alert>,
    /// The alerts of the audit entries the poll carried (`golden_refused`, `guest_restored`).
    pub guest_alerts: Vec<Alert>,
    /// Guest, storage, backup, restore-test, escrow and health alerts the merged report opened
    /// or resolved.
    pub watch: Vec<WatchChange>,
    /// The poll must be on disk before it is answered: it carried or changed something the
    /// agent forgets once answered (audit entries, acknowledged jobs, operation records) or an
    /// operator reads (an event, an alert, a full report, a judged one). A heartbeat, or a
    /// delta stored without judging, may instead wait for the store's next
    /// [`Store::flush`](crate::store::PollStore::flush) (decision 0045).
    pub durable: bool,
}

/// A guest, storage, backup, restore-test, escrow or health alert opened or resolved
/// ([`crate::report_alerts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchChange {
    /// The host.
    pub host_id: Uuid,
    /// Its name.
    pub hostname: String,
    /// The alert's kind.
    pub kind: WatchKind,
    /// The event it was recorded as: the kind when opened, else its recovery
    /// (`storage_recovered`, `guest_recovered`, … [`WatchKind::recovered`]) or
    /// `<kind>_cleared`.
    pub event: &'static str,
    /// What it is about (a target's durable id, `guest_id@target` for a backup,
    /// `guest_id@tier@finished_at` for a failed restore test, the guest id for an overdue one
    /// and for a lost, broken or orphaned guest, `pbs_key` for the escrow).
    pub subject: String,
    /// Whether it opened (else it resolved).
    pub opened: bool,
    /// Human text.
    pub message: String,
    /// The alert recorded for it: the opening, or the recovery; none when the condition
    /// stopped applying for another reason.
    pub alert: Option<Alert>,
}

/// What a poll response needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollView {
    /// Current desired generation (0 = none).
    pub generation: u64,
    /// The desired document, as stored (JSON).
    pub desired_json: Option<String>,
    /// Queued jobs: exact signed bytes and armored signature.
    pub jobs: Vec<(Vec<u8>, String)>,
    /// The host's poll interval.
    pub poll_interval_s: u32,
    /// Highest stored audit sequence.
    pub audit_acked_seq: Option<u64>,
    /// Sequence number of the stored report, if any.
    pub report_seq: Option<u64>,
    /// The operator's correlation id of the current generation, if it named one.
    pub correlation_id: Option<String>,
    /// Where the host's key is in its rotation.
    pub host_key: HostKeyFacts,
}

/// A desired-state write.
#[derive(Debug, Clone)]
pub struct DesiredWrite {
    /// The host.
    pub host_id: Uuid,
    /// The validated document as JSON.
    pub document: String,
    /// `Idempotency-Key` and the SHA-256 of the document.
    pub idempotency: Option<(String, [u8; 32])>,
    /// The operator's correlation id (`X-Correlation-Id`), stored with the generation.
    pub correlation_id: Option<String>,
    /// The name of the operator token that set it.
    pub set_by: Option<String>,
    /// Now, Unix ms.
    pub now_ms: i64,
}

/// What a host's desired-state status is made of ([`Store::desired_facts`](crate::store::JobStore::desired_facts)).
#[derive(Debug, Clone)]
pub struct DesiredFacts {
    /// The current generation, if one was ever set.
    pub current: Option<DesiredRevision>,
    /// The generation the host last applied, if the hub still keeps its document.
    pub applied: Option<DesiredRevision>,
    /// The generation the host holds.
    pub known_generation: u64,
    /// The generation the host last converged to.
    pub applied_generation: u64,
    /// When the host last polled.
    pub last_seen: Option<jiff::Timestamp>,
    /// The host's stored report.
    pub report: Option<bosun_proto::report::StateReport>,
    /// The host's operations carrying the current generation's correlation id.
    pub operations: Vec<OperationRecord>,
}

/// Which stored operation records to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperationQuery {
    /// The newest ones.
    Recent,
    /// One operation.
    Op(Uuid),
    /// Those carrying a correlation id.
    Correlation(String),
}

/// A job submission.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// The job.
    pub job_id: Uuid,
    /// Its host.
    pub host_id: Uuid,
    /// Its kind (for listings).
    pub kind: &'static str,
    /// The exact signed bytes.
    pub document: Vec<u8>,
    /// The armored signature.
    pub signature: String,
    /// Its priority, as its signed document says (higher first).
    pub priority: i32,
    /// Now, Unix ms.
    pub now_ms: i64,
}

/// Filters for the event log.
#[derive(Debug, Clone, Copy, Default)]
pub struct EventQuery {
    /// Only this host.
    pub host_id: Option<Uuid>,
    /// Only events after this sequence number.
    pub after: Option<u64>,
    /// At most this many (newest last).
    pub limit: u32,
}

/// Host counts for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostCounts {
    /// Waiting for approval.
    pub pending_approval: u64,
    /// Active.
    pub active: u64,
    /// Revoked.
    pub revoked: u64,
    /// Active and overdue.
    pub overdue: u64,
}

/// Wakes held long-polls: for one host, or for all ([`Store::watch_wakeups`](crate::store::PollStore::watch_wakeups)).
pub type WakeUp = std::sync::Arc<dyn Fn(Option<Uuid>) + Send + Sync>;

/// What the host row says about its key, as a poll's answer needs it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostKeyFacts {
    /// When the current key was issued (`None`: before keys rotated; due at once).
    pub issued_ms: Option<i64>,
    /// An operator asked for a rotation not yet done.
    pub rotate_requested: bool,
    /// The next key's hash, once the agent sent it.
    pub next: Option<SecretHash>,
}
