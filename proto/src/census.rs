//! The census of what the hub can say (decision 0096): every field of `bosun.desired/v1`
//! ([`crate::desired::DesiredState`]) and of the poll answer ([`crate::poll::PollResponse`]),
//! each with its [`FieldClass`] and why. A test walks both documents' schemas and fails on a
//! field without a class and on a class naming no field; the hostile-hub suite generates its
//! cases from the unsigned entries.
//!
//! Paths are dotted; `[]` steps into a list's items. A signed document carried as a field is
//! one entry and its insides are not walked (its signature covers them).

/// What a field may do when the hub alone sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldClass {
    /// An operator-signed document (or a field the agent takes only from one): the hub
    /// forwards it and cannot make, change or withdraw what it says.
    Signed,
    /// A credential sealed to the host and taking effect only with the operator's signature
    /// inside the ciphertext (decision 0095); withholding it revokes nothing.
    SealedAndSigned,
    /// Unsigned: may add protection (a guest, a start, a shorter interval, a longer keep); any
    /// value that would delay, skip or move protection is bounded by the signed plan.
    UnsignedMayAddProtection,
    /// Unsigned and about neither data nor protection: bookkeeping, names, timings of the
    /// exchange with the hub.
    Cosmetic,
}

/// One field and its class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The field's path in its document.
    pub path: &'static str,
    /// Its class.
    pub class: FieldClass,
    /// Why, in a line.
    pub reason: &'static str,
}

/// The poll answer's field that carries the desired state: its fields are [`DESIRED`]'s.
pub const POLL_DESIRED: &str = "desired";

const fn entry(path: &'static str, class: FieldClass, reason: &'static str) -> Entry {
    Entry {
        path,
        class,
        reason,
    }
}

use FieldClass::{Cosmetic, SealedAndSigned, Signed, UnsignedMayAddProtection as MayAdd};

