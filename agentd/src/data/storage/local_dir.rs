//! Where a `local-dir` target may live: beneath a root `agent.toml` lists
//! (`[storage] local_dir_roots`, none by default), never on a system path or inside a
//! guest's volume.
//!
//! The hub names the path and Proxmox writes guests' plaintext archives there, so a
//! compromised hub could otherwise have guest A's backups written where guest B's
//! customer reads them (`/var/lib/lxc/<vmid>/rootfs/…`, a `subvol-<vmid>-disk-0`
//! directory) or fill and damage the host (`/`, `/etc/pve`, `/boot`). A path is allowed
//! when:
//!
//! - it is absolute and normal (no `.`, `..`, `//` or trailing `/`);
//! - neither it nor its resolved form is `/` or lies in a [`SYSTEM_AREAS`] or
//!   [`GUEST_AREAS`] entry, nor has a component naming a guest volume
//!   (`subvol-<vmid>-disk-<n>`, `vm-<vmid>-disk-<n>`, `base-<vmid>-disk-<n>`);
//! - resolved, it lies at or beneath one of the roots, resolved too. A path is resolved
//!   by canonicalizing its nearest existing ancestor (following every symlink on the way)
//!   and appending the components that do not exist yet; a dangling symlink on the way
//!   does not resolve and is refused. A symlink beneath a root that leads out of it is so
//!   found outside every root.
//!
//! A configured root is checked the same way at load ([`check_root`]): a root that is
//! `/` or lies in one of those areas is refused. What the hub hears of a refusal is the
//! top-level message only (never where a path resolves to on this host).

use std::io;
use std::path::{Component, Path, PathBuf};

/// Host paths no target may lie in.
pub const SYSTEM_AREAS: &[&str] = &["/etc/pve", "/boot", "/proc", "/sys", "/dev", "/run"];
/// Where guests' root filesystems and volumes live.
pub const GUEST_AREAS: &[&str] = &["/var/lib/lxc", "/var/lib/vz/images", "/var/lib/vz/private"];
/// Prefixes of Proxmox volume names (`<prefix>-<vmid>-disk-<n>`).
const VOLUME_PREFIXES: &[&str] = &["subvol", "vm", "base"];

/// Why a path may not hold a `local-dir` target (or be a root of them).
#[derive(Debug, thiserror::Error)]
pub enum LocalDirError {
    /// Relative, or with `.`, `..`, `//` or a trailing `/`.
    #[error("the path is not absolute and normal")]
    NotNormal,
    /// `/` itself.
    #[error("the path is the root directory")]
    RootDirectory,
    /// In a host system area.
    #[error("the path lies in {area}, a system path")]
    SystemArea {
        /// The area.
        area: &'static str,
    },
    /// In a guest's root filesystem or volume.
    #[error("the path lies inside a guest's root filesystem or volume")]
    GuestArea,
    /// Beneath no configured root.
    #[error("the path lies beneath no root agent.toml allows for local-dir targets")]
    OutsideRoots,
    /// An existing part of the path could not be resolved (a dangling symlink, no access).
    #[error("the path does not resolve")]
    Resolve {
        /// The part that did not resolve.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
}

/// Checks a configured root; gives it resolved.
pub fn check_root(root: &Path) -> Result<PathBuf, LocalDirError> {
    normal(root)?;
    allowed_area(root)?;
    let resolved = resolve(root)?;
    allowed_area(&resolved)?;
    Ok(resolved)
}

/// Checks the path of a `local-dir` target against `roots` (as configured).
pub fn check_target(path: &str, roots: &[PathBuf]) -> Result<(), LocalDirError> {
    let path = Path::new(path);
    normal(path)?;
    allowed_area(path)?;
    let resolved = resolve(path)?;
    allowed_area(&resolved)?;
    for root in roots {
        // Resolved again each time: a root's own symlinks are the administrator's.
        if resolved.starts_with(check_root(root)?) {
            return Ok(());
        }
    }
    Err(LocalDirError::OutsideRoots)
}

fn normal(path: &Path) -> Result<(), LocalDirError> {
    let text = path.to_str().ok_or(LocalDirError::NotNormal)?;
    let rebuilt: PathBuf = path.components().collect();
    let plain = path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        && rebuilt.as_os_str() == text;
    if plain {
        Ok(())
    } else {
        Err(LocalDirError::NotNormal)
    }
}

fn allowed_area(path: &Path) -> Result<(), LocalDirError> {
    if path == Path::new("/") {
        return Err(LocalDirError::RootDirectory);
    }
    if let Some(area) = SYSTEM_AREAS.iter().copied().find(|a| path.starts_with(a)) {
        return Err(LocalDirError::SystemArea { area });
    }
    let volume = path
        .components()
        .any(|c| c.as_os_str().to_str().is_some_and(is_volume_name));
    if volume || GUEST_AREAS.iter().any(|a| path.starts_with(a)) {
        return Err(LocalDirError::GuestArea);
    }
    Ok(())
}

/// `subvol-<digits>-disk-<digits>` and the like.
fn is_volume_name(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    VOLUME_PREFIXES.iter().any(|prefix| {
        name.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|rest| rest.split_once("-disk-"))
            .is_some_and(|(vmid, disk)| digits(vmid) && digits(disk))
    })
}

/// The nearest existing ancestor canonicalized, then the components that do not exist.
fn resolve(path: &Path) -> Result<PathBuf, LocalDirError> {
    for existing in path.ancestors() {
        match std::fs::symlink_metadata(existing) {
            Ok(_) => {
                let canonical =
                    std::fs::canonicalize(existing).map_err(|source| LocalDirError::Resolve {
                        path: existing.to_path_buf(),
                        source,
                    })?;
                let rest = path.strip_prefix(existing).unwrap_or(Path::new(""));
                return Ok(if rest.as_os_str().is_empty() {
                    canonical
                } else {
                    canonical.join(rest)
                });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(LocalDirError::Resolve {
                    path: existing.to_path_buf(),
                    source,
                });
            }
        }
    }
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests;
