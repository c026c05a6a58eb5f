//! One OpenSSH public key, parsed and written back in canonical form: the key of a
//! break-glass door ([`crate::break_glass`]), of a guest's access list
//! ([`crate::guest_access`]) and of its bootstrap ([`crate::bootstrap`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::helper::InvalidArgument;

/// Longest public key line accepted, in bytes (an RSA 16384 key is about 2.8 KiB).
pub const MAX_PUBLIC_KEY_BYTES: usize = 4096;

/// One OpenSSH public key (`<algorithm> <base64>`), parsed and re-serialized without its
/// comment. A line with options, two keys, control characters or an algorithm other than
/// Ed25519, ECDSA, RSA (2048 bits or more) or their security-key forms is refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(try_from = "String", into = "String")]
pub struct SshPublicKey {
    canonical: String,
    fingerprint: String,
}

impl SshPublicKey {
    /// Parses `text` (`<algorithm> <base64> [comment]`) and keeps its canonical form.
    pub fn new(text: &str) -> Result<Self, InvalidArgument> {
        let bad = |reason| InvalidArgument {
            what: "ssh public key",
            value: text.chars().take(80).collect(),
            reason,
        };
        if text.len() > MAX_PUBLIC_KEY_BYTES {
            return Err(bad("longer than 4096 bytes"));
        }
        if text.chars().any(crate::inert::is_control) {
            return Err(bad("contains a newline or another control character"));
        }
        let trimmed = text.trim();
        let mut words = trimmed.split(' ').filter(|w| !w.is_empty());
        let (Some(algorithm), Some(_)) = (words.next(), words.next()) else {
            return Err(bad("expected `<algorithm> <base64> [comment]`"));
        };
        // Options come before the algorithm in an authorized_keys line: the first word must
        // be the algorithm itself.
        if algorithm.contains(['=', ',', '"']) {
            return Err(bad("options are not accepted, only the key"));
        }
        let key = ssh_key::PublicKey::from_openssh(trimmed)
            .map_err(|_| bad("not an OpenSSH public key"))?;
        use ssh_key::public::KeyData;
        match key.key_data() {
            KeyData::Ed25519(_) | KeyData::Ecdsa(_) | KeyData::SkEd25519(_) => {}
            KeyData::SkEcdsaSha2NistP256(_) => {}
            KeyData::Rsa(rsa) => {
                let bits = rsa.n.as_positive_bytes().map_or(0, |n| n.len() * 8);
                if bits < 2048 {
                    return Err(bad("an RSA key needs at least 2048 bits"));
                }
            }
            _ => return Err(bad("unsupported key algorithm")),
        }
        let mut bare = key.clone();
        bare.set_comment("");
        let canonical = bare
            .to_openssh()
            .map_err(|_| bad("cannot be written back"))?
            .trim()
            .to_owned();
        if canonical.contains(['\n', '\r']) || canonical.split(' ').count() != 2 {
            return Err(bad("does not re-serialize as one key"));
        }
        let fingerprint = key.fingerprint(ssh_key::HashAlg::Sha256).to_string();
        Ok(Self {
            canonical,
            fingerprint,
        })
    }

    /// `<algorithm> <base64>`, no comment.
    pub fn as_str(&self) -> &str {
        &self.canonical
    }

    /// `SHA256:…`, as `ssh-keygen -l` prints it.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

impl TryFrom<String> for SshPublicKey {
    type Error = InvalidArgument;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(&value)
    }
}

impl From<SshPublicKey> for String {
    fn from(value: SshPublicKey) -> String {
        value.canonical
    }
}

impl fmt::Display for SshPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical)
    }
}
