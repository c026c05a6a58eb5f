//! How each restore test ended, per guest and the tier storage its archive came from, and
//! the guests found lost with when they were first found so. A test's result is written
//! together with the end of its operation, so it survives restarts; older results than the
//! newest [`KEEP_PER_TIER`] of a guest and storage are dropped as new ones arrive.

use jiff::Timestamp;
use rusqlite::{OptionalExtension, params};

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::operations::{finish_in, require_running};
use super::records::{OpId, OpStatus};
use super::store::Store;
use super::store::{from_ms, parse_op_id, query_err, to_ms, tuple_rows};

/// Results kept per (guest, storage).
pub const KEEP_PER_TIER: u32 = 16;

/// One of a guest's successful backups as the journal recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoodArchive {
    /// The archive's volume id.
    pub archive: String,
    /// When the backup ended.
    pub recorded_at: Timestamp,
    /// What proves it (`None`: recorded before archives were proven, or unreadable).
    pub proof: Option<super::backups::ArchiveProof>,
}

/// How a restore test ended (stored, and answered by the local API, by its snake-case name).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TestOutcome {
    /// Restored, started, stayed up, and the guest's own restore check passed.
    Passed,
    /// Did not restore, start or stay up, its restore check failed or could not run through
    /// the helper, or it ran over its timeout.
    Failed,
    /// The agent stopped in the middle; cleaned up at the next start.
    Interrupted,
    /// Booted, not checked: restored, started and stayed up, but the guest installs no restore
    /// check or no helper is configured to run it. Never a pass.
    NotChecked,
}

impl TestOutcome {
    /// Every outcome, in declaration order.
    const ALL: [Self; 4] = [
        Self::Passed,
        Self::Failed,
        Self::Interrupted,
        Self::NotChecked,
    ];

    fn as_str(self) -> &'static str {
        match self {
            TestOutcome::Passed => "passed",
            TestOutcome::Failed => "failed",
            TestOutcome::Interrupted => "interrupted",
            TestOutcome::NotChecked => "not_checked",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == text)
    }
}

/// One finished restore test, as its operation records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreTestResult {
    /// The guest whose backup was restored.
    pub guest_id: String,
    /// The storage of the tier the archive came from.
    pub storage: String,
    /// The archive, if one was chosen.
    pub archive: Option<String>,
    /// How it ended.
    pub outcome: TestOutcome,
    /// How long it took, in milliseconds.
    pub duration_ms: u64,
    /// What failed, or why the guest was not checked.
    pub detail: Option<String>,
}

/// The newest restore test of a guest's backups on one storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastRestoreTest {
    /// The operation that ran it.
    pub op_id: OpId,
    /// The result.
    pub result: RestoreTestResult,
    /// When it finished.
    pub finished_at: Timestamp,
    /// The newest passing test of the guest on the same storage.
    pub last_passed_at: Option<Timestamp>,
}

impl Store {
    /// Records how restore test `op_id` ended and ends its operation (`done` when it passed or
    /// was not checked, `failed` otherwise) in one transaction.
    pub fn finish_restore_test(
        &mut self,
        op_id: OpId,
        result: &RestoreTestResult,
    ) -> Result<(), JournalError> {
        let now = to_ms(self.now());
        let duration = i64::try_from(result.duration_ms).unwrap_or(i64::MAX);
        let status = match result.outcome {
            TestOutcome::Passed | TestOutcome::NotChecked => OpStatus::Done,
            TestOutcome::Failed | TestOutcome::Interrupted => OpStatus::Failed,
        };
        self.write("finish restore test", |tx| {
            require_running(tx, op_id)?;
            tx.execute(
                "INSERT OR REPLACE INTO restore_tests
                     (op_id, guest_id, storage, archive, outcome, duration_ms, detail, finished_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    op_id.to_string(),
                    result.guest_id,
                    result.storage,
                    result.archive,
                    result.outcome.as_str(),
                    duration,
                    result.detail,
                    now
                ],
            )
            .map_err(query_err("record restore test"))?;
            tx.execute(
                "DELETE FROM restore_tests WHERE guest_id = ?1 AND storage = ?2 AND op_id NOT IN
                     (SELECT op_id FROM restore_tests WHERE guest_id = ?1 AND storage = ?2
                      ORDER BY finished_ms DESC, rowid DESC LIMIT ?3)",
                params![result.guest_id, result.storage, KEEP_PER_TIER],
            )
            .map_err(query_err("prune restore tests"))?;
            finish_in(tx, op_id, status, result.detail.as_deref(), now)
        })
    }

