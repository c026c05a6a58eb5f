//! The runner's side of `storage-detach` ([`super::detach`]): judge a claimed job (a refusal
//! is reported `rejected` and nothing is sent to Proxmox), journal it as accepted, carry it
//! out and end it; at start, resume one a crash interrupted.

use bosun_proto::error_chain;
use bosun_proto::job::JobDocument;
use tracing::Instrument;
use uuid::Uuid;

use super::check::JobRefusal;
use super::decommission::Patience;
use super::detach::{DetachAccepted, DetachTarget, confirm, detach};
use super::runner::{JobRunner, job_span};
use crate::gate::{JobAuthority, JobKind, Target};
use crate::journal::{JobOutcome, JournalError, NewOperation, OpKind, Operation};
use crate::operation::OpJournal;
use crate::pve::Pve;
use crate::signing::VerifiedSigner;

impl<P: Pve + 'static> JobRunner<P> {
    /// Refuses a job already claimed: reported `rejected`, its run recorded as failed, so
    /// the same job id never runs later.
    pub(super) async fn refuse_claimed(
        &self,
        job_id: Uuid,
        refusal: &JobRefusal,
        request_id: Option<String>,
    ) {
        self.refuse(Some(job_id), refusal, request_id).await;
        let detail = format!("{}: {}", refusal.code(), error_chain(refusal));
        if let Err(e) = self
            .journal
            .finish_job(job_id.to_string(), JobOutcome::Failed, None, Some(detail))
            .await
        {
            tracing::error!(%job_id, error = %error_chain(&e), "could not record the refused job's end");
        }
    }

    /// Judges and runs a claimed `storage-detach` job.
    pub(super) async fn run_detach(
        &self,
        document: JobDocument,
        signer: &VerifiedSigner,
        request_id: Option<String>,
    ) {
        let job_id = document.job_id;
        let Some(context) = &self.detach else {
            let refusal = JobRefusal::UnsupportedKind {
                kind: document.kind.as_str(),
            };
            return self.refuse_claimed(job_id, &refusal, request_id).await;
        };
        let target = match context.resolve(&document.params) {
            Ok(target) => target,
            Err(refusal) => {
                let refusal = JobRefusal::Detach(refusal);
                return self.refuse_claimed(job_id, &refusal, request_id).await;
            }
        };
        if let Err(refusal) = confirm(&*self.pve, &target).await {
            let refusal = JobRefusal::Detach(refusal);
            return self.refuse_claimed(job_id, &refusal, request_id).await;
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
            kind: OpKind::StorageDetachJob,
            guest_id: None,
            vmid: None,
            job_id: Some(job_id.to_string()),
            request_id,
        };
        let Some(op) = self.begin_accepted(operation, job_id, &accepted).await else {
            return;
        };
        self.carry_out_detach(op, &accepted, signer, target).await;
    }

    /// Resumes a detach a crash interrupted: the rules that need no Proxmox call are
    /// applied again (desired state may have changed meanwhile), then the steps run on;
    /// a storage already removed counts as removed.
    pub(super) async fn resume_detach(
        &self,
        op: OpJournal,
        operation: &Operation,
    ) -> Result<(), JournalError> {
        let steps = self.journal.steps(operation.op_id).await?;
        let accepted = steps
            .iter()
            .find(|s| s.name == "accepted")
            .and_then(|s| serde_json::from_value::<DetachAccepted>(s.detail.clone()).ok());
        let job_id = operation.job_id.clone().unwrap_or_default();
        let span = job_span(Some(&job_id), operation.request_id.as_deref());
        let Some(accepted) = accepted else {
            let reason = "interrupted before acceptance".to_owned();
            self.conclude(op, job_id, "storage-detach", None, Err(reason))
                .instrument(span)
                .await;
            return Ok(());
        };
        let signer = VerifiedSigner::resumed(&accepted.signer, &accepted.principals);
        let judged = match &self.detach {
            None => Err("storage-detach is not run by this agent".to_owned()),
            Some(context) => context
                .resolve(&accepted.params)
                .map_err(|r| format!("{}: {}", r.code(), error_chain(&r)))
                .and_then(|target| {
                    if target.storage.as_str() == accepted.storage {
                        Ok(target)
                    } else {
                        Err(format!(
                            "the job resolves to storage {} now, not {}",
                            target.storage, accepted.storage
                        ))
                    }
                }),
        };
        async {
            tracing::info!(op_id = %op.op_id(), "resuming an interrupted storage detach");
            match judged {
                Ok(target) => self.carry_out_detach(op, &accepted, &signer, target).await,
                Err(reason) => {
                    self.conclude(
                        op,
                        accepted.job_id.clone(),
                        "storage-detach",
                        None,
                        Err(reason),
                    )
                    .await;
                }
            }
        }
        .instrument(span)
        .await;
        Ok(())
    }

    async fn carry_out_detach(
        &self,
        op: OpJournal,
        accepted: &DetachAccepted,
        signer: &VerifiedSigner,
        target: DetachTarget,
    ) {
        tracing::info!(job_id = %accepted.job_id, storage = %target.storage, op_id = %op.op_id(), "running signed storage detach");
        let authority = JobAuthority::new(
            signer,
            JobKind::StorageDetach,
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
        self.conclude(op, accepted.job_id.clone(), "storage-detach", None, result)
            .await;
    }
}
