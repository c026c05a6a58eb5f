//! Operators' SSH signatures as Bosun checks them: signed jobs (namespace `bosun-job@v1`),
//! golden archives (`bosun-golden@v1`) and data plans and retention floors
//! (`bosun-policy@v1`), against an OpenSSH `allowed_signers` file.
//!
//! The agent checks every signed document through here (`bosun_agentd::trust::signing` turns the
//! [`MatchedSigner`] into the proof its gate takes), and so does `bosunctl job submit`, which
//! refuses on the operator's desk what the agent would refuse: one check, not two that drift.
//!
//! The operator signs the exact document bytes with stock OpenSSH:
//! `ssh-keygen -Y sign -f KEY -n bosun-job@v1 job.json` (FIDO `sk-` keys
//! too). The hub forwards those bytes and the armored `SSHSIG` untouched; the
//! agent calls [`verify_job_signature`] with its [`AllowedSigners`] and the
//! clock's time, and gets the matching signer back — or the reason to refuse:
//! a malformed or bad signature, the wrong namespace, tampered bytes, a key
//! not listed, a key listed but not for this namespace, or a key outside its
//! `valid-after`/`valid-before` window.
//!
//! A FIDO signature must also carry the user-presence flag: a job is an
//! operator's deliberate act, so a key that signed without a touch is refused
//! (stricter than `ssh-keygen -Y verify`, which accepts such a signature; a
//! key made with `-O no-touch-required` cannot sign Bosun jobs).
//!
//! What this crate does not check (the job checks on top of it do): the
//! document's own `not_before`/`expires_at`, host binding, kind/target
//! consistency, the nonce and the job id — see the agent's journal (`Store::claim_job`).

use jiff::Timestamp;
use ssh_key::{Algorithm, HashAlg, SshSig};

pub mod allowed_signers;

pub use allowed_signers::{AllowedSigner, AllowedSigners, AllowedSignersError};

/// The SSHSIG namespace of Bosun job signatures.
pub const JOB_NAMESPACE: &str = "bosun-job@v1";

/// The FIDO user-presence flag in an `sk-` signature.
const SK_USER_PRESENT: u8 = 0x01;

/// The `allowed_signers` line a valid signature was matched to. Only [`verify_signature`]
/// makes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchedSigner {
    principals: String,
    fingerprint: String,
    line: usize,
    key_type: String,
}

impl MatchedSigner {
    /// The principals of the matching `allowed_signers` line.
    pub fn principals(&self) -> &str {
        &self.principals
    }

    /// The signing key's `SHA256:…` fingerprint.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The matching line's number.
    pub fn line(&self) -> usize {
        self.line
    }

    /// The key type (`ssh-ed25519`, `sk-ssh-ed25519@openssh.com`, …).
    pub fn key_type(&self) -> &str {
        &self.key_type
    }
}

/// Why a signature was refused.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    /// Not an armored SSHSIG, or not one this agent can read.
    #[error("the signature is not a readable ssh signature")]
    Malformed {
        /// The cause.
        #[source]
        source: ssh_key::Error,
    },
    /// Signed for another purpose.
    #[error("the signature is for namespace {found:?}, not {expected:?}")]
    WrongNamespace {
        /// The namespace required.
        expected: &'static str,
        /// The namespace signed.
        found: String,
    },
    /// The signing key is not in `allowed_signers`.
    #[error("the document was signed by key {fingerprint}, which is not an allowed signer")]
    UnknownSigner {
        /// The key's fingerprint.
        fingerprint: String,
    },
    /// The signature does not match the bytes (tampered, or forged).
    #[error("the signature by key {fingerprint} does not match the signed bytes")]
    BadSignature {
        /// The key's fingerprint.
        fingerprint: String,
        /// The cause.
        #[source]
        source: ssh_key::Error,
    },
    /// The key is listed, but not for this namespace.
    #[error("key {fingerprint} (allowed signers line {line}) may not sign namespace {namespace:?}")]
    NamespaceNotAllowed {
        /// The key's fingerprint.
        fingerprint: String,
        /// Its line.
        line: usize,
        /// The namespace signed.
        namespace: String,
    },
    /// The key's `valid-after` lies in the future.
    #[error("key {fingerprint} (allowed signers line {line}) is not valid before {valid_after}")]
    NotYetValid {
        /// The key's fingerprint.
        fingerprint: String,
        /// Its line.
        line: usize,
        /// When it becomes valid.
        valid_after: Timestamp,
    },
    /// The key's `valid-before` has passed.
    #[error("key {fingerprint} (allowed signers line {line}) expired at {valid_before}")]
    SignerExpired {
        /// The key's fingerprint.
        fingerprint: String,
        /// Its line.
        line: usize,
        /// When it stopped being valid.
        valid_before: Timestamp,
    },
    /// A FIDO signature made without the user's touch.
    #[error("the FIDO signature by key {fingerprint} lacks the user-presence flag")]
    NoUserPresence {
        /// The key's fingerprint.
        fingerprint: String,
    },
}

