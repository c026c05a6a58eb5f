//! How many hosts the dead-man's switch watches (active, and polled at least once), kept in
//! `meta` with every write that changes it, so a sweep reads the host rows once instead of
//! counting them in a second pass.
//!
//! The writer's connection counts once when the store opens and keeps the count with three
//! triggers of its own (`TEMP`: they live with the connection, not in the schema, which the
//! PostgreSQL store mirrors table for table). Only that connection writes, so every write the
//! hub makes runs them: an enrollment, an approval or revocation, a host's first poll, a
//! removal, and whatever a restored database held is counted again when the hub opens it.
//! A poll moves `last_seen_ms` on every host row it writes but changes the count only at a
//! host's first poll; the update trigger's condition is all the others pay.

use rusqlite::Connection;

use crate::store::{StoreError, StoreResult};

/// The `meta` key holding the count (an integer).
pub(in crate::store) const MONITORED_KEY: &str = "monitored_hosts";

/// Counts the monitored hosts into `meta` and installs the triggers that keep the count on
/// `conn` (the writer's connection), in one transaction.
pub(super) fn install(conn: &mut Connection) -> StoreResult<()> {
    let err = |source| StoreError::Sqlite {
        op: "count monitored hosts",
        source,
    };
    let tx = conn.transaction().map_err(err)?;
    tx.execute_batch(&format!(
        "INSERT INTO meta (key, value)
             SELECT '{MONITORED_KEY}', COUNT(*) FROM hosts
             WHERE status = 'active' AND last_seen_ms IS NOT NULL
         ON CONFLICT (key) DO UPDATE SET value = excluded.value;
         CREATE TEMP TRIGGER IF NOT EXISTS hosts_monitored_insert AFTER INSERT ON main.hosts
             WHEN new.status = 'active' AND new.last_seen_ms IS NOT NULL
         BEGIN
             UPDATE meta SET value = value + 1 WHERE key = '{MONITORED_KEY}';
         END;
         CREATE TEMP TRIGGER IF NOT EXISTS hosts_monitored_delete AFTER DELETE ON main.hosts
             WHEN old.status = 'active' AND old.last_seen_ms IS NOT NULL
         BEGIN
             UPDATE meta SET value = value - 1 WHERE key = '{MONITORED_KEY}';
         END;
         CREATE TEMP TRIGGER IF NOT EXISTS hosts_monitored_update
             AFTER UPDATE OF status, last_seen_ms ON main.hosts
             WHEN (old.status = 'active' AND old.last_seen_ms IS NOT NULL)
                  IS NOT (new.status = 'active' AND new.last_seen_ms IS NOT NULL)
         BEGIN
             UPDATE meta
             SET value = value + CASE WHEN new.status = 'active' AND new.last_seen_ms IS NOT NULL
                                      THEN 1 ELSE -1 END
             WHERE key = '{MONITORED_KEY}';
         END;"
    ))
    .map_err(err)?;
    tx.commit().map_err(err)
}
