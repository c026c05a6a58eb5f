//! Alerts the hub derives from what a host reports about its guests, storage, backups, restore
//! tests and PBS key escrow, planned as a pure function from (the open alerts, the merged report, the hub's own
//! records of the host, now) to what opens and what resolves. The hub's records
//! ([`HubRecords`]) are the host's desired state, the last good backups and passing restore
//! tests it remembers, since when it expects each guest's restore tests, and the key its escrow
//! blob wraps. The store applies
//! the plan in the poll's or the sweep's transaction; a full report and a delta are judged
//! alike because the plan only ever sees the merged report.
//!
//! | kind | opens when | resolves when |
//! |---|---|---|
//! | `storage_lost` | a target reports `disconnected`, `unreachable` or `error` | it reports `mounted` (`storage_recovered`) |
//! | `backup_failed` | the newest backup of a (guest, target) is not ok | a newer one is ok (`backup_recovered`) |
//! | `backup_overdue` | a guest's last good backup on a tier is older than twice the tier's cadence | a good backup arrives (`backup_recovered`) |
//! | `restore_test_failed` | the newest restore test of a (guest, tier) failed or was interrupted: once per failing result | a newer one on the tier passes (`restore_test_recovered`) |
//! | `restore_test_overdue` | restore tests are enabled and a guest has had no passing one for more than twice `interval_days`, counted from its last pass on any tier or, if later, from when the hub began expecting one ([`restore_results`]) | a passing one arrives (`restore_test_recovered`) |
//! | `escrow_missing` | the host has a PBS tier or PBS target and the hub holds no escrow blob of the key it reports ([`escrow`]) | a blob wrapping the reported key is stored (`escrow_verified`) |
//! | `host_cpu_high`, `host_memory_high`, `host_disk_high` | the report's gauge is `raised` (the agent's hysteresis: `samples` readings at or above `high`) ([`health`]) | the gauge is reported not raised (at or below `low`) (`host_usage_recovered`) |
//! | `smart_failing` | a watched disk's SMART reading is `failing` or `unreadable` | it reads `passed` (`smart_recovered`) |
//! | `tunnel_down` | the report's tunnel is `raised` (down longer than the agent's bound) | the tunnel is reported not raised (`tunnel_recovered`) |
//! | `guest_lost`, `guest_broken`, `guest_orphaned`, `guest_migrated` | a guest is reported `lost`, `broken`, `orphaned` or `migrated` ([`guests`]) | it is reported running or stopped (`guest_recovered`) |
//!
//! One alert is open per (host, kind, subject) at a time. A condition that stops applying for
//! another reason (the target detached on purpose or retired, the guest or tier gone from the
//! report, restore tests switched off, a failed restore test superseded by a newer failure,
//! the host no longer using PBS, a guest in another kind of trouble)
//! closes its alert as `<kind>_cleared`, so the history never shows a recovery that did not
//! happen.
//!
//! Each opening and each recovery is also an alert of the same name (`GET /v1/admin/alerts`
//! and the webhook: [`WatchKind::alert_kind`], [`Resolution::alert_kind`]); a `<kind>_cleared`
//! is an event only. Alerts from audit entries (`golden_refused`, `guest_restored`) are raised
//! once per entry instead ([`audit`]).

pub mod audit;
mod backups;
mod delta_scope;
pub mod escrow;
pub mod guests;
pub mod health;
pub mod restore_results;
pub use self::delta_scope::{delta_is_judged, delta_is_live_only};

use std::collections::{BTreeMap, BTreeSet};

use bosun_proto::admin::AlertKind;
use bosun_proto::desired::DesiredState;
use bosun_proto::report::{StateReport, TargetStatus};
use jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use uuid::Uuid;

pub use self::backups::{LastGood, backup_subject, cadence, reported_last_good};
pub use self::restore_results::{LastPassed, RestoreTestClock, reported_last_passed};

