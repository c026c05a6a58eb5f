//! Wire contract between `bosun-agentd` and `bosun-helper`.
//!
//! One request (`{"verb": ..., "args": {...}}`) in, one [`Response`] out. Every argument
//! is a newtype that validates when it is constructed or deserialized, so a request that
//! parses is a request whose arguments are all in range. Unknown verbs, unknown fields,
//! unknown filesystem types and unknown mount options fail to parse.

use serde::{Deserialize, Serialize};

mod bulk;
mod document;
mod guest;
mod mount;
pub mod recipe;
pub mod stamp;
mod types;
mod unit;

pub use bulk::{BULK_ARCHIVE_PREFIX, BULK_DIR, BULK_RESTORE_SCRIPT, BULK_TAR_ARGV};
pub use bulk::{BULK_RESTORE_DIRS, BulkRestoreStep, bulk_restore_argv};
pub use bulk::{bulk_archive_name, is_bulk_archive_name};
pub use document::{BootstrapDocument, MAX_BOOTSTRAP_BYTES};
pub use guest::restore_check_lines;
pub use guest::{CONTROLLER_UNIT, GUEST_BOOTSTRAP_PATH, GUEST_SYSTEMCTL, RESTART_CONTROLLER_ARGV};
pub use guest::{GUEST_CONTROLLER_DIGEST, GUEST_CONTROLLER_IMAGE, GUEST_DOCKER};
pub use guest::{MAX_CONTROLLER_IMAGE_BYTES, RESET_GUEST_IDENTITY_COMMANDS, loaded_image};
pub use guest::{RESTORE_CHECK_MAX_BYTES, RESTORE_CHECK_MAX_LINE_CHARS, RESTORE_CHECK_MAX_LINES};
pub use guest::{RESTORE_CHECK_PATH, RESTORE_CHECK_PROBE, SCRATCH_HOSTNAME_PREFIX};
pub use mount::{FsType, MountClass, MountOption};
pub use types::{
    AgentVersion, ArchiveBytes, ArchiveName, ArchiveSeconds, BlockDevice, BridgeName, CheckSeconds,
    DiskGib, DiskSerial, DumpDir, FsUuid, GuestPath, ImageRef, InvalidArgument, KeepCount,
    MountIndex, Sha256Hex, StorageDir, StorageId, TargetId, TemplateVolid, Vmid, VolumeName,
};
pub use unit::{HelperUnit, SOCKET_MODE_ARG, VerbName};

/// Largest request the helper reads, in bytes (newline included).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// Where the helper is installed; sudoers and the units name exactly this path.
pub const HELPER_PATH: &str = "/usr/libexec/bosun/bosun-helper";
/// Arguments of `mount_by_uuid`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountByUuid {
    /// Filesystem to mount.
    pub uuid: FsUuid,
    /// Serial of the removable or USB disk holding it; any other disk is refused.
    pub serial: DiskSerial,
    /// Mounted at `<mount root>/<target_id>`.
    pub target_id: TargetId,
    /// Expected filesystem type; a device of another type is refused.
    pub fstype: FsType,
    /// Decides `noexec`.
    pub class: MountClass,
    /// Extra options from the allowlist.
    #[serde(default)]
    pub options: Vec<MountOption>,
}

/// Arguments of `unmount`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unmount {
    /// Unmounts `<mount root>/<target_id>`.
    pub target_id: TargetId,
}

/// Arguments of `push_bootstrap`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PushBootstrap {
    /// The guest; it must be running (`pct push` refuses a stopped container).
    pub vmid: Vmid,
    /// Written to [`GUEST_BOOTSTRAP_PATH`] inside the guest, mode 0600, owned by the
    /// container's root.
    pub document: BootstrapDocument,
}

/// Arguments of `build_golden`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildGolden {
    /// Id of the temporary builder container.
    pub vmid: Vmid,
    /// Debian template to start from.
    pub template: TemplateVolid,
    /// Storage of the builder's root disk.
    pub rootfs_storage: StorageId,
    /// Size of the builder's root disk.
    pub rootfs_gib: DiskGib,
    /// Bridge for the builder's network (package downloads).
    pub bridge: BridgeName,
    /// Storage receiving the vzdump archive.
    pub golden_storage: StorageId,
    /// The controller image inside the host's controller image archive.
    pub controller_image: ImageRef,
    /// SHA-256 of the controller image archive's bytes, from the operator's signed recipe:
    /// the helper bakes the archive only if it hashes to this.
    pub controller_sha256: Sha256Hex,
}

