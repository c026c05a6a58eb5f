//! Alerts the hub derives from what a host reports about its guests, storage, backups, restore
//! tests, bulk volumes' own backups and PBS key escrow, planned as a pure function from (the open alerts, the merged report, the hub's own
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
//! | `storage_refused` | a target reports `refused` (the signed data plan does not allow it): one alert per target however often the agent audits the refusal | it reports `mounted` (`storage_recovered`), or another status, or none while desired state no longer names it (`storage_refused_cleared`) |
//! | `backup_failed` | the newest backup of a (guest, target) is not ok | a newer one is ok (`backup_recovered`) |
//! | `backup_overdue` | a guest's last good backup on a tier is older than twice the tier's cadence | a good backup arrives (`backup_recovered`) |
//! | `restore_test_failed` | the newest restore test of a (guest, tier) failed or was interrupted: once per failing result | a newer one on the tier passes (`restore_test_recovered`) |
//! | `restore_test_overdue` | restore tests are enabled and a guest has had no passing one for more than twice `interval_days`, counted from its last pass on any tier or, if later, from when the hub began expecting one ([`restore_results`]) | a passing one arrives (`restore_test_recovered`) |
//! | `verify_failed` | the newest verification of a (guest, tier) failed: PBS found a chunk missing or damaged, or a file archive no longer hashes to its recorded SHA-256 ([`verify`]) | a newer one is ok (`verify_recovered`) |
//! | `verify_overdue` | verification is on (desired state held to the signed plan's `verify_hours`) and a (guest, tier) has had no ok verification for more than twice the interval | an ok one arrives (`verify_recovered`) |
//! | `bulk_unprotected` | a bulk volume's desired decision is `backup: {kind: target}` and the report names no signed target for it: the signed plan's `bulk_backups` does not name it, so nothing archives it ([`bulk`]) | the report names a signed target (`bulk_protected`) |
//! | `bulk_backup_failed` | the newest attempt to archive a bulk volume failed (`last_error`) | a newer archive lands (`bulk_backup_recovered`) |
//! | `escrow_missing` | the host has a PBS tier or PBS target and the hub holds no escrow blob of the key it reports ([`escrow`]) | a blob wrapping the reported key is stored (`escrow_verified`) |
//! | `host_cpu_high`, `host_memory_high`, `host_disk_high` | the report's gauge is `raised` (the agent's hysteresis: `samples` readings at or above `high`) ([`health`]) | the gauge is reported not raised (at or below `low`) (`host_usage_recovered`) |
//! | `smart_failing` | a watched disk's SMART reading is `failing` or `unreadable` | it reads `passed` (`smart_recovered`) |
//! | `tunnel_down` | the report's tunnel is `raised` (down longer than the agent's bound) | the tunnel is reported not raised (`tunnel_recovered`) |
//! | `guest_lost`, `guest_broken`, `guest_orphaned`, `guest_migrated` | a guest is reported `lost`, `broken`, `orphaned` or `migrated` ([`guests`]) | it is reported running or stopped (`guest_recovered`) |
//! | `controller_mismatch` | a guest's controller reports running another digest than the agent's signed record names ([`controllers`]) | it reports the recorded digest (`controller_matched`) |
//! | `guest_cpu_high`, `guest_memory_high`, `guest_disk_high` | a guest's gauge against its own thresholds is `raised` ([`hardware`]) | the gauge is reported not raised (`guest_usage_recovered`) |
//! | `disk_failing`, `disk_worn` | a disk of Proxmox's disk list is `failing` (health FAILED or an attribute failing now), or `worn` (wear used at or above the agent's `wear_percent`) | it reads healthy, or not worn (`disk_recovered`) |
//! | `pool_fill_high` | an LVM-thin or ZFS pool's data or metadata fill is `raised` | both are reported not raised (`pool_fill_recovered`) |
//! | `temperature_high` | a temperature sensor the agent judges is `raised` (its chip's `max`, 5 °C under its `crit`, or the agent's `temperature_high_c`) | it is reported not raised (`temperature_recovered`) |
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
pub mod bulk;
pub mod controllers;
mod delta_scope;
pub mod escrow;
pub mod guests;
pub mod hardware;
pub mod health;
pub mod restore_results;
pub mod verify;
mod watch;
pub use self::delta_scope::{delta_is_judged, delta_is_live_only};
pub use self::watch::{Condition, HubRecords, OpenWatch, Resolution, WatchKind};
use self::watch::{bounded, guest_name, human, wire};

use std::collections::{BTreeMap, BTreeSet};

use bosun_proto::report::{StateReport, TargetStatus};
use jiff::Timestamp;

