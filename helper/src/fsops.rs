//! Path handling that a swapped symlink cannot redirect: every lookup is `openat2`
//! with `RESOLVE_NO_SYMLINKS` (and `RESOLVE_BENEATH` below a fixed root), and every
//! effect goes through the descriptor that was checked, not through a path again.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use bosun_proto::helper::{FsType, MountClass, MountOption};
use rustix::fs::StatxFlags;
use rustix::fs::{
    AtFlags, FileType, Mode, OFlags, RenameFlags, ResolveFlags, Stat, StatxAttributes,
};
use rustix::mount::{
    FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags, UnmountFlags, fsconfig_create,
    fsconfig_set_string, fsmount, fsopen, move_mount, unmount,
};

use crate::error::{HelperError, io_error};

/// A directory opened without following any symlink, with its display path.
#[derive(Debug)]
pub struct Dir {
    /// The descriptor every later step uses.
    pub fd: OwnedFd,
    /// For messages and answers.
    pub path: PathBuf,
}

/// `openat2` of `name` beneath `dir` (of the absolute `name` when `None`) with `flags`,
/// refusing a symlink in any component: the one way the helper resolves a path.
fn open_at(dir: Option<&Dir>, name: &Path, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    let links = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let (at, resolve) = match dir {
        Some(d) => (d.fd.as_fd(), links | ResolveFlags::BENEATH),
        None => (rustix::fs::CWD, links),
    };
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat2(at, name, flags, Mode::empty(), resolve)
}

fn dir_flags(path_only: bool) -> OFlags {
    let how = if path_only {
        OFlags::PATH
    } else {
        OFlags::RDONLY
    };
    OFlags::DIRECTORY | how
}

/// Opens a fixed root (absolute path) refusing symlinks in any component.
pub fn open_root(path: &Path) -> Result<Dir, HelperError> {
    let fd = open_at(None, path, dir_flags(false));
    let fd = fd.map_err(|e| HelperError::resolve("open", path, e.into()))?;
    Ok(Dir {
        fd,
        path: path.into(),
    })
}

/// Opens the file `name` beneath `dir` (the absolute `name` when `None`) with `flags`, never
/// through a symlink, and its status.
pub fn open_file(
    dir: Option<&Dir>,
    name: &Path,
    flags: OFlags,
) -> Result<(std::fs::File, Stat), HelperError> {
    let path = &dir.map_or_else(|| name.to_path_buf(), |d| d.path.join(name));
    let failed = |op| move |e: rustix::io::Errno| HelperError::resolve(op, path, e.into());
    let fd = open_at(dir, name, flags).map_err(failed("open"))?;
    let stat = rustix::fs::fstat(&fd).map_err(failed("stat"))?;
    Ok((fd.into(), stat))
}

/// Opens the regular file `name` beneath `dir` read-only, never through a symlink (nor
/// blocking on a FIFO); anything else is [`HelperError::NotFound`] of `what`.
pub fn open_regular(
    dir: &Dir,
    name: &Path,
    what: &'static str,
) -> Result<std::fs::File, HelperError> {
    let (file, stat) = open_file(Some(dir), name, OFlags::RDONLY | OFlags::NONBLOCK)?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok(file),
        _ => Err(HelperError::not_found(what, dir.path.join(name).display())),
    }
}

/// Opens the root directory `path` with `mode`, creating it when missing; it and its parent
/// must be root-controlled.
pub fn ensure_root(path: &Path, mode: u32) -> Result<Dir, HelperError> {
    let controlled = |p: &Path| {
        bosun_rootconf::check_root_controlled(p).map_err(|e| HelperError::Config(e.into()))
    };
    controlled(path.parent().unwrap_or(path))?;
    match rustix::fs::mkdir(path, Mode::from_raw_mode(mode)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(crate::error::io_error("create directory", path)(e)),
    }
    let dir = open_root(path)?;
    let chmod = rustix::fs::fchmod(&dir.fd, Mode::from_raw_mode(mode));
    chmod.map_err(crate::error::io_error("chmod", path))?;
    controlled(path)?;
    Ok(dir)
}

impl Dir {
    /// Opens the directory `name` directly beneath this one; `Ok(None)` if absent.
    pub fn child(&self, name: &str, path_only: bool) -> Result<Option<Dir>, HelperError> {
        let path = self.path.join(name);
        match open_at(Some(self), Path::new(name), dir_flags(path_only)) {
            Ok(fd) => Ok(Some(Dir { fd, path })),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(HelperError::resolve("open", path, e.into())),
        }
    }

