//! The filesystems and mount options `mount_by_uuid` accepts.

use serde::{Deserialize, Serialize};

/// Filesystems `mount_by_uuid` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
