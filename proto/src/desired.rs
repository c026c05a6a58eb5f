//! `bosun.desired/v1`: what the hub wants a host to look like.
//!
//! The agent reconciles toward this document; it never destroys customer data because of a
//! change here (that needs a signed job, see [`crate::job`]). Unknown fields are rejected: a
//! typo in a desired-state file must fail loudly, not be silently ignored.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::validate::{self, ValidationError};

mod hot;
pub mod network;
pub mod order;
pub use hot::{HotVolume, MAX_HOT_VOLUMES};
pub(crate) use hot::{check_name as check_volume_name, check_path as check_volume_path};
pub use network::{GuestNetwork, StaticAddress};

/// The schema name of [`DesiredState`].
pub use crate::schema_ids::DESIRED as SCHEMA;

/// Most guests one desired-state document may declare.
pub const MAX_GUESTS: usize = 1_000;
/// Most storage targets one desired-state document may declare.
pub const MAX_TARGETS: usize = 64;

/// The desired state of one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DesiredState {
    /// Always [`SCHEMA`].
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::desired))]
    pub schema: String,
    /// Guests that should exist on the host. A guest missing here is reported `orphaned`, not
    /// destroyed.
    #[serde(default)]
    pub guests: Vec<GuestSpec>,
    /// The storage manifest.
    #[serde(default)]
    pub storage: Vec<StorageTarget>,
    /// When and how long to keep backups of every guest.
    pub backup_policy: BackupPolicy,
    /// How often the host proves a backup restores.
    pub restore_test_policy: RestoreTestPolicy,
    /// How often the host has PBS verify its guests' backup groups (the signed plan's
    /// `verify_hours` holds it at least that often; [`crate::verify`]).
    #[serde(default)]
    pub verify_policy: crate::verify::VerifyPolicy,
    /// What the agent does when a guest it created is lost from Proxmox.
    #[serde(default)]
    pub dr_policy: DrPolicy,
    /// The operator-signed golden recipe (`bosun.golden-recipe/v1`): the golden version each
    /// host builds through its helper, and the controller baked into it
    /// ([`crate::golden_recipe`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub golden_recipe: Option<crate::signed::SignedDocument>,
    /// The operator-signed data plan (`bosun.data-plan/v1`): where this host's customer data
    /// may go ([`crate::data_plan`]). Storage targets and tiers it does not name are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_plan: Option<crate::signed::SignedDocument>,
    /// The tunnel's credentials (cloudflared's credentials file), sealed by the operator to
    /// this host's age recipient and bound to this host and the tunnel the signed plan names
    /// (a `bosun.sealed-credential/v1` document naming `tunnel_id`; decision 0084). The agent
    /// writes them where the tunnel's configuration names its credentials file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel_credentials: Option<crate::secret::SealedSecret>,
    /// The guests' share classes: the CPU weight, CPU time limit and network rate each guest
    /// of a class gets, held within the signed plan's `guest_share` bounds (decision 0100).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub share_classes: Vec<crate::share::ShareClass>,
}

/// What kind of Proxmox guest a guest is.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum GuestKind {
    /// An LXC container (the default: documents written before VMs name no kind).
    #[default]
    Lxc,
    /// A QEMU virtual machine (DESIGN §8b), restored from a vzdump-qemu golden archive.
    Qemu,
}

impl GuestKind {
    /// Whether this is the default kind, left out when serialized.
    pub fn is_lxc(&self) -> bool {
        *self == Self::Lxc
    }

    /// The name as written in documents and Proxmox's `type` (`lxc`, `qemu`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lxc => "lxc",
            Self::Qemu => "qemu",
        }
    }
}

