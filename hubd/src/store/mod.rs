//! Persistence behind the [`Store`] trait. Methods are synchronous and each runs as one
//! transaction (nothing half-written); async code reaches them through
//! [`crate::Hub::store_call`], which moves the call onto the blocking pool.
//!
//! [`sqlite::SqliteStore`] is the embedded default; [`postgres::PgStore`] keeps the same state in
//! PostgreSQL for any number of hub replicas over one database (decision 0023).

pub mod alert_triage;
pub mod audit_trail;
pub mod dashboard;
pub use audit_trail::{AuditCursor, AuditQuery};
mod dashboard_reads;
mod desired;
pub mod schema;
pub mod sqlite;
pub use desired::KEEP_RECENT_GENERATIONS;
mod artifact_files;
mod artifacts;
mod backend;
mod enroll;
mod escrow;
pub mod host_key_rotation;
mod host_removal;
mod hosts;
pub mod hub_keys;
mod jobs;
pub mod operator_tokens;
mod pending;
mod pg_conn;
mod poll_report;
mod restored;
mod sqlite_readers;
mod stored_report;
mod tx;
mod watch;
pub use artifacts::MAX_ARTIFACTS;
pub use enroll::token_id as enroll_token_id;
pub use pg_conn::PgError;
pub mod pg_schema;
pub mod postgres;
pub mod retention;
pub use retention::{PruneCursor, PruneStep, Pruned, RetentionConfig};

use bosun_proto::admin::{
    Alert, AlertKind, DesiredAccepted, Event, HostDetail, HostStatus, HostSummary, JobAccepted,
    JobRecord, JobState,
};
use bosun_proto::delta::ReportDelta;
use bosun_proto::desired_status::DesiredRevision;
use bosun_proto::enroll::ReplacedHost;
use bosun_proto::job::JobResult;
use bosun_proto::oplog::OperationRecord;
use bosun_proto::report::{AuditEntry, StateReport};
use uuid::Uuid;

use crate::deadman::DeadManConfig;
use crate::report_alerts::WatchKind;
use crate::secret::SecretHash;

pub use artifact_files::ARTIFACTS_DIR;
pub use artifacts::ArtifactBytes;
pub use host_removal::RemovedHost;
pub use operator_tokens::{NewOperatorToken, OperatorTokenRecord};
pub use restored::RestoredHub;

