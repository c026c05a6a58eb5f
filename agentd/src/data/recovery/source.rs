//! Where a guest's backup is restored from: the newest archive the agent's own backups
//! wrote for the guest, across the tiers that still hold one. Only archives the journal
//! records as this guest's successful backups qualify, so neither the hub nor a volid a
//! storage lists can make the agent restore another customer's data; the archive must still
//! be listed by its storage (pruned, or on a storage that is gone, it does not count); and
//! it must pass its proof ([`crate::data::backup::proof`]): a changed or planted archive is refused and
//! the next one tried. The tiers' order only breaks ties (the faster tier first), so a hub
//! that drops or reorders tiers cannot make a restore take older data.

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestKind;
use bosun_pve::{ContentFilter, ContentType, Pve, StorageId, VolumeId};
use jiff::Timestamp;

use crate::data::backup::proof::ArchiveProver;
use crate::data::backup::tiers::{Tier, TierPlan};
use crate::data::storage::naming::restore_only_id;
use crate::ops::journal::JournalHandle;

/// How many of a guest's newest journaled archives per tier are looked for in its storage.
const CANDIDATES: u32 = 32;

/// An archive a guest can be restored from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupSource {
    /// The tier's position (0 = the first, the fastest).
    pub tier: u32,
    /// The tier's storage.
    pub storage: StorageId,
    /// The archive.
    pub archive: VolumeId,
    /// When the backup was taken (the archive's `ctime`, else when the agent recorded it).
    pub taken_at: Timestamp,
    /// The fingerprint of the retired key a PBS archive is encrypted with (a backup made
    /// before a rotation): Proxmox reads it through that key's restore-only storage.
    pub retired_key: Option<String>,
}

impl BackupSource {
    /// The kind of guest the archive's name says it is a backup of (`ct/…`, `vzdump-lxc-…`:
    /// a container; `vm/…`, `vzdump-qemu-…`: a VM); `None` for a name that says neither.
    pub fn kind(&self) -> Option<GuestKind> {
        crate::data::backup::content::archive_kind(self.archive.as_str())
    }

    /// The volume Proxmox restores: the archive itself, or, for an archive of a retired key,
    /// the same archive on the restore-only storage that holds that key (a PVE storage has
    /// one key, and PBS refuses to read an archive with another).
    pub fn restore_volume(&self) -> VolumeId {
        let Some(fingerprint) = &self.retired_key else {
            return self.archive.clone();
        };
        let Some((_, name)) = self.archive.as_str().split_once(':') else {
            return self.archive.clone();
        };
        let storage = restore_only_id(&self.storage, fingerprint);
        VolumeId::new(format!("{storage}:{name}")).unwrap_or_else(|_| self.archive.clone())
    }
}

/// The newest archive of `guest_id` still on `tier`'s storage that passes its proof; `Err`
/// says why there is none (nothing backed up there, all pruned or refused, or the storage
/// cannot be read).
pub async fn newest_on_tier<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    prover: &ArchiveProver,
    guest_id: &str,
    tier: &Tier,
) -> Result<BackupSource, String> {
    newest_on_tier_as(pve, journal, prover, (guest_id, GuestKind::Lxc), tier).await
}

/// [`newest_on_tier`] for a guest of `kind`: each archive is proven as a `kind` guest's
/// ([`ArchiveProver::check_as`]), so a VM is never restored from a container's archive nor a
/// container from a VM's.
pub async fn newest_on_tier_as<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    prover: &ArchiveProver,
    (guest_id, kind): (&str, GuestKind),
    tier: &Tier,
) -> Result<BackupSource, String> {
    let recorded = journal
        .good_archives(
            guest_id.to_owned(),
            tier.storage.as_str().to_owned(),
            CANDIDATES,
        )
        .await
        .map_err(|e| error_chain(&e))?;
    if recorded.is_empty() {
        return Err(format!(
            "no successful backup of the guest on {}",
            tier.storage
        ));
    }
    let filter = ContentFilter {
        content: Some(ContentType::Backup),
        vmid: None,
    };
    let listed = pve
        .list_content(&tier.storage, filter)
        .await
        .map_err(|e| format!("{} cannot be read: {}", tier.storage, error_chain(&e)))?;
    let mut refused = 0;
    for good in recorded {
        let Some(item) = listed.iter().find(|i| i.volid == good.archive) else {
            continue;
        };
        let Ok(volid) = VolumeId::new(good.archive.clone()) else {
            continue;
        };
        let verified = match prover
            .check_as(guest_id, kind, item, good.proof.as_ref())
            .await
        {
            Ok(verified) => verified,
            Err(reason) => {
                prover.reject(guest_id, &good.archive, &reason).await;
                refused += 1;
                continue;
            }
        };
        let recorded_at = good.recorded_at;
        let taken_at = item
            .ctime
            .and_then(|s| i64::try_from(s).ok())
            .and_then(|s| Timestamp::from_second(s).ok())
            .unwrap_or(recorded_at);
        return Ok(BackupSource {
            tier: tier.index,
            storage: tier.storage.clone(),
            archive: volid,
            taken_at,
            retired_key: verified.retired_key,
        });
    }
    if refused > 0 {
        return Err(format!(
            "{refused} of the guest's backups on {} failed their check and none other is there",
            tier.storage
        ));
    }
    Err(format!(
        "none of the guest's backups is still on {}",
        tier.storage
    ))
}

