//! `hash_archive`: SHA-256 of one backup archive, directly under the fixed dump root or in a
//! dump directory beneath one of the fixed backup roots, read through a descriptor opened
//! beneath the root without following symlinks, so the agent (which cannot read the dump)
//! records what it backed up and checks an archive before every restore. The integrity check
//! between restore tests asks for a pace (`rate_mib_s`): the archive is then read no faster
//! than that, so re-hashing a large archive leaves the disk to the guests beside it.

use std::io::Read;
use std::num::NonZeroU32;
use std::path::Path;
use std::time::{Duration, Instant};

use bosun_proto::helper::{ArchiveName, HashArchive, Output};
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::error::HelperError;
use crate::fsops::{open_regular, open_root};

/// Hashes `<dump_root>/<archive>`, or `<dir>/<archive>` when `dir` lies beneath one of the
/// backup roots (read beneath that root, so no link leads out of it).
pub fn hash(args: &HashArchive, config: &Config) -> Result<Output, HelperError> {
    let name = args.archive.as_str();
    let (root, relative) = match &args.dir {
        None => (config.dump_root.as_path(), name.to_owned()),
        Some(dir) => {
            let (root, below) = backup_root(config, Path::new(dir.as_str()))?;
            (root, below.join(name).display().to_string())
        }
    };
    let (sha256, size) = hash_file(root, &relative, args.rate_mib_s)?;
    Ok(Output::ArchiveHashed {
        archive: root.join(&relative).display().to_string(),
        sha256,
        size,
    })
}

/// The backup root `dir` lies beneath (or is), and `dir` relative to it.
pub fn backup_root<'a>(
    config: &'a Config,
    dir: &'a Path,
) -> Result<(&'a Path, &'a Path), HelperError> {
    let mut found = config.backup_roots.iter();
    let found = found.find_map(|root| Some((root.as_path(), dir.strip_prefix(root).ok()?)));
    found.ok_or_else(|| HelperError::not_found("directory beneath a backup root", dir.display()))
}

/// SHA-256 (lowercase hex) and size of the regular file `name` (a relative path) beneath
/// `root`, read no faster than `rate` MiB per second when one is given.
pub fn hash_file(
    root: &Path,
    name: &str,
    rate: Option<NonZeroU32>,
) -> Result<(String, u64), HelperError> {
    let dir = open_root(root)?;
    let file = open_regular(&dir, Path::new(name), "regular archive file")?;
    sha256(file, &root.join(name), rate)
}

/// How much is read between two looks at the pace.
const CHUNK: u64 = 1 << 20;

/// SHA-256 (lowercase hex) of what `file` (at `path`) reads, and its size, read no faster
/// than `rate` MiB per second when one is given: after each chunk the reader sleeps until
/// the bytes read so far are due at that rate.
pub fn sha256(
    file: impl Read,
    path: &Path,
    rate: Option<NonZeroU32>,
) -> Result<(String, u64), HelperError> {
    let (mut read, started) = (Hashing::new(file), Instant::now());
    let read_err = |e| HelperError::Io("read", path.into(), e);
    while std::io::copy(&mut (&mut read).take(CHUNK), &mut std::io::sink()).map_err(read_err)? > 0 {
        if let Some(wait) = rate.and_then(|r| due_at(read.2, r).checked_sub(started.elapsed())) {
            std::thread::sleep(wait);
        }
    }
    Ok(read.digest())
}

/// A reader that hashes what it reads: SHA-256, and how many bytes.
pub struct Hashing<R>(R, Sha256, u64);

impl<R> Hashing<R> {
    /// Hashes what `inner` reads.
    pub fn new(inner: R) -> Self {
        Self(inner, Sha256::new(), 0)
    }

    /// The SHA-256 (lowercase hex) and count of every byte read.
    pub fn digest(self) -> (String, u64) {
        (hex(&self.1.finalize()), self.2)
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read(buf)?;
        self.1.update(&buf[..n]);
        self.2 += n as u64;
        Ok(n)
    }
}

/// When `bytes` are due at `rate` MiB per second, from the start of the read.
pub(crate) fn due_at(bytes: u64, rate: NonZeroU32) -> Duration {
    let per_second = u128::from(rate.get()) << 20;
    let micros = u128::from(bytes) * 1_000_000 / per_second;
    Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
}

/// `bytes` in lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The archive a build produced, hashed (and sized) when it is a file directly under the
/// dump root; `None` for an archive elsewhere (another storage), which the agent cannot
/// verify.
pub fn hash_built(archive: &str, config: &Config) -> Result<Option<(String, u64)>, HelperError> {
    let path = Path::new(archive);
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Ok(None);
    };
    if path.parent() != Some(config.dump_root.as_path()) || ArchiveName::new(name).is_err() {
        return Ok(None);
    }
    hash_file(&config.dump_root, name, None).map(Some)
}