/// What an alert is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WatchKind {
    /// A storage target is disconnected, unreachable or failing.
    StorageLost,
    /// The newest backup of a guest to a target failed.
    BackupFailed,
    /// A guest's last good backup on a tier is older than twice the tier's cadence.
    BackupOverdue,
    /// The newest restore test of a guest on a tier failed or was interrupted.
    RestoreTestFailed,
    /// A guest has had no passing restore test for more than twice the policy's interval.
    RestoreTestOverdue,
    /// The host backs up to PBS without a verified escrow of its key.
    EscrowMissing,
    /// The host's CPU gauge is raised.
    HostCpuHigh,
    /// The host's memory gauge is raised.
    HostMemoryHigh,
    /// The host's root disk gauge is raised.
    HostDiskHigh,
    /// A watched disk fails its SMART check or has no reading.
    SmartFailing,
    /// The tunnel has been down for longer than the agent's bound.
    TunnelDown,
    /// A guest is reported `lost`: gone from Proxmox.
    GuestLost,
    /// A guest is reported `broken`: it failed to start the bounded number of times.
    GuestBroken,
    /// A guest is reported `orphaned`: on the host, absent from desired state.
    GuestOrphaned,
    /// A guest is reported `migrated`: another node of the cluster holds it.
    GuestMigrated,
}

impl WatchKind {
    /// Every kind.
    pub const ALL: [Self; 15] = [
        Self::StorageLost,
        Self::BackupFailed,
        Self::BackupOverdue,
        Self::RestoreTestFailed,
        Self::RestoreTestOverdue,
        Self::EscrowMissing,
        Self::HostCpuHigh,
        Self::HostMemoryHigh,
        Self::HostDiskHigh,
        Self::SmartFailing,
        Self::TunnelDown,
        Self::GuestLost,
        Self::GuestBroken,
        Self::GuestOrphaned,
        Self::GuestMigrated,
    ];

