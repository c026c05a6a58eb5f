//! Admin API bodies (`/v1/admin/...`, `Authorization: Bearer <admin token>`) and the error
//! body every endpoint uses.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use crate::alert_kind::AlertKind;
use crate::desired::DesiredState;
use crate::job::JobResult;
use crate::report::StateReport;
use crate::secret::SecretToken;
use crate::validate::{self, ValidationError};

/// Shortest enrollment-token lifetime.
pub const MIN_TOKEN_TTL_SECONDS: u32 = 60;
/// Longest enrollment-token lifetime (30 days).
pub const MAX_TOKEN_TTL_SECONDS: u32 = 30 * 24 * 3600;

/// `POST /v1/admin/enrollment-tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateEnrollToken {
    /// Lifetime of the token in seconds, 60..=2592000 (30 days).
    #[cfg_attr(feature = "openapi", schema(minimum = 60, maximum = 2_592_000))]
    pub ttl_seconds: u32,
    /// Hosts enrolled with this token stay `pending_approval` until approved.
    #[serde(default)]
    pub require_approval: bool,
    /// Free-form note kept with the token (e.g. the box's serial): not blank, at most 200
    /// bytes, no control characters. The schema's pattern admits the printable-ASCII subset.
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 200, pattern = "^ *[!-~][ -~]*$")
    )]
    pub note: Option<String>,
    /// Restore mode: the box that enrolls with this token takes over the identity of this
    /// host (a dead box, revoked first): its host id, desired state, storage manifest, jobs
    /// and escrow blob. The hub refuses the token unless the host exists and is `revoked`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_host: Option<Uuid>,
}

impl CreateEnrollToken {
    /// Checks the request.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::range(
            || "ttl_seconds".into(),
            self.ttl_seconds,
            MIN_TOKEN_TTL_SECONDS,
            MAX_TOKEN_TTL_SECONDS,
        )?;
        if let Some(note) = &self.note {
            validate::text(|| "note".into(), note, 200)?;
        }
        if self.restore_host.is_some_and(|host| host.is_nil()) {
            return Err(ValidationError::Invalid {
                field: "restore_host".into(),
                reason: "the nil UUID names no host".into(),
            });
        }
        Ok(())
    }
}

/// A freshly created enrollment token, shown once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnrollTokenCreated {
    /// The token; the hub keeps only its hash.
    pub token: SecretToken,
    /// Its public id (16 hex digits of its hash), which `GET /v1/admin/enrollment-tokens`
    /// lists and `…/{token_id}/revoke` takes; it does not let anyone enroll.
    #[serde(default)]
    pub token_id: String,
    /// When it stops working.
    pub expires_at: Timestamp,
    /// Whether hosts enrolled with it need approval.
    pub require_approval: bool,
    /// The host whose identity the enrolling box takes over (restore mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_host: Option<Uuid>,
}

/// Where an enrollment token stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EnrollTokenState {
    /// Not used yet and not expired: a box can enroll with it.
    Unused,
    /// A box enrolled with it (`used_by`).
    Used,
    /// Its lifetime passed unused.
    Expired,
    /// An operator revoked it unused.
    Revoked,
}

/// One enrollment token as `GET /v1/admin/enrollment-tokens` lists it (never the token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnrollTokenInfo {
    /// Its public id (16 hex digits of its hash).
    pub token_id: String,
    /// Where it stands.
    pub state: EnrollTokenState,
    /// When it was made.
    pub created_at: Timestamp,
    /// When it stops (or stopped) working.
    pub expires_at: Timestamp,
    /// Whether hosts enrolled with it need approval.
    pub require_approval: bool,
    /// The operator's note.
    #[serde(default)]
    pub note: Option<String>,
    /// Restore mode: the host whose identity the enrolling box takes over.
    #[serde(default)]
    pub restore_host: Option<Uuid>,
    /// When a box enrolled with it.
    #[serde(default)]
    pub used_at: Option<Timestamp>,
    /// The host that box became.
    #[serde(default)]
    pub used_by: Option<Uuid>,
    /// When an operator revoked it.
    #[serde(default)]
    pub revoked_at: Option<Timestamp>,
}

