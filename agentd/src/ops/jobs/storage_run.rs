//! The families of `storage-detach` ([`super::detach`]) and `storage-wipe` ([`super::wipe`]):
//! one family over the storage a job resolves to, by the detach's rules. Judge a claimed job
//! (a refusal is reported `rejected` and nothing but reads is sent to Proxmox), journal it as
//! accepted, carry it out and end it; at start, resume one a crash interrupted. What differs
//! per kind ([`StorageJob`]): what its `accepted` step holds beyond the storage, and its steps.

use bosun_pve::PveQemu;
use std::marker::PhantomData;

use bosun_pve::Pve;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use super::check::JobRefusal;
use super::context::JobContext;
use super::decommission::Patience;
use super::detach::{DetachAccepted, DetachContext, DetachTarget, confirm, detach};
use super::detach_refusal::DetachRefusal;
use super::error::JobError;
use super::family::{Claimed, JobFamily, NotAccepted};
use super::kind::KindRow;
use super::wipe::{WipeAccepted, recorded, wipe};
use crate::ops::operation::OpJournal;
use crate::trust::gate::{JobAuthority, Target};
use crate::trust::signing::VerifiedSigner;

/// The family of `storage-detach` ([`super::kind::Runs::StorageDetach`]).
pub(super) type DetachJobs = StorageJobs<Detach>;
/// The family of `storage-wipe` ([`super::kind::Runs::StorageWipe`]); set up with the
/// detach's context (the same target rules).
pub(super) type WipeJobs = StorageJobs<Wipe>;

/// A job on one of the agent's storages: what it adds to the detach's `accepted` step, and
/// its steps.
pub(super) trait StorageJob {
    /// Its `accepted` step.
    type Accepted: Serialize + DeserializeOwned;
    /// What the agent lacks without the detach's setup.
    const MISSING: &'static str;

    /// Its refusal, from a rule of the detach's.
    const REFUSED: fn(DetachRefusal) -> JobRefusal;

    /// What the `accepted` step holds of the storage.
    fn storage(accepted: &Self::Accepted) -> &DetachAccepted;

    /// The `accepted` step of a job on `target`, from what a detach would accept.
    async fn accepted<P: Pve>(
        context: &JobContext<P>,
        target: &DetachTarget,
        storage: DetachAccepted,
    ) -> Result<Self::Accepted, DetachRefusal>;

    /// Its steps, under `authority`, within `patience`.
    #[allow(clippy::too_many_arguments)]
    async fn steps<P: Pve>(
        context: &JobContext<P>,
        setup: &DetachContext,
        op: &OpJournal,
        accepted: &Self::Accepted,
        target: &DetachTarget,
        authority: &JobAuthority,
        patience: Patience,
    ) -> Result<Value, JobError>;
}

/// The family of the storage jobs of kind `K`.
#[derive(Debug)]
pub(super) struct StorageJobs<K>(PhantomData<K>);

/// `storage-detach`: the storage leaves Proxmox, its mount the host.
#[derive(Debug)]
pub(super) struct Detach;

/// `storage-wipe`: the archives the journal recorded on the storage are deleted.
#[derive(Debug)]
pub(super) struct Wipe;

impl StorageJob for Detach {
    type Accepted = DetachAccepted;
    const MISSING: &'static str = "storage-detach context";

    const REFUSED: fn(DetachRefusal) -> JobRefusal = JobRefusal::Detach;

    fn storage(accepted: &DetachAccepted) -> &DetachAccepted {
        accepted
    }

    async fn accepted<P: Pve>(
        _context: &JobContext<P>,
        _target: &DetachTarget,
        storage: DetachAccepted,
    ) -> Result<DetachAccepted, DetachRefusal> {
        Ok(storage)
    }

    /// A storage already removed counts as removed.
    async fn steps<P: Pve>(
        context: &JobContext<P>,
        setup: &DetachContext,
        op: &OpJournal,
        accepted: &DetachAccepted,
        target: &DetachTarget,
        authority: &JobAuthority,
        patience: Patience,
    ) -> Result<Value, JobError> {
        tracing::info!(job_id = %accepted.job_id, storage = %target.storage, op_id = %op.op_id(), "running signed storage detach");
        detach(
            &*context.pve,
            &context.journal,
            op,
            target,
            authority,
            setup.helper(),
            patience,
        )
        .await
    }
}

