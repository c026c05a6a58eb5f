//! `bosun.escrow/v1`: the recovery-code-wrapped PBS key the agent parks at the hub.
//!
//! The hub stores the blob as-is (last write wins) and cannot open it: the ciphertext is
//! wrapped under the customer's recovery code, which Bosun never stores.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::validate::{self, ValidationError};

/// The schema name of [`EscrowBlob`].
pub use crate::schema_ids::ESCROW as SCHEMA;
/// Largest accepted ciphertext.
pub const MAX_CIPHERTEXT_BYTES: usize = 64 * 1024;
// The OpenAPI schema states the bound as a literal (`max_length`).
const _: () = assert!(MAX_CIPHERTEXT_BYTES == 65_536);

/// An opaque escrow blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EscrowBlob {
    /// Always [`SCHEMA`].
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::escrow))]
    pub schema: String,
    /// How the ciphertext is wrapped.
    pub format: EscrowFormat,
    /// The host whose key is wrapped. The same id is sealed inside the ciphertext, so a
    /// blob handed to the wrong host is refused after unwrapping too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<Uuid>,
    /// Fingerprint of the wrapped key, so a recovery can confirm it unwrapped the right key:
    /// not blank, at most 128 bytes, no control characters.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 128, pattern = "^ *[!-~][ -~]*$")
    )]
    pub key_fingerprint: String,
    /// When the agent created the blob.
    pub created_at: Timestamp,
    /// The ASCII-armored ciphertext (an age file's armor, at most 64 KiB).
    #[cfg_attr(
        feature = "openapi",
        schema(
            max_length = 65_536,
            pattern = r"^-----BEGIN AGE ENCRYPTED FILE-----[\t\n\r -~]*$"
        )
    )]
    pub ciphertext: String,
}

/// Wrapping formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum EscrowFormat {
    /// `age` with an scrypt (passphrase) recipient, ASCII-armored.
    AgeScrypt,
}

impl EscrowBlob {
    /// Checks the blob's shape (it cannot check the contents).
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::schema(&self.schema, SCHEMA)?;
        validate::text(|| "key_fingerprint".into(), &self.key_fingerprint, 128)?;
        if self.ciphertext.is_empty() {
            return Err(ValidationError::Empty {
                field: "ciphertext".into(),
            });
        }
        validate::count("ciphertext", self.ciphertext.len(), MAX_CIPHERTEXT_BYTES)?;
        if !self
            .ciphertext
            .starts_with("-----BEGIN AGE ENCRYPTED FILE-----")
        {
            return Err(ValidationError::Invalid {
                field: "ciphertext".into(),
                reason: "expected an ASCII-armored age file".into(),
            });
        }
        Ok(())
    }
}
