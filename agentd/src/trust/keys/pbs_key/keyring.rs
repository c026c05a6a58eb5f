//! The host's keyring: the current K, which new backups are encrypted with, and the keys it
//! replaced, which archives made before each rotation still need.
//!
//! The current key stays where it always was (`pbs-encryption-key.json`); the retired ones
//! live next to it in `pbs-retired-keys.json`, with the same protection (0600 in the agent's
//! state directory, refused when open to others, never logged):
//!
//! ```json
//! {"schema":"bosun.pbs-retired-keys/v1",
//!  "keys":[{"fingerprint":"…","retired_at":"…","key_file":"<PBS key file text>"}, …]}
//! ```
//!
//! newest first. Loading recomputes each key's fingerprint and refuses one that disagrees.
//!
//! A rotation ([`PbsKeyring::commit_rotation`]) writes the retired file first, then replaces
//! the key file (each a temporary file, synced and renamed into place). A crash between the
//! two leaves the old K both current and retired, which reads as K current: the same state
//! as before the rotation.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::{Installed, KEY_FILE, PbsKey, PbsKeyError};

/// The retired keys' file in the state directory.
pub const RETIRED_FILE: &str = "pbs-retired-keys.json";

/// Where a new retired file is written before it is renamed into place.
const RETIRED_TMP: &str = ".pbs-retired-keys.json.tmp";

/// Where the next K is written before it replaces the key file.
const ROTATED_TMP: &str = ".pbs-encryption-key.json.rotated";

/// The most keys a keyring holds (the current one included): each rotation adds one, and
/// every one of them must fit the hub's blob and the one-page sheet's list.
pub const MAX_KEYS: usize = 16;

/// The retired file's schema.
const SCHEMA: &str = "bosun.pbs-retired-keys/v1";

/// The retired file is a few hundred bytes per key.
const MAX_RETIRED_FILE: u64 = 64 * 1024;

/// A key that encrypted backups before a rotation replaced it.
#[derive(Debug)]
pub struct RetiredKey {
    /// The key.
    pub key: PbsKey,
    /// When the rotation replaced it: the archives it encrypted are older.
    pub retired_at: Timestamp,
}

