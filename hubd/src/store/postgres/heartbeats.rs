//! The session heartbeats are written on (decision 0130), and the batches that carry many
//! hosts' heartbeats in one statement (decision 0132).
//!
//! A heartbeat whose replica kept what waits for its host (decision 0131) is queued. One task
//! at a time sends what is queued, up to [`MOST_IN_BATCH`] heartbeats and
//! [`MOST_BATCH_BYTES`], as one guarded statement over arrays (one element a host), and sends
//! the next batch when that one's answer came back. The task starts with the first heartbeat queued and lets others join it
//! for [`GATHER`]; heartbeats that queue while a batch is in flight go in the next one as soon
//! as it is answered. The server runs one statement and one transaction for many hosts, planned
//! once. Each host's row is guarded on its own: a row another writer moved is not written, and
//! only its heartbeat goes the usual way.
//!
//! A heartbeat that reads what waits (the first after anything changed it) goes alone, on
//! the same session, pipelined beside the batches.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use rusqlite::types::Value;
use tokio::sync::oneshot;
use tokio_postgres::types::ToSql;

use super::super::hosts::{self, GUARDED_TYPES, KEPT_COLUMNS_WIDTH, PollWrite, SqlType};
use super::super::retention;
use super::super::tx::Dialect;
use super::PgStore;
use super::conn::{PgError, PgParam};

/// Longest the heartbeat session's connection may take to open.
const OPEN_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// How long the first heartbeat of a batch waits for others to join it.
const GATHER: std::time::Duration = std::time::Duration::from_millis(5);

/// Most heartbeats one statement carries.
const MOST_IN_BATCH: usize = 256;

/// Most bytes of text and blobs one statement carries (a batch takes at least one heartbeat,
/// whose size the hub's body limit bounds).
const MOST_BATCH_BYTES: usize = 8 << 20;

/// The heartbeat session's `application_name`, as `pg_stat_activity` shows it.
pub const SESSION_NAME: &str = "bosun-hubd/heartbeats";

/// What a heartbeat's statement did: the row it wrote (`None` when the guard matched
/// nothing), or `None` when the heartbeat must be recorded the usual way (no session, the
/// session lost under the statement, which may have run, or the statement failed).
pub(super) type Written = Option<Result<Option<tokio_postgres::Row>, PgError>>;

/// Whether the heartbeat session ended under a statement: its connection closed or failed,
/// or the server ended the session (an administrator, a shutdown, an idle timeout: class
/// 57P). A parameter that could not be sent or a statement the server refused is not.
fn session_lost(err: &tokio_postgres::Error) -> bool {
    use std::error::Error as _;
    err.is_closed()
        || err
            .code()
            .is_some_and(|code| code.code().starts_with("57P"))
        || err
            .source()
            .is_some_and(|source| source.is::<std::io::Error>())
}

/// The session heartbeats are written on, driven by the runtime of the tasks that send them
/// (the hub's): a heartbeat waits on its own task, with no thread between it and the server.
/// Its transactions wait for no WAL flush, as a batch that may wait does (decision 0045), so
/// a heartbeat's statement needs no setting of its own.
#[derive(Debug, Default)]
pub(super) struct Heartbeats {
    open: Mutex<Option<Arc<Session>>>,
    /// Held while the session is (re)opened, so one connection is made, not one a heartbeat.
    opening: tokio::sync::Mutex<()>,
    queue: Mutex<Queue>,
    /// Batches sent, and the heartbeats they carried.
    batches: AtomicU64,
    batched: AtomicU64,
}

#[derive(Debug, Default)]
struct Queue {
    heartbeats: Vec<Queued>,
    /// Whether a task is sending batches (it takes what is queued before it stops).
    flushing: bool,
}

/// A heartbeat waiting for the next batch.
#[derive(Debug)]
struct Queued {
    host: String,
    /// The guarded write's `?1`–`?16`, of [`GUARDED_TYPES`].
    values: Vec<Value>,
    /// Their text and blobs, in bytes.
    bytes: usize,
    written: oneshot::Sender<Written>,
}

#[derive(Debug)]
struct Session {
    client: tokio_postgres::Client,
    /// The guarded write that also reads what waits for the host.
    write: tokio_postgres::Statement,
    /// The guarded write alone, for many hosts.
    batch: tokio_postgres::Statement,
}

