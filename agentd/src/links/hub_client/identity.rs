//! The host's identity at the hub: `host_id` and the host API key, received
//! once at enrollment and stored in `STATE_DIR/host.json` with mode 0600. The
//! key lives in a [`SecretString`] and is never logged; it is replaced over the
//! authenticated channel when the hub asks ([`HostKey`]).

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use super::host_key::HostKey;

/// The file name under the state directory.
pub const FILE: &str = "host.json";

/// Why the identity could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// Reading or writing the file failed.
    #[error("host identity file {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a host identity.
    #[error("host identity file {path} is malformed")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// Others may read the file.
    #[error("host identity file {path} has mode {mode:o}; it must not be readable by others")]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
}

/// The enrolled identity.
#[derive(Debug, Clone)]
pub struct HostIdentity {
    /// The host's id at the hub.
    pub host_id: Uuid,
    /// The host API key, shared by every part of the agent that calls the hub.
    pub host_key: HostKey,
    /// Set when this box enrolled in restore mode, taking over a lost host: the lost
    /// host's name. Such a box never makes a PBS key of its own (K comes back from the
    /// escrow with the customer's words) and restores the host's guests from PBS.
    pub replaces: Option<String>,
    /// When this box enrolled (kept for a restore-mode box: its guests' RTO starts then).
    pub enrolled_at: Option<jiff::Timestamp>,
}

#[derive(Serialize, Deserialize)]
struct OnDisk {
    host_id: Uuid,
    host_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replaces: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    enrolled_at: Option<jiff::Timestamp>,
    /// The key the last rotation replaced: only a hub restored from a backup taken before
    /// that rotation still accepts it ([`HostKey::refused`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous_host_key: Option<String>,
    /// When the last rotation of the host's key completed: the next starts no sooner than the
    /// agent's pacing allows, across restarts (decision 0044).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    host_key_rotated_at: Option<jiff::Timestamp>,
}

impl HostIdentity {
    /// Reads the identity, if the host has enrolled.
    pub fn load(state_dir: &Path) -> Result<Option<Self>, IdentityError> {
        let path = state_dir.join(FILE);
        let Some(text) = read_private(&path)? else {
            return Ok(None);
        };
        let disk: OnDisk =
            serde_json::from_str(&text).map_err(|source| IdentityError::Malformed {
                path: path.clone(),
                source,
            })?;
        Ok(Some(Self {
            host_id: disk.host_id,
            host_key: HostKey::open(
                state_dir,
                SecretString::from(disk.host_key),
                disk.previous_host_key.map(SecretString::from),
                disk.host_key_rotated_at,
            )?,
            replaces: disk.replaces,
            enrolled_at: disk.enrolled_at,
        }))
    }

    /// Writes the identity with mode 0600 (atomically: temp file, fsync, rename).
    pub fn store(&self, state_dir: &Path) -> Result<(), IdentityError> {
        let path = state_dir.join(FILE);
        let io = |source| IdentityError::Io {
            path: path.clone(),
            source,
        };
        let body = serde_json::to_vec(&OnDisk {
            host_id: self.host_id,
            host_key: self.host_key.current().expose_secret().to_owned(),
            previous_host_key: self
                .host_key
                .previous()
                .map(|key| key.expose_secret().to_owned()),
            host_key_rotated_at: self.host_key.rotated_at(),
            replaces: self.replaces.clone(),
            enrolled_at: self.enrolled_at,
        })
        .map_err(|source| IdentityError::Malformed {
            path: path.clone(),
            source,
        })?;
        replace_private(&path, &body).map_err(io)?;
        // A new identity: whatever rotation an earlier one left is not this key's.
        super::host_key::remove(&state_dir.join(super::host_key::NEXT_FILE))
    }
}

/// The text of the private file `path` (`None`: absent); refused when others may read it.
pub(super) fn read_private(path: &Path) -> Result<Option<String>, IdentityError> {
    let io = |source| IdentityError::Io {
        path: path.to_owned(),
        source,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(IdentityError::TooOpen {
            path: path.to_owned(),
            mode,
        });
    }
    std::fs::read_to_string(path).map(Some).map_err(io)
}

/// Writes `key` into `state_dir`'s `host.json` as the host's key and `previous` as the one
/// before it, and `rotated_at` as when the last rotation completed (when given), keeping the
/// rest.
pub(super) fn replace_key(
    state_dir: &Path,
    key: &str,
    previous: Option<&str>,
    rotated_at: Option<jiff::Timestamp>,
) -> Result<(), IdentityError> {
    let path = state_dir.join(FILE);
    let text = read_private(&path)?.ok_or_else(|| IdentityError::Io {
        path: path.clone(),
        source: std::io::Error::from(std::io::ErrorKind::NotFound),
    })?;
    let mut disk: OnDisk =
        serde_json::from_str(&text).map_err(|source| IdentityError::Malformed {
            path: path.clone(),
            source,
        })?;
    disk.host_key = key.to_owned();
    disk.previous_host_key = previous.map(str::to_owned);
    if rotated_at.is_some() {
        disk.host_key_rotated_at = rotated_at;
    }
    let body = serde_json::to_vec(&disk).map_err(|source| IdentityError::Malformed {
        path: path.clone(),
        source,
    })?;
    replace_private(&path, &body).map_err(|source| IdentityError::Io { path, source })
}

/// Replaces the file `path` by one holding `bytes`, mode 0600, atomically: a temporary file
/// beside it (`<path>.tmp`), written, synced, renamed over it.
pub(in crate::links) fn replace_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_0600_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(HostIdentity::load(dir.path()).expect("load").is_none());
        let id = HostIdentity {
            host_id: Uuid::from_u128(7),
            host_key: HostKey::in_memory(SecretString::from("bhk_secret".to_owned())),
            replaces: Some("pve-old".into()),
            enrolled_at: Some(jiff::Timestamp::from_second(1_800_000_000).expect("time")),
        };
        id.store(dir.path()).expect("store");
        let mode = std::fs::metadata(dir.path().join(FILE))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let back = HostIdentity::load(dir.path())
            .expect("load")
            .expect("present");
        assert_eq!(back.host_id, id.host_id);
        assert_eq!(back.host_key.presented().expose_secret(), "bhk_secret");
        assert!(!format!("{back:?}").contains("bhk_secret"));
        std::fs::set_permissions(
            dir.path().join(FILE),
            std::fs::Permissions::from_mode(0o644),
        )
        .expect("chmod");
        assert!(matches!(
            HostIdentity::load(dir.path()),
            Err(IdentityError::TooOpen { .. })
        ));
    }
}