/// Arguments of `hash_archive`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HashArchive {
    /// The archive's file name.
    pub archive: ArchiveName,
    /// The dump directory it is in, beneath one of the helper's `backup_roots`; absent:
    /// directly under the fixed dump root (the golden storage's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<DumpDir>,
    /// The most MiB per second the helper reads the archive at (the integrity check between
    /// restore tests paces itself so it does not starve the host's other disk users); absent:
    /// as fast as the disk gives it (a backup's or a restore's own check, which waits on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_mib_s: Option<std::num::NonZeroU32>,
}

/// Arguments of `smart_status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmartStatus {
    /// Whole disk to query.
    pub device: BlockDevice,
}

/// Arguments of `restart_controller`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartController {
    /// The guest; it must be running (`pct exec` refuses a stopped container).
    pub vmid: Vmid,
    /// The signed controller digest to place first (a `controller-update` rollout): the
    /// helper's own controller image archive must hash to it, is pushed to
    /// [`GUEST_CONTROLLER_IMAGE`], loaded and tagged `bosun/controller:golden`, and the digest
    /// written to [`GUEST_CONTROLLER_DIGEST`]. None: a restart in place on the image it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<Sha256Hex>,
}

/// Arguments of `reset_guest_identity`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetGuestIdentity {
    /// The guest; it must be running (`pct exec` refuses a stopped container).
    pub vmid: Vmid,
}

/// Arguments of `restore_check`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreCheck {
    /// The scratch guest; it must be running and carry the scratch marks (its hostname
    /// `restore-test-<vmid>`, every `netN` with `link_down=1`, no `mpN`).
    pub vmid: Vmid,
    /// How long the check may run before it is killed.
    pub timeout_secs: CheckSeconds,
}

/// Arguments of `break_glass_open`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakGlassOpen {
    /// The signed job that opens the door (written in the line's comment).
    pub job_id: uuid::Uuid,
    /// The operator's key, canonical.
    pub key: crate::ssh_public_key::SshPublicKey,
    /// When sshd stops accepting the key; the helper refuses a time in the past or more
    /// than 24 hours ahead of its own clock.
    pub expires_at: jiff::Timestamp,
}

/// Arguments of `break_glass_close` (none: it removes whatever door is open).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakGlassClose {}

/// Arguments of `stage_agent_update`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageAgentUpdate {
    /// The signed `agent-update` job (recorded; a second call with the same id and digest
    /// answers what the first did).
    pub update_id: uuid::Uuid,
    /// The version the job names.
    pub version: AgentVersion,
    /// The digest the job names; the file in the fixed inbox must hash to it.
    pub sha256: Sha256Hex,
}

/// Arguments of `bulk_archive` (decision 0090).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkArchive {
    /// The guest, admitted as every guest verb's is; its stamp must be bound to `guest_id`.
    pub vmid: Vmid,
    /// The guest id its stamp is bound to (a directory of the archive's path).
    pub guest_id: uuid::Uuid,
    /// The bulk volume (a directory of the archive's path, the start of its name).
    pub volume: VolumeName,
    /// Where the volume is mounted in the guest: the `mp=` of one of the guest's current
    /// mount points, which leaves it out of vzdump (`backup=0`).
    pub path: GuestPath,
    /// The target storage's path, beneath one of the helper's backup roots; the archive is
    /// written to `<storage_dir>/bosun-bulk/<guest_id>/<volume>/`.
    pub storage_dir: StorageDir,
    /// Archives of the volume kept there once this one is written; older ones are removed.
    pub keep_last: KeepCount,
    /// The most bytes the archive may have; more fails it.
    pub max_bytes: ArchiveBytes,
    /// How long it may take; longer fails it.
    pub timeout_secs: ArchiveSeconds,
}

/// Arguments of `bulk_restore` (decision 0108): what the agent's journal recorded of one
/// archive that `bulk_archive` wrote, to be put back into its volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkRestore {
    /// The guest, admitted as every guest verb's is; its stamp must be bound to `guest_id`.
    pub vmid: Vmid,
    /// The guest id its stamp is bound to (a directory of the archive's path).
    pub guest_id: uuid::Uuid,
    /// The bulk volume (a directory of the archive's path, the start of its name).
    pub volume: VolumeName,
    /// Where the volume is mounted in the guest: the `mp=` of one of its current mount points.
    pub path: GuestPath,
    /// The target storage's path, beneath one of the helper's backup roots; the archive lies
    /// in `<storage_dir>/bosun-bulk/<guest_id>/<volume>/`.
    pub storage_dir: StorageDir,
    /// The archive's file name, of `bulk_archive`'s shape for `volume`.
    pub archive: String,
    /// Its SHA-256 as recorded when it was written; any other is refused.
    pub sha256: Sha256Hex,
    /// Its size as recorded; any other is refused.
    pub size: ArchiveBytes,
    /// How long the whole restore may take; longer fails it (the volume is left whole).
    pub timeout_secs: ArchiveSeconds,
}

