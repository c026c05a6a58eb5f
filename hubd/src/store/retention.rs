//! How long the hub keeps what only grows: the audit trail and the archive of replaced boxes'
//! trails, events, the alert history, finished jobs, idempotency keys, spent enrollment
//! tokens and the hosts' history. One prune serves both stores; they differ only in how a
//! statement is run (`PruneTx`).
//!
//! Only what is finished goes: queued and acknowledged jobs, open alerts (`watch_alerts`, the
//! hosts' overdue state), unused enrollment tokens that have not expired, a host's current
//! desired state, report and escrow are never pruned. Rows go oldest first, at most
//! [`PRUNE_BATCH`] per statement, in slices of a few milliseconds each its own transaction, so
//! the SQLite writer (and the PostgreSQL rows a poll locks) is never held long.

use std::time::Duration;

use rusqlite::ToSql;

use super::StoreResult;

/// Most rows one prune statement deletes.
pub const PRUNE_BATCH: i64 = 1_000;

/// Longest one prune step runs ([`super::Store::prune`](crate::store::AuditStore::prune)): the sweeper takes a pass in steps,
/// so a long one (the first after an upgrade may delete millions of rows) never holds up the
/// dead-man's switch for more than this.
pub const PRUNE_STEP: Duration = Duration::from_secs(2);

/// Hosts read at a time by the per-host caps.
const HOST_BATCH: i64 = 64;

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

/// How long each table is kept, and how many rows a host may keep where one host can fill a
/// table. Defaults are sized for 100,000 hosts (docs/retention.md has the arithmetic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionConfig {
    /// Days an audit entry is kept.
    pub audit_days: u32,
    /// Newest audit entries kept per host (by the host's own numbering).
    pub audit_per_host: u32,
    /// Days the audit trail of a replaced box is kept after its replacement.
    pub replaced_audit_days: u32,
    /// Days an event is kept.
    pub events_days: u32,
    /// Newest events kept per host.
    pub events_per_host: u32,
    /// Days a raised alert stays in the alert history.
    pub alerts_days: u32,
    /// Days a finished job (succeeded, failed, rejected) is kept after it finished.
    pub jobs_days: u32,
    /// Days an `Idempotency-Key` is remembered (a retry within them gets the first answer).
    pub idempotency_days: u32,
    /// Days a used enrollment token is kept after its use, or an unused one after it expired.
    pub enroll_tokens_days: u32,
    /// Days a host's history point is kept ([`super::history`]).
    pub history_days: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            audit_days: 365,
            audit_per_host: 500,
            replaced_audit_days: 365,
            events_days: 90,
            events_per_host: 500,
            alerts_days: 90,
            jobs_days: 90,
            idempotency_days: 7,
            enroll_tokens_days: 30,
            history_days: 14,
        }
    }
}

/// Rows one prune pass deleted, per table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// `audit`.
    pub audit: u64,
    /// `replaced_audit`.
    pub replaced_audit: u64,
    /// `events`.
    pub events: u64,
    /// `alerts`.
    pub alerts: u64,
    /// `jobs`.
    pub jobs: u64,
    /// `idempotency`.
    pub idempotency: u64,
    /// `enroll_tokens`.
    pub enroll_tokens: u64,
    /// `host_history`.
    pub history: u64,
}

impl Pruned {
    /// Adds another step's counts.
    pub fn absorb(&mut self, other: Pruned) {
        self.audit = self.audit.saturating_add(other.audit);
        self.replaced_audit = self.replaced_audit.saturating_add(other.replaced_audit);
        self.events = self.events.saturating_add(other.events);
        self.alerts = self.alerts.saturating_add(other.alerts);
        self.jobs = self.jobs.saturating_add(other.jobs);
        self.idempotency = self.idempotency.saturating_add(other.idempotency);
        self.enroll_tokens = self.enroll_tokens.saturating_add(other.enroll_tokens);
        self.history = self.history.saturating_add(other.history);
    }

    /// Rows deleted in all.
    pub fn total(&self) -> u64 {
        self.audit
            + self.replaced_audit
            + self.events
            + self.alerts
            + self.jobs
            + self.idempotency
            + self.enroll_tokens
            + self.history
    }

