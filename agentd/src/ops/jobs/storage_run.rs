//! The family of `storage-detach` ([`super::detach`]): judge a claimed job (a refusal
//! is reported `rejected` and nothing is sent to Proxmox), journal it as accepted, carry it
//! out and end it; at start, resume one a crash interrupted.

use bosun_pve::Pve;
use uuid::Uuid;

use super::check::JobRefusal;
use super::context::JobContext;
use super::detach::{DetachAccepted, DetachContext, DetachTarget, confirm, detach};
use super::error::JobError;
use super::family::{Claimed, JobFamily, NotAccepted};
use super::kind::KindRow;
use crate::ops::operation::OpJournal;
use crate::trust::gate::{JobAuthority, Target};
use crate::trust::signing::VerifiedSigner;

/// The family of `storage-detach` ([`super::kind::Runs::StorageDetach`]).
#[derive(Debug)]
pub(super) struct DetachJobs;

impl<P: Pve + 'static> JobFamily<P> for DetachJobs {
    type Accepted = DetachAccepted;
    type Setup = DetachContext;
    /// The storage the job resolves to.
    type Work = DetachTarget;
    const MISSING: &'static str = "storage-detach context";

    fn job_id(accepted: &DetachAccepted) -> String {
        accepted.job_id.clone()
    }

    fn guest(_accepted: &DetachAccepted) -> Option<(u32, Uuid)> {
        None
    }

    fn signer(accepted: &DetachAccepted) -> VerifiedSigner {
        VerifiedSigner::resumed(&accepted.signer, &accepted.principals)
    }

    /// Refused (nothing sent to Proxmox but the look) unless the rules hold.
    async fn accept(
        context: &JobContext<P>,
        setup: &DetachContext,
        job: &Claimed,
    ) -> Result<(DetachAccepted, DetachTarget), NotAccepted> {
        let Claimed {
            document, signer, ..
        } = job;
        let refused = |refusal| NotAccepted::Refused(JobRefusal::Detach(refusal));
        let target = setup.resolve(&document.params).map_err(refused)?;
        confirm(&*context.pve, &target).await.map_err(refused)?;
        let accepted = DetachAccepted {
            job_id: document.job_id.to_string(),
            durable_id: target.durable_id.clone(),
            kind: target.kind,
            storage: target.storage.as_str().to_owned(),
            params: document.params.clone(),
            signer: signer.fingerprint().to_owned(),
            principals: signer.principals().to_owned(),
            expires_at: Some(document.expires_at),
        };
        Ok((accepted, target))
    }

    /// The rules that need no Proxmox call are applied again (desired state may have
    /// changed meanwhile), then the steps run on; a storage already removed counts as
    /// removed.
    fn judge_again(
        setup: &DetachContext,
        _row: KindRow,
        accepted: &DetachAccepted,
    ) -> Result<DetachTarget, JobError> {
        let target = setup.resolve(&accepted.params)?;
        if target.storage.as_str() == accepted.storage {
            Ok(target)
        } else {
            Err(JobError::DetachMoved {
                now: target.storage.as_str().to_owned(),
                accepted: accepted.storage.clone(),
            })
        }
    }

    async fn carry_out(
        context: &JobContext<P>,
        setup: &DetachContext,
        op: OpJournal,
        row: KindRow,
        accepted: DetachAccepted,
        target: DetachTarget,
        signer: &VerifiedSigner,
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
        let patience = context.patience(accepted.expires_at, &op);
        let result = detach(
            &*context.pve,
            &context.journal,
            &op,
            &target,
            &authority,
            setup.helper(),
            patience,
        )
        .await;
        context
            .conclude(op, accepted.job_id, row.name(), None, result)
            .await;
    }
}
