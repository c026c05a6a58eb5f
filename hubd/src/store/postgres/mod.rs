//! The PostgreSQL backend: any number of hub replicas over one database.
//!
//! Store calls come from the hub's blocking pool (and the poll writer's thread), as with SQLite,
//! and run on `tokio-postgres` connections driven on the calling thread, from a bounded pool
//! (`conn`); the `LISTEN` connection is a `tokio-postgres` one on the store's
//! own small runtime. The [`Store`](super::Store) trait stays synchronous for both backends,
//! but for one call: a heartbeat on the host row the replica kept is sent from the poll's own
//! task, on a session the hub's runtime drives (`kept`, decisions 0129 and 0130).
//!
//! What one SQLite writer gave for free is explicit here (decision 0023):
//! - every write about a host locks the host's row first (`FOR UPDATE`); a poll batch locks its
//!   hosts in id order, so batches from different replicas never deadlock; enrollment locks the
//!   token's row, so a one-time token is used once whichever replica sees it;
//! - writes that wake held long-polls (desired state, jobs, revocations, host replacement)
//!   send `NOTIFY bosun_wake` in their transaction; every replica `LISTEN`s and wakes its
//!   held polls for the host;
//! - the dead-man's switch, the backup sweep and the retention prune run on the replica whose
//!   session holds an advisory lock; when that replica dies its session ends and another takes
//!   the lock.
//!
//! A transaction the server aborts as a serialization failure or deadlock is run again.

pub(in crate::store) mod conn;
mod heartbeats;
mod kept;
pub mod schema;

use std::str::FromStr as _;
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::params;
use uuid::Uuid;

use super::retention::{self, PruneCursor, PruneTx, Pruned, RetentionConfig};
use super::{StoreError, StoreResult, WakeUp};
pub(super) use conn::sql;
use conn::{Conn, OptionalExtension as _, PgError, PgTx, Pool};

pub use conn::WAKE_CHANNEL;
pub use heartbeats::SESSION_NAME as HEARTBEAT_SESSION_NAME;

/// Advisory-lock key of the sweeper (`'bosunswp'` as an integer).
pub const SWEEPER_LOCK: i64 = 0x626f_7375_6e73_7770;

/// Most pooled connections one replica opens (the poll writer, request handlers); beside them
/// it holds the sweeper's session, the heartbeats' (decision 0129) and the `LISTEN` one.
const POOL_SIZE: usize = 12;

/// Longest a backup sweep slice runs, one transaction (the rows of the hosts it judged stay
/// locked until it ends; at least one host is visited).
const SWEEP_SLICE: Duration = Duration::from_millis(10);

/// Longest a retention prune slice runs (at least one statement runs).
const PRUNE_SLICE: Duration = Duration::from_millis(10);

/// Attempts at a transaction the server aborted as a serialization failure or deadlock.
const ATTEMPTS: usize = 4;

/// PostgreSQL-backed [`Store`](super::Store).
pub struct PgStore {
    rt: Option<tokio::runtime::Runtime>,
    pool: Pool,
    config: tokio_postgres::Config,
    /// The session holding [`SWEEPER_LOCK`] (or trying to), when this replica has one.
    sweeper: Mutex<Sweeper>,
    target: String,
    /// The migrations this hub brings.
    schema: schema::PgSchema,
    /// The host rows this replica last wrote (decision 0129).
    kept: kept::KeptRows,
    /// The session heartbeats are written on, alone or many in one statement (decisions 0130,
    /// 0132).
    heartbeats: heartbeats::Heartbeats,
}

#[derive(Default)]
struct Sweeper {
    session: Option<Conn>,
    holds_lock: bool,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        // Dropped from async code too (a hub going away): never block there. A blocking
        // connection owns a runtime, which may not be dropped in async code either.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
        let idle = self.pool.take_idle();
        let session = self.sweeper.get_mut().session.take();
        if !idle.is_empty() || session.is_some() {
            let _ = std::thread::Builder::new()
                .name("bosun-pg-close".into())
                .spawn(move || drop((idle, session)));
        }
    }
}

