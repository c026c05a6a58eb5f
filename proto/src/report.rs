//! `bosun.report/v1`: the host-domain state report, sent whole in a poll after the agent
//! starts, after a reconnect and when the hub asks; between those the agent sends only
//! what changed ([`crate::delta::ReportDelta`]). `seq` numbers reports so a delta names
//! the report it applies to.
//!
//! Reports are tolerant: unknown fields are ignored and unknown enum values decode as
//! `unknown`, so an older hub keeps accepting a newer agent.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::desired::{
    BulkBackup, GuestKind, GuestResources, PlacementRefusal, Retention, StorageClass,
};
use crate::health::HostHealth;
use crate::validate::{self, ValidationError};

pub use crate::report_bulk::MAX_REPORTED_BULK_VOLUMES;
pub use backup::{BackupReport, RestoreTestOutcome, RestoreTestReport};
pub use target::{MAX_LEGACY_DETAIL_CHARS, TargetReason, TargetReport, TargetStatus};

mod backup;
mod target;
/// The schema name of [`StateReport`].
pub use crate::schema_ids::STATE_REPORT as SCHEMA;
/// Most audit entries one report may carry.
pub const MAX_AUDIT_ENTRIES: usize = 1_000;
/// Most restore-test results one report may carry (one per guest and tier).
pub const MAX_RESTORE_TESTS: usize = 8 * crate::desired::MAX_GUESTS;

// The OpenAPI schemas of reports and deltas state these bounds as literals (`max_items`).
const _: () = assert!(MAX_AUDIT_ENTRIES == 1_000 && MAX_RESTORE_TESTS == 8_000);
const _: () = assert!(
    crate::verify::MAX_VERIFICATIONS
        == (crate::desired::MAX_FURTHER_TIERS + 1) * crate::desired::MAX_GUESTS
);
const _: () = assert!(crate::desired::MAX_GUESTS == 1_000);

/// What the agent observed on its host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StateReport {
    /// Always [`SCHEMA`].
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::state_report))]
    pub schema: String,
    /// The report's sequence number, increasing across the agent's reports (0 = an agent
    /// that does not number its reports; such a report is never the base of a delta).
    #[serde(default)]
    pub seq: u64,
    /// Host capacity and usage; absent (`null`) when the agent could not read them this time
    /// (Proxmox's node list failed): never zeros standing in for a reading.
    #[serde(default)]
    pub host: Option<HostMetrics>,
    /// Guests found on the host.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 1_000))]
    pub guests: Vec<GuestReport>,
    /// Storage targets and their status.
    #[serde(default)]
    pub storage: Vec<TargetReport>,
    /// The last finished backup per (guest, target), successful or not, from the
    /// agent's journal (so it survives agent restarts).
    #[serde(default)]
    pub last_backups: Vec<BackupReport>,
    /// The last restore test, if any ran (the newest of `restore_tests`).
    #[serde(default)]
    pub last_restore_test: Option<RestoreTestReport>,
    /// The last restore test per (guest, tier), from the agent's journal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 8_000))]
    pub restore_tests: Vec<RestoreTestReport>,
    /// The newest verification per (guest, tier), from the agent's journal: PBS's verify on a
    /// PBS tier, the helper's re-hash of the archives on any other (decision 0103).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 5_000))]
    pub verifications: Vec<crate::verify::VerifyReport>,
    /// Health of the tunnel service, if one is configured.
    #[serde(default)]
    pub tunnel: Option<TunnelHealth>,
    /// Software versions on the host.
    pub versions: Versions,
    /// Audit-log entries since the last sequence number the hub acknowledged, in increasing
    /// sequence order.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 1_000))]
    pub audit: Vec<AuditEntry>,
    /// The host's age X25519 recipient (`age1…`): operators seal storage credentials to it
    /// (`bosunctl secret seal`), and only this host can open them. Sent in full reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^age1[0-9a-z]{58}$"))]
    pub storage_recipient: Option<String>,
    /// The fingerprint of the host's PBS encryption key K (never the key): 32 lowercase hex
    /// bytes joined by `:`, as Proxmox shows it. Sent in full reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[0-9a-f]{2}(:[0-9a-f]{2}){31}$")
    )]
    pub pbs_key_fingerprint: Option<String>,
    /// The backup tiers the agent runs, in order, with the retention it applies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<TierReport>,
    /// Every guest's bulk volumes, which vzdump leaves out, with their own backup decision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 8000))]
    pub bulk_volumes: Vec<BulkVolumeReport>,
    /// CPU, memory and disk against the agent's thresholds, and SMART readings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_health: Option<HostHealth>,
    /// The signed data plan the host holds its storage to, if it verified one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_plan: Option<PlanReport>,
    /// What of the desired state the host will not apply, with why ([`crate::refused`]): while
    /// any is listed, the host does not report the generation applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 512))]
    pub refused: Vec<crate::refused::Refused>,
    /// The host's golden base: the build guests are provisioned from, a newer one awaiting
    /// verification, the archives kept and the last build's outcome (decision 0083).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub golden: Option<crate::golden_report::GoldenReport>,
}

