//! Decommission: destroy a guest and forget its provenance, looking at Proxmox
//! before every retry (DESIGN §9) and retrying what is retryable within the
//! job's validity window.
//!
//! A destroy whose answer was lost may have been carried out, may still be
//! running (the guest holds `lock: destroyed`) or may never have reached the
//! daemon; each pass therefore starts by looking at the guest, and acts only if
//! the guest at the vmid still carries the identity the agent wrote when it
//! created it (DESIGN §5): a stranger at the vmid is refused (`target_mismatch`),
//! never stopped or destroyed. Provenance is retired (leaving a tombstone) only
//! once Proxmox says the guest does not exist.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::error::JobError;
use super::machine::{self, Held, Machine};
use crate::ops::journal::JournalHandle;
use crate::ops::operation::StepName;
use crate::ops::operation::{OpJournal, StepError};
use bosun_errchain::error_chain;
use bosun_pve::{GuestStatus, Op, Pve, PveError, PveQemu, Vmid};

/// First pause between two attempts; doubled after each, up to [`RETRY_CAP`].
const RETRY_FIRST: Duration = Duration::from_millis(250);
/// Longest pause between two attempts.
const RETRY_CAP: Duration = Duration::from_secs(10);
/// Longest a job keeps retrying, whatever its validity window.
pub(super) const RETRY_WINDOW_MAX: Duration = Duration::from_secs(300);

/// How long a job may keep retrying transient failures, and how it paces them.
#[derive(Debug)]
pub(super) struct Patience {
    deadline: Instant,
    next_pause: Duration,
    /// The window is the job's timeout: the last pause waits it out, so the job ends at its
    /// timeout, not at the attempt before it.
    waits_out: bool,
}

impl Patience {
    /// Retries allowed for `window` from now (capped at [`RETRY_WINDOW_MAX`]).
    pub(super) fn for_window(window: Duration) -> Self {
        Self {
            deadline: Instant::now() + window.min(RETRY_WINDOW_MAX),
            next_pause: RETRY_FIRST,
            waits_out: false,
        }
    }

    /// Retries until the job's timeout, `left` from now (its validity window ends later).
    pub(super) fn until_timeout(left: Duration) -> Self {
        Self {
            waits_out: true,
            ..Self::for_window(left)
        }
    }

    /// Waits before the next attempt; `false` when the window leaves no room for it.
    pub(super) async fn pause(&mut self) -> bool {
        let pause = self.next_pause;
        if Instant::now() + pause >= self.deadline {
            if self.waits_out {
                tokio::time::sleep_until(self.deadline).await;
            }
            return false;
        }
        tokio::time::sleep(pause).await;
        self.next_pause = (pause * 2).min(RETRY_CAP);
        true
    }
}

/// Whether a Proxmox failure may clear up on its own (transport, busy proxy, a
/// 500 from the daemon, a config lock), as opposed to a refusal that will not
/// change (permission, parameters, an unknown endpoint, protection).
pub(super) fn is_retryable(error: &PveError) -> bool {
    match error {
        PveError::NotSent { .. }
        | PveError::OutcomeUnknown { .. }
        | PveError::Busy { .. }
        | PveError::Locked { .. }
        | PveError::TaskWaitTimedOut { .. } => true,
        PveError::Api { status, .. } => *status >= 500 && !is_refusal(error),
        PveError::TaskFailed { .. } => error.is_lock_contention(),
        _ => false,
    }
}

/// Whether a mutation was answered with a refusal that may clear up (a config lock,
/// the daemon's 500) or never sent: nothing was done, so the same request may be sent
/// again. A lost answer or a busy proxy is not among them: those need a look first.
pub(super) fn refused_for_now(error: &PveError) -> bool {
    matches!(error, PveError::NotSent { .. } | PveError::Locked { .. })
        || matches!(error, PveError::Api { status, .. } if *status >= 500 && !is_refusal(error))
}

/// One failed attempt: why, and whether another attempt may help.
struct Attempt {
    error: JobError,
    retryable: bool,
}

impl Attempt {
    fn pve(error: PveError) -> Self {
        Self {
            retryable: is_retryable(&error),
            error: JobError::from(error),
        }
    }

    fn step(error: StepError, destroy_sent: bool) -> Self {
        // After a destroy was sent any failure is looked into on the next pass
        // (a second destroy racing the first fails although the guest goes).
        let retryable = error
            .pve()
            .is_some_and(|e| is_retryable(e) || (destroy_sent && !is_refusal(e)));
        Self {
            error: JobError::from(error),
            retryable,
        }
    }
}

/// An answer Proxmox gives the same way every time: permission, parameters, an
/// unknown endpoint, a protected guest.
fn is_refusal(error: &PveError) -> bool {
    match error {
        PveError::InvalidRequest { .. } => true,
        PveError::Api { message, .. } => message.contains("protection mode enabled"),
        _ => matches!(error.status(), Some(400 | 401 | 403 | 501)),
    }
}

/// What one pass found.
enum Pass {
    /// Proxmox says the guest does not exist.
    Gone,
    /// A destroy (ours, whose answer may have been lost) is still running.
    DestroyRunning,
    /// This pass stopped and destroyed the guest.
    Destroyed,
}

