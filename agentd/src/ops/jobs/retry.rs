//! Whether a failed job is worth signing again as it is ([`judge`]): the `retriable` flag
//! and reason of its result. Retriable means the same action, signed again as a new job,
//! may succeed without anything changing first: a transient Proxmox failure, a busy guest,
//! the agent's own journal, a restart, a timeout. A refusal (the gate, a target that is not
//! the job's, a missing backup or proof, a kind this agent cannot run) is not: something must
//! change first, and the reason says what kind of thing.

use bosun_pve::PveError;

use super::decommission::is_retryable;
use super::error::JobError;
use crate::ops::operation::StepError;

/// Why a job its timeout ended is retriable.
pub(super) const TIMED_OUT: &str =
    "timed out: no step began after the deadline; sign it again, with a longer timeout";

/// Whether a job that ended with `error` is retriable, and why (or why not).
pub(super) fn judge(error: &JobError) -> (bool, &'static str) {
    const REFUSED: &str = "refused: something must change before the same job can succeed";
    const FAILED: &str = "failed: read the detail before signing it again";
    match error {
        JobError::Pve(pve) => pve_verdict(pve),
        JobError::Step(step) => step_verdict(step),
        JobError::InterruptedBeforeAcceptance => (true, "interrupted by a restart before it began"),
        JobError::StillDestroying { .. } | JobError::Locked { .. } => {
            (true, "the guest was busy; it may be free later")
        }
        JobError::GaveUp { .. } => (
            true,
            "failures that may clear up outlasted the job's validity window",
        ),
        JobError::Journal { .. } => (true, "the agent's journal failed"),
        JobError::Queue(_) => (true, "the guest's work queue was unavailable"),
        JobError::StorageUnreadable { .. } => (true, "the storage could not be read"),
        JobError::UnreadableAcceptance { .. }
        | JobError::KindMismatch { .. }
        | JobError::NotAJob { .. }
        | JobError::NotSetUp { .. }
        | JobError::GateDenied { .. }
        | JobError::TargetMismatch { .. }
        | JobError::Stranger { .. }
        | JobError::NoBackup { .. }
        | JobError::ArchiveRefused { .. }
        | JobError::NotDesired { .. }
        | JobError::NotForVm { .. }
        | JobError::Unproven { .. }
        | JobError::ProofRefused(_)
        | JobError::DetachRefused(_)
        | JobError::DetachMoved { .. }
        | JobError::IncompleteDoor
        | JobError::InvalidValue(_)
        | JobError::InvalidArgument(_) => (false, REFUSED),
        JobError::HelperAnswer { .. }
        | JobError::Rollout { .. }
        | JobError::UpdateStep { .. }
        | JobError::Update(_) => (false, FAILED),
    }
}

fn step_verdict(step: &StepError) -> (bool, &'static str) {
    match step {
        StepError::TimedOut { .. } => (true, TIMED_OUT),
        StepError::Pve { source, .. } => pve_verdict(source),
        StepError::Journal { .. } => (true, "the agent's journal failed"),
        StepError::Failed { .. } | StepError::Other { .. } => (
            false,
            "a step failed: read the detail before signing it again",
        ),
    }
}

fn pve_verdict(error: &PveError) -> (bool, &'static str) {
    if is_retryable(error) {
        (true, "a Proxmox failure that may clear up on its own")
    } else {
        (false, "Proxmox refused: something must change first")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::journal::OpId;

    #[test]
    fn a_timeout_and_a_restart_are_retriable_a_refusal_is_not() {
        let op_id = OpId::new();
        let timed_out = JobError::from(StepError::TimedOut {
            op_id,
            step: "destroy".into(),
            timeout_s: 10,
        });
        assert!(judge(&timed_out).0);
        assert!(judge(&JobError::InterruptedBeforeAcceptance).0);
        let refused = JobError::TargetMismatch {
            vmid: 101,
            guest_id: uuid::Uuid::nil(),
            why: "no identity",
        };
        assert!(!judge(&refused).0);
        let other = JobError::from(StepError::Other {
            op_id,
            step: "stop".into(),
            reason: "x".into(),
        });
        assert!(!judge(&other).0);
    }
}
