//! What a job on one guest (`restore-now`, `decommission`, `force-backup`) asks, once
//! accepted ([`GuestAccepted`]): what its family journals and what carrying it out
//! ([`super::execute`], [`super::restore_now`]) reads.

use uuid::Uuid;

/// What a job on one guest asks, once accepted; stored in its `accepted` step.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct GuestAccepted {
    pub(super) job_id: String,
    pub(super) kind: bosun_proto::job::JobKind,
    pub(super) guest_id: Uuid,
    pub(super) vmid: u32,
    /// The archive a `restore-now` names.
    pub(super) backup: Option<String>,
    /// The storage the job names (restore into, back up to).
    pub(super) storage: Option<String>,
    pub(super) signer: String,
    pub(super) principals: String,
    /// End of the job's validity window: transient failures are retried until then.
    #[serde(default)]
    pub(super) expires_at: Option<jiff::Timestamp>,
}