    /// The newest restore test per (guest, storage), ordered by guest then storage.
    pub fn last_restore_tests(&self) -> Result<Vec<LastRestoreTest>, JournalError> {
        const WHAT: &str = "read last restore tests";
        const TABLE: &str = "restore_tests";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT op_id, guest_id, storage, archive, outcome, duration_ms, detail,
                        finished_ms,
                        (SELECT max(p.finished_ms) FROM restore_tests p
                          WHERE p.guest_id = newest.guest_id AND p.storage = newest.storage
                            AND p.outcome = 'passed')
                 FROM (SELECT *, row_number() OVER (
                           PARTITION BY guest_id, storage
                           ORDER BY finished_ms DESC, rowid DESC) AS rank
                       FROM restore_tests) AS newest
                 WHERE rank = 1
                 ORDER BY guest_id, storage",
            )
            .map_err(query_err(WHAT))?;
        type Row = (
            String,
            String,
            String,
            Option<String>,
            String,
            i64,
            Option<String>,
            i64,
            Option<i64>,
        );
        let rows: Vec<Row> = tuple_rows(&mut stmt, [], WHAT)?;
        rows.into_iter()
            .map(
                |(
                    op_id,
                    guest_id,
                    storage,
                    archive,
                    outcome,
                    duration,
                    detail,
                    finished,
                    passed,
                )| {
                    let outcome =
                        TestOutcome::parse(&outcome).ok_or_else(|| JournalError::Corrupt {
                            table: TABLE,
                            column: "outcome",
                            value: outcome.clone(),
                        })?;
                    Ok(LastRestoreTest {
                        op_id: parse_op_id(op_id, TABLE)?,
                        result: RestoreTestResult {
                            guest_id,
                            storage,
                            archive,
                            outcome,
                            duration_ms: u64::try_from(duration).unwrap_or(0),
                            detail,
                        },
                        finished_at: from_ms(finished, TABLE, "finished_ms")?,
                        last_passed_at: passed
                            .map(|ms| from_ms(ms, TABLE, "finished_ms"))
                            .transpose()?,
                    })
                },
            )
            .collect()
    }

    /// The archives this agent's own backups wrote for `guest_id` to `storage` that
    /// succeeded, newest first, at most `limit`, each with what proves it: the only archives
    /// a restore test or a DR restore of the guest takes (never a volid the hub or Proxmox
    /// names). A proof that does not parse reads as none (the archive is then refused).
    pub fn good_archives(
        &self,
        guest_id: &str,
        storage: &str,
        limit: u32,
    ) -> Result<Vec<GoodArchive>, JournalError> {
        const WHAT: &str = "read good archives";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT archive, finished_ms, proof FROM backup_outcomes
                 WHERE guest_id = ?1 AND storage = ?2 AND ok = 1 AND archive IS NOT NULL
                 ORDER BY finished_ms DESC, rowid DESC LIMIT ?3",
            )
            .map_err(query_err(WHAT))?;
        let rows = stmt
            .query_map(params![guest_id, storage, limit], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, Option<String>>(2)?,
                ))
            })
            .map_err(query_err(WHAT))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(query_err(WHAT))?;
        rows.into_iter()
            .map(|(archive, ms, proof)| {
                Ok(GoodArchive {
                    archive,
                    recorded_at: from_ms(ms, "backup_outcomes", "finished_ms")?,
                    proof: proof.and_then(|p| serde_json::from_str(&p).ok()),
                })
            })
            .collect()
    }

    /// Records `mac` as `guest_id`'s MAC address (its newest backup saw it).
    pub fn record_mac(&mut self, guest_id: &str, mac: &str) -> Result<(), JournalError> {
        let now = to_ms(self.now());
        self.conn
            .execute(
                "INSERT INTO guest_macs (guest_id, mac, recorded_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (guest_id) DO UPDATE SET mac = ?2, recorded_ms = ?3",
                params![guest_id, mac, now],
            )
            .map_err(query_err("record a guest's MAC"))?;
        Ok(())
    }

    /// The MAC address recorded for `guest_id`, if any.
    pub fn guest_mac(&self, guest_id: &str) -> Result<Option<String>, JournalError> {
        self.conn
            .query_row(
                "SELECT mac FROM guest_macs WHERE guest_id = ?1",
                params![guest_id],
                |row| row.get(0),
            )
            .optional()
            .map_err(query_err("read a guest's MAC"))
    }

    /// Notes that `guest_id` (last at `vmid`) is lost; gives when it was first found lost
    /// (an earlier note stands).
    pub fn note_lost(&mut self, guest_id: &str, vmid: u32) -> Result<Timestamp, JournalError> {
        let now = self.now();
        self.note_lost_since(guest_id, vmid, now)
    }

    /// [`Store::note_lost`] with the loss known to date from `since` (a host loss: when the
    /// replacement box enrolled), not from now.
    pub fn note_lost_since(
        &mut self,
        guest_id: &str,
        vmid: u32,
        since: Timestamp,
    ) -> Result<Timestamp, JournalError> {
        let now = to_ms(since);
        let detected = self.write("note lost guest", |tx| {
            tx.execute(
                "INSERT OR IGNORE INTO lost_guests (guest_id, vmid, detected_ms) VALUES (?1, ?2, ?3)",
                params![guest_id, vmid, now],
            )
            .map_err(query_err("note lost guest"))?;
            tx.query_row(
                "SELECT detected_ms FROM lost_guests WHERE guest_id = ?1",
                params![guest_id],
                |row| row.get::<_, i64>(0),
            )
            .map_err(query_err("note lost guest"))
        })?;
        from_ms(detected, "lost_guests", "detected_ms")
    }

    /// When `guest_id` was first found lost, if it is noted lost.
    pub fn lost_since(&self, guest_id: &str) -> Result<Option<Timestamp>, JournalError> {
        let ms: Option<i64> = self
            .conn
            .query_row(
                "SELECT detected_ms FROM lost_guests WHERE guest_id = ?1",
                params![guest_id],
                |row| row.get(0),
            )
            .optional()
            .map_err(query_err("read lost guest"))?;
        ms.map(|ms| from_ms(ms, "lost_guests", "detected_ms"))
            .transpose()
    }

    /// Every guest noted lost: (guest id, its last vmid, when first found lost).
    pub fn lost_guests(&self) -> Result<Vec<(String, u32, Timestamp)>, JournalError> {
        const WHAT: &str = "read lost guests";
        let mut stmt = self
            .conn
            .prepare_cached("SELECT guest_id, vmid, detected_ms FROM lost_guests ORDER BY guest_id")
            .map_err(query_err(WHAT))?;
        let rows = stmt
            .query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, u32>(1)?,
                    row.get::<_, i64>(2)?,
                ))
            })
            .map_err(query_err(WHAT))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(query_err(WHAT))?;
        rows.into_iter()
            .map(|(g, v, ms)| Ok((g, v, from_ms(ms, "lost_guests", "detected_ms")?)))
            .collect()
    }

    /// Forgets that `guest_id` was lost (it was restored).
    pub fn clear_lost(&mut self, guest_id: &str) -> Result<(), JournalError> {
        self.write("clear lost guest", |tx| {
            tx.execute(
                "DELETE FROM lost_guests WHERE guest_id = ?1",
                params![guest_id],
            )
            .map_err(query_err("clear lost guest"))?;
            Ok(())
        })
    }
}

