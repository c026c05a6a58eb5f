//! Dispatch of a job to its kind's family, as the table ([`super::kind`]) says: a claimed
//! job runs through its row's [`Runs`]; an operation a crash interrupted resumes through the
//! row its operation kind names, from its `accepted` step. That step is read here, once for
//! every family: a job without one (killed between its claim and its acceptance) is closed
//! failed, `interrupted before acceptance`, and reported. This is the one place that names
//! the families ([`JobFamily`]) and holds what each was set up with ([`Setups`]).

use bosun_pve::PveQemu;
use std::sync::Arc;

use bosun_pve::{Pve, StorageId};
use serde::de::DeserializeOwned;
use tracing::Instrument;
use uuid::Uuid;

use super::adopt_run::{AdoptJobs, AdoptSetup};
use super::break_glass_run::BreakGlassJobs;
use super::bulk_restore_run::{BulkRestoreJobs, BulkRestoreSetup};
use super::context::{JobContext, job_span};
use super::controller_run::ControllerJobs;
use super::detach::DetachContext;
use super::error::JobError;
use super::family::{Claimed, JobFamily};
use super::guest_run::{GuestJobs, GuestSetup};
use super::kind::{KindRow, Runs};
use super::restore_now::RestoreContext;
use super::storage_run::{DetachJobs, WipeJobs};
use super::update_run::{AgentUpdateJobs, UpdateJobs};
use crate::guests::controller::RolloutContext;
use crate::ops::journal::{JournalError, Operation, UnfinishedOperation};
use crate::ops::operation::OpJournal;
use crate::trust::break_glass::BreakGlass;

/// What each family was set up with; a family without its setup refuses its kinds.
#[derive(Debug)]
pub(super) struct Setups<P: Pve> {
    /// The jobs on one guest: their default storages and the recovery of lost guests.
    pub(super) guest: GuestSetup<P>,
    /// What `storage-detach` and `storage-wipe` jobs are judged on; without it they are
    /// refused.
    pub(super) detach: Option<DetachContext>,
    /// What `controller-update` jobs roll out through; without it they are refused.
    pub(super) controller: Option<RolloutContext>,
    /// The break-glass door; without it (no helper) break-glass jobs are refused.
    pub(super) break_glass: Option<BreakGlass>,
    /// What `agent-update` jobs need; without it they are refused.
    pub(super) update: Option<UpdateJobs>,
    /// What `adopt` jobs use (always set up; a bootstrap needs its issuer).
    pub(super) adopt: AdoptSetup,
    /// What `restore-bulk` jobs use; without it they are refused.
    pub(super) bulk_restore: Option<BulkRestoreSetup>,
}

impl<P: Pve> Setups<P> {
    /// The guest jobs' storages; every other family not set up.
    pub(super) fn new(restore_storage: StorageId, backup_storage: StorageId) -> Self {
        Self {
            guest: GuestSetup {
                restore_storage,
                backup_storage,
                recovery: None,
            },
            detach: None,
            controller: None,
            break_glass: None,
            update: None,
            adopt: AdoptSetup::default(),
            bulk_restore: None,
        }
    }

    /// The same setups, restoring lost guests and unnamed sources with `recovery`.
    pub(super) fn set_recovery(&mut self, recovery: RestoreContext<P>) {
        self.guest.recovery = Some(Arc::new(recovery));
    }
}

/// Runs a claimed job through its kind's family.
pub(super) async fn run_claimed<P: Pve + PveQemu + 'static>(
    context: &JobContext<P>,
    setups: &Setups<P>,
    job: Claimed,
) {
    match job.row.runs {
        Runs::Guest(_) => GuestJobs::run(context, Some(&setups.guest), job).await,
        Runs::StorageDetach => DetachJobs::run(context, setups.detach.as_ref(), job).await,
        Runs::StorageWipe => WipeJobs::run(context, setups.detach.as_ref(), job).await,
        Runs::ControllerUpdate => {
            ControllerJobs::run(context, setups.controller.as_ref(), job).await;
        }
        Runs::BreakGlass(_) => {
            BreakGlassJobs::run(context, setups.break_glass.as_ref(), job).await;
        }
        Runs::AgentUpdate => AgentUpdateJobs::run(context, setups.update.as_ref(), job).await,
        Runs::Adopt => AdoptJobs::run(context, Some(&setups.adopt), job).await,
        Runs::RestoreBulk => {
            BulkRestoreJobs::run(context, setups.bulk_restore.as_ref(), job).await;
        }
    }
}