impl std::fmt::Display for GuestKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One guest (an LXC container or a QEMU virtual machine) and its spec. A guest of a kind this
/// version does not know is taken out of the hub's document and refused alone
/// ([`crate::desired_kinds`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GuestSpec {
    /// Stable identity of the guest; survives a restore onto another host.
    pub guest_id: Uuid,
    /// The guest's kind: `lxc` (absent) or `qemu`. A guest is restored only from a golden
    /// archive signed for its kind (decision 0114).
    #[serde(default, skip_serializing_if = "GuestKind::is_lxc")]
    pub kind: GuestKind,
    /// Hostname of the guest (`[A-Za-z0-9.-]`, at most 63 bytes).
    pub hostname: String,
    /// Proxmox VMID the guest should use, if the operator pins one (100..=999999999).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmid: Option<u32>,
    /// The customer this guest belongs to.
    pub customer: CustomerIdentity,
    /// Size of the guest.
    pub resources: GuestResources,
    /// Whether the guest should be running.
    pub power: Power,
    /// The golden base archive the guest is provisioned from.
    pub golden: GoldenArchive,
    /// Bulk data volumes (media, downloads): each a `backup=0` mount point on a manifest
    /// target of role `bulk-data`, left out of the guest's vzdump, with its own backup
    /// decision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bulk_volumes: Vec<BulkVolume>,
    /// Hot volumes (a database, an app's configuration): each a mount point the guest's
    /// vzdump includes, on a storage the signed data plan classes `fast` (enforced: the guest
    /// is not built while one has no such place).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hot_volumes: Vec<HotVolume>,
    /// The guest's own CPU, memory and root-disk thresholds: only a guest with thresholds is
    /// watched and alerted on ([`crate::guest_thresholds`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thresholds: Option<crate::guest_thresholds::GuestThresholds>,
    /// The share class the guest takes (a `share_classes` name); absent: the class named
    /// `default`, if any, else the bounds' defaults (decision 0100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_class: Option<String>,
    /// What the guest provides to others (capability names: 1 to 32 of `[a-z0-9-]`, at most
    /// 8): a guest requiring one of them starts after it and stops before it ([`order`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 8))]
    pub provides: Vec<String>,
    /// What the guest requires (capability names, at most 8): it starts only once every
    /// desired-running guest providing each is running, and stops before them. A requirement
    /// no guest provides, only stopped guests provide, or that closes a cycle is refused and
    /// not waited on ([`order`], decision 0099).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 8))]
    pub requires: Vec<String>,
    /// The guest's network: bridge, VLAN and static addresses; a family it leaves out (or the
    /// whole field absent) gets an address from the host's pool ([`network`], decision 0101).
    /// Read when the guest is created; a later change is refused, never applied to a guest
    /// that exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<GuestNetwork>,
}

/// The longest volume name a `qemu` guest may give: the name is the disk's `serial=`, which
/// QEMU bounds to 20 bytes (decision 0124).
pub const MAX_VM_VOLUME_NAME: usize = 20;

/// Most bulk volumes one guest may declare (`mp0`…`mp7`); bulk and hot volumes together are
/// at most this many mount points.
pub const MAX_BULK_VOLUMES: usize = 8;

/// One bulk data volume of a guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BulkVolume {
    /// Name, unique in the guest (`[a-z0-9-]`, at most 32 bytes).
    pub name: String,
    /// Size in GiB, 1..=65536.
    pub size_gib: u32,
    /// Where it is mounted inside the guest (absolute, not `/`).
    pub path: String,
    /// Speed class it needs; it is placed on an attached `bulk-data` target of this class.
    pub class: StorageClass,
    /// The target to place it on (`durable_id`); absent: the first attached `bulk-data`
    /// target of `class`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The volume's own backup decision: vzdump never includes it.
    pub backup: BulkBackup,
}

/// Why a bulk volume has no place on a host: placement by class is enforced, so a volume is
/// never put on a slower target instead, and the guest it belongs to is neither provisioned nor
/// restored until every volume of it has a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PlacementRefusal {
    /// No attached `bulk-data` target of the volume's class: e.g. a `fast` volume on a host
    /// whose bulk-data targets are all `slow`.
    NoTargetOfClass,
    /// The target the volume names is not an attached `bulk-data` target of the host.
    TargetUnavailable,
    /// The target the volume names is of another class than the volume asks for.
    TargetOfOtherClass,
    /// A hot volume's storage is not classed `fast` by the signed data plan (it is `slow`).
    StorageNotFast,
    /// A hot volume's storage has no class: the signed data plan does not name it (or there
    /// is no verified plan), so it is never taken for fast.
    StorageUnclassed,
    /// Anything this version does not know.
    #[serde(other)]
    Unknown,
}

impl PlacementRefusal {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoTargetOfClass => "no_target_of_class",
            Self::TargetUnavailable => "target_unavailable",
            Self::TargetOfOtherClass => "target_of_other_class",
            Self::StorageNotFast => "storage_not_fast",
            Self::StorageUnclassed => "storage_unclassed",
            Self::Unknown => "unknown",
        }
    }

    /// The refusal in words, for a volume asking for `class`.
    pub fn describe(self, class: StorageClass) -> String {
        let class = class.as_str();
        match self {
            Self::NoTargetOfClass => {
                format!("no attached bulk-data target of class {class}")
            }
            Self::TargetUnavailable => {
                "the target it names is not an attached bulk-data target".to_owned()
            }
            Self::TargetOfOtherClass => {
                format!("the target it names is not of class {class}")
            }
            Self::StorageNotFast => {
                format!("its storage is not of class {class} in the signed data plan")
            }
            Self::StorageUnclassed => format!(
                "the signed data plan gives its storage no class, so it is never taken for {class}"
            ),
            Self::Unknown => "refused".to_owned(),
        }
    }
}

