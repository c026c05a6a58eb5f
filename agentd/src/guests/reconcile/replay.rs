//! Journal replay on start (DESIGN §9): every operation a crash left
//! `running` is resumed or rolled back before the first reconcile pass.
//!
//! First the operation's open step is closed
//! ([`crate::ops::operation::replay::close_open_step`]); what follows looks at Proxmox
//! before it acts.
//!
//! - `provision`: the guests the journal says this operation created are
//!   checked against Proxmox, and one counts as created only if it carries
//!   this operation's tag (a restore whose intent was written but which never
//!   reached Proxmox leaves a row for a vmid someone else may have taken).
//!   A guest holding `lock: create` is a restore still in flight — possibly
//!   this operation's, whose tag arrives when it ends — so replay waits for it
//!   ([`super::lookup::settle_restore`]) before deciding; a restore still
//!   running when the wait ends leaves the operation `running` (and the row in
//!   place) for the next start instead of forgetting a guest that may be ours.
//!   A restore whose intent was written but whose answer never arrived may not have
//!   landed yet: it is watched for a landing window
//!   ([`super::lookup::await_landing`]) before its absence counts, and for a late landing
//!   after that ([`super::late_landing`]).
//!   - no such guest: nothing was built; the rows are dropped and the
//!     operation closes `compensated` (the next pass provisions afresh);
//!   - the guest exists, its restore did not fail and the guest is still
//!     desired: provisioning **resumes** after `restore` (every later step is
//!     idempotent), rolling back if a step fails;
//!   - otherwise it is **rolled back**: destroyed through the gate as
//!     compensation of this operation.
//! - `dr_restore`: like `provision`, from the source its `choose_source` step recorded:
//!   resumed when its guest exists, else closed (or rolled back); a DR closed without its
//!   guest leaves the guest noted lost, so the next pass restores it afresh.
//! - `provision_vm` and `dr_restore_vm`: the same, through the VM provisioner (decisions 0114,
//!   0121).
//! - reconcile actions (`set_spec`, `grow_rootfs`, `start`, `stop`): closed
//!   `failed`; the next pass looks again.
//! - the other kinds have replayers of their own ([`crate::ops::operation::OpKind`] names them).

use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::desired::DesiredState;
use bosun_pve::{Pve, Vmid};
use serde_json::json;
use uuid::Uuid;

use super::lookup::{RestoreSeen, await_landing, landing_window, settle_restore};
use super::provision::{Provisioner, compensate, op_tag};
use crate::ops::journal::{JournalError, JournalHandle, OpStatus, StepState, UnfinishedOperation};
use crate::ops::operation::OpJournal;
use crate::ops::operation::OpKind;
use crate::ops::operation::StepName;
use crate::ops::operation::replay::close_open_step;

/// How long replay waits for a guest a crashed restore left locked.
const LOCK_WAIT: Duration = Duration::from_secs(120);

/// What replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Provisions resumed to completion.
    pub resumed: usize,
    /// Provisions rolled back (or found to have built nothing).
    pub rolled_back: usize,
    /// Reconcile actions closed as interrupted.
    pub closed: usize,
    /// Operations that could be neither resumed nor rolled back; left
    /// `running` for the next start.
    pub stuck: usize,
}

