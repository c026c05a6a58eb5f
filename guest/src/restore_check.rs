//! The guest's restore check (DESIGN §8, decision 0032). Bosun's restore test restores a
//! backup of this guest into a scratch guest with every network link down, boots it, and
//! runs [`RESTORE_CHECK_PATH`] inside it: exit 0 says the data the guest was restored with is
//! whole; anything else fails the test with the first lines the check wrote. With no check
//! installed the test says `booted, not checked`, never `passed`.
//!
//! The reference controller writes its check at quiesce time, once every app is stopped and
//! before it asks for the backup: the SHA-256 of each regular file under the apps' `data`
//! paths, in `sha256sum` format, then a fixed script that runs
//! `sha256sum --check --strict --quiet` on that list (the script last: its presence means the
//! list is complete). The backup taken while the apps are stopped carries both. When the apps
//! run again their data changes, so [`RestoreCheck::remove`] takes both away (the script
//! first): the live guest, and any backup taken without quiescing, has no check, and such a
//! backup's restore test says it was not checked rather than failing on data that changed
//! after it was summed.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub use bosun_proto::helper::RESTORE_CHECK_PATH;
use sha2::{Digest as _, Sha256};

/// Where the checksums go by default (on the guest's root filesystem, so a backup holds them).
pub const DEFAULT_CHECKSUMS: &str = "/var/lib/bosun-guest/restore-check.sha256";
/// Most files a check lists by default.
pub const DEFAULT_MAX_FILES: usize = 100_000;

/// Where the check and its checksums are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreCheck {
    /// The script the restore test runs ([`RESTORE_CHECK_PATH`]).
    pub script: PathBuf,
    /// The `sha256sum` list it verifies.
    pub checksums: PathBuf,
    /// Most files it lists; more is an error (the apps stay stopped while they are hashed).
    pub max_files: usize,
}

impl Default for RestoreCheck {
    fn default() -> Self {
        Self {
            script: PathBuf::from(RESTORE_CHECK_PATH),
            checksums: PathBuf::from(DEFAULT_CHECKSUMS),
            max_files: DEFAULT_MAX_FILES,
        }
    }
}

/// Why the check could not be written or removed.
#[derive(Debug, thiserror::Error)]
pub enum RestoreCheckError {
    /// A path the script or the list would have to name cannot be written there plainly: the
    /// checksums path must be absolute and of letters, digits and `/._-`; a data file's path
    /// must be absolute, without a newline or backslash (`sha256sum` escapes those).
    #[error("the restore check cannot name {path:?}")]
    UnsafePath {
        /// The path.
        path: PathBuf,
    },
    /// The data holds more files than the check lists.
    #[error("the apps' data holds more than {limit} files")]
    TooManyFiles {
        /// The limit.
        limit: usize,
    },
    /// Hashing ran past the quiesce bound.
    #[error("hashing the apps' data ran past the quiesce bound")]
    OutOfTime,
    /// A data file or directory could not be read.
    #[error("failed to read {path}")]
    Read {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The check or its list could not be written or removed.
    #[error("failed to write {path}")]
    Write {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl RestoreCheck {
    /// The script: `sha256sum --check` of [`RestoreCheck::checksums`], nothing else.
    pub fn script_text(&self) -> String {
        format!(
            "#!/bin/sh -e\n\
             # Bosun's restore check, written by bosun-guest when it quiesced the apps for a\n\
             # backup and removed when they ran again: a guest restored from that backup has\n\
             # the data it summed, or this fails with the files that differ.\n\
             /usr/bin/sha256sum --check --strict --quiet {}\n",
            self.checksums.display()
        )
    }

    /// Writes the checksums of every regular file under `data` (symlinks are not followed),
    /// then the script; gives how many files it lists. Stops with
    /// [`RestoreCheckError::OutOfTime`] once `deadline` has passed.
    pub fn install(
        &self,
        data: &[PathBuf],
        deadline: Option<Instant>,
    ) -> Result<usize, RestoreCheckError> {
        let plain = |b: u8| b.is_ascii_alphanumeric() || b"/._-".contains(&b);
        let listed = self.checksums.to_str().unwrap_or_default();
        if !self.checksums.is_absolute() || !listed.bytes().all(plain) {
            return Err(RestoreCheckError::UnsafePath {
                path: self.checksums.clone(),
            });
        }
        let mut files = Vec::new();
        for path in data {
            self.collect(path, &mut files)?;
        }
        files.sort();
        files.dedup();
        let mut list = String::new();
        for file in &files {
            if deadline.is_some_and(|d| Instant::now() > d) {
                return Err(RestoreCheckError::OutOfTime);
            }
            list.push_str(&format!("{}  {}\n", sha256_of(file)?, file.display()));
        }
        write_atomically(&self.checksums, list.as_bytes(), 0o600)?;
        write_atomically(&self.script, self.script_text().as_bytes(), 0o755)?;
        Ok(files.len())
    }

    /// Removes the script, then the checksums (either may be absent).
    pub fn remove(&self) -> Result<(), RestoreCheckError> {
        for path in [&self.script, &self.checksums] {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(RestoreCheckError::Write {
                        path: path.clone(),
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// Adds the regular files at or under `path` to `files`.
    fn collect(&self, path: &Path, files: &mut Vec<PathBuf>) -> Result<(), RestoreCheckError> {
        let text = path.to_string_lossy();
        if !path.is_absolute() || text.contains(['\n', '\\']) {
            return Err(RestoreCheckError::UnsafePath {
                path: path.to_path_buf(),
            });
        }
        let read = |source| RestoreCheckError::Read {
            path: path.to_path_buf(),
            source,
        };
        if path == self.checksums || path == self.script {
            return Ok(());
        }
        let meta = std::fs::symlink_metadata(path).map_err(read)?;
        if meta.is_file() {
            if files.len() >= self.max_files {
                return Err(RestoreCheckError::TooManyFiles {
                    limit: self.max_files,
                });
            }
            files.push(path.to_path_buf());
        } else if meta.is_dir() {
            for entry in std::fs::read_dir(path).map_err(read)? {
                self.collect(&entry.map_err(read)?.path(), files)?;
            }
        }
        Ok(())
    }
}

/// The SHA-256 of `path`'s bytes, lowercase hex.
fn sha256_of(path: &Path) -> Result<String, RestoreCheckError> {
    let read = |source| RestoreCheckError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(read)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut buf).map_err(read)? {
            0 => return Ok(hex::encode(hasher.finalize())),
            n => hasher.update(&buf[..n]),
        }
    }
}

/// Writes `bytes` to `path` (its directory made if missing) through a synced temporary file
/// renamed over it, with `mode`.
fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> Result<(), RestoreCheckError> {
    let err = |source| RestoreCheckError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(err)?;
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(err)?;
    file.write_all(bytes).map_err(err)?;
    file.sync_all().map_err(err)?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(err)?;
    if let Some(dir) = path.parent()
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
}