impl StorageJob for Wipe {
    type Accepted = WipeAccepted;
    const MISSING: &'static str = "storage context";

    const REFUSED: fn(DetachRefusal) -> JobRefusal = JobRefusal::Wipe;

    fn storage(accepted: &WipeAccepted) -> &DetachAccepted {
        &accepted.storage
    }

    /// Refused unless the journal's record of the storage's archives is readable and bounded.
    async fn accepted<P: Pve>(
        context: &JobContext<P>,
        target: &DetachTarget,
        storage: DetachAccepted,
    ) -> Result<WipeAccepted, DetachRefusal> {
        let archives = recorded(&context.journal, target).await?;
        Ok(WipeAccepted { storage, archives })
    }

    /// Run on over the archives the `accepted` step holds.
    async fn steps<P: Pve>(
        context: &JobContext<P>,
        _setup: &DetachContext,
        op: &OpJournal,
        accepted: &WipeAccepted,
        target: &DetachTarget,
        authority: &JobAuthority,
        patience: Patience,
    ) -> Result<Value, JobError> {
        tracing::info!(job_id = %accepted.storage.job_id, storage = %target.storage, archives = accepted.archives.len(), op_id = %op.op_id(), "running signed storage wipe");
        Box::pin(wipe(
            &*context.pve,
            &context.journal,
            op,
            target,
            &accepted.archives,
            authority,
            patience,
        ))
        .await
    }
}

impl<P: Pve + PveQemu + 'static, K: StorageJob> JobFamily<P> for StorageJobs<K> {
    type Accepted = K::Accepted;
    type Setup = DetachContext;
    /// The storage the job resolves to.
    type Work = DetachTarget;
    const MISSING: &'static str = K::MISSING;

    fn job_id(accepted: &K::Accepted) -> String {
        K::storage(accepted).job_id.clone()
    }

    fn guest(_accepted: &K::Accepted) -> Option<(u32, Uuid)> {
        None
    }

    fn signer(accepted: &K::Accepted) -> VerifiedSigner {
        let storage = K::storage(accepted);
        VerifiedSigner::resumed(&storage.signer, &storage.principals)
    }

    /// Refused (nothing sent to Proxmox but reads) unless the detach's rules hold and the
    /// kind's own do.
    async fn accept(
        context: &JobContext<P>,
        setup: &DetachContext,
        job: &Claimed,
    ) -> Result<(K::Accepted, DetachTarget), NotAccepted> {
        let Claimed {
            document, signer, ..
        } = job;
        let refused = |refusal| NotAccepted::Refused(K::REFUSED(refusal));
        let target = setup.resolve(&document.params).map_err(refused)?;
        confirm(&*context.pve, &target).await.map_err(refused)?;
        let storage = DetachAccepted {
            job_id: document.job_id.to_string(),
            durable_id: target.durable_id.clone(),
            kind: target.kind,
            storage: target.storage.as_str().to_owned(),
            params: document.params.clone(),
            signer: signer.fingerprint().to_owned(),
            principals: signer.principals().to_owned(),
            expires_at: Some(document.expires_at),
        };
        let accepted = K::accepted(context, &target, storage)
            .await
            .map_err(refused)?;
        Ok((accepted, target))
    }

    /// The rules that need no Proxmox call are applied again (desired state may have
    /// changed meanwhile: a target attached again is neither detached nor wiped), then the
    /// steps run on.
    fn judge_again(
        setup: &DetachContext,
        _row: KindRow,
        accepted: &K::Accepted,
    ) -> Result<DetachTarget, JobError> {
        let accepted = K::storage(accepted);
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
        accepted: K::Accepted,
        target: DetachTarget,
        signer: &VerifiedSigner,
    ) {
        let job_id = K::storage(&accepted).job_id.clone();
        let authority = JobAuthority::new(
            signer,
            row.gate,
            Target::Storage {
                storage: target.storage.as_str().to_owned(),
            },
            job_id.clone(),
        );
        let patience = context.patience(K::storage(&accepted).expires_at, &op);
        let result = K::steps(
            context, setup, &op, &accepted, &target, &authority, patience,
        )
        .await;
        context.conclude(op, job_id, row.name(), None, result).await;
    }
}