/// How a bulk volume is backed up, decided per volume: never a silent loss.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum BulkBackup {
    /// Backed up to its own manifest target (`durable_id`), by the controller's own
    /// data backup.
    Target {
        /// The target.
        target: String,
    },
    /// Not backed up: the operator acknowledged the data can be lost (it can be downloaded
    /// again).
    None {
        /// Who acknowledged it, and when (free text, e.g. `ops@example 2026-11-20`).
        acknowledged_by: String,
    },
}

/// The customer identity written into the guest's bootstrap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CustomerIdentity {
    /// Operator's stable customer id (`[A-Za-z0-9._-]`).
    pub customer_id: String,
    /// Display name.
    pub display_name: String,
}

/// Guest size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GuestResources {
    /// CPU cores, 1..=512.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 512))]
    pub cores: u16,
    /// Memory in MiB, 64..=4194304.
    #[cfg_attr(feature = "openapi", schema(minimum = 64, maximum = 4_194_304))]
    pub memory_mib: u32,
    /// Root disk in GiB, 1..=65536.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 65_536))]
    pub rootfs_gib: u32,
}

/// Power state of a guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Power {
    /// Started and kept running.
    Running,
    /// Kept shut down.
    Stopped,
}

/// A golden base archive in a Proxmox storage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GoldenArchive {
    /// Proxmox volume id, e.g. `local:backup/vzdump-lxc-9000-2026_01_01-00_00_00.tar.zst`;
    /// empty when the guest names a [`GoldenArchive::version`] instead.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub volid: String,
    /// SHA-256 of the archive, 64 hex digits; empty with a version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,
    /// The operator's signature naming this archive and hash; the agent restores only a
    /// golden archive its own helper built or one named here (DESIGN §5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed: Option<crate::golden::SignedGolden>,
    /// A golden version (a signed recipe's `version`) instead of a volid and hash: the
    /// agent restores its own helper's build of that version, and nothing when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// One storage target of the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StorageTarget {
    /// Kind of target.
    #[serde(rename = "type")]
    pub kind: StorageType,
    /// Identity that survives box loss: filesystem UUID (usb), `server:export` (nfs/cifs),
    /// `repository` or `repository#fingerprint` (pbs), an absolute path (local-dir).
    pub durable_id: String,
    /// Speed class, set once at attach.
    pub class: StorageClass,
    /// What the target is used for.
    pub role: StorageRole,
    /// Schedule and retention for this target.
    pub policy: TargetPolicy,
    /// Lifecycle state.
    pub state: TargetState,
    /// Human label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Credentials (a CIFS/PBS password), sealed by the operator to this host's age
    /// recipient and bound to this target (a `bosun.sealed-credential/v1` document naming
    /// the host and the target's identity): the hub stores and forwards ciphertext it cannot
    /// open, and the agent opens it for this target only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<crate::secret::SealedSecret>,
    /// The CIFS user the sealed password belongs to (PBS names its user in `durable_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The PBS namespace this host's backups go to (PBS only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The filesystem a USB target holds (`ext4` when absent; USB only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fstype: Option<crate::helper::FsType>,
    /// The USB disk's serial number, as the kernel reports it (USB only; a data plan's USB
    /// target must name it, and the helper mounts only a removable disk with this serial).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
}

/// Storage target kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum StorageType {
    /// A directory on the host.
    LocalDir,
    /// A USB disk mounted by filesystem UUID.
    Usb,
    /// An NFS export.
    Nfs,
    /// A CIFS share.
    Cifs,
    /// A Proxmox Backup Server datastore.
    Pbs,
}

/// Speed class of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum StorageClass {
    /// SSD/NVMe-class.
    Fast,
    /// Spinning or remote.
    Slow,
}

impl StorageClass {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fast => "fast",
            Self::Slow => "slow",
        }
    }
}

/// Role of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum StorageRole {
    /// Holds live guest volumes.
    Primary,
    /// Receives local vzdump backups.
    VzdumpTarget,
    /// The offsite PBS datastore.
    PbsOffsite,
    /// Bulk data volumes excluded from vzdump.
    BulkData,
}

/// Lifecycle state of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TargetState {
    /// Should be mounted and in use.
    Attached,
    /// Known but expected to be absent.
    Disconnected,
    /// Retired (detaching one that holds data needs a signed job).
    Decommissioned,
}

