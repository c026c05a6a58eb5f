//! What proves an archive is the one a backup of this agent wrote, recorded when the backup
//! ends and checked before every restore (DR, restore test, `restore-now`, host loss).
//!
//! - A file archive (local, a directory target, USB, NFS, CIFS): the SHA-256 and size of its
//!   bytes, read by the helper (`hash_archive` in the archive's dump directory, beneath the
//!   helper's fixed backup roots). A file changed, truncated or replaced on the storage (by
//!   whoever can write the share) no longer matches.
//! - A PBS archive: it must be encrypted with one of this host's keys (the `encrypted`
//!   fingerprint PVE lists: K, or a key a rotation retired, which archives made before the
//!   rotation still need), and its notes carry a binding only a holder of that key can make
//!   ([`crate::trust::keys::pbs_key::PbsKey::archive_binding`]) over the guest id, the vmid and the
//!   backup time. The check uses the key whose fingerprint the archive (and its recorded
//!   proof) names. K is one per host, so encryption alone does not say *whose* archive it
//!   is: the binding does for its notes, and the config inside the archive does for its
//!   content ([`super::content`]: it must name the guest, read back through Proxmox, which
//!   decrypts it under K and checks it against the snapshot's signed manifest). A box that
//!   took over a lost host, whose journal knows no archive, takes a PBS archive only when
//!   both verify.
//!
//! A PVE storage holds one key, the current K; an archive of a retired key is read through
//! the restore-only storage holding that key ([`Verified::retired_key`],
//! `storage::watcher::keys`).
//!
//! An archive that fails its check is refused, audited once (`archive.rejected`, which the
//! hub raises as the `archive_rejected` alert) and the next candidate is tried.

use std::collections::HashSet;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestKind;
use bosun_proto::helper::{ArchiveName, DumpDir, HashArchive, Output, Request};
use bosun_pve::{ContentItem, GuestOps, VmNet, Vmid, VolumeId, hwaddr_of};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::json;

use crate::links::helper::{HelperClient, HelperClientError};
use crate::ops::journal::{ArchiveProof, AuditEvent, JournalHandle};
use crate::trust::keys::pbs_key::{PbsKeyError, PbsKeySource, PbsKeyring};

use super::content::ContentError;

use super::notes::{NOTES_PREFIX, binding_of_notes};

/// How many refused archives are remembered and audited (once each) per agent run.
const MAX_AUDITED_REJECTIONS: usize = 256;

/// What a check found out about an archive that passed it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    /// The fingerprint of the retired key a PBS archive is encrypted with: Proxmox reads it
    /// through that key's restore-only storage. `None` for K's archives and file archives.
    pub retired_key: Option<String>,
}