/// Verifies `armored` over `message` in the job namespace at time `now`.
pub fn verify_job_signature(
    signers: &AllowedSigners,
    message: &[u8],
    armored: &str,
    now: Timestamp,
) -> Result<MatchedSigner, SignatureError> {
    verify_signature(signers, JOB_NAMESPACE, message, armored, now)
}

/// Verifies `armored` over `message` in `namespace` at time `now`.
pub fn verify_signature(
    signers: &AllowedSigners,
    namespace: &'static str,
    message: &[u8],
    armored: &str,
    now: Timestamp,
) -> Result<MatchedSigner, SignatureError> {
    let sig =
        SshSig::from_pem(armored.trim()).map_err(|source| SignatureError::Malformed { source })?;
    if sig.namespace() != namespace {
        return Err(SignatureError::WrongNamespace {
            expected: namespace,
            found: sig.namespace().to_owned(),
        });
    }
    let fingerprint = sig.public_key().fingerprint(HashAlg::Sha256).to_string();
    let mut candidates = signers
        .entries()
        .iter()
        .filter(|entry| entry.key().key_data() == sig.public_key())
        .peekable();
    let Some(first) = candidates.peek().copied() else {
        return Err(SignatureError::UnknownSigner { fingerprint });
    };
    first
        .key()
        .verify(namespace, message, &sig)
        .map_err(|source| SignatureError::BadSignature {
            fingerprint: fingerprint.clone(),
            source,
        })?;
    if matches!(
        sig.algorithm(),
        Algorithm::SkEd25519 | Algorithm::SkEcdsaSha2NistP256
    ) {
        let bytes = sig.signature_bytes();
        // The signature ends with flags (1 byte) and a counter (4 bytes).
        let flags = bytes
            .len()
            .checked_sub(5)
            .and_then(|at| bytes.get(at))
            .copied()
            .unwrap_or(0);
        if flags & SK_USER_PRESENT == 0 {
            return Err(SignatureError::NoUserPresence { fingerprint });
        }
    }
    let mut refusal = None;
    for entry in candidates {
        match check_entry(entry, namespace, now, &fingerprint) {
            Ok(()) => {
                return Ok(MatchedSigner {
                    principals: entry.principals().to_owned(),
                    fingerprint,
                    line: entry.line(),
                    key_type: entry.key().algorithm().as_str().to_owned(),
                });
            }
            Err(err) => {
                refusal.get_or_insert(err);
            }
        }
    }
    Err(refusal.unwrap_or(SignatureError::UnknownSigner { fingerprint }))
}

fn check_entry(
    entry: &AllowedSigner,
    namespace: &str,
    now: Timestamp,
    fingerprint: &str,
) -> Result<(), SignatureError> {
    if !entry.allows_namespace(namespace) {
        return Err(SignatureError::NamespaceNotAllowed {
            fingerprint: fingerprint.to_owned(),
            line: entry.line(),
            namespace: namespace.to_owned(),
        });
    }
    if let Some(valid_after) = entry.valid_after()
        && now < valid_after
    {
        return Err(SignatureError::NotYetValid {
            fingerprint: fingerprint.to_owned(),
            line: entry.line(),
            valid_after,
        });
    }
    if let Some(valid_before) = entry.valid_before()
        && now > valid_before
    {
        return Err(SignatureError::SignerExpired {
            fingerprint: fingerprint.to_owned(),
            line: entry.line(),
            valid_before,
        });
    }
    Ok(())
}