/// Schedule and retention of one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TargetPolicy {
    /// Proxmox calendar event (e.g. `daily`, `02:30`, `mon..fri 22:00`), if this target runs
    /// its own schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub schedule: Option<String>,
    /// Retention for this target.
    #[serde(default)]
    pub retention: Retention,
    /// New guests are placed on this target by default.
    #[serde(default)]
    pub default: bool,
    /// Workloads may be scheduled here.
    #[serde(default = "yes")]
    pub schedulable: bool,
}

fn yes() -> bool {
    true
}

/// Largest `keep_*` value accepted.
pub const MAX_KEEP: u32 = 100_000;

/// How many backups to keep (Proxmox `prune-backups` semantics; 0 = not used; all 0 =
/// keep every backup).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// Keep the newest N.
    #[serde(default)]
    pub keep_last: u32,
    /// Keep one per day for N days.
    #[serde(default)]
    pub keep_daily: u32,
    /// Keep one per week for N weeks.
    #[serde(default)]
    pub keep_weekly: u32,
    /// Keep one per month for N months.
    #[serde(default)]
    pub keep_monthly: u32,
}

impl Retention {
    /// Whether this keeps every backup (no `keep_*` set).
    pub fn keeps_all(&self) -> bool {
        self.keep_last == 0
            && self.keep_daily == 0
            && self.keep_weekly == 0
            && self.keep_monthly == 0
    }

    /// The retention that keeps every backup either `self` or `floor` keeps: keep-all when
    /// either keeps all, else the larger of each count. Prune keeps a backup any rule
    /// selects, so raising a count never drops one.
    pub fn at_least(&self, floor: &Retention) -> Retention {
        if self.keeps_all() || floor.keeps_all() {
            return Retention::default();
        }
        Retention {
            keep_last: self.keep_last.max(floor.keep_last),
            keep_daily: self.keep_daily.max(floor.keep_daily),
            keep_weekly: self.keep_weekly.max(floor.keep_weekly),
            keep_monthly: self.keep_monthly.max(floor.keep_monthly),
        }
    }

    /// Each count within [`MAX_KEEP`]; errors name `field`.
    pub fn validate(&self, field: &str) -> Result<(), ValidationError> {
        for (name, n) in [
            ("keep_last", self.keep_last),
            ("keep_daily", self.keep_daily),
            ("keep_weekly", self.keep_weekly),
            ("keep_monthly", self.keep_monthly),
        ] {
            validate::range(|| format!("{field}.{name}"), n, 0, MAX_KEEP)?;
        }
        Ok(())
    }
}

/// Most tiers after the first one policy may name.
pub const MAX_FURTHER_TIERS: usize = 4;

/// The backup policy applying to every guest: an ordered list of tiers. The first tier is
/// the one the in-guest controller quiesces for (`/v1/backup/due`); each further tier is a
/// manifest target backed up on that target's own `policy` schedule and retention.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BackupPolicy {
    /// Proxmox calendar event of the first tier.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub schedule: String,
    /// Retention of the first tier.
    pub retention: Retention,
    /// Minutes a controller gets to quiesce after `/backup/due` turns true before the agent
    /// backs up anyway, 0..=1440.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 1440))]
    pub quiesce_grace_minutes: u32,
    /// The first tier's target: the `durable_id` of a manifest target; absent, the storage
    /// the agent's configuration names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The tiers after the first, in order (e.g. the PBS offsite target): `durable_id`s of
    /// manifest targets, each with a `policy.schedule`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub further_tiers: Vec<String>,
    /// The operator-signed `bosun.retention-floor/v1` document: retention below it, or a
    /// tier it names left out, is not applied without it (DESIGN §5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor: Option<crate::signed::SignedDocument>,
}

/// The restore-test policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RestoreTestPolicy {
    /// Whether restore tests run at all.
    pub enabled: bool,
    /// Days between restore tests of a guest, 1..=365.
    pub interval_days: u32,
    /// A test taking longer than this fails, 1..=1440.
    pub timeout_minutes: u32,
    /// The hours (UTC) restore tests may start in; absent: any time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<TestWindow>,
}

/// A daily window of whole hours, in UTC: `start_hour` for `hours` hours (wrapping past
/// midnight).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TestWindow {
    /// The first hour, 0..=23.
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 23))]
    pub start_hour: u8,
    /// How many hours it lasts, 1..=24.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 24))]
    pub hours: u8,
}

impl TestWindow {
    /// Whether the hour `hour` (0..=23) of a day lies in the window.
    pub fn contains_hour(&self, hour: u8) -> bool {
        let since_start = (u16::from(hour) + 24 - u16::from(self.start_hour % 24)) % 24;
        since_start < u16::from(self.hours.min(24))
    }
}

