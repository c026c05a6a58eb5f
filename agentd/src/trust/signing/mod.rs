//! Operators' SSH signatures in the agent. The checks themselves are [`bosun_signing`]'s (the
//! same ones `bosunctl job submit` runs on the operator's desk): signed jobs (namespace
//! `bosun-job@v1`), golden archives (`bosun-golden@v1`, checked before a provisioning restore),
//! data plans and retention floors. Here the signer a check matched becomes the
//! [`VerifiedSigner`] the gate and the job runners take, which only this module makes: from a
//! signature that verified, or from the journal's record of a job claimed before a crash.
//!
//! What this module does not check (the job checks on top of it do): the
//! document's own `not_before`/`expires_at`, host binding, kind/target
//! consistency, the nonce and the job id — see `crate::ops::journal::Store::claim_job`.

use bosun_signing::MatchedSigner;
use jiff::Timestamp;

pub mod refused;

pub use bosun_signing::allowed_signers;
pub use bosun_signing::{
    AllowedSigner, AllowedSigners, AllowedSignersError, JOB_NAMESPACE, SignatureError,
};
pub use refused::RefusedDocuments;

/// The signer a valid signature was matched to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedSigner {
    principals: String,
    fingerprint: String,
    line: usize,
    key_type: String,
}

impl VerifiedSigner {
    /// The signer [`bosun_signing`] matched a valid signature to.
    fn matched(signer: &MatchedSigner) -> Self {
        Self {
            principals: signer.principals().to_owned(),
            fingerprint: signer.fingerprint().to_owned(),
            line: signer.line(),
            key_type: signer.key_type().to_owned(),
        }
    }

    /// A signer for unit tests of code that needs one.
    #[cfg(test)]
    pub(crate) fn for_tests(fingerprint: &str) -> Self {
        Self {
            principals: "test@example.com".to_owned(),
            fingerprint: fingerprint.to_owned(),
            line: 1,
            key_type: "ssh-ed25519".to_owned(),
        }
    }

    /// The signer of a job that was verified and claimed before a crash, rebuilt
    /// from the journal's record of that claim to resume the job. Only the job
    /// runner's resume path uses it: the claim row exists only for a job whose
    /// signature verified.
    pub(crate) fn resumed(fingerprint: &str, principals: &str) -> Self {
        Self {
            principals: principals.to_owned(),
            fingerprint: fingerprint.to_owned(),
            line: 0,
            key_type: String::new(),
        }
    }

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

/// Verifies `armored` over `message` in the job namespace at time `now`.
pub fn verify_job_signature(
    signers: &AllowedSigners,
    message: &[u8],
    armored: &str,
    now: Timestamp,
) -> Result<VerifiedSigner, SignatureError> {
    verify_signature(signers, JOB_NAMESPACE, message, armored, now)
}

/// Verifies `armored` over `message` in `namespace` at time `now`.
pub fn verify_signature(
    signers: &AllowedSigners,
    namespace: &'static str,
    message: &[u8],
    armored: &str,
    now: Timestamp,
) -> Result<VerifiedSigner, SignatureError> {
    bosun_signing::verify_signature(signers, namespace, message, armored, now)
        .map(|signer| VerifiedSigner::matched(&signer))
}
