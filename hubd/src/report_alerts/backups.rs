//! `backup_failed` and `backup_overdue`: the newest backup of a (guest, target) failed, or a
//! guest's last good backup on a tier is older than twice the tier's cadence (measured from
//! the newest good backup the report or the hub's memory, [`LastGood`], knows of).

use std::collections::BTreeMap;

use bosun_proto::report::{GuestStatus, StateReport, TierReport};
use jiff::{SignedDuration, Timestamp};
use uuid::Uuid;

use super::{Condition, OpenWatch, WatchKind, guest_name, human};

/// The newest good backup of one guest to one target the hub knows of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastGood {
    /// The guest.
    pub guest_id: Uuid,
    /// The target, as the report names it.
    pub target: String,
    /// The tier the backup belonged to, when the agent said.
    pub tier: Option<u32>,
    /// When it finished.
    pub at: Timestamp,
}

/// The good backups `report` shows: each entry's `last_ok_at`, or its own finish when ok.
pub fn reported_last_good(report: &StateReport) -> Vec<LastGood> {
    report
        .last_backups
        .iter()
        .filter_map(|b| {
            let own = b.ok.then_some(b.finished_at);
            let at = own.max(b.last_ok_at)?;
            Some(LastGood {
                guest_id: b.guest_id,
                target: b.target.clone(),
                tier: b.tier,
                at,
            })
        })
        .collect()
}

/// The `backup_failed` conditions: one per (guest, target) whose newest backup is not ok.
pub(super) fn failed(hostname: &str, report: &StateReport) -> Vec<Condition> {
    let mut out = Vec::new();
    for backup in report.last_backups.iter().filter(|b| !b.ok) {
        let error = backup.error.as_deref().unwrap_or("no error given");
        let tier = backup
            .tier
            .map_or_else(String::new, |t| format!(" (tier {t})"));
        out.push(Condition {
            kind: WatchKind::BackupFailed,
            subject: backup_subject(backup.guest_id, &backup.target),
            message: format!(
                "backup of guest {} to {}{tier} on host {hostname} failed at {}: {error}",
                guest_name(report, backup.guest_id),
                backup.target,
                backup.finished_at
            ),
            detail: serde_json::json!({
                "guest_id": backup.guest_id,
                "target": backup.target,
                "tier": backup.tier,
                "finished_at": backup.finished_at,
                "error": backup.error,
                "last_ok_at": backup.last_ok_at,
            }),
        });
    }
    out
}

/// One guest's good backups on one tier, as the overdue rule weighs them: the newest good
/// backup the report or the hub's memory knows of, and how long after it the guest turns
/// overdue.
struct Deadline {
    guest_id: Uuid,
    last_good: Timestamp,
    limit: SignedDuration,
    cadence: SignedDuration,
}

impl Deadline {
    /// Whether the guest is overdue at `now`.
    fn passed(&self, now: Timestamp) -> bool {
        now.duration_since(self.last_good) > self.limit
    }

    /// The instant after which the guest is overdue.
    fn at(&self) -> Timestamp {
        self.last_good
            .checked_add(self.limit)
            .unwrap_or(Timestamp::MAX)
    }
}

/// The guests of one tier that the overdue rule watches (on the host, running or stopped,
/// with a good backup on the tier; a guest with no good backup at all has its failures
/// alerted as `backup_failed`), each with its deadline, the tier's cadence taken at `now`.
fn deadlines(
    report: &StateReport,
    tier: &TierReport,
    last_good: &[LastGood],
    now: Timestamp,
) -> Vec<Deadline> {
    let Some(cadence) = cadence(&tier.schedule, now) else {
        return Vec::new();
    };
    let on_tier = |target: &str| target == tier.target || target == tier.storage_id;
    // The newest good backup per guest on this tier, from the report and the hub's memory.
    let mut newest: BTreeMap<Uuid, Option<Timestamp>> = report
        .last_backups
        .iter()
        .filter(|b| on_tier(&b.target))
        .map(|b| (b.guest_id, None))
        .collect();
    for good in last_good.iter().filter(|g| on_tier(&g.target)) {
        let slot = newest.entry(good.guest_id).or_default();
        *slot = (*slot).max(Some(good.at));
    }
    let limit = bosun_proto::protection::overdue_limit(cadence);
    newest
        .into_iter()
        .filter_map(|(guest_id, at)| {
            let present = report.guests.iter().any(|g| {
                g.guest_id == Some(guest_id)
                    && matches!(g.status, GuestStatus::Running | GuestStatus::Stopped)
            });
            Some(Deadline {
                guest_id,
                last_good: at.filter(|_| present)?,
                limit,
                cadence,
            })
        })
        .collect()
}

