//! Read-only connections beside the writer's. In WAL mode a reader sees the last committed
//! state and neither waits for the writer nor holds it up, so authenticating a poll, a
//! long-poll's wake-up or an operator's listing of 100,000 hosts never queues behind a batch
//! of polls being made durable (or a batch behind it).

use std::path::{Path, PathBuf};

use parking_lot::{Condvar, Mutex};
use rusqlite::{Connection, OpenFlags};

use crate::store::{StoreError, StoreResult};

/// Most read connections open at once; further readers wait for one.
pub(in crate::store) const MAX_READERS: usize = 4;

/// A small pool of read-only connections.
#[derive(Debug)]
pub(in crate::store) struct Readers {
    path: PathBuf,
    pool: Mutex<Pool>,
    returned: Condvar,
}

#[derive(Debug, Default)]
struct Pool {
    idle: Vec<Connection>,
    open: usize,
}

impl Readers {
    /// Readers of the database at `path` (opened on first use).
    pub(in crate::store) fn new(path: &Path) -> Self {
        Self {
            path: path.to_owned(),
            pool: Mutex::new(Pool::default()),
            returned: Condvar::new(),
        }
    }

    /// Runs `f` on a read connection.
    pub(in crate::store) fn with<R>(
        &self,
        f: impl FnOnce(&mut Connection) -> StoreResult<R>,
    ) -> StoreResult<R> {
        let mut lease = Lease {
            readers: self,
            conn: Some(self.take()?),
        };
        let conn = lease.conn.as_mut().ok_or(StoreError::Corrupt {
            what: "read connection",
            reason: "lease without a connection".to_owned(),
        })?;
        f(conn)
    }

    fn take(&self) -> StoreResult<Connection> {
        let mut pool = self.pool.lock();
        loop {
            if let Some(conn) = pool.idle.pop() {
                return Ok(conn);
            }
            if pool.open < MAX_READERS {
                pool.open += 1;
                drop(pool);
                return self.open().inspect_err(|_| self.pool.lock().open -= 1);
            }
            self.returned.wait(&mut pool);
        }
    }

    fn open(&self) -> StoreResult<Connection> {
        let open_err = |source| StoreError::Open {
            path: self.path.clone(),
            source,
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        // A reader keeps its memory map across the writer's commits (`keep_map.rs`).
        let conn = if super::keep_map::register() {
            Connection::open_with_flags_and_vfs(&self.path, flags, super::keep_map::VFS_NAME)
        } else {
            Connection::open_with_flags(&self.path, flags)
        }
        .map_err(open_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(open_err)?;
        conn.pragma_update(None, "mmap_size", super::MMAP_BYTES)
            .map_err(open_err)?;
        conn.set_prepared_statement_cache_capacity(super::STATEMENT_CACHE);
        super::plan_once(&conn).map_err(open_err)?;
        Ok(conn)
    }

    /// A read connection of the pool's kind, outside the pool (for tests).
    #[cfg(test)]
    pub(in crate::store) fn open_one(&self) -> StoreResult<Connection> {
        self.open()
    }

    /// How many read connections are open (for tests).
    #[cfg(test)]
    pub(in crate::store) fn open_count(&self) -> usize {
        self.pool.lock().open
    }
}

/// A connection taken from the pool; it goes back when the lease ends, also on a panic.
struct Lease<'a> {
    readers: &'a Readers,
    conn: Option<Connection>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut pool = self.readers.pool.lock();
        match self.conn.take() {
            Some(conn) if !std::thread::panicking() => pool.idle.push(conn),
            // A connection left mid-way by a panic is closed, not reused.
            _ => pool.open -= 1,
        }
        drop(pool);
        self.readers.returned.notify_one();
    }
}