/// One bulk volume and what backs it up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BulkVolumeReport {
    /// The guest.
    pub guest_id: Uuid,
    /// The volume's name.
    pub name: String,
    /// Where it is mounted in the guest.
    pub path: String,
    /// Its size in GiB.
    pub size_gib: u32,
    /// The speed class it asks for (absent in reports of agents that did not send it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<StorageClass>,
    /// The `bulk-data` target it is placed on (`durable_id`), if one fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The Proxmox storage of that target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_id: Option<String>,
    /// Why no target fits, when none does: the guest is then neither provisioned nor restored
    /// (a volume is never put on a target of another class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<PlacementRefusal>,
    /// Its own backup decision (the guest's vzdump never includes it).
    pub backup: BulkBackup,
    /// The target the signed data plan archives it to (`durable_id`), when the plan names
    /// one (decision 0090): the only target it is ever archived to. Absent: no archive is
    /// taken, whatever `backup` says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub signed_target: Option<String>,
    /// Its newest archive, once one was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_archive: Option<BulkArchiveReport>,
    /// Why the newest attempt to archive it failed, when it did (at most
    /// [`crate::verify::MAX_DETAIL_CHARS`] characters, no control characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 200))]
    pub last_error: Option<String>,
    /// Why no archive of it is taken whatever the plan says, when Bosun cannot take one
    /// (decision 0124): absent, the volume is archived as the plan names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_archived: Option<BulkNotArchived>,
}

/// Why a bulk volume is not archived at all, a closed vocabulary (decision 0124).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum BulkNotArchived {
    /// The volume is a disk of a virtual machine: the helper archives a container's volume
    /// from inside the container, which it cannot do for a running VM's disk, and the VM's
    /// own vzdump leaves the disk out (`backup=0`).
    VmDisk,
    /// Anything this version does not know.
    #[serde(other)]
    Unknown,
}

impl BulkNotArchived {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::VmDisk => "vm_disk",
            Self::Unknown => "unknown",
        }
    }
}

/// One archive of a bulk volume (decision 0090).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BulkArchiveReport {
    /// When it was written.
    pub at: Timestamp,
    /// The target it is on (`durable_id`).
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub target: String,
    /// Its file name in the volume's directory on the target:
    /// `bulk-<volume>-<YYYY_MM_DD-HH_MM_SS>.tar`, as the helper names it.
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 255, pattern = "^bulk-[a-z0-9-]+-[0-9_-]+\\.tar$")
    )]
    pub name: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// SHA-256 of its bytes, lowercase hex.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub sha256: String,
}

/// The signed data plan in force on a host (DESIGN §5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlanReport {
    /// The plan's serial.
    pub serial: u64,
    /// When the operator issued it.
    pub issued_at: Timestamp,
    /// The signer's key fingerprint (`SHA256:…`).
    pub signer: String,
    /// Each target the plan names: its `durable_id`.
    pub targets: Vec<String>,
    /// The least time between two scheduled backups of a guest on a tier, in seconds.
    pub min_interval_seconds: u32,
}

/// One backup tier as the agent runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TierReport {
    /// Position in the policy, 0 = the first (quiesced) tier.
    pub tier: u32,
    /// The target's `durable_id`, or the Proxmox storage id for the configured storage.
    pub target: String,
    /// The Proxmox storage the tier writes to.
    pub storage_id: String,
    /// The tier's calendar event.
    pub schedule: String,
    /// A further calendar event desired state adds, within the plan's least interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_schedule: Option<String>,
    /// Retention desired state asks for.
    pub desired: Retention,
    /// Retention the agent applies: the desired one raised to the signed floor.
    pub applied: Retention,
    /// Why `applied` differs from `desired`, or why the tier runs at all when desired state
    /// dropped it (`no signed retention floor`, `below the signed floor`, `kept by the
    /// signed floor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

