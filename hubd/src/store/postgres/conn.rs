//! The PostgreSQL store's statement layer: a bounded pool of `tokio-postgres` connections, each
//! driven on the calling thread by a runtime of its own (so a statement costs no hand-off
//! between threads) and each with its own statement cache, prepared once per connection; and
//! one transaction on one of them, which sends the statements whose answers nobody reads
//! together with the next one (one round trip for both).
//!
//! The PostgreSQL modules (`pg_*.rs`) share the SQLite modules' shape: parameters are given
//! with rusqlite's `params!` (integers, text, blobs, nulls) and rows are read with rusqlite's
//! `FromSql`, so a value reads back the same from either store. [`PgParam`] sends each value
//! as the type PostgreSQL inferred for its placeholder (`BIGINT`, `INTEGER`, `BOOLEAN`,
//! `TEXT`, `BYTEA`); a pairing that makes no sense is an error, never a guess.

use std::cell::RefCell;
use std::collections::HashMap;
use std::error::Error as StdError;
use std::time::Duration;

use bytes::BytesMut;
use parking_lot::{Condvar, Mutex};
use rusqlite::types::{FromSql, Value, ValueRef};
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

pub use super::super::error::PgError;
use super::super::error::StoreError;

/// The channel replicas wake each other's held long-polls on; the payload is the host id.
pub const WAKE_CHANNEL: &str = "bosun_wake";

/// Maps a PostgreSQL error to [`StoreError::Postgres`] for operation `op`.
pub(in crate::store) fn sql<E: Into<PgError>>(op: &'static str) -> impl Fn(E) -> StoreError {
    move |source| StoreError::Postgres {
        op,
        source: source.into(),
    }
}

/// `Option` for a query that may find no row.
pub(in crate::store) trait OptionalExtension<T> {
    /// `Ok(None)` instead of [`PgError::NoRows`].
    fn optional(self) -> Result<Option<T>, PgError>;
}

impl<T> OptionalExtension<T> for Result<T, PgError> {
    fn optional(self) -> Result<Option<T>, PgError> {
        match self {
            Ok(value) => Ok(Some(value)),
            Err(PgError::NoRows) => Ok(None),
            Err(err) => Err(err),
        }
    }
}

/// One parameter, sent as the type the server expects for its placeholder.
#[derive(Debug)]
pub(in crate::store) struct PgParam(Value);

impl PgParam {
    /// The value, as given.
    pub(in crate::store) fn into_value(self) -> Value {
        self.0
    }
}

impl ToSql for PgParam {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match &self.0 {
            Value::Null => Ok(IsNull::Yes),
            Value::Integer(n) => match *ty {
                Type::INT8 => n.to_sql(ty, out),
                Type::INT4 => i32::try_from(*n)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*n)?.to_sql(ty, out),
                Type::BOOL => (*n != 0).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => n.to_string().to_sql(ty, out),
                _ => Err(format!("an integer cannot be sent as {ty}").into()),
            },
            Value::Real(x) => match *ty {
                Type::FLOAT8 => x.to_sql(ty, out),
                _ => Err(format!("a real cannot be sent as {ty}").into()),
            },
            Value::Text(text) => match *ty {
                Type::BYTEA => text.as_bytes().to_sql(ty, out),
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    text.as_str().to_sql(ty, out)
                }
                _ => Err(format!("text cannot be sent as {ty}").into()),
            },
            Value::Blob(bytes) => match *ty {
                Type::BYTEA => bytes.as_slice().to_sql(ty, out),
                _ => Err(format!("a blob cannot be sent as {ty}").into()),
            },
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// A fetched row: its values as rusqlite reads them.
#[derive(Debug)]
pub(in crate::store) struct PgRow(Vec<Value>);

