//! `bulk_archive` (decision 0090): a tar of one bulk volume of a running guest, taken inside
//! the guest by `pct exec <vmid> -- /usr/bin/tar` (the guest's root, its namespaces: a link a
//! customer planted resolves inside the guest), written into a new file beneath one of the
//! backup roots, `<storage_dir>/bosun-bulk/<guest id>/<volume>/`, every directory opened
//! beneath the root without following a symlink.
//!
//! The guest is admitted as every guest verb's is, and its stamp must be bound to the
//! request's guest id, or unbound (then bound to it first, as `push_bootstrap` binds it: a
//! host without the local API pushes no bootstrap); the path must be the `mp=` of one of its current mount points. The tar
//! goes into `bulk-<volume>.partial-<pid>` (never over an existing file), bounded in bytes and
//! time; a complete one is synced and renamed to `bulk-<volume>-<YYYY_MM_DD-HH_MM_SS>.tar`
//! (UTC; never over an existing name), then the volume's archives past `keep_last` (by name,
//! oldest first) and the partial files of killed runs are removed. A failure removes the
//! partial file and changes nothing else.
//!
//! `bulk_restore` (decision 0108) puts one such archive back: the same admission (the stamp
//! bound to the guest id, never bound here), the archive opened beneath the same directory
//! without following a symlink, hashed, and refused unless its size and SHA-256 are the ones
//! the agent recorded, before anything in the guest runs. The same open file is then fed,
//! bounded to that size and hashed once more as it goes, to the guest's tar
//! ([`bosun_proto::helper::BULK_RESTORE_SCRIPT`]'s `extract`, into a fresh directory on the volume); only when
//! those bytes hashed the same is the directory swapped in, else it is discarded.

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use bosun_proto::helper::StorageDir;
use bosun_proto::helper::{BULK_ARCHIVE_PREFIX, BULK_DIR, BULK_TAR_ARGV, BulkArchive, Output};
use bosun_proto::helper::{BulkRestore, BulkRestoreStep, bulk_restore_argv};
use bosun_proto::helper::{GuestPath, Vmid, VolumeName, bulk_archive_name, is_bulk_archive_name};
use uuid::Uuid;

use crate::config::Config;
use crate::error::{HelperError, io_error};
use crate::exec;
use crate::fsops::{Dir, open_regular, open_root};

use super::archive::{Hashing, backup_root, sha256};
use super::guests::{self, Admitted, Scratch};

/// Admits the guest for a verb on its bulk volume at `path`: its stamp bound to `guest_id`
/// (or unbound), `path` the `mp=` of one of its current mount points.
fn admit_volume<'a>(
    config: &'a Config,
    (vmid, guest_id): (Vmid, Uuid),
    path: &GuestPath,
) -> Result<Admitted<'a>, HelperError> {
    let admitted = guests::admit(config, vmid, Scratch::Refuse)?;
    if let Some(bound) = admitted.stamp.guest_id.filter(|g| *g != guest_id) {
        let reason = format!("its stamp is bound to guest {bound}, not {guest_id}");
        return Err(guests::not_ours(vmid, reason));
    }
    let path = path.as_str().trim_end_matches('/');
    let mounted = guests::entries(&admitted.shown)
        .any(|(key, value)| guests::mount_path(key, value) == Some(path));
    if !mounted {
        return Err(HelperError::not_found("mount point of the guest", path));
    }
    Ok(admitted)
}

/// The storage directory beneath its backup root, opened without following a symlink.
fn storage(config: &Config, dir: &StorageDir) -> Result<Dir, HelperError> {
    let (root, below) = backup_root(config, Path::new(dir.as_str()))?;
    let (root, below) = (open_root(root)?, below.to_str().unwrap_or_default());
    let storage = if below.is_empty() {
        Some(root)
    } else {
        root.child(below, false)?
    };
    storage.ok_or_else(|| HelperError::not_found("storage directory", dir))
}

/// Archives the volume (see the module docs).
pub fn archive(args: &BulkArchive, config: &Config) -> Result<Output, HelperError> {
    let admitted = admit_volume(config, (args.vmid, args.guest_id), &args.path)?;
    if admitted.stamp.guest_id.is_none() {
        guests::stamp(config, args.vmid, &admitted.key, Some(args.guest_id))?;
    }
    let mut dir = storage(config, &args.storage_dir)?;
    let mut made = Vec::new();
    for name in [BULK_DIR, &args.guest_id.to_string(), args.volume.as_str()] {
        let (child, created) = dir.ensure_child(name, 0o700, false)?;
        made.push((std::mem::replace(&mut dir, child), name.to_owned(), created));
    }
    let partial = format!("{}{}", partial_prefix(&args.volume), std::process::id());
    let file = dir.create(&partial, 0o600, true);
    let written = file.and_then(|file| write(args, config, &dir, (&partial, file)));
    if written.is_err() {
        // Nothing of the failed run stays: its partial file, then the directories it made.
        let _ = dir.remove(&partial);
        for (parent, name, _) in made.iter().rev().filter(|(_, _, created)| *created) {
            let _ = parent.remove_child(name);
        }
    }
    let (archive, sha256, size) = written?;
    let removed = prune(&dir, &args.volume, usize::from(args.keep_last.get()))?;
    Ok(Output::BulkArchived {
        archive: dir.path.join(archive).display().to_string(),
        sha256,
        size,
        removed,
    })
}