/// Host capacity and usage.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostMetrics {
    /// Logical CPUs.
    #[serde(default)]
    pub cpu_count: u32,
    /// CPU usage 0.0..=1.0 (share of all CPUs).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 0.0, maximum = 1.0))]
    pub cpu_usage: f64,
    /// Total memory in MiB.
    #[serde(default)]
    pub memory_total_mib: u64,
    /// Used memory in MiB.
    #[serde(default)]
    pub memory_used_mib: u64,
    /// Total root disk in GiB.
    #[serde(default)]
    pub disk_total_gib: u64,
    /// Used root disk in GiB.
    #[serde(default)]
    pub disk_used_gib: u64,
}

/// One guest as observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GuestReport {
    /// Bosun guest id, when the guest is one Bosun manages.
    #[serde(default)]
    pub guest_id: Option<Uuid>,
    /// Proxmox VMID.
    pub vmid: u32,
    /// The guest's kind: `lxc` (absent: every report written before VMs, and a container's
    /// today) or `qemu`, as the agent observes it (a lost guest's, as its desired state gives
    /// it).
    #[serde(default, skip_serializing_if = "GuestKind::is_lxc")]
    pub kind: GuestKind,
    /// Guest hostname.
    #[serde(default)]
    pub hostname: String,
    /// Observed state.
    pub status: GuestStatus,
    /// Observed size, if known.
    #[serde(default)]
    pub resources: Option<GuestResources>,
    /// The controller image digest (`sha256:…`) the guest's controller says it runs, from its
    /// last health report through the local API; absent until it reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^sha256:[0-9a-f]{64}$"))]
    pub controller_digest: Option<String>,
    /// The digest the agent's signed record says the guest should run (its golden base's
    /// signed controller digest from provisioning on, or the last committed rollout's), once
    /// settled: absent with no record and while a rollout is in flight. A reported
    /// `controller_digest` that differs is the hub's `controller_mismatch` alert.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^sha256:[0-9a-f]{64}$"))]
    pub controller_expected: Option<String>,
    /// The static addresses the guest's Proxmox config gives its interfaces (`ip=`, `ip6=`,
    /// without prefix): with `ipfilter` on, the only source addresses it can use, the ones the
    /// local API knows it by and the tunnel routes to (decision 0101). Empty: none static (a
    /// DHCP guest from before Bosun assigned addresses).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 64))]
    pub addresses: Vec<String>,
}

/// Observed state of a guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GuestStatus {
    /// Running.
    Running,
    /// Shut down.
    Stopped,
    /// Being provisioned.
    Provisioning,
    /// Present on the host but absent from desired state; left alone.
    Orphaned,
    /// Desired running, but it failed to start the bounded number of times; not started
    /// again until desired state changes.
    Broken,
    /// Created by the agent, but gone from Proxmox (destroyed behind its back, lost
    /// storage) or its vmid holds another container: never replaced by a blank guest;
    /// the hub raises `guest_lost`. `vmid` is the one the agent recorded for it.
    Lost,
    /// Created by the agent, but another node of the Proxmox cluster holds it now (it was
    /// migrated): left alone, never recovered (a restore would run a second copy); the hub
    /// raises `guest_migrated`.
    Migrated,
    /// Anything this hub version does not know.
    #[serde(other)]
    Unknown,
}

impl GuestStatus {
    /// The name as written in reports (`running`, `lost`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Stopped => "stopped",
            Self::Provisioning => "provisioning",
            Self::Orphaned => "orphaned",
            Self::Broken => "broken",
            Self::Lost => "lost",
            Self::Migrated => "migrated",
            Self::Unknown => "unknown",
        }
    }
}

/// Health of the tunnel service (`cloudflared`, its readiness endpoint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TunnelHealth {
    /// Whether the tunnel is up.
    pub healthy: bool,
    /// Short human detail.
    #[serde(default)]
    pub detail: String,
    /// Since when it is down, while it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_since: Option<Timestamp>,
    /// Down for longer than the agent's bound: the hub holds `tunnel_down` open while set.
    #[serde(default)]
    pub raised: bool,
    /// What the agent manages of it (routes, restarts) and what the tunnel says of itself
    /// (edge connections, version); absent while the agent only watches its readiness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed: Option<crate::tunnel::TunnelState>,
}

impl TunnelHealth {
    /// Checks the text the hub repeats.
    pub fn validate(&self) -> Result<(), ValidationError> {
        crate::health::detail(|| "tunnel.detail".into(), &self.detail)?;
        self.managed
            .as_ref()
            .map_or(Ok(()), crate::tunnel::TunnelState::validate)
    }
}

/// Software versions on the host.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Versions {
    /// `bosun-agentd` version: not blank, at most 64 bytes, no control characters.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 64, pattern = "^ *[!-~][ -~]*$")
    )]
    pub agent: String,
    /// In-guest controller version, when uniform.
    #[serde(default)]
    pub controller: Option<String>,
    /// Proxmox VE version.
    #[serde(default)]
    pub pve: Option<String>,
}

