//! An operator-signed document as it travels through the hub: the exact bytes the operator
//! signed with `ssh-keygen -Y sign` and the armored signature. The hub forwards both
//! untouched; the agent checks the signature against its `allowed_signers` before it acts
//! on the document. Golden archives ([`crate::golden`]) and retention floors
//! ([`crate::retention`]) travel this way.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::validate::ValidationError;

/// Longest armored signature accepted.
pub const MAX_SIGNATURE: usize = 8192;

/// Signed bytes and their signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SignedDocument {
    /// The signed document bytes, standard base64.
    pub document: String,
    /// The armored signature (`-----BEGIN SSH SIGNATURE-----` …).
    pub signature: String,
}

impl SignedDocument {
    /// Wraps the exact bytes that were signed and their armored signature.
    pub fn new(document: &[u8], signature: &str) -> Self {
        Self {
            document: STANDARD.encode(document),
            signature: signature.to_owned(),
        }
    }

    /// The exact signed bytes, at most `max` of them; errors name `field`.
    pub fn bytes_within(&self, field: &str, max: usize) -> Result<Vec<u8>, ValidationError> {
        if self.document.len() > max.div_ceil(3) * 4 {
            return Err(ValidationError::Invalid {
                field: format!("{field}.document"),
                reason: format!("longer than {max} bytes"),
            });
        }
        STANDARD
            .decode(self.document.as_bytes())
            .map_err(|e| ValidationError::Invalid {
                field: format!("{field}.document"),
                reason: format!("not standard base64: {e}"),
            })
    }

    /// Checks the sizes and decodes the document as JSON of `schema`; errors name `field`.
    /// The signature itself is checked by the agent.
    pub fn decode<T: DeserializeOwned>(
        &self,
        field: &str,
        schema: &str,
        max: usize,
    ) -> Result<T, ValidationError> {
        if self.signature.len() > MAX_SIGNATURE {
            return Err(ValidationError::Invalid {
                field: format!("{field}.signature"),
                reason: format!("longer than {MAX_SIGNATURE} bytes"),
            });
        }
        let bytes = self.bytes_within(field, max)?;
        serde_json::from_slice(&bytes).map_err(|e| ValidationError::Invalid {
            field: format!("{field}.document"),
            reason: format!("not a {schema} document: {e}"),
        })
    }
}