/// Every field of `bosun.desired/v1`.
pub const DESIRED: &[Entry] = &[
    entry("schema", Cosmetic, "constant; any other value is refused"),
    entry(
        "data_plan",
        Signed,
        "the operator's data plan: targets, tiers, cadences and floors the hub cannot change",
    ),
    entry(
        "golden_recipe",
        Signed,
        "the operator's golden recipe: what code is baked into new guests",
    ),
    entry(
        "tunnel_credentials",
        SealedAndSigned,
        "sealed to the host with the operator's signature inside (0095); withheld, the agent keeps the one it holds",
    ),
    entry(
        "dr_policy",
        MayAdd,
        "auto restores a lost guest the host created; manual only reports it; no backup is deleted or moved",
    ),
    entry(
        "backup_policy.floor",
        Signed,
        "the operator's retention floor: unsigned retention only keeps longer",
    ),
    entry(
        "backup_policy.schedule",
        MayAdd,
        "may back up more often; the plan's tier cadence holds whatever it says",
    ),
    entry(
        "backup_policy.retention.keep_last",
        MayAdd,
        "may keep longer; the signed floor bounds it from below",
    ),
    entry(
        "backup_policy.retention.keep_daily",
        MayAdd,
        "may keep longer; the signed floor bounds it from below",
    ),
    entry(
        "backup_policy.retention.keep_weekly",
        MayAdd,
        "may keep longer; the signed floor bounds it from below",
    ),
    entry(
        "backup_policy.retention.keep_monthly",
        MayAdd,
        "may keep longer; the signed floor bounds it from below",
    ),
    entry(
        "backup_policy.quiesce_grace_minutes",
        MayAdd,
        "a wait before a backup, bounded by the plan's cadence",
    ),
    entry(
        "backup_policy.target",
        MayAdd,
        "names one of the plan's tiers; a target the plan does not name is refused",
    ),
    entry(
        "backup_policy.further_tiers",
        MayAdd,
        "names more of the plan's tiers; the plan's own tiers run whatever it lists",
    ),
    entry(
        "restore_test_policy.enabled",
        MayAdd,
        "may add restore tests; the plan's restore-test cadence holds when false",
    ),
    entry(
        "restore_test_policy.interval_days",
        MayAdd,
        "may test more often; bounded by the plan's cadence",
    ),
    entry(
        "restore_test_policy.timeout_minutes",
        MayAdd,
        "how long a test may run; bounded, a timeout is a failed test that alerts",
    ),
    entry(
        "restore_test_policy.window.start_hour",
        MayAdd,
        "a window that may delay a test, bounded by the plan's cadence",
    ),
    entry(
        "restore_test_policy.window.hours",
        MayAdd,
        "a window that may delay a test, bounded by the plan's cadence",
    ),
    entry(
        "verify_policy.enabled",
        MayAdd,
        "may add verification; the plan's verify_hours holds when false",
    ),
    entry(
        "verify_policy.interval_hours",
        MayAdd,
        "may verify more often; the plan's verify_hours bounds it",
    ),
    entry(
        "guests[].guest_id",
        MayAdd,
        "a new id adds a guest; a guest left out is reported orphaned, never destroyed",
    ),
    entry(
        "guests[].hostname",
        MayAdd,
        "the guest's name; renames nothing and moves no data",
    ),
    entry(
        "guests[].vmid",
        MayAdd,
        "pins a new guest's VMID; an existing guest is never renumbered or replaced",
    ),
    entry(
        "guests[].customer.customer_id",
        MayAdd,
        "whose guest it is; a guest's data stays where the plan puts it",
    ),
    entry(
        "guests[].customer.display_name",
        Cosmetic,
        "a name shown to people",
    ),
    entry(
        "guests[].resources.cores",
        MayAdd,
        "resize up; a resize never destroys the guest",
    ),
    entry(
        "guests[].resources.memory_mib",
        MayAdd,
        "resize up; a resize never destroys the guest",
    ),
    entry(
        "guests[].resources.rootfs_gib",
        MayAdd,
        "grow the root disk; a disk is never shrunk",
    ),
    entry(
        "guests[].kind",
        MayAdd,
        "a new guest's kind; restored only from a signed golden of that kind, an existing guest is never converted",
    ),
    entry(
        "guests[].power",
        MayAdd,
        "start or stop; stopping keeps the guest and its backups",
    ),
    entry(
        "guests[].provides",
        MayAdd,
        "names what the guest offers others, so they start after it; moves and deletes nothing",
    ),
    entry(
        "guests[].requires",
        MayAdd,
        "holds a start only behind a guest the same document runs; a requirement nobody running provides or that closes a cycle is refused, not waited on (0099)",
    ),
    entry(
        "guests[].network.bridge",
        MayAdd,
        "the bridge a new guest joins; read only when it is created, a change for a guest that exists is refused (0101)",
    ),
    entry(
        "guests[].network.tag",
        MayAdd,
        "the VLAN a new guest joins; read only when it is created, a change for a guest that exists is refused (0101)",
    ),
    entry(
        "guests[].network.ipv4.cidr",
        MayAdd,
        "a new guest's address: never one another guest (journal or Proxmox config) or the node holds, never moved from a guest that exists (0101)",
    ),
    entry(
        "guests[].network.ipv4.gateway",
        MayAdd,
        "a new guest's gateway, inside its prefix; read only when it is created (0101)",
    ),
    entry(
        "guests[].network.ipv6.cidr",
        MayAdd,
        "a new guest's address: never one another guest (journal or Proxmox config) or the node holds, never moved from a guest that exists (0101)",
    ),
    entry(
        "guests[].network.ipv6.gateway",
        MayAdd,
        "a new guest's gateway, inside its prefix; read only when it is created (0101)",
    ),
    entry(
        "guests[].golden.volid",
        MayAdd,
        "names an archive to provision from; only one this host built or a signed golden names is restored",
    ),
    entry(
        "guests[].golden.sha256",
        MayAdd,
        "the archive's hash as the hub knows it; the helper's own hash is what is checked",
    ),
    entry(
        "guests[].golden.version",
        MayAdd,
        "names a golden version; only one built by the signed recipe is used",
    ),
    entry(
        "guests[].golden.signed",
        Signed,
        "an operator-signed golden document",
    ),
    entry(
        "guests[].bulk_volumes[].name",
        MayAdd,
        "adds a bulk volume; a volume left out is not destroyed",
    ),
    entry(
        "guests[].bulk_volumes[].size_gib",
        MayAdd,
        "grows a bulk volume; never shrunk",
    ),
    entry(
        "guests[].bulk_volumes[].path",
        MayAdd,
        "where a new volume is mounted in the guest",
    ),
    entry(
        "guests[].bulk_volumes[].class",
        MayAdd,
        "the class a new volume needs; placement by class is enforced, never on slower storage",
    ),
    entry(
        "guests[].bulk_volumes[].target",
        MayAdd,
        "names a bulk-data target the plan names",
    ),
    entry(
        "guests[].bulk_volumes[].backup.kind",
        MayAdd,
        "the volume's own backup decision; none needs a named acknowledgement",
    ),
    entry(
        "guests[].bulk_volumes[].backup.target",
        MayAdd,
        "names one of the plan's targets",
    ),
    entry(
        "guests[].bulk_volumes[].backup.acknowledged_by",
        MayAdd,
        "who acknowledged a volume without backup",
    ),
    entry(
        "guests[].hot_volumes[].name",
        MayAdd,
        "adds a hot volume, included in the guest's backups",
    ),
    entry(
        "guests[].hot_volumes[].size_gib",
        MayAdd,
        "grows a hot volume; never shrunk",
    ),
    entry(
        "guests[].hot_volumes[].path",
        MayAdd,
        "where a new volume is mounted in the guest",
    ),
    entry(
        "guests[].hot_volumes[].storage",
        MayAdd,
        "names a storage the signed plan classes fast; anything else is refused",
    ),
    entry(
        "guests[].thresholds.cpu.high_percent",
        MayAdd,
        "adds watching and alerts for the guest",
    ),
    entry(
        "guests[].thresholds.cpu.low_percent",
        MayAdd,
        "adds watching and alerts for the guest",
    ),
    entry(
        "guests[].thresholds.memory.high_percent",
        MayAdd,
        "adds watching and alerts for the guest",
    ),
    entry(
        "guests[].thresholds.memory.low_percent",
        MayAdd,
        "adds watching and alerts for the guest",
    ),
    entry(
        "guests[].thresholds.disk.high_percent",
        MayAdd,
        "adds watching and alerts for the guest",
    ),
    entry(
        "guests[].thresholds.disk.low_percent",
        MayAdd,
        "adds watching and alerts for the guest",
    ),
    entry(
        "guests[].share_class",
        MayAdd,
        "names a share class; what any class says is held within the signed plan's guest_share bounds (0100)",
    ),
    entry(
        "share_classes[].name",
        MayAdd,
        "a share class's name; a guest naming none takes `default`, else the bounds' defaults",
    ),
    entry(
        "share_classes[].cpu_weight",
        MayAdd,
        "CPU weight, held between the plan's floor and ceiling (else the agent's 10..=1000); touches no backup, which runs outside the guest (0100)",
    ),
    entry(
        "share_classes[].cpu_limit_millicores",
        MayAdd,
        "CPU time limit, never below the plan's floor (else a quarter core) nor above its ceiling (0100)",
    ),
    entry(
        "share_classes[].net_rate_mbytes_per_s",
        MayAdd,
        "network rate, never below the plan's floor (else 1 MB/s) nor above its ceiling; 0 (no limit) is invalid (0100)",
    ),
    entry(
        "storage[].type",
        MayAdd,
        "part of a target's identity; a target the plan does not name is never registered",
    ),
    entry(
        "storage[].durable_id",
        MayAdd,
        "refers to a plan target by name",
    ),
    entry(
        "storage[].class",
        MayAdd,
        "a target's speed class; hot volumes take their class from the signed plan",
    ),
    entry(
        "storage[].role",
        MayAdd,
        "part of a target's identity as the plan names it",
    ),
    entry(
        "storage[].state",
        MayAdd,
        "detaching or wiping a target needs a signed job; the plan's tiers keep running",
    ),
    entry("storage[].label", Cosmetic, "a name shown to people"),
    entry(
        "storage[].credentials",
        SealedAndSigned,
        "sealed to the host and target with the operator's signature inside (0095); withheld, the agent keeps the one it holds",
    ),
    entry(
        "storage[].username",
        MayAdd,
        "part of a target's identity; a changed one is another target, refused unless the plan names it",
    ),
    entry(
        "storage[].namespace",
        MayAdd,
        "part of a target's identity; a changed one is another target, refused unless the plan names it",
    ),
    entry(
        "storage[].fstype",
        MayAdd,
        "part of a target's identity; a changed one is another target, refused unless the plan names it",
    ),
    entry(
        "storage[].serial",
        MayAdd,
        "part of a target's identity; a changed one is another target, refused unless the plan names it",
    ),
    entry(
        "storage[].policy.schedule",
        MayAdd,
        "may back up to the target more often; the plan's tier cadence holds",
    ),
    entry(
        "storage[].policy.retention.keep_last",
        MayAdd,
        "may keep longer; the plan's floor bounds it from below",
    ),
    entry(
        "storage[].policy.retention.keep_daily",
        MayAdd,
        "may keep longer; the plan's floor bounds it from below",
    ),
    entry(
        "storage[].policy.retention.keep_weekly",
        MayAdd,
        "may keep longer; the plan's floor bounds it from below",
    ),
    entry(
        "storage[].policy.retention.keep_monthly",
        MayAdd,
        "may keep longer; the plan's floor bounds it from below",
    ),
    entry(
        "storage[].policy.default",
        MayAdd,
        "which plan target a guest without one backs up to",
    ),
    entry(
        "storage[].policy.schedulable",
        MayAdd,
        "whether new guests may be placed on the target",
    ),
];

