//! Where a guest's backup is restored from: the newest archive the agent's own backups
//! wrote for the guest to a tier that still holds it. Only archives the journal records
//! as this guest's successful backups qualify, so neither the hub nor a volid a storage
//! lists can make the agent restore another customer's data; and the archive must still
//! be listed by its storage (pruned, or on a storage that is gone, it does not count).

use bosun_proto::error_chain;
use jiff::Timestamp;

use crate::backup::tiers::{Tier, TierPlan};
use crate::journal::JournalHandle;
use crate::pve::{ContentFilter, ContentType, Pve, StorageId, VolumeId};

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
}

/// The newest archive of `guest_id` still on `tier`'s storage; `Err` says why there is
/// none (nothing backed up there, all pruned, or the storage cannot be read).
pub async fn newest_on_tier<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    guest_id: &str,
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
    for (archive, recorded_at) in recorded {
        let Some(item) = listed.iter().find(|i| i.volid == archive) else {
            continue;
        };
        let Ok(volid) = VolumeId::new(archive.clone()) else {
            continue;
        };
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
        });
    }
    Err(format!(
        "none of the guest's backups is still on {}",
        tier.storage
    ))
}

/// The newest archive of `guest_id` on the fastest tier that still holds one (tier 0
/// first, then each later tier); `Err` names why each tier had none.
pub async fn fastest_surviving<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    guest_id: &str,
    plan: &TierPlan,
) -> Result<BackupSource, String> {
    let mut why = Vec::new();
    for tier in &plan.tiers {
        match newest_on_tier(pve, journal, guest_id, tier).await {
            Ok(source) => return Ok(source),
            Err(reason) => why.push(format!("tier {}: {reason}", tier.index)),
        }
    }
    if why.is_empty() {
        return Err("no backup tier is planned".to_owned());
    }
    Err(why.join("; "))
}
