//! Secrets carried on the wire (tokens and keys) with a redacting `Debug`.

use serde::{Deserialize, Serialize};

/// A bearer secret (enrollment token, host API key, local API token).
///
/// `Debug` prints `[REDACTED]` so the value never reaches a log by accident; read it with
/// [`SecretToken::expose`] only where it is sent or hashed.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

/// Largest sealed secret accepted (armored bytes).
pub const MAX_SEALED_BYTES: usize = 16 * 1024;

const AGE_ARMOR_BEGIN: &str = "-----BEGIN AGE ENCRYPTED FILE-----";
const AGE_ARMOR_END: &str = "-----END AGE ENCRYPTED FILE-----";

/// A secret sealed by the operator to one host's age recipient (armored age ciphertext).
/// The hub stores and forwards it; only the host's identity opens it. A storage credential's
/// plaintext is a [`crate::sealed_credential::SealedCredential`], bound to its target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
// The schema admits ASCII armor between the markers and some whitespace around it, within
// `MAX_SEALED_BYTES`.
#[cfg_attr(
    feature = "openapi",
    schema(
        pattern = r"^[\t\n\r ]{0,64}-----BEGIN AGE ENCRYPTED FILE-----[\t\n\r -~]{0,16000}-----END AGE ENCRYPTED FILE-----[\t\n\r ]{0,64}$"
    )
)]
#[serde(try_from = "String", into = "String")]
pub struct SealedSecret(String);

impl SealedSecret {
    /// The armored ciphertext.
    pub fn armored(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for SealedSecret {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        if value.len() > MAX_SEALED_BYTES {
            return Err(format!(
                "a sealed secret is at most {MAX_SEALED_BYTES} bytes, this one {}",
                value.len()
            ));
        }
        let text = value.trim();
        if !text.starts_with(AGE_ARMOR_BEGIN) || !text.ends_with(AGE_ARMOR_END) {
            return Err("expected armored age ciphertext (bosunctl secret seal)".to_owned());
        }
        Ok(Self(value))
    }
}

impl From<SealedSecret> for String {
    fn from(value: SealedSecret) -> Self {
        value.0
    }
}

/// Whether `s` looks like an age X25519 recipient (`age1` + bech32, 62 characters).
pub fn is_age_recipient(s: &str) -> bool {
    s.len() == 62
        && s.starts_with("age1")
        && s[4..]
            .bytes()
            .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
}

#[cfg(test)]
mod sealed_tests {
    use super::*;

    #[test]
    fn only_armored_age_ciphertext_is_a_sealed_secret() {
        let good = format!("{AGE_ARMOR_BEGIN}\nYWdl\n{AGE_ARMOR_END}\n");
        assert!(SealedSecret::try_from(good).is_ok());
        for bad in ["hunter2", "", AGE_ARMOR_BEGIN] {
            assert!(SealedSecret::try_from(bad.to_owned()).is_err(), "{bad:?}");
        }
        let huge = format!(
            "{AGE_ARMOR_BEGIN}\n{}\n{AGE_ARMOR_END}",
            "A".repeat(MAX_SEALED_BYTES)
        );
        assert!(SealedSecret::try_from(huge).is_err());
        let parsed: Result<SealedSecret, _> = serde_json::from_str("\"plaintext password\"");
        assert!(parsed.is_err());
        assert!(is_age_recipient(
            "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"
        ));
        assert!(!is_age_recipient("age1short"));
    }
}