/// Why an archive could not be proven when its backup ended, or may not be restored. The
/// text (its whole chain) is the reason an operator reads: in `archive.rejected`, in a
/// backup's or a job's failure.
#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    /// The archive's volid is not one.
    #[error(transparent)]
    Volume(bosun_pve::ValueError),
    /// A PBS archive its storage does not list.
    #[error("the archive is not listed by its storage")]
    NotListed,
    /// A just-written PBS archive not encrypted with any of this host's keys.
    #[error("the archive is not encrypted with this host's key")]
    NotOurArchiveKey,
    /// Writing the binding into the archive's notes failed.
    #[error("writing the archive's notes")]
    WriteNotes(#[source] Box<bosun_pve::PveError>),
    /// The archive's content does not name its guest.
    #[error(transparent)]
    Content(#[from] ContentError),
    /// No proof was journaled for the archive.
    #[error("no proof was recorded when it was backed up")]
    NoProof,
    /// A file proof recorded for an archive that is not a file.
    #[error("not a file archive")]
    NotAFile,
    /// A file archive's bytes differ from the proof.
    #[error(
        "its bytes changed since the backup (SHA-256 {now_sha}, {now_size} bytes; recorded {sha256}, {size} bytes)"
    )]
    BytesChanged {
        /// Its digest now.
        now_sha: String,
        /// Its size now.
        now_size: u64,
        /// The recorded digest.
        sha256: String,
        /// The recorded size.
        size: u64,
    },
    /// The notes lack the binding the proof recorded.
    #[error("its notes do not carry the binding recorded at backup")]
    BindingNotRecorded,
    /// Another key than the recorded one encrypts the archive.
    #[error("it is not encrypted with the key recorded at backup")]
    NotTheRecordedKey,
    /// None of this host's keys encrypts the archive.
    #[error("it is not encrypted with this host's key")]
    NotOurKey,
    /// The notes' binding does not verify.
    #[error("its notes' binding does not verify for guest {guest_id}, vmid {vmid}, time {time}")]
    BindingMismatch {
        /// The guest it was checked for.
        guest_id: String,
        /// The listing's vmid.
        vmid: u32,
        /// The listing's time.
        time: i64,
    },
    /// The notes carry no binding.
    #[error("its notes carry no binding")]
    NoBinding,
    /// File archives cannot be read without a helper.
    #[error("no helper is configured to read archive files")]
    NoReader,
    /// Proxmox could not say where the archive is.
    #[error("reading where the archive is")]
    Attributes(#[source] Box<bosun_pve::PveError>),
    /// Proxmox places the archive under another name.
    #[error("Proxmox places the archive at {path}, which is not its name")]
    Misplaced {
        /// Where Proxmox places it.
        path: String,
    },
    /// The archive is not in a dump directory.
    #[error("{path} is not in a dump directory")]
    NotInDumpDir {
        /// Where Proxmox places it.
        path: String,
    },
    /// Reading the archive's bytes failed.
    #[error(transparent)]
    Read(#[from] ArchiveReadError),
    /// This agent has no PBS key.
    #[error("this agent has no PBS encryption key")]
    NoPbsKey,
    /// The host's PBS keys could not be read.
    #[error(transparent)]
    Keyring(#[from] PbsKeyError),
    /// The host's PBS key is not recovered yet.
    #[error("this host's PBS encryption key is not recovered yet")]
    KeyNotRecovered,
    /// The listing names no vmid.
    #[error("the archive's listing names no vmid")]
    NoVmid,
    /// The listing has no time.
    #[error("the archive's listing has no time")]
    NoTime,
}

/// Why an archive file's bytes could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveReadError {
    /// The helper gave an answer that is not a hash.
    #[error("the helper answered {answer}")]
    Answer {
        /// The answer, as debug text.
        answer: String,
    },
    /// The helper could not be asked, or refused.
    #[error(transparent)]
    Helper(#[from] HelperClientError),
    /// Another reader failed.
    #[error("reading the archive")]
    Reader(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Reads an archive file's SHA-256 and size (the helper, which can read the dump).
pub trait ArchiveReader: Send + Sync + fmt::Debug {
    /// Hashes `dir/name`.
    fn hash<'a>(
        &'a self,
        dir: &'a DumpDir,
        name: &'a ArchiveName,
    ) -> BoxFuture<'a, Result<(String, u64), ArchiveReadError>>;

    /// Hashes `dir/name` reading no faster than `rate` MiB per second (`None`: as [`Self::hash`]).
    /// A reader that cannot pace itself reads at its own speed.
    fn hash_paced<'a>(
        &'a self,
        dir: &'a DumpDir,
        name: &'a ArchiveName,
        rate: Option<NonZeroU32>,
    ) -> BoxFuture<'a, Result<(String, u64), ArchiveReadError>> {
        let _ = rate;
        self.hash(dir, name)
    }
}

impl ArchiveReader for HelperClient {
    fn hash<'a>(
        &'a self,
        dir: &'a DumpDir,
        name: &'a ArchiveName,
    ) -> BoxFuture<'a, Result<(String, u64), ArchiveReadError>> {
        self.hash_paced(dir, name, None)
    }

    fn hash_paced<'a>(
        &'a self,
        dir: &'a DumpDir,
        name: &'a ArchiveName,
        rate: Option<NonZeroU32>,
    ) -> BoxFuture<'a, Result<(String, u64), ArchiveReadError>> {
        Box::pin(async move {
            let request = Request::HashArchive(HashArchive {
                archive: name.clone(),
                dir: Some(dir.clone()),
                rate_mib_s: rate,
            });
            match self.call(&request).await {
                Ok(Output::ArchiveHashed { sha256, size, .. }) => Ok((sha256, size)),
                Ok(other) => Err(ArchiveReadError::Answer {
                    answer: format!("{other:?}"),
                }),
                Err(e) => Err(e.into()),
            }
        })
    }
}

/// Proves archives when backups end and checks them before restores. Cheap to clone.
#[derive(Clone)]
pub struct ArchiveProver {
    ops: Arc<dyn GuestOps>,
    reader: Option<Arc<dyn ArchiveReader>>,
    key: Option<PbsKeySource>,
    journal: JournalHandle,
    /// Archives already refused (audited once each, at most [`MAX_AUDITED_REJECTIONS`]).
    rejected: Arc<Mutex<HashSet<String>>>,
    /// The most MiB per second a file archive is read at (`None`: unpaced).
    pace: Option<NonZeroU32>,
}

