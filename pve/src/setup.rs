//! The Proxmox client a config file's `[pve]` table describes, built in one place for the
//! daemon and for the offline commands (certificate rotation) alike.

use std::path::PathBuf;

use secrecy::SecretString;
use url::Url;

use super::{NodeName, PveClient, PveConfig, PveError, RetryPolicy, TlsTrust};

/// The `[pve]` settings of a config file, as the client needs them: where the API is, the
/// token, and how to trust the certificate.
#[derive(Debug, Clone)]
pub struct PveSettings {
    /// API base, `https://host:8006/api2/json`.
    pub url: Url,
    /// The node to drive.
    pub node: String,
    /// `user@realm!tokenid`.
    pub token_id: String,
    /// The token's secret.
    pub token_secret: SecretString,
    /// Pinned certificate fingerprint (colon hex), if not a CA file.
    pub fingerprint: Option<String>,
    /// CA file, if not a pinned fingerprint.
    pub ca_file: Option<PathBuf>,
    /// Use the short test timings of the client (simulator runs).
    pub fast_retries: bool,
}

/// Why the `[pve]` settings do not make a usable client.
#[derive(Debug, thiserror::Error)]
pub enum PveSetupError {
    /// A setting is missing or invalid.
    #[error("config value {field} is invalid: {reason}")]
    Value {
        /// The key.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// The HTTPS client could not be built.
    #[error("setting up the proxmox client")]
    Client(#[source] PveError),
}

/// The Proxmox client the `[pve]` settings describe.
pub fn client_from_settings(settings: &PveSettings) -> Result<PveClient, PveSetupError> {
    let trust = match (&settings.fingerprint, &settings.ca_file) {
        (Some(fp), _) => TlsTrust::PinnedSha256(fp.clone()),
        (None, Some(ca)) => TlsTrust::CaFile(ca.clone()),
        (None, None) => {
            return Err(PveSetupError::Value {
                field: "pve.fingerprint",
                reason: "neither a fingerprint nor a CA file".into(),
            });
        }
    };
    let node = NodeName::new(settings.node.clone()).map_err(|e| PveSetupError::Value {
        field: "pve.node",
        reason: e.to_string(),
    })?;
    PveClient::new(PveConfig {
        base_url: settings.url.clone(),
        node,
        token_id: settings.token_id.clone(),
        token_secret: settings.token_secret.clone(),
        trust,
        policy: if settings.fast_retries {
            RetryPolicy::fast()
        } else {
            RetryPolicy::default()
        },
    })
    .map_err(PveSetupError::Client)
}
