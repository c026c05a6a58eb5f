//! One controller rollout, a journaled operation of kind `controller_update_job` run by the job
//! runner in the guest's queue slot after its `accepted` step:
//!
//! | step | what | on a crash (resumed from the journal's steps) |
//! |---|---|---|
//! | `snapshot` | snapshot the guest (`bosun-ctl-…`), task looked up if its answer was lost | a snapshot that did not end well is taken again |
//! | `announce` | journal and serve the new digest (`rolling_out`) | repeated (idempotent) |
//! | `place` | the helper places the signed image in the guest and restarts the controller on it (`restart_controller` with the digest: hashed on the host, pushed, loaded, tagged, measured back) | placed again (idempotent) |
//! | `await_health` | wait for the controller's healthy report of that digest | an interrupted wait waits again |
//! | `commit` | journal it `running` | repeated |
//! | `revert` | on an unhealthy report or silence: serve the previous digest again (`rolled_back`) | repeated |
//! | `check_bootstrap`, `rollback` | on an **unhealthy report** only: gate (own snapshot), then roll the guest back to the snapshot and start it | a rollback that did not end well is sent again |
//! | `heal`, `break` | on **silence**: restart the controller in place (helper `restart_controller`), then journal it `broken` | an interrupted restart is asked again; `break` repeated |
//!
//! **Silence never rolls a guest back** (DESIGN §7). Rolling back to the snapshot throws away
//! everything the customer wrote since it was taken, and silence is no verdict on the new
//! controller: a connection flood, a hung pull or a loaded host look the same. Only the
//! controller's own authenticated `unhealthy` report of the new digest (journaled as the
//! `await_health` step's failure, [`HealthWait::is_unhealthy_report`]) rolls back to the
//! snapshot. Silence, a wait that ended some other way, or a rollout found reverted without
//! that report (a resumed one included) reverts the digest, heals in place, marks the
//! controller `broken` and audits `controller.broken` (the hub alerts); the snapshot is kept
//! and the operator decides with a signed job.
//!
//! A **failed placement** (the helper refused the image or the guest, or the image it measured
//! back in the guest is not the signed one) is a verdict too: the guest may hold part of the
//! new image, so it is rolled back to the snapshot taken moments before, as after an unhealthy
//! report.
//!
//! The job succeeds when the digest is committed and fails otherwise: `rolled_back: …` when
//! the guest was rolled back, `broken: …` when it was kept as it was.

use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::helper::{Output, Request, RestartController, Sha256Hex, Vmid as HelperVmid};
use bosun_pve::{GuestOps, Op, SnapName, Vmid};
use serde_json::{Value, json};

use super::board::{Announced, ControllerBoard, HealthWait};
use super::heal_task::restart_in_place;
use super::{BROKEN_ACTION, COMMITTED_ACTION, ControllerSettings, ROLLED_BACK_ACTION};
use crate::links::helper::{HelperClient, HelperClientError};
use crate::ops::journal::{AuditEvent, ControllerState, JournalHandle, Step, StepState};
use crate::ops::operation::StepName;
use crate::ops::operation::{OpJournal, StepError};
use crate::trust::gate::{self, Action, Authority, GateRequest, JobAuthority, Provenance, Target};

/// Prefix of the snapshots a rollout takes.
pub const ROLLOUT_SNAPSHOT_PREFIX: &str = "bosun-ctl-";

/// The `cause` of a `controller.broken` audit entry written by a rollout whose controller
/// stayed silent (the heal task's entries have none).
pub const ROLLOUT_SILENT_CAUSE: &str = "rollout_silent";

/// The revert step's verdict when the new controller stayed silent through its window.
const SILENT_VERDICT: &str = "silent";

/// What a rollout needs besides its operation.
#[derive(Debug, Clone)]
pub struct RolloutContext {
    /// Proxmox, scoped per call to the guest's vmid.
    pub ops: Arc<dyn GuestOps>,
    /// The journal.
    pub journal: JournalHandle,
    /// What controllers are told and what they report.
    pub board: ControllerBoard,
    /// The helper, to restart a silent controller in place (none: the restart fails).
    pub helper: Option<HelperClient>,
    /// Timings.
    pub settings: ControllerSettings,
}

