//! Why the agent's configuration cannot be used: one error for the whole file, which each
//! feature's settings (beside the feature, e.g. `controller::settings`) return too. It
//! depends on nothing else in the crate, so those settings can use it without importing
//! the configuration that gathers them.

use std::path::PathBuf;

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("failed to read the agent config {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape.
    #[error("the agent config {path} is malformed")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: Box<toml::de::Error>,
    },
    /// A value is out of range or inconsistent.
    #[error("agent config: {field} {reason}")]
    Invalid {
        /// The offending key.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A secret file could not be read.
    #[error("failed to read the secret file {path} named by {field}")]
    SecretFile {
        /// The key naming the file.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The error for `field` holding a value out of its bounds.
pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.into(),
    }
}