/// Administrative status of a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum HostStatus {
    /// Enrolled, waiting for an operator's approval.
    PendingApproval,
    /// Polling normally.
    Active,
    /// Key revoked; the host is locked out.
    Revoked,
}

impl HostStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PendingApproval => "pending_approval",
            Self::Active => "active",
            Self::Revoked => "revoked",
        }
    }
}

/// Whether the hub hears from a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// Never polled.
    Never,
    /// Polled within its grace window.
    Ok,
    /// Said in its last poll that it was stopping on purpose (a planned stop) and has not
    /// polled since; not paged until the hub's stop bound passes, then `overdue`.
    Stopped,
    /// Silent for longer than its grace window (or, after a planned stop, its stop bound).
    Overdue,
    /// A state this client does not know (a newer hub's); the hub never sends it.
    #[serde(other)]
    Unknown,
}

impl Liveness {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Never => "never",
            Self::Ok => "ok",
            Self::Stopped => "stopped",
            Self::Overdue => "overdue",
            Self::Unknown => "unknown",
        }
    }
}

/// One row of `GET /v1/admin/hosts`: desired vs. current vs. last-applied at a glance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostSummary {
    /// The host.
    pub host_id: Uuid,
    /// Its name at enrollment.
    pub hostname: String,
    /// Administrative status.
    pub status: HostStatus,
    /// Whether it is heard from.
    pub liveness: Liveness,
    /// Last poll.
    pub last_seen: Option<Timestamp>,
    /// When the host said it was stopping on purpose (its last poll), if it has not polled
    /// since: shown `stopped` until the hub's stop bound passes, `overdue` after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<Timestamp>,
    /// Agent version from the last report.
    pub agent_version: Option<String>,
    /// Controller version from the last report.
    pub controller_version: Option<String>,
    /// Generation of the desired state held by the hub.
    pub desired_generation: u64,
    /// Generation the agent said it holds.
    pub known_generation: u64,
    /// Generation the agent last converged to.
    pub applied_generation: u64,
    /// Jobs queued but not yet acknowledged.
    pub pending_jobs: u64,
    /// Whether the hub holds the host's escrow blob, and whether it wraps the host's key.
    #[serde(default)]
    pub escrow: EscrowState,
    /// The host's health rolled up by the hub from its open alerts, liveness and last report
    /// ([`crate::rollup`]); every host the admin API serves carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::rollup::HostRollup>,
    /// The operator's labels on the host ([`crate::capabilities::LabelKey`] = value).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// The golden base the host's last report says it provisions guests from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub golden: Option<crate::golden_report::GoldenSummary>,
    /// How many parts of desired state the host's last report refuses (decision 0065): while
    /// any is, the host is not in sync whatever generation it applied. Absent when none is.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refused: u64,
}

/// Whether a count is zero (left out of the JSON).
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The hub's escrow of a host's PBS key K (`bosun.escrow/v1`, `PUT /v1/hosts/{id}/escrow`).
///
/// On the wire: `{"state": "none"}`, or `{"state": "stored" | "verified", "key_fingerprint":
/// "…", "updated_at": "…"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum EscrowState {
    /// No blob stored.
    #[default]
    None,
    /// A blob is stored, but its key fingerprint is not the `pbs_key_fingerprint` of the
    /// host's latest report (the host reported none, or another key): it may not open the
    /// host's backups.
    Stored {
        /// The fingerprint the blob says it wraps.
        key_fingerprint: String,
        /// When it was stored.
        updated_at: Timestamp,
    },
    /// A blob is stored and wraps the key the host reports (the agent uploads only after
    /// unwrapping its own copy and comparing).
    Verified {
        /// The fingerprint of the wrapped key, the host's reported one.
        key_fingerprint: String,
        /// When it was stored.
        updated_at: Timestamp,
    },
}

