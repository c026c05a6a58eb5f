//! The newest archive and the newest failed attempt of each bulk volume (decision 0090): one
//! row per (guest, volume), so the report says what protects each volume across restarts and
//! the bulk scheduler knows when each is due again. Beside it, every archive of each volume
//! the helper still keeps (its newest `keep_last`, by name), which a signed `restore-bulk` may
//! name (decision 0108).

use std::collections::BTreeSet;

use jiff::Timestamp;
use rusqlite::params;

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{opt_from_ms, query_err, to_ms, tuple_rows};

const TABLE: &str = "bulk_archives";

/// One archive the helper wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkArchived {
    /// The guest.
    pub guest_id: String,
    /// The volume's name.
    pub volume: String,
    /// The target it went to (`durable_id`).
    pub target: String,
    /// Its file name.
    pub name: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
}

/// What the journal holds of one volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastBulk {
    /// The guest.
    pub guest_id: String,
    /// The volume.
    pub volume: String,
    /// Its newest archive, and when it was written.
    pub archive: Option<(BulkArchived, Timestamp)>,
    /// Why the newest attempt failed, and when, if it is newer than the newest archive.
    pub error: Option<(String, Timestamp)>,
}

impl LastBulk {
    /// When the volume was last tried, archived or not.
    pub fn last_attempt(&self) -> Option<Timestamp> {
        let archived = self.archive.as_ref().map(|(_, at)| *at);
        let failed = self.error.as_ref().map(|(_, at)| *at);
        archived.max(failed)
    }
}

impl Store {
    /// Records an archive written now: it is the volume's newest, and its failure (if any)
    /// is over. The volume's history keeps the newest `keep_last` by name, as the helper does
    /// on the target.
    pub fn record_bulk_archive(
        &mut self,
        a: &BulkArchived,
        keep_last: u32,
    ) -> Result<(), JournalError> {
        let now = to_ms(self.now());
        let size = i64::try_from(a.size_bytes).unwrap_or(i64::MAX);
        self.write("record bulk archive", |tx| {
            tx.execute(
                "INSERT INTO bulk_archive_history
                     (guest_id, volume, name, target, size_bytes, sha256, archived_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (guest_id, volume, name) DO UPDATE SET
                     target = excluded.target, size_bytes = excluded.size_bytes,
                     sha256 = excluded.sha256, archived_ms = excluded.archived_ms",
                params![a.guest_id, a.volume, a.name, a.target, size, a.sha256, now],
            )
            .map_err(query_err("record bulk archive"))?;
            tx.execute(
                "DELETE FROM bulk_archive_history WHERE guest_id = ?1 AND volume = ?2
                   AND name NOT IN (SELECT name FROM bulk_archive_history
                                    WHERE guest_id = ?1 AND volume = ?2
                                    ORDER BY name DESC LIMIT ?3)",
                params![a.guest_id, a.volume, keep_last.max(1)],
            )
            .map_err(query_err("record bulk archive"))?;
            tx.execute(
                "INSERT INTO bulk_archives
                     (guest_id, volume, target, name, size_bytes, sha256, archived_ms,
                      error, failed_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, NULL)
                 ON CONFLICT (guest_id, volume) DO UPDATE SET
                     target = excluded.target, name = excluded.name,
                     size_bytes = excluded.size_bytes, sha256 = excluded.sha256,
                     archived_ms = excluded.archived_ms, error = NULL, failed_ms = NULL",
                params![a.guest_id, a.volume, a.target, a.name, size, a.sha256, now],
            )
            .map_err(query_err("record bulk archive"))?;
            Ok(())
        })
    }

    /// Records a failed attempt now, keeping the volume's newest archive.
    pub fn record_bulk_failure(
        &mut self,
        guest_id: &str,
        volume: &str,
        error: &str,
    ) -> Result<(), JournalError> {
        let now = to_ms(self.now());
        self.write("record bulk failure", |tx| {
            tx.execute(
                "INSERT INTO bulk_archives (guest_id, volume, error, failed_ms)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (guest_id, volume) DO UPDATE SET
                     error = excluded.error, failed_ms = excluded.failed_ms",
                params![guest_id, volume, error, now],
            )
            .map_err(query_err("record bulk failure"))?;
            Ok(())
        })
    }

    /// Every volume's row, ordered by guest then volume.
    pub fn last_bulk_archives(&self) -> Result<Vec<LastBulk>, JournalError> {
        const WHAT: &str = "read bulk archives";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT guest_id, volume, target, name, size_bytes, sha256, archived_ms, error,
                        failed_ms
                 FROM bulk_archives ORDER BY guest_id, volume",
            )
            .map_err(query_err(WHAT))?;
        type Row = (
            String,
            String,
            Option<String>,
            Option<String>,
            Option<i64>,
            Option<String>,
            Option<i64>,
            Option<String>,
            Option<i64>,
        );
        let rows: Vec<Row> = tuple_rows(&mut stmt, [], WHAT)?;
        rows.into_iter()
            .map(
                |(guest_id, volume, target, name, size, sha256, archived, error, failed)| {
                    let archived = opt_from_ms(archived, TABLE, "archived_ms")?;
                    let archive = match (target, name, sha256, archived) {
                        (Some(target), Some(name), Some(sha256), Some(at)) => Some((
                            BulkArchived {
                                guest_id: guest_id.clone(),
                                volume: volume.clone(),
                                target,
                                name,
                                size_bytes: size.and_then(|s| u64::try_from(s).ok()).unwrap_or(0),
                                sha256,
                            },
                            at,
                        )),
                        _ => None,
                    };
                    let failed = opt_from_ms(failed, TABLE, "failed_ms")?;
                    Ok(LastBulk {
                        guest_id,
                        volume,
                        archive,
                        error: error.zip(failed),
                    })
                },
            )
            .collect()
    }

