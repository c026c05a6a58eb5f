//! The slots root: the `current` link and the update record, read without following
//! symlinks and written through a temporary name renamed into place (then the directory
//! synced), so a crash leaves the old or the new version, never half of one.

use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use bosun_proto::update::{CURRENT_LINK, RECORD_FILE, Slot, UpdateRecord};
use rustix::fs::{Mode, OFlags, ResolveFlags};

/// A failure reading or writing the slots root.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A filesystem call failed.
    #[error("{op} {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The record or the link is not what the helper writes.
    #[error("{path}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// The slots root.
#[derive(Debug, Clone)]
pub struct Slots {
    root: PathBuf,
}

impl Slots {
    /// The slots under `root`.
    pub fn new(root: &Path) -> Self {
        Self { root: root.into() }
    }

    fn io(&self, op: &'static str, name: &str) -> impl FnOnce(rustix::io::Errno) -> RecordError {
        let path = self.root.join(name);
        move |e| RecordError::Io {
            op,
            path,
            source: e.into(),
        }
    }

    fn open(&self) -> Result<OwnedFd, RecordError> {
        rustix::fs::openat2(
            rustix::fs::CWD,
            &self.root,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(self.io("open", ""))
    }

    /// The record, if there is one.
    pub fn read(&self) -> Result<Option<UpdateRecord>, RecordError> {
        let dir = self.open()?;
        let fd = match rustix::fs::openat2(
            &dir,
            RECORD_FILE,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(self.io("open", RECORD_FILE)(e)),
        };
        let mut text = Vec::new();
        std::fs::File::from(fd)
            .take(64 * 1024)
            .read_to_end(&mut text)
            .map_err(|source| RecordError::Io {
                op: "read",
                path: self.root.join(RECORD_FILE),
                source,
            })?;
        let corrupt = |reason: String| RecordError::Corrupt {
            path: self.root.join(RECORD_FILE),
            reason,
        };
        let record: UpdateRecord =
            serde_json::from_slice(&text).map_err(|e| corrupt(e.to_string()))?;
        record.validate().map_err(|e| corrupt(e.to_string()))?;
        Ok(Some(record))
    }

    /// Replaces the record.
    pub fn write(&self, record: &UpdateRecord) -> Result<(), RecordError> {
        const TMP: &str = ".update.json.gate";
        let dir = self.open()?;
        let text = serde_json::to_vec_pretty(record).map_err(|e| RecordError::Corrupt {
            path: self.root.join(RECORD_FILE),
            reason: e.to_string(),
        })?;
        let fd = rustix::fs::openat(
            &dir,
            TMP,
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(self.io("create", TMP))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o644)).map_err(self.io("chmod", TMP))?;
        let mut file = std::fs::File::from(fd);
        let written = file.write_all(&text).and_then(|()| file.sync_all());
        written.map_err(|source| RecordError::Io {
            op: "write",
            path: self.root.join(TMP),
            source,
        })?;
        rustix::fs::renameat(&dir, TMP, &dir, RECORD_FILE).map_err(self.io("rename", TMP))?;
        rustix::fs::fsync(&dir).map_err(self.io("fsync", ""))
    }

    /// The slot `current` names.
    pub fn current(&self) -> Result<Slot, RecordError> {
        let dir = self.open()?;
        let target = rustix::fs::readlinkat(&dir, CURRENT_LINK, Vec::new())
            .map_err(self.io("readlink", CURRENT_LINK))?;
        let name = target.to_string_lossy();
        Slot::parse(&name).ok_or_else(|| RecordError::Corrupt {
            path: self.root.join(CURRENT_LINK),
            reason: format!("names {name:?}, not a or b"),
        })
    }

    /// Points `current` at `slot` in one rename (nothing to do when it already does).
    pub fn flip(&self, slot: Slot) -> Result<(), RecordError> {
        const TMP: &str = ".current.gate";
        if self.current().ok() == Some(slot) {
            return Ok(());
        }
        let dir = self.open()?;
        let _ = rustix::fs::unlinkat(&dir, TMP, rustix::fs::AtFlags::empty());
        rustix::fs::symlinkat(slot.as_str(), &dir, TMP).map_err(self.io("symlink", TMP))?;
        rustix::fs::renameat(&dir, TMP, &dir, CURRENT_LINK)
            .map_err(self.io("rename", CURRENT_LINK))?;
        rustix::fs::fsync(&dir).map_err(self.io("fsync", ""))
    }
}
