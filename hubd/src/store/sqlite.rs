//! The SQLite backend: one connection behind a mutex (WAL, `synchronous=FULL`, foreign keys),
//! used only from the blocking pool.

use std::path::{Path, PathBuf};

use bosun_proto::admin::{
    Alert, AlertKind, DesiredAccepted, Event, HostDetail, HostStatus, HostSummary, JobAccepted,
    JobRecord,
};
use bosun_proto::alert_triage::{AckAlert, CreateSilence, Silence};
use bosun_proto::desired_status::DesiredRevision;
use bosun_proto::job::JobResult;
use bosun_proto::oplog::OperationRecord;
use jiff::Timestamp;
use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension as _, Transaction, TransactionBehavior, params};
use uuid::Uuid;

use super::audit_trail::{self, AuditQuery};
use super::retention::{self, PruneCursor, PruneStep, PruneTx, Pruned, RetentionConfig};
use super::tx::Tx;
use super::{
    DesiredFacts, DesiredWrite, Enrolled, Enrollment, EventQuery, HostCounts, HostCredentials,
    NewEnrollToken, NewJob, OperationQuery, PollRecord, PollRecorded, PollView, Store, StoreError,
    StoreResult, WatchChange, hosts, schema, watch,
};
use crate::deadman::{DeadManConfig, PlannedAlert};
use crate::secret::SecretHash;

/// The database file name inside the data directory.
pub const DB_FILE: &str = "hub.sqlite";

/// Longest a backup sweep holds the connection at a time.
const SWEEP_SLICE: std::time::Duration = std::time::Duration::from_millis(5);

/// Longest a retention prune holds the connection at a time (at least one statement runs).
const PRUNE_SLICE: std::time::Duration = std::time::Duration::from_millis(10);

/// SQLite-backed [`Store`].
#[derive(Debug)]
pub struct SqliteStore {
    /// The writer's connection.
    conn: Mutex<Connection>,
    /// Read-only connections for [`Self::read`].
    readers: super::sqlite_readers::Readers,
    path: PathBuf,
    /// The artifact files beside the database.
    artifact_files: super::artifact_files::ArtifactFiles,
}

/// Maps a rusqlite error to [`StoreError::Sqlite`] for operation `op`.
pub(super) fn sql(op: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |source| StoreError::Sqlite { op, source }
}

/// Unix ms to a timestamp.
pub(super) fn ts(ms: i64) -> StoreResult<Timestamp> {
    Timestamp::from_millisecond(ms).map_err(|e| StoreError::Corrupt {
        what: "timestamp",
        reason: e.to_string(),
    })
}

/// Optional Unix ms to an optional timestamp.
pub(super) fn ts_opt(ms: Option<i64>) -> StoreResult<Option<Timestamp>> {
    ms.map(ts).transpose()
}

/// A stored UUID.
pub(super) fn uuid(text: &str) -> StoreResult<Uuid> {
    Uuid::parse_str(text).map_err(|e| StoreError::Corrupt {
        what: "uuid",
        reason: e.to_string(),
    })
}

/// A stored generation or sequence number (never negative).
pub(super) fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// A generation for storage.
pub(super) fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Parses a stored host status.
pub(super) fn host_status(text: &str) -> StoreResult<HostStatus> {
    match text {
        "pending_approval" => Ok(HostStatus::PendingApproval),
        "active" => Ok(HostStatus::Active),
        "revoked" => Ok(HostStatus::Revoked),
        other => Err(StoreError::Corrupt {
            what: "host status",
            reason: format!("unknown status `{other}`"),
        }),
    }
}

/// Parses a stored alert kind.
pub(super) fn alert_kind(text: &str) -> StoreResult<AlertKind> {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).map_err(|e| {
        StoreError::Corrupt {
            what: "alert kind",
            reason: e.to_string(),
        }
    })
}

/// Prepared statements each connection keeps. Every statement the store runs fits, so none
/// is compiled again while the hub runs (rusqlite keeps 16 by default, fewer than a poll and
/// the sweeps use between them).
pub(super) const STATEMENT_CACHE: usize = 256;

