//! Persistence behind the [`Store`] trait. Methods are synchronous and each runs as one
//! transaction (nothing half-written); async code reaches them through
//! [`crate::Hub::store_call`], which moves the call onto the blocking pool.
//!
//! [`sqlite::SqliteStore`] is the embedded default; [`postgres::PgStore`] keeps the same state in
//! PostgreSQL for any number of hub replicas over one database (decision 0023).

mod codec;
mod error;
mod id_kind;
mod location;
mod model;
mod traits;
mod tx;

pub mod alert_triage;
mod artifact_files;
mod artifacts;
mod audit_keep;
pub mod audit_trail;
mod backend;
pub mod dashboard;
mod dashboard_reads;
mod desired;
mod enroll;
mod escrow;
pub mod history;
pub mod host_key_rotation;
pub mod host_profile;
mod host_removal;
mod host_row;
mod hosts;
pub mod hub_keys;
pub mod id_lookup;
mod jobs;
mod monitored;
pub mod operator_tokens;
mod pending;
mod poll_report;
pub mod postgres;
mod restored;
pub mod retention;
pub mod sqlite;
mod stored_report;
mod sweep;
mod watch;

pub use artifact_files::ARTIFACTS_DIR;
pub use artifacts::{ArtifactBytes, MAX_ARTIFACTS};
pub use audit_trail::{AuditCursor, AuditQuery};
pub use desired::KEEP_RECENT_GENERATIONS;
pub use enroll::MAX_LISTED_TOKENS;
pub use enroll::token_id as enroll_token_id;
pub use error::{PgError, StoreError, StoreResult};
pub use host_removal::RemovedHost;
pub use location::StoreLocation;
pub use model::{
    DesiredFacts, DesiredWrite, Enrolled, Enrollment, EventQuery, FLUSH_EVERY, HostCounts,
    HostCredentials, KeyMatch, NewEnrollToken, NewJob, OperationQuery, PollRecord, PollRecorded,
    PollView, ReportUpdate, WakeUp, WatchChange,
};
pub use operator_tokens::{NewOperatorToken, OperatorTokenRecord};
pub use restored::RestoredHub;
pub use retention::{PruneCursor, PruneStep, Pruned, RetentionConfig};
pub use traits::{
    AccessStore, AlertStore, ArtifactStore, AuditStore, Heartbeat, HostStore, HubKeyStore,
    JobStore, PollStore, Store,
};

#[cfg(test)]
mod page_work_tests;
#[cfg(test)]
mod scale_tests;
#[cfg(test)]
mod tests;
