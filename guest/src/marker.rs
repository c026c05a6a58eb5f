//! The quiesce marker: written (and synced) **before** any app is stopped and updated
//! before each stop, so after a crash the next start knows exactly which apps to restart.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The marker's content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// The process that wrote it.
    pub pid: u32,
    /// Apps stopped, in stop order.
    pub stopped: Vec<String>,
    /// The app whose stop hook is running (it may be half stopped).
    pub stopping: Option<String>,
}

impl Marker {
    /// Every app that may be down: the stopped ones and the one being stopped.
    pub fn to_restart(&self) -> Vec<String> {
        let mut apps = self.stopped.clone();
        if let Some(app) = &self.stopping
            && !apps.contains(app)
        {
            apps.push(app.clone());
        }
        apps
    }
}

/// Why the marker could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum MarkerError {
    /// Reading failed.
    #[error("failed to read the quiesce marker {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Writing failed.
    #[error("failed to write the quiesce marker {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file does not parse.
    #[error("the quiesce marker {path} is damaged")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

/// Reads the marker, if there is one.
pub fn read(path: &Path) -> Result<Option<Marker>, MarkerError> {
    match std::fs::read(path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| MarkerError::Parse {
                    path: path.to_path_buf(),
                    source,
                })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(MarkerError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Writes the marker atomically and durably (temp file, fsync, rename, fsync the directory).
pub fn write(path: &Path, marker: &Marker) -> Result<(), MarkerError> {
    let err = |source| MarkerError::Write {
        path: path.to_path_buf(),
        source,
    };
    let bytes = serde_json::to_vec(marker).map_err(|e| err(std::io::Error::other(e)))?;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp).map_err(err)?;
    file.write_all(&bytes).map_err(err)?;
    file.sync_all().map_err(err)?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(err)?;
    sync_dir(path);
    Ok(())
}

/// Removes the marker (durably).
pub fn remove(path: &Path) -> Result<(), MarkerError> {
    match std::fs::remove_file(path) {
        Ok(()) => {
            sync_dir(path);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(MarkerError::Write {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent()
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
}