/// Where a connection string points, without its password (for logs and errors).
pub fn describe(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{}:{port}/{}",
        config.get_user().unwrap_or(""),
        hosts.join(","),
        config.get_dbname().unwrap_or("")
    )
}

// `impl Store for PgStore`.
#[path = "store.rs"]
mod store_impl;

fn retryable(err: &StoreError) -> bool {
    matches!(err, StoreError::Postgres { source, .. } if source.retryable())
}

impl PgStore {
    /// Connects to `url` (`postgres://user[:password]@host[:port]/db`, or `host=/run/dir`
    /// for a unix socket) and applies pending migrations.
    pub fn open(url: &str) -> StoreResult<Self> {
        Self::open_with(url, schema::PgSchema::default())
    }

    /// [`Self::open`], bringing `schema`'s migrations.
    pub fn open_with(url: &str, schema: schema::PgSchema) -> StoreResult<Self> {
        let config =
            tokio_postgres::Config::from_str(url).map_err(sql("parse connection string"))?;
        let target = describe(&config);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("bosun-pg-listen")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Postgres {
                op: "start the database runtime",
                source: PgError::Pool(e.to_string()),
            })?;
        let pool = Pool::new(config.clone(), POOL_SIZE);
        let store = Self {
            rt: Some(rt),
            pool,
            config,
            sweeper: Mutex::new(Sweeper::default()),
            target,
            schema,
            kept: kept::KeptRows::default(),
            heartbeats: heartbeats::Heartbeats::default(),
        };
        store.migrate()?;
        tracing::info!(database = store.target, "postgresql store open");
        Ok(store)
    }

    /// Where the store is (no password).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// How many heartbeats this replica recorded in one round trip on the host row it kept,
    /// and how many found that row moved by another writer (decision 0129).
    pub fn one_flight_counts(&self) -> (u64, u64) {
        self.kept.counts()
    }

    /// How many statements carried heartbeats in batches, and how many heartbeats they carried
    /// (decision 0132).
    pub fn heartbeat_batch_counts(&self) -> (u64, u64) {
        self.heartbeats.batch_counts()
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        // Set in `open`, taken only by `drop`.
        match &self.rt {
            Some(rt) => rt.handle(),
            None => unreachable!("the runtime lives as long as the store"),
        }
    }

    /// Runs `f` in a transaction (`begin`: the statements that open it, its kind and settings),
    /// again when the server aborts it as a serialization failure or deadlock. The opening
    /// statements go with the transaction's first statement and its last writes with the
    /// `COMMIT`, each prepared once per connection.
    fn transact<R>(
        conn: &mut Conn,
        op: &'static str,
        begin: &[&str],
        writes: bool,
        mut f: impl FnMut(&PgTx<'_>) -> StoreResult<R>,
    ) -> StoreResult<R> {
        let tx = PgTx::new(conn, writes);
        let mut attempt = 1;
        loop {
            let outcome = begin
                .iter()
                .try_for_each(|statement| tx.defer(statement, &[]))
                .map_err(sql(op))
                .and_then(|()| f(&tx))
                .and_then(|value| {
                    tx.execute("COMMIT", &[]).map_err(sql(op))?;
                    Ok(value)
                });
            match outcome {
                Ok(value) => return Ok(value),
                Err(err) => {
                    // After a failed COMMIT there is nothing to roll back; the error says it.
                    // What waited to be sent goes with the transaction.
                    tx.discard();
                    let _ = tx.batch("ROLLBACK");
                    if attempt < ATTEMPTS && retryable(&err) {
                        attempt += 1;
                        tracing::debug!(op, attempt, "transaction aborted by the server; again");
                        continue;
                    }
                    return Err(err);
                }
            }
        }
    }

    fn write<R>(
        &self,
        op: &'static str,
        f: impl FnMut(&PgTx<'_>) -> StoreResult<R>,
    ) -> StoreResult<R> {
        self.write_as(op, &["BEGIN"], f)
    }

    /// [`Self::write`] begun with `begin` (`BEGIN`, and settings for the transaction).
    pub(super) fn write_as<R>(
        &self,
        op: &'static str,
        begin: &[&str],
        f: impl FnMut(&PgTx<'_>) -> StoreResult<R>,
    ) -> StoreResult<R> {
        let mut pooled = self.pool.get().map_err(sql(op))?;
        Self::transact(pooled.conn(), op, begin, true, f)
    }

    fn read<R>(
        &self,
        op: &'static str,
        f: impl FnMut(&PgTx<'_>) -> StoreResult<R>,
    ) -> StoreResult<R> {
        let mut pooled = self.pool.get().map_err(sql(op))?;
        Self::transact(
            pooled.conn(),
            op,
            &["BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"],
            false,
            f,
        )
    }

    fn migrate(&self) -> StoreResult<()> {
        let mut pooled = self.pool.get().map_err(sql("migrate"))?;
        Self::transact(pooled.conn(), "migrate", &["BEGIN"], true, |tx| {
            tx.execute(
                "SELECT pg_advisory_xact_lock($1)",
                params![schema::MIGRATE_LOCK],
            )
            .map_err(sql("migrate"))?;
            tx.batch("CREATE TABLE IF NOT EXISTS bosun_schema (version BIGINT NOT NULL)")
                .map_err(sql("migrate"))?;
            let found: Option<i64> = tx
                .query_row("SELECT version FROM bosun_schema", &[], |r| r.get(0))
                .optional()
                .map_err(sql("migrate"))?;
            if found.is_none() {
                tx.execute("INSERT INTO bosun_schema (version) VALUES (0)", &[])
                    .map_err(sql("migrate"))?;
            }
            let found = found.unwrap_or(0);
            let applied = usize::try_from(found).unwrap_or(usize::MAX);
            let migrations = self.schema.0;
            if applied > migrations.len() {
                return Err(StoreError::TooNew {
                    found,
                    known: migrations.len(),
                });
            }
            for (index, migration) in migrations.iter().enumerate().skip(applied) {
                let target = index + 1;
                tx.batch(migration).map_err(|source| StoreError::Postgres {
                    op: "apply a migration",
                    source,
                })?;
                tx.execute(
                    "UPDATE bosun_schema SET version = $1",
                    params![i64::try_from(target).unwrap_or(i64::MAX)],
                )
                .map_err(sql("migrate"))?;
                tracing::info!(version = target, "applied database migration");
            }
            Ok(())
        })
    }

    /// Runs `f` in a transaction on the session holding the sweeper lock, taking the lock
    /// first if it is free; `None` when another replica holds it.
    fn as_sweeper<R>(
        &self,
        op: &'static str,
        f: impl FnMut(&PgTx<'_>) -> StoreResult<R>,
    ) -> StoreResult<Option<R>> {
        let mut sweeper = self.sweeper.lock();
        if sweeper.session.as_ref().is_some_and(|s| s.is_closed()) {
            *sweeper = Sweeper::default();
        }
        if sweeper.session.is_none() {
            sweeper.session = Some(Conn::connect(&self.config).map_err(sql(op))?);
        }
        let outcome = self.sweep_on(&mut sweeper, op, f);
        if outcome.is_err() {
            // A failed session may have lost the lock with it: start again next time. Its
            // connection is not handed back to the pool (it may still hold the lock).
            sweeper.session = None;
            sweeper.holds_lock = false;
        }
        outcome
    }

    fn sweep_on<R>(
        &self,
        sweeper: &mut Sweeper,
        op: &'static str,
        f: impl FnMut(&PgTx<'_>) -> StoreResult<R>,
    ) -> StoreResult<Option<R>> {
        let Some(session) = sweeper.session.as_mut() else {
            return Ok(None);
        };
        if !sweeper.holds_lock {
            let tx = PgTx::new(session, true);
            let taken: bool = tx
                .query_row(
                    "SELECT pg_try_advisory_lock($1)",
                    params![SWEEPER_LOCK],
                    |r| r.get(0),
                )
                .map_err(sql(op))?;
            if !taken {
                return Ok(None);
            }
            tracing::info!(
                "this replica runs the dead-man's switch, the backup sweeps and the retention prune"
            );
            sweeper.holds_lock = true;
        }
        Self::transact(session, op, &["BEGIN"], true, f).map(Some)
    }

    /// One slice of a prune pass on the sweeper's session; `None` when another replica holds
    /// the sweeper lock.
    pub(super) fn prune_slice(
        &self,
        now_ms: i64,
        config: &RetentionConfig,
        cursor: &mut PruneCursor,
        budget: Duration,
        pruned: &mut Pruned,
    ) -> StoreResult<Option<bool>> {
        // A transaction run again after a serialization failure starts from the same place.
        let start = cursor.clone();
        let counted = *pruned;
        self.as_sweeper("prune", |tx| {
            *cursor = start.clone();
            *pruned = counted;
            retention::prune_slice(tx, now_ms, config, cursor, budget, pruned)
        })
    }

    /// Whether this replica's session holds the sweeper lock (as of its last sweep).
    pub fn is_sweeper(&self) -> bool {
        self.sweeper.lock().holds_lock
    }

    /// Lets the sweeper lock go (it is taken over by another replica's next sweep).
    pub fn release_sweeper(&self) {
        let mut sweeper = self.sweeper.lock();
        sweeper.session = None;
        sweeper.holds_lock = false;
    }
}

impl PruneTx for PgTx<'_> {
    fn delete(
        &self,
        sql_text: &'static str,
        params: &[&dyn rusqlite::ToSql],
    ) -> StoreResult<usize> {
        self.execute(&retention::dollar_placeholders(sql_text), params)
            .map_err(sql("prune"))
    }

    fn hosts(
        &self,
        sql_text: &'static str,
        after: &str,
        limit: i64,
    ) -> StoreResult<Vec<(String, Option<i64>)>> {
        self.prepare_cached(&retention::dollar_placeholders(sql_text))
            .and_then(|mut stmt| {
                stmt.query_map(params![after, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            })
            .map_err(sql("prune"))
    }
}

/// Listens on [`WAKE_CHANNEL`] until the store's runtime stops, reconnecting after a lost
/// connection (and then waking every held poll, since a notification may have been missed).
async fn listen(config: tokio_postgres::Config, wake: WakeUp) {
    use futures::StreamExt as _;
    let mut backoff = Duration::from_millis(200);
    loop {
        match config.connect(tokio_postgres::NoTls).await {
            Ok((client, mut connection)) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let driver = tokio::spawn(async move {
                    let mut messages =
                        futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(message) = messages.next().await {
                        match message {
                            Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                                if tx.send(n.payload().to_owned()).is_err() {
                                    break;
                                }
                            }
                            Ok(_) => {}
                            Err(err) => {
                                tracing::warn!(error = %err, "wake-up connection lost");
                                break;
                            }
                        }
                    }
                });
                match client
                    .batch_execute(&format!("LISTEN {WAKE_CHANNEL}"))
                    .await
                {
                    Ok(()) => {
                        backoff = Duration::from_millis(200);
                        // Anything sent while this replica was not listening is not lost:
                        // every held poll reads its state again.
                        wake(None);
                        while let Some(payload) = rx.recv().await {
                            match Uuid::parse_str(&payload) {
                                Ok(host_id) => wake(Some(host_id)),
                                Err(_) => tracing::warn!(payload, "unexpected wake-up payload"),
                            }
                        }
                    }
                    Err(err) => tracing::warn!(error = %err, "LISTEN failed"),
                }
                driver.abort();
            }
            Err(err) => tracing::warn!(error = %err, "connecting for wake-ups failed"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