/// Store failures. Domain refusals (unknown host, used token...) are variants too, so the API
/// layer maps them to HTTP statuses in one place.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Opening or preparing the database failed.
    #[error("opening database {path}")]
    Open {
        /// The database file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: rusqlite::Error,
    },
    /// Syncing the database's write-ahead log to disk failed: what was committed since the
    /// last sync may not survive a power loss.
    #[error("syncing {path} to disk")]
    Sync {
        /// The write-ahead log.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A schema migration failed.
    #[error("migrating the database to schema version {version}")]
    Migrate {
        /// The migration that failed.
        version: usize,
        /// Why.
        #[source]
        source: rusqlite::Error,
    },
    /// The database was written by a newer hub.
    #[error("database schema version {found} is newer than this hub understands ({known})")]
    TooNew {
        /// Version in the file.
        found: i64,
        /// Newest version this build knows.
        known: usize,
    },
    /// A query failed.
    #[error("database operation `{op}` failed")]
    Sqlite {
        /// The store operation.
        op: &'static str,
        /// Why.
        #[source]
        source: rusqlite::Error,
    },
    /// A stored value could not be decoded.
    #[error("stored {what} is corrupt: {reason}")]
    Corrupt {
        /// What was being read.
        what: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// The blocking task running a store call failed.
    #[error("database worker task failed")]
    Worker {
        /// Why.
        #[source]
        source: tokio::task::JoinError,
    },
    /// A batch of polls failed as a whole (the cause is logged by the poll writer).
    #[error("recording polls failed: {reason}")]
    Batch {
        /// What failed.
        reason: String,
    },
    /// The host is enrolled but not active (waiting for approval, or revoked).
    #[error("host {host_id} is {}", status.as_str())]
    HostNotActive {
        /// The host.
        host_id: Uuid,
        /// Its status.
        status: HostStatus,
    },
    /// `init` found the hub initialized already.
    #[error("the hub is already initialized")]
    AlreadyInitialized,
    /// `serve` found the hub not initialized.
    #[error("the hub is not initialized (run `bosun-hubd init`)")]
    NotInitialized,
    /// No such host.
    #[error("host {host_id} is not enrolled")]
    UnknownHost {
        /// The host.
        host_id: Uuid,
    },
    /// The enrollment token is not known.
    #[error("enrollment token is not valid")]
    TokenUnknown,
    /// The enrollment token was already used.
    #[error("enrollment token was already used")]
    TokenUsed,
    /// The enrollment token expired.
    #[error("enrollment token expired")]
    TokenExpired,
    /// The enrollment token was revoked.
    #[error("enrollment token revoked")]
    TokenRevoked,
    /// The enrollment token to revoke was used: the host it enrolled is what to revoke.
    #[error(
        "enrollment token {token_id} was used: a box enrolled with it; revoke that host instead"
    )]
    TokenConsumed {
        /// Its id.
        token_id: String,
    },
    /// No enrollment token has this id.
    #[error("no enrollment token {token_id}")]
    UnknownToken {
        /// The id asked for.
        token_id: String,
    },
    /// The same `Idempotency-Key` came with a different document.
    #[error("idempotency key `{key}` was already used with a different document")]
    IdempotencyConflict {
        /// The key.
        key: String,
    },
    /// The hub was restored from a backup and the host has not polled since: its agent may
    /// hold a generation the backup does not know, so none is numbered for it yet.
    #[error(
        "host {host_id} has not polled since the hub was restored from a backup (at {restored_ms} ms); its agent may hold a desired state newer than the backup: set it again after the host's next poll"
    )]
    NotSeenSinceRestore {
        /// The host.
        host_id: Uuid,
        /// When the hub was restored (Unix ms).
        restored_ms: i64,
    },
    /// The same job id came with different bytes or for another host.
    #[error("job {job_id} already exists with different content")]
    JobConflict {
        /// The job.
        job_id: Uuid,
    },
    /// No such job for this host.
    #[error("job {job_id} is not queued for host {host_id}")]
    UnknownJob {
        /// The job.
        job_id: Uuid,
        /// The host.
        host_id: Uuid,
    },
    /// The job is no longer queued: the agent holds it.
    #[error("job {job_id} is {state}, no longer queued: the agent holds it")]
    JobNotQueued {
        /// The job.
        job_id: Uuid,
        /// Its state.
        state: &'static str,
    },
    /// The job already has a different result.
    #[error("job {job_id} already finished as {state}")]
    JobFinished {
        /// The job.
        job_id: Uuid,
        /// Its final state.
        state: &'static str,
    },
    /// A restore-mode token names a host that is not revoked (only a revoked host's identity
    /// can be handed to a new box).
    #[error("host {host_id} is {}, not revoked: revoke it before a new box takes it over", status.as_str())]
    HostNotRevoked {
        /// The host.
        host_id: Uuid,
        /// Its status.
        status: HostStatus,
    },
    /// Only a revoked host can be removed: an active or pending one is revoked first.
    #[error("host {host_id} is {}, not revoked: revoke it before removing it", status.as_str())]
    HostNotRemovable {
        /// The host.
        host_id: Uuid,
        /// Its status.
        status: HostStatus,
    },
    /// The hub holds the host's escrow blob (the customer's wrapped key, without which its
    /// backups cannot be read after a host loss): a removal must say it forgets it.
    #[error(
        "the hub holds host {host_id}'s escrow blob: removing the host forgets the customer's wrapped key"
    )]
    EscrowHeld {
        /// The host.
        host_id: Uuid,
    },
    /// A poll presented a key that is not the host's (any more): the host was taken over by
    /// another box after the key was checked.
    #[error("the key presented for host {host_id} is not its key")]
    WrongHostKey {
        /// The host.
        host_id: Uuid,
    },
    /// An approval or revocation that makes no sense in the host's state.
    #[error("host {host_id} is {status}, cannot {action}")]
    HostState {
        /// The host.
        host_id: Uuid,
        /// Its status.
        status: &'static str,
        /// What was asked.
        action: &'static str,
    },
    /// No alert of this kind about this subject is open on the host.
    #[error("host {host_id} has no open {kind} alert about `{subject}`")]
    UnknownAlert {
        /// The host.
        host_id: Uuid,
        /// The kind asked for.
        kind: &'static str,
        /// The subject asked for.
        subject: String,
    },
    /// No silence is in force under this id (never created, ended, or removed).
    #[error("no silence {id} is in force")]
    UnknownSilence {
        /// The id asked for.
        id: u64,
    },
    /// The host already has as many silences in force as the hub keeps per host.
    #[error("host {host_id} already has {limit} silences in force; remove one first")]
    TooManySilences {
        /// The host.
        host_id: Uuid,
        /// The limit.
        limit: usize,
    },
    /// No operator token has this name.
    #[error("no operator token is named `{name}`")]
    UnknownOperatorToken {
        /// The name asked for.
        name: String,
    },
    /// An operator token already has this name.
    #[error("an operator token is already named `{name}`")]
    OperatorTokenNameTaken {
        /// The name.
        name: String,
    },
    /// The hub already keeps as many operator tokens as it may.
    #[error("the hub already keeps {limit} operator tokens; revoke one first")]
    TooManyOperatorTokens {
        /// The limit.
        limit: usize,
    },
    /// Revoking this token would leave the hub without an unexpired admin token.
    #[error(
        "`{name}` is the last unexpired admin token: create another admin token before revoking it"
    )]
    LastAdminToken {
        /// The token's name.
        name: String,
    },
    /// An artifact file could not be written, read or listed.
    #[error("artifact file operation `{op}` failed on {path}")]
    ArtifactFile {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A stored artifact's bytes no longer hash to its name: it is not served.
    #[error("stored artifact {sha256} is damaged: its bytes hash to {found}; upload it again")]
    ArtifactCorrupt {
        /// Its name.
        sha256: String,
        /// What its bytes hash to now.
        found: String,
    },
    /// A step of the hub's key rotation was refused.
    #[error(transparent)]
    KeyRotation(#[from] hub_keys::KeyRefusal),
    /// A PostgreSQL statement or connection failed.
    #[error("database operation `{op}` failed")]
    Postgres {
        /// The store operation.
        op: &'static str,
        /// Why.
        #[source]
        source: PgError,
    },
}

/// Shorthand for a store result.
pub type StoreResult<T> = Result<T, StoreError>;

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

/// How often the hub makes the polls that could wait durable ([`Store::flush`]): the most
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
    /// [`Store::flush`] (decision 0045).
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
    pub host_key: host_key_rotation::HostKeyFacts,
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

/// What a host's desired-state status is made of ([`Store::desired_facts`]).
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

/// The hub's persistent state.
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// Marks the hub initialized and stores its first admin token, named `admin`; fails if the
    /// hub is initialized already.
    fn init_admin(&self, hash: SecretHash, now_ms: i64) -> StoreResult<()>;
    /// `NotInitialized` unless `init` ran (a cheap read: the watchdog's probe too).
    fn check_initialized(&self) -> StoreResult<()>;
    /// The operator token whose secret hashes to `presented`, expired or not.
    fn operator_token(&self, presented: SecretHash) -> StoreResult<Option<OperatorTokenRecord>>;
    /// Notes that the token `name` was used at `now_ms`.
    fn touch_operator_token(&self, name: &str, now_ms: i64) -> StoreResult<()>;
    /// Creates an operator token (`OperatorTokenNameTaken`, `TooManyOperatorTokens`).
    fn create_operator_token(
        &self,
        token: NewOperatorToken,
    ) -> StoreResult<bosun_proto::operator_token::OperatorTokenInfo>;
    /// Every operator token, by name (never a secret).
    fn list_operator_tokens(
        &self,
        now_ms: i64,
    ) -> StoreResult<Vec<bosun_proto::operator_token::OperatorTokenInfo>>;
    /// Revokes an operator token (`UnknownOperatorToken`; `LastAdminToken` for the last
    /// unexpired admin token); returns it as it was.
    fn revoke_operator_token(
        &self,
        name: &str,
        now_ms: i64,
    ) -> StoreResult<bosun_proto::operator_token::OperatorTokenInfo>;
    /// Gives an operator token a new secret hash: the old secret stops working
    /// (`UnknownOperatorToken`).
    fn rotate_operator_token(
        &self,
        name: &str,
        hash: SecretHash,
        now_ms: i64,
    ) -> StoreResult<bosun_proto::operator_token::OperatorTokenInfo>;
    /// Records a dashboard login by the token `name`.
    fn record_dashboard_login(&self, name: &str, now_ms: i64) -> StoreResult<()>;
    /// Stores a new enrollment token. A restore-mode token is refused unless its host exists
    /// (`UnknownHost`) and is revoked (`HostNotRevoked`).
    fn create_enroll_token(&self, token: NewEnrollToken) -> StoreResult<()>;
    /// The enrollment tokens the hub keeps, newest first (see `enroll::list_tokens`).
    fn list_enroll_tokens(
        &self,
        now_ms: i64,
    ) -> StoreResult<Vec<bosun_proto::admin::EnrollTokenInfo>>;
    /// Revokes an unused enrollment token by its id (see `enroll::revoke_token`).
    fn revoke_enroll_token(
        &self,
        token_id: &str,
        now_ms: i64,
    ) -> StoreResult<bosun_proto::admin::EnrollTokenState>;
    /// Consumes a token (single use) and creates the host.
    ///
    /// With a restore-mode token, hands the revoked host's identity to the enrolling box
    /// instead, in the same transaction: it re-checks that the host is still revoked (else
    /// `HostNotRevoked`, the token left unused), gives the host the new key hash (the old key
    /// stops authenticating), sets it active (or pending approval), takes the new box's
    /// hostname and versions, forgets the lost box's liveness, report, sequence numbers and
    /// audit numbering (its audit entries move to an archive) so the new box's first full
    /// report is taken and the dead-man's switch starts afresh, records `replaced_at` and a
    /// `replaced` event, and marks sealed storage credentials in the desired state to be
    /// resealed (`reseal_required_since`).
    ///
    /// Kept: the host id, the desired state and its generation, the storage manifest in it,
    /// the escrow blob (the new box fetches it to recover K), the hub's memory of good backups
    /// and passing restore tests (the backups on PBS outlive the box), open report alerts
    /// (the new box's reports resolve them), and queued jobs: a job is signed for the host id,
    /// not for a box, carries its own validity window, and the new box's gate checks it like
    /// any other, so a job queued while the box was dead (e.g. a restore-now) still reaches the
    /// host it was meant for. Jobs the lost box had acknowledged but never finished stay
    /// `acked` without a result; the `replaced` event lists them (`unfinished_jobs`) so the
    /// operator can queue them again.
    fn enroll(&self, enrollment: Enrollment) -> StoreResult<Enrolled>;
    /// Credentials of a host, if enrolled.
    fn host_credentials(&self, host_id: Uuid) -> StoreResult<Option<HostCredentials>>;
    /// Keeps `next` as the host's next key while `current` is its current key (see
    /// `host_key_rotation::stage`); `false` when `current` is not (any more).
    fn stage_host_key(
        &self,
        host_id: Uuid,
        current: SecretHash,
        next: SecretHash,
        now_ms: i64,
    ) -> StoreResult<bool>;
    /// Makes the held next key `next` the host's current key, retiring the old one (see
    /// `host_key_rotation::promote`); `false` when `next` is not the next key held.
    fn promote_host_key(&self, host_id: Uuid, next: SecretHash, now_ms: i64) -> StoreResult<bool>;
    /// Asks for the host's key to be replaced at its next poll (`bosunctl hosts rotate-key`).
    fn request_host_key_rotation(&self, host_id: Uuid, now_ms: i64) -> StoreResult<()>;
    /// Approves a pending host.
    fn approve_host(&self, host_id: Uuid, now_ms: i64) -> StoreResult<()>;
    /// Revokes a host's key.
    fn revoke_host(&self, host_id: Uuid, now_ms: i64) -> StoreResult<()>;
    /// Removes a revoked host and every row about it (see `host_removal::remove_host`):
    /// `UnknownHost`, `HostNotRemovable` for an active or pending host, `EscrowHeld` when the
    /// hub holds its escrow blob and `forget_escrow` is not set.
    fn remove_host(
        &self,
        host_id: Uuid,
        forget_escrow: bool,
        now_ms: i64,
    ) -> StoreResult<RemovedHost>;
    /// Records a batch of polls in one transaction (group commit). One refused poll (unknown
    /// or inactive host, or one that failed after writing) leaves the others intact. The
    /// outer error means the whole batch failed; the inner ones are per poll, in order, each
    /// with the state the poll is answered with. The batch is on disk when this returns if
    /// any of its polls is [`PollRecorded::durable`]; otherwise once [`Store::flush`] ran.
    fn record_polls(
        &self,
        polls: Vec<PollRecord>,
    ) -> StoreResult<Vec<StoreResult<(PollRecorded, PollView)>>>;
    /// Desired state and queued jobs for a host.
    fn poll_view(&self, host_id: Uuid) -> StoreResult<PollView>;
    /// Stores a desired state (bumps the generation unless replayed) and keeps its document
    /// and correlation id in the host's bounded history.
    fn put_desired(&self, write: DesiredWrite) -> StoreResult<DesiredAccepted>;
    /// The current desired state with its generation and correlation id (`None`: never set).
    fn desired_current(&self, host_id: Uuid) -> StoreResult<Option<DesiredRevision>>;
    /// Current and last-applied documents, generations, the stored report and the
    /// operations of the current generation.
    fn desired_facts(&self, host_id: Uuid) -> StoreResult<DesiredFacts>;
    /// Stored operation-journal records of a host, oldest first, at most `limit` (the newest).
    fn operations(
        &self,
        host_id: Uuid,
        query: OperationQuery,
        limit: usize,
    ) -> StoreResult<Vec<OperationRecord>>;
    /// Queues a signed job.
    fn submit_job(&self, job: NewJob) -> StoreResult<JobAccepted>;
    /// Records a job's result.
    fn finish_job(&self, host_id: Uuid, result: &JobResult, now_ms: i64) -> StoreResult<()>;
    /// Jobs of a host, oldest first.
    fn list_jobs(&self, host_id: Uuid) -> StoreResult<Vec<JobRecord>>;
    /// Cancels a queued job (see `jobs::cancel_job`); gives its state after.
    fn cancel_job(&self, host_id: Uuid, job_id: Uuid, now_ms: i64) -> StoreResult<JobState>;
    /// Stores an escrow blob (last write wins) with the fingerprint of the key it wraps, and
    /// judges the host's report again (a blob matching the reported key resolves
    /// `escrow_missing`); returns what that changed.
    fn put_escrow(
        &self,
        host_id: Uuid,
        blob: &str,
        key_fingerprint: &str,
        now_ms: i64,
    ) -> StoreResult<Vec<WatchChange>>;
    /// The stored escrow blob.
    fn escrow(&self, host_id: Uuid) -> StoreResult<Option<String>>;
    /// All hosts.
    fn list_hosts(&self) -> StoreResult<Vec<HostSummary>>;
    /// One host.
    fn host_detail(&self, host_id: Uuid) -> StoreResult<HostDetail>;
    /// Counts for metrics.
    fn host_counts(&self) -> StoreResult<HostCounts>;
    /// Records one poll on the calling thread, at once, when the store can without waiting:
    /// a SQLite store whose writer is free (no batch is being recorded) and a poll that may
    /// wait for the disk ([`PollRecord::may_wait`]). `None`: it could not; send the poll to the
    /// poll writer. A poll recorded here is committed but not yet durable: when it says it must
    /// be ([`PollRecorded::durable`]), call [`Store::sync`] before answering it.
    fn record_poll_now(&self, poll: &PollRecord) -> Option<StoreResult<(PollRecorded, PollView)>>;
    /// Makes durable what was committed ([`Store::record_poll_now`]).
    fn sync(&self) -> StoreResult<()>;
    /// Makes the batches of polls [`Store::record_polls`] left to be made durable later
    /// durable now, and tidies the store's log (SQLite moves its write-ahead log into the
    /// database here, beside the writer rather than in its way). The hub calls it every
    /// [`FLUSH_EVERY`] and when it stops.
    fn flush(&self) -> StoreResult<()>;
    /// Runs one dead-man's-switch sweep ([`crate::deadman::plan_sweep`]) and applies it in
    /// the same transaction; returns the alerts it raised.
    fn sweep(&self, now_ms: i64, config: &DeadManConfig) -> StoreResult<Vec<Alert>>;
    /// Judges the active hosts due at `now_ms` for storage, backup and restore-test alerts
    /// (backups and restore tests turn overdue while a host reports nothing new: each
    /// judgment records when that happens next, within an hour, and a
    /// desired-state change makes the host due at once); returns what changed. Unlike the
    /// other methods it may run as several transactions (each host judged whole in one), so
    /// a large fleet's sweep does not hold up the polls.
    fn sweep_backups(&self, now_ms: i64) -> StoreResult<Vec<WatchChange>>;
    /// Deletes what is past its retention bound at `now_ms` ([`retention`]), going on from
    /// `from` for about `budget`: as several transactions of at most
    /// [`retention::PRUNE_BATCH`] rows per statement, a few milliseconds each, so polls are
    /// not held up. On PostgreSQL only the replica holding the sweeper lock prunes (the others
    /// prune nothing and are done).
    fn prune(
        &self,
        now_ms: i64,
        config: &RetentionConfig,
        from: PruneCursor,
        budget: std::time::Duration,
    ) -> StoreResult<PruneStep>;
    /// Audit entries the agents reported, newest first, at most `query.limit`.
    fn audit(&self, query: &AuditQuery) -> StoreResult<Vec<bosun_proto::admin::AuditRecord>>;
    /// Alerts, newest last.
    fn list_alerts(&self, limit: u32) -> StoreResult<Vec<Alert>>;
    /// Acknowledges an open alert (`UnknownAlert` when none of that host, kind and subject is
    /// open); returns it as now listed.
    fn ack_alert(
        &self,
        ack: &bosun_proto::alert_triage::AckAlert,
        now_ms: i64,
    ) -> StoreResult<bosun_proto::admin::OpenAlert>;
    /// Creates a silence of a host's alerts (`UnknownHost`, `TooManySilences`).
    fn create_silence(
        &self,
        request: &bosun_proto::alert_triage::CreateSilence,
        now_ms: i64,
    ) -> StoreResult<bosun_proto::alert_triage::Silence>;
    /// The silences in force at `now_ms`, oldest first.
    fn list_silences(&self, now_ms: i64) -> StoreResult<Vec<bosun_proto::alert_triage::Silence>>;
    /// Ends a silence in force early (`UnknownSilence` when none is in force under `id`).
    fn remove_silence(
        &self,
        id: u64,
        now_ms: i64,
    ) -> StoreResult<bosun_proto::alert_triage::Silence>;
    /// Events, newest last.
    fn list_events(&self, query: EventQuery) -> StoreResult<Vec<Event>>;
    /// What the dashboard shows beyond the lists above ([`dashboard::DashboardFacts`]).
    fn dashboard_facts(
        &self,
        query: dashboard::DashboardQuery,
    ) -> StoreResult<dashboard::DashboardFacts>;
    /// Stores an artifact's bytes under their SHA-256 (the newest [`MAX_ARTIFACTS`] are kept):
    /// as a file beside a SQLite database, in the table on PostgreSQL (decision 0041).
    fn put_artifact(
        &self,
        sha256: &str,
        data: &[u8],
        now_ms: i64,
    ) -> StoreResult<bosun_proto::admin::ArtifactInfo>;
    /// The bytes stored under `sha256`, checked against it (`ArtifactCorrupt` when they no
    /// longer match).
    fn artifact(&self, sha256: &str) -> StoreResult<Option<ArtifactBytes>>;
    /// Every stored artifact, newest first.
    fn list_artifacts(&self) -> StoreResult<Vec<bosun_proto::admin::ArtifactInfo>>;
    /// The hub's key rotation as it stands, with how many live hosts hold each key.
    fn key_rotation(&self) -> StoreResult<hub_keys::KeyRotation>;
    /// The active key's pin and the pins agents are told to trust (a cheap read).
    fn announced_hub_keys(&self) -> StoreResult<hub_keys::Announced>;
    /// The active key with its certificate, once a rotation recorded one.
    fn active_hub_key(&self) -> StoreResult<Option<hub_keys::KeyMaterial>>;
    /// Stages `next`; the first rotation records `serving` as the active key first.
    /// `KeyRotation` when a key is staged already or `next` is not new.
    fn stage_hub_key(
        &self,
        serving: &hub_keys::KeyMaterial,
        next: &hub_keys::KeyMaterial,
        now_ms: i64,
    ) -> StoreResult<()>;
    /// Serves the staged key from now on (`KeyRotation` while a live host does not hold it,
    /// unless `force`); returns its pin.
    fn activate_hub_key(&self, force: bool, now_ms: i64) -> StoreResult<String>;
    /// Retires the key the active one replaced; returns the rotation after it.
    fn retire_hub_key(&self, now_ms: i64) -> StoreResult<hub_keys::KeyRotation>;
    /// Publishes the operator's signed pin set, carried in every poll answer from then on
    /// (`KeyRotation` when its serial is not above the published one's).
    fn publish_hub_pins(&self, pins: &hub_keys::SignedPins, now_ms: i64) -> StoreResult<()>;
    /// Records that this store was brought back from a backup (see [`RestoredHub`]): from now
    /// on a desired state is taken for a host only once it has polled since.
    fn mark_restored(&self, restored: &RestoredHub) -> StoreResult<()>;
    /// When the store was last brought back from a backup (Unix ms), if ever.
    fn restored_ms(&self) -> StoreResult<Option<i64>>;
    /// Starts calling `wake` for writes other hub replicas make that held long-polls wait for
    /// (`Some(host)`), or for every host when some may have been missed (`None`). A store only
    /// one hub uses has no other replicas and does nothing.
    fn watch_wakeups(&self, wake: WakeUp) {
        let _ = wake;
    }
}

