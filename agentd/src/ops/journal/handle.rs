//! [`JournalHandle`]: the async side of the journal. SQLite is owned by one thread; each
//! call sends a closure over a channel to that thread and awaits the answer, so no async
//! task ever blocks on SQLite.
//!
//! Each table's module adds the handle's methods for its own [`Store`] methods with
//! [`journal_calls!`]: one line per method, which runs the `Store` method on the thread.

use std::path::Path;
use std::sync::{Arc, mpsc};

use tokio::sync::{oneshot, watch};

use super::error::JournalError;
use super::store::Store;
use crate::clock::SharedClock;

type Job = Box<dyn FnOnce(&mut Store) + Send>;

enum Command {
    Run(Job),
    Close(oneshot::Sender<()>),
}

/// A cloneable async handle to the journal thread.
///
/// Once the thread has stopped (after [`JournalHandle::close`], or if a call
/// panicked on it) every call returns [`JournalError::Closed`]; the agent
/// cannot act safely without its journal and should shut down.
#[derive(Debug, Clone)]
pub struct JournalHandle {
    tx: mpsc::Sender<Command>,
    /// Counts backup outcomes recorded through this handle (and its clones).
    pub(super) backups: Arc<watch::Sender<u64>>,
    /// Counts changes to which guest holds which vmid made through this handle (and its clones).
    pub(super) guests: Arc<watch::Sender<u64>>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Run(_) => f.write_str("Run"),
            Command::Close(_) => f.write_str("Close"),
        }
    }
}

impl JournalHandle {
    /// Opens the journal at `path` on a new dedicated thread.
    pub async fn open(path: &Path, clock: SharedClock) -> Result<Self, JournalError> {
        let (tx, rx) = mpsc::channel::<Command>();
        let (opened_tx, opened_rx) = oneshot::channel();
        let path = path.to_path_buf();
        std::thread::Builder::new()
            .name("journal".to_owned())
            .spawn(move || {
                let mut store = match Store::open(&path, clock) {
                    Ok(store) => {
                        let _ = opened_tx.send(Ok(()));
                        store
                    }
                    Err(err) => {
                        let _ = opened_tx.send(Err(err));
                        return;
                    }
                };
                tracing::debug!(path = %path.display(), "journal open");
                while let Ok(command) = rx.recv() {
                    match command {
                        Command::Run(job) => job(&mut store),
                        Command::Close(done) => {
                            drop(store);
                            let _ = done.send(());
                            return;
                        }
                    }
                }
            })
            .map_err(JournalError::Spawn)?;
        opened_rx.await.map_err(|_| JournalError::Closed)??;
        Ok(Self {
            tx,
            backups: Arc::new(watch::Sender::new(0)),
            guests: Arc::new(watch::Sender::new(0)),
        })
    }

    /// Runs `f` on the journal thread and returns its result.
    pub async fn call<T, F>(&self, f: F) -> Result<T, JournalError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Store) -> Result<T, JournalError> + Send + 'static,
    {
        let (reply_tx, reply_rx) = oneshot::channel();
        let job: Job = Box::new(move |store| {
            let _ = reply_tx.send(f(store));
        });
        self.tx
            .send(Command::Run(job))
            .map_err(|_| JournalError::Closed)?;
        reply_rx.await.map_err(|_| JournalError::Closed)?
    }

    /// Closes the database (checkpointing the WAL) and stops the thread.
    /// Calls from other clones fail with [`JournalError::Closed`] afterwards.
    pub async fn close(&self) -> Result<(), JournalError> {
        let (done_tx, done_rx) = oneshot::channel();
        self.tx
            .send(Command::Close(done_tx))
            .map_err(|_| JournalError::Closed)?;
        done_rx.await.map_err(|_| JournalError::Closed)
    }

    /// The journal's clock reading (the time its records are stamped with).
    pub async fn now(&self) -> Result<jiff::Timestamp, JournalError> {
        self.call(|s| Ok(s.now())).await
    }
}

/// Adds [`JournalHandle`] methods that each run one [`Store`] method on the journal thread:
///
/// ```text
/// journal_calls! {
///     /// See [`Store::floor`].
///     fn floor() -> Option<StoredFloor> = |s| s.floor();
/// }
/// ```
///
/// is `pub async fn floor(&self) -> Result<Option<StoredFloor>, JournalError>` calling
/// `self.call(move |s| s.floor())`. The arguments are moved into the closure; the names
/// used (`JournalHandle`, `JournalError`, the argument types) are the calling module's.
macro_rules! journal_calls {
    ($(
        $(#[$meta:meta])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $out:ty = |$s:ident| $body:expr;
    )*) => {
        impl JournalHandle {
            $(
                $(#[$meta])*
                pub async fn $name(&self, $($arg: $ty),*) -> Result<$out, JournalError> {
                    self.call(move |$s| $body).await
                }
            )*
        }
    };
}
pub(super) use journal_calls;
