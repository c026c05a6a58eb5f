//! Reading and writing the archive's members with their SHA-256 taken on the way.

use std::io::Read;
use std::path::Path;

use sha2::{Digest as _, Sha256};

use super::{HubBackupError, io};

/// A reader that hashes and counts what passes through it.
#[derive(Debug)]
pub(super) struct Hashing<R> {
    inner: R,
    hasher: Sha256,
    bytes: u64,
}

impl<R: Read> Hashing<R> {
    pub(super) fn new(inner: R) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            bytes: 0,
        }
    }

    /// The bytes read so far and their SHA-256, lowercase hex.
    pub(super) fn finish(self) -> (u64, String) {
        (self.bytes, hex::encode(self.hasher.finalize()))
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

/// The size and SHA-256 of the file at `path`.
pub(super) fn digest_file(path: &Path) -> Result<(u64, String), HubBackupError> {
    let file = std::fs::File::open(path).map_err(io("open", path))?;
    let mut hashing = Hashing::new(file);
    std::io::copy(&mut hashing, &mut std::io::sink()).map_err(io("read", path))?;
    Ok(hashing.finish())
}

/// A tar header for a regular file of `size` bytes readable by its owner only.
pub(super) fn header(size: u64, mtime_ms: i64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(size);
    header.set_mode(0o600);
    header.set_mtime(u64::try_from(mtime_ms / 1000).unwrap_or(0));
    header
}

/// Flushes the directory holding `path`, so a rename or a new name in it is durable.
pub(super) fn sync_parent(path: &Path) -> Result<(), HubBackupError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(io("flush the directory of", path))
}
