//! The store's calls, split by concern, and [`Store`], all of them together.

use std::sync::Arc;

use bosun_proto::admin::{
    Alert, DesiredAccepted, Event, HostDetail, HostSummary, JobAccepted, JobRecord, JobState,
};
use bosun_proto::desired_status::DesiredRevision;
use bosun_proto::job::JobResult;
use bosun_proto::oplog::OperationRecord;
use uuid::Uuid;

use crate::deadman::DeadManConfig;
use crate::secret::SecretHash;

use super::artifacts::ArtifactBytes;
use super::audit_trail::AuditQuery;
use super::error::StoreResult;
use super::host_removal::RemovedHost;
use super::model::*;
use super::operator_tokens::{NewOperatorToken, OperatorTokenRecord};
use super::restored::RestoredHub;
use super::retention::{PruneCursor, PruneStep, RetentionConfig};
use super::{dashboard, hub_keys};

/// The store's calls about operator tokens, the first admin, enrollment tokens.
pub trait AccessStore: Send + Sync {
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
    /// The newest `limit` enrollment tokens the hub keeps, newest first (see
    /// `enroll::list_tokens`).
    fn list_enroll_tokens(
        &self,
        now_ms: i64,
        limit: u32,
    ) -> StoreResult<Vec<bosun_proto::admin::EnrollTokenInfo>>;
    /// Revokes an unused enrollment token by its id (see `enroll::revoke_token`).
    fn revoke_enroll_token(
        &self,
        token_id: &str,
        now_ms: i64,
    ) -> StoreResult<bosun_proto::admin::EnrollTokenState>;
}

/// The store's calls about hosts: enrollment, host keys, approval and removal, the fleet and host views, escrow.
pub trait HostStore: Send + Sync {
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
    /// Sets and removes labels on a host in one change (`UnknownHost`, `TooManyLabels`); gives
    /// the host's labels after it.
    fn change_host_labels(
        &self,
        host_id: Uuid,
        change: &bosun_proto::capabilities::LabelChange,
        now_ms: i64,
    ) -> StoreResult<std::collections::BTreeMap<String, String>>;
    /// The hosts carrying every label and capability word `filter` names.
    fn hosts_matching(&self, filter: &super::host_profile::HostFilter) -> StoreResult<Vec<Uuid>>;
    /// Counts for metrics.
    fn host_counts(&self) -> StoreResult<HostCounts>;
    /// The one id of `kind` that `text` is or starts with (see [`super::id_lookup`]):
    /// `BadIdPrefix`, `UnknownId`, `AmbiguousId` (listing candidates) otherwise.
    fn resolve_id(&self, kind: super::id_lookup::IdKind, text: &str) -> StoreResult<Uuid>;
    /// The host's history buckets in `[from_ms, to_ms)`, newest first, at most
    /// [`history::MAX_POINTS`](super::history::MAX_POINTS) (an unknown host has none).
    fn host_history(
        &self,
        host_id: Uuid,
        from_ms: i64,
        to_ms: i64,
    ) -> StoreResult<Vec<super::history::HistoryBucket>>;
}

/// A heartbeat on its way ([`PollStore::heartbeat`]).
pub type Heartbeat<'a> =
    futures::future::BoxFuture<'a, Option<StoreResult<(PollRecorded, PollView)>>>;