impl PgRow {
    /// Decodes a row as rusqlite would read it.
    pub(in crate::store) fn decode(row: &tokio_postgres::Row) -> Result<Self, PgError> {
        let mut values = Vec::with_capacity(row.len());
        for (index, column) in row.columns().iter().enumerate() {
            let value = match *column.type_() {
                Type::INT8 => row.try_get::<_, Option<i64>>(index)?.map(Value::Integer),
                Type::INT4 => row
                    .try_get::<_, Option<i32>>(index)?
                    .map(|n| Value::Integer(n.into())),
                Type::INT2 => row
                    .try_get::<_, Option<i16>>(index)?
                    .map(|n| Value::Integer(n.into())),
                Type::BOOL => row
                    .try_get::<_, Option<bool>>(index)?
                    .map(|b| Value::Integer(b.into())),
                Type::FLOAT8 => row.try_get::<_, Option<f64>>(index)?.map(Value::Real),
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
                    row.try_get::<_, Option<String>>(index)?.map(Value::Text)
                }
                Type::BYTEA => row.try_get::<_, Option<Vec<u8>>>(index)?.map(Value::Blob),
                ref other => {
                    return Err(PgError::ColumnType {
                        index,
                        ty: other.name().to_owned(),
                    });
                }
            };
            values.push(value.unwrap_or(Value::Null));
        }
        Ok(Self(values))
    }

    /// Column `index` as `T`.
    pub(in crate::store) fn get<I: ColumnIndex, T: FromSql>(
        &self,
        index: I,
    ) -> rusqlite::Result<T> {
        let index = index.index();
        let value = self
            .0
            .get(index)
            .ok_or(rusqlite::Error::InvalidColumnIndex(index))?;
        T::column_result(ValueRef::from(value)).map_err(|err| {
            rusqlite::Error::FromSqlConversionFailure(
                index,
                ValueRef::from(value).data_type(),
                Box::new(err),
            )
        })
    }
}

/// A column number (as written in the SQLite modules: a literal, or a `usize`).
pub(in crate::store) trait ColumnIndex {
    /// As a `usize`.
    fn index(self) -> usize;
}

impl ColumnIndex for usize {
    fn index(self) -> usize {
        self
    }
}

impl ColumnIndex for i32 {
    fn index(self) -> usize {
        usize::try_from(self).unwrap_or(usize::MAX)
    }
}

/// Turns rusqlite parameters into PostgreSQL ones.
pub(in crate::store) fn convert(params: &[&dyn rusqlite::ToSql]) -> Result<Vec<PgParam>, PgError> {
    params
        .iter()
        .map(|param| {
            let value = match param.to_sql()? {
                rusqlite::types::ToSqlOutput::Borrowed(value) => match value {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(n) => Value::Integer(n),
                    ValueRef::Real(x) => Value::Real(x),
                    ValueRef::Text(text) => Value::Text(String::from_utf8_lossy(text).into_owned()),
                    ValueRef::Blob(bytes) => Value::Blob(bytes.to_vec()),
                },
                rusqlite::types::ToSqlOutput::Owned(value) => value,
                _ => {
                    return Err(PgError::Value(rusqlite::Error::ToSqlConversionFailure(
                        "a parameter kind PostgreSQL does not take".into(),
                    )));
                }
            };
            Ok(PgParam(value))
        })
        .collect()
}

/// One connection and the statements prepared on it. The connection is driven on the calling
/// thread by a runtime of its own (as the blocking `postgres` client does), so statements
/// issued together go to the server in one write and their answers come back in one flight.
pub(in crate::store) struct Conn {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    statements: HashMap<String, tokio_postgres::Statement>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("statements", &self.statements.len())
            .finish_non_exhaustive()
    }
}

impl Conn {
    /// Connects.
    pub(in crate::store) fn connect(config: &tokio_postgres::Config) -> Result<Self, PgError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| PgError::Pool(format!("starting a connection's runtime: {e}")))?;
        let (client, connection) = rt.block_on(config.connect(tokio_postgres::NoTls))?;
        // Runs whenever the thread waits for an answer in `block_on`.
        rt.spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, "database connection closed");
            }
        });
        Ok(Self {
            rt,
            client,
            statements: HashMap::new(),
        })
    }

    /// Whether the connection is gone.
    pub(in crate::store) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    fn statement(&mut self, sql: &str) -> Result<tokio_postgres::Statement, PgError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        // Statements written once for both stores use `?N`; PostgreSQL's are `$N`.
        let text = super::super::retention::dollar_placeholders(sql);
        let statement = self.rt.block_on(self.client.prepare(&text))?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Sends the `deferred` statements and then `last`, all in one flight, and waits for every
    /// answer; the first error wins.
    fn run<T>(
        &self,
        deferred: Vec<Deferred>,
        last: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, PgError> {
        self.rt.block_on(async {
            let client = &self.client;
            // Each request is queued when its future is first polled: `join_all` polls them
            // in order before `last`, so the server sees them in order.
            let sent = futures::future::join_all(deferred.iter().map(|d| async move {
                let refs: Vec<&(dyn ToSql + Sync)> =
                    d.params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
                match &d.rows {
                    None => client.execute(&d.statement, &refs).await.map(|_| ()),
                    // Each deferred statement is sent once: the slot is empty.
                    Some(slot) => client
                        .query(&d.statement, &refs)
                        .await
                        .map(|rows| drop(slot.0.set(rows))),
                }
            }));
            let (earlier, last) = futures::future::join(sent, last).await;
            for outcome in earlier {
                outcome?;
            }
            Ok(last?)
        })
    }
}

