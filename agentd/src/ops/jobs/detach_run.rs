//! The runner's side of `storage-detach` ([`super::detach`]): judge a claimed job (a refusal
//! is reported `rejected` and nothing is sent to Proxmox), journal it as accepted, carry it
//! out and end it; at start, resume one a crash interrupted.

use bosun_pve::Pve;

use super::check::JobRefusal;
use super::decommission::Patience;
use super::detach::{DetachAccepted, DetachTarget, confirm, detach};
use super::dispatch::{Claimed, JobFamily};
use super::error::JobError;
use super::kind::KindRow;
use super::runner::JobRunner;
use crate::ops::journal::NewOperation;
use crate::ops::operation::OpJournal;
use crate::trust::gate::{JobAuthority, Target};
use crate::trust::signing::VerifiedSigner;

/// The family of `storage-detach` ([`super::kind::Runs::StorageDetach`]).
#[derive(Debug)]
pub(super) struct DetachJobs;

impl JobFamily for DetachJobs {
    type Accepted = DetachAccepted;

    async fn run<P: Pve + 'static>(runner: &JobRunner<P>, job: Claimed) {
        let Claimed {
            document,
            signer,
            request_id,
            row,
        } = job;
        let job_id = document.job_id;
        let Some(context) = &runner.detach else {
            let refusal = JobRefusal::UnsupportedKind {
                kind: row.name().to_owned(),
            };
            return runner.refuse_claimed(job_id, &refusal, request_id).await;
        };
        let target = match context.resolve(&document.params) {
            Ok(target) => target,
            Err(refusal) => {
                let refusal = JobRefusal::Detach(refusal);
                return runner.refuse_claimed(job_id, &refusal, request_id).await;
            }
        };
        if let Err(refusal) = confirm(&*runner.pve, &target).await {
            let refusal = JobRefusal::Detach(refusal);
            return runner.refuse_claimed(job_id, &refusal, request_id).await;
        }
        let accepted = DetachAccepted {
            job_id: job_id.to_string(),
            durable_id: target.durable_id.clone(),
            kind: target.kind,
            storage: target.storage.as_str().to_owned(),
            params: document.params.clone(),
            signer: signer.fingerprint().to_owned(),
            principals: signer.principals().to_owned(),
            expires_at: Some(document.expires_at),
        };
        let operation = NewOperation {
            kind: row.op,
            guest_id: None,
            vmid: None,
            job_id: Some(job_id.to_string()),
            request_id,
        };
        let Some(op) = runner.begin_accepted(operation, job_id, &accepted).await else {
            return;
        };
        runner
            .carry_out_detach(op, row, &accepted, &signer, target)
            .await;
    }

    /// The rules that need no Proxmox call are applied again (desired state may have
    /// changed meanwhile), then the steps run on; a storage already removed counts as
    /// removed.
    async fn resume<P: Pve + 'static>(
        runner: &JobRunner<P>,
        op: OpJournal,
        row: KindRow,
        accepted: DetachAccepted,
    ) {
        let signer = VerifiedSigner::resumed(&accepted.signer, &accepted.principals);
        let judged = match &runner.detach {
            None => Err(JobError::NotSetUp {
                kind: row.name(),
                missing: "storage-detach context",
            }),
            Some(context) => context
                .resolve(&accepted.params)
                .map_err(JobError::from)
                .and_then(|target| {
                    if target.storage.as_str() == accepted.storage {
                        Ok(target)
                    } else {
                        Err(JobError::DetachMoved {
                            now: target.storage.as_str().to_owned(),
                            accepted: accepted.storage.clone(),
                        })
                    }
                }),
        };
        match judged {
            Ok(target) => {
                runner
                    .carry_out_detach(op, row, &accepted, &signer, target)
                    .await;
            }
            Err(error) => {
                runner
                    .conclude(op, accepted.job_id.clone(), row.name(), None, Err(error))
                    .await;
            }
        }
    }
}

impl<P: Pve + 'static> JobRunner<P> {
    async fn carry_out_detach(
        &self,
        op: OpJournal,
        row: KindRow,
        accepted: &DetachAccepted,
        signer: &VerifiedSigner,
        target: DetachTarget,
    ) {
        tracing::info!(job_id = %accepted.job_id, storage = %target.storage, op_id = %op.op_id(), "running signed storage detach");
        let authority = JobAuthority::new(
            signer,
            row.gate,
            Target::Storage {
                storage: target.storage.as_str().to_owned(),
            },
            accepted.job_id.clone(),
        );
        let patience = Patience::for_window(self.retry_window(accepted.expires_at));
        let helper = self.detach.as_ref().and_then(|c| c.helper());
        let result = detach(
            &*self.pve,
            &self.journal,
            &op,
            &target,
            &authority,
            helper,
            patience,
        )
        .await;
        self.conclude(op, accepted.job_id.clone(), row.name(), None, result)
            .await;
    }
}