    /// The stored name, also the event kind the alert opens with.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StorageLost => "storage_lost",
            Self::BackupFailed => "backup_failed",
            Self::BackupOverdue => "backup_overdue",
            Self::RestoreTestFailed => "restore_test_failed",
            Self::RestoreTestOverdue => "restore_test_overdue",
            Self::EscrowMissing => "escrow_missing",
            Self::HostCpuHigh => "host_cpu_high",
            Self::HostMemoryHigh => "host_memory_high",
            Self::HostDiskHigh => "host_disk_high",
            Self::SmartFailing => "smart_failing",
            Self::TunnelDown => "tunnel_down",
            Self::GuestLost => "guest_lost",
            Self::GuestBroken => "guest_broken",
            Self::GuestOrphaned => "guest_orphaned",
            Self::GuestMigrated => "guest_migrated",
        }
    }

    /// Parses a stored name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// The alert it is raised as.
    pub fn alert_kind(self) -> AlertKind {
        match self {
            Self::StorageLost => AlertKind::StorageLost,
            Self::BackupFailed => AlertKind::BackupFailed,
            Self::BackupOverdue => AlertKind::BackupOverdue,
            Self::RestoreTestFailed => AlertKind::RestoreTestFailed,
            Self::RestoreTestOverdue => AlertKind::RestoreTestOverdue,
            Self::EscrowMissing => AlertKind::EscrowMissing,
            Self::HostCpuHigh => AlertKind::HostCpuHigh,
            Self::HostMemoryHigh => AlertKind::HostMemoryHigh,
            Self::HostDiskHigh => AlertKind::HostDiskHigh,
            Self::SmartFailing => AlertKind::SmartFailing,
            Self::TunnelDown => AlertKind::TunnelDown,
            Self::GuestLost => AlertKind::GuestLost,
            Self::GuestBroken => AlertKind::GuestBroken,
            Self::GuestOrphaned => AlertKind::GuestOrphaned,
            Self::GuestMigrated => AlertKind::GuestMigrated,
        }
    }

    /// The alert its recovery is raised as.
    pub fn recovered_alert_kind(self) -> AlertKind {
        match self {
            Self::StorageLost => AlertKind::StorageRecovered,
            Self::BackupFailed | Self::BackupOverdue => AlertKind::BackupRecovered,
            Self::RestoreTestFailed | Self::RestoreTestOverdue => AlertKind::RestoreTestRecovered,
            Self::EscrowMissing => AlertKind::EscrowVerified,
            Self::HostCpuHigh | Self::HostMemoryHigh | Self::HostDiskHigh => {
                AlertKind::HostUsageRecovered
            }
            Self::SmartFailing => AlertKind::SmartRecovered,
            Self::TunnelDown => AlertKind::TunnelRecovered,
            Self::GuestLost | Self::GuestBroken | Self::GuestOrphaned | Self::GuestMigrated => {
                AlertKind::GuestRecovered
            }
        }
    }

    /// The event kind of a resolution where the thing is healthy again.
    pub fn recovered(self) -> &'static str {
        match self {
            Self::StorageLost => "storage_recovered",
            Self::BackupFailed | Self::BackupOverdue => "backup_recovered",
            Self::RestoreTestFailed | Self::RestoreTestOverdue => "restore_test_recovered",
            Self::EscrowMissing => "escrow_verified",
            Self::HostCpuHigh | Self::HostMemoryHigh | Self::HostDiskHigh => "host_usage_recovered",
            Self::SmartFailing => "smart_recovered",
            Self::TunnelDown => "tunnel_recovered",
            Self::GuestLost | Self::GuestBroken | Self::GuestOrphaned | Self::GuestMigrated => {
                "guest_recovered"
            }
        }
    }

    /// The event kind of a resolution where the condition stopped applying otherwise.
    pub fn cleared(self) -> &'static str {
        match self {
            Self::StorageLost => "storage_lost_cleared",
            Self::BackupFailed => "backup_failed_cleared",
            Self::BackupOverdue => "backup_overdue_cleared",
            Self::RestoreTestFailed => "restore_test_failed_cleared",
            Self::RestoreTestOverdue => "restore_test_overdue_cleared",
            Self::EscrowMissing => "escrow_missing_cleared",
            Self::HostCpuHigh => "host_cpu_high_cleared",
            Self::HostMemoryHigh => "host_memory_high_cleared",
            Self::HostDiskHigh => "host_disk_high_cleared",
            Self::SmartFailing => "smart_failing_cleared",
            Self::TunnelDown => "tunnel_down_cleared",
            Self::GuestLost => "guest_lost_cleared",
            Self::GuestBroken => "guest_broken_cleared",
            Self::GuestOrphaned => "guest_orphaned_cleared",
            Self::GuestMigrated => "guest_migrated_cleared",
        }
    }
}

/// A condition that holds in the report now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// What it is about.
    pub kind: WatchKind,
    /// The target's durable id, `guest_id@target` for backups, `guest_id@tier@finished_at`
    /// for a failed restore test, the guest id for an overdue one, [`escrow::SUBJECT`] for
    /// the escrow, `cpu`/`memory`/`disk` for a gauge, the device for SMART,
    /// [`health::TUNNEL_SUBJECT`] for the tunnel, the guest id (`vmid:<vmid>` for a guest
    /// Bosun does not manage) for a guest ([`guests::guest_subject`]).
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

/// The hub's own records of a host, besides its report.
#[derive(Debug, Clone, Copy, Default)]
pub struct HubRecords<'a> {
    /// The host's desired state, once one was set.
    pub desired: Option<&'a DesiredState>,
    /// The good backups the hub remembers.
    pub last_good: &'a [LastGood],
    /// The passing restore tests the hub remembers.
    pub last_passed: &'a [LastPassed],
    /// Since when the hub expects each guest's restore tests.
    pub clocks: &'a [RestoreTestClock],
    /// The key fingerprint of the stored escrow blob, if one is stored.
    pub escrow_fingerprint: Option<&'a str>,
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