impl fmt::Debug for ArchiveProver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArchiveProver")
            .field("reader", &self.reader)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// The archive's file name in a `<storage>:backup/<file>` volid: whether `volid` names a
/// file archive (`<storage>:backup/vzdump-lxc-…` or `vzdump-qemu-…`); `None` for anything
/// else (a PBS snapshot `<storage>:backup/ct/<vmid>/<time>` or `vm/…`).
pub fn archive_name(volid: &str) -> Option<ArchiveName> {
    let (_, rest) = volid.split_once(':')?;
    ArchiveName::new(rest.strip_prefix("backup/")?).ok()
}

impl ArchiveProver {
    /// A prover reading files through `reader` (none: file archives cannot be proven) and
    /// binding PBS archives with K from `key` (none: PBS archives cannot be proven).
    pub fn new(
        ops: Arc<dyn GuestOps>,
        reader: Option<Arc<dyn ArchiveReader>>,
        key: Option<PbsKeySource>,
        journal: JournalHandle,
    ) -> Self {
        Self {
            ops,
            reader,
            key,
            journal,
            rejected: Arc::default(),
            pace: None,
        }
    }

    /// The same prover, reading file archives no faster than `rate` MiB per second: for the
    /// integrity check between restore tests, which nothing waits on.
    #[must_use]
    pub fn paced(&self, rate: NonZeroU32) -> Self {
        Self {
            pace: Some(rate),
            ..self.clone()
        }
    }

    /// Records what proves `volid`, a backup of `guest_id` (at `vmid`) just written (`item`:
    /// its listing entry). A PBS archive gets its binding written into its notes here. The
    /// guest's MAC address is journaled too: a DR restore keeps an archive's MAC only if it
    /// is this one.
    pub async fn prove(
        &self,
        guest_id: &str,
        vmid: Vmid,
        volid: &str,
        item: Option<&ContentItem>,
    ) -> Result<ArchiveProof, ProofError> {
        let volume = VolumeId::new(volid.to_owned()).map_err(ProofError::Volume)?;
        // vzdump named the archive after the guest it backed up; the config inside must agree.
        let kind = super::content::archive_kind(volid).ok_or(ContentError::UnknownKind)?;
        self.record_mac(guest_id, vmid, kind).await;
        if let Some(name) = archive_name(volid) {
            let (sha256, size) = self.hash_file(&volume, &name).await?;
            return Ok(ArchiveProof::File { sha256, size });
        }
        let item = item.ok_or(ProofError::NotListed)?;
        let ring = self.ring()?;
        // K, or the key K replaced when a rotation switched the storage during the backup.
        let key = item
            .encrypted
            .as_deref()
            .and_then(|f| ring.key(f))
            .ok_or(ProofError::NotOurArchiveKey)?;
        let fingerprint = key.fingerprint();
        let (vmid, time) = vmid_and_time(item)?;
        let binding = key.archive_binding(guest_id, vmid, time);
        let notes = format!("{NOTES_PREFIX}{guest_id} {binding}");
        self.ops
            .set_volume_notes(&volume, &notes)
            .await
            .map_err(|e| ProofError::WriteNotes(Box::new(e)))?;
        // Its content must name the guest too, or no restore would ever take it.
        let verified = Verified {
            retired_key: ring.retired_key(&fingerprint).map(|r| r.key.fingerprint()),
        };
        let readable = readable_volume(&volume, &verified);
        super::content::check(&*self.ops, guest_id, kind, &readable).await?;
        Ok(ArchiveProof::Pbs {
            fingerprint,
            binding,
        })
    }

    /// Tags `vmid`'s config with `guest_id` before a backup of it, so the archive's content
    /// names its guest ([`super::content`]). A failure is logged: the backup's proof then
    /// finds the tag missing and the backup fails with the reason.
    pub async fn mark_guest(&self, guest_id: &str, vmid: Vmid) {
        self.mark_guest_as(guest_id, vmid, GuestKind::Lxc).await;
    }

    /// [`Self::mark_guest`] for a guest of `kind` (a VM's config is read and written
    /// through its own calls).
    pub async fn mark_guest_as(&self, guest_id: &str, vmid: Vmid, kind: GuestKind) {
        if let Err(reason) = super::content::mark(&*self.ops, guest_id, vmid, kind).await {
            tracing::warn!(guest_id, %vmid, kind = kind.as_str(), reason = %error_chain(&reason), "could not tag the guest's config before its backup");
        }
    }

