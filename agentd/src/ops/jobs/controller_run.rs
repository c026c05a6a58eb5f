//! The runner's side of `controller-update`: journal the claimed job as accepted (its guest,
//! vmid and signed digest), run the rollout ([`crate::guests::controller::rollout`]) in the guest's
//! queue slot and end the job with its outcome; at start, resume one a crash interrupted from
//! the steps its journal holds.

use bosun_pve::Pve;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::check::JobRefusal;
use super::dispatch::{Claimed, JobFamily};
use super::error::JobError;
use super::kind::KindRow;
use super::runner::JobRunner;
use crate::guests::controller::rollout::{self, Rollout};
use crate::guests::queue::GuestKey;
use crate::ops::journal::NewOperation;
use crate::ops::operation::OpJournal;
use crate::trust::gate::{JobAuthority, Target};
use crate::trust::signing::VerifiedSigner;

/// What a `controller-update` job asks, once accepted; stored in its `accepted` step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ControllerAccepted {
    job_id: String,
    guest_id: Uuid,
    vmid: u32,
    digest: String,
    signer: String,
    principals: String,
}

/// The family of `controller-update` ([`super::kind::Runs::ControllerUpdate`]).
#[derive(Debug)]
pub(super) struct ControllerJobs;

impl JobFamily for ControllerJobs {
    type Accepted = ControllerAccepted;

    async fn run<P: Pve + 'static>(runner: &JobRunner<P>, job: Claimed) {
        let Claimed {
            document,
            signer,
            request_id,
            row,
        } = job;
        let job_id = document.job_id;
        // check_job guarantees the guest, its vmid and (by validation) the digest.
        let (Some(guest_id), Some(vmid)) = (document.target.guest_id, document.target.vmid) else {
            tracing::error!(%job_id, kind = row.name(), "a guest job without its guest; not run");
            return;
        };
        let digest = document
            .params
            .get(bosun_proto::controller::DIGEST_PARAM)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if runner.controller.is_none() {
            let refusal = JobRefusal::UnsupportedKind {
                kind: row.name().to_owned(),
            };
            return runner.refuse_claimed(job_id, &refusal, request_id).await;
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
            kind: row.op,
            guest_id: Some(guest_id.to_string()),
            vmid: Some(vmid),
            job_id: Some(job_id.to_string()),
            request_id,
        };
        let Some(op) = runner.begin_accepted(operation, job_id, &accepted).await else {
            return;
        };
        runner.carry_out_rollout(op, row, accepted, &signer).await;
    }

    /// The rollout runs on from the steps its journal holds.
    async fn resume<P: Pve + 'static>(
        runner: &JobRunner<P>,
        op: OpJournal,
        row: KindRow,
        accepted: ControllerAccepted,
    ) {
        let signer = VerifiedSigner::resumed(&accepted.signer, &accepted.principals);
        runner.carry_out_rollout(op, row, accepted, &signer).await;
    }
}

impl<P: Pve + 'static> JobRunner<P> {
    async fn carry_out_rollout(
        &self,
        op: OpJournal,
        row: KindRow,
        accepted: ControllerAccepted,
        signer: &VerifiedSigner,
    ) {
        tracing::info!(job_id = %accepted.job_id, vmid = accepted.vmid, digest = %accepted.digest, op_id = %op.op_id(), "running signed controller rollout");
        let guest = Some((accepted.vmid, accepted.guest_id));
        let Some(context) = self.controller.clone() else {
            let error = JobError::NotSetUp {
                kind: row.name(),
                missing: "controller rollout context",
            };
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
        let rollout = Rollout {
            guest_id: accepted.guest_id.to_string(),
            vmid: accepted.vmid,
            digest: accepted.digest.clone(),
        };
        let work_op = op.clone();
        let work = async move {
            rollout::run(&context, &work_op, &rollout, &authority)
                .await
                .map_err(|reason| JobError::Rollout { reason })
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
