//! What an agent reports of each storage target: its status, and why it is not as it should
//! be ([`TargetReason`], or an older agent's free text cut for people).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::desired::{StorageClass, StorageRole, StorageType};

/// Status of one storage target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TargetReport {
    /// The target's `durable_id` from the manifest.
    pub durable_id: String,
    /// Observed status.
    pub status: TargetStatus,
    /// Free space in GiB, if known.
    #[serde(default)]
    pub free_gib: Option<u64>,
    /// Kind of target.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<StorageType>,
    /// Speed class from the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<StorageClass>,
    /// Role from the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<StorageRole>,
    /// The Proxmox storage id the agent registered it as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_id: Option<String>,
    /// Size in bytes, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
    /// Used bytes, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// Why it is not `mounted`, in the fixed vocabulary of [`TargetReason`]: never
    /// Proxmox's or a server's own words, which stay in the agent's log (a hub that names a
    /// server must not learn from the host whether a password or datastore is right).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<TargetReason>,
    /// Why it is not `mounted`, as free text (agents before the fixed vocabulary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Since when the status holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
}

/// Observed status of a storage target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TargetStatus {
    /// Mounted and usable.
    Mounted,
    /// Expected but not present (e.g. USB unplugged).
    Disconnected,
    /// Remote target not reachable.
    Unreachable,
    /// Present but failing.
    Error,
    /// The manifest says it is absent on purpose (`state: disconnected`).
    Detached,
    /// Retired in the manifest.
    Decommissioned,
    /// Refused: the signed data plan does not name it (or names it with another identity),
    /// or it is not a place the host allows. Never registered, mounted, written or read.
    Refused,
    /// Anything this hub version does not know.
    #[serde(other)]
    Unknown,
}

/// Why a storage target is not `mounted`: a fixed, small vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TargetReason {
    /// The server does not answer (or answers too slowly).
    Unreachable,
    /// The server refused the credentials.
    AuthFailed,
    /// The export, share, datastore, path or disk does not exist.
    NotFound,
    /// The server's certificate does not have the fingerprint the plan names.
    FingerprintMismatch,
    /// Registered, but Proxmox does not see it active.
    NotActive,
    /// The helper could not mount the disk.
    MountFailed,
    /// The disk is not a removable disk with the serial the plan names, or is mounted
    /// elsewhere.
    DeviceNotAllowed,
    /// The directory is not under a root `agent.toml` allows, or lies inside a guest's
    /// volume or a system path.
    PathNotAllowed,
    /// The sealed credentials were sealed for another host or target, or are older than the
    /// ones in use.
    CredentialsRefused,
    /// The sealed credentials carry no signature the host trusts (sealed before signatures,
    /// or by someone who cannot sign): the operator reseals them with
    /// `bosunctl secret seal --key` (decision 0095).
    CredentialsUnsigned,
    /// The target needs sealed credentials and has none.
    CredentialsMissing,
    /// The PBS encryption key waits for the customer's recovery code.
    KeyMissing,
    /// The signed data plan does not name the target.
    NotInPlan,
    /// The signed data plan names the target's `durable_id` with another identity.
    IdentityMismatch,
    /// Settings Proxmox fixes at creation differ from the plan (left as they are).
    SettingsDiffer,
    /// No longer in the plan: left registered until a signed storage-detach.
    LeftPlan,
    /// Proxmox could not be asked.
    ProxmoxUnavailable,
    /// Anything else; the agent's log has the details.
    Failed,
    /// Anything this hub version does not know.
    #[serde(other)]
    Unknown,
}

/// The longest free-text `detail` of an older agent's target report shown to people, in
/// characters; the rest is cut with an ellipsis.
pub const MAX_LEGACY_DETAIL_CHARS: usize = 120;

impl TargetReport {
    /// Why the target is not as it should be, for people: the fixed [`TargetReason`], or, in
    /// a report from an agent older than `reason`, its free-text `detail` on one line and cut
    /// to [`MAX_LEGACY_DETAIL_CHARS`].
    pub fn why(&self) -> Option<String> {
        if let Some(reason) = self.reason {
            return Some(reason.as_str().to_owned());
        }
        let detail = self.detail.as_deref()?.trim();
        if detail.is_empty() {
            return None;
        }
        let line: String = detail
            .chars()
            .map(|c| if crate::inert::is_control(c) { ' ' } else { c })
            .collect();
        if line.chars().count() <= MAX_LEGACY_DETAIL_CHARS {
            return Some(line);
        }
        let mut cut: String = line.chars().take(MAX_LEGACY_DETAIL_CHARS).collect();
        cut.push('…');
        Some(cut)
    }
}

impl TargetReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unreachable => "unreachable",
            Self::AuthFailed => "auth_failed",
            Self::NotFound => "not_found",
            Self::FingerprintMismatch => "fingerprint_mismatch",
            Self::NotActive => "not_active",
            Self::MountFailed => "mount_failed",
            Self::DeviceNotAllowed => "device_not_allowed",
            Self::PathNotAllowed => "path_not_allowed",
            Self::CredentialsRefused => "credentials_refused",
            Self::CredentialsUnsigned => "credentials_unsigned",
            Self::CredentialsMissing => "credentials_missing",
            Self::KeyMissing => "key_missing",
            Self::NotInPlan => "not_in_plan",
            Self::IdentityMismatch => "identity_mismatch",
            Self::SettingsDiffer => "settings_differ",
            Self::LeftPlan => "left_plan",
            Self::ProxmoxUnavailable => "proxmox_unavailable",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
        }
    }
}
