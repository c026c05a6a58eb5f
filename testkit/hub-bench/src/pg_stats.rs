//! What the PostgreSQL server did in the timed phase, from its statistics views: how many
//! host-row updates were heap-only (no index entries, reclaimed by the page's pruning), the
//! WAL written per poll, the checkpoints and the autovacuum and autoanalyze runs of `hosts`.
//! Backends report their counts at most once a second, so a figure may lag the phase by that.

use anyhow::Context as _;

/// The server's counters at one moment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerStats {
    updates: i64,
    hot_updates: i64,
    wal_bytes: i64,
    checkpoints_timed: i64,
    checkpoints_requested: i64,
    buffers_checkpoint: i64,
    autovacuums: i64,
    autoanalyzes: i64,
    transactions: i64,
}

impl ServerStats {
    /// Reads the counters on a connection of its own.
    pub(crate) async fn read(url: &str) -> anyhow::Result<Self> {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .context("connecting to read the server's statistics")?;
        let driver = tokio::spawn(connection);
        let row = client
            .query_one(
                "SELECT t.n_tup_upd, t.n_tup_hot_upd,
                        (pg_current_wal_lsn() - '0/0'::pg_lsn)::BIGINT,
                        b.checkpoints_timed, b.checkpoints_req, b.buffers_checkpoint,
                        t.autovacuum_count, t.autoanalyze_count,
                        d.xact_commit + d.xact_rollback
                 FROM pg_stat_user_tables t, pg_stat_bgwriter b, pg_stat_database d
                 WHERE t.relname = 'hosts' AND d.datname = current_database()",
                &[],
            )
            .await
            .context("reading the server's statistics")?;
        driver.abort();
        Ok(Self {
            updates: row.get(0),
            hot_updates: row.get(1),
            wal_bytes: row.get(2),
            checkpoints_timed: row.get(3),
            checkpoints_requested: row.get(4),
            buffers_checkpoint: row.get(5),
            autovacuums: row.get(6),
            autoanalyzes: row.get(7),
            transactions: row.get(8),
        })
    }

    /// The share of host-row updates between `before` and `self` that were heap-only, in %.
    pub(crate) fn heap_only_share(&self, before: &Self) -> f64 {
        let updates = self.updates - before.updates;
        100.0 * (self.hot_updates - before.hot_updates) as f64 / updates.max(1) as f64
    }

    /// What happened between `before` and `self`, as one line (`polls`: answered in between).
    pub(crate) fn since(&self, before: &Self, polls: usize) -> String {
        let updates = self.updates - before.updates;
        let hot = self.hot_updates - before.hot_updates;
        let wal = self.wal_bytes - before.wal_bytes;
        let transactions = self.transactions - before.transactions;
        let share = |part: i64, whole: i64| 100.0 * part as f64 / whole.max(1) as f64;
        format!(
            "postgres in the timed phase: {updates} host-row updates, {hot} heap-only ({:.1} %); \
             {transactions} transactions ({:.2} per poll); WAL {:.1} MB ({:.0} bytes per poll); \
             checkpoints {} timed + {} requested ({} buffers); hosts autovacuumed {}x, \
             analyzed {}x",
            share(hot, updates),
            transactions as f64 / polls.max(1) as f64,
            wal as f64 / 1e6,
            wal as f64 / polls.max(1) as f64,
            self.checkpoints_timed - before.checkpoints_timed,
            self.checkpoints_requested - before.checkpoints_requested,
            self.buffers_checkpoint - before.buffers_checkpoint,
            self.autovacuums - before.autovacuums,
            self.autoanalyzes - before.autoanalyzes,
        )
    }
}