/// What happens to a guest this agent created that is lost from Proxmox (DESIGN §8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DrPolicy {
    /// Restore it at once from the fastest surviving tier.
    #[default]
    Auto,
    /// Report it and wait for an operator-signed `restore-now`.
    Manual,
}

impl DesiredState {
    /// Checks every field; the error names the first field that is wrong.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::schema(&self.schema, SCHEMA)?;
        validate::count("guests", self.guests.len(), MAX_GUESTS)?;
        validate::count("storage", self.storage.len(), MAX_TARGETS)?;
        let mut ids = HashSet::new();
        let mut vmids = HashSet::new();
        let mut names = HashSet::new();
        let mut addresses = HashSet::new();
        for (i, guest) in self.guests.iter().enumerate() {
            let at = |f: &str| format!("guests[{i}].{f}");
            guest.validate(i)?;
            // Two guests never get one address.
            for address in guest
                .network
                .iter()
                .flat_map(GuestNetwork::static_addresses)
            {
                if !addresses.insert(address) {
                    return Err(ValidationError::Duplicate {
                        field: at("network"),
                        value: address.to_string(),
                    });
                }
            }
            if !ids.insert(guest.guest_id) {
                return Err(ValidationError::Duplicate {
                    field: at("guest_id"),
                    value: guest.guest_id.to_string(),
                });
            }
            if !names.insert(guest.hostname.to_ascii_lowercase()) {
                return Err(ValidationError::Duplicate {
                    field: at("hostname"),
                    value: guest.hostname.clone(),
                });
            }
            if let Some(vmid) = guest.vmid
                && !vmids.insert(vmid)
            {
                return Err(ValidationError::Duplicate {
                    field: at("vmid"),
                    value: vmid.to_string(),
                });
            }
        }
        self.validate_shares()?;
        for (i, guest) in self.guests.iter().enumerate() {
            self.validate_bulk(i, guest)?;
        }
        let mut durable = HashSet::new();
        for (i, target) in self.storage.iter().enumerate() {
            target.validate_at(&format!("storage[{i}]"))?;
            if !durable.insert((target.kind, target.durable_id.as_str())) {
                return Err(ValidationError::Duplicate {
                    field: format!("storage[{i}].durable_id"),
                    value: target.durable_id.clone(),
                });
            }
        }
        self.validate_tiers()?;
        validate::range(
            || "backup_policy.quiesce_grace_minutes".into(),
            self.backup_policy.quiesce_grace_minutes,
            0,
            1440,
        )?;
        let rt = &self.restore_test_policy;
        validate::range(
            || "restore_test_policy.interval_days".into(),
            rt.interval_days,
            1,
            365,
        )?;
        validate::range(
            || "restore_test_policy.timeout_minutes".into(),
            rt.timeout_minutes,
            1,
            1440,
        )?;
        if let Some(window) = rt.window {
            validate::range(
                || "restore_test_policy.window.start_hour".into(),
                u32::from(window.start_hour),
                0,
                23,
            )?;
            validate::range(
                || "restore_test_policy.window.hours".into(),
                u32::from(window.hours),
                1,
                24,
            )?;
        }
        self.verify_policy.validate("verify_policy")?;
        if let Some(recipe) = &self.golden_recipe {
            recipe.golden_recipe()?;
        }
        if let Some(plan) = &self.data_plan {
            plan.data_plan()?;
        }
        Ok(())
    }
}

impl DesiredState {
    /// The share class `guest` takes: the one it names, else the one named
    /// [`crate::share::DEFAULT_CLASS`], else none.
    pub fn share_class_of(&self, guest: &GuestSpec) -> Option<&crate::share::ShareClass> {
        let name = guest
            .share_class
            .as_deref()
            .unwrap_or(crate::share::DEFAULT_CLASS);
        self.share_classes.iter().find(|c| c.name == name)
    }

    fn validate_shares(&self) -> Result<(), ValidationError> {
        validate::count(
            "share_classes",
            self.share_classes.len(),
            crate::share::MAX_SHARE_CLASSES,
        )?;
        let mut names = HashSet::new();
        for (i, class) in self.share_classes.iter().enumerate() {
            class.validate(&format!("share_classes[{i}]"))?;
            if !names.insert(class.name.as_str()) {
                return Err(ValidationError::Duplicate {
                    field: format!("share_classes[{i}].name"),
                    value: class.name.clone(),
                });
            }
        }
        for (i, guest) in self.guests.iter().enumerate() {
            if let Some(name) = &guest.share_class
                && !names.contains(name.as_str())
            {
                return Err(ValidationError::Invalid {
                    field: format!("guests[{i}].share_class"),
                    reason: format!("no share class is named {name:?}"),
                });
            }
        }
        Ok(())
    }

