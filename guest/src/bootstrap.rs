//! Reading `bootstrap.json`.

use std::path::{Path, PathBuf};

use bosun_proto::bootstrap::Bootstrap;

/// Where the agent writes the bootstrap inside the guest (`pct push`, mode 0600, root).
pub const DEFAULT_PATH: &str = bosun_proto::helper::GUEST_BOOTSTRAP_PATH;

/// Why the bootstrap cannot be used (the controller then stays in setup mode).
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The file could not be read.
    #[error("failed to read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a `bosun.bootstrap/v1` document.
    #[error("{path} is not a valid bootstrap document")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The document parses but a field is wrong.
    #[error("{path} is invalid")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: bosun_proto::ValidationError,
    },
}

/// Reads and validates the bootstrap at `path`.
pub fn load_bootstrap(path: &Path) -> Result<Bootstrap, BootstrapError> {
    let text = std::fs::read_to_string(path).map_err(|source| BootstrapError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let doc: Bootstrap = serde_json::from_str(&text).map_err(|source| BootstrapError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    doc.validate().map_err(|source| BootstrapError::Invalid {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(doc)
}