impl Session {
    /// Connects, sets the session up and prepares both writes.
    async fn open(config: &tokio_postgres::Config) -> Result<Self, PgError> {
        let (client, connection) = config
            .clone()
            .application_name(SESSION_NAME)
            .connect(tokio_postgres::NoTls)
            .await?;
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, "heartbeat session closed");
            }
        });
        // A batch's statement is planned once: a custom plan for each batch's arrays (what
        // the server would choose, its estimate of a generic plan's rows being worse) was
        // about 40 % of the server's CPU a heartbeat. The generic plan is the nested loop over
        // the host key a batch needs whatever its size.
        client
            .batch_execute("SET synchronous_commit = off; SET plan_cache_mode = force_generic_plan")
            .await?;
        let prepare = |write| {
            let text = retention::dollar_placeholders(hosts::poll_update(Dialect::Postgres, write));
            let client = &client;
            async move { client.prepare(&text).await }
        };
        let write = prepare(PollWrite::Guarded).await?;
        let batch = prepare(PollWrite::GuardedBatch).await?;
        Ok(Self {
            client,
            write,
            batch,
        })
    }
}

/// One array parameter of a batch: a value of each heartbeat.
enum Column {
    Bigint(Vec<Option<i64>>),
    Text(Vec<Option<String>>),
    Bytea(Vec<Option<Vec<u8>>>),
}

impl Column {
    fn new(ty: SqlType, len: usize) -> Self {
        match ty {
            SqlType::Bigint => Self::Bigint(Vec::with_capacity(len)),
            SqlType::Text => Self::Text(Vec::with_capacity(len)),
            SqlType::Bytea => Self::Bytea(Vec::with_capacity(len)),
        }
    }

    /// Whether `value` can be sent in a column of `ty`: of its kind, and text the server
    /// takes (no NUL byte, which would fail the whole batch).
    fn takes(ty: SqlType, value: &Value) -> bool {
        match (ty, value) {
            (_, Value::Null) | (SqlType::Bigint, Value::Integer(_)) => true,
            (SqlType::Text, Value::Text(text)) => !text.contains('\0'),
            (SqlType::Bytea, Value::Blob(_)) => true,
            _ => false,
        }
    }

    fn push(&mut self, value: Value) -> Result<(), PgError> {
        match (self, value) {
            (Self::Bigint(column), Value::Null) => column.push(None),
            (Self::Text(column), Value::Null) => column.push(None),
            (Self::Bytea(column), Value::Null) => column.push(None),
            (Self::Bigint(column), Value::Integer(n)) => column.push(Some(n)),
            (Self::Text(column), Value::Text(text)) => column.push(Some(text)),
            (Self::Bytea(column), Value::Blob(bytes)) => column.push(Some(bytes)),
            _ => {
                return Err(PgError::Value(rusqlite::Error::ToSqlConversionFailure(
                    "a heartbeat value of the wrong kind".into(),
                )));
            }
        }
        Ok(())
    }

    fn as_param(&self) -> &(dyn ToSql + Sync) {
        match self {
            Self::Bigint(column) => column,
            Self::Text(column) => column,
            Self::Bytea(column) => column,
        }
    }
}

/// The batch's array parameters, from its heartbeats' values.
fn columns(batch: &mut [Queued]) -> Result<Vec<Column>, PgError> {
    let mut columns: Vec<Column> = GUARDED_TYPES
        .iter()
        .map(|&ty| Column::new(ty, batch.len()))
        .collect();
    for heartbeat in batch {
        if heartbeat.values.len() != columns.len() {
            return Err(PgError::Value(rusqlite::Error::ToSqlConversionFailure(
                format!(
                    "a heartbeat has {} values, not {}",
                    heartbeat.values.len(),
                    columns.len()
                )
                .into(),
            )));
        }
        for (column, value) in columns.iter_mut().zip(heartbeat.values.drain(..)) {
            column.push(value)?;
        }
    }
    Ok(columns)
}

/// How many of the heartbeats queued, of `sizes` bytes each, the next batch takes: at most
/// [`MOST_IN_BATCH`] and [`MOST_BATCH_BYTES`], and at least one.
fn batch_len(sizes: impl Iterator<Item = usize>) -> usize {
    let mut bytes = 0;
    sizes
        .take(MOST_IN_BATCH)
        .take_while(|size| {
            bytes += size;
            bytes <= MOST_BATCH_BYTES
        })
        .count()
        .max(1)
}