/// What a signed `controller-update` job asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    /// The guest.
    pub guest_id: String,
    /// Its vmid.
    pub vmid: u32,
    /// The signed digest.
    pub digest: String,
}

/// What the controller told of the new digest, as the `await_health` step settled it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// It reported the digest healthy.
    Healthy,
    /// Its own authenticated report called the digest unhealthy: the one verdict that rolls
    /// the guest back to the snapshot.
    Unhealthy(String),
    /// No report within the window, or a failure that is not its report: never a rollback.
    Silent(String),
    /// The helper could not place the signed image: rolled back to the snapshot.
    NotPlaced(String),
}

impl Verdict {
    /// The verdict a failed `await_health` step of `digest` records (`None`: interrupted by a
    /// crash, which is no verdict at all).
    fn of_failure(error: &str, digest: &str) -> Option<Self> {
        if error.starts_with("interrupted") {
            None
        } else if HealthWait::is_unhealthy_report(error, digest) {
            Some(Self::Unhealthy(error.to_owned()))
        } else {
            Some(Self::Silent(error.to_owned()))
        }
    }
}

/// Where an operation stands, from its journaled steps (none but `accepted` on a fresh run).
#[derive(Debug, Default, PartialEq, Eq)]
struct Progress {
    snapshot: Option<String>,
    announced: bool,
    placed: bool,
    /// `None`: not judged yet (or the wait was interrupted by a crash).
    health: Option<Verdict>,
    committed: bool,
    reverted: bool,
    rolled_back: bool,
    /// The in-place restart after silence was asked (whatever came of it).
    healed: bool,
    broken: bool,
}

impl Progress {
    /// Reads the operation's steps; a step whose name the step table does not hold (a journal
    /// another version wrote) is an error, never skipped: what it did is unknown.
    fn of(steps: &[Step], digest: &str) -> Result<Self, String> {
        let mut progress = Self::default();
        for step in steps {
            let Some(name) = StepName::parse(&step.name) else {
                let stored: String = step.name.chars().take(64).collect();
                return Err(format!(
                    "step {stored:?} of this rollout has no entry in this agent's step table"
                ));
            };
            let ok = step.state == StepState::Ok;
            let error = step.error.as_deref().unwrap_or_default();
            let ended =
                ok || (step.state == StepState::Failed && !error.starts_with("interrupted"));
            match name {
                StepName::Snapshot if ok => {
                    progress.snapshot = step
                        .detail
                        .get("snapshot")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                }
                StepName::Announce if ok => progress.announced = true,
                StepName::Place if ok => progress.placed = true,
                StepName::Place if ended => {
                    progress.health = Some(Verdict::NotPlaced(error.to_owned()));
                }
                StepName::AwaitHealth if ok => progress.health = Some(Verdict::Healthy),
                StepName::AwaitHealth if step.state == StepState::Failed => {
                    if let Some(verdict) = Verdict::of_failure(error, digest) {
                        progress.health = Some(verdict);
                    }
                }
                StepName::Commit if ok => progress.committed = true,
                StepName::Revert if ok => progress.reverted = true,
                StepName::Rollback if ok => progress.rolled_back = true,
                StepName::Heal if ended => progress.healed = true,
                StepName::Break if ok => progress.broken = true,
                // A rollout's steps that have not ended (well), and those that mark no stage.
                StepName::Snapshot
                | StepName::Announce
                | StepName::Place
                | StepName::AwaitHealth
                | StepName::Commit
                | StepName::Revert
                | StepName::Rollback
                | StepName::Heal
                | StepName::Break
                | StepName::Accepted
                | StepName::CheckBootstrap => {}
                // Steps a rollout does not write.
                StepName::AdoptCheck
                | StepName::DeleteArchive
                | StepName::RestoreBulk
                | StepName::RecordAdopted
                | StepName::TagIdentity
                | StepName::CheckGolden
                | StepName::NextId
                | StepName::Restore
                | StepName::ReadConfig
                | StepName::ResetIdentity
                | StepName::AssignAddress
                | StepName::SetAddress
                | StepName::GuardNet
                | StepName::GuardFirewall
                | StepName::ReadFirewall
                | StepName::Size
                | StepName::SetNetRate
                | StepName::ResizeRootfs
                | StepName::ShutdownVm
                | StepName::ResizeVmDisk
                | StepName::BulkVolume
                | StepName::HotVolume
                | StepName::VmVolume
                | StepName::Start
                | StepName::ManageController
                | StepName::ChooseSource
                | StepName::StartIsolated
                | StepName::ResetGuestIdentity
                | StepName::ShutdownIsolated
                | StepName::LinksUp
                | StepName::CheckToken
                | StepName::RevokeToken
                | StepName::StoreToken
                | StepName::PushBootstrap
                | StepName::Shutdown
                | StepName::Stop
                | StepName::SetSpec
                | StepName::ForgetUnclaimed
                | StepName::Destroy
                | StepName::LateLanding
                | StepName::CompensateStop
                | StepName::CompensateDestroy
                | StepName::RestoreVm
                | StepName::CheckVmIdentity
                | StepName::StartVm
                | StepName::AgentPing
                | StepName::WriteBootstrap
                | StepName::CompensateStopVm
                | StepName::CompensateDestroyVm
                | StepName::Backup
                | StepName::Vzdump
                | StepName::ChooseArchive
                | StepName::Isolate
                | StepName::StayedUp
                | StepName::RestoreCheck
                | StepName::DrRestore
                | StepName::RestoreOverwrite
                | StepName::DeleteStorage
                | StepName::Unmount
                | StepName::Download
                | StepName::Stage
                | StepName::HelperOpen
                | StepName::HelperClose => {}
            }
        }
        Ok(progress)
    }
}