impl EscrowState {
    /// The wire name of the state.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Stored { .. } => "stored",
            Self::Verified { .. } => "verified",
        }
    }
}

/// `GET /v1/admin/hosts/{host_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostDetail {
    /// The summary row.
    #[serde(flatten)]
    pub summary: HostSummary,
    /// When the host enrolled.
    pub enrolled_at: Timestamp,
    /// Its poll interval.
    pub poll_interval_seconds: u32,
    /// The desired state held by the hub.
    pub desired: Option<DesiredState>,
    /// The last state report (current state).
    pub last_report: Option<StateReport>,
    /// When an escrow blob was last stored.
    pub escrow_updated_at: Option<Timestamp>,
    /// When a box last took over this host's identity with a restore-mode token (the
    /// `replaced` event has the old and new hostname).
    #[serde(default)]
    pub replaced_at: Option<Timestamp>,
    /// Since when the host's sealed storage credentials must be resealed: they were sealed to
    /// the age recipient of the box this one replaced. Cleared by the first desired state
    /// accepted for the host after the new box reported its `storage_recipient`.
    #[serde(default)]
    pub reseal_required_since: Option<Timestamp>,
    /// What the host said it is and has, when it said so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<crate::capabilities::HostCapabilities>,
    /// When the hub stored `capabilities`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities_at: Option<Timestamp>,
}

/// `PUT /v1/admin/hosts/{host_id}/desired` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DesiredAccepted {
    /// The host.
    pub host_id: Uuid,
    /// The generation the document was stored under.
    pub generation: u64,
    /// False when an earlier request with the same `Idempotency-Key` is being replayed.
    pub created: bool,
}

/// Lifecycle of a queued job at the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting for the agent.
    Queued,
    /// The agent has it durably.
    Acked,
    /// The agent reported success.
    Succeeded,
    /// The agent reported failure.
    Failed,
    /// The agent refused it.
    Rejected,
    /// An operator cancelled it while it was queued (`bosunctl job cancel`); a job the agent
    /// had already received in a poll answer may still run, and its result then replaces
    /// this state.
    Cancelled,
}

impl JobState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Acked => "acked",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Rejected => "rejected",
            Self::Cancelled => "cancelled",
        }
    }
}

/// `POST /v1/admin/hosts/{host_id}/jobs/{job_id}/cancel` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobCancelled {
    /// The job.
    pub job_id: Uuid,
    /// Its state now: `cancelled`.
    pub state: JobState,
}

/// `POST /v1/admin/hosts/{host_id}/jobs` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobAccepted {
    /// The job.
    pub job_id: Uuid,
    /// Its host.
    pub host_id: Uuid,
    /// Its state now.
    pub state: JobState,
    /// False when the identical job was already queued.
    pub created: bool,
}

/// One row of `GET /v1/admin/hosts/{host_id}/jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobRecord {
    /// The job.
    pub job_id: Uuid,
    /// Its host.
    pub host_id: Uuid,
    /// Its kind.
    pub kind: String,
    /// Its state.
    pub state: JobState,
    /// When it was queued.
    pub submitted_at: Timestamp,
    /// When the agent acknowledged it.
    pub acked_at: Option<Timestamp>,
    /// The agent's result, once reported.
    pub result: Option<JobResult>,
    /// Its priority among the host's queued jobs, as its signed document says (higher first).
    #[serde(default)]
    pub priority: i32,
}

/// One alert (`GET /v1/admin/alerts`, and the webhook body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Alert {
    /// Sequence number.
    pub id: u64,
    /// When it was raised.
    pub at: Timestamp,
    /// What it is about.
    pub kind: AlertKind,
    /// The host, for host alerts.
    pub host_id: Option<Uuid>,
    /// The host's name, for host alerts.
    pub hostname: Option<String>,
    /// Human text.
    pub message: String,
    /// The silence that matched when it was raised: it was stored and counted but not sent
    /// to the webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silenced_by: Option<u64>,
}