/// The store's calls about polls and the sweeps: recording polls, what a poll answers, durability, the dead-man and backup sweeps, wake-ups.
pub trait PollStore: Send + Sync {
    /// Records a batch of polls in one transaction (group commit). One refused poll (unknown
    /// or inactive host, or one that failed after writing) leaves the others intact. The
    /// outer error means the whole batch failed; the inner ones are per poll, in order, each
    /// with the state the poll is answered with. The batch is on disk when this returns if
    /// any of its polls is [`PollRecorded::durable`]; otherwise once [`Store::flush`](crate::store::PollStore::flush) ran.
    fn record_polls(
        &self,
        polls: Vec<PollRecord>,
    ) -> StoreResult<Vec<StoreResult<(PollRecorded, PollView)>>>;
    /// Records a batch as [`Store::record_polls`](crate::store::PollStore::record_polls) does
    /// and returns once it is committed, without waiting for the disk: before answering a
    /// poll that must be durable ([`PollRecorded::durable`]), call
    /// [`Store::sync`](crate::store::PollStore::sync). The poll writer records its next batch
    /// while the last one's sync runs (decision 0134).
    fn commit_polls(
        &self,
        polls: Vec<PollRecord>,
    ) -> StoreResult<Vec<StoreResult<(PollRecorded, PollView)>>>;
    /// Desired state and queued jobs for a host.
    fn poll_view(&self, host_id: Uuid) -> StoreResult<PollView>;
    /// Records one poll on the calling thread, at once, when the store can without waiting:
    /// a SQLite store whose writer is free (no batch is being recorded) and a poll that may
    /// wait for the disk ([`PollRecord::may_wait`]). `None`: it could not; send the poll to the
    /// poll writer. A poll recorded here is committed but not yet durable: when it says it must
    /// be ([`PollRecorded::durable`]), call [`Store::sync`](crate::store::PollStore::sync) before answering it.
    fn record_poll_now(&self, poll: &PollRecord) -> Option<StoreResult<(PollRecorded, PollView)>>;
    /// Records a heartbeat from the caller's task, without the poll writer, when the store
    /// can: a PostgreSQL store writing, in one statement, the host row it last wrote itself
    /// (decisions 0129, 0130). `None`: it cannot; the future's `None`: it could not after all
    /// (it wrote nothing of the poll, or lost its session under the statement, which the poll
    /// writer's read of the row settles either way). Either way, send the poll to the poll
    /// writer. What it
    /// records may wait for the disk, as [`Store::flush`](crate::store::PollStore::flush) says.
    fn heartbeat<'a>(self: Arc<Self>, poll: &'a PollRecord) -> Option<Heartbeat<'a>>;
    /// Makes durable what was committed ([`Store::record_poll_now`](crate::store::PollStore::record_poll_now)).
    fn sync(&self) -> StoreResult<()>;
    /// Makes the batches of polls [`Store::record_polls`](crate::store::PollStore::record_polls) left to be made durable later
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
    /// Adds finished history buckets to the stored ones in one transaction ([`super::history`]);
    /// returns how many rows they reached (a removed host's are dropped).
    fn record_history(&self, buckets: &[super::history::HistoryBucket]) -> StoreResult<usize>;
    /// Starts calling `wake` for writes other hub replicas make that held long-polls wait for
    /// (`Some(host)`), or for every host when some may have been missed (`None`). A store only
    /// one hub uses has no other replicas and does nothing.
    fn watch_wakeups(&self, wake: WakeUp) {
        let _ = wake;
    }
}

/// The store's calls about desired state, the operation log and jobs.
pub trait JobStore: Send + Sync {
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
    fn finish_job(
        &self,
        host_id: Uuid,
        result: &JobResult,
        now_ms: i64,
    ) -> StoreResult<Option<Alert>>;
    /// The newest `limit` jobs of a host, oldest first.
    fn list_jobs(&self, host_id: Uuid, limit: u32) -> StoreResult<Vec<JobRecord>>;
    /// Cancels a queued job (see `jobs::cancel_job`); gives its state after.
    fn cancel_job(&self, host_id: Uuid, job_id: Uuid, now_ms: i64) -> StoreResult<JobState>;
}

/// The store's calls about alerts, silences, events and the dashboard's facts.
pub trait AlertStore: Send + Sync {
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
    /// The newest `limit` silences in force at `now_ms`, oldest first.
    fn list_silences(
        &self,
        now_ms: i64,
        limit: u32,
    ) -> StoreResult<Vec<bosun_proto::alert_triage::Silence>>;
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
}

/// The store's calls about the audit trail and retention.
pub trait AuditStore: Send + Sync {
    /// Deletes what is past its retention bound at `now_ms` ([`retention`](super::retention)), going on from
    /// `from` for about `budget`: as several transactions of at most
    /// [`retention::PRUNE_BATCH`](super::retention::PRUNE_BATCH) rows per statement, a few milliseconds each, so polls are
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
}

/// The store's calls about operator-signed artifacts.
pub trait ArtifactStore: Send + Sync {
    /// Stores an artifact's bytes under their SHA-256 (the newest [`MAX_ARTIFACTS`](super::MAX_ARTIFACTS) are kept):
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
    /// The newest `limit` stored artifacts, newest first.
    fn list_artifacts(&self, limit: u32) -> StoreResult<Vec<bosun_proto::admin::ArtifactInfo>>;
}

/// The store's calls about the hub's own keys, its pins, and the restore mark.
pub trait HubKeyStore: Send + Sync {
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
}

/// The hub's persistent state: every part of it, for the callers that need them all (the
/// hub itself, hub backups, tests). A handler names the part it uses.
pub trait Store:
    AccessStore
    + HostStore
    + PollStore
    + JobStore
    + AlertStore
    + AuditStore
    + ArtifactStore
    + HubKeyStore
    + std::fmt::Debug
    + 'static
{
}

impl<T> Store for T where
    T: AccessStore
        + HostStore
        + PollStore
        + JobStore
        + AlertStore
        + AuditStore
        + ArtifactStore
        + HubKeyStore
        + std::fmt::Debug
        + 'static
{
}