/// Destroys `vmid` — only while it holds the guest with `identity`, a container or a VM —
/// retrying within `patience`; retires its provenance (leaving a tombstone) once it is gone.
pub(super) async fn decommission<P: Pve + PveQemu>(
    pve: &P,
    journal: &JournalHandle,
    op: &OpJournal,
    vmid: Vmid,
    identity: &str,
    mut patience: Patience,
) -> Result<Value, JobError> {
    let mut destroy_sent = None;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let failure = match pass(pve, op, vmid, identity, &mut destroy_sent).await {
            Ok(Pass::Gone | Pass::Destroyed) => break,
            Ok(Pass::DestroyRunning) => Attempt {
                error: JobError::StillDestroying { vmid },
                retryable: true,
            },
            Err(failure) => failure,
        };
        let text = error_chain(&failure.error);
        if !failure.retryable {
            tracing::warn!(%vmid, attempts, error = %text, "decommission refused");
            return Err(failure.error);
        }
        tracing::info!(%vmid, attempts, error = %text, "decommission attempt did not finish; looking again");
        if !patience.pause().await {
            return Err(JobError::GaveUp {
                attempts,
                last: Box::new(failure.error),
            });
        }
    }
    journal
        .retire_guest(op.op_id(), vmid.get())
        .await
        .map_err(JobError::journal("retiring the guest's record"))?;
    Ok(if let Some(machine) = destroy_sent {
        json!({ "vmid": vmid.get(), "kind": machine.as_str(), "destroyed": true, "attempts": attempts })
    } else {
        json!({ "vmid": vmid.get(), "already_gone": true })
    })
}

/// Looks at the guest, then stops and destroys it if it is still there and idle.
/// `destroy_sent` holds the kind of guest a destroy was sent for.
async fn pass<P: Pve + PveQemu>(
    pve: &P,
    op: &OpJournal,
    vmid: Vmid,
    identity: &str,
    destroy_sent: &mut Option<Machine>,
) -> Result<Pass, Attempt> {
    let sent = destroy_sent.is_some();
    let machine = match machine::held(pve, vmid, identity).await {
        Ok(Held::Nobody) => return Ok(Pass::Gone),
        Ok(Held::Ours(machine)) => machine,
        Ok(Held::Stranger(_)) => {
            return Err(Attempt {
                error: JobError::Stranger { vmid },
                retryable: false,
            });
        }
        Err(e) => return Err(Attempt::pve(e)),
    };
    let status = match machine::state(pve, machine, vmid).await {
        Err(e) if e.is_missing() => return Ok(Pass::Gone),
        Err(e) => return Err(Attempt::pve(e)),
        Ok(status) => status,
    };
    if status.lock.as_deref() == Some("destroyed") {
        return Ok(Pass::DestroyRunning);
    }
    if let Some(lock) = status.lock {
        return Err(Attempt {
            error: JobError::Locked { vmid, lock },
            retryable: true,
        });
    }
    let target = json!({ "vmid": vmid.get(), "kind": machine.as_str() });
    if status.status == GuestStatus::Running {
        let stopped = match machine {
            Machine::Container => {
                op.task(pve, Op::StopCt, StepName::Stop, target, pve.stop_ct(vmid))
                    .await
            }
            Machine::Vm => {
                op.task(pve, Op::StopVm, StepName::Stop, target, pve.stop_vm(vmid))
                    .await
            }
        };
        stopped.map_err(|e| Attempt::step(e, sent))?;
    }
    *destroy_sent = Some(machine);
    let destroy = json!({ "vmid": vmid.get(), "kind": machine.as_str(), "purge": true });
    let destroyed = match machine {
        Machine::Container => {
            op.task(
                pve,
                Op::DestroyCt,
                StepName::Destroy,
                destroy,
                pve.destroy_ct(vmid, true),
            )
            .await
        }
        Machine::Vm => {
            op.task(
                pve,
                Op::DestroyVm,
                StepName::Destroy,
                destroy,
                pve.destroy_vm(vmid, true),
            )
            .await
        }
    };
    match destroyed {
        Ok(_) => Ok(Pass::Destroyed),
        Err(e) => Err(Attempt::step(e, true)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmid() -> Option<Vmid> {
        Vmid::new(100).ok()
    }

    #[test]
    fn refusals_are_not_retried_and_transient_failures_are() {
        let op = Op::DestroyCt;
        let forbidden = PveError::Forbidden {
            op,
            vmid: vmid(),
            path: Some("/vms/100".to_owned()),
            privilege: Some("VM.Allocate".to_owned()),
            message: "Permission check failed".to_owned(),
        };
        let bad = PveError::BadRequest {
            op,
            vmid: vmid(),
            message: "Parameter verification failed.".to_owned(),
            errors: std::collections::BTreeMap::new(),
        };
        let protected = PveError::Api {
            op,
            vmid: vmid(),
            status: 500,
            message: "can't remove CT 100 - protection mode enabled".to_owned(),
        };
        for refusal in [&forbidden, &bad, &protected] {
            assert!(!is_retryable(refusal), "{refusal}");
        }
        let daemon = PveError::Api {
            op: Op::CtStatus,
            vmid: vmid(),
            status: 500,
            message: "got unexpected error from daemon".to_owned(),
        };
        let busy = PveError::Busy {
            op,
            vmid: vmid(),
            status: 596,
            message: "Connection timed out".to_owned(),
        };
        let locked = PveError::Locked {
            op,
            vmid: vmid(),
            lock: Some("backup".to_owned()),
            message: "CT is locked (backup)".to_owned(),
        };
        for transient in [&daemon, &busy, &locked] {
            assert!(is_retryable(transient), "{transient}");
        }
        // After a destroy was sent, a failed task is looked into; a refusal is not.
        assert!(!Attempt::step(step_error(protected), true).retryable);
        assert!(!Attempt::step(step_error(forbidden), true).retryable);
    }

    fn step_error(source: PveError) -> StepError {
        StepError::Pve {
            op_id: crate::ops::journal::OpId::new(),
            step: "destroy".to_owned(),
            source,
        }
    }
}