/// A statement sent with the next one (see [`PgTx::defer`]), its rows kept when asked
/// ([`PgTx::defer_rows`]).
#[derive(Debug)]
struct Deferred {
    statement: tokio_postgres::Statement,
    params: Vec<PgParam>,
    rows: Option<Later>,
}

/// The rows of a statement sent with the next one ([`PgTx::defer_rows`]): set once the
/// flight it went in was answered without error.
#[derive(Debug, Clone, Default)]
pub(in crate::store) struct Later(std::rc::Rc<std::cell::OnceCell<Vec<tokio_postgres::Row>>>);

impl Later {
    /// The rows, decoded; `None` when the statement was not answered.
    pub(in crate::store) fn rows(&self) -> Option<Result<Vec<PgRow>, PgError>> {
        self.0
            .get()
            .map(|rows| rows.iter().map(PgRow::decode).collect())
    }
}

/// A bounded pool of [`Conn`]s: at most `max` open, idle ones kept.
#[derive(Debug)]
pub(in crate::store) struct Pool {
    config: tokio_postgres::Config,
    max: usize,
    state: Mutex<PoolState>,
    freed: Condvar,
}

#[derive(Debug, Default)]
struct PoolState {
    idle: Vec<Conn>,
    open: usize,
}

impl Pool {
    pub(in crate::store) fn new(config: tokio_postgres::Config, max: usize) -> Self {
        Self {
            config,
            max,
            state: Mutex::new(PoolState::default()),
            freed: Condvar::new(),
        }
    }

    /// The idle connections, taken out (to be closed).
    pub(in crate::store) fn take_idle(&self) -> Vec<Conn> {
        let mut state = self.state.lock();
        let idle = std::mem::take(&mut state.idle);
        state.open -= idle.len();
        idle
    }

    /// An idle connection, a new one, or (with `max` open) the next one given back, waiting
    /// at most 30 s.
    pub(in crate::store) fn get(&self) -> Result<Pooled<'_>, PgError> {
        let mut state = self.state.lock();
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(Pooled {
                    pool: self,
                    conn: Some(conn),
                });
            }
            if state.open < self.max {
                state.open += 1;
                drop(state);
                return match Conn::connect(&self.config) {
                    Ok(conn) => Ok(Pooled {
                        pool: self,
                        conn: Some(conn),
                    }),
                    Err(err) => {
                        self.state.lock().open -= 1;
                        self.freed.notify_one();
                        Err(err)
                    }
                };
            }
            if self
                .freed
                .wait_for(&mut state, Duration::from_secs(30))
                .timed_out()
            {
                return Err(PgError::Pool(format!(
                    "all {} connections stayed busy for 30 s",
                    self.max
                )));
            }
        }
    }
}

/// A connection taken from a [`Pool`]; given back on drop (dropped if it broke).
#[derive(Debug)]
pub(in crate::store) struct Pooled<'p> {
    pool: &'p Pool,
    conn: Option<Conn>,
}

impl Pooled<'_> {
    /// The connection.
    pub(in crate::store) fn conn(&mut self) -> &mut Conn {
        match self.conn.as_mut() {
            Some(conn) => conn,
            None => unreachable!("a pooled connection is held until dropped"),
        }
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        let mut state = self.pool.state.lock();
        if conn.is_closed() {
            state.open -= 1;
        } else {
            state.idle.push(conn);
        }
        drop(state);
        self.pool.freed.notify_one();
    }
}

/// An open transaction (or read snapshot) on one connection. Statements whose answer nobody
/// reads (the transaction's `BEGIN`, a poll's `UPDATE`, a `NOTIFY`) wait and go with the next
/// statement, so a heartbeat costs two round trips: `BEGIN` with the host row's read, and the
/// row's write with the `COMMIT`.
#[derive(Debug)]
pub(in crate::store) struct PgTx<'a> {
    conn: RefCell<&'a mut Conn>,
    deferred: RefCell<Vec<Deferred>>,
    writes: bool,
}

impl<'a> PgTx<'a> {
    /// Wraps a connection; `writes`: the transactions it runs may write (and lock rows).
    pub(in crate::store) fn new(conn: &'a mut Conn, writes: bool) -> Self {
        Self {
            conn: RefCell::new(conn),
            deferred: RefCell::new(Vec::new()),
            writes,
        }
    }

    /// Whether the transaction may write (a read-only snapshot locks nothing).
    pub(in crate::store) fn writes(&self) -> bool {
        self.writes
    }

