//! Dispatch of a job to its kind's family, as the table ([`super::kind`]) says: a claimed
//! job runs through its row's [`Runs`]; an operation a crash interrupted resumes through the
//! row its operation kind names, from its `accepted` step. That step is read here, once for
//! every family: a job without one (killed between its claim and its acceptance) is closed
//! failed, `interrupted before acceptance`, and reported.

use bosun_proto::job::JobDocument;
use bosun_pve::Pve;
use serde::de::DeserializeOwned;
use tracing::Instrument;
use uuid::Uuid;

use super::break_glass_run::BreakGlassJobs;
use super::controller_run::ControllerJobs;
use super::detach_run::DetachJobs;
use super::error::JobError;
use super::guest_run::GuestJobs;
use super::kind::{KindRow, Runs};
use super::runner::{JobRunner, job_span};
use super::update_run::AgentUpdateJobs;
use crate::ops::journal::{JournalError, Operation, UnfinishedOperation};
use crate::ops::operation::OpJournal;
use crate::trust::signing::VerifiedSigner;

/// A job that passed its checks and whose nonce and job id the journal claimed.
#[derive(Debug)]
pub(super) struct Claimed {
    /// The signed document.
    pub(super) document: JobDocument,
    /// Who signed it.
    pub(super) signer: VerifiedSigner,
    /// The hub request that brought it.
    pub(super) request_id: Option<String>,
    /// Its kind's row.
    pub(super) row: KindRow,
}

/// The kinds that run the same way ([`Runs`]): what their `accepted` step holds, how a
/// claimed job of theirs runs, how an interrupted one resumes.
pub(super) trait JobFamily {
    /// The job's typed parameters as its `accepted` step holds them: everything a resumed
    /// job needs to run again.
    type Accepted: DeserializeOwned;

    /// Judges a claimed job (a refusal is reported `rejected`), journals it as accepted
    /// and runs it to its end.
    async fn run<P: Pve + 'static>(runner: &JobRunner<P>, job: Claimed);

    /// Runs on a job a crash interrupted, from its `accepted` step (`row` is the row its
    /// operation kind names; the open step was closed already).
    async fn resume<P: Pve + 'static>(
        runner: &JobRunner<P>,
        op: OpJournal,
        row: KindRow,
        accepted: Self::Accepted,
    );
}

impl<P: Pve + 'static> JobRunner<P> {
    /// Runs a claimed job through its kind's family.
    pub(super) async fn run_claimed(&self, job: Claimed) {
        match job.row.runs {
            Runs::Guest(_) => GuestJobs::run(self, job).await,
            Runs::StorageDetach => DetachJobs::run(self, job).await,
            Runs::ControllerUpdate => ControllerJobs::run(self, job).await,
            Runs::BreakGlass(_) => BreakGlassJobs::run(self, job).await,
            Runs::AgentUpdate => AgentUpdateJobs::run(self, job).await,
        }
    }

    /// Resumes the jobs a crash interrupted (the jobs list of
    /// [`crate::ops::operation::replay::sort`]: their operations are still running in the
    /// journal); gives how many ran on (those closed as interrupted before acceptance are
    /// not counted).
    pub async fn resume(
        &self,
        unfinished: Vec<UnfinishedOperation>,
    ) -> Result<usize, JournalError> {
        let mut resumed = 0;
        for unfinished in unfinished {
            let Some(kind) = unfinished.operation.op_kind() else {
                continue;
            };
            let op = OpJournal::resume(&self.journal, unfinished.operation.op_id, kind);
            crate::ops::operation::replay::close_open_step(&*self.pve, &op, &unfinished).await;
            let operation = unfinished.operation;
            let span = job_span(operation.job_id.as_deref(), operation.request_id.as_deref());
            let Some(row) = KindRow::resuming(kind) else {
                self.close_unresumable(
                    op,
                    &operation,
                    kind.as_str(),
                    JobError::NotAJob { op: kind },
                )
                .instrument(span)
                .await;
                continue;
            };
            let resumed_one = async {
                match row.runs {
                    Runs::Guest(_) => self.resume_as::<GuestJobs>(op, &operation, row).await,
                    Runs::StorageDetach => self.resume_as::<DetachJobs>(op, &operation, row).await,
                    Runs::ControllerUpdate => {
                        self.resume_as::<ControllerJobs>(op, &operation, row).await
                    }
                    Runs::BreakGlass(_) => {
                        self.resume_as::<BreakGlassJobs>(op, &operation, row).await
                    }
                    Runs::AgentUpdate => {
                        self.resume_as::<AgentUpdateJobs>(op, &operation, row).await
                    }
                }
            };
            let ran_on = resumed_one.instrument(span).await?;
            resumed += usize::from(ran_on);
        }
        Ok(resumed)
    }

    /// Resumes one job of family `F` from its `accepted` step; `false` when it had none
    /// (or one `F` cannot read) and was closed failed.
    async fn resume_as<F: JobFamily>(
        &self,
        op: OpJournal,
        operation: &Operation,
        row: KindRow,
    ) -> Result<bool, JournalError> {
        match self.accepted_step::<F::Accepted>(&op).await? {
            Ok(accepted) => {
                tracing::info!(op_id = %operation.op_id, kind = row.name(), "resuming an interrupted job");
                F::resume(self, op, row, accepted).await;
                Ok(true)
            }
            Err(why) => {
                let kind = self.claimed_kind(operation, row).await;
                self.close_unresumable(op, operation, &kind, why).await;
                Ok(false)
            }
        }
    }

    /// The operation's `accepted` step read as `T`; `Err` with why the job cannot run on
    /// when it has none or the step does not read as `T`.
    async fn accepted_step<T: DeserializeOwned>(
        &self,
        op: &OpJournal,
    ) -> Result<Result<T, JobError>, JournalError> {
        let steps = self.journal.steps(op.op_id()).await?;
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
    async fn claimed_kind(&self, operation: &Operation, row: KindRow) -> String {
        let claim = match &operation.job_id {
            Some(job_id) => self.journal.job_run(job_id.clone()).await.ok().flatten(),
            None => None,
        };
        claim.map_or_else(|| row.name().to_owned(), |run| run.kind)
    }

    /// Ends a job that cannot run on: failed with `why`, its result reported.
    async fn close_unresumable(
        &self,
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
        self.conclude(op, job_id, kind, guest, Err(why)).await;
    }
}

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;