fn step_text(e: StepError) -> String {
    error_chain(&e)
}

/// Carries the rollout on from where the journal shows it stands; `Ok` with the job's output
/// once committed, `Err` with the reason otherwise (`rolled_back: …` after a rollback).
pub async fn run(
    ctx: &RolloutContext,
    op: &OpJournal,
    rollout: &Rollout,
    authority: &JobAuthority,
) -> Result<Value, String> {
    let vmid = Vmid::new(rollout.vmid).map_err(|e| e.to_string())?;
    let journal = &ctx.journal;
    // Reports from here on count: a fast controller may answer before the wait begins.
    let mut after = ctx.board.seq();
    let steps = journal
        .steps(op.op_id())
        .await
        .map_err(|e| error_chain(&e))?;
    let mut progress = Progress::of(&steps, &rollout.digest)?;

    let snapshot = match progress.snapshot.clone() {
        Some(name) => name,
        None => take_snapshot(ctx, op, rollout, vmid, authority).await?,
    };
    if !progress.announced {
        let previous = ctx
            .board
            .announced(&rollout.guest_id)
            .and_then(|a| a.digest);
        op.local(
            StepName::Announce,
            json!({ "vmid": rollout.vmid, "digest": rollout.digest, "previous": previous }),
            async {
                journal
                    .controller_announce(
                        rollout.guest_id.clone(),
                        rollout.vmid,
                        rollout.digest.clone(),
                        op.op_id(),
                    )
                    .await
                    .map_err(|e| error_chain(&e))?;
                mirror(ctx, rollout).await;
                Ok(())
            },
        )
        .await
        .map_err(step_text)?;
        tracing::info!(guest_id = %rollout.guest_id, vmid = rollout.vmid, digest = %rollout.digest, "controller digest announced");
    } else {
        mirror(ctx, rollout).await;
    }
    if !progress.placed && progress.health.is_none() && !progress.reverted {
        let placed = op
            .local(
                StepName::Place,
                json!({ "vmid": rollout.vmid, "digest": rollout.digest }),
                place(ctx, rollout),
            )
            .await;
        match placed {
            // Only a report after the restart on the placed image speaks for it: the old
            // controller knows the new digest too.
            Ok(()) => after = ctx.board.seq(),
            Err(StepError::Other { reason, .. }) => {
                progress.health = Some(Verdict::NotPlaced(reason))
            }
            Err(e) => return Err(step_text(e)),
        }
    }
    if progress.health.is_none() && !progress.reverted {
        let window = ctx.settings.health_window;
        let waited = op
            .local(
                StepName::AwaitHealth,
                json!({ "vmid": rollout.vmid, "digest": rollout.digest, "window_ms": window.as_millis() }),
                async {
                    ctx.board
                        .wait_healthy(&rollout.guest_id, &rollout.digest, after, window)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                },
            )
            .await;
        progress.health = match waited {
            Ok(()) => Some(Verdict::Healthy),
            // Read back as a replay would: the same text decides the same way.
            Err(StepError::Other { reason, .. }) => Verdict::of_failure(&reason, &rollout.digest),
            Err(e) => return Err(step_text(e)),
        };
    }
    match progress.health.clone() {
        Some(Verdict::Healthy) if !progress.reverted => {
            if !progress.committed {
                commit(ctx, op, rollout).await?;
            }
            Ok(
                json!({ "vmid": rollout.vmid, "digest": rollout.digest, "snapshot": snapshot, "state": "running" }),
            )
        }
        Some(Verdict::Unhealthy(reason) | Verdict::NotPlaced(reason)) => {
            roll_back(ctx, op, rollout, vmid, &snapshot, &reason, &progress).await
        }
        health => {
            let reason = match health {
                Some(Verdict::Silent(reason)) => reason,
                _ => "reverted before it was committed".to_owned(),
            };
            keep_broken(ctx, op, rollout, &snapshot, &reason, &progress).await
        }
    }
}

