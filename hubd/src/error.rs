//! What can stop the hub from starting or serving.

use std::path::PathBuf;

use crate::store::StoreError;
use crate::tls;

/// Errors starting or running the hub.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// Creating the data directory failed.
    #[error("creating data directory {path}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The store failed.
    #[error("hub store")]
    Store(#[source] StoreError),
    /// TLS setup failed.
    #[error("hub TLS")]
    Tls(#[source] tls::TlsError),
    /// Binding or serving the listener failed.
    #[error("serving on {addr}")]
    Serve {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Building the webhook client failed.
    #[error("building the webhook HTTP client")]
    WebhookClient(#[source] reqwest::Error),
    /// A blocking task panicked or was cancelled.
    #[error("blocking task for {what} failed")]
    Blocking {
        /// What it was doing.
        what: &'static str,
        /// Why.
        #[source]
        source: tokio::task::JoinError,
    },
}