/// Replays the unfinished reconcile operations (the reconcile list of
/// [`crate::ops::operation::replay::sort`]).
pub async fn replay<P: Pve + 'static>(
    pve: &P,
    journal: &JournalHandle,
    provisioner: &Provisioner<P>,
    unfinished: Vec<UnfinishedOperation>,
) -> Result<ReplaySummary, JournalError> {
    let mut summary = ReplaySummary::default();
    let desired: Option<DesiredState> = journal
        .cached_desired_state()
        .await?
        .and_then(|c| serde_json::from_str(&c.body).ok());
    for unfinished in unfinished {
        let Some(kind) = unfinished.operation.op_kind() else {
            continue;
        };
        let op = OpJournal::resume(journal, unfinished.operation.op_id, kind);
        close_open_step(pve, &op, &unfinished).await;
        if kind == OpKind::ProvisionVm || kind == OpKind::RecoverVm {
            replay_vm(
                provisioner,
                &op,
                &unfinished,
                desired.as_ref(),
                &mut summary,
            )
            .await;
            continue;
        }
        if kind != OpKind::Provision && kind != OpKind::Recover {
            let _ = op
                .finish(
                    OpStatus::Failed,
                    Some("interrupted; retried by reconcile".into()),
                )
                .await;
            summary.closed += 1;
            continue;
        }
        let spec = unfinished
            .operation
            .guest_id
            .as_deref()
            .and_then(|g| Uuid::parse_str(g).ok())
            .and_then(|g| {
                desired
                    .as_ref()
                    .and_then(|d| d.guests.iter().find(|s| s.guest_id == g).cloned())
            });
        let resume = match (kind, spec.as_ref()) {
            (OpKind::Provision, Some(spec)) => Some(Resume::Provision(spec)),
            (OpKind::Recover, Some(spec)) => recovery_of(journal, &op)
                .await
                .map(|recovery| Resume::Recover(spec, recovery)),
            _ => None,
        };
        match replay_provision(pve, journal, provisioner, &op, resume).await {
            Ok(Outcome::Resumed) => summary.resumed += 1,
            Ok(Outcome::RolledBack) => summary.rolled_back += 1,
            Err(reason) => {
                summary.stuck += 1;
                tracing::error!(op_id = %op.op_id(), error = %reason, "replay could neither resume nor roll back a provision");
            }
        }
    }
    Ok(summary)
}

enum Outcome {
    Resumed,
    RolledBack,
}

/// Replays a `provision_vm` or a `dr_restore_vm` through the VM provisioner ([`super::provision::vm`]); without
/// one the operation is left `running` (its VM, if any, untouched) for an agent that has it.
async fn replay_vm<P: Pve + 'static>(
    provisioner: &Provisioner<P>,
    op: &OpJournal,
    unfinished: &UnfinishedOperation,
    desired: Option<&DesiredState>,
    summary: &mut ReplaySummary,
) {
    let Some(vms) = provisioner.vms() else {
        summary.stuck += 1;
        tracing::error!(op_id = %op.op_id(), "an interrupted vm provisioning needs the vm provisioner; left for the next start");
        return;
    };
    let spec = unfinished
        .operation
        .guest_id
        .as_deref()
        .and_then(|g| Uuid::parse_str(g).ok())
        .and_then(|g| desired.and_then(|d| d.guests.iter().find(|s| s.guest_id == g)));
    let replayed = if op.kind() == OpKind::RecoverVm {
        let recovery = recovery_of(op.journal(), op).await;
        vms.replay_recovery(op, spec, recovery).await
    } else {
        vms.replay(op, spec).await
    };
    match replayed {
        Ok(true) => summary.resumed += 1,
        Ok(false) => summary.rolled_back += 1,
        Err(reason) => {
            summary.stuck += 1;
            tracing::error!(op_id = %op.op_id(), error = %reason, "replay could neither resume nor roll back a vm provisioning");
        }
    }
}

/// How an interrupted bring-up continues once its guest is found.
enum Resume<'a> {
    /// Provisioning of this guest.
    Provision(&'a bosun_proto::desired::GuestSpec),
    /// A DR restore of this guest from the source its `choose_source` step recorded.
    Recover(
        &'a bosun_proto::desired::GuestSpec,
        super::provision::Recovery,
    ),
}

/// What DR restore `op` recorded in its `choose_source` step; `None` if it did not get
/// that far (or the record is unreadable), so the operation is rolled back.
async fn recovery_of(
    journal: &JournalHandle,
    op: &OpJournal,
) -> Option<super::provision::Recovery> {
    let steps = journal.steps(op.op_id()).await.ok()?;
    let detail = steps
        .into_iter()
        .find(|s| s.name == StepName::ChooseSource)?
        .detail;
    let text = |k: &str| detail.get(k).and_then(serde_json::Value::as_str);
    let number = |k: &str| detail.get(k).and_then(serde_json::Value::as_u64);
    Some(super::provision::Recovery {
        lost_vmid: u32::try_from(number("lost_vmid")?).ok()?,
        source: crate::data::recovery::BackupSource {
            tier: u32::try_from(number("tier")?).ok()?,
            storage: bosun_pve::StorageId::new(text("storage")?.to_owned()).ok()?,
            archive: bosun_pve::VolumeId::new(text("archive")?.to_owned()).ok()?,
            taken_at: text("taken_at")?.parse().ok()?,
            retired_key: text("retired_key").map(str::to_owned),
        },
        lost_since: text("lost_since")?.parse().ok()?,
        trigger: match text("trigger") {
            Some("job") => "job",
            Some("host_loss") => "host_loss",
            _ => "auto",
        },
    })
}

