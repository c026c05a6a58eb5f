//! A host's health as the hub rolls it up (`health` on every host the admin API serves): one
//! level (`ok`, `warning`, `critical`) and every reason for it, worst first. The hub computes it
//! once from the host's open alerts (with their acknowledgements and silences), its liveness, its
//! guests' states and the checks of its last report; `bosunctl status`, `status --check`,
//! `hosts list`, the dashboard and `/metrics` all show this one value (decision 0064).
//!
//! An acknowledged alert counts as a warning at most (someone is on it); a silenced one does not
//! raise the host's level at all (it is expected for a while): both stay listed as reasons.

use serde::{Deserialize, Serialize};

use crate::alert_kind::AlertKind;

/// How bad a host is, worst last (so `max` is the roll-up).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum HealthLevel {
    /// Nothing needs a person.
    #[default]
    Ok,
    /// Degraded, acknowledged, or waiting for someone; not yet losing data protection.
    Warning,
    /// Data or protection at risk now, and nobody acknowledged it.
    Critical,
}

impl HealthLevel {
    /// The wire word (`ok`, `warning`, `critical`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }

    /// The monitoring-plugin word (`OK`, `WARNING`, `CRITICAL`).
    pub fn plugin_word(self) -> &'static str {
        match self {
            Self::Ok => "OK",
            Self::Warning => "WARNING",
            Self::Critical => "CRITICAL",
        }
    }

    /// The monitoring-plugin exit status (0, 1, 2).
    pub fn plugin_exit(self) -> u8 {
        match self {
            Self::Ok => 0,
            Self::Warning => 1,
            Self::Critical => 2,
        }
    }

    /// The level an open alert of `kind` gives a host before acknowledgement and silences;
    /// `None` for kinds that are never open (recoveries and one-shot notifications count as
    /// their own kind's level nowhere).
    pub fn of_alert(kind: AlertKind) -> Option<Self> {
        match kind {
            AlertKind::HostRecovered
            | AlertKind::HubConnectivityRestored
            | AlertKind::StorageRecovered
            | AlertKind::BackupRecovered
            | AlertKind::RestoreTestRecovered
            | AlertKind::GuestRestored
            | AlertKind::GuestRecovered
            | AlertKind::ControllerMatched
            | AlertKind::EscrowVerified
            | AlertKind::HostUsageRecovered
            | AlertKind::SmartRecovered
            | AlertKind::TunnelRecovered
            | AlertKind::BreakGlassClosed
            | AlertKind::GuestUsageRecovered
            | AlertKind::DiskRecovered
            | AlertKind::PoolFillRecovered
            | AlertKind::TemperatureRecovered
            | AlertKind::VerifyRecovered
            | AlertKind::BulkProtected
            | AlertKind::BulkBackupRecovered => None,
            AlertKind::GoldenRefused
            | AlertKind::GoldenVerifyFailed
            | AlertKind::StorageRefused
            | AlertKind::PlacementRefused
            | AlertKind::JobRefused
            | AlertKind::BackupOverdue
            | AlertKind::RestoreTestOverdue
            | AlertKind::VerifyOverdue
            | AlertKind::BulkUnprotected
            | AlertKind::HostCpuHigh
            | AlertKind::HostMemoryHigh
            | AlertKind::GuestOrphaned
            | AlertKind::GuestMigrated
            | AlertKind::BreakGlassOpen
            | AlertKind::GuestCpuHigh
            | AlertKind::GuestMemoryHigh
            | AlertKind::GuestDiskHigh
            | AlertKind::DiskWorn
            | AlertKind::TemperatureHigh => Some(Self::Warning),
            AlertKind::HostOverdue
            | AlertKind::HubConnectivitySuspected
            | AlertKind::GuestLost
            | AlertKind::GuestBroken
            | AlertKind::DestructiveOperation
            | AlertKind::ArchiveRejected
            | AlertKind::StorageLost
            | AlertKind::BackupFailed
            | AlertKind::RestoreTestFailed
            | AlertKind::VerifyFailed
            | AlertKind::BulkBackupFailed
            | AlertKind::EscrowMissing
            | AlertKind::ControllerRolledBack
            | AlertKind::ControllerBroken
            | AlertKind::ControllerMismatch
            | AlertKind::HostDiskHigh
            | AlertKind::SmartFailing
            | AlertKind::TunnelDown
            | AlertKind::AgentUpdateFailed
            | AlertKind::DiskFailing
            | AlertKind::PoolFillHigh => Some(Self::Critical),
        }
    }
}

/// One reason for a host's level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HealthReason {
    /// What this reason counts as (after acknowledgement and silences).
    pub level: HealthLevel,
    /// A short phrase: `guest_lost web`, `overdue (silent)`, `restore test of web booted, not
    /// checked`.
    pub text: String,
    /// The open alert behind it, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<AlertKind>,
    /// The alert is acknowledged (it counts as a warning at most).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub acknowledged: bool,
    /// A silence matches the alert (it does not raise the level).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub silenced: bool,
}

/// A host's level and every reason for it, worst first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostRollup {
    /// The worst of the reasons (`ok` when none counts).
    pub level: HealthLevel,
    /// What is wrong (or acknowledged, or silenced), worst first.
    #[serde(default)]
    pub reasons: Vec<HealthReason>,
}

impl HostRollup {
    /// The roll-up of `reasons`: sorted worst first (equal levels keep their order), the level
    /// the worst of them.
    pub fn of(mut reasons: Vec<HealthReason>) -> Self {
        reasons.sort_by_key(|r| std::cmp::Reverse(r.level));
        Self {
            level: reasons.first().map_or(HealthLevel::Ok, |r| r.level),
            reasons,
        }
    }

    /// The reasons as one phrase list: `guest_lost web (acknowledged), overdue (silent)`.
    pub fn reasons_text(&self, separator: &str) -> String {
        let parts: Vec<String> = self
            .reasons
            .iter()
            .map(|r| {
                let mark = if r.silenced {
                    " (silenced)"
                } else if r.acknowledged {
                    " (acknowledged)"
                } else {
                    ""
                };
                format!("{}{mark}", r.text)
            })
            .collect();
        parts.join(separator)
    }

    /// `ok`, or `critical: overdue (silent); guest_lost web`.
    pub fn summary(&self) -> String {
        if self.reasons.is_empty() {
            return self.level.as_str().to_owned();
        }
        format!("{}: {}", self.level.as_str(), self.reasons_text("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(level: HealthLevel, text: &str) -> HealthReason {
        HealthReason {
            level,
            text: text.into(),
            alert: None,
            acknowledged: false,
            silenced: false,
        }
    }

    #[test]
    fn the_worst_reason_is_the_level_and_comes_first() {
        let rollup = HostRollup::of(vec![
            reason(HealthLevel::Ok, "a"),
            reason(HealthLevel::Critical, "b"),
            reason(HealthLevel::Warning, "c"),
        ]);
        assert_eq!(rollup.level, HealthLevel::Critical);
        assert_eq!(rollup.summary(), "critical: b; c; a");
        assert_eq!(HostRollup::of(Vec::new()).summary(), "ok");
    }

    #[test]
    fn only_conditions_that_stay_open_have_a_level() {
        assert_eq!(HealthLevel::of_alert(AlertKind::StorageRecovered), None);
        assert_eq!(
            HealthLevel::of_alert(AlertKind::StorageRefused),
            Some(HealthLevel::Warning)
        );
        assert_eq!(
            HealthLevel::of_alert(AlertKind::EscrowMissing),
            Some(HealthLevel::Critical)
        );
    }
}