/// One helper request: the closed set of root operations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "verb",
    content = "args",
    rename_all = "snake_case",
    deny_unknown_fields
)]
pub enum Request {
    /// Mount a filesystem found by UUID under the mount root.
    MountByUuid(MountByUuid),
    /// Unmount a target under the mount root.
    Unmount(Unmount),
    /// `pct push <vmid> <staged document> /etc/bosun-bootstrap/bootstrap.json`.
    PushBootstrap(PushBootstrap),
    /// Build the golden container image and vzdump it.
    BuildGolden(BuildGolden),
    /// `smartctl --json` for one disk.
    SmartStatus(SmartStatus),
    /// SHA-256 of one backup archive under the fixed dump root or a backup root, read by
    /// the helper.
    HashArchive(HashArchive),
    /// `pct exec <vmid> -- /usr/bin/systemctl restart bosun-bootstrap.service`: heal a
    /// crashed controller in place, inside its existing guest.
    RestartController(RestartController),
    /// `pct exec <vmid> -- ` each of [`RESET_GUEST_IDENTITY_COMMANDS`]: a guest restored
    /// while its source may still run loses the SSH host keys and machine id it shares with it.
    ResetGuestIdentity(ResetGuestIdentity),
    /// `pct exec <vmid> -- /etc/bosun/restore-check` in a scratch guest of a restore test
    /// (refused for any other guest), bounded in time and output: the guest's own check of
    /// the data it was restored with.
    RestoreCheck(RestoreCheck),
    /// Write the break-glass account's one `authorized_keys` line (with `expiry-time=`).
    BreakGlassOpen(BreakGlassOpen),
    /// Remove the break-glass account's `authorized_keys` file.
    BreakGlassClose(BreakGlassClose),
    /// Copy the agent binary from the fixed inbox into the inactive slot, checking its
    /// SHA-256, record the trial and flip `current` to it.
    StageAgentUpdate(StageAgentUpdate),
    /// `pct exec <vmid> -- tar` of one bulk volume, written to a file beneath a backup root
    /// and the volume's oldest archives there removed past `keep_last` (decision 0090).
    BulkArchive(BulkArchive),
    /// One bulk archive, re-hashed against the digest the agent recorded, extracted by the
    /// guest's own tar into a fresh directory on the volume and swapped in (decision 0108).
    BulkRestore(BulkRestore),
}

impl Request {
    /// This request's verb.
    pub fn verb(&self) -> VerbName {
        match self {
            Self::MountByUuid(_) => VerbName::MountByUuid,
            Self::Unmount(_) => VerbName::Unmount,
            Self::PushBootstrap(_) => VerbName::PushBootstrap,
            Self::BuildGolden(_) => VerbName::BuildGolden,
            Self::SmartStatus(_) => VerbName::SmartStatus,
            Self::HashArchive(_) => VerbName::HashArchive,
            Self::RestartController(_) => VerbName::RestartController,
            Self::ResetGuestIdentity(_) => VerbName::ResetGuestIdentity,
            Self::RestoreCheck(_) => VerbName::RestoreCheck,
            Self::BreakGlassOpen(_) => VerbName::BreakGlassOpen,
            Self::BreakGlassClose(_) => VerbName::BreakGlassClose,
            Self::StageAgentUpdate(_) => VerbName::StageAgentUpdate,
            Self::BulkArchive(_) => VerbName::BulkArchive,
            Self::BulkRestore(_) => VerbName::BulkRestore,
        }
    }
}

/// Why the helper refused a request. A refusal has no side effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// The caller is not the agent user.
    Caller,
    /// The request is not one valid JSON request (unknown verb, bad argument, ...).
    Malformed,
    /// The request is larger than [`MAX_REQUEST_BYTES`].
    Oversized,
    /// A path has a symlink component or leaves its fixed root.
    UnsafePath,
    /// What the request names does not exist (device, target, directory).
    NotFound,
    /// What the request names is ambiguous or in the wrong state.
    Conflict,
    /// The block device is not one the verb may use (not removable or USB-attached,
    /// another serial, or mounted already).
    DeviceNotAllowed,
}