/// The current K and the keys it replaced, newest first.
#[derive(Debug)]
pub struct PbsKeyring {
    current: PbsKey,
    retired: Vec<RetiredKey>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RetiredFile {
    schema: String,
    keys: Vec<RetiredEntry>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RetiredEntry {
    fingerprint: String,
    retired_at: Timestamp,
    key_file: String,
}

impl PbsKeyring {
    /// A keyring of `current` and `retired` (newest first); a retired key that is the current
    /// one, or that appears twice, is kept once.
    pub fn new(current: PbsKey, retired: Vec<RetiredKey>) -> Self {
        let mut ring = Self {
            current,
            retired: Vec::with_capacity(retired.len()),
        };
        for key in retired {
            if ring.key(&key.key.fingerprint()).is_none() {
                ring.retired.push(key);
            }
        }
        ring
    }

    /// The keyring in `state_dir`; `None` while it holds no current key.
    pub fn load(state_dir: &Path) -> Result<Option<Self>, PbsKeyError> {
        let Some(current) = PbsKey::load_existing(state_dir)? else {
            return Ok(None);
        };
        Ok(Some(Self::new(current, load_retired(state_dir)?)))
    }

    /// The key new backups are encrypted with.
    pub fn current(&self) -> &PbsKey {
        &self.current
    }

    /// The keys rotations replaced, newest first.
    pub fn retired(&self) -> &[RetiredKey] {
        &self.retired
    }

    /// How many keys the ring holds.
    pub fn len(&self) -> usize {
        self.retired.len() + 1
    }

    /// Never empty: it always has a current key.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The key with `fingerprint` (as PVE lists it, any case), current or retired.
    pub fn key(&self, fingerprint: &str) -> Option<&PbsKey> {
        std::iter::once(&self.current)
            .chain(self.retired.iter().map(|r| &r.key))
            .find(|k| k.fingerprint().eq_ignore_ascii_case(fingerprint))
    }

    /// The retired key with `fingerprint`, if it is one.
    pub fn retired_key(&self, fingerprint: &str) -> Option<&RetiredKey> {
        self.retired
            .iter()
            .find(|r| r.key.fingerprint().eq_ignore_ascii_case(fingerprint))
    }

    /// Every key's fingerprint, the current one first.
    pub fn fingerprints(&self) -> Vec<String> {
        std::iter::once(&self.current)
            .chain(self.retired.iter().map(|r| &r.key))
            .map(PbsKey::fingerprint)
            .collect()
    }

    /// The keyring after a rotation at `at`: `next` current, the current key retired.
    pub fn rotated(self, next: PbsKey, at: Timestamp) -> Self {
        let mut retired = Vec::with_capacity(self.retired.len() + 1);
        retired.push(RetiredKey {
            key: self.current,
            retired_at: at,
        });
        retired.extend(self.retired);
        Self::new(next, retired)
    }

    /// Makes this keyring the one in `state_dir` after a rotation whose escrow the hub
    /// holds: the retired keys first, then the current key replaced.
    pub fn commit_rotation(&self, state_dir: &Path) -> Result<(), PbsKeyError> {
        store_retired(state_dir, &self.retired)?;
        crate::failpoint::hit("escrow.rotate.retire.done");
        replace_current(state_dir, &self.current)
    }

    /// Installs a keyring recovered from the escrow. The retired keys join those already
    /// there. The current key is installed when none is; a key already installed is kept
    /// when it is this ring's current key, replaced by it when it is one of this ring's
    /// retired keys (an older escrow was recovered first), and never replaced otherwise:
    /// backups made with it would become unreadable.
    pub fn install_recovered(&self, state_dir: &Path) -> Result<Installed, PbsKeyError> {
        let installed = PbsKey::load_existing(state_dir)?;
        let outdated = match &installed {
            Some(k) if k.fingerprint == self.current.fingerprint => false,
            Some(k) if self.retired_key(&k.fingerprint()).is_some() => true,
            Some(k) => {
                return Err(PbsKeyError::Conflict {
                    path: state_dir.join(KEY_FILE),
                    existing: k.fingerprint(),
                    offered: self.current.fingerprint(),
                });
            }
            None => false,
        };
        let mut retired = load_retired(state_dir)?;
        let before = retired.len();
        for key in &self.retired {
            let fingerprint = key.key.fingerprint();
            if fingerprint != self.current.fingerprint()
                && !retired.iter().any(|r| r.key.fingerprint() == fingerprint)
            {
                retired.push(RetiredKey {
                    key: clone_key(&key.key),
                    retired_at: key.retired_at,
                });
            }
        }
        retired.sort_by_key(|r| std::cmp::Reverse(r.retired_at));
        if retired.len() != before {
            store_retired(state_dir, &retired)?;
        }
        if outdated {
            replace_current(state_dir, &self.current)?;
            tracing::info!(fingerprint = %self.current.fingerprint(), "pbs encryption key replaced by the recovered newer key");
            return Ok(Installed::New);
        }
        match self.current.install(state_dir)? {
            Installed::AlreadyThere if retired.len() != before => Ok(Installed::New),
            other => Ok(other),
        }
    }
}

/// A copy of `key` (kept zeroized like the original).
fn clone_key(key: &PbsKey) -> PbsKey {
    PbsKey {
        key: Zeroizing::new(*key.key),
        fingerprint: key.fingerprint,
        created: key.created,
        modified: key.modified,
    }
}

/// The retired keys in `state_dir`, newest first; none when the file is absent.
pub fn load_retired(state_dir: &Path) -> Result<Vec<RetiredKey>, PbsKeyError> {
    let path = state_dir.join(RETIRED_FILE);
    let io = |what, source| PbsKeyError::Io {
        what,
        path: path.clone(),
        source,
    };
    let mut file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("opening", e)),
    };
    let meta = file.metadata().map_err(|e| io("inspecting", e))?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(PbsKeyError::Exposed { path, mode });
    }
    if meta.len() > MAX_RETIRED_FILE {
        return Err(PbsKeyError::Malformed {
            path,
            field: "file",
            problem: "is far larger than a keyring",
        });
    }
    let len = usize::try_from(meta.len()).unwrap_or(0);
    let mut text = Zeroizing::new(String::with_capacity(len + 1));
    file.read_to_string(&mut text)
        .map_err(|e| io("reading", e))?;
    let parsed: RetiredFile = serde_json::from_str(&text).map_err(|e| PbsKeyError::Json {
        path: path.clone(),
        line: e.line(),
        column: e.column(),
    })?;
    if parsed.schema != SCHEMA {
        return Err(PbsKeyError::Malformed {
            path,
            field: "schema",
            problem: "is not bosun.pbs-retired-keys/v1",
        });
    }
    let mut keys = Vec::with_capacity(parsed.keys.len());
    for entry in parsed.keys {
        let key_file = Zeroizing::new(entry.key_file);
        let key = PbsKey::from_key_file_json(&path, &key_file)?;
        if !key.fingerprint().eq_ignore_ascii_case(&entry.fingerprint) {
            return Err(PbsKeyError::FingerprintMismatch {
                path,
                stated: entry.fingerprint,
                computed: key.fingerprint(),
            });
        }
        keys.push(RetiredKey {
            key,
            retired_at: entry.retired_at,
        });
    }
    Ok(keys)
}

