//! What the golden storage holds of this host's builds and what the build task last did: the
//! report's golden base (decision 0083) and the pruning of old archives
//! ([`crate::guests::golden_build::prune`]). A removed archive keeps its row, marked removed,
//! as the provenance of the guests built from it; it is never listed or provisioned from again.

use jiff::Timestamp;
use rusqlite::{OptionalExtension, params};

use super::audit::{self, AuditEvent};
use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{from_ms, query_err, to_ms};

/// The audit action of an old archive removed from the golden storage.
pub const GOLDEN_PRUNED_ACTION: &str = "golden.pruned";

/// The audit action of an old archive the agent could not remove (retried next pass).
pub const GOLDEN_PRUNE_FAILED_ACTION: &str = "golden.prune_failed";

/// Most archives [`Store::golden_archives`] lists (pruning keeps two; more means removals
/// keep failing, and the oldest wait for the next pass).
pub const MAX_KEPT_LISTED: u32 = 64;

/// Longest error text kept for a failed removal (characters).
const MAX_ERROR_CHARS: usize = 400;

/// A build whose archive is still in the golden storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptArchive {
    /// The archive's volid.
    pub volid: String,
    /// SHA-256 of its bytes.
    pub sha256: String,
    /// The recipe version.
    pub version: String,
    /// The controller digest baked in.
    pub controller_digest: String,
    /// When it was built.
    pub built_at: Timestamp,
    /// When it passed its verification.
    pub verified_at: Option<Timestamp>,
    /// How long the verification took (ms).
    pub verify_ms: Option<u64>,
    /// Failed removals so far.
    pub prune_attempts: u32,
    /// The last removal's error, with when it failed.
    pub prune_failed: Option<(Timestamp, String)>,
}

/// The build task's last outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoldenOutcomeRow {
    /// When.
    pub at: Timestamp,
    /// `verified`, `verify_failed`, `build_failed` or `refused`.
    pub outcome: String,
    /// The failure's fixed reason.
    pub reason: Option<String>,
    /// The version it was about.
    pub version: Option<String>,
}