impl SqliteStore {
    /// Opens (creating if needed) `DIR/hub.sqlite` and applies pending migrations.
    pub fn open(data_dir: &Path) -> StoreResult<Self> {
        let path = data_dir.join(DB_FILE);
        let open_err = |source| StoreError::Open {
            path: path.clone(),
            source,
        };
        let mut conn = Connection::open(&path).map_err(open_err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(open_err)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(open_err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(open_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(open_err)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        migrate(&mut conn)?;
        let artifact_files = super::artifact_files::ArtifactFiles::open(data_dir)?;
        artifact_files.tidy(&conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
            readers: super::sqlite_readers::Readers::new(&path),
            path,
            artifact_files,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Holds the writer's connection (tests: a batch of polls being made durable).
    #[cfg(test)]
    pub(super) fn hold_writer(&self) -> parking_lot::MutexGuard<'_, Connection> {
        self.conn.lock()
    }

    /// How many read connections are open (tests).
    #[cfg(test)]
    pub(super) fn read_connections(&self) -> usize {
        self.readers.open_count()
    }

    fn write<R>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Transaction<'_>) -> StoreResult<R>,
    ) -> StoreResult<R> {
        let mut conn = self.conn.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql(op))?;
        let value = f(&tx)?;
        tx.commit().map_err(sql(op))?;
        Ok(value)
    }

    /// Runs `f` in a read transaction on one of the read-only connections: it sees what was
    /// committed when it began and does not wait for the writer.
    fn read<R>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Transaction<'_>) -> StoreResult<R>,
    ) -> StoreResult<R> {
        self.readers.with(|conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Deferred)
                .map_err(sql(op))?;
            f(&tx)
        })
    }
}

impl SqliteStore {
    /// One slice of a prune pass in its own transaction, handing the connection over after.
    pub(super) fn prune_slice(
        &self,
        now_ms: i64,
        config: &RetentionConfig,
        cursor: &mut PruneCursor,
        budget: std::time::Duration,
        pruned: &mut Pruned,
    ) -> StoreResult<bool> {
        let mut conn = self.conn.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql("prune"))?;
        let done = retention::prune_slice(&*tx, now_ms, config, cursor, budget, pruned)?;
        tx.commit().map_err(sql("prune"))?;
        parking_lot::MutexGuard::unlock_fair(conn);
        Ok(done)
    }
}

impl PruneTx for Connection {
    fn delete(
        &self,
        sql_text: &'static str,
        params: &[&dyn rusqlite::ToSql],
    ) -> StoreResult<usize> {
        self.prepare_cached(sql_text)
            .and_then(|mut stmt| stmt.execute(params))
            .map_err(sql("prune"))
    }

