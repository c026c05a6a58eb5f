//! The runner's side of `controller-update`: journal the claimed job as accepted (its guest,
//! vmid and signed digest), run the rollout ([`crate::controller::rollout`]) in the guest's
//! queue slot and end the job with its outcome; at start, resume one a crash interrupted from
//! the steps its journal holds.

use bosun_proto::job::JobDocument;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument;
use uuid::Uuid;

use super::check::JobRefusal;
use super::runner::{JobRunner, job_span};
use crate::controller::rollout::{self, Rollout};
use crate::gate::{JobAuthority, JobKind, Target};
use crate::journal::{JournalError, NewOperation, OpKind, Operation};
use crate::operation::OpJournal;
use crate::pve::Pve;
use crate::queue::GuestKey;
use crate::signing::VerifiedSigner;

const KIND: &str = "controller-update";

/// What a `controller-update` job asks, once accepted; stored in its `accepted` step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ControllerAccepted {
    job_id: String,
    guest_id: Uuid,
    vmid: u32,
    digest: String,
    signer: String,
    principals: String,
}

impl<P: Pve + 'static> JobRunner<P> {
    /// Runs a claimed `controller-update` job.
    pub(super) async fn run_controller(
        &self,
        document: JobDocument,
        signer: &VerifiedSigner,
        request_id: Option<String>,
    ) {
        let job_id = document.job_id;
        // check_job guarantees the guest, its vmid and (by validation) the digest.
        let (Some(guest_id), Some(vmid)) = (document.target.guest_id, document.target.vmid) else {
            return;
        };
        let digest = document
            .params
            .get(bosun_proto::controller::DIGEST_PARAM)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if self.controller.is_none() {
            let refusal = JobRefusal::UnsupportedKind {
                kind: document.kind.as_str(),
            };
            return self.refuse_claimed(job_id, &refusal, request_id).await;
        }
        let accepted = ControllerAccepted {
            job_id: job_id.to_string(),
            guest_id,
            vmid,
            digest,
            signer: signer.fingerprint().to_owned(),
            principals: signer.principals().to_owned(),
        };
        let operation = NewOperation {
            kind: OpKind::ControllerUpdateJob,
            guest_id: Some(guest_id.to_string()),
            vmid: Some(vmid),
            job_id: Some(job_id.to_string()),
            request_id,
        };
        let Some(op) = self.begin_accepted(operation, job_id, &accepted).await else {
            return;
        };
        self.carry_out_rollout(op, accepted, signer).await;
    }

    /// Resumes a rollout a crash interrupted (its open step already closed by the caller).
    pub(super) async fn resume_controller(
        &self,
        op: OpJournal,
        operation: &Operation,
    ) -> Result<(), JournalError> {
        let steps = self.journal.steps(operation.op_id).await?;
        let accepted = steps
            .iter()
            .find(|s| s.name == "accepted")
            .and_then(|s| serde_json::from_value::<ControllerAccepted>(s.detail.clone()).ok());
        let job_id = operation.job_id.clone().unwrap_or_default();
        let span = job_span(Some(&job_id), operation.request_id.as_deref());
        let Some(accepted) = accepted else {
            let reason = "interrupted before acceptance".to_owned();
            self.conclude(op, job_id, KIND, None, Err(reason))
                .instrument(span)
                .await;
            return Ok(());
        };
        let signer = VerifiedSigner::resumed(&accepted.signer, &accepted.principals);
        async {
            tracing::info!(op_id = %op.op_id(), "resuming an interrupted controller rollout");
            self.carry_out_rollout(op, accepted, &signer).await;
        }
        .instrument(span)
        .await;
        Ok(())
    }

    async fn carry_out_rollout(
        &self,
        op: OpJournal,
        accepted: ControllerAccepted,
        signer: &VerifiedSigner,
    ) {
        tracing::info!(job_id = %accepted.job_id, vmid = accepted.vmid, digest = %accepted.digest, op_id = %op.op_id(), "running signed controller rollout");
        let guest = Some((accepted.vmid, accepted.guest_id));
        let Some(context) = self.controller.clone() else {
            let reason = "controller-update is not run by this agent".to_owned();
            return self
                .conclude(op, accepted.job_id, KIND, guest, Err(reason))
                .await;
        };
        let authority = JobAuthority::new(
            signer,
            JobKind::ControllerUpdate,
            Target::Guest {
                vmid: accepted.vmid,
            },
            accepted.job_id.clone(),
        );
        let rollout = Rollout {
            guest_id: accepted.guest_id.to_string(),
            vmid: accepted.vmid,
            digest: accepted.digest.clone(),
        };
        let work_op = op.clone();
        let work = async move { rollout::run(&context, &work_op, &rollout, &authority).await };
        let result = match self
            .queue
            .run(GuestKey::guest(accepted.guest_id), work)
            .await
        {
            Ok(result) => result,
            Err(e) => Err(bosun_proto::error_chain(&e)),
        };
        self.conclude(op, accepted.job_id, KIND, guest, result)
            .await;
    }
}
