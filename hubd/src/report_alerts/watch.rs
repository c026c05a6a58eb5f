//! What the judges speak in: the kinds of alert, the conditions a report shows, the alerts the
//! store holds open and how they resolve, and the small text helpers their messages share.

use bosun_proto::admin::AlertKind;
use bosun_proto::desired::DesiredState;
use bosun_proto::report::StateReport;
use jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use uuid::Uuid;

use super::backups::LastGood;
use super::restore_results::{LastPassed, RestoreTestClock};

/// What an alert is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WatchKind {
    /// A storage target is disconnected, unreachable or failing.
    StorageLost,
    /// A storage target desired state asks for is refused by the host (the signed data plan
    /// does not name it, names it with another identity, or its credentials were sealed for
    /// another target).
    StorageRefused,
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
    /// A guest's controller reports another digest than its signed record names.
    ControllerMismatch,
    /// A guest's CPU gauge (its own thresholds) is raised.
    GuestCpuHigh,
    /// A guest's memory gauge is raised.
    GuestMemoryHigh,
    /// A guest's root-disk gauge is raised.
    GuestDiskHigh,
    /// A disk of the node fails its health check or has an attribute failing now.
    DiskFailing,
    /// A disk of the node has used its wear past the agent's threshold.
    DiskWorn,
    /// An LVM-thin or ZFS pool's data or metadata fill is raised.
    PoolFillHigh,
    /// A temperature sensor of the node is at or past its high.
    TemperatureHigh,
    /// The newest verification of a guest's backups on a tier failed.
    VerifyFailed,
    /// A guest's group on a tier has had no ok verification for twice the interval.
    VerifyOverdue,
    /// Desired state asks for a bulk volume's own backup the signed plan does not name.
    BulkUnprotected,
    /// The newest attempt to archive a bulk volume failed.
    BulkBackupFailed,
}

impl WatchKind {
    /// Every kind.
    pub const ALL: [Self; 28] = [
        Self::StorageLost,
        Self::StorageRefused,
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
        Self::ControllerMismatch,
        Self::GuestCpuHigh,
        Self::GuestMemoryHigh,
        Self::GuestDiskHigh,
        Self::DiskFailing,
        Self::DiskWorn,
        Self::PoolFillHigh,
        Self::TemperatureHigh,
        Self::VerifyFailed,
        Self::VerifyOverdue,
        Self::BulkUnprotected,
        Self::BulkBackupFailed,
    ];

