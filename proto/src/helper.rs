//! Wire contract between `bosun-agentd` and `bosun-helper`.
//!
//! One request (`{"verb": ..., "args": {...}}`) in, one [`Response`] out. Every argument
//! is a newtype that validates when it is constructed or deserialized, so a request that
//! parses is a request whose arguments are all in range. Unknown verbs, unknown fields,
//! unknown filesystem types and unknown mount options fail to parse.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Largest request the helper reads, in bytes (newline included).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// Largest `bootstrap.json` the helper writes, in bytes.
pub const MAX_BOOTSTRAP_BYTES: usize = 16 * 1024;
/// Where the helper is installed; sudoers and the units name exactly this path.
pub const HELPER_PATH: &str = "/usr/libexec/bosun/bosun-helper";
/// The argument that selects the socket transport (`bosun-helper@.service`).
pub const SOCKET_MODE_ARG: &str = "--socket";

/// Why an argument was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: {reason}")]
pub struct InvalidArgument {
    /// Which kind of argument.
    pub what: &'static str,
    /// The rejected value (never a secret).
    pub value: String,
    /// What rule it broke.
    pub reason: &'static str,
}

fn invalid(what: &'static str, value: &str, reason: &'static str) -> InvalidArgument {
    let mut shown: String = value.chars().take(80).collect();
    if shown.len() < value.len() {
        shown.push('…');
    }
    InvalidArgument {
        what,
        value: shown,
        reason,
    }
}

macro_rules! string_newtype {
    ($(#[$doc:meta])* $name:ident, $check:path) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates `value`.
            pub fn new(value: impl Into<String>) -> Result<Self, InvalidArgument> {
                let value = value.into();
                $check(&value)?;
                Ok(Self(value))
            }

            /// The validated text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidArgument;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                Self::new(value)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

fn check_fs_uuid(v: &str) -> Result<(), InvalidArgument> {
    let b = v.as_bytes();
    let dashed = |groups: &[usize], hex: fn(&u8) -> bool| {
        let mut at = 0;
        for (i, len) in groups.iter().enumerate() {
            if i > 0 {
                if b.get(at) != Some(&b'-') {
                    return false;
                }
                at += 1;
            }
            match b.get(at..at + len) {
                Some(part) if part.iter().all(hex) => at += len,
                _ => return false,
            }
        }
        at == b.len()
    };
    let lower = |c: &u8| c.is_ascii_digit() || (b'a'..=b'f').contains(c);
    let upper = |c: &u8| c.is_ascii_digit() || (b'A'..=b'F').contains(c);
    if dashed(&[8, 4, 4, 4, 12], lower) || dashed(&[4, 4], upper) {
        Ok(())
    } else {
        Err(invalid(
            "filesystem uuid",
            v,
            "expected lowercase 8-4-4-4-12 hex (ext4, xfs) or uppercase XXXX-XXXX (vfat)",
        ))
    }
}

fn check_target_id(v: &str) -> Result<(), InvalidArgument> {
    let ok = (1..=63).contains(&v.len())
        && v.bytes().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && v.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "target id",
            v,
            "expected 1-63 of [a-z0-9-], starting with a letter or digit",
        ))
    }
}

fn check_guest_path(v: &str) -> Result<(), InvalidArgument> {
    if !v.starts_with('/') || v.len() < 2 || v.len() > 255 {
        return Err(invalid(
            "guest path",
            v,
            "expected an absolute path of 2-255 bytes other than /",
        ));
    }
    let charset = v
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'/' | b'.' | b'_' | b'-'));
    if !charset {
        return Err(invalid(
            "guest path",
            v,
            "only [A-Za-z0-9/._-] are allowed (no ',' '=' or whitespace)",
        ));
    }
    if v[1..]
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(invalid(
            "guest path",
            v,
            "empty, '.' and '..' components are not allowed",
        ));
    }
    Ok(())
}

fn check_storage_id(v: &str) -> Result<(), InvalidArgument> {
    let ok = (1..=100).contains(&v.len())
        && v.bytes().next().is_some_and(|c| c.is_ascii_alphabetic())
        && v.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "storage id",
            v,
            "expected a PVE storage id: a letter, then [A-Za-z0-9._-]",
        ))
    }
}

fn check_template_volid(v: &str) -> Result<(), InvalidArgument> {
    let Some((storage, rest)) = v.split_once(':') else {
        return Err(invalid(
            "template volid",
            v,
            "expected <storage>:vztmpl/<file>",
        ));
    };
    check_storage_id(storage)?;
    let file = rest.strip_prefix("vztmpl/").unwrap_or("");
    let ok = (1..=200).contains(&file.len())
        && !file.starts_with('.')
        && file
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'+'));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "template volid",
            v,
            "expected <storage>:vztmpl/<file> with [A-Za-z0-9._+-] in the file name",
        ))
    }
}

