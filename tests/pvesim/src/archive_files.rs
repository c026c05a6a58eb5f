//! Backup archives as files, as a node's storages hold them: when archives are files
//! (`SimConfig::archive_files`), every backup on a file storage (dir, NFS, CIFS) is written
//! where Proxmox would write it, beneath the simulator's files root (`/var/lib/vz` is the
//! root itself, so `local`'s dump directory is `ROOT/dump`; `/mnt/pve/…` is
//! `ROOT/mnt/pve/…`; a directory storage elsewhere is written where its path says). The
//! file's bytes stand for the archive's content (its recorded config and file tree), so a
//! reader that hashes the file sees a change of content as a change of bytes, and
//! [`SimHandle::plant_archive`] can put one guest's archive under another's name.

use std::path::{Path, PathBuf};

use crate::state::{Archive, NodeState, Volume};
use crate::{SimError, SimHandle};

/// Where `path` (a path on the node) is beneath `root`.
pub(crate) fn on_node(root: &Path, path: &str) -> PathBuf {
    if let Some(rest) = path.strip_prefix("/var/lib/vz") {
        root.join(rest.trim_start_matches('/'))
    } else if path.starts_with("/mnt/pve/") {
        root.join(path.trim_start_matches('/'))
    } else {
        PathBuf::from(path)
    }
}

/// The bytes of `volume`'s archive file: what a backup read (the guest, when, its config and
/// files), in a fixed order.
pub(crate) fn bytes(volume: &Volume, archive: &Archive) -> Vec<u8> {
    format!(
        "pvesim archive\nvmid {:?}\nctime {}\nconf {:?}\nfiles {:?}\n",
        volume.vmid, volume.ctime, archive.conf, archive.files
    )
    .into_bytes()
}

/// Writes an archive file (its directories made as needed); a failure is logged, as a full
/// disk under a real vzdump would fail the task instead.
pub(crate) fn write(file: &Path, bytes: &[u8]) {
    let written = file
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(file, bytes));
    if let Err(e) = written {
        tracing::warn!(file = %file.display(), error = %e, "could not write an archive file");
    }
}

impl NodeState {
    /// The file of backup `volid`, when archives are files and its storage is a file storage.
    pub(crate) fn archive_file(&self, volid: &str) -> Option<PathBuf> {
        let root = self.files_root.as_deref()?;
        let (sid, storage) = self.storage_of(volid)?;
        storage.kind.dir_path()?;
        let name = volid.strip_prefix(sid)?.strip_prefix(':')?;
        Some(on_node(
            root,
            &crate::storage::volume_path(&storage.kind, name),
        ))
    }
}

impl SimHandle {
    /// Where the node's files are when archives are files (`local`'s dump directory is
    /// `ROOT/dump`).
    pub fn files_root(&self) -> Option<PathBuf> {
        self.shared.state.lock().files_root.clone()
    }

    /// The file backup `volid` is written to, when archives are files and its storage is a
    /// file storage: what a test changes as whoever can write the storage would.
    pub fn archive_path(&self, volid: &str) -> Option<PathBuf> {
        self.shared.state.lock().archive_file(volid)
    }

    /// Puts backup `from`'s archive (content and file) under backup `volid`'s name, as
    /// someone with write access to the storage could: listings still show `volid` as it
    /// was, and a restore from it restores `from`'s guest.
    pub fn plant_archive(&self, volid: &str, from: &str) -> Result<(), SimError> {
        let mut st = self.shared.state.lock();
        let unknown = |volid: &str| SimError::DamageArchive {
            volid: volid.to_owned(),
        };
        let source = st.find_volume(from).ok_or_else(|| unknown(from))?;
        let archive = source.archive.clone().ok_or_else(|| unknown(from))?;
        let file = st.archive_file(volid);
        let target = st.volume_mut(volid).ok_or_else(|| unknown(volid))?;
        target.archive = Some(archive.clone());
        if let Some(file) = file {
            write(&file, &bytes(&source, &archive));
        }
        tracing::info!(volid, from, "archive planted");
        Ok(())
    }
}
