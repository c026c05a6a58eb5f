//! The family of `storage-wipe` ([`super::wipe`]): judge a claimed job (a refusal is
//! reported `rejected` and nothing but reads is sent to Proxmox), journal it as accepted with
//! the archives it may delete, carry it out and end it; at start, resume one a crash
//! interrupted.

use bosun_pve::Pve;
use uuid::Uuid;

use super::check::JobRefusal;
use super::context::JobContext;
use super::detach::{DetachContext, DetachTarget, confirm};
use super::error::JobError;
use super::family::{Claimed, JobFamily, NotAccepted};
use super::kind::KindRow;
use super::wipe::{WipeAccepted, recorded, wipe};
use crate::ops::operation::OpJournal;
use crate::trust::gate::{JobAuthority, Target};
use crate::trust::signing::VerifiedSigner;

/// The family of `storage-wipe` ([`super::kind::Runs::StorageWipe`]); set up with the
/// detach's context (the same target rules).
#[derive(Debug)]
pub(super) struct WipeJobs;

impl<P: Pve + 'static> JobFamily<P> for WipeJobs {
    type Accepted = WipeAccepted;
    type Setup = DetachContext;
    /// The storage the job resolves to.
    type Work = DetachTarget;
    const MISSING: &'static str = "storage context";

    fn job_id(accepted: &WipeAccepted) -> String {
        accepted.job_id.clone()
    }

    fn guest(_accepted: &WipeAccepted) -> Option<(u32, Uuid)> {
        None
    }

    fn signer(accepted: &WipeAccepted) -> VerifiedSigner {
        VerifiedSigner::resumed(&accepted.signer, &accepted.principals)
    }

    /// Refused (nothing sent to Proxmox but reads) unless the detach's rules hold and the
    /// journal's record of the storage's archives is readable and bounded.
    async fn accept(
        context: &JobContext<P>,
        setup: &DetachContext,
        job: &Claimed,
    ) -> Result<(WipeAccepted, DetachTarget), NotAccepted> {
        let Claimed {
            document, signer, ..
        } = job;
        let refused = |refusal| NotAccepted::Refused(JobRefusal::Wipe(refusal));
        let target = setup.resolve(&document.params).map_err(refused)?;
        confirm(&*context.pve, &target).await.map_err(refused)?;
        let archives = recorded(&context.journal, &target).await.map_err(refused)?;
        let accepted = WipeAccepted {
            job_id: document.job_id.to_string(),
            durable_id: target.durable_id.clone(),
            kind: target.kind,
            storage: target.storage.as_str().to_owned(),
            params: document.params.clone(),
            archives,
            signer: signer.fingerprint().to_owned(),
            principals: signer.principals().to_owned(),
            expires_at: Some(document.expires_at),
        };
        Ok((accepted, target))
    }

    /// The rules that need no Proxmox call are applied again (desired state may have
    /// changed meanwhile: a target attached again is not wiped), then the steps run on over
    /// the archives the `accepted` step holds.
    fn judge_again(
        setup: &DetachContext,
        _row: KindRow,
        accepted: &WipeAccepted,
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
        _setup: &DetachContext,
        op: OpJournal,
        row: KindRow,
        accepted: WipeAccepted,
        target: DetachTarget,
        signer: &VerifiedSigner,
    ) {
        tracing::info!(job_id = %accepted.job_id, storage = %target.storage, archives = accepted.archives.len(), op_id = %op.op_id(), "running signed storage wipe");
        let authority = JobAuthority::new(
            signer,
            row.gate,
            Target::Storage {
                storage: target.storage.as_str().to_owned(),
            },
            accepted.job_id.clone(),
        );
        let patience = context.patience(accepted.expires_at, &op);
        let result = Box::pin(wipe(
            &*context.pve,
            &context.journal,
            &op,
            &target,
            &accepted.archives,
            &authority,
            patience,
        ))
        .await;
        context
            .conclude(op, accepted.job_id, row.name(), None, result)
            .await;
    }
}
