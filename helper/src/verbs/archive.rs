//! `hash_archive`: SHA-256 of one backup archive, directly under the fixed dump root or in a
//! dump directory beneath one of the fixed backup roots, read through a descriptor opened
//! beneath the root without following symlinks, so the agent (which cannot read the dump)
//! records what it backed up and checks an archive before every restore.

use std::os::fd::AsFd;
use std::path::Path;

use bosun_proto::helper::{ArchiveName, HashArchive, Output};
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::error::HelperError;
use crate::fsops::open_root;

/// Hashes `<dump_root>/<archive>`, or `<dir>/<archive>` when `dir` lies beneath one of the
/// backup roots (read beneath that root, so no link leads out of it).
pub fn hash(args: &HashArchive, config: &Config) -> Result<Output, HelperError> {
    let name = args.archive.as_str();
    let (root, relative) = match &args.dir {
        None => (config.dump_root.as_path(), name.to_owned()),
        Some(dir) => {
            let dir = Path::new(dir.as_str());
            let (root, below) = config
                .backup_roots
                .iter()
                .find_map(|root| Some((root.as_path(), dir.strip_prefix(root).ok()?)))
                .ok_or_else(|| HelperError::NotFound {
                    what: "dump directory beneath a backup root",
                    name: dir.display().to_string(),
                })?;
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

/// SHA-256 (lowercase hex) and size of the regular file `name` (a relative path) beneath
/// `root`.
pub fn hash_file(root: &Path, name: &str) -> Result<(String, u64), HelperError> {
    let dir = open_root(root)?;
    let path = root.join(name);
    let fd = rustix::fs::openat2(
        &dir.fd,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| HelperError::resolve("open", &path, e.into()))?;
    let stat =
        rustix::fs::fstat(fd.as_fd()).map_err(|e| HelperError::resolve("stat", &path, e.into()))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(HelperError::NotFound {
            what: "regular archive file",
            name: path.display().to_string(),
        });
    }
    let mut hasher = Sha256::new();
    let size = std::io::copy(&mut std::fs::File::from(fd), &mut hasher).map_err(|source| {
        HelperError::Io {
            op: "read",
            path,
            source,
        }
    })?;
    Ok((hex_lower(&hasher.finalize()), size))
}

fn hex_lower(bytes: &[u8]) -> String {
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