/// Wakes held long-polls: for one host, or for all ([`Store::watch_wakeups`]).
pub type WakeUp = std::sync::Arc<dyn Fn(Option<Uuid>) + Send + Sync>;

/// Which database the hub keeps its state in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StoreLocation {
    /// `hub.sqlite` in the data directory (the default).
    #[default]
    Sqlite,
    /// A PostgreSQL database shared by any number of hub replicas: a `postgres://` URL or a
    /// `key=value` connection string.
    Postgres(String),
}

impl StoreLocation {
    /// Parses `--store`: `sqlite`, or a `postgres://` / `postgresql://` URL.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text == "sqlite" {
            return Ok(Self::Sqlite);
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return text
                .parse::<tokio_postgres::Config>()
                .map(|_| Self::Postgres(text.to_owned()))
                .map_err(|e| format!("not a valid PostgreSQL connection URL: {e}"));
        }
        Err("expected `sqlite` or a postgres://user@host/db URL".to_owned())
    }

    /// Opens the store: SQLite in `data_dir`, or the PostgreSQL database.
    pub fn open(&self, data_dir: &std::path::Path) -> StoreResult<std::sync::Arc<dyn Store>> {
        self.open_with(data_dir, pg_schema::PgSchema::default())
    }

    /// [`Self::open`], a PostgreSQL database brought to `schema`.
    pub fn open_with(
        &self,
        data_dir: &std::path::Path,
        schema: pg_schema::PgSchema,
    ) -> StoreResult<std::sync::Arc<dyn Store>> {
        Ok(match self {
            Self::Sqlite => std::sync::Arc::new(sqlite::SqliteStore::open(data_dir)?),
            Self::Postgres(url) => std::sync::Arc::new(postgres::PgStore::open_with(url, schema)?),
        })
    }

    /// Where it is, for messages (a PostgreSQL password is left out).
    pub fn describe(&self, data_dir: &std::path::Path) -> String {
        match self {
            Self::Sqlite => data_dir.join(sqlite::DB_FILE).display().to_string(),
            Self::Postgres(url) => url
                .parse::<tokio_postgres::Config>()
                .map(|config| postgres::describe(&config))
                .unwrap_or_else(|_| "postgres (unparsable URL)".to_owned()),
        }
    }
}

/// Message text of an alert.
pub(crate) fn alert_message(kind: AlertKind, hostname: Option<&str>, detail: &str) -> String {
    match (kind, hostname) {
        (AlertKind::HostOverdue, Some(name)) => format!("host {name} is overdue: {detail}"),
        (AlertKind::HostRecovered, Some(name)) => format!("host {name} is polling again"),
        (_, _) => detail.to_owned(),
    }
}

#[cfg(test)]
mod scale_tests;
#[cfg(test)]
mod tests;
