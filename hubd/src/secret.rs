//! Bearer secrets: 256 random bits, shown once, stored only as SHA-256, compared in constant
//! time.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bosun_proto::secret::SecretToken;
use rand::RngCore as _;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;

/// What a secret is for; the prefix makes a leaked value recognizable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretKind {
    /// An operator token (`bosun-hubd init`'s first admin token, and those made with
    /// `bosunctl tokens create`).
    Operator,
    /// A one-time enrollment token.
    Enrollment,
    /// A host API key.
    HostKey,
}

impl SecretKind {
    fn prefix(self) -> &'static str {
        match self {
            Self::Operator => "bsa_",
            Self::Enrollment => "bse_",
            Self::HostKey => "bsh_",
        }
    }
}

/// The SHA-256 of a secret, the only form the hub keeps.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SecretHash(pub [u8; 32]);

impl std::fmt::Debug for SecretHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretHash({}..)", hex::encode(&self.0[..4]))
    }
}

impl SecretHash {
    /// Hashes a presented secret.
    pub fn of(secret: &str) -> Self {
        Self(Sha256::digest(secret.as_bytes()).into())
    }

    /// Constant-time comparison.
    pub fn matches(&self, other: &SecretHash) -> bool {
        self.0.ct_eq(&other.0).into()
    }

    /// Rebuilds a hash read from storage; `None` if it has the wrong length.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        <[u8; 32]>::try_from(bytes).ok().map(Self)
    }
}

/// Mints a new secret of `kind` and its hash.
pub fn mint(kind: SecretKind) -> (SecretToken, SecretHash) {
    let mut raw = [0u8; 32];
    rand::rng().fill_bytes(&mut raw);
    let token = format!("{}{}", kind.prefix(), URL_SAFE_NO_PAD.encode(raw));
    let hash = SecretHash::of(&token);
    (SecretToken::new(token), hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_secrets_are_distinct_and_hash_back() {
        let (a, ha) = mint(SecretKind::HostKey);
        let (b, hb) = mint(SecretKind::HostKey);
        assert_ne!(a, b);
        assert!(a.expose().starts_with("bsh_"));
        assert_eq!(a.expose().len(), 4 + 43);
        assert!(SecretHash::of(a.expose()).matches(&ha));
        assert!(!ha.matches(&hb));
        assert!(!format!("{ha:?}").contains(&hex::encode(ha.0)));
    }
}
