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
//!   [`Store::mark_scratch`]), or which signed `adopt` job brought it in
//!   ([`Store::record_adopted`]); the gate (`crate::trust::gate`) reads it from
//!   here and nowhere else;
//! - **local-API token hashes** — SHA-256 only, one per guest;
//! - **backup outcomes** — how each backup ended (storage, archive, size),
//!   written with its operation's end; [`Store::last_backups`] gives the
//!   newest per (guest, storage) for the hub report, and
//!   [`JournalHandle::backups_changed`] wakes the hub loop when one lands;
//! - **the job-result outbox** — a result is delivered until the hub
//!   acknowledges it, across restarts ([`Store::queue_job_result`]);
//! - **the cached desired state** with its generation, for acting offline, and the newest
//!   generation a reconcile pass applied, reported the same after a restart;
//! - **failure counts per guest** — consecutive failed starts and DR restores, so a guest
//!   that keeps failing reaches `broken` across restarts ([`Store::count_failure`]);
//! - **guest addresses** — which address went to which guest, so none is handed out
//!   twice ([`Store::assign_address`]);
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

// The bottom: what every table's module builds on.
mod error;
mod handle;
mod records;
mod schema;
mod store;

// The tables, each its `Store` methods and their `JournalHandle` calls; none imports this
// module, and none imports a table that imports it back.
mod adopted;
mod applied;
pub mod audit;
pub mod audit_retention;
mod backups;
mod break_glass;
mod bulk_archives;
mod controllers;
mod data_plan;
mod floor;
mod golden;
mod golden_archives;
mod golden_builds;
mod golden_serials;
mod guest_access;
pub mod guest_addresses;
pub mod guest_audit;
mod guest_changes;
mod guest_failures;
mod guests;
mod held_credentials;
mod jobs;
mod late_landings;
mod operations;
mod outbox;
mod restore_results;
mod verifications;

#[cfg(test)]
mod tests;

pub use audit::{AuditEntry, AuditEvent, BrokenLink, ChainVerdict, GENESIS_HASH};
pub use audit_retention::{AuditRetention, Pruned};
pub use backups::{ArchiveProof, BackupOutcome, LastBackup, RecordedArchive};
pub use break_glass::{
    CLOSED_ACTION as BREAK_GLASS_CLOSED, COMMAND_ACTION as BREAK_GLASS_COMMAND, Door, DoorClosed,
    OPENED_ACTION as BREAK_GLASS_OPENED, SupportCommand,
};
pub use bulk_archives::{BulkArchived, LastBulk};
pub use controllers::{ControllerRecord, ControllerState, OwnSnapshot};
pub use data_plan::StoredPlan;
pub use error::JournalError;
pub use floor::StoredFloor;
pub use golden::{GoldenRecord, GoldenSignature, GoldenSource};
pub use golden_archives::{
    GOLDEN_PRUNE_FAILED_ACTION, GOLDEN_PRUNED_ACTION, GoldenOutcomeRow, KeptArchive,
    MAX_KEPT_LISTED,
};
pub use golden_builds::{
    GOLDEN_BUILT_ACTION, GOLDEN_VERIFIED_ACTION, GoldenBuild, ListedBuild, MAX_LISTED_BUILDS,
};
pub use golden_serials::GoldenSerialKind;
pub use guest_addresses::{AddressSource, AssignedAddress, Assignment};
pub use guest_audit::{GuestAuditRow, OPERATION_FINISHED};
pub use guest_failures::{FailureCount, FailureCounts, FailureKind};
pub use handle::JournalHandle;
pub use held_credentials::HeldCredential;
pub use late_landings::LateLanding;
pub use outbox::{PendingResult, Refusal};
pub use records::{
    AdoptedAs, CacheOutcome, CachedDesiredState, GuestProvenance, GuestToken, JobClaim, JobOutcome,
    JobRun, NewOperation, OpId, OpStatus, Operation, Step, StepOutcome, StepState, TokenHash,
    TokenOwner, Tombstone, UnfinishedOperation, identity_tag,
};
pub use restore_results::{GoodArchive, LastRestoreTest, RestoreTestResult, TestOutcome};
pub use schema::SCHEMA_VERSION;
pub use store::Store;
pub use verifications::{LastVerification, Verification};
