//! Admin views of a host's desired state: `GET /v1/admin/hosts/{id}/desired` (the current
//! document, [`DesiredView`]) and `GET /v1/admin/hosts/{id}/desired/status` (current,
//! last-applied and observed, per guest: [`DesiredStatus`]).
//!
//! The hub keeps the document of every recent generation, so "last applied" is the document
//! the agent converged to, not only its number. Per guest, [`GuestProgress`] says whether the
//! current generation is `applied` there (the host reported it applied, or what the host
//! reports of the guest already matches the spec), `pending`, or `failed` (the agent's
//! operation for it failed, or the guest is broken or lost) with the agent's reason.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::desired::{DesiredState, GuestSpec};
use crate::oplog::OperationRecord;
use crate::report::GuestReport;

/// A field of a guest's spec the host cannot apply to the guest it reports, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unappliable {
    /// The spec's field, as `bosunctl desired diff` names it (`rootfs_gib`).
    pub field: &'static str,
    /// Why, for the operator.
    pub reason: String,
}

/// What of `spec` cannot be applied to `seen`, the guest as its host reports it: a root disk
/// asked smaller than the guest's (Bosun grows disks and never shrinks one). Empty when the
/// host reports no sizes yet.
pub fn unappliable(spec: &GuestSpec, seen: &GuestReport) -> Vec<Unappliable> {
    let mut out = Vec::new();
    if let Some(have) = seen.resources
        && have.rootfs_gib > spec.resources.rootfs_gib
    {
        out.push(Unappliable {
            field: "rootfs_gib",
            reason: format!(
                "the root disk is {} GiB and is never shrunk to the {} GiB asked: ask for {} GiB \
                 or more",
                have.rootfs_gib, spec.resources.rootfs_gib, have.rootfs_gib
            ),
        });
    }
    out
}

/// One stored generation of a host's desired state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DesiredRevision {
    /// Its generation.
    pub generation: u64,
    /// The correlation id the operator sent with it (`X-Correlation-Id`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// The name of the operator token that set it; absent for a generation stored before the
    /// hub recorded who set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_by: Option<String>,
    /// When the hub stored it.
    pub stored_at: Timestamp,
    /// The document.
    pub document: DesiredState,
}

/// `GET /v1/admin/hosts/{host_id}/desired`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DesiredView {
    /// The host.
    pub host_id: Uuid,
    /// The current generation.
    #[serde(flatten)]
    pub current: DesiredRevision,
}

/// Where the current generation stands for one guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ProgressState {
    /// Not there yet.
    Pending,
    /// Applied: the host converged to the generation, or the guest already matches it.
    Applied,
    /// The agent's operation for the guest failed (it may retry), or the guest is broken or
    /// lost (it will not, until desired state changes).
    Failed,
    /// The guest runs, but a field of its spec cannot be applied to it (a root disk smaller
    /// than the guest's: disks are only ever grown); the reason says which. Final until desired
    /// state changes: the host is not in sync, however far it converged otherwise.
    Refused,
    /// Anything this client does not know.
    #[serde(other)]
    Unknown,
}

/// One guest of the current generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GuestProgress {
    /// The guest.
    pub guest_id: Uuid,
    /// Its hostname in the current document.
    pub hostname: String,
    /// Where it stands.
    pub state: ProgressState,
    /// Whether the failure is final for this generation (broken, lost): the agent will not
    /// try again until desired state changes.
    #[serde(default)]
    pub terminal: bool,
    /// The agent's reason, when failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the host last reported of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<GuestReport>,
}

/// `GET /v1/admin/hosts/{host_id}/desired/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DesiredStatus {
    /// The host.
    pub host_id: Uuid,
    /// The current generation, if one was ever set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired: Option<DesiredRevision>,
    /// The generation the host last converged to, with its document when the hub still
    /// keeps it (absent: nothing applied yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<DesiredRevision>,
    /// The generation the host holds.
    pub known_generation: u64,
    /// The generation the host last converged to (0: none).
    pub applied_generation: u64,
    /// When the host last polled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<Timestamp>,
    /// Every guest of the current document, in its order.
    #[serde(default)]
    pub guests: Vec<GuestProgress>,
    /// Guests the host reports that the current document does not name.
    #[serde(default)]
    pub unmanaged: Vec<GuestReport>,
    /// The host's operations carrying the current generation's correlation id, oldest first.
    #[serde(default)]
    pub operations: Vec<OperationRecord>,
    /// What of desired state the host reports it will not apply, with why (a refused root-disk
    /// shrink, a storage target or tier the signed data plan does not allow): while any is
    /// listed the host is not in sync, and it does not report the generation applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<crate::refused::Refused>,
}
