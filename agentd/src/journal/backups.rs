//! How each backup ended, and the newest one per (guest, storage): the source of the
//! "last backup" the agent reports to the hub. An outcome is written inside the
//! backup's operation (before or together with its end), so it survives restarts.

use jiff::Timestamp;
use rusqlite::{Transaction, params};
use tokio::sync::watch;

use super::records::{OpId, OpStatus};
use super::store::{finish_in, from_ms, opt_u32, parse_op_id, query_err, require_running, to_ms};
use super::{JournalError, JournalHandle, Store};

/// How one backup ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupOutcome {
    /// The Proxmox storage the archive went (or was to go) to.
    pub storage: String,
    /// Whether the archive was written.
    pub ok: bool,
    /// The archive's volume id, if known.
    pub archive: Option<String>,
    /// The archive's size in bytes, if known.
    pub size_bytes: Option<u64>,
}

/// The newest finished backup of one guest to one storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastBackup {
    /// The operation that took it.
    pub op_id: OpId,
    /// The hub's guest id.
    pub guest_id: String,
    /// The guest's vmid, if the operation named one.
    pub vmid: Option<u32>,
    /// The Proxmox storage.
    pub storage: String,
    /// When it finished.
    pub finished_at: Timestamp,
    /// Whether it succeeded.
    pub ok: bool,
    /// The archive's volume id, if known.
    pub archive: Option<String>,
    /// The archive's size in bytes, if known.
    pub size_bytes: Option<u64>,
}

impl Store {
    /// Records how the backup of running operation `op_id` ended (the operation names
    /// the guest). A second outcome for the same operation replaces the first.
    pub fn record_backup(
        &mut self,
        op_id: OpId,
        outcome: &BackupOutcome,
    ) -> Result<(), JournalError> {
        let now = to_ms(self.now());
        self.write("record backup outcome", |tx| {
            record_in(tx, op_id, outcome, now)
        })
    }

    /// Records the backup's outcome and ends its operation (`done` when it succeeded,
    /// `failed` with `error` otherwise) in one transaction.
    pub fn finish_backup(
        &mut self,
        op_id: OpId,
        outcome: &BackupOutcome,
        error: Option<&str>,
    ) -> Result<(), JournalError> {
        let now = to_ms(self.now());
        let status = if outcome.ok {
            OpStatus::Done
        } else {
            OpStatus::Failed
        };
        self.write("finish backup", |tx| {
            record_in(tx, op_id, outcome, now)?;
            finish_in(tx, op_id, status, error, now)
        })
    }

    /// The newest finished backup per (guest, storage), ordered by guest then storage.
    pub fn last_backups(&self) -> Result<Vec<LastBackup>, JournalError> {
        const WHAT: &str = "read last backups";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT op_id, guest_id, vmid, storage, ok, archive, size_bytes, finished_ms
                 FROM (SELECT *, row_number() OVER (
                           PARTITION BY guest_id, storage
                           ORDER BY finished_ms DESC, rowid DESC) AS rank
                       FROM backup_outcomes)
                 WHERE rank = 1
                 ORDER BY guest_id, storage",
            )
            .map_err(query_err(WHAT))?;
        type Row = (
            String,
            String,
            Option<i64>,
            String,
            i64,
            Option<String>,
            Option<i64>,
            i64,
        );
        let rows = stmt
            .query_map([], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                    row.get(7)?,
                ))
            })
            .map_err(query_err(WHAT))?
            .collect::<Result<Vec<Row>, _>>()
            .map_err(query_err(WHAT))?;
        rows.into_iter()
            .map(
                |(op_id, guest_id, vmid, storage, ok, archive, size, finished_ms)| {
                    let size_bytes = size
                        .map(|s| {
                            u64::try_from(s).map_err(|_| JournalError::Corrupt {
                                table: "backup_outcomes",
                                column: "size_bytes",
                                value: s.to_string(),
                            })
                        })
                        .transpose()?;
                    Ok(LastBackup {
                        op_id: parse_op_id(op_id, "backup_outcomes")?,
                        guest_id,
                        vmid: opt_u32(vmid, "backup_outcomes", "vmid")?,
                        storage,
                        finished_at: from_ms(finished_ms, "backup_outcomes", "finished_ms")?,
                        ok: ok != 0,
                        archive,
                        size_bytes,
                    })
                },
            )
            .collect()
    }
}

impl JournalHandle {
    /// Changes whenever a backup outcome is recorded through this handle (a finished
    /// backup is an action: the hub loop reports it at once).
    pub fn backups_changed(&self) -> watch::Receiver<u64> {
        self.backups.subscribe()
    }

    /// See [`Store::record_backup`].
    pub async fn record_backup(
        &self,
        op_id: OpId,
        outcome: BackupOutcome,
    ) -> Result<(), JournalError> {
        self.call(move |s| s.record_backup(op_id, &outcome)).await?;
        self.backups.send_modify(|n| *n = n.wrapping_add(1));
        Ok(())
    }

    /// See [`Store::finish_backup`].
    pub async fn finish_backup(
        &self,
        op_id: OpId,
        outcome: BackupOutcome,
        error: Option<String>,
    ) -> Result<(), JournalError> {
        self.call(move |s| s.finish_backup(op_id, &outcome, error.as_deref()))
            .await?;
        self.backups.send_modify(|n| *n = n.wrapping_add(1));
        Ok(())
    }

    /// See [`Store::last_backups`].
    pub async fn last_backups(&self) -> Result<Vec<LastBackup>, JournalError> {
        self.call(|s| s.last_backups()).await
    }
}

fn record_in(
    tx: &Transaction<'_>,
    op_id: OpId,
    outcome: &BackupOutcome,
    now_ms: i64,
) -> Result<(), JournalError> {
    require_running(tx, op_id)?;
    let size = outcome
        .size_bytes
        .map(|s| {
            i64::try_from(s).map_err(|_| JournalError::SizeTooLarge {
                what: "backup size",
                value: s,
            })
        })
        .transpose()?;
    let inserted = tx
        .execute(
            "INSERT OR REPLACE INTO backup_outcomes
                 (op_id, guest_id, vmid, storage, ok, archive, size_bytes, finished_ms)
             SELECT op_id, guest_id, vmid, ?2, ?3, ?4, ?5, ?6
             FROM operations WHERE op_id = ?1 AND guest_id IS NOT NULL",
            params![
                op_id.to_string(),
                outcome.storage,
                i64::from(outcome.ok),
                outcome.archive,
                size,
                now_ms
            ],
        )
        .map_err(query_err("record backup outcome"))?;
    if inserted == 0 {
        return Err(JournalError::BackupWithoutGuest { op_id });
    }
    Ok(())
}
