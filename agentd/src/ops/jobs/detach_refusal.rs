//! Why a `storage-detach` or `storage-wipe` job was refused ([`DetachRefusal`]): the
//! refusal its check reports and the failure a resumed one ends with. Both kinds resolve
//! their target by the same rules; the last variants are the wipe's own.

use bosun_pve::PveError;

use crate::ops::journal::JournalError;

/// Why a `storage-detach` or `storage-wipe` job was refused.
#[derive(Debug, thiserror::Error)]
pub enum DetachRefusal {
    /// A parameter is malformed.
    #[error("params.{param}: {reason}")]
    BadParams {
        /// The parameter.
        param: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The job names no `type` and the manifest does not hold the target.
    #[error("target {durable_id} is not in the manifest: the job must name its type (params.type)")]
    UnknownTarget {
        /// The job's target.
        durable_id: String,
    },
    /// The job names a storage this agent did not name for the target.
    #[error(
        "the job names storage {named}, but target {durable_id} ({kind}) is storage {expected}: this agent acts only on the storages it named"
    )]
    NotOurs {
        /// The storage the job names.
        named: String,
        /// The job's target.
        durable_id: String,
        /// Its kind.
        kind: &'static str,
        /// The storage this agent named for it.
        expected: String,
    },
    /// No desired state has arrived yet.
    #[error("no desired state yet: whether target {durable_id} is still attached is unknown")]
    NoDesiredState {
        /// The job's target.
        durable_id: String,
    },
    /// The target is still `attached` in desired state.
    #[error(
        "target {durable_id} is still attached in desired state: mark it disconnected there first (so the storage watcher does not register it again), then sign a new job"
    )]
    StillAttached {
        /// The job's target.
        durable_id: String,
    },
    /// A backup tier still writes to the storage.
    #[error(
        "backup tier {index} of the current plan still writes to storage {storage}: move the tier to another target first"
    )]
    TierWrites {
        /// The tier.
        index: u32,
        /// The storage.
        storage: String,
    },
    /// Proxmox has no such storage.
    #[error("storage {storage} does not exist in Proxmox")]
    NoSuchStorage {
        /// The storage.
        storage: String,
    },
    /// The storage is not of the type a target of this kind is registered as.
    #[error("storage {storage} is of type {found}, not {expected} as a {kind} target is")]
    WrongType {
        /// The storage.
        storage: String,
        /// Its type in Proxmox.
        found: String,
        /// The type this agent registers the kind as.
        expected: &'static str,
        /// The target's kind.
        kind: &'static str,
    },
    /// Proxmox could not be asked about the storage.
    #[error("reading storage {storage} from Proxmox failed")]
    Unreadable {
        /// The storage.
        storage: String,
        /// Why.
        #[source]
        source: PveError,
    },
    /// The journal holds more archives on the storage than one wipe deletes.
    #[error(
        "the journal records more than {limit} archives on storage {storage}: one wipe deletes at most {limit}; prune the storage first"
    )]
    TooManyArchives {
        /// The storage.
        storage: String,
        /// The most one wipe deletes.
        limit: u32,
    },
    /// The journal could not say which archives this agent wrote to the storage.
    #[error("reading the archives recorded on storage {storage} from the journal failed")]
    JournalUnreadable {
        /// The storage.
        storage: String,
        /// Why.
        #[source]
        source: JournalError,
    },
}

impl DetachRefusal {
    /// A short machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadParams { .. } => "bad_params",
            Self::UnknownTarget { .. } => "unknown_target",
            Self::NotOurs { .. } => "not_ours",
            Self::NoDesiredState { .. } => "no_desired_state",
            Self::StillAttached { .. } => "still_attached",
            Self::TierWrites { .. } => "tier_writes",
            Self::NoSuchStorage { .. } => "no_such_storage",
            Self::WrongType { .. } => "wrong_type",
            Self::Unreadable { .. } => "storage_unreadable",
            Self::TooManyArchives { .. } => "too_many_archives",
            Self::JournalUnreadable { .. } => "journal_unreadable",
        }
    }
}