/// Plans the alert changes of one host.
pub fn plan(
    hostname: &str,
    open: &[OpenWatch],
    report: &StateReport,
    records: &HubRecords<'_>,
    now: Timestamp,
) -> WatchPlan {
    let holding: BTreeMap<(WatchKind, String), Condition> =
        conditions(hostname, report, records, now)
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
        .map(|o| resolution(hostname, o, report, records, now))
        .collect();
    WatchPlan { raise, resolve }
}

/// Every condition that holds in `report` at `now`.
pub fn conditions(
    hostname: &str,
    report: &StateReport,
    records: &HubRecords<'_>,
    now: Timestamp,
) -> Vec<Condition> {
    let mut out = storage_lost(hostname, report);
    out.extend(backups::failed(hostname, report));
    for tier in &report.tiers {
        out.extend(backups::overdue(
            hostname,
            report,
            tier,
            records.last_good,
            now,
        ));
    }
    out.extend(restore_results::failed(hostname, report));
    out.extend(restore_results::overdue(hostname, report, records, now));
    out.extend(escrow::missing(hostname, report, records));
    out.extend(health::conditions(hostname, report));
    out.extend(guests::conditions(hostname, report));
    out
}

/// The earliest instant, not before `now`, after which the host's conditions change with time
/// alone: a guest's backup or restore test turning overdue while the host reports nothing new.
/// `None` when nothing will. The backup sweep judges the host again then.
pub fn next_change(
    report: &StateReport,
    records: &HubRecords<'_>,
    now: Timestamp,
) -> Option<Timestamp> {
    report
        .tiers
        .iter()
        .filter_map(|tier| backups::next_overdue(report, tier, records.last_good, now))
        .chain(restore_results::next_overdue(report, records, now))
        .min()
}

/// The `storage_lost` conditions: one per target reported lost.
fn storage_lost(hostname: &str, report: &StateReport) -> Vec<Condition> {
    let mut out = Vec::new();
    for target in &report.storage {
        if !matches!(
            target.status,
            TargetStatus::Disconnected | TargetStatus::Unreachable | TargetStatus::Error
        ) {
            continue;
        }
        let status = wire(&target.status);
        // The fixed reason; an older agent's free text only cut short (`TargetReport::why`).
        let why = target.why();
        out.push(Condition {
            kind: WatchKind::StorageLost,
            subject: target.durable_id.clone(),
            message: format!(
                "storage target {} on host {hostname} is {status}: {}",
                target.durable_id,
                why.as_deref().unwrap_or("no reason given")
            ),
            detail: serde_json::json!({
                "durable_id": target.durable_id,
                "status": status,
                "type": target.kind.as_ref().map(wire),
                "storage_id": target.storage_id,
                "reason": why,
                "since": target.since,
            }),
        });
    }
    out
}

fn resolution(
    hostname: &str,
    open: &OpenWatch,
    report: &StateReport,
    records: &HubRecords<'_>,
    now: Timestamp,
) -> Resolution {
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
            backups::resolution(hostname, open, report)
        }
        WatchKind::RestoreTestFailed | WatchKind::RestoreTestOverdue => {
            restore_results::resolution(hostname, open, report, records, now)
        }
        WatchKind::EscrowMissing => escrow::resolution(hostname, open, report, records),
        WatchKind::HostCpuHigh
        | WatchKind::HostMemoryHigh
        | WatchKind::HostDiskHigh
        | WatchKind::SmartFailing
        | WatchKind::TunnelDown => health::resolution(hostname, open, report),
        WatchKind::GuestLost
        | WatchKind::GuestBroken
        | WatchKind::GuestOrphaned
        | WatchKind::GuestMigrated => guests::resolution(hostname, open, report),
    };
    Resolution {
        open: open.clone(),
        recovered,
        message,
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

/// At most `max` characters of `text` (a string from the agent, repeated in an alert).
fn bounded(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
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