/// Clears the queue when the task sending batches ends before it emptied it (its runtime
/// shut down): the heartbeats queued go the usual way, and the next one starts a new task.
struct Flushing<'a> {
    heartbeats: &'a Heartbeats,
    emptied: bool,
}

impl Drop for Flushing<'_> {
    fn drop(&mut self) {
        if !self.emptied {
            let mut queue = self.heartbeats.queue.lock();
            queue.flushing = false;
            queue.heartbeats.clear();
        }
    }
}

impl PgStore {
    /// Writes a heartbeat whose replica kept what waits (`values`: the guarded write's
    /// `?1`–`?16` for `host`) in the next batch.
    pub(super) async fn heartbeat_batched(
        self: &Arc<Self>,
        host: String,
        values: Vec<Value>,
    ) -> Written {
        let fits = values.len() == GUARDED_TYPES.len()
            && GUARDED_TYPES
                .iter()
                .zip(&values)
                .all(|(&ty, value)| Column::takes(ty, value));
        if !fits {
            return None;
        }
        let bytes = values
            .iter()
            .map(|value| match value {
                Value::Text(text) => text.len(),
                Value::Blob(blob) => blob.len(),
                _ => 0,
            })
            .sum();
        let (written, answer) = oneshot::channel();
        let start = {
            let mut queue = self.heartbeats.queue.lock();
            queue.heartbeats.push(Queued {
                host,
                values,
                bytes,
                written,
            });
            !std::mem::replace(&mut queue.flushing, true)
        };
        if start {
            tokio::spawn(self.clone().send_batches());
        }
        // A batch dropped unsent (its runtime shut down) answers nothing: the usual way.
        answer.await.ok().flatten()
    }

    /// Sends what is queued, a batch at a time, until nothing is.
    async fn send_batches(self: Arc<Self>) {
        let heartbeats = &self.heartbeats;
        let mut flushing = Flushing {
            heartbeats,
            emptied: false,
        };
        // Heartbeats arrive a millisecond apart even at 100,000 hosts over three replicas:
        // the first waits for others to join it.
        tokio::time::sleep(GATHER).await;
        loop {
            let batch: Vec<Queued> = {
                let mut queue = heartbeats.queue.lock();
                if queue.heartbeats.is_empty() {
                    queue.flushing = false;
                    flushing.emptied = true;
                    return;
                }
                let n = batch_len(queue.heartbeats.iter().map(|heartbeat| heartbeat.bytes));
                queue.heartbeats.drain(..n).collect()
            };
            heartbeats.send_batch(&self.config, batch).await;
        }
    }
}

impl Heartbeats {
    /// Runs the guarded write that also reads what waits for the host with `params`.
    pub(super) async fn write(
        &self,
        config: &tokio_postgres::Config,
        params: &[PgParam],
    ) -> Written {
        let session = self.session(config).await?;
        let refs: Vec<&(dyn ToSql + Sync)> =
            params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        match session.client.query(&session.write, &refs).await {
            Ok(rows) => Some(Ok(rows.into_iter().next())),
            Err(err) if session_lost(&err) => {
                self.lost(&session, &err);
                None
            }
            Err(err) => Some(Err(err.into())),
        }
    }

    /// Sends `batch` as one statement and answers each heartbeat in it.
    async fn send_batch(&self, config: &tokio_postgres::Config, mut batch: Vec<Queued>) {
        // Host-id order, the statement's; a host has one heartbeat at a time (the replica
        // takes its kept row for it), and any second would go the usual way.
        batch.sort_by(|a, b| a.host.cmp(&b.host));
        let mut sent: Vec<Queued> = Vec::with_capacity(batch.len());
        for heartbeat in batch {
            if sent.last().is_some_and(|last| last.host == heartbeat.host) {
                let _ = heartbeat.written.send(None);
            } else {
                sent.push(heartbeat);
            }
        }
        match self.write_batch(config, &mut sent).await {
            Some(Ok(rows)) => {
                self.batches.fetch_add(1, Ordering::Relaxed);
                self.batched.fetch_add(sent.len() as u64, Ordering::Relaxed);
                let mut by_host: HashMap<String, tokio_postgres::Row> = rows
                    .into_iter()
                    .filter_map(|row| Some((row.try_get(KEPT_COLUMNS_WIDTH).ok()?, row)))
                    .collect();
                for heartbeat in sent {
                    let row = by_host.remove(&heartbeat.host);
                    let _ = heartbeat.written.send(Some(Ok(row)));
                }
            }
            // The usual way records each (and meets any error of its own).
            Some(Err(err)) => {
                tracing::debug!(error = %err, "heartbeat batch failed; recorded the usual way");
                for heartbeat in sent {
                    let _ = heartbeat.written.send(None);
                }
            }
            None => {
                for heartbeat in sent {
                    let _ = heartbeat.written.send(None);
                }
            }
        }
    }

