//! Why an accepted job failed ([`JobError`]). Its whole chain
//! ([`bosun_errchain::error_chain`]) is the detail of the job's `failed` result and of its
//! operation's end, so every variant carries the facts and keeps the cause in `#[source]`;
//! the codes the hub reads (`target_mismatch: …`, the detach refusal codes, the update
//! failures) lead the text.

use bosun_proto::helper::InvalidArgument;
use bosun_pve::{PveError, ValueError, Vmid};
use uuid::Uuid;

use super::detach_refusal::DetachRefusal;
use super::update_error::AgentUpdateError;
use crate::data::backup::ProofError;
use crate::guests::queue::QueueError;
use crate::ops::journal::JournalError;
use crate::ops::operation::OpKind;
use crate::ops::operation::StepError;
use crate::trust::gate::{Action, Reason};

/// Why an accepted job failed.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// A crash ended the job after its claim, before its `accepted` step was journaled.
    #[error("interrupted before acceptance")]
    InterruptedBeforeAcceptance,
    /// The `accepted` step does not read as the parameters of its kind (a journal written
    /// by another version).
    #[error("the accepted step of this {op} operation does not read as its job's parameters")]
    UnreadableAcceptance {
        /// The operation's kind.
        op: OpKind,
        /// Why it does not read.
        #[source]
        source: serde_json::Error,
    },
    /// The `accepted` step names a kind that is not journaled as this operation's kind.
    #[error("the accepted step names a {kind} job, which does not run as a {op} operation")]
    KindMismatch {
        /// The kind the step names.
        kind: &'static str,
        /// The operation's kind.
        op: OpKind,
    },
    /// An unfinished operation sent to the job runner whose kind no job runs as.
    #[error("no job kind runs as a {op} operation")]
    NotAJob {
        /// The operation's kind.
        op: OpKind,
    },
    /// The agent lacks what the kind needs (a helper, a context it was not given).
    #[error("{kind} cannot run on this agent: it has no {missing}")]
    NotSetUp {
        /// The job's kind.
        kind: &'static str,
        /// What is missing.
        missing: &'static str,
    },
    /// The reversibility gate refused the job's action.
    #[error("gate denied {action:?}: {reason}")]
    GateDenied {
        /// The action asked for.
        action: Action,
        /// Why not.
        reason: Reason,
    },
    /// The guest at the job's vmid is not the job's guest.
    #[error("target_mismatch: guest {vmid} is not guest {guest_id} ({why}); not touched")]
    TargetMismatch {
        /// The job's vmid.
        vmid: u32,
        /// The job's guest.
        guest_id: Uuid,
        /// What showed it.
        why: &'static str,
    },
    /// The guest at the vmid lost the identity this agent wrote when it created it.
    #[error(
        "target_mismatch: guest {vmid} does not carry the identity this agent wrote into the guest it created; not touched"
    )]
    Stranger {
        /// The vmid.
        vmid: Vmid,
    },
    /// The job's guest is a QEMU VM and this kind of job does not act on VMs yet.
    #[error("a {kind} job does not act on a VM yet: VM {vmid} not touched")]
    NotForVm {
        /// The vmid.
        vmid: Vmid,
        /// The job's kind.
        kind: &'static str,
    },
    /// A destroy (this agent's, its answer perhaps lost) is still running.
    #[error("guest {vmid} is still being destroyed")]
    StillDestroying {
        /// The vmid.
        vmid: Vmid,
    },
    /// The guest holds a lock.
    #[error("guest {vmid} is locked ({lock})")]
    Locked {
        /// The vmid.
        vmid: Vmid,
        /// The lock.
        lock: String,
    },
    /// A transient failure outlasted the job's validity window.
    #[error("still failing after {attempts} attempts within the job's validity window")]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// The last attempt's failure.
        #[source]
        last: Box<JobError>,
    },
    /// The journal could not be read or written.
    #[error("journal: {what}")]
    Journal {
        /// What was being read or written.
        what: &'static str,
        /// The cause.
        #[source]
        source: JournalError,
    },
    /// A Proxmox call outside a journaled step failed (the error names the call and guest).
    #[error(transparent)]
    Pve(Box<PveError>),
    /// A journaled step failed (the error names the step and operation).
    #[error(transparent)]
    Step(Box<StepError>),
    /// The guest's work queue did not run the job.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// A value the job carries is not valid (the error names it).
    #[error(transparent)]
    InvalidValue(#[from] ValueError),
    /// A value the job hands the helper is not valid (the error names it).
    #[error(transparent)]
    InvalidArgument(#[from] InvalidArgument),
    /// No backup of the guest can be restored.
    #[error("no backup to restore: {reason}")]
    NoBackup {
        /// Why, as the backup records say.
        reason: String,
    },
    /// The archive the job names is refused (not the guest's, or it failed its check).
    #[error("{reason}")]
    ArchiveRefused {
        /// Why, as the backup records say.
        reason: String,
    },
    /// A lost guest that desired state no longer describes.
    #[error("guest {guest_id} is not in desired state: nothing says what to restore it as")]
    NotDesired {
        /// The guest.
        guest_id: Uuid,
    },
    /// The backup the job took cannot be proven.
    #[error("the archive {volid} was written but cannot be proven, so it would never be restored")]
    Unproven {
        /// The archive.
        volid: String,
        /// Why not.
        #[source]
        source: Box<JobError>,
    },
    /// The prover refused an archive.
    #[error(transparent)]
    ProofRefused(ProofError),
    /// A storage's content could not be listed.
    #[error("{storage} cannot be read")]
    StorageUnreadable {
        /// The storage.
        storage: String,
        /// The cause.
        #[source]
        source: Box<PveError>,
    },
    /// A `storage-detach` judged again (resumed) or looked at is refused.
    #[error("{}", .0.code())]
    DetachRefused(#[source] Box<DetachRefusal>),
    /// A resumed `storage-detach` now resolves to another storage than it accepted.
    #[error("the job resolves to storage {now} now, not {accepted}")]
    DetachMoved {
        /// The storage it resolves to now.
        now: String,
        /// The storage it was accepted for.
        accepted: String,
    },
    /// The helper gave an answer that does not belong to the request.
    #[error("the helper answered {answer} to {request}")]
    HelperAnswer {
        /// The request.
        request: &'static str,
        /// The answer, as debug text.
        answer: String,
    },
    /// A controller rollout did not commit; its own report (`rolled_back: …`,
    /// `broken: …`).
    #[error("{reason}")]
    Rollout {
        /// The rollout's report.
        reason: String,
    },
    /// An accepted `break-glass-enable` without its key, deadline or reason.
    #[error("the accepted break-glass job lacks its key, deadline or reason")]
    IncompleteDoor,
    /// An agent update failed in one of its journaled steps.
    #[error("agent update step {step}")]
    UpdateStep {
        /// The step.
        step: &'static str,
        /// Why.
        #[source]
        failure: AgentUpdateError,
    },
    /// An agent update failed outside its steps (a trial rolled back, no helper).
    #[error(transparent)]
    Update(AgentUpdateError),
}

impl From<PveError> for JobError {
    fn from(error: PveError) -> Self {
        JobError::Pve(Box::new(error))
    }
}

impl From<StepError> for JobError {
    fn from(error: StepError) -> Self {
        JobError::Step(Box::new(error))
    }
}

impl From<DetachRefusal> for JobError {
    fn from(refusal: DetachRefusal) -> Self {
        JobError::DetachRefused(Box::new(refusal))
    }
}

impl JobError {
    /// A journal error while doing `what`.
    pub(super) fn journal(what: &'static str) -> impl FnOnce(JournalError) -> JobError {
        move |source| JobError::Journal { what, source }
    }
}