/// Has the helper place the signed image in the guest and restart the controller on it; keeps
/// what it measured of the image in the guest on the board.
async fn place(ctx: &RolloutContext, rollout: &Rollout) -> Result<(), String> {
    let helper = ctx
        .helper
        .as_ref()
        .ok_or("no [helper] configured: cannot place the controller image")?;
    let hex = rollout.digest.strip_prefix("sha256:").unwrap_or_default();
    let image = Sha256Hex::new(hex.to_owned()).map_err(|e| e.to_string())?;
    let vmid = HelperVmid::new(u64::from(rollout.vmid)).map_err(|e| e.to_string())?;
    let request = Request::RestartController(RestartController {
        vmid,
        image: Some(image),
    });
    // A lost answer leaves it unknown whether the helper placed the image: every part of the
    // placement is idempotent, so it is asked once more, and its measurement decides.
    let output = match helper.call(&request).await {
        Err(e @ (HelperClientError::Receive { .. } | HelperClientError::NoAnswer { .. })) => {
            tracing::warn!(guest_id = %rollout.guest_id, vmid = rollout.vmid, error = %error_chain(&e), "the helper's answer to the placement was lost; asking again");
            helper.call(&request).await
        }
        answered => answered,
    };
    let output = output.map_err(|e| error_chain(&e))?;
    let Output::ControllerRestarted { measured, .. } = output else {
        return Err(format!(
            "the helper answered {output:?} to restart_controller"
        ));
    };
    super::board::keep_measurement(
        &ctx.journal,
        &ctx.board,
        &rollout.guest_id,
        measured.clone(),
    )
    .await;
    if measured.as_deref() != Some(rollout.digest.as_str()) {
        return Err(format!(
            "the helper measured {} in the guest, not the signed {}",
            measured.as_deref().unwrap_or("no image"),
            rollout.digest
        ));
    }
    tracing::info!(guest_id = %rollout.guest_id, vmid = rollout.vmid, digest = %rollout.digest, "controller image placed and measured");
    Ok(())
}

/// Serves what the journal now holds for the guest.
async fn mirror(ctx: &RolloutContext, rollout: &Rollout) {
    match ctx.journal.controllers().await {
        Ok(records) => {
            if let Some(record) = records.iter().find(|r| r.guest_id == rollout.guest_id) {
                ctx.board.announce(
                    &record.guest_id,
                    record.vmid,
                    Announced {
                        digest: record.digest.clone(),
                        state: record.state,
                        op_id: record.op_id,
                    },
                );
            }
        }
        Err(e) => {
            tracing::error!(guest_id = %rollout.guest_id, error = %error_chain(&e), "could not read the controller record back");
        }
    }
}

