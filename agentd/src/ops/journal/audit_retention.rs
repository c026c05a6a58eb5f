//! The audit log's retention bound.
//!
//! Rows are kept until the hub has acknowledged them *and* they are beyond the bound: more
//! than `max_rows` rows behind the head, or older than `max_age`. Pruning deletes a prefix
//! of the chain and records its last row's seq and hash as the anchor the rest is verified
//! from, in the same transaction; triggers (schema version 4) refuse deleting past the
//! anchor and moving the anchor past the acknowledged row. A hub that never acknowledges
//! therefore keeps every row: nothing it has not seen is ever dropped.

use std::time::Duration;

use rusqlite::{OptionalExtension, params};

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::to_ms;

/// How much acknowledged audit history is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditRetention {
    /// Rows kept behind the head, acknowledged or not.
    pub max_rows: u64,
    /// Acknowledged rows older than this are pruned even under `max_rows`.
    pub max_age: Duration,
}

impl Default for AuditRetention {
    fn default() -> Self {
        Self {
            max_rows: 100_000,
            max_age: Duration::from_secs(180 * 24 * 3600),
        }
    }
}

/// What an acknowledgement changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pruned {
    /// The acknowledged row now recorded.
    pub acked_seq: u64,
    /// Rows deleted.
    pub rows: u64,
    /// The last pruned row (0: none ever).
    pub through_seq: u64,
}

fn query(operation: &'static str) -> impl Fn(rusqlite::Error) -> JournalError {
    move |source| JournalError::Query { operation, source }
}

fn to_sql(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

fn from_sql(seq: i64) -> u64 {
    u64::try_from(seq).unwrap_or(0)
}

impl Store {
    /// Records that the hub holds every row up to `acked_seq` (clamped to the head; an
    /// older acknowledgement than the recorded one changes nothing), then prunes the rows
    /// `retention` no longer needs among those acknowledged.
    pub fn ack_audit(
        &mut self,
        acked_seq: u64,
        retention: AuditRetention,
    ) -> Result<Pruned, JournalError> {
        let now = self.now();
        self.write("prune audit rows", |tx| {
            let q = query("prune audit rows");
            // Cached: this runs after every poll the hub acknowledges rows in.
            let head: i64 = tx
                .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM audit_log")
                .and_then(|mut s| s.query_row([], |r| r.get(0)))
                .map_err(&q)?;
            let (old_acked, pruned_seq): (i64, i64) = tx
                .prepare_cached("SELECT acked_seq, pruned_seq FROM audit_retention WHERE id = 1")
                .and_then(|mut s| s.query_row([], |r| Ok((r.get(0)?, r.get(1)?))))
                .map_err(&q)?;
            let head = from_sql(head).max(from_sql(pruned_seq));
            let acked = acked_seq.min(head).max(from_sql(old_acked));
            // Beyond the bound: behind the head by more than max_rows, or older than max_age.
            let by_count = head.saturating_sub(retention.max_rows);
            let cutoff_ms = to_ms(now)
                .saturating_sub(i64::try_from(retention.max_age.as_millis()).unwrap_or(i64::MAX));
            let by_age: Option<i64> = tx
                .prepare_cached("SELECT MAX(seq) FROM audit_log WHERE at_ms < ?1")
                .and_then(|mut s| s.query_row(params![cutoff_ms], |r| r.get(0)))
                .map_err(&q)?;
            let beyond = by_count.max(by_age.map_or(0, from_sql));
            let through = beyond.min(acked);
            let mut pruned = Pruned {
                acked_seq: acked,
                rows: 0,
                through_seq: from_sql(pruned_seq),
            };
            if through > from_sql(pruned_seq) {
                let hash: Option<Vec<u8>> = tx
                    .query_row(
                        "SELECT hash FROM audit_log WHERE seq = ?1",
                        params![to_sql(through)],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(&q)?;
                let hash = hash.ok_or_else(|| JournalError::Corrupt {
                    table: "audit_log",
                    column: "seq",
                    value: format!("row {through} to prune through is missing"),
                })?;
                tx.execute(
                    "UPDATE audit_retention SET acked_seq = ?1, pruned_seq = ?2, pruned_hash = ?3
                     WHERE id = 1",
                    params![to_sql(acked), to_sql(through), hash],
                )
                .map_err(&q)?;
                let rows = tx
                    .execute(
                        "DELETE FROM audit_log WHERE seq <= ?1",
                        params![to_sql(through)],
                    )
                    .map_err(&q)?;
                pruned.rows = u64::try_from(rows).unwrap_or(0);
                pruned.through_seq = through;
            } else if acked > from_sql(old_acked) {
                tx.execute(
                    "UPDATE audit_retention SET acked_seq = ?1 WHERE id = 1",
                    params![to_sql(acked)],
                )
                .map_err(&q)?;
            }
            Ok(pruned)
        })
    }

    /// The row the hub last acknowledged (0: none).
    pub fn audit_acked(&self) -> Result<u64, JournalError> {
        let acked: i64 = self
            .conn
            .query_row(
                "SELECT acked_seq FROM audit_retention WHERE id = 1",
                [],
                |r| r.get(0),
            )
            .map_err(query("read audit acknowledgement"))?;
        Ok(from_sql(acked))
    }
}

journal_calls! {
    /// See [`Store::ack_audit`].
    fn ack_audit(acked_seq: u64, retention: AuditRetention) -> Pruned
        = |s| s.ack_audit(acked_seq, retention);
    /// See [`Store::audit_acked`].
    fn audit_acked() -> u64 = |s| s.audit_acked();
}

impl JournalHandle {
    /// Records the hub's acknowledgement of the audit tail (`audit_acked_seq` of a poll
    /// answer) and prunes what the default [`AuditRetention`] no longer needs. Cheap when
    /// nothing moved; a failure is logged and leaves every row in place.
    pub async fn record_audit_ack(&self, acked_seq: u64) {
        match self.ack_audit(acked_seq, AuditRetention::default()).await {
            Ok(pruned) if pruned.rows > 0 => tracing::info!(
                acked_seq = pruned.acked_seq,
                through_seq = pruned.through_seq,
                rows = pruned.rows,
                "acknowledged audit rows beyond the retention bound pruned"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(
                acked_seq,
                error = %bosun_errchain::error_chain(&e),
                "could not record the hub's audit acknowledgement; nothing pruned"
            ),
        }
    }
}
