//! Which block device `mount_by_uuid` may mount: a removable or USB-attached disk with the
//! serial the request names, not mounted anywhere yet. Never the root filesystem, `/boot`
//! or the EFI partition, whatever UUID the caller names (decision 0024).
//!
//! Everything is read beneath the configured `sysfs_root` (`/sys`), from the device
//! node's own major:minor, never from its name:
//!
//! - `<sysfs>/dev/block/<major>:<minor>`, resolved: the device's directory; when it holds
//!   a `partition` file the disk is its parent directory;
//! - `<disk>/removable` = `1`, or `<disk>/device` resolving to a path with a `usb…`
//!   component (USB disks often report themselves not removable);
//! - the serial (none reads as empty): the `serial` file of `<disk>/device` (resolved) or of the nearest
//!   directory above it, within sysfs, that has one: for a USB disk the USB device's
//!   (iSerial, as `lsusb -v` shows it), for others the disk's own; trimmed;
//! - `/proc/self/mountinfo`: no mount of the same major:minor.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use bosun_proto::helper::DiskSerial;

use crate::error::{HelperError, io_error};

/// Refuses `device` unless it is a disk `mount_by_uuid` may use.
pub fn check_mountable(device: &str, serial: &DiskSerial, sysfs: &Path) -> Result<(), HelperError> {
    let refuse = |reason: String| HelperError::DeviceNotAllowed(device.to_owned(), reason);
    let meta = std::fs::metadata(device).map_err(io_error("looking at", device))?;
    if !meta.file_type().is_block_device() {
        return Err(refuse("not a block device".into()));
    }
    let rdev = meta.rdev();
    let number = format!("{}:{}", rustix::fs::major(rdev), rustix::fs::minor(rdev));
    let sysfs = std::fs::canonicalize(sysfs).map_err(io_error("resolving", sysfs))?;
    let entry = std::fs::canonicalize(sysfs.join("dev/block").join(&number))
        .map_err(|_| refuse(format!("sysfs knows no block device {number}")))?;
    let disk = match entry.parent() {
        Some(parent) if entry.join("partition").exists() => parent,
        _ => &entry,
    };
    let bus = std::fs::canonicalize(disk.join("device")).ok();
    let bus_dirs = || bus.iter().flat_map(|b| b.ancestors());
    let usb = bus_dirs().any(|d| {
        d.file_name()
            .is_some_and(|n| n.as_encoded_bytes().starts_with(b"usb"))
    });
    if attribute(&disk.join("removable")).as_deref() != Some("1") && !usb {
        let why = format!("{} is neither removable nor USB-attached", disk.display());
        return Err(refuse(why));
    }
    let found = bus_dirs()
        .take_while(|d| d.starts_with(&sysfs) && *d != sysfs)
        .find_map(|d| attribute(&d.join("serial")));
    if found.as_deref() != Some(serial.as_str()) {
        let (found, serial) = (found.unwrap_or_default(), serial.as_str());
        return Err(refuse(format!(
            "it reports serial {found:?}, not {serial:?}"
        )));
    }
    let mountinfo = Path::new("/proc/self/mountinfo");
    let table = std::fs::read_to_string(mountinfo).map_err(io_error("reading", mountinfo))?;
    // Fields 3 and 5 of a mountinfo line: the mount's major:minor and where it is mounted.
    let mounted = table.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        (fields.get(2) == Some(&number.as_str())).then(|| fields.get(4).copied().unwrap_or("?"))
    });
    mounted.map_or(Ok(()), |at| {
        Err(refuse(format!("it is mounted already, at {at}")))
    })
}

/// A sysfs attribute, trimmed; `None` when absent, unreadable or empty.
fn attribute(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(text.trim().to_owned()).filter(|t| !t.is_empty())
}
