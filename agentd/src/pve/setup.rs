//! The Proxmox client an agent config describes, built in one place for the daemon and for
//! the offline commands (certificate rotation) alike.

use super::{NodeName, PveClient, PveConfig, PveError, RetryPolicy, TlsTrust};
use crate::config::PveSettings;

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
