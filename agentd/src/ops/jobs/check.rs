//! The job document checks on top of the signature (DESIGN §5): a signed job
//! is accepted only if, in this order,
//!
//! 1. the envelope is well formed and the signature verifies over the exact
//!    document bytes against `allowed_signers` in namespace `bosun-job@v1`
//!    (nothing in the document is trusted before this);
//! 2. its kind is a row of the table (`jobs::kind`): a kind this agent does not know is
//!    refused as such (`unsupported_kind`), never read as another; then the document
//!    parses and is consistent (`bosun.job/v1`, kind ↔ target);
//! 3. `now` lies in `[not_before − skew, expires_at + skew]`;
//! 4. it names this host;
//! 5. (once claimed, by its kind's family) what the kind needs is set up here: a
//!    `storage-detach` is judged further by [`super::detach`], `break-glass-enable` and
//!    `-disable` need a helper, `agent-update` its window;
//! 6. its guest was not decommissioned already (a tombstone: `already_gone`),
//!    and its guest id and vmid belong together by the journal's provenance
//!    alone — a guest this agent created or adopted; a hub pin never makes a
//!    guest a target (a job retargeted to another guest fails here). An `adopt`
//!    job asks the opposite: its vmid holds no guest of the journal's (created,
//!    adopted, scratch or lost: `already_a_guest`) and its guest id is not one the
//!    journal knows at another vmid (`guest_id_in_use`); what Proxmox holds there is
//!    judged by its family, once claimed (`jobs::adopt_run`);
//! 7. its nonce was never seen and its job id never ran (checked and recorded
//!    atomically by `Store::claim_job`, by the runner).

use std::collections::{BTreeMap, BTreeSet};

use bosun_proto::job::{JobDocument, SignedJob};
use bosun_proto::validate::ValidationError;
use jiff::{SignedDuration, Timestamp};
use uuid::Uuid;

use super::kind::KindRow;
use crate::trust::signing::{AllowedSigners, SignatureError, VerifiedSigner, verify_job_signature};

/// The clock skew tolerated on `not_before` and `expires_at`.
pub const DEFAULT_SKEW: SignedDuration = SignedDuration::from_secs(120);

/// How much of an unknown kind's name a refusal repeats.
pub const MAX_KIND_CHARS: usize = 64;

