//! `push_bootstrap`: stage the document in a root-only directory on tmpfs, then
//! `pct push` it into the running guest's root filesystem.
//!
//! `pct push` opens the staged file on the host as root, enters the container's mount
//! (and, when unprivileged, user) namespace and creates the destination there, so
//! `--user 0 --group 0` is the container's root and a symlink inside the guest cannot
//! send the write outside it. It refuses a stopped container. The staged copy is
//! removed on every path: explicitly after a success, by [`Staged`]'s `Drop` otherwise.

use std::io::Write;
use std::path::PathBuf;

use bosun_proto::helper::{GUEST_BOOTSTRAP_PATH, Output, PushBootstrap};
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::config::{self, Config};
use crate::error::{HelperError, io_error};
use crate::exec;
use crate::fsops::{self, Dir};

/// The mode `pct push` gives the file inside the guest.
const GUEST_PERMS: &str = "0600";

pub fn push_bootstrap(args: &PushBootstrap, config: &Config) -> Result<Output, HelperError> {
    let dir = staging_dir(&config.staging_root)?;
    let name = format!("bootstrap-{}-{}.json", args.vmid, std::process::id());
    let staged = Staged::write(dir, name, args.document.expose_bytes())?;
    let vmid = args.vmid.to_string();
    let source = staged.path().display().to_string();
    exec::run(
        &config.programs.pct,
        &[
            "push",
            vmid.as_str(),
            source.as_str(),
            GUEST_BOOTSTRAP_PATH,
            "--perms",
            GUEST_PERMS,
            "--user",
            "0",
            "--group",
            "0",
        ],
        exec::limit::QUICK,
        &[0],
    )?;
    staged.remove()?;
    Ok(Output::BootstrapPushed {
        vmid: args.vmid,
        destination: GUEST_BOOTSTRAP_PATH.to_owned(),
    })
}

/// Opens the staging root, creating it (0700) under its root-controlled parent when
/// missing, and makes sure only root can read it.
fn staging_dir(root: &std::path::Path) -> Result<Dir, HelperError> {
    match fsops::open_root(root) {
        Err(HelperError::NotFound { .. }) => {
            let parent = root.parent().unwrap_or(root);
            config::check_root_controlled(parent)
                .map_err(|source| HelperError::Config { source })?;
            match rustix::fs::mkdir(root, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(io_error("create directory", root)(e)),
            }
        }
        Err(e) => return Err(e),
        Ok(dir) => {
            rustix::fs::fchmod(&dir.fd, Mode::from_raw_mode(0o700))
                .map_err(io_error("chmod", root))?;
            return Ok(dir);
        }
    }
    let dir = fsops::open_root(root)?;
    rustix::fs::fchmod(&dir.fd, Mode::from_raw_mode(0o700)).map_err(io_error("chmod", root))?;
    Ok(dir)
}

/// A staged copy of the document, removed when dropped.
struct Staged {
    dir: Dir,
    name: String,
    removed: bool,
}

impl Staged {
    fn write(dir: Dir, name: String, bytes: &[u8]) -> Result<Staged, HelperError> {
        let path = dir.path.join(&name);
        // A leftover of a helper killed mid-call with the same pid: never ours to trust.
        match rustix::fs::unlinkat(&dir.fd, name.as_str(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(io_error("remove stale", &path)(e)),
        }
        let fd = rustix::fs::openat(
            &dir.fd,
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(io_error("create", &path))?;
        let staged = Staged {
            dir,
            name,
            removed: false,
        };
        let mut file = std::fs::File::from(fd);
        file.write_all(bytes).map_err(io_error("write", &path))?;
        rustix::fs::fchmod(&file, Mode::from_raw_mode(0o600)).map_err(io_error("chmod", &path))?;
        Ok(staged)
    }

    fn path(&self) -> PathBuf {
        self.dir.path.join(&self.name)
    }

    fn remove(mut self) -> Result<(), HelperError> {
        self.removed = true;
        rustix::fs::unlinkat(&self.dir.fd, self.name.as_str(), AtFlags::empty())
            .map_err(io_error("remove", self.path()))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.removed {
            let _ = rustix::fs::unlinkat(&self.dir.fd, self.name.as_str(), AtFlags::empty());
        }
    }
}
