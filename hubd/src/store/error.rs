//! The store's one error type: what failed, in which operation, with the cause kept.

use bosun_proto::admin::HostStatus;
use uuid::Uuid;

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
    /// What was typed for an id is neither an id nor a prefix of one.
    #[error(
        "{kind} id {text:?} is neither an id nor an id prefix (at least {} hex digits)",
        bosun_proto::ids::MIN_TYPED
    )]
    BadIdPrefix {
        /// The kind of id.
        kind: super::id_kind::IdKind,
        /// What was typed (at most 64 characters of it).
        text: String,
    },
    /// No id of this kind is, or starts with, what was typed.
    #[error("no {kind} id is or starts with {prefix:?}")]
    UnknownId {
        /// The kind of id.
        kind: super::id_kind::IdKind,
        /// What was typed (at most 64 characters of it).
        prefix: String,
    },
    /// More than one id of this kind starts with what was typed.
    #[error(
        "{kind} id prefix {prefix:?} is ambiguous: give one of the ids: {}",
        super::id_kind::listed(candidates, *more)
    )]
    AmbiguousId {
        /// The kind of id.
        kind: super::id_kind::IdKind,
        /// What was typed (at most 64 characters of it).
        prefix: String,
        /// The first ids it matches, in order, at most [`bosun_proto::ids::MAX_CANDIDATES`].
        candidates: Vec<super::id_kind::IdCandidate>,
        /// Whether it matches more than those.
        more: bool,
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
    /// More than one open alert of this kind on the host has a subject starting with what was
    /// typed.
    #[error(
        "host {host_id} has more than one open {kind} alert about a subject starting with \
         `{subject}`: give one of {}{}",
        candidates.join(", "),
        if *more { ", and more" } else { "" }
    )]
    AmbiguousAlert {
        /// The host.
        host_id: Uuid,
        /// The kind asked for.
        kind: &'static str,
        /// The subject typed.
        subject: String,
        /// The first subjects it starts, in order, at most [`bosun_proto::ids::MAX_CANDIDATES`].
        candidates: Vec<String>,
        /// Whether it starts more than those.
        more: bool,
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
    /// The change would leave the host with more labels than a host may carry.
    #[error("host {host_id} would carry {count} labels; a host carries at most {limit}")]
    TooManyLabels {
        /// The host.
        host_id: Uuid,
        /// How many it would carry.
        count: usize,
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
    KeyRotation(#[from] KeyRefusal),
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

/// Why a rotation step was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyRefusal {
    /// A key is staged already: activate it, or it stays.
    #[error("key {pin} is staged already; activate it first")]
    AlreadyStaged {
        /// The staged key.
        pin: String,
    },
    /// The new key is one the hub has had.
    #[error("key {pin} was used by this hub before; stage a new key")]
    KeyReused {
        /// The key.
        pin: String,
    },
    /// Nothing is staged.
    #[error("no key is staged; stage one first (bosun-hubd cert rotate stage)")]
    NothingStaged,
    /// Live hosts do not hold the staged key yet.
    #[error(
        "{missing} of {live} live hosts do not hold the staged key yet ({hosts}); wait for their next poll, or activate with --force and enroll them again"
    )]
    NotHeld {
        /// How many do not.
        missing: u64,
        /// Live hosts in all.
        live: u64,
        /// Some of them, by name.
        hosts: String,
    },
    /// Nothing is being retired.
    #[error("no key is retiring; activate a staged key first")]
    NothingRetiring,
    /// A signed pin set whose serial is not above the published one.
    #[error(
        "the pin set's serial {offered} is not above the published one ({held}); write a new document (bosun-hubd cert rotate document) and sign it"
    )]
    StaleSerial {
        /// The serial offered.
        offered: u64,
        /// The one published.
        held: u64,
    },
}

/// Why a PostgreSQL statement failed.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The server or the connection refused it.
    #[error(transparent)]
    Db(#[from] tokio_postgres::Error),
    /// No connection could be taken from the pool.
    #[error("taking a connection from the pool: {0}")]
    Pool(String),
    /// A statement that must return one row returned none.
    #[error("the query returned no rows")]
    NoRows,
    /// A value could not be sent or read as the type asked for.
    #[error(transparent)]
    Value(#[from] rusqlite::Error),
    /// A column of a type the store does not use.
    #[error("column {index} has type {ty}, which the store does not read")]
    ColumnType {
        /// The column.
        index: usize,
        /// Its type's name.
        ty: String,
    },
}

impl PgError {
    /// Whether the transaction may succeed when run again (a serialization failure or a
    /// deadlock the server broke).
    pub fn retryable(&self) -> bool {
        use tokio_postgres::error::SqlState;
        match self {
            Self::Db(err) => err.code().is_some_and(|code| {
                *code == SqlState::T_R_SERIALIZATION_FAILURE
                    || *code == SqlState::T_R_DEADLOCK_DETECTED
            }),
            _ => false,
        }
    }
}