    /// The manifest target a bulk volume is placed on, if there is one.
    pub fn bulk_target(&self, volume: &BulkVolume) -> Option<&StorageTarget> {
        self.place_bulk(volume).ok()
    }

    /// Places a bulk volume: on the attached `bulk-data` target it names, or on the first one
    /// of its class, and only ever on a target of its class (a `fast` volume never lands on a
    /// `slow` target); else why it has no place.
    pub fn place_bulk(&self, volume: &BulkVolume) -> Result<&StorageTarget, PlacementRefusal> {
        let mut usable = self
            .storage
            .iter()
            .filter(|t| t.role == StorageRole::BulkData && t.state == TargetState::Attached);
        match &volume.target {
            Some(id) => {
                let target = usable
                    .find(|t| &t.durable_id == id)
                    .ok_or(PlacementRefusal::TargetUnavailable)?;
                if target.class == volume.class {
                    Ok(target)
                } else {
                    Err(PlacementRefusal::TargetOfOtherClass)
                }
            }
            None => usable
                .find(|t| t.class == volume.class)
                .ok_or(PlacementRefusal::NoTargetOfClass),
        }
    }

    fn validate_bulk(&self, i: usize, guest: &GuestSpec) -> Result<(), ValidationError> {
        validate::count(
            &format!("guests[{i}].bulk_volumes"),
            guest.bulk_volumes.len(),
            MAX_BULK_VOLUMES,
        )?;
        validate::count(
            &format!("guests[{i}].hot_volumes"),
            guest.hot_volumes.len(),
            MAX_HOT_VOLUMES,
        )?;
        validate::count(
            &format!("guests[{i}].hot_volumes"),
            guest.bulk_volumes.len() + guest.hot_volumes.len(),
            MAX_BULK_VOLUMES,
        )?;
        let mut names = HashSet::new();
        let mut paths = HashSet::new();
        for (j, volume) in guest.hot_volumes.iter().enumerate() {
            let at = |f: &str| format!("guests[{i}].hot_volumes[{j}].{f}");
            volume.validate(&at)?;
            if !names.insert(volume.name.as_str()) {
                return Err(ValidationError::Duplicate {
                    field: at("name"),
                    value: volume.name.clone(),
                });
            }
            if !paths.insert(volume.path.as_str()) {
                return Err(ValidationError::Duplicate {
                    field: at("path"),
                    value: volume.path.clone(),
                });
            }
        }
        for (j, volume) in guest.bulk_volumes.iter().enumerate() {
            let at = |f: &str| format!("guests[{i}].bulk_volumes[{j}].{f}");
            hot::check_name(&volume.name, &|| at("name"))?;
            validate::range(|| at("size_gib"), volume.size_gib, 1, 65_536)?;
            hot::check_path(&volume.path, &|| at("path"))?;
            if !names.insert(volume.name.as_str()) {
                return Err(ValidationError::Duplicate {
                    field: at("name"),
                    value: volume.name.clone(),
                });
            }
            if !paths.insert(volume.path.as_str()) {
                return Err(ValidationError::Duplicate {
                    field: at("path"),
                    value: volume.path.clone(),
                });
            }
            if let Err(refusal) = self.place_bulk(volume) {
                return Err(ValidationError::Invalid {
                    field: at("target"),
                    reason: refusal.describe(volume.class),
                });
            }
            match &volume.backup {
                BulkBackup::Target { target } => {
                    if !self.storage.iter().any(|t| &t.durable_id == target) {
                        return Err(ValidationError::Invalid {
                            field: at("backup.target"),
                            reason: format!("no storage target has durable_id {target:?}"),
                        });
                    }
                }
                BulkBackup::None { acknowledged_by } => {
                    validate::text(|| at("backup.acknowledged_by"), acknowledged_by, 200)?;
                    if acknowledged_by.trim().is_empty() {
                        return Err(ValidationError::Invalid {
                            field: at("backup.acknowledged_by"),
                            reason: "no backup must be acknowledged by someone".into(),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    fn validate_tiers(&self) -> Result<(), ValidationError> {
        let policy = &self.backup_policy;
        validate::calendar_event(|| "backup_policy.schedule".into(), &policy.schedule)?;
        policy.retention.validate("backup_policy.retention")?;
        validate::count(
            "backup_policy.further_tiers",
            policy.further_tiers.len(),
            MAX_FURTHER_TIERS,
        )?;
        validate_tier_targets(
            &self.storage,
            "backup_policy",
            policy.target.as_deref(),
            &policy.further_tiers,
        )?;
        if let Some(floor) = &policy.floor {
            floor
                .decode::<crate::retention::RetentionFloor>(
                    "backup_policy.floor",
                    crate::retention::FLOOR_SCHEMA,
                    crate::retention::MAX_FLOOR_DOCUMENT,
                )?
                .validate()?;
        }
        Ok(())
    }
}

/// Checks a tier list over `targets`: tier 0's target (`first`, if any) and each further
/// tier name a target of a backup role, the further ones with a `policy.schedule`, none
/// twice. Errors name `<prefix>.target` or `<prefix>.further_tiers[i]`.
pub(crate) fn validate_tier_targets(
    targets: &[StorageTarget],
    prefix: &str,
    first: Option<&str>,
    further: &[String],
) -> Result<(), ValidationError> {
    let tier_target = |field: &str, id: &str| -> Result<&StorageTarget, ValidationError> {
        let target = targets.iter().find(|t| t.durable_id == id).ok_or_else(|| {
            ValidationError::Invalid {
                field: field.to_owned(),
                reason: format!("no storage target has durable_id {id:?}"),
            }
        })?;
        if !matches!(
            target.role,
            StorageRole::VzdumpTarget | StorageRole::PbsOffsite
        ) {
            return Err(ValidationError::Invalid {
                field: field.to_owned(),
                reason: "a backup tier needs a target of role vzdump-target or pbs-offsite".into(),
            });
        }
        Ok(target)
    };
    let mut seen = HashSet::new();
    if let Some(first) = first {
        tier_target(&format!("{prefix}.target"), first)?;
        seen.insert(first);
    }
    for (i, id) in further.iter().enumerate() {
        let field = format!("{prefix}.further_tiers[{i}]");
        let target = tier_target(&field, id)?;
        if target.policy.schedule.is_none() {
            return Err(ValidationError::Invalid {
                field,
                reason: "the target has no policy.schedule".into(),
            });
        }
        if !seen.insert(id.as_str()) {
            return Err(ValidationError::Duplicate {
                field,
                value: id.clone(),
            });
        }
    }
    Ok(())
}

impl order::Orderable for GuestSpec {
    fn guest_id(&self) -> Uuid {
        self.guest_id
    }

    fn hostname(&self) -> &str {
        &self.hostname
    }

    fn provides(&self) -> &[String] {
        &self.provides
    }

    fn requires(&self) -> &[String] {
        &self.requires
    }

    fn running(&self) -> bool {
        self.power == Power::Running
    }
}

impl GuestSpec {
    fn validate(&self, i: usize) -> Result<(), ValidationError> {
        let at = |f: &str| format!("guests[{i}].{f}");
        if self.guest_id.is_nil() {
            return Err(ValidationError::Invalid {
                field: at("guest_id"),
                reason: "the nil UUID is not a guest id".into(),
            });
        }
        validate::text(|| at("hostname"), &self.hostname, 63)?;
        let valid_hostname = self.hostname.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
        if !valid_hostname {
            return Err(ValidationError::Invalid {
                field: at("hostname"),
                reason: "not a valid DNS hostname".into(),
            });
        }
        if let Some(vmid) = self.vmid {
            validate::range(|| at("vmid"), vmid, 100, 999_999_999)?;
        }
        validate::ident(
            || at("customer.customer_id"),
            &self.customer.customer_id,
            64,
        )?;
        validate::text(
            || at("customer.display_name"),
            &self.customer.display_name,
            200,
        )?;
        validate::range(|| at("resources.cores"), self.resources.cores, 1, 512)?;
        validate::range(
            || at("resources.memory_mib"),
            self.resources.memory_mib,
            64,
            4_194_304,
        )?;
        validate::range(
            || at("resources.rootfs_gib"),
            self.resources.rootfs_gib,
            1,
            65_536,
        )?;
        if let Some(thresholds) = &self.thresholds {
            thresholds.validate(&at("thresholds"))?;
        }
        order::validate(self, &at)?;
        if let Some(network) = &self.network {
            network.validate(&at)?;
        }
        // A VM's volume is a disk whose `serial=` is the volume's name (decision 0124), and
        // QEMU takes a drive serial of at most 20 bytes.
        if self.kind == GuestKind::Qemu {
            let bulk =
                (self.bulk_volumes.iter().enumerate()).map(|(j, v)| ("bulk_volumes", j, &v.name));
            let hot =
                (self.hot_volumes.iter().enumerate()).map(|(j, v)| ("hot_volumes", j, &v.name));
            for (list, j, name) in bulk.chain(hot) {
                if name.len() > MAX_VM_VOLUME_NAME {
                    return Err(ValidationError::Invalid {
                        field: at(&format!("{list}[{j}].name")),
                        reason: format!(
                            "a qemu guest's volume name is its disk's serial: at most {MAX_VM_VOLUME_NAME} bytes"
                        ),
                    });
                }
            }
        }
        if let Some(version) = &self.golden.version {
            crate::golden_recipe::validate_version(&at("golden.version"), version)?;
            if !self.golden.volid.is_empty()
                || !self.golden.sha256.is_empty()
                || self.golden.signed.is_some()
            {
                return Err(ValidationError::Invalid {
                    field: at("golden.version"),
                    reason: "a golden version stands alone: no volid, sha256 or signed".into(),
                });
            }
            return Ok(());
        }
        validate::text(|| at("golden.volid"), &self.golden.volid, 255)?;
        if !self.golden.volid.contains(':') {
            return Err(ValidationError::Invalid {
                field: at("golden.volid"),
                reason: "expected a Proxmox volume id `storage:path`".into(),
            });
        }
        if self.golden.sha256.len() != 64
            || !self.golden.sha256.chars().all(|c| c.is_ascii_hexdigit())
        {
            return Err(ValidationError::Invalid {
                field: at("golden.sha256"),
                reason: "expected 64 hex digits".into(),
            });
        }
        if let Some(signed) = &self.golden.signed {
            let document = signed.golden().map_err(|e| ValidationError::Invalid {
                field: at("golden.signed"),
                reason: e.to_string(),
            })?;
            if document.volid != self.golden.volid
                || !document.sha256.eq_ignore_ascii_case(&self.golden.sha256)
            {
                return Err(ValidationError::Invalid {
                    field: at("golden.signed"),
                    reason: "the signed document names another archive or hash".into(),
                });
            }
        }
        Ok(())
    }
}

/// Longest USB serial number accepted.
pub const MAX_SERIAL: usize = 64;

impl StorageTarget {
    /// Checks every field; errors name `prefix.<field>`.
    pub(crate) fn validate_at(&self, prefix: &str) -> Result<(), ValidationError> {
        let at = |f: &str| format!("{prefix}.{f}");
        validate::text(|| at("durable_id"), &self.durable_id, 256)?;
        let shape_ok = match self.kind {
            StorageType::Usb => self
                .durable_id
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == '-'),
            StorageType::Nfs | StorageType::Cifs => self
                .durable_id
                .split_once(':')
                .is_some_and(|(server, export)| !server.is_empty() && !export.is_empty()),
            StorageType::LocalDir => self.durable_id.starts_with('/'),
            StorageType::Pbs => !self.durable_id.contains(char::is_whitespace),
        };
        if !shape_ok {
            let reason = match self.kind {
                StorageType::Usb => "expected a filesystem UUID",
                StorageType::Nfs | StorageType::Cifs => "expected `server:export`",
                StorageType::LocalDir => "expected an absolute path",
                StorageType::Pbs => "expected `repository[#fingerprint]` without spaces",
            };
            return Err(ValidationError::Invalid {
                field: at("durable_id"),
                reason: reason.into(),
            });
        }
        if let Some(schedule) = &self.policy.schedule {
            validate::calendar_event(|| at("policy.schedule"), schedule)?;
        }
        self.policy.retention.validate(&at("policy.retention"))?;
        if let Some(username) = &self.username {
            validate::text(|| at("username"), username, 128)?;
            if self.kind != StorageType::Cifs {
                return Err(ValidationError::Invalid {
                    field: at("username"),
                    reason: "only a cifs target names its user here".into(),
                });
            }
        }
        if let Some(namespace) = &self.namespace {
            let ok = self.kind == StorageType::Pbs
                && namespace.len() <= 255
                && namespace.split('/').count() <= 7
                && namespace.split('/').all(|part| {
                    !part.is_empty()
                        && part
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                });
            if !ok {
                return Err(ValidationError::Invalid {
                    field: at("namespace"),
                    reason: "expected a PBS namespace (at most 7 `/`-separated names of \
                             [A-Za-z0-9_.-]) on a pbs target"
                        .into(),
                });
            }
        }
        if self.fstype.is_some() && self.kind != StorageType::Usb {
            return Err(ValidationError::Invalid {
                field: at("fstype"),
                reason: "only a usb target names its filesystem".into(),
            });
        }
        if let Some(serial) = &self.serial {
            let ok = self.kind == StorageType::Usb
                && !serial.is_empty()
                && serial.len() <= MAX_SERIAL
                && serial
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
            if !ok {
                return Err(ValidationError::Invalid {
                    field: at("serial"),
                    reason: format!(
                        "expected a usb disk's serial number (1 to {MAX_SERIAL} of [A-Za-z0-9_.:-])"
                    ),
                });
            }
        }
        if let Some(label) = &self.label {
            validate::text(|| at("label"), label, 128)?;
        }
        Ok(())
    }
}