    /// The stored name, also the event kind the alert opens with.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StorageLost => "storage_lost",
            Self::StorageRefused => "storage_refused",
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
            Self::ControllerMismatch => "controller_mismatch",
            Self::GuestCpuHigh => "guest_cpu_high",
            Self::GuestMemoryHigh => "guest_memory_high",
            Self::GuestDiskHigh => "guest_disk_high",
            Self::DiskFailing => "disk_failing",
            Self::DiskWorn => "disk_worn",
            Self::PoolFillHigh => "pool_fill_high",
            Self::TemperatureHigh => "temperature_high",
            Self::VerifyFailed => "verify_failed",
            Self::VerifyOverdue => "verify_overdue",
            Self::BulkUnprotected => "bulk_unprotected",
            Self::BulkBackupFailed => "bulk_backup_failed",
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
            Self::StorageRefused => AlertKind::StorageRefused,
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
            Self::ControllerMismatch => AlertKind::ControllerMismatch,
            Self::GuestCpuHigh => AlertKind::GuestCpuHigh,
            Self::GuestMemoryHigh => AlertKind::GuestMemoryHigh,
            Self::GuestDiskHigh => AlertKind::GuestDiskHigh,
            Self::DiskFailing => AlertKind::DiskFailing,
            Self::DiskWorn => AlertKind::DiskWorn,
            Self::PoolFillHigh => AlertKind::PoolFillHigh,
            Self::TemperatureHigh => AlertKind::TemperatureHigh,
            Self::VerifyFailed => AlertKind::VerifyFailed,
            Self::VerifyOverdue => AlertKind::VerifyOverdue,
            Self::BulkUnprotected => AlertKind::BulkUnprotected,
            Self::BulkBackupFailed => AlertKind::BulkBackupFailed,
        }
    }

    /// The alert its recovery is raised as.
    pub fn recovered_alert_kind(self) -> AlertKind {
        match self {
            Self::StorageLost | Self::StorageRefused => AlertKind::StorageRecovered,
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
            Self::ControllerMismatch => AlertKind::ControllerMatched,
            Self::GuestCpuHigh | Self::GuestMemoryHigh | Self::GuestDiskHigh => {
                AlertKind::GuestUsageRecovered
            }
            Self::DiskFailing | Self::DiskWorn => AlertKind::DiskRecovered,
            Self::PoolFillHigh => AlertKind::PoolFillRecovered,
            Self::TemperatureHigh => AlertKind::TemperatureRecovered,
            Self::VerifyFailed | Self::VerifyOverdue => AlertKind::VerifyRecovered,
            Self::BulkUnprotected => AlertKind::BulkProtected,
            Self::BulkBackupFailed => AlertKind::BulkBackupRecovered,
        }
    }

    /// The event kind of a resolution where the thing is healthy again.
    pub fn recovered(self) -> &'static str {
        match self {
            Self::StorageLost | Self::StorageRefused => "storage_recovered",
            Self::BackupFailed | Self::BackupOverdue => "backup_recovered",
            Self::RestoreTestFailed | Self::RestoreTestOverdue => "restore_test_recovered",
            Self::EscrowMissing => "escrow_verified",
            Self::HostCpuHigh | Self::HostMemoryHigh | Self::HostDiskHigh => "host_usage_recovered",
            Self::SmartFailing => "smart_recovered",
            Self::TunnelDown => "tunnel_recovered",
            Self::GuestLost | Self::GuestBroken | Self::GuestOrphaned | Self::GuestMigrated => {
                "guest_recovered"
            }
            Self::ControllerMismatch => "controller_matched",
            Self::GuestCpuHigh | Self::GuestMemoryHigh | Self::GuestDiskHigh => {
                "guest_usage_recovered"
            }
            Self::DiskFailing | Self::DiskWorn => "disk_recovered",
            Self::PoolFillHigh => "pool_fill_recovered",
            Self::TemperatureHigh => "temperature_recovered",
            Self::VerifyFailed | Self::VerifyOverdue => "verify_recovered",
            Self::BulkUnprotected => "bulk_protected",
            Self::BulkBackupFailed => "bulk_backup_recovered",
        }
    }

    /// The event kind of a resolution where the condition stopped applying otherwise.
    pub fn cleared(self) -> &'static str {
        match self {
            Self::StorageLost => "storage_lost_cleared",
            Self::StorageRefused => "storage_refused_cleared",
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
            Self::ControllerMismatch => "controller_mismatch_cleared",
            Self::GuestCpuHigh => "guest_cpu_high_cleared",
            Self::GuestMemoryHigh => "guest_memory_high_cleared",
            Self::GuestDiskHigh => "guest_disk_high_cleared",
            Self::DiskFailing => "disk_failing_cleared",
            Self::DiskWorn => "disk_worn_cleared",
            Self::PoolFillHigh => "pool_fill_high_cleared",
            Self::TemperatureHigh => "temperature_high_cleared",
            Self::VerifyFailed => "verify_failed_cleared",
            Self::VerifyOverdue => "verify_overdue_cleared",
            Self::BulkUnprotected => "bulk_unprotected_cleared",
            Self::BulkBackupFailed => "bulk_backup_failed_cleared",
        }
    }
}

/// A condition that holds in the report now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// What it is about.
    pub kind: WatchKind,
    /// The target's durable id, `guest_id@target` for backups, `guest_id@tier@finished_at`
    /// for a failed restore test, the guest id for an overdue one, [`escrow::SUBJECT`](super::escrow::SUBJECT) for
    /// the escrow, `cpu`/`memory`/`disk` for a gauge, the device for SMART,
    /// [`health::TUNNEL_SUBJECT`](super::health::TUNNEL_SUBJECT) for the tunnel, the guest id (`vmid:<vmid>` for a guest
    /// Bosun does not manage) for a guest ([`guests::guest_subject`](super::guests::guest_subject)),
    /// the guest id for a guest's gauge, the device for a disk, `<kind>:<name>` for a pool
    /// ([`hardware`](super::hardware)), `guest_id@tier` for a verification
    /// ([`verify`](super::verify)), `guest_id/volume` for a bulk volume
    /// ([`bulk`](super::bulk)).
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

/// A guest's hostname from the report, with its id.
pub(super) fn guest_name(report: &StateReport, guest_id: Uuid) -> String {
    report
        .guests
        .iter()
        .find(|g| g.guest_id == Some(guest_id) && !g.hostname.is_empty())
        .map_or_else(
            || guest_id.to_string(),
            |g| format!("{} ({guest_id})", g.hostname),
        )
}

/// At most `max` characters of `text` (a string from the agent, repeated in an alert), each
/// control character replaced, so no escape sequence reaches a notification or a log.
pub(super) fn bounded(text: &str, max: usize) -> String {
    text.chars()
        .take(max)
        .map(|c| {
            if bosun_proto::inert::is_control(c) {
                '\u{fffd}'
            } else {
                c
            }
        })
        .collect()
}

/// The wire name of a serializable enum value.
pub(super) fn wire<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "unknown".to_owned(),
    }
}

/// `3d`, `12h`, `15m` or `40s`.
pub(super) fn human(span: SignedDuration) -> String {
    let secs = span.as_secs();
    match secs {
        s if s >= 86_400 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s >= 3_600 && s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}