    /// Checks `item`, one of `guest_id`'s journaled archives, against the proof recorded
    /// when it was written, for a restore into a container (a VM's archive is refused);
    /// `Err` says why it may not be restored.
    pub async fn check(
        &self,
        guest_id: &str,
        item: &ContentItem,
        proof: Option<&ArchiveProof>,
    ) -> Result<Verified, ProofError> {
        self.check_as(guest_id, GuestKind::Lxc, item, proof).await
    }

    /// [`Self::check`] for a restore into a guest of `kind`: the archive must be a `kind`
    /// guest's by its name (before anything else is read) and, on PBS, by the config inside
    /// (decision 0118).
    pub async fn check_as(
        &self,
        guest_id: &str,
        kind: GuestKind,
        item: &ContentItem,
        proof: Option<&ArchiveProof>,
    ) -> Result<Verified, ProofError> {
        let volume = VolumeId::new(item.volid.clone()).map_err(ProofError::Volume)?;
        super::content::check_kind_by_name(&volume, kind)?;
        match proof {
            None => Err(ProofError::NoProof),
            Some(ArchiveProof::File { sha256, size }) => {
                let name = archive_name(&item.volid).ok_or(ProofError::NotAFile)?;
                let (now_sha, now_size) = self.hash_file(&volume, &name).await?;
                if now_sha.eq_ignore_ascii_case(sha256) && now_size == *size {
                    Ok(Verified::default())
                } else {
                    Err(ProofError::BytesChanged {
                        now_sha,
                        now_size,
                        sha256: sha256.clone(),
                        size: *size,
                    })
                }
            }
            Some(ArchiveProof::Pbs {
                fingerprint,
                binding,
            }) => {
                let listed = binding_of_notes(item.notes.as_deref().unwrap_or_default());
                if listed.is_none_or(|(_, b)| b != *binding) {
                    return Err(ProofError::BindingNotRecorded);
                }
                let verified = self.check_bound(guest_id, item, fingerprint).await?;
                let readable = readable_volume(&volume, &verified);
                super::content::check(&*self.ops, guest_id, kind, &readable).await?;
                Ok(verified)
            }
        }
    }

    /// Checks a PBS archive no journal recorded (a box that took over a lost host): it must
    /// be encrypted with one of the host's keys and its notes' binding must name `guest_id`.
    pub async fn check_unrecorded(
        &self,
        guest_id: &str,
        item: &ContentItem,
    ) -> Result<Verified, ProofError> {
        self.check_unrecorded_as(guest_id, GuestKind::Lxc, item)
            .await
    }

    /// [`Self::check_unrecorded`] for a restore into a guest of `kind`: the archive must be
    /// a `kind` guest's by its name and by the config inside (decision 0118), as
    /// [`Self::check_as`] holds a recorded one.
    pub async fn check_unrecorded_as(
        &self,
        guest_id: &str,
        kind: GuestKind,
        item: &ContentItem,
    ) -> Result<Verified, ProofError> {
        let volume = VolumeId::new(item.volid.clone()).map_err(ProofError::Volume)?;
        super::content::check_kind_by_name(&volume, kind)?;
        let encrypted = item.encrypted.as_deref().unwrap_or_default().to_owned();
        let verified = self.check_bound(guest_id, item, &encrypted).await?;
        let readable = readable_volume(&volume, &verified);
        super::content::check(&*self.ops, guest_id, kind, &readable).await?;
        Ok(verified)
    }

    /// Checks that `item` is encrypted with the host's key with `fingerprint` and that its
    /// notes carry the binding that key makes for `guest_id`.
    async fn check_bound(
        &self,
        guest_id: &str,
        item: &ContentItem,
        fingerprint: &str,
    ) -> Result<Verified, ProofError> {
        let ring = self.ring()?;
        let encrypted = item.encrypted.as_deref().unwrap_or_default();
        if !encrypted.eq_ignore_ascii_case(fingerprint) {
            return Err(ProofError::NotTheRecordedKey);
        }
        let key = ring.key(fingerprint).ok_or(ProofError::NotOurKey)?;
        let (vmid, time) = vmid_and_time(item)?;
        let want = key.archive_binding(guest_id, vmid, time);
        match binding_of_notes(item.notes.as_deref().unwrap_or_default()) {
            Some((named, binding)) if named.to_string() == guest_id && binding == want => {
                Ok(Verified {
                    retired_key: ring.retired_key(fingerprint).map(|r| r.key.fingerprint()),
                })
            }
            Some(_) => Err(ProofError::BindingMismatch {
                guest_id: guest_id.to_owned(),
                vmid,
                time,
            }),
            None => Err(ProofError::NoBinding),
        }
    }

