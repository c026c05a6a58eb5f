//! `bosun.golden/v1`: an operator's signed statement that a golden archive may seed new
//! guests. The exact document bytes are signed with `ssh-keygen -Y sign -n bosun-golden@v1`
//! and travel inside the desired state's `golden` entry ([`crate::desired::GoldenArchive`]),
//! so the hub forwards the operator's choice but cannot make one (DESIGN §5: the golden
//! archive is code and data baked into customer guests).

use serde::{Deserialize, Serialize};

use crate::signed::SignedDocument;
use crate::validate::ValidationError;

/// Schema of [`GoldenDocument`].
pub const GOLDEN_SCHEMA: &str = "bosun.golden/v1";

/// The SSHSIG namespace of golden-archive signatures.
pub const GOLDEN_NAMESPACE: &str = "bosun-golden@v1";

/// Longest signed document accepted (bytes, before base64).
pub const MAX_GOLDEN_DOCUMENT: usize = 4096;

/// What the operator signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GoldenDocument {
    /// Always [`GOLDEN_SCHEMA`].
    pub schema: String,
    /// The archive's Proxmox volume id.
    pub volid: String,
    /// SHA-256 of the archive's bytes, 64 lowercase hex digits.
    pub sha256: String,
}

impl GoldenDocument {
    /// A document naming `volid` with `sha256`.
    pub fn new(volid: &str, sha256: &str) -> Self {
        Self {
            schema: GOLDEN_SCHEMA.to_owned(),
            volid: volid.to_owned(),
            sha256: sha256.to_ascii_lowercase(),
        }
    }

    /// Checks the schema and the hash's shape.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.schema != GOLDEN_SCHEMA {
            return Err(ValidationError::WrongSchema {
                expected: GOLDEN_SCHEMA,
                found: self.schema.chars().take(64).collect(),
            });
        }
        if !is_sha256(&self.sha256) {
            return Err(ValidationError::Invalid {
                field: "sha256".into(),
                reason: "expected 64 lowercase hex digits".into(),
            });
        }
        if self.volid.is_empty() || self.volid.len() > 255 || !self.volid.contains(':') {
            return Err(ValidationError::Invalid {
                field: "volid".into(),
                reason: "expected a Proxmox volume id `storage:path`".into(),
            });
        }
        Ok(())
    }
}

/// A signed [`GoldenDocument`] as it travels.
pub type SignedGolden = SignedDocument;

impl SignedDocument {
    /// The exact signed bytes of a golden document, within [`MAX_GOLDEN_DOCUMENT`].
    pub fn golden_bytes(&self) -> Result<Vec<u8>, ValidationError> {
        self.bytes_within(FIELD, MAX_GOLDEN_DOCUMENT)
    }

    /// Checks sizes and that the document decodes to a valid [`GoldenDocument`]; gives it.
    /// The signature itself is checked by the agent against its `allowed_signers`.
    pub fn golden(&self) -> Result<GoldenDocument, ValidationError> {
        let document: GoldenDocument = self.decode(FIELD, GOLDEN_SCHEMA, MAX_GOLDEN_DOCUMENT)?;
        document.validate()?;
        Ok(document)
    }
}

/// The field a signed golden document travels in, named in errors.
const FIELD: &str = "golden.signed";

/// Whether `s` is 64 lowercase hex digits.
pub fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "5f2b6c0d8e1a4b3c9d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c";

    #[test]
    fn a_signed_document_round_trips_and_bad_ones_name_their_field() {
        let doc = GoldenDocument::new("local:backup/vzdump-lxc-9000-x.tar.zst", HASH);
        let bytes = serde_json::to_vec(&doc).unwrap();
        let signed = SignedGolden::new(&bytes, "-----BEGIN SSH SIGNATURE-----");
        assert_eq!(signed.golden().unwrap(), doc);

        let mut bad = doc.clone();
        bad.sha256 = HASH.to_ascii_uppercase();
        let signed = SignedGolden::new(&serde_json::to_vec(&bad).unwrap(), "sig");
        assert_eq!(signed.golden().unwrap_err().field(), "sha256");

        let signed = SignedGolden::new(br#"{"schema":"bosun.job/v1"}"#, "sig");
        assert_eq!(
            signed.golden().unwrap_err().field(),
            "golden.signed.document"
        );
        let huge = SignedGolden::new(&vec![b' '; MAX_GOLDEN_DOCUMENT + 1], "sig");
        assert!(huge.golden().is_err());
        let long_sig = SignedGolden::new(&bytes, &"x".repeat(crate::signed::MAX_SIGNATURE + 1));
        assert_eq!(
            long_sig.golden().unwrap_err().field(),
            "golden.signed.signature"
        );
    }
}
