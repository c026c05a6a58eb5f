//! What an alert is about: the closed table of alert kinds the hub raises, triages, rolls up
//! and sends ([`crate::admin::Alert`], [`crate::alert_triage`], [`crate::rollup`]).

use serde::{Deserialize, Serialize};

/// Alert kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    /// A host went silent past its grace window.
    HostOverdue,
    /// An overdue host polled again.
    HostRecovered,
    /// Most hosts went silent at once: the hub's own connectivity is suspect.
    HubConnectivitySuspected,
    /// The mass silence is over.
    HubConnectivityRestored,
    /// A guest the agent created is gone from Proxmox (reported `lost`): its data must be
    /// restored; the agent never replaces it with a blank guest.
    GuestLost,
    /// A guest desired running failed to start the bounded number of times (reported
    /// `broken`): the agent does not start it again until desired state changes.
    GuestBroken,
    /// A guest is on the host but absent from desired state (reported `orphaned`): the agent
    /// leaves it alone until a signed decommission arrives.
    GuestOrphaned,
    /// A guest the agent created is on another node of the Proxmox cluster now (reported
    /// `migrated`): the agent leaves it alone and never recovers it.
    GuestMigrated,
    /// A lost, broken or orphaned guest is reported running or stopped again (resolves
    /// `guest_lost`, `guest_broken`, `guest_orphaned`).
    GuestRecovered,
    /// An operation that replaced or removed a guest's data ended: a rollback to a snapshot,
    /// a signed restore, a decommission, a storage detach (a notification; the customer's
    /// controller reads the same in its audit log).
    DestructiveOperation,
    /// The agent refused to provision from a golden archive of unknown provenance (not
    /// built by its helper, not named in a signed document, or changed since).
    GoldenRefused,
    /// A golden build the agent made (a refresh or a new recipe) did not pass its
    /// verification (its boot in a scratch guest): the host keeps provisioning from its
    /// previous verified build and builds again after a pause.
    GoldenVerifyFailed,
    /// The agent refused a storage target or tier desired state asked for: the signed data
    /// plan does not name it, names it with another identity, or its sealed credentials were
    /// sealed for another target. Nothing was registered, mounted, written or read.
    StorageRefused,
    /// The agent refused to build a guest because one of its volumes has no place of the
    /// class it needs: a hot volume on a storage the signed plan does not class `fast`, a bulk
    /// volume with no attached target of its class. Nothing of the guest was built.
    PlacementRefused,
    /// The agent refused a signed job (its signer is not in the host's `allowed_signers`, its
    /// signature or namespace is wrong, it expired, targets another host, reuses a nonce, …):
    /// nothing ran; the operator must sign it again or fix the signers.
    JobRefused,
    /// The agent refused to restore an archive that failed its proof: a file whose bytes
    /// changed since the backup, a PBS archive not encrypted with the host's key or whose
    /// binding does not verify for the guest. A restore the agent chose took the next
    /// archive instead; a signed job naming it failed with nothing sent to Proxmox.
    ArchiveRejected,
    /// A storage target of the manifest is disconnected, unreachable or failing.
    StorageLost,
    /// A lost storage target is mounted again.
    StorageRecovered,
    /// The newest backup of a guest to a target failed.
    BackupFailed,
    /// A guest's failed or overdue backup on a target is good again.
    BackupRecovered,
    /// A guest's last good backup on a tier is older than twice the tier's cadence.
    BackupOverdue,
    /// The newest restore test of a guest's backup on a tier failed.
    RestoreTestFailed,
    /// A guest has had no passing restore test within twice the policy's interval.
    RestoreTestOverdue,
    /// A guest's failed or overdue restore test passes again.
    RestoreTestRecovered,
    /// A lost guest was restored by disaster recovery (with its RPO and RTO).
    GuestRestored,
    /// A host backs up to PBS but the hub holds no escrow blob of the key the host reports:
    /// if the box is lost, its encrypted backups cannot be opened.
    EscrowMissing,
    /// The host's escrow blob now wraps the key it reports (resolves `escrow_missing`).
    EscrowVerified,
    /// A guest's controller rollout did not report healthy in time: the guest was rolled back
    /// to the snapshot taken before it (or the rollback failed, which the message says).
    ControllerRolledBack,
    /// A guest's controller stayed silent through every in-place restart.
    ControllerBroken,
    /// A guest's controller reports running another digest than the one its signed record
    /// names (its golden base's signed controller digest, or the last committed rollout's).
    ControllerMismatch,
    /// A guest's controller reports the digest its signed record names again (resolves
    /// `controller_mismatch`).
    ControllerMatched,
    /// The host's CPU usage stayed at or above the agent's high threshold.
    HostCpuHigh,
    /// The host's memory use stayed at or above the agent's high threshold.
    HostMemoryHigh,
    /// The host's root disk use stayed at or above the agent's high threshold.
    HostDiskHigh,
    /// A raised CPU, memory or disk gauge fell to its low threshold (resolves
    /// `host_cpu_high`, `host_memory_high`, `host_disk_high`).
    HostUsageRecovered,
    /// A watched disk's SMART reading says it is failing, or there is no reading.
    SmartFailing,
    /// A failing or unreadable disk reads as passed again (resolves `smart_failing`).
    SmartRecovered,
    /// The tunnel's readiness endpoint has been down for longer than the agent's bound.
    TunnelDown,
    /// The tunnel is ready again (resolves `tunnel_down`).
    TunnelRecovered,
    /// An operator-signed job opened the host's break-glass SSH door.
    BreakGlassOpen,
    /// The host's break-glass SSH door closed (expiry, a signed disable, or a newer door).
    BreakGlassClosed,
    /// A signed agent update was rolled back by the host's health gate (the new agent was
    /// not ready, did not poll, or crash-looped), or could not be staged.
    AgentUpdateFailed,
    /// A guest's CPU usage stayed at or above its own high threshold.
    GuestCpuHigh,
    /// A guest's memory use stayed at or above its own high threshold.
    GuestMemoryHigh,
    /// A guest's root disk use stayed at or above its own high threshold.
    GuestDiskHigh,
    /// A guest's raised gauge fell to its low threshold (resolves `guest_cpu_high`,
    /// `guest_memory_high`, `guest_disk_high`).
    GuestUsageRecovered,
    /// A disk of the node fails its health check or has a failing SMART attribute
    /// (Proxmox's disk API).
    DiskFailing,
    /// A disk of the node has used its wear past the agent's threshold.
    DiskWorn,
    /// A failing or worn disk reads healthy again (resolves `disk_failing`, `disk_worn`).
    DiskRecovered,
    /// An LVM-thin or ZFS pool's data or metadata stayed at or above the agent's pool
    /// threshold: it fills.
    PoolFillHigh,
    /// A filling pool fell to its low threshold (resolves `pool_fill_high`).
    PoolFillRecovered,
    /// A temperature sensor of the node stayed at or above its high: the chip's own limit, or
    /// the agent's `health.temperature_high_c` for a chip that gives none.
    TemperatureHigh,
    /// A hot sensor cooled to its low (resolves `temperature_high`).
    TemperatureRecovered,
    /// The PBS server's verification of a guest's backup group on a tier failed: a chunk is
    /// missing or does not match its digest (decision 0079).
    VerifyFailed,
    /// A guest's backup group on a PBS tier has gone without a passing verification for more
    /// than twice the verification interval.
    VerifyOverdue,
    /// A failed or overdue verification passes again (resolves `verify_failed`,
    /// `verify_overdue`).
    VerifyRecovered,
    /// Desired state asks for a bulk volume's own backup (`backup: {kind: target}`) but the
    /// signed data plan names none for it (`bulk_backups`): nothing archives the volume,
    /// which every vzdump leaves out (decision 0090).
    BulkUnprotected,
    /// The signed plan names a target for a bulk volume again (resolves `bulk_unprotected`).
    BulkProtected,
    /// The newest attempt to archive a bulk volume to its signed target failed.
    BulkBackupFailed,
    /// A newer archive of a bulk volume landed (resolves `bulk_backup_failed`).
    BulkBackupRecovered,
}