fn check_image_ref(v: &str) -> Result<(), InvalidArgument> {
    let ok = (1..=255).contains(&v.len())
        && v.bytes()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && !v.contains("..")
        && v.bytes().all(|c| {
            c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || matches!(c, b'.' | b'_' | b'-' | b'/' | b':' | b'@')
        });
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "image reference",
            v,
            "expected [a-z0-9._/:@-], starting with a letter or digit",
        ))
    }
}

fn check_bridge(v: &str) -> Result<(), InvalidArgument> {
    let digits = v.strip_prefix("vmbr").unwrap_or("");
    if (1..=4).contains(&digits.len()) && digits.bytes().all(|c| c.is_ascii_digit()) {
        Ok(())
    } else {
        Err(invalid("bridge", v, "expected vmbrN with N of 1-4 digits"))
    }
}

fn check_block_device(v: &str) -> Result<(), InvalidArgument> {
    let name = v.strip_prefix("/dev/").unwrap_or("");
    let ok = (1..=32).contains(&name.len())
        && name.bytes().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "block device",
            v,
            "expected /dev/<name> with [a-z0-9] in the name",
        ))
    }
}

string_newtype!(
    /// A filesystem UUID as `blkid` prints it.
    FsUuid,
    check_fs_uuid
);
string_newtype!(
    /// A storage target's id: one safe path component under the mount root.
    TargetId,
    check_target_id
);
string_newtype!(
    /// An absolute path inside a guest (`mp=` of a mount point).
    GuestPath,
    check_guest_path
);
string_newtype!(
    /// A PVE storage id such as `local` or `local-lvm`.
    StorageId,
    check_storage_id
);
string_newtype!(
    /// A container template volume, `<storage>:vztmpl/<file>`.
    TemplateVolid,
    check_template_volid
);
string_newtype!(
    /// A container image reference such as `registry.example/bosun/controller:1.4.2`.
    ImageRef,
    check_image_ref
);
string_newtype!(
    /// A Linux bridge on the host, `vmbrN`.
    BridgeName,
    check_bridge
);
string_newtype!(
    /// A whole block device node directly under `/dev`.
    BlockDevice,
    check_block_device
);

macro_rules! int_newtype {
    ($(#[$doc:meta])* $name:ident, $int:ty, $min:expr, $max:expr, $what:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(try_from = "u64", into = "u64")]
        pub struct $name($int);

        impl $name {
            /// Smallest accepted value.
            pub const MIN: $int = $min;
            /// Largest accepted value.
            pub const MAX: $int = $max;

            /// Validates `value`.
            pub fn new(value: u64) -> Result<Self, InvalidArgument> {
                match <$int>::try_from(value) {
                    Ok(v) if (Self::MIN..=Self::MAX).contains(&v) => Ok(Self(v)),
                    _ => Err(invalid($what, &value.to_string(), concat!(
                        "out of range ", stringify!($min), "..=", stringify!($max)
                    ))),
                }
            }

            /// The validated number.
            pub fn get(self) -> $int {
                self.0
            }
        }

        impl TryFrom<u64> for $name {
            type Error = InvalidArgument;
            fn try_from(value: u64) -> Result<Self, Self::Error> {
                Self::new(value)
            }
        }

        impl From<$name> for u64 {
            fn from(value: $name) -> u64 {
                u64::from(value.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

int_newtype!(
    /// A PVE guest id.
    Vmid,
    u32,
    100,
    999_999_999,
    "vmid"
);
int_newtype!(
    /// The `N` of a container mount point `mpN`.
    MountIndex,
    u8,
    0,
    255,
    "mount point index"
);
int_newtype!(
    /// A host uid or gid a container's root is mapped to. Never 0 (a privileged
    /// container) and never `u32::MAX` (which `chown` reads as "leave unchanged").
    MappedId,
    u32,
    1,
    4_294_967_294,
    "mapped id"
);
int_newtype!(
    /// Size of the golden builder's root disk in GiB.
    DiskGib,
    u16,
    2,
    256,
    "disk size (GiB)"
);

/// The contents of `bootstrap.json`: a JSON object. It carries the guest's API token,
/// so `Debug` shows only its size.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BootstrapDocument(String);

impl BootstrapDocument {
    /// Validates that `text` is one JSON object of at most [`MAX_BOOTSTRAP_BYTES`].
    pub fn new(text: impl Into<String>) -> Result<Self, InvalidArgument> {
        let text = text.into();
        let shown = format!("<{} bytes>", text.len());
        if text.len() > MAX_BOOTSTRAP_BYTES {
            return Err(invalid("bootstrap document", &shown, "larger than 16 KiB"));
        }
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(serde_json::Value::Object(_)) => Ok(Self(text)),
            _ => Err(invalid("bootstrap document", &shown, "not one JSON object")),
        }
    }

    /// The document's bytes, to be written to disk and nowhere else.
    pub fn expose_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// Length in bytes (safe to log).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the document is empty (never true for a valid one).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for BootstrapDocument {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BootstrapDocument(<{} bytes redacted>)", self.0.len())
    }
}

impl TryFrom<String> for BootstrapDocument {
    type Error = InvalidArgument;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<BootstrapDocument> for String {
    fn from(value: BootstrapDocument) -> String {
        value.0
    }
}

/// Filesystems `mount_by_uuid` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsType {
    /// ext4
    Ext4,
    /// XFS
    Xfs,
    /// FAT (removable media)
    Vfat,
}

impl FsType {
    /// The kernel's (and blkid's) name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ext4 => "ext4",
            Self::Xfs => "xfs",
            Self::Vfat => "vfat",
        }
    }
}

/// What a storage target holds, which decides its fixed mount flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MountClass {
    /// Backups and data: `nosuid,nodev,noexec`.
    Data,
    /// Guest volumes that must run programs: `nosuid,nodev`.
    Executable,
}

/// Extra mount options a caller may ask for; anything else fails to parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MountOption {
    /// Read-only.
    Ro,
    /// Do not update access times.
    Noatime,
    /// Do not update directory access times.
    Nodiratime,
    /// Update access times relative to modification times.
    Relatime,
}