/// The newest verified archive of `guest_id` across the tiers that still hold one; of two
/// taken at the same time, the one on the earlier (faster) tier. `Err` names why each tier
/// had none.
pub async fn newest_surviving<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    prover: &ArchiveProver,
    guest_id: &str,
    plan: &TierPlan,
) -> Result<BackupSource, String> {
    newest_surviving_as(pve, journal, prover, (guest_id, GuestKind::Lxc), plan).await
}

/// [`newest_surviving`] for a guest of `kind` (a lost VM's DR proves each archive as a VM's).
pub async fn newest_surviving_as<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    prover: &ArchiveProver,
    (guest_id, kind): (&str, GuestKind),
    plan: &TierPlan,
) -> Result<BackupSource, String> {
    let mut why = Vec::new();
    let mut best: Option<BackupSource> = None;
    for tier in &plan.tiers {
        match newest_on_tier_as(pve, journal, prover, (guest_id, kind), tier).await {
            Ok(source) => {
                if best.as_ref().is_none_or(|b| source.taken_at > b.taken_at) {
                    best = Some(source);
                }
            }
            Err(reason) => why.push(format!("tier {}: {reason}", tier.index)),
        }
    }
    if let Some(source) = best {
        return Ok(source);
    }
    if why.is_empty() {
        return Err("no backup tier is planned".to_owned());
    }
    Err(why.join("; "))
}

/// The archive `volid` a signed job names, when it is one of `guest_id`'s journaled
/// backups, still listed, and passes its proof (at `tier`, the position of its storage in
/// the plan); `Err` says why it may not be restored.
pub async fn named_archive<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    prover: &ArchiveProver,
    guest_id: &str,
    volid: &VolumeId,
    tier: u32,
) -> Result<BackupSource, String> {
    named_archive_as(pve, journal, prover, guest_id, volid, tier, GuestKind::Lxc).await
}

/// [`named_archive`] for a restore into a guest of `kind`.
pub async fn named_archive_as<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    prover: &ArchiveProver,
    guest_id: &str,
    volid: &VolumeId,
    tier: u32,
    kind: GuestKind,
) -> Result<BackupSource, String> {
    let storage = StorageId::new(volid.storage().to_owned()).map_err(|e| e.to_string())?;
    let recorded = journal
        .good_archives(guest_id.to_owned(), storage.as_str().to_owned(), CANDIDATES)
        .await
        .map_err(|e| error_chain(&e))?;
    let good = recorded
        .into_iter()
        .find(|g| g.archive == volid.as_str())
        .ok_or_else(|| {
            format!(
                "{volid} is not one of the {CANDIDATES} newest backups this agent recorded for \
                 the guest on {storage}"
            )
        })?;
    let filter = ContentFilter {
        content: Some(ContentType::Backup),
        vmid: None,
    };
    let listed = pve
        .list_content(&storage, filter)
        .await
        .map_err(|e| format!("{storage} cannot be read: {}", error_chain(&e)))?;
    let item = listed
        .iter()
        .find(|i| i.volid == volid.as_str())
        .ok_or_else(|| format!("{volid} is no longer on {storage}"))?;
    let verified = match prover
        .check_as(guest_id, kind, item, good.proof.as_ref())
        .await
    {
        Ok(verified) => verified,
        Err(reason) => {
            prover.reject(guest_id, volid.as_str(), &reason).await;
            return Err(format!(
                "{volid} failed its check: {}",
                error_chain(&reason)
            ));
        }
    };
    let taken_at = item
        .ctime
        .and_then(|s| i64::try_from(s).ok())
        .and_then(|s| Timestamp::from_second(s).ok())
        .unwrap_or(good.recorded_at);
    Ok(BackupSource {
        tier,
        storage,
        archive: volid.clone(),
        taken_at,
        retired_key: verified.retired_key,
    })
}
