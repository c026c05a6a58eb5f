//! Secrets carried on the wire (tokens and keys) with a redacting `Debug`.

use serde::{Deserialize, Serialize};

/// A bearer secret (enrollment token, host API key, local API token).
///
/// `Debug` prints `[REDACTED]` so the value never reaches a log by accident; read it with
/// [`SecretToken::expose`] only where it is sent or hashed.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretToken(String);

impl SecretToken {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value itself. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretToken([REDACTED])")
    }
}
