//! The agent's journal: one SQLite database (WAL, `synchronous=FULL`) that
//! makes the agent crash-safe and auditable.
//!
//! It holds:
//! - **operations and their steps** — the intent is written before each
//!   Proxmox call ([`Store::step_intent`]), the UPID after it
//!   ([`Store::step_sent`]), the outcome when it ends
//!   ([`Store::step_finished`]); an operation ends `done`, `failed` or
//!   `compensated` ([`Store::finish_operation`]);
//! - **replay on start** — [`Store::unfinished_operations`] lists every
//!   operation still `running` with its last step, for the reconciler to
//!   resume or roll back (an `intent` step may or may not have reached
//!   Proxmox: look before retrying; a `sent` step has a UPID to follow);
//! - **job runs and nonces** — [`Store::claim_job`] records a verified job's
//!   nonce and run in one transaction, so a job id runs at most once and a
//!   nonce is seen once, across restarts;
//! - **guest provenance** — which operation created a guest and whether the
//!   agent marked it scratch ([`Store::record_created`],
//!   [`Store::mark_scratch`]); the gate (`crate::trust::gate`) reads it from
//!   here and nowhere else;
//! - **local-API token hashes** — SHA-256 only, one per guest;
//! - **backup outcomes** — how each backup ended (storage, archive, size),
//!   written with its operation's end; [`Store::last_backups`] gives the
//!   newest per (guest, storage) for the hub report, and
//!   [`JournalHandle::backups_changed`] wakes the hub loop when one lands;
//! - **the job-result outbox** — a result is delivered until the hub
//!   acknowledges it, across restarts ([`Store::queue_job_result`]);
//! - **the cached desired state** with its generation, for acting offline;
//! - **the audit log** — append-only and hash-chained (see [`audit`]).
//!
//! SQLite is owned by one thread. Async code talks to it through a cloneable
//! [`JournalHandle`]: each call sends a closure over a channel to the journal
//! thread and awaits the answer, so no async task ever blocks on SQLite.
//!
//! ```text
//!  tasks ──JournalHandle::call(f)──► mpsc ──► journal thread (owns Store)
//!    ▲                                               │
//!    └────────────── oneshot (result) ◄──────────────┘
//! ```

pub mod audit;
pub mod audit_retention;
mod backups;
mod break_glass;
mod controllers;
mod data_plan;
mod floor;
mod golden;
mod golden_builds;
pub mod guest_audit;
mod guests;
mod jobs;
mod late_landings;
mod outbox;
mod records;
mod restore_results;
mod schema;
mod store;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};

use tokio::sync::{oneshot, watch};

pub use audit::{AuditEntry, AuditEvent, BrokenLink, ChainVerdict, GENESIS_HASH};
pub use audit_retention::{AuditRetention, Pruned};
pub use backups::{ArchiveProof, BackupOutcome, LastBackup};
pub use break_glass::{
    CLOSED_ACTION as BREAK_GLASS_CLOSED, COMMAND_ACTION as BREAK_GLASS_COMMAND, Door, DoorClosed,
    OPENED_ACTION as BREAK_GLASS_OPENED, SupportCommand,
};
pub use controllers::{ControllerRecord, ControllerState, OwnSnapshot};
pub use data_plan::StoredPlan;
pub use floor::StoredFloor;
pub use golden::{GoldenRecord, GoldenSignature, GoldenSource};
pub use golden_builds::{GOLDEN_BUILT_ACTION, GoldenBuild};
pub use guest_audit::{GuestAuditRow, OPERATION_FINISHED};
pub use late_landings::LateLanding;
pub use outbox::{PendingResult, Refusal};
pub use records::{
    CacheOutcome, CachedDesiredState, GuestProvenance, GuestToken, JobClaim, JobOutcome, JobRun,
    NewOperation, OpId, OpStatus, Operation, Step, StepOutcome, StepState, TokenHash, TokenOwner,
    Tombstone, UnfinishedOperation, identity_tag,
};
pub use restore_results::{GoodArchive, LastRestoreTest, RestoreTestResult, TestOutcome};
pub use schema::SCHEMA_VERSION;
pub use store::Store;

use crate::clock::SharedClock;

