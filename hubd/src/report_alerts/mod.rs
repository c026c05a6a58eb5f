//! Alerts the hub derives from what a host reports about its storage and backups, planned as a
//! pure function from (the open alerts, the merged report, the last good backups the hub
//! remembers, now) to what opens and what resolves. The store applies the plan in the poll's
//! or the sweep's transaction; a full report and a delta are judged alike because the plan
//! only ever sees the merged report.
//!
//! | kind | opens when | resolves when |
//! |---|---|---|
//! | `storage_lost` | a target reports `disconnected`, `unreachable` or `error` | it reports `mounted` (`storage_recovered`) |
//! | `backup_failed` | the newest backup of a (guest, target) is not ok | a newer one is ok (`backup_recovered`) |
//! | `backup_overdue` | a guest's last good backup on a tier is older than twice the tier's cadence | a good backup arrives (`backup_recovered`) |
//!
//! One alert is open per (host, kind, subject) at a time. A condition that stops applying for
//! another reason (the target detached on purpose or retired, the guest or tier gone from the
//! report) closes its alert as `<kind>_cleared`, so the history never shows a recovery that
//! did not happen.
//!
//! Each opening and each recovery is also an alert of the same name (`GET /v1/admin/alerts`
//! and the webhook: [`WatchKind::alert_kind`], [`Resolution::alert_kind`]); a `<kind>_cleared`
//! is an event only.

use std::collections::{BTreeMap, BTreeSet};

use bosun_proto::admin::AlertKind;
use bosun_proto::calendar::CalendarEvent;
use bosun_proto::report::{GuestStatus, StateReport, TargetStatus, TierReport};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use uuid::Uuid;

/// How many consecutive occurrences of a tier's schedule its cadence is measured over: the
/// longest gap among them, so a weekday schedule's weekend is part of its cadence.
const CADENCE_OCCURRENCES: usize = 16;

/// What an alert is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WatchKind {
    /// A storage target is disconnected, unreachable or failing.
    StorageLost,
    /// The newest backup of a guest to a target failed.
    BackupFailed,
    /// A guest's last good backup on a tier is older than twice the tier's cadence.
    BackupOverdue,
}

impl WatchKind {
    /// The stored name, also the event kind the alert opens with.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StorageLost => "storage_lost",
            Self::BackupFailed => "backup_failed",
            Self::BackupOverdue => "backup_overdue",
        }
    }

    /// Parses a stored name.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::StorageLost, Self::BackupFailed, Self::BackupOverdue]
            .into_iter()
            .find(|k| k.as_str() == text)
    }

    /// The alert it is raised as.
    pub fn alert_kind(self) -> AlertKind {
        match self {
            Self::StorageLost => AlertKind::StorageLost,
            Self::BackupFailed => AlertKind::BackupFailed,
            Self::BackupOverdue => AlertKind::BackupOverdue,
        }
    }

    /// The alert its recovery is raised as.
    pub fn recovered_alert_kind(self) -> AlertKind {
        match self {
            Self::StorageLost => AlertKind::StorageRecovered,
            Self::BackupFailed | Self::BackupOverdue => AlertKind::BackupRecovered,
        }
    }

    /// The event kind of a resolution where the thing is healthy again.
    pub fn recovered(self) -> &'static str {
        match self {
            Self::StorageLost => "storage_recovered",
            Self::BackupFailed | Self::BackupOverdue => "backup_recovered",
        }
    }

    /// The event kind of a resolution where the condition stopped applying otherwise.
    pub fn cleared(self) -> &'static str {
        match self {
            Self::StorageLost => "storage_lost_cleared",
            Self::BackupFailed => "backup_failed_cleared",
            Self::BackupOverdue => "backup_overdue_cleared",
        }
    }
}

/// A condition that holds in the report now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// What it is about.
    pub kind: WatchKind,
    /// The target's durable id, or `guest_id@target` for backups.
    pub subject: String,
    /// Human text.
    pub message: String,
    /// Structured detail for the event log.
    pub detail: serde_json::Value,
}

/// An alert the store holds open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenWatch {
    /// What it is about.
    pub kind: WatchKind,
    /// Its subject.
    pub subject: String,
    /// When it opened.
    pub opened_at: Timestamp,
}

/// A resolution of an open alert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// The alert it closes.
    pub open: OpenWatch,
    /// `true`: healthy again; `false`: the condition no longer applies for another reason.
    pub recovered: bool,
    /// Human text.
    pub message: String,
}

impl Resolution {
    /// The event kind it is recorded as.
    pub fn event_kind(&self) -> &'static str {
        if self.recovered {
            self.open.kind.recovered()
        } else {
            self.open.kind.cleared()
        }
    }

    /// The alert it is raised as: a recovery only; a condition that stopped applying for
    /// another reason raises none.
    pub fn alert_kind(&self) -> Option<AlertKind> {
        self.recovered
            .then(|| self.open.kind.recovered_alert_kind())
    }
}

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

/// What to open and what to resolve.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchPlan {
    /// Conditions without an open alert.
    pub raise: Vec<Condition>,
    /// Open alerts whose condition no longer holds.
    pub resolve: Vec<Resolution>,
}

impl WatchPlan {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        self.raise.is_empty() && self.resolve.is_empty()
    }
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

