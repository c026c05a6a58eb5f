//! The state directory's lock: one `bosun-agentd` daemon or one offline command (such as
//! `rotate-local-api-cert`) works on a state directory at a time.

use std::fs::File;
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;

/// The lock file inside the state directory.
pub const LOCK_FILE: &str = "agentd.lock";

/// An exclusive lock on the state directory, held by the daemon or an offline command.
/// Released when dropped (or when the process dies).
#[derive(Debug)]
pub struct StateLock {
    _file: File,
}

/// Why the state directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The lock file could not be opened.
    #[error("opening the lock file {path}")]
    Open {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Someone holds the lock in a conflicting mode.
    #[error("{path} is locked by another process: the agent, or a bosun-agentctl command")]
    Held {
        /// The lock file.
        path: PathBuf,
    },
}

impl StateLock {
    /// Takes the lock, or says who holds it: one daemon or one offline command at a time.
    pub fn exclusive(state_dir: &Path) -> Result<Self, LockError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = state_dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|source| LockError::Open {
                path: path.clone(),
                source,
            })?;
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Self { _file: file }),
            Err(rustix::io::Errno::WOULDBLOCK) => Err(LockError::Held { path }),
            Err(e) => Err(LockError::Open {
                path,
                source: e.into(),
            }),
        }
    }
}