async fn replay_provision<P: Pve + 'static>(
    pve: &P,
    journal: &JournalHandle,
    provisioner: &Provisioner<P>,
    op: &OpJournal,
    resume: Option<Resume<'_>>,
) -> Result<Outcome, String> {
    let created: Vec<u32> = journal
        .all_provenance()
        .await
        .map_err(|e| error_chain(&e))?
        .into_iter()
        .filter(|p| p.created_by_op() == op.op_id())
        .map(|p| p.vmid())
        .collect();
    // A restore the crash interrupted before its answer arrived may still land: it is
    // watched for a landing window (from the intent's time) before it counts as never sent.
    let unanswered_since = journal
        .steps(op.op_id())
        .await
        .map_err(|e| error_chain(&e))?
        .into_iter()
        .rev()
        .find(|s| s.name == StepName::Restore)
        .filter(|s| s.upid.is_none())
        .map(|s| s.intent_at);
    let mut ours = None;
    for vmid in created {
        let pve_vmid = Vmid::new(vmid).map_err(|e| e.to_string())?;
        let seen = match unanswered_since {
            Some(asked_at) => {
                let window = landing_window(pve.retry_policy());
                await_landing(pve, pve_vmid, &op_tag(op), asked_at, window, LOCK_WAIT).await?
            }
            None => settle_restore(pve, pve_vmid, &op_tag(op), LOCK_WAIT).await?,
        };
        tracing::info!(vmid, op_id = %op.op_id(), ?seen, "replay looked at a guest the operation may have created");
        if seen == RestoreSeen::StillRunning {
            return Err(format!(
                "a restore is still running on guest {vmid}; left for the next start"
            ));
        }
        if seen == RestoreSeen::Ours {
            ours = Some(pve_vmid);
        } else {
            if let (RestoreSeen::Unlanded, Some(asked_at)) = (&seen, unanswered_since) {
                super::late_landing::watch(op, pve_vmid, asked_at)
                    .await
                    .map_err(|e| error_chain(&e))?;
            }
            op.local(StepName::ForgetUnclaimed, json!({ "vmid": vmid }), async {
                Ok::<(), String>(())
            })
            .await
            .map_err(|e| error_chain(&e))?;
            journal
                .forget_guest(op.op_id(), vmid)
                .await
                .map_err(|e| error_chain(&e))?;
        }
    }
    let Some(vmid) = ours else {
        op.finish(
            OpStatus::Compensated,
            Some("interrupted before a guest existed".into()),
        )
        .await
        .map_err(|e| error_chain(&e))?;
        return Ok(Outcome::RolledBack);
    };
    wait_unlocked(pve, vmid).await?;
    let steps = journal
        .steps(op.op_id())
        .await
        .map_err(|e| error_chain(&e))?;
    let restore_failed = steps
        .iter()
        .rev()
        .find(|s| s.name == StepName::Restore)
        .is_some_and(|s| s.state == StepState::Failed && s.upid.is_some());
    match resume {
        Some(Resume::Provision(spec)) if !restore_failed => {
            provisioner
                .resume(op, spec, vmid)
                .await
                .map_err(|e| error_chain(&e))?;
            Ok(Outcome::Resumed)
        }
        Some(Resume::Recover(spec, recovery)) if !restore_failed => {
            provisioner
                .resume_recovery(op, spec, vmid, recovery)
                .await
                .map_err(|e| error_chain(&e))?;
            Ok(Outcome::Resumed)
        }
        _ => {
            compensate(pve, op, Some(vmid))
                .await
                .map_err(|e| error_chain(&e))?;
            op.finish(
                OpStatus::Compensated,
                Some("interrupted; rolled back on start".into()),
            )
            .await
            .map_err(|e| error_chain(&e))?;
            Ok(Outcome::RolledBack)
        }
    }
}

/// Waits until a restore the crash interrupted has released the guest.
pub(crate) async fn wait_unlocked<P: Pve>(pve: &P, vmid: Vmid) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + LOCK_WAIT;
    loop {
        match pve.ct_config(vmid).await {
            Ok(config) if config.lock().is_none() => return Ok(()),
            Ok(_) => {}
            Err(e) if e.is_missing() => return Ok(()),
            Err(e) => return Err(error_chain(&e)),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("guest {vmid} stayed locked"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