    /// Queues a statement to be sent with the next one (prepared now, once per connection);
    /// its error, if any, is that next statement's.
    pub(in crate::store) fn defer(
        &self,
        sql: &str,
        params: &[&dyn rusqlite::ToSql],
    ) -> Result<(), PgError> {
        self.push(sql, params, None)
    }

    /// [`Self::defer`], keeping the statement's rows (a `RETURNING` clause's) for after the
    /// flight it goes in.
    pub(in crate::store) fn defer_rows(
        &self,
        sql: &str,
        params: &[&dyn rusqlite::ToSql],
    ) -> Result<Later, PgError> {
        let later = Later::default();
        self.push(sql, params, Some(later.clone()))?;
        Ok(later)
    }

    fn push(
        &self,
        sql: &str,
        params: &[&dyn rusqlite::ToSql],
        rows: Option<Later>,
    ) -> Result<(), PgError> {
        let params = convert(params)?;
        let statement = self.conn.borrow_mut().statement(sql)?;
        self.deferred.borrow_mut().push(Deferred {
            statement,
            params,
            rows,
        });
        Ok(())
    }

    /// Sends the queued statements now (when one's outcome decides what comes next).
    pub(in crate::store) fn flush(&self) -> Result<(), PgError> {
        let deferred = self.deferred.take();
        if deferred.is_empty() {
            return Ok(());
        }
        let conn = self.conn.borrow();
        conn.run(deferred, async { Ok(()) })
    }

    /// Forgets the queued statements (the transaction is being rolled back).
    pub(in crate::store) fn discard(&self) {
        self.deferred.borrow_mut().clear();
    }

    /// Runs statements without parameters (transaction control, migrations), after the
    /// queued ones.
    pub(in crate::store) fn batch(&self, sql: &str) -> Result<(), PgError> {
        let deferred = self.deferred.take();
        let conn = self.conn.borrow();
        conn.run(deferred, conn.client.batch_execute(sql))
    }

    fn rows(
        &self,
        sql: &str,
        params: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<tokio_postgres::Row>, PgError> {
        let params = convert(params)?;
        let refs: Vec<&(dyn ToSql + Sync)> =
            params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        let statement = self.conn.borrow_mut().statement(sql)?;
        let deferred = self.deferred.take();
        let conn = self.conn.borrow();
        conn.run(deferred, conn.client.query(&statement, &refs))
    }

    /// Runs a statement; returns how many rows it changed.
    pub(in crate::store) fn execute(
        &self,
        sql: &str,
        params: &[&dyn rusqlite::ToSql],
    ) -> Result<usize, PgError> {
        let params = convert(params)?;
        let refs: Vec<&(dyn ToSql + Sync)> =
            params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        let statement = self.conn.borrow_mut().statement(sql)?;
        let deferred = self.deferred.take();
        let conn = self.conn.borrow();
        let changed = conn.run(deferred, conn.client.execute(&statement, &refs))?;
        Ok(usize::try_from(changed).unwrap_or(usize::MAX))
    }

    /// The first row, mapped; [`PgError::NoRows`] when there is none.
    pub(in crate::store) fn query_row<T>(
        &self,
        sql: &str,
        params: &[&dyn rusqlite::ToSql],
        f: impl FnOnce(&PgRow) -> rusqlite::Result<T>,
    ) -> Result<T, PgError> {
        let rows = self.rows(sql, params)?;
        let row = rows.first().ok_or(PgError::NoRows)?;
        Ok(f(&PgRow::decode(row)?)?)
    }

    /// A statement to run (statements are cached per connection).
    pub(in crate::store) fn prepare_cached<'s>(
        &'s self,
        sql: &str,
    ) -> Result<PgStmt<'s, 'a>, PgError> {
        Ok(PgStmt {
            tx: self,
            sql: sql.to_owned(),
        })
    }
}

/// A statement of a [`PgTx`].
#[derive(Debug)]
pub(in crate::store) struct PgStmt<'s, 'a> {
    tx: &'s PgTx<'a>,
    sql: String,
}

impl PgStmt<'_, '_> {
    /// Every row, mapped.
    pub(in crate::store) fn query_map<T>(
        &mut self,
        params: &[&dyn rusqlite::ToSql],
        mut f: impl FnMut(&PgRow) -> rusqlite::Result<T>,
    ) -> Result<std::vec::IntoIter<Result<T, PgError>>, PgError> {
        let rows = self.tx.rows(&self.sql, params)?;
        let mapped: Vec<Result<T, PgError>> = rows
            .iter()
            .map(|row| Ok(f(&PgRow::decode(row)?)?))
            .collect();
        Ok(mapped.into_iter())
    }
}