async fn take_snapshot(
    ctx: &RolloutContext,
    op: &OpJournal,
    rollout: &Rollout,
    vmid: Vmid,
    authority: &JobAuthority,
) -> Result<String, String> {
    ask_gate(
        &ctx.journal,
        GateRequest {
            action: Action::Snapshot,
            target: Target::Guest { vmid: rollout.vmid },
            authority: Authority::SignedJob(authority.clone()),
            provenance: Provenance::unknown(),
        },
    )
    .await?;
    let ops = ctx.ops.as_ref();
    let existing: Vec<String> = ops
        .list_snapshots(vmid)
        .await
        .map_err(|e| error_chain(&e))?
        .into_iter()
        .map(|s| s.name)
        .collect();
    // Named by the wall clock, as Proxmox stamps its tasks.
    let name = snapshot_name(jiff::Timestamp::now(), &existing)?;
    let description = format!("before controller {}", rollout.digest);
    let detail = json!({ "vmid": rollout.vmid, "snapshot": name.as_str() });
    op.task_looked(
        StepName::Snapshot,
        detail,
        ops.create_snapshot(vmid, &name, Some(&description)),
        |asked_at| ops.find_task(vmid, "vzsnapshot", asked_at),
        |upid| async move { ops.wait_task(Op::CreateSnapshot, &upid).await },
    )
    .await
    .map_err(|e| {
        format!(
            "snapshot failed, nothing changed in the guest: {}",
            step_text(e)
        )
    })?;
    Ok(name.to_string())
}

