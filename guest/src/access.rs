//! Customer access: the OpenSSH keys the operator's signed data plan trusts for this guest's
//! `root` (decision 0107). The agent hands them over in the bootstrap; the controller writes
//! them, and nothing else, to the Bosun-managed `authorized_keys` file the golden image's sshd
//! reads beside the account's own (`AuthorizedKeysFile .ssh/authorized_keys
//! /etc/bosun/authorized_keys/%u`). Written whole every start: a key the plan dropped is gone
//! from the file the next time the bootstrap arrives, and an empty list leaves an empty file.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use bosun_proto::break_glass::SshPublicKey;

/// Where the golden image's sshd looks for `root`'s Bosun-managed keys.
pub const GOLDEN_ROOT_KEYS: &str = "/etc/bosun/authorized_keys/root";

/// Why the keys could not be written.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The file has no parent directory.
    #[error("{path} names no file in a directory")]
    NoParent {
        /// The path.
        path: PathBuf,
    },
    /// Creating the directory, writing or renaming the file failed.
    #[error("failed to write the authorized keys to {path}")]
    Write {
        /// The file (or its directory).
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Writes `keys` to `path` (0600, its directory 0755 when created: sshd's StrictModes refuses
/// a file or directory others can write), through a temporary file renamed over the old one,
/// so sshd never reads half a list. Gives how many keys were written.
pub fn write_authorized_keys(path: &Path, keys: &[SshPublicKey]) -> Result<usize, AccessError> {
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| AccessError::Write { path, source }
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| AccessError::NoParent {
            path: path.to_path_buf(),
        })?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(err(dir))?;
    let text = bosun_proto::guest_access::authorized_keys_file(keys);
    let temp = dir.join(".authorized_keys.new");
    let _ = std::fs::remove_file(&temp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(err(&temp))?;
    file.write_all(text.as_bytes()).map_err(err(&temp))?;
    file.sync_all().map_err(err(&temp))?;
    drop(file);
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o600)).map_err(err(&temp))?;
    std::fs::rename(&temp, path).map_err(err(path))?;
    tracing::info!(path = %path.display(), keys = keys.len(), "authorized keys written");
    Ok(keys.len())
}