/// One entry of the agent's audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// Monotonic sequence number on the host.
    pub seq: u64,
    /// When it happened.
    pub at: Timestamp,
    /// What happened (e.g. `guest.created`, `job.rejected`).
    pub action: String,
    /// Structured detail.
    #[serde(default)]
    pub detail: serde_json::Value,
}

impl StateReport {
    /// Report number `seq` of a host that observed nothing yet, from agent `agent_version`.
    pub fn empty(seq: u64, agent_version: &str) -> Self {
        Self {
            schema: SCHEMA.to_owned(),
            seq,
            host: None,
            guests: Vec::new(),
            storage: Vec::new(),
            last_backups: Vec::new(),
            last_restore_test: None,
            tunnel: None,
            versions: Versions {
                agent: agent_version.to_owned(),
                controller: None,
                pve: None,
            },
            audit: Vec::new(),
            storage_recipient: None,
            pbs_key_fingerprint: None,
            tiers: Vec::new(),
            bulk_volumes: Vec::new(),
            restore_tests: Vec::new(),
            verifications: Vec::new(),
            host_health: None,
            data_plan: None,
            refused: Vec::new(),
            golden: None,
        }
    }

    /// Checks the fields the hub relies on.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::schema(&self.schema, SCHEMA)?;
        validate::text(|| "versions.agent".into(), &self.versions.agent, 64)?;
        validate::count("audit", self.audit.len(), MAX_AUDIT_ENTRIES)?;
        validate::count("guests", self.guests.len(), crate::desired::MAX_GUESTS)?;
        check_guests(&self.guests)?;
        validate::count("restore_tests", self.restore_tests.len(), MAX_RESTORE_TESTS)?;
        crate::verify::validate_reports(&self.verifications)?;
        crate::report_bulk::validate_volumes(&self.bulk_volumes)?;
        if let Some(host) = &self.host {
            check_host(host)?;
        }
        if let Some(health) = &self.host_health {
            health.validate()?;
        }
        if let Some(tunnel) = &self.tunnel {
            tunnel.validate()?;
        }
        if let Some(golden) = &self.golden {
            golden.validate()?;
        }
        if let Some(recipient) = &self.storage_recipient
            && !crate::secret::is_age_recipient(recipient)
        {
            return Err(ValidationError::Invalid {
                field: "storage_recipient".into(),
                reason: "expected an age X25519 recipient (age1…)".into(),
            });
        }
        if let Some(fingerprint) = &self.pbs_key_fingerprint
            && !is_key_fingerprint(fingerprint)
        {
            return Err(ValidationError::Invalid {
                field: "pbs_key_fingerprint".into(),
                reason: "expected 32 lowercase hex bytes joined by `:`".into(),
            });
        }
        crate::report_text::check_report_names(self)?;
        crate::refused::check("refused", &self.refused)?;
        check_audit_order(&self.audit)
    }
}

/// Whether `s` is a PBS key fingerprint: 32 lowercase hex bytes joined by `:`.
fn is_key_fingerprint(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 32
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
}

/// Checks what the hub repeats of each guest: a controller digest is an image digest.
pub(crate) fn check_guests(guests: &[GuestReport]) -> Result<(), ValidationError> {
    for (i, guest) in guests.iter().enumerate() {
        if let Some(digest) = &guest.controller_expected {
            crate::controller::validate_digest(
                &format!("guests[{i}].controller_expected"),
                digest,
            )?;
        }
        if let Some(digest) = &guest.controller_digest {
            crate::controller::validate_digest(&format!("guests[{i}].controller_digest"), digest)?;
        }
    }
    Ok(())
}

/// Checks host metrics.
pub(crate) fn check_host(host: &HostMetrics) -> Result<(), ValidationError> {
    if !(0.0..=1.0).contains(&host.cpu_usage) {
        return Err(ValidationError::Invalid {
            field: "host.cpu_usage".into(),
            reason: format!("{} is not a share between 0 and 1", host.cpu_usage),
        });
    }
    Ok(())
}

/// Checks that audit sequence numbers increase.
pub(crate) fn check_audit_order(audit: &[AuditEntry]) -> Result<(), ValidationError> {
    for pair in audit.windows(2) {
        if pair[1].seq <= pair[0].seq {
            return Err(ValidationError::Invalid {
                field: "audit".into(),
                reason: "sequence numbers must increase".into(),
            });
        }
    }
    Ok(())
}