/// `bosun-ctl-YYYYMMDD-HHMMSS`, with `-N` appended while the name is taken.
fn snapshot_name(now: jiff::Timestamp, taken: &[String]) -> Result<SnapName, String> {
    let base = format!("{ROLLOUT_SNAPSHOT_PREFIX}{}", now.strftime("%Y%m%d-%H%M%S"));
    let mut name = base.clone();
    let mut n = 2u32;
    while taken.contains(&name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    SnapName::new(name).map_err(|e| format!("cannot name the snapshot: {e}"))
}

async fn commit(ctx: &RolloutContext, op: &OpJournal, rollout: &Rollout) -> Result<(), String> {
    let journal = &ctx.journal;
    op.local(
        StepName::Commit,
        json!({ "vmid": rollout.vmid, "digest": rollout.digest }),
        async {
            journal
                .controller_commit(rollout.guest_id.clone(), rollout.digest.clone())
                .await
                .map_err(|e| error_chain(&e))
        },
    )
    .await
    .map_err(step_text)?;
    mirror(ctx, rollout).await;
    audit(journal, op, rollout, COMMITTED_ACTION, json!({})).await;
    tracing::info!(guest_id = %rollout.guest_id, vmid = rollout.vmid, digest = %rollout.digest, "controller rollout committed");
    Ok(())
}

async fn ask_gate(journal: &JournalHandle, request: GateRequest) -> Result<(), String> {
    let decision = gate::decide(&request);
    let _ = journal.append_audit(decision.audit_event(&request)).await;
    if decision.is_allowed() {
        Ok(())
    } else {
        Err(format!(
            "gate denied {:?}: {}",
            request.action,
            decision.reason()
        ))
    }
}

async fn roll_back(
    ctx: &RolloutContext,
    op: &OpJournal,
    rollout: &Rollout,
    vmid: Vmid,
    snapshot: &str,
    reason: &str,
    progress: &Progress,
) -> Result<Value, String> {
    let journal = &ctx.journal;
    revert(ctx, op, rollout, reason, "unhealthy", progress).await?;
    let rolled_back = if progress.rolled_back {
        Ok(())
    } else {
        rollback_to(ctx, op, rollout, vmid, snapshot).await
    };
    let detail = json!({
        "snapshot": snapshot,
        "reason": reason,
        "rolled_back": rolled_back.is_ok(),
        "error": rolled_back.as_ref().err(),
    });
    audit(journal, op, rollout, ROLLED_BACK_ACTION, detail).await;
    match rolled_back {
        Ok(()) => {
            // The guest is back on the snapshot's image: what was measured since is gone.
            ctx.board.measured(&rollout.guest_id, None);
            tracing::warn!(guest_id = %rollout.guest_id, vmid = rollout.vmid, digest = %rollout.digest, snapshot, reason, "controller rollout rolled back");
            Err(format!(
                "rolled_back: {reason}; guest {} is back on snapshot {snapshot}",
                rollout.vmid
            ))
        }
        Err(e) => {
            tracing::error!(guest_id = %rollout.guest_id, vmid = rollout.vmid, snapshot, error = %e, "rolling the guest back after a failed controller rollout failed");
            Err(format!(
                "rollback_failed: {reason}; rolling back to {snapshot}: {e}"
            ))
        }
    }
}

/// Serves the previous digest again: after an unhealthy report in state `rolled_back`; after
/// silence still `rolling_out`, so the heal task cannot restart the controller between the
/// revert and the rollout's own in-place restart (the break step then sets `broken`).
async fn revert(
    ctx: &RolloutContext,
    op: &OpJournal,
    rollout: &Rollout,
    reason: &str,
    verdict: &str,
    progress: &Progress,
) -> Result<(), String> {
    let state = if verdict == SILENT_VERDICT {
        ControllerState::RollingOut
    } else {
        ControllerState::RolledBack
    };
    if !progress.reverted {
        let journal = &ctx.journal;
        op.local(
            StepName::Revert,
            json!({ "vmid": rollout.vmid, "digest": rollout.digest, "reason": reason, "verdict": verdict }),
            async {
                journal
                    .controller_revert(rollout.guest_id.clone(), state)
                    .await
                    .map_err(|e| error_chain(&e))
            },
        )
        .await
        .map_err(step_text)?;
    }
    mirror(ctx, rollout).await;
    Ok(())
}

/// The new controller stayed silent: the previous digest is served again and the controller
/// restarted in place, then it is `broken` and audited. The guest keeps its data: no rollback,
/// the snapshot stays for the operator to decide on with a signed job.
async fn keep_broken(
    ctx: &RolloutContext,
    op: &OpJournal,
    rollout: &Rollout,
    snapshot: &str,
    reason: &str,
    progress: &Progress,
) -> Result<Value, String> {
    let journal = &ctx.journal;
    revert(ctx, op, rollout, reason, SILENT_VERDICT, progress).await?;
    let previous = ctx
        .board
        .announced(&rollout.guest_id)
        .and_then(|a| a.digest);
    let healed = if progress.healed {
        None
    } else {
        let asked = op
            .local(
                StepName::Heal,
                json!({ "vmid": rollout.vmid, "digest": previous }),
                restart_in_place(
                    journal,
                    (ctx.helper.as_ref(), &ctx.board),
                    (&rollout.guest_id, rollout.vmid),
                ),
            )
            .await;
        match asked {
            Ok(()) => Some(Ok(())),
            Err(StepError::Other { reason, .. }) => Some(Err(reason)),
            Err(e) => return Err(step_text(e)),
        }
    };
    if !progress.broken {
        op.local(
            StepName::Break,
            json!({ "vmid": rollout.vmid, "digest": rollout.digest, "reason": reason }),
            async {
                journal
                    .controller_set_state(rollout.guest_id.clone(), ControllerState::Broken)
                    .await
                    .map_err(|e| error_chain(&e))
            },
        )
        .await
        .map_err(step_text)?;
    }
    mirror(ctx, rollout).await;
    // A healthy report from before the break says nothing about the restarted controller.
    ctx.board.forget_healthy(&rollout.guest_id);
    let detail = json!({
        "previous_digest": previous,
        "cause": ROLLOUT_SILENT_CAUSE,
        "reason": reason,
        "snapshot": snapshot,
        "rolled_back": false,
        "restarted": healed.as_ref().map(Result::is_ok),
        "error": healed.as_ref().and_then(|h| h.as_ref().err()),
    });
    audit(journal, op, rollout, BROKEN_ACTION, detail).await;
    match &healed {
        Some(Err(e)) => {
            tracing::error!(guest_id = %rollout.guest_id, vmid = rollout.vmid, digest = %rollout.digest, snapshot, reason, error = %e, "controller silent through its rollout; reverted, the in-place restart failed, broken, not rolled back");
        }
        _ => {
            tracing::error!(guest_id = %rollout.guest_id, vmid = rollout.vmid, digest = %rollout.digest, snapshot, reason, "controller silent through its rollout; reverted, restarted in place, broken, not rolled back");
        }
    }
    let restart = match &healed {
        Some(Ok(())) => "the controller was restarted in place".to_owned(),
        Some(Err(e)) => format!("restarting the controller in place failed ({e})"),
        None => "an in-place restart was asked before".to_owned(),
    };
    Err(format!(
        "broken: {reason}; {} is served again and {restart}; guest {} was not rolled back (snapshot {snapshot} kept for the operator)",
        previous.as_deref().unwrap_or("no digest"),
        rollout.vmid
    ))
}

/// Audits `action` of `rollout` (operation `op`): the guest, its vmid and the rollout's
/// digest, with `extra`'s fields. A failure to audit is logged; the rollout goes on.
async fn audit(
    journal: &JournalHandle,
    op: &OpJournal,
    rollout: &Rollout,
    action: &str,
    extra: Value,
) {
    let mut detail = json!({
        "guest_id": rollout.guest_id,
        "vmid": rollout.vmid,
        "digest": rollout.digest,
    });
    if let (Some(detail), Value::Object(extra)) = (detail.as_object_mut(), extra) {
        detail.extend(extra);
    }
    let mut event = AuditEvent::new(action);
    event.op_id = Some(op.op_id());
    event.guest_id = Some(rollout.guest_id.clone());
    event.vmid = Some(rollout.vmid);
    event.detail = detail;
    if let Err(e) = journal.append_audit(event).await {
        tracing::error!(op_id = %op.op_id(), action, error = %error_chain(&e), "could not audit a controller rollout");
    }
}

async fn rollback_to(
    ctx: &RolloutContext,
    op: &OpJournal,
    rollout: &Rollout,
    vmid: Vmid,
    snapshot: &str,
) -> Result<(), String> {
    let journal = &ctx.journal;
    let own = journal
        .own_snapshot(op.op_id(), rollout.vmid, snapshot.to_owned())
        .await
        .map_err(|e| error_chain(&e))?
        .ok_or_else(|| {
            format!("the journal shows no snapshot {snapshot} taken by this operation")
        })?;
    ask_gate(
        journal,
        GateRequest {
            action: Action::RollbackToSnapshot,
            target: Target::Guest { vmid: rollout.vmid },
            authority: Authority::OwnSnapshotRollback {
                op_id: op.op_id(),
                snapshot: own,
            },
            provenance: Provenance::unknown(),
        },
    )
    .await?;
    let name = SnapName::new(snapshot.to_owned()).map_err(|e| e.to_string())?;
    let ops = ctx.ops.as_ref();
    // The rolled-back filesystem holds the bootstrap of the snapshot's time: a token minted
    // since then is revoked, so the reconciler issues a fresh one (as for any rollback).
    let taken_at = ops
        .list_snapshots(vmid)
        .await
        .ok()
        .and_then(|all| all.into_iter().find(|s| s.name == snapshot))
        .and_then(|s| s.snaptime);
    op.local(
        StepName::CheckBootstrap,
        json!({ "vmid": rollout.vmid, "snapshot_time": taken_at }),
        async {
            crate::guests::credentials::stale::revoke_if_minted_after(
                journal,
                &rollout.guest_id,
                rollout.vmid,
                taken_at,
                "controller rollback",
            )
            .await
            .map(|_| ())
            .map_err(|e| error_chain(&e))
        },
    )
    .await
    .map_err(step_text)?;
    op.task_looked(
        StepName::Rollback,
        json!({ "vmid": rollout.vmid, "snapshot": snapshot }),
        ops.rollback(vmid, &name),
        |asked_at| ops.find_task(vmid, "vzrollback", asked_at),
        |upid| async move { ops.wait_task(Op::RollbackSnapshot, &upid).await },
    )
    .await
    .map(|_| ())
    .map_err(step_text)
}

#[cfg(test)]
mod tests;