journal_calls! {
    /// See [`Store::last_restore_tests`].
    fn last_restore_tests() -> Vec<LastRestoreTest> = |s| s.last_restore_tests();
    /// See [`Store::good_archives`].
    fn good_archives(guest_id: String, storage: String, limit: u32) -> Vec<GoodArchive>
        = |s| s.good_archives(&guest_id, &storage, limit);
    /// See [`Store::record_mac`].
    fn record_mac(guest_id: String, mac: String) -> () = |s| s.record_mac(&guest_id, &mac);
    /// See [`Store::guest_mac`].
    fn guest_mac(guest_id: String) -> Option<String> = |s| s.guest_mac(&guest_id);
    /// See [`Store::note_lost`].
    fn note_lost(guest_id: String, vmid: u32) -> Timestamp = |s| s.note_lost(&guest_id, vmid);
    /// See [`Store::note_lost_since`].
    fn note_lost_since(guest_id: String, vmid: u32, since: Timestamp) -> Timestamp
        = |s| s.note_lost_since(&guest_id, vmid, since);
    /// See [`Store::lost_since`].
    fn lost_since(guest_id: String) -> Option<Timestamp> = |s| s.lost_since(&guest_id);
    /// See [`Store::lost_guests`].
    fn lost_guests() -> Vec<(String, u32, Timestamp)> = |s| s.lost_guests();
    /// See [`Store::clear_lost`].
    fn clear_lost(guest_id: String) -> () = |s| s.clear_lost(&guest_id);
}

