//! [`Store`]: the journal's synchronous core, owned by the journal thread.
//!
//! Every write runs in one `BEGIN IMMEDIATE` transaction that also checks the
//! state it builds on, so a crash leaves either the whole change or none of it.

use std::path::Path;

use jiff::Timestamp;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, Transaction, TransactionBehavior};

use super::error::JournalError;
use super::records::OpId;
use super::schema;
use crate::clock::SharedClock;

/// How many compiled statements the journal keeps: more than the distinct ones a pass, a
/// poll and the schedulers run, so none of them is compiled again each time.
const STATEMENT_CACHE: usize = 64;

/// The journal database, used from one thread.
#[derive(Debug)]
pub struct Store {
    pub(super) conn: Connection,
    clock: SharedClock,
}

pub(super) fn to_ms(at: Timestamp) -> i64 {
    at.as_millisecond()
}

pub(super) fn from_ms(
    ms: i64,
    table: &'static str,
    column: &'static str,
) -> Result<Timestamp, JournalError> {
    Timestamp::from_millisecond(ms).map_err(|_| JournalError::Corrupt {
        table,
        column,
        value: ms.to_string(),
    })
}

pub(super) fn opt_from_ms(
    ms: Option<i64>,
    table: &'static str,
    column: &'static str,
) -> Result<Option<Timestamp>, JournalError> {
    ms.map(|ms| from_ms(ms, table, column)).transpose()
}

pub(super) fn opt_u32(
    value: Option<i64>,
    table: &'static str,
    column: &'static str,
) -> Result<Option<u32>, JournalError> {
    value
        .map(|v| {
            u32::try_from(v).map_err(|_| JournalError::Corrupt {
                table,
                column,
                value: v.to_string(),
            })
        })
        .transpose()
}

pub(super) fn parse_op_id(text: String, table: &'static str) -> Result<OpId, JournalError> {
    text.parse().map_err(|_| JournalError::Corrupt {
        table,
        column: "op_id",
        value: text,
    })
}

/// Creates the database file readable by the agent's user only (SQLite gives
/// its `-wal` and `-shm` files the same mode). An existing file is left as is.
fn create_private(path: &Path) -> Result<(), JournalError> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(JournalError::Create {
            path: path.to_path_buf(),
            source,
        }),
    }
}

pub(super) fn query_err(operation: &'static str) -> impl Fn(rusqlite::Error) -> JournalError {
    move |source| JournalError::Query { operation, source }
}

/// Every row `stmt` gives for `params`, each read as the tuple `T` of its columns in order;
/// a failure is `what`'s.
pub(super) fn tuple_rows<T>(
    stmt: &mut rusqlite::Statement<'_>,
    params: impl rusqlite::Params,
    what: &'static str,
) -> Result<Vec<T>, JournalError>
where
    T: for<'r> TryFrom<&'r rusqlite::Row<'r>, Error = rusqlite::Error>,
{
    stmt.query_map(params, |row| T::try_from(row))
        .map_err(query_err(what))?
        .collect::<Result<Vec<T>, _>>()
        .map_err(query_err(what))
}

impl Store {
    /// Opens (creating if needed) the journal at `path`: WAL, `synchronous=FULL`,
    /// foreign keys on, schema migrated.
    pub fn open(path: &Path, clock: SharedClock) -> Result<Self, JournalError> {
        let open_err = |source| JournalError::Open {
            path: path.to_path_buf(),
            source,
        };
        create_private(path)?;
        let mut conn = Connection::open(path).map_err(open_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(open_err)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(open_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(JournalError::NoWal {
                path: path.to_path_buf(),
                mode,
            });
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(open_err)?;
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(open_err)?;
        // The journal's hot pages are few (the open operations, the audit
        // head): a 512 KiB page cache instead of SQLite's 2 MiB default.
        conn.pragma_update(None, "cache_size", -512)
            .map_err(open_err)?;
        // The statements the agent's passes and polls read with stay compiled
        // (`prepare_cached`); compiling one costs more than running it.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        // Nor is one compiled again because a value bound to it changed: without the query
        // planner's stability guarantee, SQLite recompiles a statement whose plan a bound
        // value could change (a parameter compared where a partial index or a `LIMIT` looks)
        // at each new value. The journal's partial indexes are matched by literals.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .map_err(open_err)?;
        schema::migrate(&mut conn)?;
        Ok(Self { conn, clock })
    }

    /// The journal's clock reading.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Runs `f` in one immediate transaction and commits it.
    pub(super) fn write<T>(
        &mut self,
        operation: &'static str,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, JournalError>,
    ) -> Result<T, JournalError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(query_err(operation))?;
        let value = f(&tx)?;
        tx.commit().map_err(query_err(operation))?;
        Ok(value)
    }
}