/// Everything that can go wrong in the journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The database file could not be opened or configured.
    #[error("failed to open the journal at {path}")]
    Open {
        /// The database path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: rusqlite::Error,
    },
    /// The database file could not be created.
    #[error("failed to create the journal file {path}")]
    Create {
        /// The database path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// SQLite refused write-ahead logging.
    #[error("the journal at {path} runs in {mode} mode, not wal")]
    NoWal {
        /// The database path.
        path: PathBuf,
        /// The mode SQLite reported.
        mode: String,
    },
    /// The database was written by a newer agent.
    #[error("journal schema version {found} is newer than this agent's {known}")]
    SchemaTooNew {
        /// Version found in the file.
        found: i64,
        /// Version this agent knows.
        known: i64,
    },
    /// A migration failed (and was rolled back).
    #[error("failed to migrate the journal to schema version {version}")]
    Migrate {
        /// The version being migrated to.
        version: i64,
        /// The cause.
        #[source]
        source: rusqlite::Error,
    },
    /// A statement failed.
    #[error("journal query failed: {operation}")]
    Query {
        /// What the journal was doing.
        operation: &'static str,
        /// The cause.
        #[source]
        source: rusqlite::Error,
    },
    /// A value could not be encoded as JSON.
    #[error("failed to encode {what} as json")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// A stored value does not parse: the file was edited or damaged.
    #[error("journal holds an invalid value in {table}.{column}: {value:?}")]
    Corrupt {
        /// Table.
        table: &'static str,
        /// Column.
        column: &'static str,
        /// The value found.
        value: String,
    },
    /// No such operation.
    #[error("operation {op_id} is not in the journal")]
    UnknownOperation {
        /// The id asked for.
        op_id: OpId,
    },
    /// The operation already ended.
    #[error("operation {op_id} already ended as {status}")]
    OperationEnded {
        /// The operation.
        op_id: OpId,
        /// How it ended.
        status: OpStatus,
    },
    /// An operation can only be finished with a terminal status.
    #[error("operation {op_id} cannot be finished as {status}")]
    NotTerminal {
        /// The operation.
        op_id: OpId,
        /// The status asked for.
        status: OpStatus,
    },
    /// No such step.
    #[error("operation {op_id} has no step {seq}")]
    UnknownStep {
        /// The operation.
        op_id: OpId,
        /// The step asked for.
        seq: u32,
    },
    /// A new step or the operation's end came while a step was still open.
    #[error("step {seq} of operation {op_id} is still {state}")]
    StepStillOpen {
        /// The operation.
        op_id: OpId,
        /// The open step.
        seq: u32,
        /// Its state.
        state: StepState,
    },
    /// A step cannot move between these states.
    #[error("step {seq} of operation {op_id} cannot go from {from} to {to}")]
    StepTransition {
        /// The operation.
        op_id: OpId,
        /// The step.
        seq: u32,
        /// Its current state.
        from: StepState,
        /// The state asked for.
        to: StepState,
    },
    /// The job id was already claimed (it runs at most once).
    #[error("job {job_id} was already claimed (outcome: {outcome:?})")]
    JobAlreadyRun {
        /// The job id.
        job_id: String,
        /// How its run ended, if it did.
        outcome: Option<JobOutcome>,
    },
    /// The nonce was already seen.
    #[error("nonce already used by job {first_job_id}")]
    NonceReused {
        /// The job that used it first.
        first_job_id: String,
    },
    /// No run of this job was claimed.
    #[error("job {job_id} was never claimed")]
    UnknownJob {
        /// The job id.
        job_id: String,
    },
    /// Another operation already recorded creating this vmid.
    #[error("vmid {vmid} is already recorded as created by operation {created_by_op}")]
    VmidAlreadyRecorded {
        /// The vmid.
        vmid: u32,
        /// The operation that recorded it.
        created_by_op: OpId,
    },
    /// Only the operation that created a guest may mark it scratch.
    #[error("operation {op_id} may not mark vmid {vmid} scratch (created by {created_by_op:?})")]
    ScratchRefused {
        /// The vmid.
        vmid: u32,
        /// The operation that asked.
        op_id: OpId,
        /// The operation that created it, if the agent did.
        created_by_op: Option<OpId>,
    },
    /// The token hash already belongs to another guest.
    #[error("the token minted for guest {guest_id} collides with another guest's token")]
    TokenCollision {
        /// The guest the token was minted for.
        guest_id: String,
    },
    /// The generation does not fit SQLite's integer.
    #[error("desired-state generation {generation} is too large to store")]
    GenerationTooLarge {
        /// The generation.
        generation: u64,
    },
    /// A backup outcome was recorded for an operation that names no guest.
    #[error("operation {op_id} names no guest; its backup outcome cannot be recorded")]
    BackupWithoutGuest {
        /// The operation.
        op_id: OpId,
    },
    /// A size does not fit SQLite's integer.
    #[error("{what} {value} is too large to store")]
    SizeTooLarge {
        /// What the value is.
        what: &'static str,
        /// The value.
        value: u64,
    },
    /// The journal thread could not be started.
    #[error("failed to start the journal thread")]
    Spawn(#[source] std::io::Error),
    /// The journal thread has stopped (closed, or it panicked).
    #[error("the journal is closed")]
    Closed,
}

type Job = Box<dyn FnOnce(&mut Store) + Send>;

enum Command {
    Run(Job),
    Close(oneshot::Sender<()>),
}

/// A cloneable async handle to the journal thread.
///
/// Once the thread has stopped (after [`JournalHandle::close`], or if a call
/// panicked on it) every call returns [`JournalError::Closed`]; the agent
/// cannot act safely without its journal and should shut down.
#[derive(Debug, Clone)]
pub struct JournalHandle {
    tx: mpsc::Sender<Command>,
    /// Counts backup outcomes recorded through this handle (and its clones).
    backups: Arc<watch::Sender<u64>>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Run(_) => f.write_str("Run"),
            Command::Close(_) => f.write_str("Close"),
        }
    }
}

