//! What an agent reports of its backups and restore tests: each guest's last backup to each
//! target, and each restore test's outcome.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The last backup of one guest to one target.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BackupReport {
    /// The guest.
    pub guest_id: Uuid,
    /// Where the archive went: the target's `durable_id` when the agent knows the
    /// storage manifest, otherwise the Proxmox storage id the vzdump wrote to (the
    /// agent has no manifest yet, so today this is always the storage id).
    pub target: String,
    /// When the backup finished (or failed).
    pub finished_at: Timestamp,
    /// Whether it succeeded.
    pub ok: bool,
    /// Archive size, if known.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// The tier (0 = first) the run belonged to, when it was a tier's run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u32>,
    /// The archive's volume id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<String>,
    /// How long the run took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<u64>,
    /// Warnings vzdump counted.
    #[serde(default)]
    pub warnings: u32,
    /// Whether the archive is encrypted on the box (PBS with the host's key K).
    #[serde(default)]
    pub encrypted: bool,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The newest successful backup of this guest to this target, which is this one when
    /// `ok`: the hub keeps the last good backup even after a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ok_at: Option<Timestamp>,
}

/// The last restore test of a guest's backup on one tier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RestoreTestReport {
    /// The guest whose backup was restored.
    pub guest_id: Uuid,
    /// When the test finished.
    pub finished_at: Timestamp,
    /// Whether the restored guest booted and passed its restore check.
    pub passed: bool,
    /// How long the test took.
    pub duration_seconds: u64,
    /// Short human detail.
    #[serde(default)]
    pub detail: String,
    /// How it ended; absent from older agents (then `passed` says it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<RestoreTestOutcome>,
    /// The tier's storage the archive came from (`bosun-pbs-…`, `local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// The archive that was restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<String>,
    /// The newest passing test of this guest's backups on this tier: the hub keeps the
    /// last pass even after a failure, and a guest without one in twice the policy's
    /// interval is overdue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_passed_at: Option<Timestamp>,
}

/// How a restore test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RestoreTestOutcome {
    /// The scratch guest restored, started, stayed up and passed the guest's own restore check.
    Passed,
    /// The restore failed, the guest did not start or did not stay up, its restore check
    /// failed (or could not run through the helper), or the test ran over its timeout.
    Failed,
    /// The agent stopped in the middle; the scratch guest was destroyed at the next start.
    Interrupted,
    /// Booted, not checked: the scratch guest restored, started and stayed up, but the guest
    /// installs no restore check (or the agent has no helper to run it), so its data was not
    /// verified. Never a pass; not a failure either. A hub that does not know it reads it as
    /// `Unknown`, and its `passed: false` then counts it failed.
    NotChecked,
    /// Anything this hub version does not know.
    #[serde(other)]
    Unknown,
}