    /// Journals the guest's MAC address as it is now; a failure only loses the MAC's
    /// continuity (a restored guest then gets a fresh one).
    async fn record_mac(&self, guest_id: &str, vmid: Vmid, kind: GuestKind) {
        let read = match kind {
            GuestKind::Lxc => self
                .ops
                .ct_config(vmid)
                .await
                .map(|config| config.get_str("net0").and_then(|n| hwaddr_of(&n))),
            // A VM's `net0` names its MAC as `virtio=<MAC>` (or `macaddr=`).
            GuestKind::Qemu => self.ops.vm_config(vmid).await.map(|config| {
                config
                    .get_str("net0")
                    .and_then(|n| VmNet::parse(&n).ok())
                    .and_then(|n| n.macaddr)
            }),
        };
        let mac = match read {
            Ok(mac) => mac,
            Err(e) => {
                tracing::warn!(%vmid, error = %error_chain(&e), "could not read the guest's MAC after its backup");
                None
            }
        };
        if let Some(mac) = mac
            && let Err(e) = self.journal.record_mac(guest_id.to_owned(), mac).await
        {
            tracing::warn!(guest_id, error = %error_chain(&e), "could not journal the guest's MAC");
        }
    }

    /// Refuses `volid` for `guest_id` because of `reason`: logged, and audited the first
    /// time (the hub raises `archive_rejected`) with the reason's whole chain.
    pub async fn reject(&self, guest_id: &str, volid: &str, reason: &ProofError) {
        let reason = error_chain(reason);
        let reason = reason.as_str();
        tracing::warn!(
            guest_id,
            archive = volid,
            reason,
            "archive refused for restore"
        );
        {
            // Whoever can write a storage can list any number of archives: the memory, and
            // with it the audit entries, stop at a bound (later refusals are logged only).
            let mut rejected = self.rejected.lock();
            if rejected.len() >= MAX_AUDITED_REJECTIONS || !rejected.insert(volid.to_owned()) {
                return;
            }
        }
        let mut event = AuditEvent::new("archive.rejected");
        event.guest_id = Some(guest_id.to_owned());
        event.detail = json!({ "archive": volid, "reason": reason });
        if let Err(e) = self.journal.append_audit(event).await {
            tracing::error!(error = %error_chain(&e), "could not audit a refused archive");
        }
    }

    async fn hash_file(
        &self,
        volume: &VolumeId,
        name: &ArchiveName,
    ) -> Result<(String, u64), ProofError> {
        let reader = self.reader.as_ref().ok_or(ProofError::NoReader)?;
        let attributes = self
            .ops
            .volume_attributes(volume)
            .await
            .map_err(|e| ProofError::Attributes(Box::new(e)))?;
        let path = std::path::Path::new(&attributes.path);
        if path.file_name().and_then(|n| n.to_str()) != Some(name.as_str()) {
            return Err(ProofError::Misplaced {
                path: attributes.path.clone(),
            });
        }
        let dir = path
            .parent()
            .and_then(|d| d.to_str())
            .and_then(|d| DumpDir::new(d).ok())
            .ok_or_else(|| ProofError::NotInDumpDir {
                path: attributes.path.clone(),
            })?;
        Ok(reader.hash_paced(&dir, name, self.pace).await?)
    }

    /// The host's keys: K and the ones rotations retired.
    fn ring(&self) -> Result<PbsKeyring, ProofError> {
        let source = self.key.as_ref().ok_or(ProofError::NoPbsKey)?;
        source.ring()?.ok_or(ProofError::KeyNotRecovered)
    }
}

/// Where Proxmox reads `volume` with the key it is encrypted with: itself, or for a retired
/// key's archive the same archive on that key's restore-only storage.
fn readable_volume(volume: &VolumeId, verified: &Verified) -> VolumeId {
    let Some(fingerprint) = &verified.retired_key else {
        return volume.clone();
    };
    let (Ok(storage), Some((_, name))) = (
        bosun_pve::StorageId::new(volume.storage()),
        volume.as_str().split_once(':'),
    ) else {
        return volume.clone();
    };
    let restore_only = crate::data::storage::naming::restore_only_id(&storage, fingerprint);
    VolumeId::new(format!("{restore_only}:{name}")).unwrap_or_else(|_| volume.clone())
}

/// A listed backup's vmid and time (epoch seconds).
fn vmid_and_time(item: &ContentItem) -> Result<(u32, i64), ProofError> {
    let vmid = item
        .vmid
        .and_then(|v| u32::try_from(v).ok())
        .ok_or(ProofError::NoVmid)?;
    let time = item
        .ctime
        .and_then(|t| i64::try_from(t).ok())
        .ok_or(ProofError::NoTime)?;
    Ok((vmid, time))
}
