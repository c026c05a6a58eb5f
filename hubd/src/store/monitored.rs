//! How many hosts the dead-man's switch watches (active, and polled at least once), kept by
//! the writes that change it, so a sweep reads the host rows once instead of counting them in
//! a second pass (decision 0112).
//!
//! SQLite keeps the count in `meta` with triggers of its one writer's connection
//! (`sqlite/monitored.rs`); there the functions here do nothing. On PostgreSQL several replicas
//! write at once, and one counter row would make every host's first poll wait for the others'
//! commits, so each write that changes the count appends its step (`+1`, `-1`) to
//! `monitored_hosts`, and the sweep folds the steps into one row as it reads their sum. No
//! trigger runs: the poll's statement, which moves `last_seen_ms` on every host row, pays
//! nothing; only a host's first poll and a status change append a step, with the transaction's
//! next statement (no round trip of its own).
//!
//! The count changes only where a host enters or leaves the active, polled set: its first poll
//! (a poll is recorded only for an active host) and an approval or revocation of a host that
//! had polled. A host is removed or replaced only once revoked, and enrolled never polled, so
//! those writes leave it as it is.

use super::StoreResult;
use super::tx::{Dialect, Tx};

/// The sweep's read of the count on PostgreSQL: the steps committed so far, folded into one
/// row in the sweep's transaction (steps of transactions still open stay, and are folded
/// next time), their sum returned.
pub(super) const FOLD_SQL: &str = "
    WITH steps AS (DELETE FROM monitored_hosts RETURNING n)
    INSERT INTO monitored_hosts (n) SELECT COALESCE(SUM(n), 0) FROM steps RETURNING n";

/// A host's first poll: one more host monitored.
pub(super) fn first_poll(tx: Tx<'_, '_>) -> StoreResult<()> {
    if tx.dialect() == Dialect::Sqlite {
        return Ok(());
    }
    tx.execute_later(
        "count monitored hosts",
        "INSERT INTO monitored_hosts (n) VALUES (1)",
        &[],
    )
}

/// Before host `id`'s status becomes active (`to_active`) or not: its step, if it had polled
/// and the change moves it into or out of the monitored set. Runs before the status's write,
/// in the transaction that holds the host's row.
pub(super) fn before_status_change(tx: Tx<'_, '_>, id: &str, to_active: bool) -> StoreResult<()> {
    if tx.dialect() == Dialect::Sqlite {
        return Ok(());
    }
    tx.execute_later(
        "count monitored hosts",
        "INSERT INTO monitored_hosts (n)
             SELECT CASE WHEN CAST(?2 AS BIGINT) = 1 THEN 1 ELSE -1 END FROM hosts
             WHERE host_id = ?1 AND last_seen_ms IS NOT NULL
               AND (status = 'active') <> (CAST(?2 AS BIGINT) = 1)",
        rusqlite::params![id, i64::from(to_active)],
    )
}