/// What a verb did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Output {
    /// `mount_by_uuid`
    Mounted {
        /// Block device that was mounted.
        device: String,
        /// Mount point.
        target: String,
        /// Effective flags, comma-separated.
        flags: String,
    },
    /// `unmount`
    Unmounted {
        /// Former mount point.
        target: String,
    },
    /// `push_bootstrap`
    BootstrapPushed {
        /// The guest.
        vmid: Vmid,
        /// The file written inside the guest.
        destination: String,
    },
    /// `build_golden`
    GoldenBuilt {
        /// The builder container (destroyed afterwards).
        vmid: Vmid,
        /// The archive vzdump reported, when it did.
        archive: Option<String>,
        /// SHA-256 (lowercase hex) of that archive, read back by the helper after vzdump
        /// wrote it; absent when the archive is not a file under the fixed dump root.
        sha256: Option<String>,
        /// The archive's size in bytes, read with its hash.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<u64>,
    },
    /// `hash_archive`
    ArchiveHashed {
        /// The archive's path.
        archive: String,
        /// SHA-256 of its bytes, lowercase hex.
        sha256: String,
        /// Its size in bytes.
        size: u64,
    },
    /// `restart_controller`
    ControllerRestarted {
        /// The guest.
        vmid: Vmid,
        /// The unit restarted inside it.
        unit: String,
        /// `sha256:<hex>` of the controller image archive the guest holds
        /// ([`GUEST_CONTROLLER_IMAGE`]), read by the helper after the restart; absent when the
        /// guest holds none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        measured: Option<String>,
    },
    /// `reset_guest_identity`
    GuestIdentityReset {
        /// The guest.
        vmid: Vmid,
    },
    /// `restore_check`
    RestoreChecked {
        /// The scratch guest.
        vmid: Vmid,
        /// Whether the guest has an executable [`RESTORE_CHECK_PATH`]; when not, nothing ran.
        installed: bool,
        /// The check's exit code; absent when it was not installed or did not exit by itself
        /// (killed at its time limit, or by a signal).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// It ran past its time limit and was killed.
        #[serde(default)]
        timed_out: bool,
        /// The first lines of what it wrote, stdout and stderr together
        /// ([`restore_check_lines`]).
        #[serde(default)]
        output: Vec<String>,
    },
    /// `smart_status`
    Smart {
        /// The disk.
        device: String,
        /// `smartctl --json` output.
        report: serde_json::Value,
        /// smartctl's exit status (a bit mask; non-zero is not a failure by itself).
        exit_status: i32,
    },
    /// `break_glass_open`
    BreakGlassOpened {
        /// The account the door opens.
        account: String,
        /// The `authorized_keys` file written.
        path: String,
        /// The key's `SHA256:` fingerprint.
        fingerprint: String,
        /// The `expiry-time` written (`YYYYMMDDHHMMSSZ`).
        expiry_time: String,
    },
    /// `break_glass_close`
    BreakGlassClosed {
        /// The `authorized_keys` file.
        path: String,
        /// Whether there was a file to remove.
        removed: bool,
    },
    /// `stage_agent_update`
    AgentUpdateStaged {
        /// The slot now holding the new binary, which `current` names.
        slot: String,
        /// The slot the agent ran from before (the gate's way back).
        previous: String,
        /// The version staged.
        version: String,
        /// SHA-256 of the bytes written, lowercase hex.
        sha256: String,
        /// Their length.
        size: u64,
        /// The update was already staged by an earlier call: nothing was written.
        already_staged: bool,
    },
    /// `bulk_archive`
    BulkArchived {
        /// The archive's path.
        archive: String,
        /// SHA-256 of its bytes, lowercase hex.
        sha256: String,
        /// Its size in bytes.
        size: u64,
        /// The older archives of the volume removed to keep `keep_last`.
        removed: u32,
    },
    /// `bulk_restore`
    BulkRestored {
        /// The archive's path.
        archive: String,
        /// SHA-256 of the bytes the guest's tar read, lowercase hex (the recorded one).
        sha256: String,
        /// How many bytes it read.
        size: u64,
    },
}

/// The helper's single answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case", deny_unknown_fields)]
pub enum Response {
    /// The verb ran.
    Ok {
        /// What it did.
        output: Output,
    },
    /// The request was refused before any effect.
    Refused {
        /// Category.
        reason: Refusal,
        /// Human-readable detail.
        message: String,
    },
    /// The verb started and failed.
    Failed {
        /// Human-readable detail.
        message: String,
    },
}

#[cfg(test)]
mod tests;