/// A condition still open (`GET /v1/admin/alerts/open`): a host silent past its grace window, a
/// storage target gone, a failed backup or restore test, a lost or broken guest, a missing
/// escrow, … — what an operator must act on, unlike [`Alert`]'s history, which also holds the
/// conditions that have since recovered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OpenAlert {
    /// The host.
    pub host_id: Uuid,
    /// Its name.
    pub hostname: String,
    /// What it is about.
    pub kind: AlertKind,
    /// Its subject: a storage target, `guest@target`, a guest, `pbs_key`; the host id for an
    /// overdue host.
    pub subject: String,
    /// The subject as an operator reads it, when it names a guest by id: the guest's hostname
    /// from the host's last report (`web1`, `web1@pbs1`, `web1/media`). Absent when the subject is already
    /// a name, or the report names no such guest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_name: Option<String>,
    /// Since when it is open.
    pub since: Timestamp,
    /// Human text.
    pub message: String,
    /// The operator's acknowledgement of this opening, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged: Option<crate::alert_triage::AlertAck>,
    /// A silence that matches it now, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silenced_by: Option<u64>,
}

/// One entry of the append-only event log (`GET /v1/admin/events`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    /// Sequence number.
    pub seq: u64,
    /// When it happened.
    pub at: Timestamp,
    /// The host, when the event concerns one.
    pub host_id: Option<Uuid>,
    /// `enrolled`, `approved`, `revoked`, `replaced` (a restore-mode enrollment: old and new
    /// hostname), `resealed`, `desired_changed`, `job_queued`, `job_acked`, `job_finished`,
    /// `overdue`, `recovered`, `escrow_stored`, `host_labeled` (an operator changed its labels:
    /// `set`, `removed`, `by`), `hub_restored` (the hub was brought back from a
    /// backup), and the report alerts' openings and resolutions.
    pub kind: String,
    /// Structured detail.
    pub detail: serde_json::Value,
}

/// Most audit entries one page of `GET /v1/admin/audit` holds.
pub const MAX_AUDIT_PAGE: u32 = 500;

/// One entry of a host's audit trail as the hub keeps it (`GET /v1/admin/audit`): what the
/// host's agent reported it did, numbered by the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditRecord {
    /// The host.
    pub host_id: Uuid,
    /// Its name, while it is enrolled.
    pub hostname: Option<String>,
    /// The host's own sequence number.
    pub seq: u64,
    /// When it happened (the agent's clock).
    pub at: Timestamp,
    /// What happened (e.g. `guest.created`, `job.rejected`).
    pub action: String,
    /// What the agent recorded with it: `guest_id`, `vmid`, `job_id`, `op_id`, `request_id`,
    /// the action's own `detail` and the entry's chain `hash`.
    pub detail: serde_json::Value,
    /// How many times the host reported this entry in a row: 1, or more when later entries
    /// said the same of the same subject (same action, same detail but the chain hash) and the
    /// hub counted them on this row instead of keeping one each.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, default = 1))]
    pub repeats: u64,
    /// When the last of those repeats happened (the agent's clock); absent without repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_at: Option<Timestamp>,
}

fn one() -> u64 {
    1
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_one(n: &u64) -> bool {
    *n == 1
}

/// A page of the hub's audit trail, newest first (`GET /v1/admin/audit`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditPage {
    /// The entries, newest first.
    pub entries: Vec<AuditRecord>,
    /// Pass as `before` for the next (older) page; absent on the last page.
    pub next_before: Option<String>,
}

/// The JSON body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// Stable machine-readable code (e.g. `malformed_json`, `unknown_host`).
    pub code: String,
    /// Human text.
    pub message: String,
    /// The request id, to find the request in the hub's log.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// An artifact the hub stores for agents to fetch (`PUT /v1/admin/artifacts/{sha256}`): opaque
/// bytes under their SHA-256. The hub vouches for nothing; a signed job names the digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ArtifactInfo {
    /// SHA-256 of the bytes, lowercase hex.
    pub sha256: String,
    /// Their length.
    pub size: u64,
    /// When they were stored.
    pub stored_at: Timestamp,
}
