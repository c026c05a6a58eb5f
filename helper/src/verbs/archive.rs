//! `hash_archive`: SHA-256 of one backup archive, directly under the fixed dump root or in a
//! dump directory beneath one of the fixed backup roots, read through a descriptor opened
//! beneath the root without following symlinks, so the agent (which cannot read the dump)
//! records what it backed up and checks an archive before every restore.

use std::path::Path;

use bosun_proto::helper::{ArchiveName, HashArchive, Output};
use rustix::fs::{FileType, OFlags};
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::error::{HelperError, io_error};
use crate::fsops::{open_file, open_root};

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
    let (sha256, size) = hash_file(root, &relative)?;
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
/// `root`.
pub fn hash_file(root: &Path, name: &str) -> Result<(String, u64), HelperError> {
    let (dir, path) = (open_root(root)?, root.join(name));
    let (file, stat) = open_file(
        Some(&dir),
        Path::new(name),
        OFlags::RDONLY | OFlags::NONBLOCK,
    )?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(HelperError::not_found(
            "regular archive file",
            path.display(),
        ));
    }
    sha256(file, &path)
}

/// SHA-256 (lowercase hex) of what `file` (at `path`) reads, and its size.
pub fn sha256(mut file: std::fs::File, path: &Path) -> Result<(String, u64), HelperError> {
    let mut hasher = Sha256::new();
    let size = std::io::copy(&mut file, &mut hasher).map_err(io_error("read", path))?;
    let hex = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((hex, size))
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
    hash_file(&config.dump_root, name).map(Some)
}
