//! One host's health rolled up from what the hub holds of it: its liveness, its guests' states,
//! its storage targets, the newest backup of each guest on each target and each guest's newest
//! restore test. `bosunctl status` prints it per host, and `status --check` answers with the
//! worst of them in the monitoring-plugin convention (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN).

use std::collections::BTreeMap;

use bosun_proto::admin::{HostDetail, HostStatus, Liveness};
use bosun_proto::report::{GuestStatus, RestoreTestOutcome, StateReport, TargetStatus};
use serde::Serialize;

/// The monitoring-plugin exit status when the hub could not be read at all.
pub const PLUGIN_UNKNOWN: u8 = 3;

/// How bad a host is, worst last (so `max` is the roll-up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Nothing needs a person.
    Ok,
    /// Degraded or waiting for someone (a planned stop, an orphaned guest, a restore test
    /// that could not check anything), not yet losing data protection.
    Warning,
    /// Data or protection at risk now: silent host, lost or broken guest, storage gone, a
    /// failed backup or restore test.
    Critical,
}

impl Level {
    /// The word operators and monitoring read.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }

    /// The monitoring-plugin exit status of this level.
    pub fn plugin_exit(self) -> u8 {
        match self {
            Self::Ok => 0,
            Self::Warning => 1,
            Self::Critical => 2,
        }
    }
}

/// A host's level and every reason for it, worst first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Health {
    /// The worst of the reasons (`ok` when there are none).
    pub level: Level,
    /// What is wrong, one short phrase each.
    pub reasons: Vec<(Level, String)>,
}

impl Health {
    /// `ok`, or `critical: overdue; guest web LOST`.
    pub fn summary(&self) -> String {
        if self.reasons.is_empty() {
            return self.level.as_str().to_owned();
        }
        let reasons: Vec<&str> = self.reasons.iter().map(|(_, r)| r.as_str()).collect();
        format!("{}: {}", self.level.as_str(), reasons.join("; "))
    }
}

/// Rolls up `host`. A revoked host is locked out on purpose and counts as `ok`.
pub fn host_health(host: &HostDetail) -> Health {
    let mut reasons: Vec<(Level, String)> = Vec::new();
    let summary = &host.summary;
    match summary.status {
        HostStatus::Revoked => {
            return Health {
                level: Level::Ok,
                reasons: Vec::new(),
            };
        }
        HostStatus::PendingApproval => {
            reasons.push((Level::Warning, "waiting for approval".to_owned()));
        }
        HostStatus::Active => {}
    }
    match summary.liveness {
        Liveness::Ok => {}
        Liveness::Overdue => reasons.push((Level::Critical, "overdue (silent)".to_owned())),
        Liveness::Never => reasons.push((Level::Warning, "never polled".to_owned())),
        Liveness::Stopped => reasons.push((Level::Warning, "stopped (planned)".to_owned())),
        Liveness::Unknown => reasons.push((Level::Warning, "liveness unknown".to_owned())),
    }
    if host.reseal_required_since.is_some() {
        reasons.push((Level::Warning, "storage credentials to reseal".to_owned()));
    }
    let Some(report) = &host.last_report else {
        return finish(reasons);
    };
    guest_reasons(report, &mut reasons);
    storage_reasons(report, &mut reasons);
    backup_reasons(report, &mut reasons);
    restore_test_reasons(report, &mut reasons);
    finish(reasons)
}

/// A guest's hostname in `report`, else its id.
fn guest_name(report: &StateReport, guest: uuid::Uuid) -> String {
    report
        .guests
        .iter()
        .find(|g| g.guest_id == Some(guest))
        .map_or_else(|| guest.to_string(), |g| g.hostname.clone())
}

