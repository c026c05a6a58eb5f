//! The helper request's validated argument types: each checks its value when it is
//! constructed or deserialized, so a request that parses has only valid arguments.

use std::fmt;

use serde::{Deserialize, Serialize};

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

pub(super) fn invalid(what: &'static str, value: &str, reason: &'static str) -> InvalidArgument {
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

fn check_disk_serial(v: &str) -> Result<(), InvalidArgument> {
    let ok = (1..=128).contains(&v.len())
        && v.bytes().all(|c| c.is_ascii_graphic() || c == b' ')
        && !v.starts_with(' ')
        && !v.ends_with(' ');
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "disk serial",
            v,
            "expected 1-128 printable ASCII characters, no leading or trailing space",
        ))
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
    /// A disk's serial number as the kernel reports it in sysfs (`serial`, trimmed).
    DiskSerial,
    check_disk_serial
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
string_newtype!(
    /// A backup archive's file name as vzdump writes it into a dump directory: a container's
    /// `vzdump-lxc-<vmid>-<YYYY_MM_DD-HH_MM_SS>.tar[.zst|.gz|.lzo]` or a VM's
    /// `vzdump-qemu-<vmid>-<YYYY_MM_DD-HH_MM_SS>.vma[.zst|.gz|.lzo]`: one path component.
    ArchiveName,
    check_archive_name
);
string_newtype!(
    /// A backup storage's dump directory as Proxmox reports it: an absolute path of plain
    /// components (no `.`, `..` or empty one) whose last is `dump`, at most 1024 bytes.
    DumpDir,
    check_dump_dir
);

string_newtype!(
    /// A directory storage's path as Proxmox's storage configuration names it (`path`): an
    /// absolute path of plain components (no `.`, `..` or empty one), at most 1024 bytes.
    StorageDir,
    check_storage_dir
);
string_newtype!(
    /// A bulk volume's name: 1 to 32 of `[a-z0-9-]`.
    VolumeName,
    check_volume_name
);

fn check_storage_dir(v: &str) -> Result<(), InvalidArgument> {
    let plain = v.strip_prefix('/').is_some_and(|rest| {
        rest.split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\0'))
    });
    if v.len() <= 1024 && plain {
        Ok(())
    } else {
        Err(invalid(
            "storage directory",
            v,
            "expected an absolute path of plain components",
        ))
    }
}

fn check_volume_name(v: &str) -> Result<(), InvalidArgument> {
    let ok = (1..=32).contains(&v.len())
        && v.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
    if ok {
        Ok(())
    } else {
        Err(invalid("volume name", v, "expected 1 to 32 of [a-z0-9-]"))
    }
}

fn check_dump_dir(v: &str) -> Result<(), InvalidArgument> {
    let plain = v.strip_prefix('/').is_some_and(|rest| {
        rest.split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\0'))
    });
    if v.len() <= 1024 && plain && v.ends_with("/dump") {
        Ok(())
    } else {
        Err(invalid(
            "dump directory",
            v,
            "expected an absolute path of plain components ending in /dump",
        ))
    }
}

fn check_archive_name(v: &str) -> Result<(), InvalidArgument> {
    const EXPECTED: &str = "expected vzdump-lxc-<vmid>-<YYYY_MM_DD-HH_MM_SS>.tar[.zst|.gz|.lzo] or vzdump-qemu-<vmid>-<YYYY_MM_DD-HH_MM_SS>.vma[.zst|.gz|.lzo]";
    let bad = || Err(invalid("archive name", v, EXPECTED));
    let (rest, payload) = if let Some(rest) = v.strip_prefix("vzdump-lxc-") {
        (rest, "tar")
    } else if let Some(rest) = v.strip_prefix("vzdump-qemu-") {
        (rest, "vma")
    } else {
        return bad();
    };
    let Some((vmid, rest)) = rest.split_once('-') else {
        return bad();
    };
    let vmid_ok = (3..=9).contains(&vmid.len())
        && !vmid.starts_with('0')
        && vmid.bytes().all(|c| c.is_ascii_digit());
    let Some((time, ext)) = rest.split_once('.') else {
        return bad();
    };
    // YYYY_MM_DD-HH_MM_SS
    let time_ok = time.len() == 19
        && time.bytes().enumerate().all(|(i, c)| match i {
            4 | 7 | 13 | 16 => c == b'_',
            10 => c == b'-',
            _ => c.is_ascii_digit(),
        });
    let (kind, compression) = ext.split_once('.').unwrap_or((ext, ""));
    let ext_ok = kind == payload && matches!(compression, "" | "zst" | "gz" | "lzo");
    if vmid_ok && time_ok && ext_ok {
        Ok(())
    } else {
        bad()
    }
}

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
    /// Size of the golden builder's root disk in GiB.
    DiskGib,
    u16,
    2,
    256,
    "disk size (GiB)"
);

int_newtype!(
    /// How many archives of a bulk volume are kept.
    KeepCount,
    u16,
    1,
    365,
    "archives kept"
);
int_newtype!(
    /// The most bytes one bulk archive may have: its volume's size (at most 64 TiB).
    ArchiveBytes,
    u64,
    1,
    70_368_744_177_664,
    "archive size (bytes)"
);
int_newtype!(
    /// How long one bulk archive may take, in seconds (at most a day).
    ArchiveSeconds,
    u32,
    1,
    86_400,
    "archive time limit (s)"
);
int_newtype!(
    /// How long a guest's restore check may run, in seconds.
    CheckSeconds,
    u16,
    1,
    1800,
    "restore check time limit (s)"
);

fn check_agent_version(v: &str) -> Result<(), InvalidArgument> {
    crate::update::check_version(v).map_err(|reason| invalid("agent version", v, reason))
}

fn check_sha256_hex(v: &str) -> Result<(), InvalidArgument> {
    crate::update::check_sha256(v).map_err(|reason| invalid("sha256", v, reason))
}

string_newtype!(
    /// An agent version as a signed `agent-update` job names it.
    AgentVersion,
    check_agent_version
);
string_newtype!(
    /// A SHA-256 digest, 64 lowercase hex digits.
    Sha256Hex,
    check_sha256_hex
);