/// Arguments of `mount_by_uuid`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountByUuid {
    /// Filesystem to mount.
    pub uuid: FsUuid,
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

/// Arguments of `prepare_config_mount`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrepareConfigMount {
    /// The guest; the directory is `<guests root>/<vmid>/bootstrap`.
    pub vmid: Vmid,
    /// Host uid the container's root maps to.
    pub root_uid: MappedId,
    /// Host gid the container's root maps to.
    pub root_gid: MappedId,
    /// Written as `bootstrap.json`, mode 0600, owned by the mapped root.
    pub bootstrap: BootstrapDocument,
}

/// The host directory bound into a guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BindSource {
    /// The guest's own bootstrap directory (always read-only).
    Bootstrap,
    /// A mounted storage target.
    Target {
        /// `<mount root>/<target_id>`.
        target_id: TargetId,
    },
}

/// Arguments of `attach_bind_mount`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachBindMount {
    /// The guest.
    pub vmid: Vmid,
    /// Becomes `mpN`.
    pub index: MountIndex,
    /// What to bind.
    pub source: BindSource,
    /// Where it appears inside the guest.
    pub guest_path: GuestPath,
    /// Read-only; forced on for [`BindSource::Bootstrap`].
    pub read_only: bool,
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
}

/// Arguments of `smart_status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmartStatus {
    /// Whole disk to query.
    pub device: BlockDevice,
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
    /// Create a guest's bootstrap directory and write `bootstrap.json`.
    PrepareConfigMount(PrepareConfigMount),
    /// `pct set <vmid> -mpN <dir>,mp=<path>,ro=1`.
    AttachBindMount(AttachBindMount),
    /// Build the golden container image and vzdump it.
    BuildGolden(BuildGolden),
    /// `smartctl --json` for one disk.
    SmartStatus(SmartStatus),
}

/// The verb names, as they appear on the wire, in sudoers and in audit lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerbName {
    /// See [`Request::MountByUuid`].
    MountByUuid,
    /// See [`Request::Unmount`].
    Unmount,
    /// See [`Request::PrepareConfigMount`].
    PrepareConfigMount,
    /// See [`Request::AttachBindMount`].
    AttachBindMount,
    /// See [`Request::BuildGolden`].
    BuildGolden,
    /// See [`Request::SmartStatus`].
    SmartStatus,
}

impl VerbName {
    /// Every verb, in declaration order.
    pub const ALL: [VerbName; 6] = [
        Self::MountByUuid,
        Self::Unmount,
        Self::PrepareConfigMount,
        Self::AttachBindMount,
        Self::BuildGolden,
        Self::SmartStatus,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MountByUuid => "mount_by_uuid",
            Self::Unmount => "unmount",
            Self::PrepareConfigMount => "prepare_config_mount",
            Self::AttachBindMount => "attach_bind_mount",
            Self::BuildGolden => "build_golden",
            Self::SmartStatus => "smart_status",
        }
    }

    /// Parses a wire name (e.g. the sudo transport's argument).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == name)
    }
}

impl fmt::Display for VerbName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Request {
    /// This request's verb.
    pub fn verb(&self) -> VerbName {
        match self {
            Self::MountByUuid(_) => VerbName::MountByUuid,
            Self::Unmount(_) => VerbName::Unmount,
            Self::PrepareConfigMount(_) => VerbName::PrepareConfigMount,
            Self::AttachBindMount(_) => VerbName::AttachBindMount,
            Self::BuildGolden(_) => VerbName::BuildGolden,
            Self::SmartStatus(_) => VerbName::SmartStatus,
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
    /// `prepare_config_mount`
    ConfigPrepared {
        /// The bootstrap directory.
        dir: String,
        /// The written `bootstrap.json`.
        file: String,
    },
    /// `attach_bind_mount`
    BindAttached {
        /// `mpN`
        key: String,
        /// The value set, `<dir>,mp=<path>,ro=1`.
        value: String,
    },
    /// `build_golden`
    GoldenBuilt {
        /// The builder container (destroyed afterwards).
        vmid: Vmid,
        /// The archive vzdump reported, when it did.
        archive: Option<String>,
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