    /// The rows `batch`'s statement wrote, or `None` when there was no session or it was
    /// lost under the statement.
    async fn write_batch(
        &self,
        config: &tokio_postgres::Config,
        batch: &mut [Queued],
    ) -> Option<Result<Vec<tokio_postgres::Row>, PgError>> {
        let columns = match columns(batch) {
            Ok(columns) => columns,
            Err(err) => return Some(Err(err)),
        };
        let session = self.session(config).await?;
        let params: Vec<&(dyn ToSql + Sync)> = columns.iter().map(Column::as_param).collect();
        match session.client.query(&session.batch, &params).await {
            Ok(rows) => Some(Ok(rows)),
            Err(err) if session_lost(&err) => {
                self.lost(&session, &err);
                None
            }
            Err(err) => Some(Err(err.into())),
        }
    }

    /// How many batches were written, and how many heartbeats they carried.
    pub(super) fn batch_counts(&self) -> (u64, u64) {
        (
            self.batches.load(Ordering::Relaxed),
            self.batched.load(Ordering::Relaxed),
        )
    }

    /// Lets `session` go after it ended under a statement: the next heartbeat opens a new one
    /// (its connection may not have closed yet).
    fn lost(&self, session: &Arc<Session>, err: &tokio_postgres::Error) {
        tracing::debug!(error = %err, "heartbeat session lost; recorded the usual way");
        let mut open = self.open.lock();
        if open.as_ref().is_some_and(|open| Arc::ptr_eq(open, session)) {
            *open = None;
        }
    }

    fn current(&self) -> Option<Arc<Session>> {
        self.open
            .lock()
            .as_ref()
            .filter(|session| !session.client.is_closed())
            .cloned()
    }

    /// The open session, opened when there is none; `None` (logged) when none could be.
    async fn session(&self, config: &tokio_postgres::Config) -> Option<Arc<Session>> {
        match self.open_session(config).await {
            Ok(session) => Some(session),
            Err(err) => {
                tracing::debug!(error = %err, "no heartbeat session; recorded the usual way");
                None
            }
        }
    }

    async fn open_session(&self, config: &tokio_postgres::Config) -> Result<Arc<Session>, PgError> {
        if let Some(session) = self.current() {
            return Ok(session);
        }
        let _opening = self.opening.lock().await;
        if let Some(session) = self.current() {
            return Ok(session);
        }
        // Bounded: heartbeats wait for the opening, and a server that does not answer must
        // not hold them (they go the usual way meanwhile).
        let session = tokio::time::timeout(OPEN_WITHIN, Session::open(config))
            .await
            .map_err(|_| {
                PgError::Pool(format!(
                    "the heartbeat session did not open within {} s",
                    OPEN_WITHIN.as_secs()
                ))
            })??;
        let session = Arc::new(session);
        *self.open.lock() = Some(session.clone());
        Ok(session)
    }
}

#[cfg(test)]
mod tests {
    use super::{MOST_BATCH_BYTES, MOST_IN_BATCH, batch_len};

    #[test]
    fn a_batch_is_bounded_by_count_and_bytes_and_takes_at_least_one() {
        assert_eq!(batch_len(std::iter::repeat_n(100, 1000)), MOST_IN_BATCH);
        assert_eq!(batch_len([700].into_iter()), 1);
        let half = MOST_BATCH_BYTES / 2;
        assert_eq!(batch_len([half, half, 1].into_iter()), 2);
        assert_eq!(batch_len([half, half + 1, 1].into_iter()), 1);
        // One heartbeat larger than the budget still goes, alone.
        assert_eq!(batch_len([MOST_BATCH_BYTES * 2, 1].into_iter()), 1);
    }
}
