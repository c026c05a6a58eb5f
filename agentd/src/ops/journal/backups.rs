//! How each backup ended, and the newest one per (guest, storage): the source of the
//! "last backup" the agent reports to the hub. An outcome is written inside the
//! backup's operation (before or together with its end), so it survives restarts.

use jiff::Timestamp;
use rusqlite::{Transaction, params};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::operations::{finish_in, require_running};
use super::records::{OpId, OpStatus};
use super::store::Store;
use super::store::{from_ms, opt_u32, parse_op_id, query_err, to_ms};

/// What proves an archive, as the journal keeps it (JSON in `backup_outcomes.proof`); `crate::data::backup::proof`
/// makes and checks it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ArchiveProof {
    /// A file archive's bytes as the helper read them when the backup ended.
    File {
        /// SHA-256, lowercase hex.
        sha256: String,
        /// Size in bytes.
        size: u64,
    },
    /// A PBS archive encrypted with K, bound to its guest in its notes.
    Pbs {
        /// K's fingerprint as PVE lists it.
        fingerprint: String,
        /// The binding written into the notes.
        binding: String,
    },
}

/// How one backup ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackupOutcome {
    /// The Proxmox storage the archive went (or was to go) to.
    pub storage: String,
    /// Whether the archive was written.
    pub ok: bool,
    /// The archive's volume id, if known.
    pub archive: Option<String>,
    /// The archive's size in bytes, if known.
    pub size_bytes: Option<u64>,
    /// What the backup is reported under: the manifest target's `durable_id` (`None`: the
    /// storage id).
    pub target: Option<String>,
    /// The tier (0 = first) the run belonged to.
    pub tier: Option<u32>,
    /// Warnings vzdump counted.
    pub warnings: u32,
    /// Whether the archive is encrypted with the host's key.
    pub encrypted: bool,
    /// When the run started.
    pub started_at: Option<Timestamp>,
    /// What proves the archive later (`None`: the run failed before it was proven).
    pub proof: Option<ArchiveProof>,
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
    /// The manifest target it is reported under (`None`: the storage id).
    pub target: Option<String>,
    /// The tier the run belonged to.
    pub tier: Option<u32>,
    /// Warnings vzdump counted.
    pub warnings: u32,
    /// Whether the archive is encrypted.
    pub encrypted: bool,
    /// Why it failed.
    pub error: Option<String>,
    /// When it started.
    pub started_at: Option<Timestamp>,
    /// The newest successful backup of the guest to the same storage.
    pub last_ok_at: Option<Timestamp>,
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
            record_in(tx, op_id, outcome, None, now)
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
            record_in(tx, op_id, outcome, error, now)?;
            finish_in(tx, op_id, status, error, now)
        })
    }

    /// The newest finished backup per (guest, storage), ordered by guest then storage,
    /// each with the time of the newest successful one to the same storage.
    pub fn last_backups(&self) -> Result<Vec<LastBackup>, JournalError> {
        const WHAT: &str = "read last backups";
        const TABLE: &str = "backup_outcomes";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT op_id, guest_id, vmid, storage, ok, archive, size_bytes, finished_ms,
                        target, tier, warnings, encrypted, error, started_ms,
                        (SELECT max(g.finished_ms) FROM backup_outcomes g
                          WHERE g.guest_id = newest.guest_id AND g.storage = newest.storage
                            AND g.ok = 1)
                 FROM (SELECT *, row_number() OVER (
                           PARTITION BY guest_id, storage
                           ORDER BY finished_ms DESC, rowid DESC) AS rank
                       FROM backup_outcomes) AS newest
                 WHERE rank = 1
                 ORDER BY guest_id, storage",
            )
            .map_err(query_err(WHAT))?;
        let rows = stmt
            .query_map([], |row| {
                Ok(RawBackup {
                    op_id: row.get(0)?,
                    guest_id: row.get(1)?,
                    vmid: row.get(2)?,
                    storage: row.get(3)?,
                    ok: row.get(4)?,
                    archive: row.get(5)?,
                    size_bytes: row.get(6)?,
                    finished_ms: row.get(7)?,
                    target: row.get(8)?,
                    tier: row.get(9)?,
                    warnings: row.get(10)?,
                    encrypted: row.get(11)?,
                    error: row.get(12)?,
                    started_ms: row.get(13)?,
                    last_ok_ms: row.get(14)?,
                })
            })
            .map_err(query_err(WHAT))?
            .collect::<Result<Vec<RawBackup>, _>>()
            .map_err(query_err(WHAT))?;
        rows.into_iter()
            .map(|r| {
                let non_negative = |v: i64, column: &'static str| {
                    u64::try_from(v).map_err(|_| JournalError::Corrupt {
                        table: TABLE,
                        column,
                        value: v.to_string(),
                    })
                };
                let at = |ms: Option<i64>, column: &'static str| {
                    ms.map(|ms| from_ms(ms, TABLE, column)).transpose()
                };
                Ok(LastBackup {
                    op_id: parse_op_id(r.op_id, TABLE)?,
                    guest_id: r.guest_id,
                    vmid: opt_u32(r.vmid, TABLE, "vmid")?,
                    storage: r.storage,
                    finished_at: from_ms(r.finished_ms, TABLE, "finished_ms")?,
                    ok: r.ok != 0,
                    archive: r.archive,
                    size_bytes: r
                        .size_bytes
                        .map(|s| non_negative(s, "size_bytes"))
                        .transpose()?,
                    target: r.target,
                    tier: opt_u32(r.tier, TABLE, "tier")?,
                    warnings: u32::try_from(non_negative(r.warnings, "warnings")?)
                        .unwrap_or(u32::MAX),
                    encrypted: r.encrypted != 0,
                    error: r.error,
                    started_at: at(r.started_ms, "started_ms")?,
                    last_ok_at: at(r.last_ok_ms, "finished_ms")?,
                })
            })
            .collect()
    }
}

