//! Integrity verification between restore tests (DESIGN §8): the agent has the Proxmox Backup
//! Server verify each of its guests' backup groups on a cadence, a cheap check of every chunk
//! at ciphertext level that runs more often than the restore test (decision 0079).
//!
//! The cadence is the signed data plan's `backup.verify_hours` when it names one; desired
//! state's [`VerifyPolicy`] may only make it more frequent ([`effective_policy`]). The agent
//! reports the newest verification per (guest, tier) as [`VerifyReport`]s; the hub alerts on a
//! failed one (`verify_failed`) and on a guest whose group went unverified for more than twice
//! the interval (`verify_overdue`).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::validate::{self, ValidationError};

/// The longest interval (hours) a plan or desired state may set: a year.
pub const MAX_VERIFY_HOURS: u32 = 8760;

/// Most verification results one report carries: every tier (the first and four further,
/// PBS or file tiers, decision 0103) for each of the most guests desired state names
/// (`report.rs` checks the two agree).
pub const MAX_VERIFICATIONS: usize = 5_000;

/// Most characters of a verification's `detail` (PBS's task status, or why it could not run).
pub const MAX_DETAIL_CHARS: usize = 200;

/// How often desired state asks for verification of the host's PBS backup groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct VerifyPolicy {
    /// Whether desired state asks for verification at all (the signed plan's `verify_hours`
    /// turns it on regardless).
    pub enabled: bool,
    /// Hours between two verifications of a guest's group on one tier, 1..=8760.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 8760))]
    pub interval_hours: u32,
}

impl Default for VerifyPolicy {
    fn default() -> Self {
        Self {
            enabled: false,
            interval_hours: 24,
        }
    }
}

impl VerifyPolicy {
    /// Checks the interval's range; `field` names the policy.
    pub fn validate(&self, field: &str) -> Result<(), ValidationError> {
        validate::range(
            || format!("{field}.interval_hours"),
            self.interval_hours,
            1,
            MAX_VERIFY_HOURS,
        )
    }
}

/// The policy the agent follows: desired state's, held to the plan's `verify_hours` when it
/// names one (on, and at least that often). Unsigned desired state can make verification more
/// frequent, never rarer or off.
pub fn effective_policy(plan_hours: Option<u32>, desired: VerifyPolicy) -> VerifyPolicy {
    let Some(hours) = plan_hours else {
        return desired;
    };
    let interval_hours = if desired.enabled {
        desired.interval_hours.min(hours)
    } else {
        hours
    };
    VerifyPolicy {
        enabled: true,
        interval_hours: interval_hours.clamp(1, MAX_VERIFY_HOURS),
    }
}

/// How a verification ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum VerifyOutcome {
    /// PBS read every chunk of every snapshot of the group and each matched its digest.
    Ok,
    /// PBS's verify task failed: a chunk is missing or does not match (the group's backups
    /// cannot be trusted to restore).
    Failed,
    /// The verification could not run or finish (PBS unreachable, refused the credentials,
    /// the group is absent, or the task outlived its bound): no judgment of the data.
    Error,
    /// An outcome this hub does not know (a newer agent).
    #[serde(other)]
    Unknown,
}

/// The newest verification of one guest's backup group on one PBS tier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VerifyReport {
    /// The guest whose group was verified.
    pub guest_id: Uuid,
    /// The tier's target (`durable_id` of the plan's PBS target).
    pub tier: String,
    /// When it finished.
    pub finished_at: Timestamp,
    /// How it ended.
    pub outcome: VerifyOutcome,
    /// How long it took, in milliseconds (start of the PBS task to its end).
    pub duration_ms: u64,
    /// Short detail: PBS's task status, or why it could not run (bounded).
    #[serde(default)]
    pub detail: String,
    /// The newest `ok` verification of this guest on this tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ok_at: Option<Timestamp>,
    /// The newest `failed` verification of this guest on this tier: with it newer than
    /// `last_ok_at`, the group's newest judgment is a failure, even when verifications since
    /// could not run (`error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_at: Option<Timestamp>,
    /// The first verification the agent recorded of this guest on this tier: with no `ok`
    /// since, overdue is counted from it.
    pub first_at: Timestamp,
}

impl VerifyReport {
    /// Whether the newest verification that judged the group (`ok` or `failed`) failed.
    pub fn judged_failed(&self) -> bool {
        self.outcome == VerifyOutcome::Failed
            || self
                .last_failed_at
                .is_some_and(|failed| self.last_ok_at.is_none_or(|ok| failed > ok))
    }
}

/// Checks a report's verification list: its count and its names.
pub fn validate_reports(reports: &[VerifyReport]) -> Result<(), ValidationError> {
    validate::count("verifications", reports.len(), MAX_VERIFICATIONS)?;
    for (i, r) in reports.iter().enumerate() {
        validate::text(|| format!("verifications[{i}].tier"), &r.tier, 512)?;
        check_detail(i, &r.detail)?;
    }
    Ok(())
}

/// A detail is short printable text (or empty): a host's words reach the operator's views.
fn check_detail(i: usize, detail: &str) -> Result<(), ValidationError> {
    let field = || format!("verifications[{i}].detail");
    let chars = detail.chars().count();
    if chars > MAX_DETAIL_CHARS {
        return Err(ValidationError::TooLong {
            field: field(),
            len: chars,
            max: MAX_DETAIL_CHARS,
        });
    }
    if detail.chars().any(crate::inert::is_control) {
        return Err(ValidationError::Invalid {
            field: field(),
            reason: "contains control characters".to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(detail: &str) -> VerifyReport {
        VerifyReport {
            guest_id: Uuid::nil(),
            tier: "pbs:backup@pbs!bosun@10.0.0.5:8007/store".to_owned(),
            finished_at: Timestamp::UNIX_EPOCH,
            outcome: VerifyOutcome::Ok,
            duration_ms: 1,
            detail: detail.to_owned(),
            last_ok_at: None,
            last_failed_at: None,
            first_at: Timestamp::UNIX_EPOCH,
        }
    }

    #[test]
    fn a_detail_is_short_printable_text() {
        validate_reports(&[report(""), report("OK")]).unwrap();
        validate_reports(&[report(&"é".repeat(MAX_DETAIL_CHARS))]).unwrap();
        let long = validate_reports(&[report(&"x".repeat(MAX_DETAIL_CHARS + 1))]).unwrap_err();
        assert!(
            long.to_string().contains("verifications[0].detail"),
            "{long}"
        );
        let escape = validate_reports(&[report("ok\x1b[2Jcleared")]).unwrap_err();
        assert!(
            escape.to_string().contains("control characters"),
            "{escape}"
        );
    }

    fn desired(enabled: bool, interval_hours: u32) -> VerifyPolicy {
        VerifyPolicy {
            enabled,
            interval_hours,
        }
    }

    #[test]
    fn the_plan_turns_verification_on_and_caps_its_interval() {
        assert_eq!(
            effective_policy(Some(24), desired(false, 24)),
            desired(true, 24)
        );
        assert_eq!(
            effective_policy(Some(24), desired(true, 500)),
            desired(true, 24)
        );
        assert_eq!(
            effective_policy(Some(24), desired(true, 6)),
            desired(true, 6)
        );
        assert_eq!(effective_policy(None, desired(false, 6)), desired(false, 6));
    }
}