/// Why a job was refused.
#[derive(Debug, thiserror::Error)]
pub enum JobRefusal {
    /// The envelope or document is malformed.
    #[error("the job is malformed")]
    Malformed(#[source] ValidationError),
    /// The signature did not verify.
    #[error("the job signature was refused")]
    Signature(#[source] SignatureError),
    /// Too early.
    #[error("the job is not valid before {not_before} (now {now})")]
    NotYetValid {
        /// The job's start.
        not_before: Timestamp,
        /// The agent's time.
        now: Timestamp,
    },
    /// Too late.
    #[error("the job expired at {expires_at} (now {now})")]
    Expired {
        /// The job's end.
        expires_at: Timestamp,
        /// The agent's time.
        now: Timestamp,
    },
    /// For another host.
    #[error("the job is for host {found}, not this host {expected}")]
    OtherHost {
        /// This host.
        expected: Uuid,
        /// The job's host.
        found: Uuid,
    },
    /// A kind this agent does not know, or does not run without what it lacks.
    #[error("job kind {kind} is not run by this agent")]
    UnsupportedKind {
        /// The kind, as the document names it (escaped, at most [`MAX_KIND_CHARS`]).
        kind: String,
    },
    /// The guest id and vmid do not belong together on this host.
    #[error(
        "the job targets guest {guest_id} as vmid {vmid}, which this host does not know as that guest"
    )]
    TargetMismatch {
        /// The job's guest id.
        guest_id: Uuid,
        /// The job's vmid.
        vmid: u32,
    },
    /// An `adopt` job for a vmid the journal holds a guest at already.
    #[error("CT {vmid} is already this agent's guest; it is never adopted again")]
    AlreadyAGuest {
        /// The job's vmid.
        vmid: u32,
    },
    /// An `adopt` job naming a guest id the journal knows at another vmid.
    #[error("guest {guest_id} is already this agent's guest at vmid {vmid}")]
    GuestIdInUse {
        /// The job's guest id.
        guest_id: Uuid,
        /// Where the journal has it.
        vmid: u32,
    },
    /// The guest was decommissioned already (it has a tombstone).
    #[error("guest {guest_id} was already decommissioned")]
    AlreadyGone {
        /// The job's guest id.
        guest_id: Uuid,
    },
    /// The nonce was seen before.
    #[error("the job's nonce was already used by job {first_job_id}")]
    NonceReused {
        /// The job that used it first.
        first_job_id: String,
    },
    /// The job already ran.
    #[error("job {job_id} already ran")]
    AlreadyRun {
        /// The job.
        job_id: String,
    },
    /// A `storage-detach` job whose target may not be detached now.
    #[error("the storage-detach job was refused")]
    Detach(#[source] super::detach_refusal::DetachRefusal),
    /// A `storage-wipe` job whose target may not be wiped now.
    #[error("the storage-wipe job was refused")]
    Wipe(#[source] super::detach_refusal::DetachRefusal),
    /// A `restore-bulk` job naming an archive this host's journal does not hold for the guest's
    /// volume, or a volume the signed plan does not archive (decision 0108).
    #[error("restore-bulk refused: {reason}")]
    BulkArchiveUnknown {
        /// What the journal or the plan lacks.
        reason: String,
    },
    /// An `adopt` job asking for a bootstrap on an agent without a helper or a local API.
    #[error(
        "adopt with a bootstrap needs a helper and a local API, and this agent lacks one of them"
    )]
    CannotBootstrap,
    /// A job of a kind that does not act on a VM, naming a guest the journal records as one.
    #[error("a {kind} job does not act on a VM: VM {vmid} not touched")]
    NotForVm {
        /// The job's kind.
        kind: &'static str,
        /// The VM's vmid.
        vmid: u32,
    },
    /// An `agent-update` job without `override_window`, outside the update window.
    #[error(
        "agent updates run only inside the update window ({window}) unless signed with override_window"
    )]
    OutsideUpdateWindow {
        /// The window in force, or `none configured`.
        window: String,
    },
}

impl JobRefusal {
    /// A short machine-readable code for audit rows and the hub.
    pub fn code(&self) -> &'static str {
        match self {
            JobRefusal::Malformed(_) => "malformed",
            JobRefusal::Signature(SignatureError::WrongNamespace { .. }) => "wrong_namespace",
            JobRefusal::Signature(SignatureError::UnknownSigner { .. }) => "unknown_signer",
            JobRefusal::Signature(SignatureError::BadSignature { .. }) => "bad_signature",
            JobRefusal::Signature(_) => "signature_refused",
            JobRefusal::NotYetValid { .. } => "not_yet_valid",
            JobRefusal::Expired { .. } => "expired",
            JobRefusal::OtherHost { .. } => "other_host",
            JobRefusal::UnsupportedKind { .. } => "unsupported_kind",
            JobRefusal::TargetMismatch { .. } => "target_mismatch",
            JobRefusal::AlreadyGone { .. } => "already_gone",
            JobRefusal::AlreadyAGuest { .. } => "already_a_guest",
            JobRefusal::GuestIdInUse { .. } => "guest_id_in_use",
            JobRefusal::NonceReused { .. } => "nonce_reused",
            JobRefusal::AlreadyRun { .. } => "already_run",
            JobRefusal::Detach(refusal) | JobRefusal::Wipe(refusal) => refusal.code(),
            JobRefusal::OutsideUpdateWindow { .. } => "outside_update_window",
            JobRefusal::CannotBootstrap => "cannot_bootstrap",
            JobRefusal::NotForVm { .. } => "not_for_vm",
            JobRefusal::BulkArchiveUnknown { .. } => "bulk_archive_unknown",
        }
    }
}

/// A job whose signature and document passed every check but the
/// nonce/job-id claim.
#[derive(Debug, Clone)]
pub struct CheckedJob {
    /// The document.
    pub document: JobDocument,
    /// Who signed it.
    pub signer: VerifiedSigner,
}