    /// The archive `name` of `guest_id`'s `volume`, if the helper still keeps it.
    pub fn bulk_archive_named(
        &self,
        guest_id: &str,
        volume: &str,
        name: &str,
    ) -> Result<Option<BulkArchived>, JournalError> {
        const WHAT: &str = "read a bulk archive";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT target, size_bytes, sha256 FROM bulk_archive_history
                 WHERE guest_id = ?1 AND volume = ?2 AND name = ?3",
            )
            .map_err(query_err(WHAT))?;
        let rows: Vec<(String, i64, String)> =
            tuple_rows(&mut stmt, params![guest_id, volume, name], WHAT)?;
        Ok(rows
            .into_iter()
            .next()
            .map(|(target, size, sha256)| BulkArchived {
                guest_id: guest_id.to_owned(),
                volume: volume.to_owned(),
                target,
                name: name.to_owned(),
                size_bytes: u64::try_from(size).unwrap_or(0),
                sha256,
            }))
    }

    /// Removes the rows of every (guest, volume) not in `keep` (a volume gone from desired
    /// state or from the signed plan): the table stays bounded. Gives how many went.
    pub fn prune_bulk_archives(
        &mut self,
        keep: &BTreeSet<(String, String)>,
    ) -> Result<usize, JournalError> {
        const WHAT: &str = "prune bulk archives";
        self.write(WHAT, |tx| {
            let mut stmt = tx
                .prepare_cached("SELECT guest_id, volume FROM bulk_archives")
                .map_err(query_err(WHAT))?;
            let rows: Vec<(String, String)> = tuple_rows(&mut stmt, [], WHAT)?;
            let mut gone = 0;
            for row in rows {
                if keep.contains(&row) {
                    continue;
                }
                gone += tx
                    .execute(
                        "DELETE FROM bulk_archives WHERE guest_id = ?1 AND volume = ?2",
                        params![row.0, row.1],
                    )
                    .map_err(query_err(WHAT))?;
                tx.execute(
                    "DELETE FROM bulk_archive_history WHERE guest_id = ?1 AND volume = ?2",
                    params![row.0, row.1],
                )
                .map_err(query_err(WHAT))?;
            }
            Ok(gone)
        })
    }
}

journal_calls! {
    /// See [`Store::record_bulk_archive`].
    fn record_bulk_archive(a: BulkArchived, keep_last: u32) -> ()
        = |s| s.record_bulk_archive(&a, keep_last);
    /// See [`Store::bulk_archive_named`].
    fn bulk_archive_named(guest_id: String, volume: String, name: String) -> Option<BulkArchived>
        = |s| s.bulk_archive_named(&guest_id, &volume, &name);
    /// See [`Store::record_bulk_failure`].
    fn record_bulk_failure(guest_id: String, volume: String, error: String) -> ()
        = |s| s.record_bulk_failure(&guest_id, &volume, &error);
    /// See [`Store::last_bulk_archives`].
    fn last_bulk_archives() -> Vec<LastBulk> = |s| s.last_bulk_archives();
    /// See [`Store::prune_bulk_archives`].
    fn prune_bulk_archives(keep: BTreeSet<(String, String)>) -> usize
        = |s| s.prune_bulk_archives(&keep);
}
