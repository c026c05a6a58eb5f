//! A restored guest's last backup is the archive it was restored from, until a new backup of
//! it lands (issue 45 item 2).
//!
//! After a host loss the new box's journal has no backup of any guest: without this, the
//! report would say the guests it has just brought back from PBS were never backed up. The
//! archive a DR or host-loss restore took (verified before it was restored) is recorded in the
//! journal's `guest.restored` audit row; the report lists it as the guest's last backup to
//! that archive's target, for as long as the journal holds no backup of the guest to the same
//! target. The time is when the archive was taken, not when it was restored: a restore is not
//! a backup, and the backup age an operator reads stays the restored data's age.

use bosun_errchain::error_chain;
use bosun_proto::desired::StorageType;
use bosun_proto::report::{BackupReport, TargetReport};
use jiff::Timestamp;
use uuid::Uuid;

use crate::ops::journal::{AuditEntry, JournalHandle};

/// Most `guest.restored` rows read per report (the newest; a host has at most a few hundred
/// guests).
const MAX_RESTORED: u32 = 512;

/// `backups` (from the journal's backup outcomes) with each restored guest's archive added
/// where the journal holds no backup of it to that target.
pub async fn with_restored(
    journal: &JournalHandle,
    backups: Vec<BackupReport>,
    targets: &[TargetReport],
) -> Vec<BackupReport> {
    match journal.restored_guests(MAX_RESTORED).await {
        Ok(restored) => merge(backups, &restored, targets),
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "restored guests unreadable; the report lists only journaled backups");
            backups
        }
    }
}

/// The pure part of [`with_restored`]: `restored` newest first, one entry per guest (its
/// newest restore), skipped where `backups` has the guest on the same target.
pub fn merge(
    mut backups: Vec<BackupReport>,
    restored: &[AuditEntry],
    targets: &[TargetReport],
) -> Vec<BackupReport> {
    let mut seen: Vec<Uuid> = Vec::new();
    for entry in restored {
        let Some(restore) = read(entry) else {
            continue;
        };
        if seen.contains(&restore.guest_id) {
            continue;
        }
        seen.push(restore.guest_id);
        // The archive's storage as the report names targets: the manifest's target that
        // Proxmox storage is registered as, else the storage id (as a backup's own row).
        let target = targets
            .iter()
            .find(|t| t.storage_id.as_deref() == Some(restore.storage.as_str()));
        let name = target.map_or_else(|| restore.storage.clone(), |t| t.durable_id.clone());
        if backups
            .iter()
            .any(|b| b.guest_id == restore.guest_id && b.target == name)
        {
            continue;
        }
        backups.push(BackupReport {
            guest_id: restore.guest_id,
            target: name,
            finished_at: restore.taken_at,
            ok: true,
            archive: Some(restore.archive),
            encrypted: target.is_some_and(|t| t.kind == Some(StorageType::Pbs)),
            last_ok_at: Some(restore.taken_at),
            ..BackupReport::default()
        });
    }
    backups
}

/// What a `guest.restored` row says about the archive.
struct Restore {
    guest_id: Uuid,
    storage: String,
    archive: String,
    taken_at: Timestamp,
}

fn read(entry: &AuditEntry) -> Option<Restore> {
    let detail = &entry.event.detail;
    let text = |key: &str| detail.get(key).and_then(|v| v.as_str());
    let guest_id = Uuid::parse_str(text("guest_id")?).ok()?;
    // Rows written before `taken_at` was recorded: the restore's time less its RPO.
    let taken_at = match text("taken_at").and_then(|t| t.parse::<Timestamp>().ok()) {
        Some(at) => at,
        None => {
            let rpo = detail.get("rpo_seconds")?.as_i64()?;
            entry
                .at
                .checked_sub(jiff::SignedDuration::from_secs(rpo))
                .ok()?
        }
    };
    Some(Restore {
        guest_id,
        storage: text("tier")?.to_owned(),
        archive: text("archive")?.to_owned(),
        taken_at,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ops::journal::AuditEvent;

    fn restored(seq: u64, guest: Uuid, archive: &str, taken_at: &str) -> AuditEntry {
        let mut event = AuditEvent::new("guest.restored");
        event.detail = serde_json::json!({
            "guest_id": guest.to_string(), "vmid": 101, "lost_vmid": 101,
            "archive": archive, "tier": "bosun-pbs-1", "taken_at": taken_at,
            "rpo_seconds": 3600, "rto_seconds": 60, "trigger": "auto",
        });
        AuditEntry {
            seq,
            at: "2026-11-26T06:00:00Z".parse().unwrap(),
            event,
            prev_hash: [0; 32],
            hash: [0; 32],
        }
    }

    fn pbs_target() -> TargetReport {
        serde_json::from_value(serde_json::json!({
            "durable_id": "backup@pbs@pbs.example:store1", "status": "mounted",
            "type": "pbs", "storage_id": "bosun-pbs-1",
        }))
        .unwrap()
    }

    #[test]
    fn a_restored_guests_archive_is_its_last_backup_until_a_new_one_lands() {
        let guest = Uuid::new_v4();
        let archive = "bosun-pbs-1:backup/ct/101/2026-11-26T05:00:00Z";
        let rows = [
            restored(9, guest, archive, "2026-11-26T05:00:00Z"),
            restored(
                3,
                guest,
                "bosun-pbs-1:backup/ct/101/older",
                "2026-11-20T05:00:00Z",
            ),
        ];
        let merged = merge(Vec::new(), &rows, &[pbs_target()]);
        assert_eq!(merged.len(), 1, "{merged:?}");
        let last = &merged[0];
        assert_eq!(last.guest_id, guest);
        assert_eq!(last.target, "backup@pbs@pbs.example:store1");
        assert_eq!(last.archive.as_deref(), Some(archive));
        assert_eq!(last.finished_at, "2026-11-26T05:00:00Z".parse().unwrap());
        assert!(last.ok && last.encrypted);

        // A backup to the same target, once journaled, is the last backup instead.
        let new = BackupReport {
            guest_id: guest,
            target: "backup@pbs@pbs.example:store1".into(),
            finished_at: "2026-11-26T07:00:00Z".parse().unwrap(),
            ok: true,
            ..BackupReport::default()
        };
        let merged = merge(vec![new.clone()], &rows, &[pbs_target()]);
        assert_eq!(merged, [new]);

        // An older row without `taken_at`: the restore's time less its RPO.
        let mut old = restored(1, Uuid::new_v4(), archive, "");
        old.event.detail.as_object_mut().unwrap().remove("taken_at");
        let merged = merge(Vec::new(), &[old], &[]);
        assert_eq!(
            merged[0].finished_at,
            "2026-11-26T05:00:00Z".parse().unwrap()
        );
        assert_eq!(merged[0].target, "bosun-pbs-1");
        assert!(!merged[0].encrypted);
    }
}
