//! `prepare_config_mount`: the guest's bootstrap directory and `bootstrap.json`.

use std::io::Write;
use std::os::fd::OwnedFd;

use bosun_proto::helper::{Output, PrepareConfigMount};
use rustix::fs::{Gid, Mode, OFlags, Uid};

use crate::config::Config;
use crate::error::{HelperError, io_error};
use crate::fsops;

/// Name of the per-guest directory bound into the guest.
pub const BOOTSTRAP_DIR: &str = "bootstrap";
/// The file the controller reads.
pub const BOOTSTRAP_FILE: &str = "bootstrap.json";
const TEMP_FILE: &str = ".bootstrap.json.tmp";

pub fn prepare(args: &PrepareConfigMount, config: &Config) -> Result<Output, HelperError> {
    let root = fsops::open_root(&config.guests_root)?;
    let vmid = args.vmid.to_string();
    // Refuse a symlinked or misplaced entry before creating anything.
    if let Some(guest) = root.child(&vmid, false)? {
        guest.child(BOOTSTRAP_DIR, false)?;
    }
    let (guest, _) = root.ensure_child(&vmid, 0o755, false)?;
    let (dir, _) = guest.ensure_child(BOOTSTRAP_DIR, 0o700, false)?;
    let file_path = dir.path.join(BOOTSTRAP_FILE);
    let owner = (
        Some(Uid::from_raw(args.root_uid.get())),
        Some(Gid::from_raw(args.root_gid.get())),
    );

    // Write a temporary file, make it the mapped root's 0600, then rename it over
    // the old one: the guest never sees a partial or foreign-owned file.
    match rustix::fs::unlinkat(&dir.fd, TEMP_FILE, rustix::fs::AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(io_error("remove stale", dir.path.join(TEMP_FILE))(e)),
    }
    let fd: OwnedFd = rustix::fs::openat(
        &dir.fd,
        TEMP_FILE,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(io_error("create", &file_path))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(args.bootstrap.expose_bytes())
        .map_err(io_error("write", &file_path))?;
    rustix::fs::fchmod(&file, Mode::from_raw_mode(0o600)).map_err(io_error("chmod", &file_path))?;
    rustix::fs::fchown(&file, owner.0, owner.1).map_err(io_error("chown", &file_path))?;
    rustix::fs::fsync(&file).map_err(io_error("fsync", &file_path))?;
    drop(file);
    rustix::fs::renameat(&dir.fd, TEMP_FILE, &dir.fd, BOOTSTRAP_FILE)
        .map_err(io_error("rename", &file_path))?;
    rustix::fs::fchmod(&dir.fd, Mode::from_raw_mode(0o700))
        .map_err(io_error("chmod", &dir.path))?;
    rustix::fs::fchown(&dir.fd, owner.0, owner.1).map_err(io_error("chown", &dir.path))?;
    rustix::fs::fsync(&dir.fd).map_err(io_error("fsync", &dir.path))?;
    Ok(Output::ConfigPrepared {
        dir: dir.path.display().to_string(),
        file: file_path.display().to_string(),
    })
}