    fn hosts(
        &self,
        sql_text: &'static str,
        after: &str,
        limit: i64,
    ) -> StoreResult<Vec<(String, Option<i64>)>> {
        self.prepare_cached(sql_text)
            .and_then(|mut stmt| {
                stmt.query_map(params![after, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            })
            .map_err(sql("prune"))
    }
}

fn migrate(conn: &mut Connection) -> StoreResult<()> {
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(|source| StoreError::Migrate { version: 0, source })?;
    let applied = usize::try_from(version).unwrap_or(usize::MAX);
    if applied > schema::MIGRATIONS.len() {
        return Err(StoreError::TooNew {
            found: version,
            known: schema::MIGRATIONS.len(),
        });
    }
    for (index, migration) in schema::MIGRATIONS.iter().enumerate().skip(applied) {
        let target = index + 1;
        let err = |source| StoreError::Migrate {
            version: target,
            source,
        };
        let tx = conn.transaction().map_err(err)?;
        tx.execute_batch(migration).map_err(err)?;
        tx.pragma_update(
            None,
            "user_version",
            i64::try_from(target).unwrap_or(i64::MAX),
        )
        .map_err(err)?;
        tx.commit().map_err(err)?;
        tracing::info!(version = target, "applied database migration");
    }
    Ok(())
}

impl Store for SqliteStore {
    fn init_admin(&self, hash: SecretHash, now_ms: i64) -> StoreResult<()> {
        self.write("init admin", |tx| {
            let exists: Option<i64> = tx
                .query_row("SELECT 1 FROM meta WHERE key = 'admin_token_hash'", [], |r| r.get(0))
                .optional()
                .map_err(sql("init admin"))?;
            if exists.is_some() {
                return Err(StoreError::AlreadyInitialized);
            }
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('admin_token_hash', ?1), ('initialized_ms', ?2)",
                params![hash.0.as_slice(), now_ms.to_string()],
            )
            .map_err(sql("init admin"))?;
            Tx::Sqlite(tx).event(now_ms, None, "initialized", &serde_json::json!({}))
        })
    }

    fn admin_hash(&self) -> StoreResult<SecretHash> {
        self.read("read admin hash", |tx| {
            let bytes: Option<Vec<u8>> = tx
                .query_row(
                    "SELECT value FROM meta WHERE key = 'admin_token_hash'",
                    [],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql("read admin hash"))?;
            let bytes = bytes.ok_or(StoreError::NotInitialized)?;
            SecretHash::from_slice(&bytes).ok_or(StoreError::Corrupt {
                what: "admin token hash",
                reason: format!("{} bytes instead of 32", bytes.len()),
            })
        })
    }

    fn create_enroll_token(&self, token: NewEnrollToken) -> StoreResult<()> {
        self.write("create enrollment token", |tx| {
            super::enroll::create_token(Tx::Sqlite(tx), &token)
        })
    }

    fn list_enroll_tokens(
        &self,
        now_ms: i64,
    ) -> StoreResult<Vec<bosun_proto::admin::EnrollTokenInfo>> {
        self.read("list enrollment tokens", |tx| {
            super::enroll::list_tokens(Tx::Sqlite(tx), now_ms)
        })
    }

    fn revoke_enroll_token(
        &self,
        token_id: &str,
        now_ms: i64,
    ) -> StoreResult<bosun_proto::admin::EnrollTokenState> {
        self.write("revoke enrollment token", |tx| {
            super::enroll::revoke_token(Tx::Sqlite(tx), token_id, now_ms)
        })
    }

    fn enroll(&self, e: Enrollment) -> StoreResult<Enrolled> {
        self.write("enroll", |tx| super::enroll::enroll(Tx::Sqlite(tx), &e))
    }

    fn host_credentials(&self, host_id: Uuid) -> StoreResult<Option<HostCredentials>> {
        self.read("read host credentials", |tx| {
            let row: Option<(Vec<u8>, String)> = tx
                .prepare_cached("SELECT key_hash, status FROM hosts WHERE host_id = ?1")
                .and_then(|mut stmt| {
                    stmt.query_row(params![host_id.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()
                })
                .map_err(sql("read host credentials"))?;
            row.map(|(hash, status)| {
                Ok(HostCredentials {
                    key_hash: SecretHash::from_slice(&hash).ok_or(StoreError::Corrupt {
                        what: "host key hash",
                        reason: format!("{} bytes instead of 32", hash.len()),
                    })?,
                    status: host_status(&status)?,
                })
            })
            .transpose()
        })
    }

    fn approve_host(&self, host_id: Uuid, now_ms: i64) -> StoreResult<()> {
        self.write("approve host", |tx| {
            hosts::set_status(Tx::Sqlite(tx), host_id, HostStatus::Active, now_ms)
        })
    }

    fn revoke_host(&self, host_id: Uuid, now_ms: i64) -> StoreResult<()> {
        self.write("revoke host", |tx| {
            hosts::set_status(Tx::Sqlite(tx), host_id, HostStatus::Revoked, now_ms)
        })
    }

    fn remove_host(
        &self,
        host_id: Uuid,
        forget_escrow: bool,
        now_ms: i64,
    ) -> StoreResult<super::RemovedHost> {
        self.write("remove host", |tx| {
            super::host_removal::remove_host(Tx::Sqlite(tx), host_id, forget_escrow, now_ms)
        })
    }

    fn record_polls(
        &self,
        polls: Vec<PollRecord>,
    ) -> StoreResult<Vec<StoreResult<(PollRecorded, PollView)>>> {
        let mut conn = self.conn.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql("record polls"))?;
        let mut results = Vec::with_capacity(polls.len());
        // Each poll in a savepoint of its own, so a refused poll leaves the others in the
        // batch; the statements are cached rather than compiled for every poll.
        let run = |statement: &str| {
            tx.prepare_cached(statement)
                .and_then(|mut stmt| stmt.execute([]))
                .map_err(sql("record polls"))
        };
        for poll in &polls {
            run("SAVEPOINT poll")?;
            let outcome = hosts::record_poll(Tx::Sqlite(&tx), poll);
            if outcome.is_err() {
                run("ROLLBACK TO poll")?;
            }
            run("RELEASE poll")?;
            results.push(outcome);
        }
        tx.commit().map_err(sql("record polls"))?;
        Ok(results)
    }

    fn poll_view(&self, host_id: Uuid) -> StoreResult<PollView> {
        self.read("read poll view", |tx| {
            super::jobs::poll_view(Tx::Sqlite(tx), host_id)
        })
    }

    fn put_desired(&self, write: DesiredWrite) -> StoreResult<DesiredAccepted> {
        self.write("put desired state", |tx| {
            super::jobs::put_desired(Tx::Sqlite(tx), &write)
        })
    }

    fn desired_current(&self, host_id: Uuid) -> StoreResult<Option<DesiredRevision>> {
        self.read("read desired state", |tx| {
            super::desired::current(Tx::Sqlite(tx), host_id)
        })
    }

    fn desired_facts(&self, host_id: Uuid) -> StoreResult<DesiredFacts> {
        self.read("read desired status", |tx| {
            super::desired::facts(Tx::Sqlite(tx), host_id)
        })
    }

    fn operations(
        &self,
        host_id: Uuid,
        query: OperationQuery,
        limit: usize,
    ) -> StoreResult<Vec<OperationRecord>> {
        self.read("list operation records", |tx| {
            super::desired::operations(Tx::Sqlite(tx), host_id, &query, limit)
        })
    }

    fn submit_job(&self, job: NewJob) -> StoreResult<JobAccepted> {
        self.write("submit job", |tx| {
            super::jobs::submit_job(Tx::Sqlite(tx), &job)
        })
    }

    fn finish_job(&self, host_id: Uuid, result: &JobResult, now_ms: i64) -> StoreResult<()> {
        self.write("finish job", |tx| {
            super::jobs::finish_job(Tx::Sqlite(tx), host_id, result, now_ms)
        })
    }

    fn cancel_job(
        &self,
        host_id: Uuid,
        job_id: Uuid,
        now_ms: i64,
    ) -> StoreResult<bosun_proto::admin::JobState> {
        self.write("cancel job", |tx| {
            super::jobs::cancel_job(Tx::Sqlite(tx), host_id, job_id, now_ms)
        })
    }

    fn list_jobs(&self, host_id: Uuid) -> StoreResult<Vec<JobRecord>> {
        self.read("list jobs", |tx| {
            super::jobs::list_jobs(Tx::Sqlite(tx), host_id)
        })
    }

    fn put_escrow(
        &self,
        host_id: Uuid,
        blob: &str,
        key_fingerprint: &str,
        now_ms: i64,
    ) -> StoreResult<Vec<WatchChange>> {
        self.write("put escrow", |tx| {
            super::escrow::put(Tx::Sqlite(tx), host_id, blob, key_fingerprint, now_ms)
        })
    }

    fn escrow(&self, host_id: Uuid) -> StoreResult<Option<String>> {
        self.read("read escrow", |tx| {
            super::escrow::blob(Tx::Sqlite(tx), host_id)
        })
    }

    fn put_artifact(
        &self,
        sha256: &str,
        data: &[u8],
        now_ms: i64,
    ) -> StoreResult<bosun_proto::admin::ArtifactInfo> {
        let _upload = self.artifact_files.upload_lock();
        self.artifact_files.write(sha256, data)?;
        let (info, pruned) = self.write("put artifact", |tx| {
            super::artifacts::put(Tx::Sqlite(tx), sha256, data, now_ms)
        })?;
        self.artifact_files.remove(&pruned);
        Ok(info)
    }

    fn artifact(&self, sha256: &str) -> StoreResult<Option<super::ArtifactBytes>> {
        let row = self.read("read artifact", |tx| {
            super::artifacts::get(Tx::Sqlite(tx), sha256)
        })?;
        match row {
            None => Ok(None),
            Some((_, Some(data))) => super::artifacts::inline(sha256, data).map(Some),
            Some((_, None)) => self.artifact_files.open_checked(sha256).map(Some),
        }
    }

    fn list_artifacts(&self) -> StoreResult<Vec<bosun_proto::admin::ArtifactInfo>> {
        self.read("list artifacts", |tx| {
            super::artifacts::list(Tx::Sqlite(tx))
        })
    }

    fn list_hosts(&self) -> StoreResult<Vec<HostSummary>> {
        self.read("list hosts", |tx| hosts::list_hosts(Tx::Sqlite(tx)))
    }

    fn host_detail(&self, host_id: Uuid) -> StoreResult<HostDetail> {
        self.read("show host", |tx| {
            hosts::host_detail(Tx::Sqlite(tx), host_id)
        })
    }

    fn host_counts(&self) -> StoreResult<HostCounts> {
        self.read("count hosts", |tx| hosts::host_counts(Tx::Sqlite(tx)))
    }

    fn sweep(&self, now_ms: i64, config: &DeadManConfig) -> StoreResult<Vec<Alert>> {
        // Most sweeps change nothing: they look on a read connection first, so the poll writer
        // is not held up while the liveness index is read, and plan again under the writer only
        // when there is something to change (polls may have landed in between).
        let plan = |tx: &Connection| {
            let (rows, monitored, suspicion_open) =
                hosts::liveness(Tx::Sqlite(tx), now_ms, config.grace_factor)?;
            let plan = crate::deadman::plan_sweep(&rows, monitored, suspicion_open, now_ms, config);
            let idle = plan.changes.is_empty()
                && plan.alerts.is_empty()
                && plan.suspicion_open == suspicion_open;
            Ok::<_, StoreError>((!idle).then_some(plan))
        };
        if self.read("sweep", |tx| plan(tx))?.is_none() {
            return Ok(Vec::new());
        }
        self.write("sweep", |tx| match plan(tx)? {
            Some(plan) => hosts::apply_sweep(Tx::Sqlite(tx), &plan, now_ms),
            None => Ok(Vec::new()),
        })
    }

    fn sweep_backups(&self, now_ms: i64) -> StoreResult<Vec<WatchChange>> {
        // Judging every host takes long on a large fleet (100,000 hosts: tens of seconds), and
        // the poll writer needs the connection: the sweep runs in slices of a few
        // milliseconds, each its own transaction, handing the connection over in between.
        let mut changes = Vec::new();
        let mut after = String::new();
        loop {
            let mut conn = self.conn.lock();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql("sweep backups"))?;
            let (slice, last) = watch::sweep_slice(Tx::Sqlite(&tx), now_ms, &after, SWEEP_SLICE)?;
            tx.commit().map_err(sql("sweep backups"))?;
            parking_lot::MutexGuard::unlock_fair(conn);
            changes.extend(slice);
            match last {
                Some(last) => after = last,
                None => return Ok(changes),
            }
        }
    }

    fn prune(
        &self,
        now_ms: i64,
        config: &RetentionConfig,
        from: PruneCursor,
        budget: std::time::Duration,
    ) -> StoreResult<PruneStep> {
        let started = std::time::Instant::now();
        let mut pruned = Pruned::default();
        let mut cursor = from;
        loop {
            if self.prune_slice(now_ms, config, &mut cursor, PRUNE_SLICE, &mut pruned)? {
                return Ok(PruneStep { pruned, next: None });
            }
            if started.elapsed() >= budget {
                return Ok(PruneStep {
                    pruned,
                    next: Some(cursor),
                });
            }
        }
    }

    fn audit(&self, query: &AuditQuery) -> StoreResult<Vec<bosun_proto::admin::AuditRecord>> {
        let (text, params) = audit_trail::statement(audit_trail::Dialect::Sqlite, query);
        self.read("read audit trail", |tx| {
            let rows: Vec<audit_trail::AuditRow> = tx
                .prepare_cached(&text)
                .and_then(|mut stmt| {
                    stmt.query_map(
                        rusqlite::params_from_iter(params.iter().map(|p| p.as_ref())),
                        |r| {
                            Ok((
                                r.get(0)?,
                                r.get(1)?,
                                r.get(2)?,
                                r.get(3)?,
                                r.get(4)?,
                                r.get(5)?,
                            ))
                        },
                    )?
                    .collect()
                })
                .map_err(sql("read audit trail"))?;
            rows.into_iter().map(audit_trail::record).collect()
        })
    }

    fn list_alerts(&self, limit: u32) -> StoreResult<Vec<Alert>> {
        self.read("list alerts", |tx| {
            super::dashboard_reads::recent_alerts(Tx::Sqlite(tx), None, limit)
        })
    }

    fn ack_alert(&self, ack: &AckAlert, now_ms: i64) -> StoreResult<bosun_proto::admin::OpenAlert> {
        self.write("acknowledge alert", |tx| {
            super::dashboard_reads::ack(Tx::Sqlite(tx), ack, now_ms)
        })
    }

    fn create_silence(&self, request: &CreateSilence, now_ms: i64) -> StoreResult<Silence> {
        self.write("create silence", |tx| {
            super::alert_triage::create_silence(Tx::Sqlite(tx), request, now_ms)
        })
    }

    fn list_silences(&self, now_ms: i64) -> StoreResult<Vec<Silence>> {
        self.read("list silences", |tx| {
            super::alert_triage::in_force(Tx::Sqlite(tx), None, now_ms)
        })
    }

    fn remove_silence(&self, id: u64, now_ms: i64) -> StoreResult<Silence> {
        self.write("remove silence", |tx| {
            super::alert_triage::remove_silence(Tx::Sqlite(tx), id, now_ms)
        })
    }

    fn dashboard_facts(
        &self,
        query: super::dashboard::DashboardQuery,
    ) -> StoreResult<super::dashboard::DashboardFacts> {
        self.read("dashboard facts", |tx| {
            super::dashboard_reads::facts(Tx::Sqlite(tx), query)
        })
    }

    fn list_events(&self, query: EventQuery) -> StoreResult<Vec<Event>> {
        self.read("list events", |tx| {
            let mut stmt = tx
                .prepare(
                    "SELECT seq, at_ms, host_id, kind, detail FROM
                     (SELECT * FROM events WHERE (?1 IS NULL OR host_id = ?1) AND seq > ?2
                      ORDER BY seq DESC LIMIT ?3) ORDER BY seq",
                )
                .map_err(sql("list events"))?;
            let rows = stmt
                .query_map(
                    params![
                        query.host_id.map(|h| h.to_string()),
                        signed(query.after.unwrap_or(0)),
                        query.limit
                    ],
                    |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, Option<String>>(2)?,
                            r.get::<_, String>(3)?,
                            r.get::<_, String>(4)?,
                        ))
                    },
                )
                .map_err(sql("list events"))?;
            let mut events = Vec::new();
            for row in rows {
                let (seq, at_ms, host_id, kind, detail) = row.map_err(sql("list events"))?;
                events.push(Event {
                    seq: unsigned(seq),
                    at: ts(at_ms)?,
                    host_id: host_id.as_deref().map(uuid).transpose()?,
                    kind,
                    detail: serde_json::from_str(&detail).map_err(|e| StoreError::Corrupt {
                        what: "event detail",
                        reason: e.to_string(),
                    })?,
                });
            }
            Ok(events)
        })
    }
}

/// Convenience for alerts raised outside a sweep.
pub(super) fn host_alert(kind: AlertKind, host_id: Uuid, hostname: &str) -> PlannedAlert {
    PlannedAlert {
        kind,
        host_id: Some(host_id),
        hostname: Some(hostname.to_owned()),
        subject: Some(host_id.to_string()),
        message: super::alert_message(kind, Some(hostname), ""),
    }
}