/// Writes `retired` as the retired file (temporary file 0600, synced, renamed into place).
fn store_retired(state_dir: &Path, retired: &[RetiredKey]) -> Result<(), PbsKeyError> {
    let document = RetiredFile {
        schema: SCHEMA.to_owned(),
        keys: retired
            .iter()
            .map(|r| RetiredEntry {
                fingerprint: r.key.fingerprint(),
                retired_at: r.retired_at,
                key_file: r.key.key_file_json().as_str().to_owned(),
            })
            .collect(),
    };
    let text = Zeroizing::new(serde_json::to_vec_pretty(&document).map_err(|_| {
        PbsKeyError::Malformed {
            path: state_dir.join(RETIRED_FILE),
            field: "keys",
            problem: "cannot be written",
        }
    })?);
    // The entries' copies of the key files go with the document.
    for entry in document.keys {
        drop(Zeroizing::new(entry.key_file));
    }
    write_replacing(state_dir, RETIRED_TMP, RETIRED_FILE, &text)
}

/// Replaces the key file with `key`.
fn replace_current(state_dir: &Path, key: &PbsKey) -> Result<(), PbsKeyError> {
    let json = key.key_file_json();
    write_replacing(state_dir, ROTATED_TMP, KEY_FILE, json.as_bytes())?;
    tracing::info!(fingerprint = %key.fingerprint(), "pbs encryption key rotated");
    Ok(())
}

/// Writes `bytes` to `state_dir/tmp` (0600), syncs it, renames it over `state_dir/name` and
/// syncs the directory: the file is never seen half-written.
fn write_replacing(
    state_dir: &Path,
    tmp: &str,
    name: &str,
    bytes: &[u8],
) -> Result<(), PbsKeyError> {
    let tmp = state_dir.join(tmp);
    let path = state_dir.join(name);
    let io = |what, path: &PathBuf, source| PbsKeyError::Io {
        what,
        path: path.clone(),
        source,
    };
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("removing", &tmp, e)),
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| io("creating", &tmp, e))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| io("writing", &tmp, e))?;
    drop(file);
    std::fs::rename(&tmp, &path).map_err(|e| io("renaming", &path, e))?;
    std::fs::File::open(state_dir)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| io("syncing", &state_dir.to_owned(), e))
}

#[cfg(test)]
mod tests;
