//! `mount_by_uuid` (of a disk [`disk`] allows) and `unmount`.

use bosun_proto::helper::{MountByUuid, Output, Unmount};

use super::disk;
use crate::config::Config;
use crate::error::HelperError;
use crate::exec;
use crate::fsops::{self, Dir};

/// One device `blkid` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlkidMatch {
    /// `DEVNAME`
    pub device: String,
    /// `TYPE`, when blkid knows it.
    pub fstype: Option<String>,
}

/// Parses `blkid -o export` output: blocks of `KEY=value` lines separated by blank lines.
pub fn parse_blkid_export(text: &str) -> Vec<BlkidMatch> {
    text.split("\n\n")
        .filter_map(|block| {
            let get = |key: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                    .map(str::to_string)
            };
            Some(BlkidMatch {
                device: get("DEVNAME")?,
                fstype: get("TYPE"),
            })
        })
        .collect()
}

/// A device path under `/dev` without `.`/`..` components or odd characters.
fn plain_device(device: &str) -> bool {
    device.strip_prefix("/dev/").is_some_and(|name| {
        name.split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
            && name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'/' | b'_' | b'-' | b'.' | b':'))
    })
}

/// Finds the single block device holding filesystem `uuid` by probing every device
/// (`blkid -c /dev/null`: no cache, no udev).
fn resolve_uuid(config: &Config, uuid: &str) -> Result<BlkidMatch, HelperError> {
    let (blkid, secs) = (config.programs.blkid.as_path(), config.limits.quick);
    let token = format!("UUID={uuid}");
    // blkid exits 2 when nothing matches.
    let args = ["-c", "/dev/null", "-o", "export", "-t", token.as_str()];
    let out = exec::run(blkid, &args, secs, &[0, 2])?;
    let mut matches = parse_blkid_export(&out.stdout.text());
    matches.sort_by(|a, b| a.device.cmp(&b.device));
    matches.dedup_by(|a, b| a.device == b.device);
    match matches.len() {
        0 => Err(HelperError::not_found("filesystem with uuid", uuid)),
        1 if plain_device(&matches[0].device) => Ok(matches.remove(0)),
        1 => {
            let detail = format!("unexpected device name {:?}", matches[0].device);
            Err(HelperError::ProgramOutput(blkid.into(), detail))
        }
        _ => {
            let devices = matches.into_iter().map(|m| m.device).collect();
            Err(HelperError::AmbiguousUuid(uuid.into(), devices))
        }
    }
}

pub fn mount_by_uuid(args: &MountByUuid, config: &Config) -> Result<Output, HelperError> {
    let (attrs, flags) = fsops::mount_attrs(args.class, &args.options)?;
    let root = fsops::open_root(&config.mount_root)?;
    let name = args.target_id.as_str();
    // Checks with no side effect first: an existing target must be a plain directory
    // (never a symlink) that is not already a mount point.
    if let Some(existing) = root.child(name, true)?
        && existing.is_mount_root()?
    {
        return Err(HelperError::MountState(
            existing.path,
            "already a mount point",
        ));
    }
    let device = resolve_uuid(config, args.uuid.as_str())?;
    disk::check_mountable(&device.device, &args.serial, &config.sysfs_root)?;
    if device.fstype.as_deref() != Some(args.fstype.as_str()) {
        return Err(HelperError::FsTypeMismatch(
            device.device,
            device.fstype,
            args.fstype.as_str(),
        ));
    }
    let (target, created) = root.ensure_child(name, 0o755, true)?;
    if let Err(err) = fsops::mount_device(&device.device, args.fstype, attrs, &target) {
        if created {
            drop(target);
            // Leave no trace of a failed mount; the mount error is what matters.
            let _ = root.remove_child(name);
        }
        return Err(err);
    }
    Ok(Output::Mounted {
        device: device.device,
        target: target.path.display().to_string(),
        flags,
    })
}

pub fn unmount(args: &Unmount, config: &Config) -> Result<Output, HelperError> {
    let root: Dir = fsops::open_root(&config.mount_root)?;
    let name = args.target_id.as_str();
    let target = root
        .child(name, true)?
        .ok_or_else(|| HelperError::not_found("mount target", root.path.join(name).display()))?;
    if !target.is_mount_root()? {
        return Err(HelperError::MountState(target.path, "not a mount point"));
    }
    let path = target.path.clone();
    // Our own descriptor would keep the mount busy.
    drop(target);
    fsops::unmount_child(&root, name)?;
    // The directory was made for the mount; an unexpected leftover stays.
    let _ = root.remove_child(name);
    let target = path.display().to_string();
    Ok(Output::Unmounted { target })
}