    fn add(&mut self, table: Table, rows: usize) {
        let rows = u64::try_from(rows).unwrap_or(u64::MAX);
        let count = match table {
            Table::Audit => &mut self.audit,
            Table::ReplacedAudit => &mut self.replaced_audit,
            Table::Events => &mut self.events,
            Table::Alerts => &mut self.alerts,
            Table::Jobs => &mut self.jobs,
            Table::Idempotency => &mut self.idempotency,
            Table::EnrollTokens => &mut self.enroll_tokens,
            Table::History => &mut self.history,
        };
        *count = count.saturating_add(rows);
    }
}

/// The pruned tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    Audit,
    ReplacedAudit,
    Events,
    Alerts,
    Jobs,
    Idempotency,
    EnrollTokens,
    History,
}

/// One age bound: a statement deleting up to `?2` rows older than the cutoff `?1`.
struct AgeBound {
    table: Table,
    days: fn(&RetentionConfig) -> u32,
    sql: &'static str,
}

/// The age bounds, in the order a pass applies them. Statements are written once with `?N`
/// placeholders; PostgreSQL gets them as `$N`.
const AGE_BOUNDS: &[AgeBound] = &[
    AgeBound {
        table: Table::Audit,
        days: |c| c.audit_days,
        sql: "DELETE FROM audit WHERE (host_id, seq) IN
              (SELECT host_id, seq FROM audit WHERE at_ms < ?1 ORDER BY at_ms LIMIT ?2)",
    },
    AgeBound {
        table: Table::ReplacedAudit,
        days: |c| c.replaced_audit_days,
        sql: "DELETE FROM replaced_audit WHERE (host_id, replaced_ms, seq) IN
              (SELECT host_id, replaced_ms, seq FROM replaced_audit WHERE replaced_ms < ?1
               ORDER BY replaced_ms LIMIT ?2)",
    },
    AgeBound {
        table: Table::Events,
        days: |c| c.events_days,
        sql: "DELETE FROM events WHERE seq IN
              (SELECT seq FROM events WHERE at_ms < ?1 ORDER BY at_ms LIMIT ?2)",
    },
    AgeBound {
        table: Table::Alerts,
        days: |c| c.alerts_days,
        sql: "DELETE FROM alerts WHERE id IN
              (SELECT id FROM alerts WHERE at_ms < ?1 ORDER BY at_ms LIMIT ?2)",
    },
    AgeBound {
        table: Table::Jobs,
        days: |c| c.jobs_days,
        sql: "DELETE FROM jobs WHERE seq IN
              (SELECT seq FROM jobs WHERE finished_ms IS NOT NULL AND finished_ms < ?1
               AND state IN ('succeeded', 'failed', 'rejected') ORDER BY finished_ms LIMIT ?2)",
    },
    AgeBound {
        table: Table::Idempotency,
        days: |c| c.idempotency_days,
        sql: "DELETE FROM idempotency WHERE (host_id, key) IN
              (SELECT host_id, key FROM idempotency WHERE created_ms < ?1
               ORDER BY created_ms LIMIT ?2)",
    },
    AgeBound {
        table: Table::EnrollTokens,
        days: |c| c.enroll_tokens_days,
        sql: "DELETE FROM enroll_tokens WHERE token_hash IN
              (SELECT token_hash FROM enroll_tokens WHERE used_ms IS NOT NULL AND used_ms < ?1
               ORDER BY used_ms LIMIT ?2)",
    },
    AgeBound {
        table: Table::EnrollTokens,
        days: |c| c.enroll_tokens_days,
        sql: "DELETE FROM enroll_tokens WHERE token_hash IN
              (SELECT token_hash FROM enroll_tokens WHERE used_ms IS NULL AND expires_ms < ?1
               ORDER BY expires_ms LIMIT ?2)",
    },
];

/// Hosts after `?1` in id order, at most `?2`, with the highest audit number the hub holds.
const HOSTS_SQL: &str =
    "SELECT host_id, audit_seq FROM hosts WHERE host_id > ?1 ORDER BY host_id LIMIT ?2";

/// A host's audit entries numbered `?2` or lower, at most `?3`.
const AUDIT_CAP_SQL: &str = "DELETE FROM audit WHERE (host_id, seq) IN
    (SELECT host_id, seq FROM audit WHERE host_id = ?1 AND seq <= ?2 ORDER BY seq LIMIT ?3)";

/// A host's events older than its newest `?2`, at most `?3`.
const EVENTS_CAP_SQL: &str = "DELETE FROM events WHERE seq IN
    (SELECT seq FROM events WHERE host_id = ?1 AND seq <=
        (SELECT seq FROM events WHERE host_id = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)
     ORDER BY seq LIMIT ?3)";