/// Plans the alert changes of one host.
pub fn plan(
    hostname: &str,
    open: &[OpenWatch],
    report: &StateReport,
    last_good: &[LastGood],
    now: Timestamp,
) -> WatchPlan {
    let holding: BTreeMap<(WatchKind, String), Condition> =
        conditions(hostname, report, last_good, now)
            .into_iter()
            .map(|c| ((c.kind, c.subject.clone()), c))
            .collect();
    let opened: BTreeSet<(WatchKind, &str)> =
        open.iter().map(|o| (o.kind, o.subject.as_str())).collect();
    let raise = holding
        .values()
        .filter(|c| !opened.contains(&(c.kind, c.subject.as_str())))
        .cloned()
        .collect();
    let resolve = open
        .iter()
        .filter(|o| !holding.contains_key(&(o.kind, o.subject.clone())))
        .map(|o| resolution(hostname, o, report))
        .collect();
    WatchPlan { raise, resolve }
}

/// Every condition that holds in `report` at `now`.
pub fn conditions(
    hostname: &str,
    report: &StateReport,
    last_good: &[LastGood],
    now: Timestamp,
) -> Vec<Condition> {
    let mut out = Vec::new();
    for target in &report.storage {
        if !matches!(
            target.status,
            TargetStatus::Disconnected | TargetStatus::Unreachable | TargetStatus::Error
        ) {
            continue;
        }
        let status = wire(&target.status);
        let detail = target.detail.as_deref().unwrap_or("no detail");
        out.push(Condition {
            kind: WatchKind::StorageLost,
            subject: target.durable_id.clone(),
            message: format!(
                "storage target {} on host {hostname} is {status}: {detail}",
                target.durable_id
            ),
            detail: serde_json::json!({
                "durable_id": target.durable_id,
                "status": status,
                "type": target.kind.as_ref().map(wire),
                "storage_id": target.storage_id,
                "detail": target.detail,
                "since": target.since,
            }),
        });
    }
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
    for tier in &report.tiers {
        out.extend(overdue(hostname, report, tier, last_good, now));
    }
    out
}

/// The `backup_overdue` conditions of one tier.
fn overdue(
    hostname: &str,
    report: &StateReport,
    tier: &TierReport,
    last_good: &[LastGood],
    now: Timestamp,
) -> Vec<Condition> {
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
    let limit = cadence.checked_mul(2).unwrap_or(SignedDuration::MAX);
    let mut out = Vec::new();
    for (guest_id, at) in newest {
        // Only guests on the host that back up; a guest with no good backup at all has its
        // failures alerted as `backup_failed`.
        let present = report.guests.iter().any(|g| {
            g.guest_id == Some(guest_id)
                && matches!(g.status, GuestStatus::Running | GuestStatus::Stopped)
        });
        let Some(at) = at else { continue };
        if !present || now.duration_since(at) <= limit {
            continue;
        }
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

/// The longest gap between consecutive occurrences of `schedule` from `now` on (UTC; the
/// host's own zone moves a gap by an hour at most), or `None` when it does not parse or
/// occurs fewer than twice.
pub fn cadence(schedule: &str, now: Timestamp) -> Option<SignedDuration> {
    let event = CalendarEvent::parse(schedule).ok()?;
    let mut at = event.next(now, &TimeZone::UTC)?;
    let mut longest: Option<SignedDuration> = None;
    for _ in 1..CADENCE_OCCURRENCES {
        let Some(next) = event.next(at, &TimeZone::UTC) else {
            break;
        };
        let gap = next.duration_since(at);
        longest = Some(longest.map_or(gap, |l| l.max(gap)));
        at = next;
    }
    longest
}

fn resolution(hostname: &str, open: &OpenWatch, report: &StateReport) -> Resolution {
    let (recovered, message) = match open.kind {
        WatchKind::StorageLost => {
            match report.storage.iter().find(|t| t.durable_id == open.subject) {
                Some(t) if t.status == TargetStatus::Mounted => (
                    true,
                    format!(
                        "storage target {} on host {hostname} is mounted again",
                        open.subject
                    ),
                ),
                Some(t) => (
                    false,
                    format!(
                        "storage target {} on host {hostname} is {} now; no longer alerted as lost",
                        open.subject,
                        wire(&t.status)
                    ),
                ),
                None => (
                    false,
                    format!(
                        "storage target {} is no longer reported by host {hostname}",
                        open.subject
                    ),
                ),
            }
        }
        WatchKind::BackupFailed | WatchKind::BackupOverdue => {
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
    };
    Resolution {
        open: open.clone(),
        recovered,
        message,
    }
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

/// A guest's hostname from the report, with its id.
fn guest_name(report: &StateReport, guest_id: Uuid) -> String {
    report
        .guests
        .iter()
        .find(|g| g.guest_id == Some(guest_id) && !g.hostname.is_empty())
        .map_or_else(
            || guest_id.to_string(),
            |g| format!("{} ({guest_id})", g.hostname),
        )
}

/// The wire name of a serializable enum value.
fn wire<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "unknown".to_owned(),
    }
}

/// `3d`, `12h`, `15m` or `40s`.
fn human(span: SignedDuration) -> String {
    let secs = span.as_secs();
    match secs {
        s if s >= 86_400 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s >= 3_600 && s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests;