/// An archive a backup of this agent wrote, as the journal recorded it: what a signed
/// storage wipe may delete (`crate::ops::jobs::wipe`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedArchive {
    /// The archive's volume id.
    pub volid: String,
    /// The guest it is a backup of.
    pub guest_id: String,
    /// That guest's vmid when it was taken (the archive's owner in Proxmox).
    pub vmid: Option<u32>,
}

impl Store {
    /// The archives the journal recorded backups writing to Proxmox storage `storage`
    /// (whether or not the run ended well), each once, newest first, at most `limit`.
    pub fn archives_on(
        &self,
        storage: &str,
        limit: u32,
    ) -> Result<Vec<RecordedArchive>, JournalError> {
        const WHAT: &str = "read recorded archives";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT archive, guest_id, vmid FROM backup_outcomes
                 WHERE storage = ?1 AND archive IS NOT NULL
                 GROUP BY archive
                 ORDER BY max(finished_ms) DESC, archive DESC
                 LIMIT ?2",
            )
            .map_err(query_err(WHAT))?;
        let rows = stmt
            .query_map(params![storage, limit], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, Option<i64>>(2)?,
                ))
            })
            .map_err(query_err(WHAT))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(query_err(WHAT))?;
        rows.into_iter()
            .map(|(volid, guest_id, vmid)| {
                Ok(RecordedArchive {
                    volid,
                    guest_id,
                    vmid: opt_u32(vmid, "backup_outcomes", "vmid")?,
                })
            })
            .collect()
    }
}

/// One `backup_outcomes` row as SQLite gives it.
struct RawBackup {
    op_id: String,
    guest_id: String,
    vmid: Option<i64>,
    storage: String,
    ok: i64,
    archive: Option<String>,
    size_bytes: Option<i64>,
    finished_ms: i64,
    target: Option<String>,
    tier: Option<i64>,
    warnings: i64,
    encrypted: i64,
    error: Option<String>,
    started_ms: Option<i64>,
    last_ok_ms: Option<i64>,
}

fn record_in(
    tx: &Transaction<'_>,
    op_id: OpId,
    outcome: &BackupOutcome,
    error: Option<&str>,
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
    let proof = outcome
        .proof
        .as_ref()
        .map(|p| serde_json::to_string(p).unwrap_or_default());
    let inserted = tx
        .execute(
            "INSERT OR REPLACE INTO backup_outcomes
                 (op_id, guest_id, vmid, storage, ok, archive, size_bytes, finished_ms,
                  target, tier, warnings, encrypted, error, started_ms, proof)
             SELECT op_id, guest_id, vmid, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13
             FROM operations WHERE op_id = ?1 AND guest_id IS NOT NULL",
            params![
                op_id.to_string(),
                outcome.storage,
                i64::from(outcome.ok),
                outcome.archive,
                size,
                now_ms,
                outcome.target,
                outcome.tier,
                outcome.warnings,
                i64::from(outcome.encrypted),
                error,
                outcome.started_at.map(to_ms),
                proof,
            ],
        )
        .map_err(query_err("record backup outcome"))?;
    if inserted == 0 {
        return Err(JournalError::BackupWithoutGuest { op_id });
    }
    Ok(())
}

journal_calls! {
    /// See [`Store::last_backups`].
    fn last_backups() -> Vec<LastBackup> = |s| s.last_backups();
    /// See [`Store::archives_on`].
    fn archives_on(storage: String, limit: u32) -> Vec<RecordedArchive>
        = |s| s.archives_on(&storage, limit);
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
}
