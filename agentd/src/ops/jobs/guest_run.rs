//! The runner's side of the jobs on one guest (`restore-now`, `decommission`,
//! `force-backup`; [`super::execute`]): journal the claimed job as accepted (its guest,
//! vmid, the archive and storage it names), carry it out in the guest's queue slot and end
//! it; at start, resume one a crash interrupted from its `accepted` step.

use std::sync::Arc;

use bosun_pve::Pve;
use serde_json::Value;
use uuid::Uuid;

use super::decommission::Patience;
use super::dispatch::{Claimed, JobFamily};
use super::error::JobError;
use super::execute::{GuestWork, execute};
use super::kind::{GuestAction, KindRow};
use super::runner::JobRunner;
use crate::guests::queue::GuestKey;
use crate::ops::journal::NewOperation;
use crate::ops::operation::OpJournal;
use crate::trust::gate::{JobAuthority, Target};
use crate::trust::signing::VerifiedSigner;

/// What a job on one guest asks, once accepted; stored in its `accepted` step.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct GuestAccepted {
    pub(super) job_id: String,
    pub(super) kind: bosun_proto::job::JobKind,
    pub(super) guest_id: Uuid,
    pub(super) vmid: u32,
    /// The archive a `restore-now` names.
    pub(super) backup: Option<String>,
    /// The storage the job names (restore into, back up to).
    pub(super) storage: Option<String>,
    pub(super) signer: String,
    pub(super) principals: String,
    /// End of the job's validity window: transient failures are retried until then.
    #[serde(default)]
    pub(super) expires_at: Option<jiff::Timestamp>,
}

/// The family of the jobs on one guest ([`super::kind::Runs::Guest`]).
#[derive(Debug)]
pub(super) struct GuestJobs;

impl JobFamily for GuestJobs {
    type Accepted = GuestAccepted;

    async fn run<P: Pve + 'static>(runner: &JobRunner<P>, job: Claimed) {
        let Claimed {
            document,
            signer,
            request_id,
            row,
        } = job;
        let job_id = document.job_id;
        // check_job guarantees a guest and vmid for the kinds it accepts.
        let (Some(guest_id), Some(vmid)) = (document.target.guest_id, document.target.vmid) else {
            tracing::error!(%job_id, kind = row.name(), "a guest job without its guest; not run");
            return;
        };
        let text_param = |name: &str| {
            document
                .params
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let accepted = GuestAccepted {
            job_id: job_id.to_string(),
            kind: row.kind,
            guest_id,
            vmid,
            backup: text_param("backup"),
            storage: text_param("storage"),
            signer: signer.fingerprint().to_owned(),
            principals: signer.principals().to_owned(),
            expires_at: Some(document.expires_at),
        };
        let operation = NewOperation {
            kind: row.op,
            guest_id: Some(guest_id.to_string()),
            vmid: Some(vmid),
            job_id: Some(job_id.to_string()),
            request_id,
        };
        let Some(op) = runner.begin_accepted(operation, job_id, &accepted).await else {
            return;
        };
        runner.run_guest_job(op, row, accepted, &signer).await;
    }

    async fn resume<P: Pve + 'static>(
        runner: &JobRunner<P>,
        op: OpJournal,
        row: KindRow,
        accepted: GuestAccepted,
    ) {
        // The operation kind says what the job does; the step must agree.
        if accepted.kind != row.kind {
            let error = JobError::KindMismatch {
                kind: accepted.kind.as_str(),
                op: row.op,
            };
            let guest = Some((accepted.vmid, accepted.guest_id));
            return runner
                .conclude(op, accepted.job_id, row.name(), guest, Err(error))
                .await;
        }
        let signer = VerifiedSigner::resumed(&accepted.signer, &accepted.principals);
        runner.run_guest_job(op, row, accepted, &signer).await;
    }
}

impl<P: Pve + 'static> JobRunner<P> {
    /// Carries out an accepted guest job in its guest's queue slot and ends it.
    async fn run_guest_job(
        &self,
        op: OpJournal,
        row: KindRow,
        accepted: GuestAccepted,
        signer: &VerifiedSigner,
    ) {
        tracing::info!(job_id = %accepted.job_id, kind = row.name(), vmid = accepted.vmid, op_id = %op.op_id(), "running signed job");
        let guest = Some((accepted.vmid, accepted.guest_id));
        let Some(action) = row.runs.guest_action() else {
            let error = JobError::NotAJob { op: row.op };
            return self
                .conclude(op, accepted.job_id, row.name(), guest, Err(error))
                .await;
        };
        let authority = JobAuthority::new(
            signer,
            row.gate,
            Target::Guest {
                vmid: accepted.vmid,
            },
            accepted.job_id.clone(),
        );
        let storage = match action {
            GuestAction::Restore => self.restore_storage.clone(),
            GuestAction::Decommission | GuestAction::ForceBackup => self.backup_storage.clone(),
        };
        let pve = Arc::clone(&self.pve);
        let journal = self.journal.clone();
        let work_op = op.clone();
        let work_accepted = accepted.clone();
        let patience = Patience::for_window(self.retry_window(accepted.expires_at));
        let recovery = self.recovery.clone();
        let work = async move {
            let work = GuestWork {
                pve: &*pve,
                journal: &journal,
                op: &work_op,
                job: &work_accepted,
                authority: &authority,
                storage,
                patience,
                recovery: recovery.as_deref(),
            };
            execute(action, work).await
        };
        let result = match self
            .queue
            .run(GuestKey::guest(accepted.guest_id), work)
            .await
        {
            Ok(result) => result,
            Err(e) => Err(JobError::Queue(e)),
        };
        self.conclude(op, accepted.job_id, row.name(), guest, result)
            .await;
    }
}
