//! The reconciler's failure counts per guest: consecutive failed starts and failed DR
//! restores. They live here, not in memory, so a guest that keeps failing reaches `broken`
//! (or stops being retried) across agent restarts and however often the hub republishes
//! desired state. Each count is kept under the digest of the guest's desired spec it was
//! made under: a changed spec (the operator fixed something) starts the count again, a
//! republished identical one does not.

use std::collections::BTreeMap;

use rusqlite::params;

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{query_err, to_ms};

/// What a count counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureKind {
    /// Consecutive failed starts of a desired-running guest.
    Start,
    /// Consecutive failed DR restores of a lost guest.
    Recover,
}

impl FailureKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Recover => "recover",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "start" => Some(Self::Start),
            "recover" => Some(Self::Recover),
            _ => None,
        }
    }
}

/// One stored count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureCount {
    /// The digest of the guest's desired spec it was counted under.
    pub spec: String,
    /// Consecutive failures.
    pub count: u32,
}

/// Every stored count, by guest id (as written) and kind.
pub type FailureCounts = BTreeMap<(String, FailureKind), FailureCount>;

impl Store {
    /// Counts one more failure of `kind` for `guest_id` under spec digest `spec` (a count made
    /// under another spec starts again at one); gives the new count.
    pub fn count_failure(
        &mut self,
        guest_id: &str,
        kind: FailureKind,
        spec: &str,
    ) -> Result<u32, JournalError> {
        let now = to_ms(self.now());
        self.write("count guest failure", |tx| {
            tx.query_row(
                "INSERT INTO guest_failures (guest_id, kind, spec, count, updated_ms)
                 VALUES (?1, ?2, ?3, 1, ?4)
                 ON CONFLICT (guest_id, kind) DO UPDATE SET
                     count = CASE WHEN guest_failures.spec = excluded.spec
                                  THEN guest_failures.count + 1 ELSE 1 END,
                     spec = excluded.spec, updated_ms = excluded.updated_ms
                 RETURNING count",
                params![guest_id, kind.as_str(), spec, now],
                |row| row.get(0),
            )
            .map_err(query_err("count guest failure"))
        })
    }

    /// Forgets `guest_id`'s count of `kind` (it succeeded); gives whether there was one.
    pub fn clear_failures(
        &mut self,
        guest_id: &str,
        kind: FailureKind,
    ) -> Result<bool, JournalError> {
        self.write("clear guest failures", |tx| {
            tx.execute(
                "DELETE FROM guest_failures WHERE guest_id = ?1 AND kind = ?2",
                params![guest_id, kind.as_str()],
            )
            .map(|n| n > 0)
            .map_err(query_err("clear guest failures"))
        })
    }

    /// Every stored count.
    pub fn failure_counts(&self) -> Result<FailureCounts, JournalError> {
        const WHAT: &str = "read guest failures";
        let mut stmt = self
            .conn
            .prepare_cached("SELECT guest_id, kind, spec, count FROM guest_failures")
            .map_err(query_err(WHAT))?;
        let rows = stmt
            .query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, u32>(3)?,
                ))
            })
            .map_err(query_err(WHAT))?;
        let mut counts = FailureCounts::new();
        for row in rows {
            let (guest_id, kind, spec, count) = row.map_err(query_err(WHAT))?;
            let kind = FailureKind::parse(&kind).ok_or(JournalError::Corrupt {
                table: "guest_failures",
                column: "kind",
                value: kind,
            })?;
            counts.insert((guest_id, kind), FailureCount { spec, count });
        }
        Ok(counts)
    }
}

journal_calls! {
    /// See [`Store::count_failure`].
    fn count_failure(guest_id: String, kind: FailureKind, spec: String) -> u32
        = |s| s.count_failure(&guest_id, kind, &spec);
    /// See [`Store::clear_failures`].
    fn clear_failures(guest_id: String, kind: FailureKind) -> bool
        = |s| s.clear_failures(&guest_id, kind);
    /// See [`Store::failure_counts`].
    fn failure_counts() -> FailureCounts = |s| s.failure_counts();
}