impl JournalHandle {
    /// See [`Store::finish_restore_test`]. Wakes whoever watches restore tests.
    pub async fn finish_restore_test(
        &self,
        op_id: OpId,
        result: RestoreTestResult,
    ) -> Result<(), JournalError> {
        self.call(move |s| s.finish_restore_test(op_id, &result))
            .await?;
        self.backups.send_modify(|n| *n = n.wrapping_add(1));
        Ok(())
    }
}

#[cfg(test)]
mod outcome_tests {
    use super::TestOutcome;

    #[test]
    fn stored_names_are_the_api_names_and_parse_back() {
        for outcome in TestOutcome::ALL {
            let json = serde_json::to_value(outcome).unwrap();
            assert_eq!(json, outcome.as_str(), "{outcome:?}");
            assert_eq!(TestOutcome::parse(outcome.as_str()), Some(outcome));
        }
        // Results stored before `not_checked` existed read as they were.
        assert_eq!(TestOutcome::parse("passed"), Some(TestOutcome::Passed));
        assert_eq!(TestOutcome::parse("booted"), None);
    }
}

#[cfg(test)]
mod migration_tests {
    use super::{RestoreTestResult, TestOutcome};
    use crate::clock::ManualClock;
    use crate::ops::journal::{NewOperation, Store};
    use crate::ops::op_kind::OpKind;

    fn result(outcome: TestOutcome) -> RestoreTestResult {
        RestoreTestResult {
            guest_id: "g-1".into(),
            storage: "local".into(),
            archive: Some("local:backup/vzdump-lxc-101-2026_03_01-02_00_00.tar.zst".into()),
            outcome,
            duration_ms: 41_000,
            detail: None,
        }
    }

    fn test_op(store: &mut Store) -> crate::ops::journal::OpId {
        store
            .begin_operation(&NewOperation {
                kind: OpKind::RestoreTest,
                guest_id: Some("g-1".into()),
                vmid: None,
                job_id: None,
                request_id: None,
            })
            .unwrap()
    }

    #[test]
    fn results_stored_before_not_checked_existed_stay_readable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        let clock = ManualClock::new("2026-03-01T02:00:00Z".parse().unwrap());
        let mut store = Store::open(&path, clock.shared()).unwrap();
        // Back to what a version-15 agent left behind: the old CHECK, one passed result.
        crate::ops::journal::schema::rewind(&store.conn, 15).unwrap();
        let old = test_op(&mut store);
        store
            .finish_restore_test(old, &result(TestOutcome::Passed))
            .unwrap();
        let refused = test_op(&mut store);
        assert!(
            store
                .finish_restore_test(refused, &result(TestOutcome::NotChecked))
                .is_err(),
            "the old table refuses the new outcome"
        );
        drop(store);

        clock.set("2026-03-08T02:00:00Z".parse().unwrap());
        let mut store = Store::open(&path, clock.shared()).unwrap();
        let before = store.last_restore_tests().unwrap();
        assert_eq!(before.len(), 1);
        assert_eq!(before[0].result, result(TestOutcome::Passed));
        let op = test_op(&mut store);
        let mut booted = result(TestOutcome::NotChecked);
        booted.detail = Some("booted, not checked".into());
        store.finish_restore_test(op, &booted).unwrap();
        let after = store.last_restore_tests().unwrap();
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].result, booted);
        // The last pass is still the old one: not checked is not a pass.
        assert_eq!(after[0].last_passed_at, Some(before[0].finished_at));
    }
}
