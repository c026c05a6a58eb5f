//! The seam the store's modules are written over once for both backends: [`Tx`], one open
//! transaction of either store, and [`Dialect`], the fragments of SQL the two spell
//! differently.
//!
//! Statements are written once with SQLite's `?N` placeholders; the PostgreSQL connection
//! prepares them as `$N` (once per connection: its statement cache is keyed by the text as
//! written, so a cached statement costs no rewriting). Parameters are rusqlite values and rows
//! are read with rusqlite's `FromSql` on either backend, so a value reads back the same.

use rusqlite::ToSql;
use rusqlite::types::FromSql;

use super::error::{StoreError, StoreResult};
use super::postgres::conn::{OptionalExtension as _, PgError, PgRow, PgTx, WAKE_CHANNEL};

/// One open transaction of either store.
#[derive(Debug, Clone, Copy)]
pub(super) enum Tx<'t, 'c> {
    /// The SQLite store's connection, inside its transaction.
    Sqlite(&'t rusqlite::Connection),
    /// A PostgreSQL transaction.
    Postgres(&'t PgTx<'c>),
}

impl<'t, 'c> From<&'t rusqlite::Connection> for Tx<'t, 'c> {
    fn from(conn: &'t rusqlite::Connection) -> Self {
        Self::Sqlite(conn)
    }
}

impl<'t, 'c> From<&'t PgTx<'c>> for Tx<'t, 'c> {
    fn from(tx: &'t PgTx<'c>) -> Self {
        Self::Postgres(tx)
    }
}

/// A fetched row of either backend.
#[derive(Debug)]
pub(super) enum Row<'r, 's> {
    /// A SQLite row.
    Sqlite(&'r rusqlite::Row<'s>),
    /// A PostgreSQL row.
    Postgres(&'r PgRow),
}

impl Row<'_, '_> {
    /// Column `index` as `T`.
    pub(super) fn get<T: FromSql>(&self, index: usize) -> rusqlite::Result<T> {
        match self {
            Self::Sqlite(row) => row.get(index),
            Self::Postgres(row) => row.get(index),
        }
    }
}

/// Which SQL the store speaks, and the fragments its two dialects spell differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    /// SQLite.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

impl Dialect {
    /// The statement of this dialect, where the two differ.
    pub(super) fn pick(self, sqlite: &'static str, postgres: &'static str) -> &'static str {
        match self {
            Self::Sqlite => sqlite,
            Self::Postgres => postgres,
        }
    }
}

/// Maps either backend's error to its [`StoreError`] for operation `op`.
fn sqlite_err(op: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |source| StoreError::Sqlite { op, source }
}

fn pg_err(op: &'static str) -> impl Fn(PgError) -> StoreError {
    move |source| StoreError::Postgres { op, source }
}

