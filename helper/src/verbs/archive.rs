//! `hash_archive`: SHA-256 of one backup archive directly under the fixed dump root, read
//! through a descriptor opened without following symlinks, so the agent (which cannot read
//! the dump) can check an archive before every restore.

use std::os::fd::AsFd;
use std::path::Path;

use bosun_proto::helper::{ArchiveName, Output};
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::error::HelperError;
use crate::fsops::open_root;

/// Hashes `<dump_root>/<name>`; `name` is a validated [`ArchiveName`] (one component).
pub fn hash(name: &str, config: &Config) -> Result<Output, HelperError> {
    let (sha256, size) = hash_file(&config.dump_root, name)?;
    Ok(Output::ArchiveHashed {
        archive: config.dump_root.join(name).display().to_string(),
        sha256,
        size,
    })
}

/// SHA-256 (lowercase hex) and size of the regular file `name` directly beneath `root`.
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