/// A host's history buckets older than `?2`, at most `?3`, by the table's key (the history has
/// no index by time: it would cost a third of its size).
const HISTORY_AGE_SQL: &str = "DELETE FROM host_history WHERE (host_id, bucket_ms) IN
    (SELECT host_id, bucket_ms FROM host_history WHERE host_id = ?1 AND bucket_ms < ?2
     ORDER BY bucket_ms LIMIT ?3)";

/// How a store runs the prune's statements inside its transaction.
pub(super) trait PruneTx {
    /// Runs a `DELETE` written with `?N` placeholders; returns the rows it deleted.
    fn delete(&self, sql: &'static str, params: &[&dyn ToSql]) -> StoreResult<usize>;
    /// [`HOSTS_SQL`]: (host id, highest stored audit number).
    fn hosts(
        &self,
        sql: &'static str,
        after: &str,
        limit: i64,
    ) -> StoreResult<Vec<(String, Option<i64>)>>;
}

/// Where a prune pass is: the next age bound, then the host the per-host caps go on after.
/// The default is a pass's start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneCursor {
    bound: usize,
    after_host: String,
}

/// What one prune step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneStep {
    /// Rows it deleted.
    pub pruned: Pruned,
    /// Where the pass goes on; `None` when it is done (or another replica prunes).
    pub next: Option<PruneCursor>,
}

/// Runs prune statements from `cursor` until `budget` has passed (at least one statement runs)
/// or nothing is left; returns whether the pass is done. `cursor` is left where the next slice
/// starts.
pub(super) fn prune_slice(
    tx: &dyn PruneTx,
    now_ms: i64,
    config: &RetentionConfig,
    cursor: &mut PruneCursor,
    budget: Duration,
    pruned: &mut Pruned,
) -> StoreResult<bool> {
    let started = std::time::Instant::now();
    while let Some(bound) = AGE_BOUNDS.get(cursor.bound) {
        let cutoff = now_ms.saturating_sub(i64::from((bound.days)(config)) * DAY_MS);
        let deleted = tx.delete(bound.sql, &[&cutoff, &PRUNE_BATCH])?;
        pruned.add(bound.table, deleted);
        if !batch_was_full(deleted) {
            cursor.bound += 1;
        }
        if started.elapsed() >= budget {
            return Ok(false);
        }
    }
    let audit_cap = i64::from(config.audit_per_host);
    let events_cap = i64::from(config.events_per_host);
    let history_cutoff = now_ms.saturating_sub(i64::from(config.history_days) * DAY_MS);
    loop {
        let hosts = tx.hosts(HOSTS_SQL, &cursor.after_host, HOST_BATCH)?;
        if hosts.is_empty() {
            return Ok(true);
        }
        for (host_id, audit_seq) in hosts {
            // A host's audit entries are numbered by the host: what lies `audit_cap` below the
            // highest one is past the cap.
            let audit_below = audit_seq.unwrap_or(0).saturating_sub(audit_cap);
            loop {
                let deleted = if audit_below > 0 {
                    tx.delete(AUDIT_CAP_SQL, &[&host_id, &audit_below, &PRUNE_BATCH])?
                } else {
                    0
                };
                pruned.add(Table::Audit, deleted);
                let events = tx.delete(EVENTS_CAP_SQL, &[&host_id, &events_cap, &PRUNE_BATCH])?;
                pruned.add(Table::Events, events);
                let history =
                    tx.delete(HISTORY_AGE_SQL, &[&host_id, &history_cutoff, &PRUNE_BATCH])?;
                pruned.add(Table::History, history);
                let more =
                    batch_was_full(deleted) || batch_was_full(events) || batch_was_full(history);
                if started.elapsed() >= budget {
                    // The next slice starts on this host again when it has more to go.
                    if !more {
                        cursor.after_host = host_id;
                    }
                    return Ok(false);
                }
                if !more {
                    break;
                }
            }
            cursor.after_host = host_id;
        }
    }
}

fn batch_was_full(deleted: usize) -> bool {
    i64::try_from(deleted).is_ok_and(|deleted| deleted >= PRUNE_BATCH)
}

/// A statement's `?N` placeholders as PostgreSQL's `$N` (the statements hold no other `?`).
pub(super) fn dollar_placeholders(sql: &str) -> String {
    sql.replace('?', "$")
}
