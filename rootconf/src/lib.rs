//! `bosun-rootconf`: the loader of a configuration that decides what root does.
//!
//! The helper and the update gate run as root and take their settings from a file fixed at
//! install time, never from their caller (decision 0006). Each program's file is
//! `<prefix>/<config>`, where `<prefix>` is what precedes the program's installed path in its
//! own resolved path (`/proc/self/exe`): installed normally that is `/etc/bosun/...`; a test
//! installs a copy of the binary under a temporary prefix with its own file ([`Layout`]).
//!
//! The file is optional (the defaults are the production layout), but when present it and
//! every directory above it must be owned by root, must not be symlinks and must not be
//! writable by group or others (a sticky root-owned directory such as `/tmp` is accepted):
//! [`check_root_controlled`], which each program also applies to the roots and programs its
//! settings name. [`load_or_default`] reads a bounded file and parses it as JSON; what the
//! settings themselves must satisfy stays with each program.
//!
//! This crate holds the one copy of that code, small and with no dependency beyond `serde`,
//! so an auditor of the helper reads it once.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// Largest configuration file read.
pub const MAX_CONFIG_BYTES: u64 = 16 * 1024;

/// Why a root-owned configuration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RootConfError {
    /// Reading the file or an ancestor's metadata failed.
    #[error("reading {path}")]
    Read {
        /// The path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// A file or directory that decides what root does is not root-controlled.
    #[error(
        "{path} must be owned by root and not writable by group or others (uid {uid}, mode {mode:o})"
    )]
    Insecure {
        /// The path.
        path: PathBuf,
        /// Its owner.
        uid: u32,
        /// Its mode.
        mode: u32,
    },
    /// A root secret's file is not root's alone or not of its length.
    #[error("{path} must be a regular file of {len} bytes that only root can read")]
    Secret {
        /// The path.
        path: PathBuf,
        /// The length it must have.
        len: usize,
    },
    /// The file is not valid JSON for the program's settings.
    #[error("parsing {path}")]
    Parse {
        /// The path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
}

/// Where a root program is installed and where its configuration lives, both relative to
/// the install prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The program's installed path, e.g. `usr/libexec/bosun/bosun-helper`.
    pub installed: &'static str,
    /// The configuration file's path, e.g. `etc/bosun/helper.json`.
    pub config: &'static str,
}

impl Layout {
    /// Where the configuration of the program installed at `exe` lives: under the prefix
    /// that precedes [`Layout::installed`], and under `/` for any other location (a build
    /// tree).
    pub fn config_path_for(&self, exe: &Path) -> PathBuf {
        let text = exe.to_string_lossy();
        let prefix = text
            .strip_suffix(self.installed)
            .filter(|p| p.ends_with('/'))
            .unwrap_or("/");
        PathBuf::from(format!("{prefix}{}", self.config))
    }

    /// Where the configuration of the running program lives (from `/proc/self/exe`).
    pub fn own_config_path(&self) -> Result<PathBuf, RootConfError> {
        let exe = std::fs::read_link("/proc/self/exe").map_err(|source| RootConfError::Read {
            path: "/proc/self/exe".into(),
            source,
        })?;
        Ok(self.config_path_for(&exe))
    }
}

/// Loads the settings at `path`: their defaults when the file is absent; otherwise the file
/// must be root-controlled ([`check_root_controlled`]), at most [`MAX_CONFIG_BYTES`] long
/// and valid JSON for `T`.
pub fn load_or_default<T: DeserializeOwned + Default>(path: &Path) -> Result<T, RootConfError> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(T::default()),
        Err(source) => Err(RootConfError::Read {
            path: path.into(),
            source,
        }),
        Ok(_) => read_checked(path),
    }
}

fn read_checked<T: DeserializeOwned>(path: &Path) -> Result<T, RootConfError> {
    let read_err = |source| RootConfError::Read {
        path: path.into(),
        source,
    };
    check_root_controlled(path)?;
    let meta = std::fs::metadata(path).map_err(read_err)?;
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(read_err(io::Error::new(
            io::ErrorKind::InvalidData,
            "larger than 16 KiB",
        )));
    }
    let text = std::fs::read(path).map_err(read_err)?;
    serde_json::from_slice(&text).map_err(|source| RootConfError::Parse {
        path: path.into(),
        source,
    })
}

/// A secret of exactly `N` bytes in a root-only file: root-controlled ([`check_root_controlled`])
/// and not readable by group or others. With `create`, a missing one is made from
/// `/dev/urandom` (0600, never over an existing path) in its root-controlled directory.
pub fn root_secret<const N: usize>(path: &Path, create: bool) -> Result<[u8; N], RootConfError> {
    let read_err = |source| RootConfError::Read {
        path: path.into(),
        source,
    };
    check_root_controlled(path.parent().unwrap_or(path))?;
    if create && std::fs::symlink_metadata(path).is_err() {
        let mut secret = [0u8; N];
        let random =
            std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut secret));
        random.map_err(read_err)?;
        let mut options = std::fs::OpenOptions::new();
        let file = options.write(true).create_new(true).mode(0o600).open(path);
        file.and_then(|mut f| f.write_all(&secret))
            .map_err(read_err)?;
    }
    check_root_controlled(path)?;
    let meta = std::fs::symlink_metadata(path).map_err(read_err)?;
    let bad = || RootConfError::Secret {
        path: path.into(),
        len: N,
    };
    if !meta.is_file() || meta.mode() & 0o077 != 0 || meta.len() != N as u64 {
        return Err(bad());
    }
    let bytes = std::fs::read(path).map_err(read_err)?;
    bytes.try_into().map_err(|_| bad())
}

/// Whether the root-controlled list at `path` (one entry a line; absent: empty) holds `entry`;
/// with `take`, the entry leaves it (a copy renamed over the list).
pub fn listed(path: &Path, entry: &str, take: bool) -> Result<bool, RootConfError> {
    let read_err = |source| RootConfError::Read {
        path: path.into(),
        source,
    };
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(false);
    }
    check_root_controlled(path)?;
    let text = std::fs::read_to_string(path).map_err(read_err)?;
    let (found, kept): (Vec<&str>, Vec<&str>) = text.lines().partition(|l| l.trim() == entry);
    if take && !found.is_empty() {
        let copy = path.with_extension("new");
        let kept: String = kept.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&copy, kept).map_err(read_err)?;
        std::fs::rename(&copy, path).map_err(read_err)?;
    }
    Ok(!found.is_empty())
}

/// Refuses `path` unless it and every directory above it are owned by root, are not
/// symlinks, and are not writable by group or others (a sticky directory excepted).
pub fn check_root_controlled(path: &Path) -> Result<(), RootConfError> {
    let mut ancestor = Some(path);
    while let Some(p) = ancestor {
        let meta = std::fs::symlink_metadata(p).map_err(|source| RootConfError::Read {
            path: p.into(),
            source,
        })?;
        let sticky_dir = meta.is_dir() && meta.mode() & 0o1000 != 0;
        let writable = meta.mode() & 0o022 != 0;
        if meta.uid() != 0 || meta.file_type().is_symlink() || (writable && !sticky_dir) {
            return Err(RootConfError::Insecure {
                path: p.into(),
                uid: meta.uid(),
                mode: meta.mode(),
            });
        }
        ancestor = p.parent();
    }
    Ok(())
}

#[cfg(test)]
mod tests;