impl AlertKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::HostOverdue => "host_overdue",
            Self::HostRecovered => "host_recovered",
            Self::HubConnectivitySuspected => "hub_connectivity_suspected",
            Self::HubConnectivityRestored => "hub_connectivity_restored",
            Self::GuestLost => "guest_lost",
            Self::GuestBroken => "guest_broken",
            Self::GuestOrphaned => "guest_orphaned",
            Self::GuestMigrated => "guest_migrated",
            Self::GuestRecovered => "guest_recovered",
            Self::DestructiveOperation => "destructive_operation",
            Self::GoldenRefused => "golden_refused",
            Self::GoldenVerifyFailed => "golden_verify_failed",
            Self::StorageRefused => "storage_refused",
            Self::PlacementRefused => "placement_refused",
            Self::JobRefused => "job_refused",
            Self::ArchiveRejected => "archive_rejected",
            Self::StorageLost => "storage_lost",
            Self::StorageRecovered => "storage_recovered",
            Self::BackupFailed => "backup_failed",
            Self::BackupRecovered => "backup_recovered",
            Self::BackupOverdue => "backup_overdue",
            Self::RestoreTestFailed => "restore_test_failed",
            Self::RestoreTestOverdue => "restore_test_overdue",
            Self::RestoreTestRecovered => "restore_test_recovered",
            Self::GuestRestored => "guest_restored",
            Self::EscrowMissing => "escrow_missing",
            Self::EscrowVerified => "escrow_verified",
            Self::ControllerRolledBack => "controller_rolled_back",
            Self::ControllerBroken => "controller_broken",
            Self::ControllerMismatch => "controller_mismatch",
            Self::ControllerMatched => "controller_matched",
            Self::HostCpuHigh => "host_cpu_high",
            Self::HostMemoryHigh => "host_memory_high",
            Self::HostDiskHigh => "host_disk_high",
            Self::HostUsageRecovered => "host_usage_recovered",
            Self::SmartFailing => "smart_failing",
            Self::SmartRecovered => "smart_recovered",
            Self::TunnelDown => "tunnel_down",
            Self::TunnelRecovered => "tunnel_recovered",
            Self::BreakGlassOpen => "break_glass_open",
            Self::BreakGlassClosed => "break_glass_closed",
            Self::AgentUpdateFailed => "agent_update_failed",
            Self::GuestCpuHigh => "guest_cpu_high",
            Self::GuestMemoryHigh => "guest_memory_high",
            Self::GuestDiskHigh => "guest_disk_high",
            Self::GuestUsageRecovered => "guest_usage_recovered",
            Self::DiskFailing => "disk_failing",
            Self::DiskWorn => "disk_worn",
            Self::DiskRecovered => "disk_recovered",
            Self::PoolFillHigh => "pool_fill_high",
            Self::PoolFillRecovered => "pool_fill_recovered",
            Self::TemperatureHigh => "temperature_high",
            Self::TemperatureRecovered => "temperature_recovered",
            Self::VerifyFailed => "verify_failed",
            Self::VerifyOverdue => "verify_overdue",
            Self::VerifyRecovered => "verify_recovered",
            Self::BulkUnprotected => "bulk_unprotected",
            Self::BulkProtected => "bulk_protected",
            Self::BulkBackupFailed => "bulk_backup_failed",
            Self::BulkBackupRecovered => "bulk_backup_recovered",
        }
    }
}