/// Every field of the poll answer (`bosun.poll-response/v1`) but [`POLL_DESIRED`].
pub const POLL_ANSWER: &[Entry] = &[
    entry("schema", Cosmetic, "constant; any other value is refused"),
    entry(
        "generation",
        Cosmetic,
        "the desired state's version; what the desired state says is checked whatever its number",
    ),
    entry(
        "jobs",
        Signed,
        "operator-signed jobs, forwarded byte-exact; the hub can only withhold them, which runs nothing",
    ),
    entry(
        "config.poll_interval_seconds",
        Cosmetic,
        "when the agent talks to the hub, clamped to 1..=300; schedules run without the hub",
    ),
    entry(
        "config.long_poll_seconds",
        Cosmetic,
        "how long a poll waits, clamped to 0..=60",
    ),
    entry(
        "config.update_window.start",
        Cosmetic,
        "when a signed agent update may run",
    ),
    entry(
        "config.update_window.duration_minutes",
        Cosmetic,
        "how long a signed agent update may take to start",
    ),
    entry(
        "audit_acked_seq",
        Cosmetic,
        "which audit entries the hub holds; the journal on the host is kept either way",
    ),
    entry("report_seq", Cosmetic, "the base of the next report delta"),
    entry("full_report", Cosmetic, "asks for a full report"),
    entry(
        "correlation_id",
        Cosmetic,
        "an operator's label recorded with operations",
    ),
    entry(
        "hub_pins",
        Cosmetic,
        "unsigned pins are ignored and audited once (0049)",
    ),
    entry(
        "hub_pins_signed",
        Signed,
        "the operator's signed set of hub key pins",
    ),
    entry(
        "rotate_host_key",
        Cosmetic,
        "asks the agent to replace its own key",
    ),
    entry(
        "next_host_key_sha256",
        Cosmetic,
        "names the key the agent made; a wrong hash is not the agent's key",
    ),
];

/// The class the census gives `path` of `bosun.desired/v1`.
pub fn desired_class(path: &str) -> Option<FieldClass> {
    DESIRED.iter().find(|e| e.path == path).map(|e| e.class)
}

/// The unsigned fields of `bosun.desired/v1`: what a hub alone can set.
pub fn desired_unsigned() -> impl Iterator<Item = &'static Entry> {
    DESIRED.iter().filter(|e| {
        matches!(
            e.class,
            FieldClass::UnsignedMayAddProtection | FieldClass::Cosmetic
        )
    })
}

#[cfg(feature = "openapi")]
pub mod schema;

// The census test walks the documents' OpenAPI schemas (feature `openapi`, on in every
// workspace build: the hub and the agent enable it).
#[cfg(all(test, feature = "openapi"))]
mod tests;