impl Store {
    /// This host's builds still in the golden storage, newest first, at most
    /// [`MAX_KEPT_LISTED`].
    pub fn golden_archives(&self) -> Result<Vec<KeptArchive>, JournalError> {
        const WHAT: &str = "list kept golden archives";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT volid, sha256, recipe_version, controller_digest, built_ms, verified_ms,
                        verify_duration_ms, prune_attempts, prune_error, prune_failed_ms
                 FROM golden_archives
                 WHERE source = 'built' AND removed_ms IS NULL AND recipe_version IS NOT NULL
                   AND controller_digest IS NOT NULL
                 ORDER BY built_ms DESC, rowid DESC LIMIT ?1",
            )
            .map_err(query_err(WHAT))?;
        let rows = stmt
            .query_map(params![MAX_KEPT_LISTED], |r| {
                Ok((
                    (
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                    ),
                    (
                        r.get::<_, i64>(4)?,
                        r.get::<_, Option<i64>>(5)?,
                        r.get::<_, Option<i64>>(6)?,
                    ),
                    (
                        r.get::<_, i64>(7)?,
                        r.get::<_, Option<String>>(8)?,
                        r.get::<_, Option<i64>>(9)?,
                    ),
                ))
            })
            .map_err(query_err(WHAT))?;
        let mut out = Vec::new();
        for row in rows {
            let ((volid, sha256, version, controller_digest), times, prune) =
                row.map_err(query_err(WHAT))?;
            let (built_ms, verified_ms, verify_ms) = times;
            let (attempts, error, failed_ms) = prune;
            let prune_failed = match (failed_ms, error) {
                (Some(ms), Some(error)) => {
                    Some((from_ms(ms, "golden_archives", "prune_failed_ms")?, error))
                }
                _ => None,
            };
            out.push(KeptArchive {
                volid,
                sha256,
                version,
                controller_digest,
                built_at: from_ms(built_ms, "golden_archives", "built_ms")?,
                verified_at: verified_ms
                    .map(|ms| from_ms(ms, "golden_archives", "verified_ms"))
                    .transpose()?,
                verify_ms: verify_ms.and_then(|ms| u64::try_from(ms).ok()),
                prune_attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                prune_failed,
            });
        }
        Ok(out)
    }

    /// Whether an unfinished operation may be restoring from `volid`: a provisioning or DR
    /// restore is running (it may have picked its archive and not yet journaled the restore),
    /// or a running operation's step names the archive.
    pub fn golden_archive_busy(&self, volid: &str) -> Result<bool, JournalError> {
        self.conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM operations o WHERE o.status = 'running'
                    AND (o.kind IN ('provision', 'provision_vm', 'dr_restore', 'dr_restore_vm')
                         OR EXISTS (SELECT 1 FROM op_steps s WHERE s.op_id = o.op_id
                                    AND instr(s.detail, ?1) > 0)))",
                params![volid],
                |r| r.get::<_, bool>(0),
            )
            .map_err(query_err("check golden archive in use"))
    }

    /// Marks `volid` removed from the golden storage (audited `golden.pruned`).
    pub fn mark_golden_removed(&mut self, volid: &str) -> Result<(), JournalError> {
        let now = self.now();
        self.write("mark golden archive removed", |tx| {
            tx.execute(
                "UPDATE golden_archives SET removed_ms = ?2, prune_error = NULL,
                        prune_failed_ms = NULL
                 WHERE volid = ?1 AND source = 'built' AND removed_ms IS NULL",
                params![volid, to_ms(now)],
            )
            .map_err(query_err("mark golden archive removed"))?;
            let mut event = AuditEvent::new(GOLDEN_PRUNED_ACTION);
            event.detail = serde_json::json!({ "volid": volid });
            audit::append(tx, now, &event)?;
            Ok(())
        })
    }

    /// Records a failed removal of `volid` (audited `golden.prune_failed`; the archive stays
    /// listed and is tried again next pass).
    pub fn record_golden_prune_failure(
        &mut self,
        volid: &str,
        error: &str,
    ) -> Result<(), JournalError> {
        let error: String = error
            .chars()
            .map(|c| {
                if bosun_proto::inert::is_control(c) {
                    ' '
                } else {
                    c
                }
            })
            .take(MAX_ERROR_CHARS)
            .collect();
        let now = self.now();
        self.write("record golden prune failure", |tx| {
            tx.execute(
                "UPDATE golden_archives SET prune_attempts = prune_attempts + 1,
                        prune_error = ?2, prune_failed_ms = ?3
                 WHERE volid = ?1 AND source = 'built' AND removed_ms IS NULL",
                params![volid, error, to_ms(now)],
            )
            .map_err(query_err("record golden prune failure"))?;
            let mut event = AuditEvent::new(GOLDEN_PRUNE_FAILED_ACTION);
            event.detail = serde_json::json!({ "volid": volid, "error": error });
            audit::append(tx, now, &event)?;
            Ok(())
        })
    }

    /// Keeps the build task's last outcome (one row, replaced).
    pub fn record_golden_outcome(
        &mut self,
        outcome: &str,
        reason: Option<&str>,
        version: Option<&str>,
    ) -> Result<(), JournalError> {
        let now = self.now();
        self.write("record golden outcome", |tx| {
            tx.execute(
                "INSERT OR REPLACE INTO golden_outcome (id, outcome, reason, version, at_ms)
                 VALUES (1, ?1, ?2, ?3, ?4)",
                params![outcome, reason, version, to_ms(now)],
            )
            .map_err(query_err("record golden outcome"))?;
            Ok(())
        })
    }

    /// The build task's last outcome, if it ever built, failed or refused.
    pub fn golden_outcome(&self) -> Result<Option<GoldenOutcomeRow>, JournalError> {
        let row: Option<(String, Option<String>, Option<String>, i64)> = self
            .conn
            .prepare_cached(
                "SELECT outcome, reason, version, at_ms FROM golden_outcome WHERE id = 1",
            )
            .and_then(|mut stmt| {
                stmt.query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            })
            .optional()
            .map_err(query_err("read golden outcome"))?;
        row.map(|(outcome, reason, version, at_ms)| {
            Ok(GoldenOutcomeRow {
                at: from_ms(at_ms, "golden_outcome", "at_ms")?,
                outcome,
                reason,
                version,
            })
        })
        .transpose()
    }
}

journal_calls! {
    /// See [`Store::golden_archives`].
    fn golden_archives() -> Vec<KeptArchive> = |s| s.golden_archives();
    /// See [`Store::golden_archive_busy`].
    fn golden_archive_busy(volid: String) -> bool = |s| s.golden_archive_busy(&volid);
    /// See [`Store::mark_golden_removed`].
    fn mark_golden_removed(volid: String) -> () = |s| s.mark_golden_removed(&volid);
    /// See [`Store::record_golden_prune_failure`].
    fn record_golden_prune_failure(volid: String, error: String) -> ()
        = |s| s.record_golden_prune_failure(&volid, &error);
    /// See [`Store::record_golden_outcome`].
    fn record_golden_outcome(outcome: String, reason: Option<String>, version: Option<String>) -> ()
        = |s| s.record_golden_outcome(&outcome, reason.as_deref(), version.as_deref());
    /// See [`Store::golden_outcome`].
    fn golden_outcome() -> Option<GoldenOutcomeRow> = |s| s.golden_outcome();
}