impl JournalHandle {
    /// Opens the journal at `path` on a new dedicated thread.
    pub async fn open(path: &Path, clock: SharedClock) -> Result<Self, JournalError> {
        let (tx, rx) = mpsc::channel::<Command>();
        let (opened_tx, opened_rx) = oneshot::channel();
        let path = path.to_path_buf();
        std::thread::Builder::new()
            .name("journal".to_owned())
            .spawn(move || {
                let mut store = match Store::open(&path, clock) {
                    Ok(store) => {
                        let _ = opened_tx.send(Ok(()));
                        store
                    }
                    Err(err) => {
                        let _ = opened_tx.send(Err(err));
                        return;
                    }
                };
                tracing::debug!(path = %path.display(), "journal open");
                while let Ok(command) = rx.recv() {
                    match command {
                        Command::Run(job) => job(&mut store),
                        Command::Close(done) => {
                            drop(store);
                            let _ = done.send(());
                            return;
                        }
                    }
                }
            })
            .map_err(JournalError::Spawn)?;
        opened_rx.await.map_err(|_| JournalError::Closed)??;
        Ok(Self {
            tx,
            backups: Arc::new(watch::Sender::new(0)),
        })
    }

    /// Runs `f` on the journal thread and returns its result.
    pub async fn call<T, F>(&self, f: F) -> Result<T, JournalError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Store) -> Result<T, JournalError> + Send + 'static,
    {
        let (reply_tx, reply_rx) = oneshot::channel();
        let job: Job = Box::new(move |store| {
            let _ = reply_tx.send(f(store));
        });
        self.tx
            .send(Command::Run(job))
            .map_err(|_| JournalError::Closed)?;
        reply_rx.await.map_err(|_| JournalError::Closed)?
    }

    /// Closes the database (checkpointing the WAL) and stops the thread.
    /// Calls from other clones fail with [`JournalError::Closed`] afterwards.
    pub async fn close(&self) -> Result<(), JournalError> {
        let (done_tx, done_rx) = oneshot::channel();
        self.tx
            .send(Command::Close(done_tx))
            .map_err(|_| JournalError::Closed)?;
        done_rx.await.map_err(|_| JournalError::Closed)
    }

    /// See [`Store::begin_operation`].
    pub async fn begin_operation(&self, new: NewOperation) -> Result<OpId, JournalError> {
        self.call(move |s| s.begin_operation(&new)).await
    }

    /// See [`Store::begin_correlated_operation`].
    pub async fn begin_correlated_operation(
        &self,
        new: NewOperation,
        correlation_id: Option<String>,
    ) -> Result<OpId, JournalError> {
        self.call(move |s| s.begin_correlated_operation(&new, correlation_id.as_deref()))
            .await
    }

    /// See [`Store::recent_operations`]; each with its steps.
    pub async fn recent_operations(
        &self,
        limit: u32,
    ) -> Result<Vec<(Operation, Vec<Step>)>, JournalError> {
        self.call(move |s| {
            s.recent_operations(limit)?
                .into_iter()
                .map(|op| {
                    let steps = s.steps(op.op_id)?;
                    Ok((op, steps))
                })
                .collect()
        })
        .await
    }

    /// See [`Store::step_intent`].
    pub async fn step_intent(
        &self,
        op_id: OpId,
        name: impl Into<String>,
        detail: serde_json::Value,
    ) -> Result<u32, JournalError> {
        let name = name.into();
        self.call(move |s| s.step_intent(op_id, &name, &detail))
            .await
    }

    /// See [`Store::step_sent`].
    pub async fn step_sent(
        &self,
        op_id: OpId,
        seq: u32,
        upid: Option<String>,
    ) -> Result<(), JournalError> {
        self.call(move |s| s.step_sent(op_id, seq, upid.as_deref()))
            .await
    }

    /// See [`Store::step_finished`].
    pub async fn step_finished(
        &self,
        op_id: OpId,
        seq: u32,
        outcome: StepOutcome,
    ) -> Result<(), JournalError> {
        self.call(move |s| s.step_finished(op_id, seq, &outcome))
            .await
    }

    /// See [`Store::finish_operation`].
    pub async fn finish_operation(
        &self,
        op_id: OpId,
        status: OpStatus,
        error: Option<String>,
    ) -> Result<(), JournalError> {
        self.call(move |s| s.finish_operation(op_id, status, error.as_deref()))
            .await
    }

    /// See [`Store::operation`].
    pub async fn operation(&self, op_id: OpId) -> Result<Option<Operation>, JournalError> {
        self.call(move |s| s.operation(op_id)).await
    }

    /// See [`Store::steps`].
    pub async fn steps(&self, op_id: OpId) -> Result<Vec<Step>, JournalError> {
        self.call(move |s| s.steps(op_id)).await
    }

    /// See [`Store::unfinished_operations`].
    pub async fn unfinished_operations(&self) -> Result<Vec<UnfinishedOperation>, JournalError> {
        self.call(|s| s.unfinished_operations()).await
    }

    /// See [`Store::claim_job`].
    pub async fn claim_job(&self, claim: JobClaim) -> Result<(), JournalError> {
        self.call(move |s| s.claim_job(&claim)).await
    }

    /// See [`Store::finish_job`].
    pub async fn finish_job(
        &self,
        job_id: String,
        outcome: JobOutcome,
        op_id: Option<OpId>,
        detail: Option<String>,
    ) -> Result<(), JournalError> {
        self.call(move |s| s.finish_job(&job_id, outcome, op_id, detail.as_deref()))
            .await
    }

    /// See [`Store::finish_job_with_result`].
    pub async fn finish_job_with_result(
        &self,
        job_id: String,
        outcome: JobOutcome,
        op_id: Option<OpId>,
        detail: Option<String>,
        result_body: String,
    ) -> Result<(), JournalError> {
        self.call(move |s| {
            s.finish_job_with_result(&job_id, outcome, op_id, detail.as_deref(), &result_body)
        })
        .await
    }

    /// See [`Store::queue_job_result`].
    pub async fn queue_job_result(&self, job_id: String, body: String) -> Result<(), JournalError> {
        self.call(move |s| s.queue_job_result(&job_id, &body)).await
    }

    /// See [`Store::record_refusals`].
    pub async fn record_refusals(&self, refusals: Vec<Refusal>) -> Result<(), JournalError> {
        self.call(move |s| s.record_refusals(&refusals)).await
    }

    /// See [`Store::undelivered_job_results`].
    pub async fn undelivered_job_results(&self) -> Result<Vec<PendingResult>, JournalError> {
        self.call(|s| s.undelivered_job_results()).await
    }

    /// See [`Store::mark_job_result_delivered`].
    pub async fn mark_job_result_delivered(&self, job_id: String) -> Result<bool, JournalError> {
        self.call(move |s| s.mark_job_result_delivered(&job_id))
            .await
    }

    /// See [`Store::job_run`].
    pub async fn job_run(&self, job_id: String) -> Result<Option<JobRun>, JournalError> {
        self.call(move |s| s.job_run(&job_id)).await
    }

    /// See [`Store::nonce_seen`].
    pub async fn nonce_seen(&self, nonce: String) -> Result<bool, JournalError> {
        self.call(move |s| s.nonce_seen(&nonce)).await
    }

    /// See [`Store::prune_nonces`].
    pub async fn prune_nonces(
        &self,
        before: jiff::Timestamp,
        limit: u32,
    ) -> Result<usize, JournalError> {
        self.call(move |s| s.prune_nonces(before, limit)).await
    }

    /// See [`Store::record_created`].
    pub async fn record_created(
        &self,
        op_id: OpId,
        vmid: u32,
        guest_id: Option<String>,
    ) -> Result<(), JournalError> {
        self.call(move |s| s.record_created(op_id, vmid, guest_id.as_deref()))
            .await
    }

    /// See [`Store::record_scratch`].
    pub async fn record_scratch(&self, op_id: OpId, vmid: u32) -> Result<(), JournalError> {
        self.call(move |s| s.record_scratch(op_id, vmid)).await
    }

    /// See [`Store::record_recovered`].
    pub async fn record_recovered(
        &self,
        op_id: OpId,
        guest_id: String,
        lost_vmid: u32,
        vmid: u32,
    ) -> Result<(), JournalError> {
        self.call(move |s| s.record_recovered(op_id, &guest_id, lost_vmid, vmid))
            .await
    }

    /// See [`Store::mark_scratch`].
    pub async fn mark_scratch(&self, op_id: OpId, vmid: u32) -> Result<(), JournalError> {
        self.call(move |s| s.mark_scratch(op_id, vmid)).await
    }

    /// See [`Store::provenance`].
    pub async fn provenance(&self, vmid: u32) -> Result<Option<GuestProvenance>, JournalError> {
        self.call(move |s| s.provenance(vmid)).await
    }

    /// See [`Store::all_provenance`].
    pub async fn all_provenance(&self) -> Result<Vec<GuestProvenance>, JournalError> {
        self.call(|s| s.all_provenance()).await
    }

    /// See [`Store::retire_guest`].
    pub async fn retire_guest(&self, op_id: OpId, vmid: u32) -> Result<bool, JournalError> {
        self.call(move |s| s.retire_guest(op_id, vmid)).await
    }

    /// See [`Store::tombstones`].
    pub async fn tombstones(&self) -> Result<Vec<Tombstone>, JournalError> {
        self.call(|s| s.tombstones()).await
    }

    /// See [`Store::watch_late_landing`].
    pub async fn watch_late_landing(
        &self,
        op_id: OpId,
        vmid: u32,
        guest_id: Option<String>,
        asked_at: jiff::Timestamp,
        watch_until: jiff::Timestamp,
    ) -> Result<(), JournalError> {
        self.call(move |s| {
            s.watch_late_landing(op_id, vmid, guest_id.as_deref(), asked_at, watch_until)
        })
        .await
    }

    /// The journal's clock reading (the time its records are stamped with).
    pub async fn now(&self) -> Result<jiff::Timestamp, JournalError> {
        self.call(|s| Ok(s.now())).await
    }

    /// See [`Store::late_landings`].
    pub async fn late_landings(&self) -> Result<Vec<LateLanding>, JournalError> {
        self.call(|s| s.late_landings()).await
    }

    /// See [`Store::end_late_landing`].
    pub async fn end_late_landing(
        &self,
        op_id: OpId,
        vmid: u32,
        outcome: &'static str,
    ) -> Result<bool, JournalError> {
        self.call(move |s| s.end_late_landing(op_id, vmid, outcome))
            .await
    }

    /// See [`Store::forget_guest`].
    pub async fn forget_guest(&self, op_id: OpId, vmid: u32) -> Result<bool, JournalError> {
        self.call(move |s| s.forget_guest(op_id, vmid)).await
    }

    /// See [`Store::store_token_hash`].
    pub async fn store_token_hash(
        &self,
        guest_id: String,
        vmid: u32,
        hash: TokenHash,
    ) -> Result<(), JournalError> {
        self.call(move |s| s.store_token_hash(&guest_id, vmid, &hash))
            .await
    }

    /// See [`Store::token_owner`].
    pub async fn token_owner(&self, hash: TokenHash) -> Result<Option<TokenOwner>, JournalError> {
        self.call(move |s| s.token_owner(&hash)).await
    }

    /// See [`Store::token_of_guest`].
    pub async fn token_of_guest(
        &self,
        guest_id: String,
    ) -> Result<Option<GuestToken>, JournalError> {
        self.call(move |s| s.token_of_guest(&guest_id)).await
    }

    /// See [`Store::revoke_token`].
    pub async fn revoke_token(&self, guest_id: String) -> Result<bool, JournalError> {
        self.call(move |s| s.revoke_token(&guest_id)).await
    }

    /// See [`Store::cache_desired_state`].
    pub async fn cache_desired_state(
        &self,
        generation: u64,
        body: String,
    ) -> Result<CacheOutcome, JournalError> {
        self.call(move |s| s.cache_desired_state(generation, &body))
            .await
    }

    /// See [`Store::cache_correlated_desired_state`].
    pub async fn cache_correlated_desired_state(
        &self,
        generation: u64,
        body: String,
        correlation_id: Option<String>,
    ) -> Result<CacheOutcome, JournalError> {
        self.call(move |s| {
            s.cache_correlated_desired_state(generation, &body, correlation_id.as_deref())
        })
        .await
    }

    /// See [`Store::cached_desired_state`].
    pub async fn cached_desired_state(&self) -> Result<Option<CachedDesiredState>, JournalError> {
        self.call(|s| s.cached_desired_state()).await
    }

    /// See [`Store::append_audit`].
    pub async fn append_audit(&self, event: AuditEvent) -> Result<u64, JournalError> {
        self.call(move |s| s.append_audit(&event)).await
    }

    /// See [`Store::ack_audit`].
    pub async fn ack_audit(
        &self,
        acked_seq: u64,
        retention: AuditRetention,
    ) -> Result<Pruned, JournalError> {
        self.call(move |s| s.ack_audit(acked_seq, retention)).await
    }

    /// Records the hub's acknowledgement of the audit tail (`audit_acked_seq` of a poll
    /// answer) and prunes what the default [`AuditRetention`] no longer needs. Cheap when
    /// nothing moved; a failure is logged and leaves every row in place.
    pub async fn record_audit_ack(&self, acked_seq: u64) {
        match self.ack_audit(acked_seq, AuditRetention::default()).await {
            Ok(pruned) if pruned.rows > 0 => tracing::info!(
                acked_seq = pruned.acked_seq,
                through_seq = pruned.through_seq,
                rows = pruned.rows,
                "acknowledged audit rows beyond the retention bound pruned"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(
                acked_seq,
                error = %bosun_errchain::error_chain(&e),
                "could not record the hub's audit acknowledgement; nothing pruned"
            ),
        }
    }

    /// See [`Store::audit_acked`].
    pub async fn audit_acked(&self) -> Result<u64, JournalError> {
        self.call(|s| s.audit_acked()).await
    }

    /// See [`Store::verify_audit_chain`].
    pub async fn verify_audit_chain(&self) -> Result<ChainVerdict, JournalError> {
        self.call(|s| s.verify_audit_chain()).await
    }

    /// See [`Store::audit_head`].
    pub async fn audit_head(&self) -> Result<(u64, [u8; 32]), JournalError> {
        self.call(|s| s.audit_head()).await
    }

    /// See [`Store::audit_since`].
    pub async fn audit_since(
        &self,
        after_seq: u64,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, JournalError> {
        self.call(move |s| s.audit_since(after_seq, limit)).await
    }

    /// See [`Store::guest_audit`].
    pub async fn guest_audit(
        &self,
        guest_id: String,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<GuestAuditRow>, JournalError> {
        self.call(move |s| s.guest_audit(&guest_id, before, limit))
            .await
    }
}
