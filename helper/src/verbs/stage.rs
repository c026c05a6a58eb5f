//! Files into and out of a running guest through a root-only staging directory on tmpfs: a
//! file staged there and `pct push`ed into the guest's root filesystem ([`push_file`]: the
//! bootstrap, a guest stamp), and the FIFO a guest's file is `pct pull`ed into
//! ([`crate::verbs::guests`]).
//!
//! `pct push` opens the staged file on the host as root, enters the container's mount
//! (and, when unprivileged, user) namespace and creates the destination there, so
//! `--user 0 --group 0` is the container's root and a symlink inside the guest cannot
//! send the write outside it. It refuses a stopped container. The staged copy is
//! removed on every path: explicitly after a success, by [`Staged`]'s `Drop` otherwise.

use std::io::Write;
use std::path::PathBuf;

use bosun_proto::helper::Vmid;

use crate::config::Config;
use crate::error::{HelperError, io_error};
use crate::exec;
use crate::fsops::{self, Dir};

/// The mode `pct push` gives the file inside the guest.
const GUEST_PERMS: &str = "0600";

/// Stages `bytes` in the root-only staging directory and `pct push`es them to `destination`
/// in the running guest (0600, the container's root); the staged copy is gone afterwards.
pub(crate) fn push_file(
    config: &Config,
    vmid: Vmid,
    what: &str,
    bytes: &[u8],
    destination: &str,
) -> Result<(), HelperError> {
    let dir = staging_dir(&config.staging_root)?;
    let name = format!("{what}-{vmid}-{}", std::process::id());
    let staged = Staged::write(dir, name, bytes)?;
    let vmid = vmid.to_string();
    let source = staged.path().display().to_string();
    let fixed = ["--perms", GUEST_PERMS, "--user", "0", "--group", "0"];
    let args: Vec<&str> = ["push", &vmid, &source, destination]
        .into_iter()
        .chain(fixed)
        .collect();
    exec::run(&config.programs.pct, &args, config.limits.quick, &[0])?;
    staged.remove()
}

/// Opens the staging root, creating it (0700) under its root-controlled parent when
/// missing, and makes sure only root can read it.
pub(crate) fn staging_dir(root: &std::path::Path) -> Result<Dir, HelperError> {
    fsops::ensure_root(root, 0o700)
}

/// A staged copy of the document, removed when dropped (again, after [`Staged::remove`]: a
/// name already gone is no error).
pub(crate) struct Staged {
    dir: Dir,
    name: String,
}

impl Staged {
    pub(crate) fn write(dir: Dir, name: String, bytes: &[u8]) -> Result<Staged, HelperError> {
        let path = dir.path.join(&name);
        // A leftover of a helper killed mid-call with the same pid: never ours to trust.
        dir.remove(&name)?;
        let mut file = dir.create(&name, 0o600, true)?;
        let staged = Staged { dir, name };
        file.write_all(bytes).map_err(io_error("write", &path))?;
        Ok(staged)
    }

    pub(crate) fn path(&self) -> PathBuf {
        self.dir.path.join(&self.name)
    }

    fn remove(self) -> Result<(), HelperError> {
        self.dir.remove(&self.name).map(drop)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = self.dir.remove(&self.name);
    }
}
