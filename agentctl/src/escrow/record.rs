//! `escrow.json` in the state directory: that this host's K has an escrow at the hub, and
//! which. It holds no secret (no words, no key, no blob) — only what `escrow create`
//! needs to refuse running twice and `escrow status` shows.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The record's file name.
pub const FILE: &str = "escrow.json";

/// The record is a few hundred bytes.
const MAX_LEN: u64 = 4096;

/// The host's escrow as last made on this box.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EscrowRecord {
    /// The host the escrow is for.
    pub host_id: Uuid,
    /// The fingerprint of the wrapped K.
    pub key_fingerprint: String,
    /// When the first code was made.
    pub created_at: Timestamp,
    /// When the current code was made (the same as `created_at` until a rotation).
    pub code_made_at: Timestamp,
    /// How many times the code was rotated.
    pub rotations: u32,
}

/// Why the record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Reading or writing failed.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a record.
    #[error("{path} is not an escrow record")]
    Malformed {
        /// The file.
        path: PathBuf,
    },
}

/// The record, if one was written.
pub fn load(state_dir: &Path) -> Result<Option<EscrowRecord>, RecordError> {
    let path = state_dir.join(FILE);
    let io = |what, source| RecordError::Io {
        what,
        path: path.clone(),
        source,
    };
    let meta = match std::fs::metadata(&path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("inspecting", e)),
    };
    if meta.len() > MAX_LEN {
        return Err(RecordError::Malformed { path });
    }
    let text = std::fs::read_to_string(&path).map_err(|e| io("reading", e))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|_| RecordError::Malformed { path })
}

/// Writes the record (temporary file, sync, rename).
pub fn store(state_dir: &Path, record: &EscrowRecord) -> Result<(), RecordError> {
    let path = state_dir.join(FILE);
    let tmp = state_dir.join(".escrow.json.tmp");
    let io = |what, path: &Path, source| RecordError::Io {
        what,
        path: path.to_owned(),
        source,
    };
    let text = serde_json::to_vec_pretty(record)
        .map_err(|_| RecordError::Malformed { path: path.clone() })?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| io("creating", &tmp, e))?;
    file.write_all(&text)
        .and_then(|()| file.sync_all())
        .map_err(|e| io("writing", &tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io("renaming", &path, e))?;
    std::fs::File::open(state_dir)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| io("syncing", state_dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_garbage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).unwrap().is_none());
        let at = Timestamp::from_second(1_800_000_000).unwrap();
        let record = EscrowRecord {
            host_id: Uuid::new_v4(),
            key_fingerprint: "ab:".repeat(31) + "ab",
            created_at: at,
            code_made_at: at,
            rotations: 0,
        };
        store(dir.path(), &record).unwrap();
        assert_eq!(load(dir.path()).unwrap(), Some(record));
        std::fs::write(dir.path().join(FILE), b"{not json").unwrap();
        assert!(matches!(
            load(dir.path()),
            Err(RecordError::Malformed { .. })
        ));
    }
}