/// The `backup_overdue` conditions of one tier.
pub(super) fn overdue(
    hostname: &str,
    report: &StateReport,
    tier: &TierReport,
    last_good: &[LastGood],
    now: Timestamp,
) -> Vec<Condition> {
    let mut out = Vec::new();
    for deadline in deadlines(report, tier, last_good, now) {
        if !deadline.passed(now) {
            continue;
        }
        let Deadline {
            guest_id,
            last_good: at,
            cadence,
            ..
        } = deadline;
        out.push(Condition {
            kind: WatchKind::BackupOverdue,
            subject: backup_subject(guest_id, &tier.target),
            message: format!(
                "no good backup of guest {} on tier {} ({}) of host {hostname} since {at}: schedule `{}` runs at least every {}",
                guest_name(report, guest_id),
                tier.tier,
                tier.target,
                tier.schedule,
                human(cadence)
            ),
            detail: serde_json::json!({
                "guest_id": guest_id,
                "tier": tier.tier,
                "target": tier.target,
                "schedule": tier.schedule,
                "last_good_at": at,
                "cadence_seconds": cadence.as_secs(),
            }),
        });
    }
    out
}

/// The earliest instant, not before `now`, after which a guest of the tier turns
/// `backup_overdue` while the host reports nothing new, if one will.
pub(super) fn next_overdue(
    report: &StateReport,
    tier: &TierReport,
    last_good: &[LastGood],
    now: Timestamp,
) -> Option<Timestamp> {
    deadlines(report, tier, last_good, now)
        .iter()
        .filter(|deadline| !deadline.passed(now))
        .map(Deadline::at)
        .min()
}

pub use bosun_proto::protection::cadence;

/// Whether an open `backup_failed` or `backup_overdue` recovered (else it stopped applying
/// for another reason), and the message saying which.
pub(super) fn resolution(hostname: &str, open: &OpenWatch, report: &StateReport) -> (bool, String) {
    let (guest_id, target) = split_subject(&open.subject);
    let recovered = match open.kind {
        // The newest backup of the pair is ok now.
        WatchKind::BackupFailed => report
            .last_backups
            .iter()
            .any(|b| Some(b.guest_id) == guest_id && b.target == target && b.ok),
        // The guest and its tier are still there, so its last good backup is fresh.
        _ => {
            report.tiers.iter().any(|t| t.target == target)
                && report.guests.iter().any(|g| {
                    g.guest_id.is_some()
                        && g.guest_id == guest_id
                        && matches!(g.status, GuestStatus::Running | GuestStatus::Stopped)
                })
        }
    };
    let message = if recovered {
        let tier = match open.kind {
            WatchKind::BackupFailed => report
                .last_backups
                .iter()
                .find(|b| Some(b.guest_id) == guest_id && b.target == target)
                .and_then(|b| b.tier),
            _ => report
                .tiers
                .iter()
                .find(|t| t.target == target)
                .map(|t| t.tier),
        }
        .map_or_else(String::new, |t| format!(" (tier {t})"));
        format!(
            "backup of guest {} to {target}{tier} on host {hostname} is good again ({} resolved)",
            guest_id.map_or_else(|| "?".to_owned(), |id| guest_name(report, id)),
            open.kind.as_str()
        )
    } else {
        format!(
            "{} of {} on host {hostname} no longer applies: the guest or its tier is gone from the report",
            open.kind.as_str(),
            open.subject
        )
    };
    (recovered, message)
}

/// The subject of a backup alert.
pub fn backup_subject(guest_id: Uuid, target: &str) -> String {
    format!("{guest_id}@{target}")
}

/// The guest and target of a backup alert's subject.
fn split_subject(subject: &str) -> (Option<Uuid>, &str) {
    match subject.split_once('@') {
        Some((guest, target)) => (Uuid::parse_str(guest).ok(), target),
        None => (None, subject),
    }
}