pub use self::backups::{LastGood, backup_subject, cadence, reported_last_good};
pub use self::restore_results::{LastPassed, RestoreTestClock, reported_last_passed};

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
        .filter(|o| !awaiting_look(o, report, records))
        .map(|o| resolution(hostname, o, report, records, now))
        .collect();
    WatchPlan { raise, resolve }
}

/// Whether an open storage alert's target is one the report does not mention yet while the
/// host's desired state still names it: an agent that just started reports its targets only
/// once its storage watcher has looked at them, and until then the alert stays as it is
/// (closing it would re-open it a moment later, and the history would show a recovery that
/// never happened). A target that left desired state closes its alert as before.
fn awaiting_look(open: &OpenWatch, report: &StateReport, records: &HubRecords<'_>) -> bool {
    matches!(
        open.kind,
        WatchKind::StorageLost | WatchKind::StorageRefused
    ) && !report.storage.iter().any(|t| t.durable_id == open.subject)
        && records
            .desired
            .is_some_and(|d| d.storage.iter().any(|t| t.durable_id == open.subject))
}

/// Every condition that holds in `report` at `now`.
pub fn conditions(
    hostname: &str,
    report: &StateReport,
    records: &HubRecords<'_>,
    now: Timestamp,
) -> Vec<Condition> {
    let mut out = storage_lost(hostname, report);
    out.extend(storage_refused(hostname, report));
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
    out.extend(verify::failed(hostname, report));
    out.extend(verify::overdue(hostname, report, records, now));
    out.extend(bulk::conditions(hostname, report));
    out.extend(escrow::missing(hostname, report, records));
    out.extend(health::conditions(hostname, report));
    out.extend(guests::conditions(hostname, report));
    out.extend(controllers::mismatches(hostname, report));
    out.extend(hardware::conditions(hostname, report));
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
        .chain(verify::next_overdue(report, records, now))
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

/// The `storage_refused` conditions: one per target reported refused, open while it is.
fn storage_refused(hostname: &str, report: &StateReport) -> Vec<Condition> {
    report
        .storage
        .iter()
        .filter(|t| t.status == TargetStatus::Refused)
        .map(|target| {
            let why = target.why();
            Condition {
                kind: WatchKind::StorageRefused,
                subject: target.durable_id.clone(),
                message: format!(
                    "host {hostname} refused storage target {} ({}): nothing was registered, mounted, written or read",
                    target.durable_id,
                    why.as_deref().unwrap_or("no reason given")
                ),
                detail: serde_json::json!({
                    "durable_id": target.durable_id,
                    "type": target.kind.as_ref().map(wire),
                    "reason": why,
                    "since": target.since,
                }),
            }
        })
        .collect()
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
        WatchKind::StorageRefused => {
            match report.storage.iter().find(|t| t.durable_id == open.subject) {
                Some(t) if t.status == TargetStatus::Mounted => (
                    true,
                    format!(
                        "storage target {} on host {hostname} is allowed and mounted now",
                        open.subject
                    ),
                ),
                Some(t) => (
                    false,
                    format!(
                        "storage target {} on host {hostname} is {} now; no longer refused",
                        open.subject,
                        wire(&t.status)
                    ),
                ),
                None => (
                    false,
                    format!(
                        "storage target {} is no longer reported by host {hostname}: no longer refused",
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
        WatchKind::VerifyFailed | WatchKind::VerifyOverdue => {
            verify::resolution(hostname, open, report)
        }
        WatchKind::BulkUnprotected | WatchKind::BulkBackupFailed => {
            bulk::resolution(hostname, open, report)
        }
        WatchKind::HostCpuHigh
        | WatchKind::HostMemoryHigh
        | WatchKind::HostDiskHigh
        | WatchKind::SmartFailing
        | WatchKind::TunnelDown => health::resolution(hostname, open, report),
        WatchKind::GuestLost
        | WatchKind::GuestBroken
        | WatchKind::GuestOrphaned
        | WatchKind::GuestMigrated => guests::resolution(hostname, open, report),
        WatchKind::ControllerMismatch => controllers::resolution(hostname, open, report),
        WatchKind::GuestCpuHigh
        | WatchKind::GuestMemoryHigh
        | WatchKind::GuestDiskHigh
        | WatchKind::DiskFailing
        | WatchKind::DiskWorn
        | WatchKind::PoolFillHigh
        | WatchKind::TemperatureHigh => hardware::resolution(hostname, open, report),
    };
    Resolution {
        open: open.clone(),
        recovered,
        message,
    }
}

#[cfg(test)]
mod tests;