/// What the host knows about which vmid is which guest: the agent's own records only.
#[derive(Debug, Clone, Default)]
pub struct GuestIndex {
    /// vmid → guest id, from the journal's provenance (never from desired state).
    pub by_vmid: BTreeMap<u32, Uuid>,
    /// Guests a signed decommission destroyed (the journal's tombstones).
    pub gone: BTreeSet<Uuid>,
    /// Every vmid the journal holds a guest at, with or without a guest id (a restore
    /// test's scratch guest has none): never adopted.
    pub held: BTreeSet<u32>,
    /// The `adopt` jobs whose adoption the journal holds: sent again, each is judged by its
    /// claim (`already_run`, never reported over its result), not by what it recorded.
    pub adopted_by: BTreeSet<Uuid>,
}

/// The job id of a signed job, if its document can be read at all (for
/// reporting a refusal of an otherwise unreadable job).
pub fn peek_job_id(signed: &SignedJob) -> Option<Uuid> {
    let bytes = signed.document_bytes().ok()?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    value.get("job_id")?.as_str()?.parse().ok()
}

/// The kind `bytes` name, when it is a string no row of the table has: escaped and cut to
/// [`MAX_KIND_CHARS`] for the refusal.
fn unknown_kind(bytes: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let name = value.get("kind")?.as_str()?;
    if KindRow::parse(name).is_some() {
        return None;
    }
    Some(
        name.chars()
            .take(MAX_KIND_CHARS)
            .flat_map(char::escape_debug)
            .collect(),
    )
}

/// Runs checks 1–4 and 6 (check 5 is its family's, once claimed).
pub fn check_job(
    signed: &SignedJob,
    signers: &AllowedSigners,
    host_id: Uuid,
    guests: &GuestIndex,
    now: Timestamp,
    skew: SignedDuration,
) -> Result<CheckedJob, JobRefusal> {
    let bytes = signed.document_bytes().map_err(JobRefusal::Malformed)?;
    let signer = verify_job_signature(signers, &bytes, &signed.signature, now)
        .map_err(JobRefusal::Signature)?;
    let document = signed
        .parse_document()
        .map_err(|e| match unknown_kind(&bytes) {
            Some(kind) => JobRefusal::UnsupportedKind { kind },
            None => JobRefusal::Malformed(e),
        })?;
    let earliest = document
        .not_before
        .saturating_sub(skew)
        .unwrap_or(Timestamp::MIN);
    if now < earliest {
        return Err(JobRefusal::NotYetValid {
            not_before: document.not_before,
            now,
        });
    }
    if now
        > document
            .expires_at
            .saturating_add(skew)
            .unwrap_or(Timestamp::MAX)
    {
        return Err(JobRefusal::Expired {
            expires_at: document.expires_at,
            now,
        });
    }
    if document.target.host_id != host_id {
        return Err(JobRefusal::OtherHost {
            expected: host_id,
            found: document.target.host_id,
        });
    }
    if let Some(guest_id) = document.target.guest_id
        && guests.gone.contains(&guest_id)
    {
        return Err(JobRefusal::AlreadyGone { guest_id });
    }
    if let (Some(guest_id), Some(vmid)) = (document.target.guest_id, document.target.vmid) {
        if document.kind == bosun_proto::job::JobKind::Adopt {
            if !guests.adopted_by.contains(&document.job_id) {
                check_adoptable(guests, guest_id, vmid)?;
            }
        } else if guests.by_vmid.get(&vmid) != Some(&guest_id) {
            return Err(JobRefusal::TargetMismatch { guest_id, vmid });
        }
    }
    Ok(CheckedJob { document, signer })
}

/// Check 6 for an `adopt` job: the vmid holds none of the journal's guests and the guest id
/// is not one of them.
fn check_adoptable(guests: &GuestIndex, guest_id: Uuid, vmid: u32) -> Result<(), JobRefusal> {
    if guests.held.contains(&vmid) || guests.by_vmid.contains_key(&vmid) {
        return Err(JobRefusal::AlreadyAGuest { vmid });
    }
    if let Some((&at, _)) = guests.by_vmid.iter().find(|(_, g)| **g == guest_id) {
        return Err(JobRefusal::GuestIdInUse { guest_id, vmid: at });
    }
    Ok(())
}

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;