    /// Creates `name` (mode `mode`) beneath this directory if missing, then opens it.
    /// Returns whether it was created.
    pub fn ensure_child(
        &self,
        name: &str,
        mode: u32,
        path_only: bool,
    ) -> Result<(Dir, bool), HelperError> {
        let created = match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode)) {
            Ok(()) => true,
            Err(rustix::io::Errno::EXIST) => false,
            Err(e) => return Err(io_error("create directory", self.path.join(name))(e)),
        };
        match self.child(name, path_only)? {
            Some(dir) => Ok((dir, created)),
            None => Err(HelperError::not_found(
                "directory",
                self.path.join(name).display(),
            )),
        }
    }

    /// Creates the file `name` (mode `mode`, fixed whatever the umask) in this directory,
    /// never through a symlink; `new`: never over an existing file, else truncated.
    pub fn create(&self, name: &str, mode: u32, new: bool) -> Result<std::fs::File, HelperError> {
        let path = self.path.join(name);
        let how = if new { OFlags::EXCL } else { OFlags::TRUNC };
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | how;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode));
        let fd = fd.map_err(|e| HelperError::resolve("create", &path, e.into()))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(io_error("chmod", path))?;
        Ok(fd.into())
    }

    /// Removes the file `name` from this directory; whether it was there.
    pub fn remove(&self, name: &str) -> Result<bool, HelperError> {
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(io_error("remove", self.path.join(name))(e)),
        }
    }

    /// Renames `from` to `to` in this directory (`new`: never over an existing `to`), then
    /// syncs the directory.
    pub fn rename(&self, from: &str, to: &str, new: bool) -> Result<(), HelperError> {
        let how = if new {
            RenameFlags::NOREPLACE
        } else {
            RenameFlags::empty()
        };
        let renamed = rustix::fs::renameat_with(&self.fd, from, &self.fd, to, how);
        renamed.map_err(io_error("rename", self.path.join(to)))?;
        rustix::fs::fsync(&self.fd).map_err(io_error("fsync", &self.path))
    }

    /// Removes the empty directory `name` beneath this one.
    pub fn remove_child(&self, name: &str) -> Result<(), HelperError> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR)
            .map_err(io_error("remove directory", self.path.join(name)))
    }

    /// Whether this directory is the root of a mount.
    pub fn is_mount_root(&self) -> Result<bool, HelperError> {
        let st = rustix::fs::statx(
            &self.fd,
            "",
            AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::BASIC_STATS,
        )
        .map_err(io_error("statx", &self.path))?;
        let attr = StatxAttributes::MOUNT_ROOT;
        Ok(st.stx_attributes_mask.contains(attr) && st.stx_attributes.contains(attr))
    }
}

/// The mount flags for a class and the caller's options, and their names.
pub fn mount_attrs(
    class: MountClass,
    options: &[MountOption],
) -> Result<(MountAttrFlags, String), HelperError> {
    if options.contains(&MountOption::Noatime) && options.contains(&MountOption::Relatime) {
        return Err(HelperError::ConflictingOptions("noatime", "relatime"));
    }
    let mut attrs = MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV;
    let mut names = vec!["nosuid", "nodev"];
    if class == MountClass::Data {
        attrs |= MountAttrFlags::MOUNT_ATTR_NOEXEC;
        names.push("noexec");
    }
    for option in options {
        let (flag, name) = match option {
            MountOption::Ro => (MountAttrFlags::MOUNT_ATTR_RDONLY, "ro"),
            MountOption::Noatime => (MountAttrFlags::MOUNT_ATTR_NOATIME, "noatime"),
            MountOption::Relatime => (MountAttrFlags::MOUNT_ATTR_RELATIME, "relatime"),
            MountOption::Nodiratime => (MountAttrFlags::MOUNT_ATTR_NODIRATIME, "nodiratime"),
        };
        if !names.contains(&name) {
            attrs |= flag;
            names.push(name);
        }
    }
    Ok((attrs, names.join(",")))
}

/// Mounts `device` (type `fstype`) onto the directory `target` refers to, with the
/// new mount API: the mount lands on the checked inode even if the path was swapped.
pub fn mount_device(
    device: &str,
    fstype: FsType,
    attrs: MountAttrFlags,
    target: &Dir,
) -> Result<(), HelperError> {
    let io_err = |op| io_error::<rustix::io::Errno>(op, &target.path);
    let fs = fsopen(fstype.as_str(), FsOpenFlags::FSOPEN_CLOEXEC).map_err(io_err("fsopen"))?;
    fsconfig_set_string(&fs, "source", device).map_err(io_err("fsconfig source"))?;
    fsconfig_create(&fs).map_err(io_err("fsconfig create"))?;
    let mnt = fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, attrs).map_err(io_err("fsmount"))?;
    move_mount(
        mnt.as_fd(),
        "",
        target.fd.as_fd(),
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )
    .map_err(io_err("move_mount"))
}

/// Unmounts `parent/name` without following a symlink in its last component; the
/// parent is reached through its checked descriptor.
pub fn unmount_child(parent: &Dir, name: &str) -> Result<(), HelperError> {
    let via = format!("/proc/self/fd/{}/{name}", parent.fd.as_raw_fd());
    unmount(via.as_str(), UnmountFlags::NOFOLLOW)
        .map_err(io_error("unmount", parent.path.join(name)))
}