/// Resumes the jobs a crash interrupted (the jobs list of
/// [`crate::ops::operation::replay::sort`]: their operations are still running in the
/// journal); gives how many ran on (those closed as interrupted before acceptance are
/// not counted).
pub(super) async fn resume<P: Pve + PveQemu + 'static>(
    context: &JobContext<P>,
    setups: &Setups<P>,
    unfinished: Vec<UnfinishedOperation>,
) -> Result<usize, JournalError> {
    let mut resumed = 0;
    for unfinished in unfinished {
        let Some(kind) = unfinished.operation.op_kind() else {
            continue;
        };
        let op = OpJournal::resume(&context.journal, unfinished.operation.op_id, kind);
        crate::ops::operation::replay::close_open_step(&*context.pve, &op, &unfinished).await;
        // A resumed job keeps the deadline its claim started (decision 0072).
        let op = match unfinished.operation.job_id.as_deref() {
            Some(job_id) => context.arm(op, job_id).await,
            None => op,
        };
        let operation = unfinished.operation;
        let span = job_span(operation.job_id.as_deref(), operation.request_id.as_deref());
        let Some(row) = KindRow::resuming(kind) else {
            let why = JobError::NotAJob { op: kind };
            close_unresumable(context, op, &operation, kind.as_str(), why)
                .instrument(span)
                .await;
            continue;
        };
        let one = Resuming {
            context,
            op,
            operation: &operation,
            row,
        };
        let resumed_one = async {
            match row.runs {
                Runs::Guest(_) => one.resume_as::<GuestJobs>(Some(&setups.guest)).await,
                Runs::StorageDetach => one.resume_as::<DetachJobs>(setups.detach.as_ref()).await,
                Runs::StorageWipe => one.resume_as::<WipeJobs>(setups.detach.as_ref()).await,
                Runs::ControllerUpdate => {
                    one.resume_as::<ControllerJobs>(setups.controller.as_ref())
                        .await
                }
                Runs::BreakGlass(_) => {
                    one.resume_as::<BreakGlassJobs>(setups.break_glass.as_ref())
                        .await
                }
                Runs::AgentUpdate => {
                    one.resume_as::<AgentUpdateJobs>(setups.update.as_ref())
                        .await
                }
                Runs::Adopt => one.resume_as::<AdoptJobs>(Some(&setups.adopt)).await,
                Runs::RestoreBulk => {
                    one.resume_as::<BulkRestoreJobs>(setups.bulk_restore.as_ref())
                        .await
                }
            }
        };
        let ran_on = resumed_one.instrument(span).await?;
        resumed += usize::from(ran_on);
    }
    Ok(resumed)
}

/// One interrupted job being resumed.
struct Resuming<'a, P: Pve> {
    context: &'a JobContext<P>,
    op: OpJournal,
    operation: &'a Operation,
    row: KindRow,
}

impl<P: Pve + PveQemu + 'static> Resuming<'_, P> {
    /// Resumes the job as one of family `F` from its `accepted` step; `false` when it had
    /// none (or one `F` cannot read) and was closed failed.
    async fn resume_as<F: JobFamily<P>>(
        self,
        setup: Option<&F::Setup>,
    ) -> Result<bool, JournalError> {
        let Resuming {
            context,
            op,
            operation,
            row,
        } = self;
        match accepted_step::<P, F::Accepted>(context, &op).await? {
            Ok(accepted) => {
                tracing::info!(op_id = %operation.op_id, kind = row.name(), "resuming an interrupted job");
                F::resume(context, setup, op, row, accepted).await;
                Ok(true)
            }
            Err(why) => {
                let kind = claimed_kind(context, operation, row).await;
                close_unresumable(context, op, operation, &kind, why).await;
                Ok(false)
            }
        }
    }
}

/// The operation's `accepted` step read as `T`; `Err` with why the job cannot run on
/// when it has none or the step does not read as `T`.
async fn accepted_step<P: Pve + PveQemu + 'static, T: DeserializeOwned>(
    context: &JobContext<P>,
    op: &OpJournal,
) -> Result<Result<T, JobError>, JournalError> {
    let steps = context.journal.steps(op.op_id()).await?;
    let Some(step) = steps.into_iter().find(|s| s.name == "accepted") else {
        return Ok(Err(JobError::InterruptedBeforeAcceptance));
    };
    Ok(
        serde_json::from_value(step.detail).map_err(|source| JobError::UnreadableAcceptance {
            op: op.kind(),
            source,
        }),
    )
}

/// The kind the job was claimed as (the journal's record of the claim), else the row's.
async fn claimed_kind<P: Pve + PveQemu + 'static>(
    context: &JobContext<P>,
    operation: &Operation,
    row: KindRow,
) -> String {
    let claim = match &operation.job_id {
        Some(job_id) => context.journal.job_run(job_id.clone()).await.ok().flatten(),
        None => None,
    };
    claim.map_or_else(|| row.name().to_owned(), |run| run.kind)
}

/// Ends a job that cannot run on: failed with `why`, its result reported.
async fn close_unresumable<P: Pve + PveQemu + 'static>(
    context: &JobContext<P>,
    op: OpJournal,
    operation: &Operation,
    kind: &str,
    why: JobError,
) {
    tracing::warn!(op_id = %operation.op_id, kind, error = %bosun_errchain::error_chain(&why), "an interrupted job cannot run on; closed failed");
    let guest = operation.vmid.zip(
        operation
            .guest_id
            .as_deref()
            .and_then(|g| Uuid::parse_str(g).ok()),
    );
    let job_id = operation.job_id.clone().unwrap_or_default();
    context.conclude(op, job_id, kind, guest, Err(why)).await;
}

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;