/// Guests lost, broken or otherwise out of the hub's hands.
fn guest_reasons(report: &StateReport, reasons: &mut Vec<(Level, String)>) {
    for guest in &report.guests {
        let name = &guest.hostname;
        match guest.status {
            GuestStatus::Lost => reasons.push((Level::Critical, format!("guest {name} LOST"))),
            GuestStatus::Broken => reasons.push((Level::Critical, format!("guest {name} broken"))),
            GuestStatus::Orphaned => {
                reasons.push((Level::Warning, format!("guest {name} orphaned")));
            }
            GuestStatus::Migrated => {
                reasons.push((
                    Level::Warning,
                    format!("guest {name} migrated to another cluster node"),
                ));
            }
            GuestStatus::Unknown => {
                reasons.push((Level::Warning, format!("guest {name} in an unknown state")));
            }
            GuestStatus::Running | GuestStatus::Stopped | GuestStatus::Provisioning => {}
        }
    }
}

/// Storage targets gone, refused or unknown.
fn storage_reasons(report: &StateReport, reasons: &mut Vec<(Level, String)>) {
    for target in &report.storage {
        let id = &target.durable_id;
        match target.status {
            TargetStatus::Disconnected | TargetStatus::Unreachable | TargetStatus::Error => {
                let reason = target.reason.map_or("", |r| r.as_str());
                reasons.push((
                    Level::Critical,
                    format!("storage {id} {} {reason}", status_word(target.status))
                        .trim_end()
                        .to_owned(),
                ));
            }
            TargetStatus::Refused => {
                reasons.push((Level::Warning, format!("storage {id} refused")))
            }
            TargetStatus::Unknown => {
                reasons.push((Level::Warning, format!("storage {id} in an unknown state")));
            }
            TargetStatus::Mounted | TargetStatus::Detached | TargetStatus::Decommissioned => {}
        }
    }
}

/// The newest backup of each guest on each target, where it failed.
fn backup_reasons(report: &StateReport, reasons: &mut Vec<(Level, String)>) {
    let mut newest_backups = BTreeMap::new();
    for backup in &report.last_backups {
        let slot = newest_backups
            .entry((backup.guest_id, backup.target.as_str()))
            .or_insert(backup);
        if backup.finished_at > slot.finished_at {
            *slot = backup;
        }
    }
    for ((guest, target), backup) in newest_backups {
        if !backup.ok {
            reasons.push((
                Level::Critical,
                format!("backup of {} to {target} failed", guest_name(report, guest)),
            ));
        }
    }
}

/// Each guest's newest restore test, where it did not pass.
fn restore_test_reasons(report: &StateReport, reasons: &mut Vec<(Level, String)>) {
    let mut newest_tests = BTreeMap::new();
    for test in report.restore_tests.iter().chain(&report.last_restore_test) {
        let slot = newest_tests.entry(test.guest_id).or_insert(test);
        if test.finished_at > slot.finished_at {
            *slot = test;
        }
    }
    for (guest, test) in newest_tests {
        let outcome = test.outcome.unwrap_or(if test.passed {
            RestoreTestOutcome::Passed
        } else {
            RestoreTestOutcome::Failed
        });
        let name = guest_name(report, guest);
        match outcome {
            RestoreTestOutcome::Passed => {}
            RestoreTestOutcome::Failed => {
                reasons.push((Level::Critical, format!("restore test of {name} failed")));
            }
            RestoreTestOutcome::Interrupted => {
                reasons.push((
                    Level::Warning,
                    format!("restore test of {name} interrupted"),
                ));
            }
            RestoreTestOutcome::NotChecked => reasons.push((
                Level::Warning,
                format!("restore test of {name} booted, not checked"),
            )),
            RestoreTestOutcome::Unknown => reasons.push((
                Level::Warning,
                format!("restore test of {name} in an unknown state"),
            )),
        }
    }
}

fn finish(mut reasons: Vec<(Level, String)>) -> Health {
    // Worst first; equal levels keep the order they were found in.
    reasons.sort_by_key(|r| std::cmp::Reverse(r.0));
    Health {
        level: reasons.first().map_or(Level::Ok, |(level, _)| *level),
        reasons,
    }
}

fn status_word(status: TargetStatus) -> &'static str {
    match status {
        TargetStatus::Disconnected => "disconnected",
        TargetStatus::Unreachable => "unreachable",
        TargetStatus::Error => "in error",
        TargetStatus::Mounted
        | TargetStatus::Detached
        | TargetStatus::Decommissioned
        | TargetStatus::Refused
        | TargetStatus::Unknown => "",
    }
}
