//! What `bosunctl job submit` checks before it queues a signed job, so that a job the agent
//! would refuse is refused on the operator's desk, with the reason, instead of later on the
//! host:
//!
//! - the signature is an `SSHSIG` in the job namespace and verifies over the exact document
//!   bytes with the key it carries (a document edited after signing fails here);
//! - when the operator configured an `allowed_signers` file (`--allowed-signers`,
//!   `$BOSUN_ALLOWED_SIGNERS` or `allowed_signers` in the config file), that key is listed there
//!   for the job namespace and within its validity, as the agent will check;
//! - the job has not expired;
//! - the target exists: the host is enrolled and not revoked; a guest job names a guest the
//!   hub knows on that host (desired state or last report), and its vmid, when both the job
//!   and the host's report give one, is the reported one.
//!
//! The hub and the agent check all of this again: nothing here is a security boundary, it
//! only saves the operator a round trip.

use std::path::Path;

use bosun_proto::admin::{HostDetail, HostStatus};
use bosun_proto::job::JobDocument;
use bosun_signing::{AllowedSigners, JOB_NAMESPACE, SignatureError, verify_job_signature};
use jiff::Timestamp;
use ssh_key::{HashAlg, PublicKey, SshSig};

use crate::error::CtlError;
use crate::resolve;

/// Who signed a job, as far as the checks could tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signer {
    /// Matched to a line of the operator's `allowed_signers` file.
    Allowed {
        /// The line's principals.
        principals: String,
        /// The key's SHA-256 fingerprint.
        fingerprint: String,
    },
    /// The signature verifies with the key it carries; no `allowed_signers` file is configured,
    /// so whether the hosts accept that key was not checked.
    Unchecked {
        /// The key's SHA-256 fingerprint.
        fingerprint: String,
    },
}

impl Signer {
    /// One line for the operator.
    pub fn describe(&self) -> String {
        match self {
            Self::Allowed {
                principals,
                fingerprint,
            } => format!("signed by {principals} ({fingerprint})"),
            Self::Unchecked { fingerprint } => format!(
                "signed by {fingerprint} (not checked against an allowed_signers file: configure \
                 one with --allowed-signers or BOSUN_ALLOWED_SIGNERS)"
            ),
        }
    }
}

/// Verifies `armored` over `document`: with the operator's `allowed_signers` when given, else
/// with the key the signature carries.
pub fn check_signature(
    document: &[u8],
    armored: &str,
    signers: Option<&AllowedSigners>,
    now: Timestamp,
) -> Result<Signer, CtlError> {
    let refused = |source: SignatureError| CtlError::JobRefused {
        reason: "signature",
        detail: source.to_string(),
    };
    if let Some(signers) = signers {
        let signer = verify_job_signature(signers, document, armored, now).map_err(refused)?;
        return Ok(Signer::Allowed {
            principals: signer.principals().to_owned(),
            fingerprint: signer.fingerprint().to_owned(),
        });
    }
    let sig = SshSig::from_pem(armored.trim())
        .map_err(|source| refused(SignatureError::Malformed { source }))?;
    if sig.namespace() != JOB_NAMESPACE {
        return Err(refused(SignatureError::WrongNamespace {
            expected: JOB_NAMESPACE,
            found: sig.namespace().to_owned(),
        }));
    }
    let key = PublicKey::from(sig.public_key().clone());
    let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
    key.verify(JOB_NAMESPACE, document, &sig)
        .map_err(|source| {
            refused(SignatureError::BadSignature {
                fingerprint: fingerprint.clone(),
                source,
            })
        })?;
    Ok(Signer::Unchecked { fingerprint })
}

/// Refuses a job whose `expires_at` has passed.
pub fn check_validity(job: &JobDocument, now: Timestamp) -> Result<(), CtlError> {
    if job.expires_at <= now {
        return Err(CtlError::JobRefused {
            reason: "expired",
            detail: format!(
                "the job expired at {} (sign a new one: job ids and nonces are single-use)",
                job.expires_at
            ),
        });
    }
    Ok(())
}

/// Refuses a job whose target the hub does not know: `detail` is the target host's record.
pub fn check_target(job: &JobDocument, detail: &HostDetail) -> Result<(), CtlError> {
    let refused = |detail: String| CtlError::JobRefused {
        reason: "target",
        detail,
    };
    let host = &detail.summary;
    if host.status == HostStatus::Revoked {
        return Err(refused(format!(
            "host {} ({}) is revoked",
            host.host_id, host.hostname
        )));
    }
    let Some(guest) = job.target.guest_id else {
        return Ok(());
    };
    if job.kind == bosun_proto::job::JobKind::Adopt {
        return check_adoptable(job, detail, guest).map_err(refused);
    }
    if !resolve::guest_candidates(detail)
        .iter()
        .any(|c| c.id == guest)
    {
        return Err(refused(format!(
            "host {} ({}) has no guest {guest} in its desired state or last report",
            host.host_id, host.hostname
        )));
    }
    let reported = detail
        .last_report
        .iter()
        .flat_map(|r| &r.guests)
        .find(|g| g.guest_id == Some(guest));
    if let (Some(asked), Some(reported)) = (job.target.vmid, reported)
        && asked != reported.vmid
    {
        return Err(refused(format!(
            "guest {guest} runs as vmid {} on host {}, not {asked}",
            reported.vmid, host.hostname
        )));
    }
    Ok(())
}

/// An `adopt` job names a guest id the hub does not know on the host and a vmid the host
/// does not report as one of its guests (the agent checks both again against its journal).
fn check_adoptable(
    job: &JobDocument,
    detail: &HostDetail,
    guest: uuid::Uuid,
) -> Result<(), String> {
    let host = &detail.summary;
    if resolve::guest_candidates(detail)
        .iter()
        .any(|c| c.id == guest)
    {
        return Err(format!(
            "guest {guest} is already known on host {}: an adopted container gets a new id",
            host.hostname
        ));
    }
    let held = detail
        .last_report
        .iter()
        .flat_map(|r| &r.guests)
        .find(|g| Some(g.vmid) == job.target.vmid && g.guest_id.is_some());
    if let Some(held) = held {
        return Err(format!(
            "vmid {} on host {} is already Bosun's guest {}",
            held.vmid,
            host.hostname,
            held.guest_id.map(|g| g.to_string()).unwrap_or_default()
        ));
    }
    Ok(())
}

/// The guest's vmid as the host last reported it, or as its desired state pins it.
pub fn known_vmid(detail: &HostDetail, guest: uuid::Uuid) -> Option<u32> {
    let reported = detail
        .last_report
        .iter()
        .flat_map(|r| &r.guests)
        .find(|g| g.guest_id == Some(guest))
        .map(|g| g.vmid);
    reported.or_else(|| {
        detail
            .desired
            .iter()
            .flat_map(|d| &d.guests)
            .find(|g| g.guest_id == guest)
            .and_then(|g| g.vmid)
    })
}

/// Reads the operator's `allowed_signers` file.
pub fn load_signers(path: &Path) -> Result<AllowedSigners, CtlError> {
    AllowedSigners::load(path).map_err(|source| CtlError::BadArgument {
        what: "allowed signers",
        reason: format!(
            "{}: {}",
            path.display(),
            bosun_errchain::error_chain(&source)
        ),
    })
}

#[cfg(test)]
mod tests;