/// Runs the tar into the partial file, syncs it, hashes it and renames it to its archive name.
fn write(
    args: &BulkArchive,
    config: &Config,
    dir: &Dir,
    (partial, file): (&str, std::fs::File),
) -> Result<(String, String, u64), HelperError> {
    let (vmid, at) = (args.vmid.to_string(), format!("--directory={}", args.path));
    let argv = [&["exec", &vmid, "--"], &BULK_TAR_ARGV[..], &[&at, "."]].concat();
    let path = dir.path.join(partial);
    let time = Duration::from_secs(u64::from(args.timeout_secs.get()));
    let copy = file.try_clone().map_err(io_error("open", &path))?;
    let pct = config.programs.pct.as_path();
    exec::run_to_file((pct, &argv), (copy, &path), args.max_bytes.get(), time)?;
    file.sync_all().map_err(io_error("sync", &path))?;
    rustix::fs::seek(&file, rustix::fs::SeekFrom::Start(0)).map_err(io_error("seek", &path))?;
    let (sha256, size) = sha256(file, &path, None)?;
    let name = bulk_archive_name(args.volume.as_str(), std::time::SystemTime::now());
    dir.rename(partial, &name, true)?;
    Ok((name, sha256, size))
}

/// What the partial files of `volume`'s archives are named, before the writer's pid.
fn partial_prefix(volume: &VolumeName) -> String {
    format!("{BULK_ARCHIVE_PREFIX}{volume}.partial-")
}

/// Removes the volume's archives past the newest `keep` and every partial file; how many
/// archives went.
fn prune(dir: &Dir, volume: &VolumeName, keep: usize) -> Result<u32, HelperError> {
    let list = rustix::fs::Dir::read_from(&dir.fd).map_err(io_error("list", &dir.path))?;
    let (mut archives, mut partials) = (Vec::new(), Vec::new());
    for entry in list {
        let entry = entry.map_err(io_error("list", &dir.path))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_bulk_archive_name(volume.as_str(), &name) {
            archives.push(name);
        } else if name.starts_with(&partial_prefix(volume)) {
            partials.push(name);
        }
    }
    archives.sort();
    let old = &archives[..archives.len().saturating_sub(keep)];
    for name in old.iter().chain(&partials) {
        dir.remove(name)?;
    }
    Ok(u32::try_from(old.len()).unwrap_or(u32::MAX))
}

/// Puts the recorded archive back into the volume (see the module docs).
pub fn restore(args: &BulkRestore, config: &Config) -> Result<Output, HelperError> {
    let started = Instant::now();
    let admitted = admit_volume(config, (args.vmid, args.guest_id), &args.path)?;
    if admitted.stamp.guest_id != Some(args.guest_id) {
        let reason = format!("its stamp is not bound to guest {}", args.guest_id);
        return Err(guests::not_ours(args.vmid, reason));
    }
    if !is_bulk_archive_name(args.volume.as_str(), &args.archive) {
        return Err(HelperError::not_found(
            "archive of the volume",
            &args.archive,
        ));
    }
    let mut dir = storage(config, &args.storage_dir)?;
    for name in [BULK_DIR, &args.guest_id.to_string(), args.volume.as_str()] {
        let child = dir.child(name, false)?;
        dir = child.ok_or_else(|| HelperError::not_found("bulk directory", name))?;
    }
    let file = open_regular(&dir, Path::new(&args.archive), "regular archive file")?;
    let path = dir.path.join(&args.archive);
    let recorded = (args.sha256.as_str(), args.size.get());
    let verified = |what, (digest, read): (String, u64)| match (digest.as_str(), read) {
        got if got == recorded => Ok(digest),
        _ => Err(HelperError::DigestMismatch(what, recorded.0.into(), digest)),
    };
    let read = (&file).take(recorded.1.saturating_add(1));
    verified("bulk archive", sha256(read, &path, None)?)?;
    rustix::fs::seek(&file, rustix::fs::SeekFrom::Start(0)).map_err(io_error("seek", &path))?;
    let limit = Duration::from_secs(u64::from(args.timeout_secs.get()));
    let left = || limit.saturating_sub(started.elapsed());
    let (pct, vmid) = (config.programs.pct.as_path(), args.vmid.to_string());
    let at = (vmid.as_str(), args.path.as_str());
    let step = |step| [&["exec", at.0, "--"][..], &bulk_restore_argv(step, at.1)].concat();
    let source = (Hashing::new(file), path.as_path());
    let fed = exec::run_fed(
        (pct, &step(BulkRestoreStep::Extract)),
        source,
        recorded.1,
        left(),
    )?;
    let digest = verified("bulk archive fed to tar", fed.digest()).inspect_err(|_| {
        let _ = exec::run(
            pct,
            &step(BulkRestoreStep::Discard),
            config.limits.quick,
            &[0],
        );
    })?;
    let swap = step(BulkRestoreStep::Swap);
    exec::run(pct, &swap, left().as_secs().max(1), &[0])?;
    let (archive, size) = (path.display().to_string(), recorded.1);
    Ok(Output::BulkRestored {
        archive,
        sha256: digest,
        size,
    })
}