impl Tx<'_, '_> {
    /// The backend's dialect.
    pub(super) fn dialect(self) -> Dialect {
        match self {
            Self::Sqlite(_) => Dialect::Sqlite,
            Self::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Runs a statement (cached); returns how many rows it changed.
    pub(super) fn execute(
        self,
        op: &'static str,
        sql: &str,
        params: &[&dyn ToSql],
    ) -> StoreResult<usize> {
        match self {
            Self::Sqlite(conn) => conn
                .prepare_cached(sql)
                .and_then(|mut stmt| stmt.execute(params))
                .map_err(sqlite_err(op)),
            Self::Postgres(tx) => tx.execute(sql, params).map_err(pg_err(op)),
        }
    }

    /// Runs a statement whose count nobody reads: on PostgreSQL it goes to the server with the
    /// transaction's next statement (or its `COMMIT`), whose error its failure becomes.
    pub(super) fn execute_later(
        self,
        op: &'static str,
        sql: &str,
        params: &[&dyn ToSql],
    ) -> StoreResult<()> {
        match self {
            Self::Sqlite(_) => self.execute(op, sql, params).map(|_| ()),
            Self::Postgres(tx) => tx.defer(sql, params).map_err(pg_err(op)),
        }
    }

    /// The first row, mapped; `None` when there is none.
    pub(super) fn query_opt<T>(
        self,
        op: &'static str,
        sql: &str,
        params: &[&dyn ToSql],
        f: impl FnOnce(&Row<'_, '_>) -> rusqlite::Result<T>,
    ) -> StoreResult<Option<T>> {
        match self {
            Self::Sqlite(conn) => {
                use rusqlite::OptionalExtension as _;
                conn.prepare_cached(sql)
                    .and_then(|mut stmt| stmt.query_row(params, |r| f(&Row::Sqlite(r))))
                    .optional()
                    .map_err(sqlite_err(op))
            }
            Self::Postgres(tx) => tx
                .query_row(sql, params, |r| f(&Row::Postgres(r)))
                .optional()
                .map_err(pg_err(op)),
        }
    }

    /// The first row, mapped; an error when there is none.
    pub(super) fn query_row<T>(
        self,
        op: &'static str,
        sql: &str,
        params: &[&dyn ToSql],
        f: impl FnOnce(&Row<'_, '_>) -> rusqlite::Result<T>,
    ) -> StoreResult<T> {
        match self {
            Self::Sqlite(conn) => conn
                .prepare_cached(sql)
                .and_then(|mut stmt| stmt.query_row(params, |r| f(&Row::Sqlite(r))))
                .map_err(sqlite_err(op)),
            Self::Postgres(tx) => tx
                .query_row(sql, params, |r| f(&Row::Postgres(r)))
                .map_err(pg_err(op)),
        }
    }

    /// Every row, mapped.
    pub(super) fn query_map<T>(
        self,
        op: &'static str,
        sql: &str,
        params: &[&dyn ToSql],
        mut f: impl FnMut(&Row<'_, '_>) -> rusqlite::Result<T>,
    ) -> StoreResult<Vec<T>> {
        match self {
            Self::Sqlite(conn) => conn
                .prepare_cached(sql)
                .and_then(|mut stmt| {
                    stmt.query_map(params, |r| f(&Row::Sqlite(r)))?
                        .collect::<rusqlite::Result<Vec<T>>>()
                })
                .map_err(sqlite_err(op)),
            Self::Postgres(tx) => tx
                .prepare_cached(sql)
                .and_then(|mut stmt| {
                    stmt.query_map(params, |r| f(&Row::Postgres(r)))?
                        .collect::<Result<Vec<T>, PgError>>()
                })
                .map_err(pg_err(op)),
        }
    }

    /// Runs statements without parameters.
    pub(super) fn batch(self, op: &'static str, sql: &str) -> StoreResult<()> {
        match self {
            Self::Sqlite(conn) => conn.execute_batch(sql).map_err(sqlite_err(op)),
            Self::Postgres(tx) => tx.batch(sql).map_err(pg_err(op)),
        }
    }

    /// Appends to the event log. Written during an admin API call, the event's detail names
    /// the operator token behind it as `by` ([`crate::actor`]).
    pub(super) fn event(
        self,
        now_ms: i64,
        host_id: Option<uuid::Uuid>,
        kind: &str,
        detail: &serde_json::Value,
    ) -> StoreResult<()> {
        let detail = match crate::actor::on_this_thread() {
            Some(by) if detail.is_object() => {
                let mut detail = detail.clone();
                if let Some(fields) = detail.as_object_mut() {
                    fields
                        .entry("by")
                        .or_insert_with(|| serde_json::Value::String(by));
                }
                std::borrow::Cow::Owned(detail)
            }
            _ => std::borrow::Cow::Borrowed(detail),
        };
        self.execute_later(
            "append event",
            "INSERT INTO events (at_ms, host_id, kind, detail) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![
                now_ms,
                host_id.map(|h| h.to_string()),
                kind,
                detail.to_string()
            ],
        )
    }
}

/// Reads many of the store's modules start with, and the wake-up replicas send each other.
impl Tx<'_, '_> {
    /// Wakes the long-polls other hub replicas hold for `host_id` when the transaction commits
    /// (PostgreSQL's `NOTIFY`). A SQLite hub is the only one, and wakes its own after the call.
    pub(super) fn wake(self, host_id: uuid::Uuid) -> StoreResult<()> {
        match self {
            Self::Sqlite(_) => Ok(()),
            Self::Postgres(tx) => tx
                .defer(
                    "SELECT pg_notify($1, $2)",
                    rusqlite::params![WAKE_CHANNEL, host_id.to_string()],
                )
                .map_err(super::postgres::conn::sql("notify replicas")),
        }
    }

    /// The host's status; [`StoreError::UnknownHost`] when it is not enrolled (a writing
    /// PostgreSQL transaction locks the host row).
    pub(super) fn require_host(
        self,
        host_id: uuid::Uuid,
    ) -> StoreResult<bosun_proto::admin::HostStatus> {
        let statement = match self {
            Self::Postgres(pg) if pg.writes() => {
                "SELECT status FROM hosts WHERE host_id = ?1 FOR UPDATE"
            }
            _ => "SELECT status FROM hosts WHERE host_id = ?1",
        };
        let status: Option<String> = self.query_opt(
            "look up host",
            statement,
            rusqlite::params![host_id.to_string()],
            |r| r.get(0),
        )?;
        super::codec::host_status(&status.ok_or(StoreError::UnknownHost { host_id })?)
    }
}

/// `(?1, ?2, …), (…), …`: `rows` rows of the given SQL types, numbered from `?1`.
pub(super) fn values_rows(rows: usize, types: &[&str]) -> String {
    let mut text = String::with_capacity(rows * types.len() * 24);
    for row in 0..rows {
        if row > 0 {
            text.push_str(", ");
        }
        text.push('(');
        for (column, ty) in types.iter().enumerate() {
            if column > 0 {
                text.push_str(", ");
            }
            let n = row * types.len() + column + 1;
            text.push_str(&format!("CAST(?{n} AS {ty})"));
        }
        text.push(')');
    }
    text
}

/// How many of `left` items the next chunked statement takes: `chunk`, or for the last few
/// the largest power of two that fits, so a statement of any size uses few distinct texts
/// and each stays prepared.
pub(super) fn chunk_len(left: usize, chunk: usize) -> usize {
    if left >= chunk {
        chunk
    } else {
        1 << left.ilog2()
    }
}
