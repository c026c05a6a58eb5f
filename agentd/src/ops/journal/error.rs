//! [`JournalError`]: everything that can go wrong in the journal, at the bottom of the
//! journal's modules (every table's module returns it).

use std::path::PathBuf;

use super::records::{JobOutcome, OpId, OpStatus, StepState};

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
    /// A guest would be recorded as another kind than the one the journal holds for it (a
    /// container recovered as a VM, or the reverse).
    #[error("guest {guest_id} is recorded as {recorded}, not {asked}")]
    KindChanged {
        /// The guest.
        guest_id: String,
        /// The kind the journal records.
        recorded: &'static str,
        /// The kind asked for.
        asked: &'static str,
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
    /// The guest id is recorded at another vmid already (an adoption naming it is refused).
    #[error("guest {guest_id} is already recorded at vmid {vmid}")]
    GuestIdAlreadyRecorded {
        /// The guest id.
        guest_id: String,
        /// Where it is recorded.
        vmid: u32,
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
