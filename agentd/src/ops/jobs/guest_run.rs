//! The family of the jobs on one guest (`restore-now`, `decommission`, `force-backup`;
//! [`super::execute`]): journal the claimed job as accepted (its guest, vmid, the archive
//! and storage it names), carry it out in the guest's queue slot and end it; at start,
//! resume one a crash interrupted from its `accepted` step.

use bosun_pve::PveQemu;
use std::sync::Arc;

use bosun_pve::{Pve, StorageId};
use serde_json::Value;
use uuid::Uuid;

use super::context::JobContext;
use super::error::JobError;
use super::execute::{GuestWork, execute};
use super::family::{Claimed, JobFamily, NotAccepted};
use super::guest_accepted::GuestAccepted;
use super::kind::{GuestAction, KindRow};
use super::restore_now::RestoreContext;
use crate::guests::queue::GuestKey;
use crate::ops::operation::OpJournal;
use crate::trust::gate::{JobAuthority, Target};
use crate::trust::signing::VerifiedSigner;

/// What jobs on one guest use beyond the [`JobContext`].
#[derive(Debug)]
pub(super) struct GuestSetup<P: Pve> {
    /// Where `restore-now` restores into unless the job names a storage.
    pub(super) restore_storage: StorageId,
    /// Where `decommission` and `force-backup` back up to unless the job names one.
    pub(super) backup_storage: StorageId,
    /// What `restore-now` restores from without a named archive, and how it brings back a
    /// lost guest; without it, it needs an archive and an existing guest.
    pub(super) recovery: Option<Arc<RestoreContext<P>>>,
}

/// The family of the jobs on one guest ([`super::kind::Runs::Guest`]).
#[derive(Debug)]
pub(super) struct GuestJobs;

impl<P: Pve + PveQemu + 'static> JobFamily<P> for GuestJobs {
    type Accepted = GuestAccepted;
    type Setup = GuestSetup<P>;
    type Work = ();
    const MISSING: &'static str = "guest job setup";

    fn job_id(accepted: &GuestAccepted) -> String {
        accepted.job_id.clone()
    }

    fn guest(accepted: &GuestAccepted) -> Option<(u32, Uuid)> {
        Some((accepted.vmid, accepted.guest_id))
    }

    fn signer(accepted: &GuestAccepted) -> VerifiedSigner {
        VerifiedSigner::resumed(&accepted.signer, &accepted.principals)
    }

    async fn accept(
        _context: &JobContext<P>,
        _setup: &GuestSetup<P>,
        job: &Claimed,
    ) -> Result<(GuestAccepted, ()), NotAccepted> {
        let Claimed {
            document,
            signer,
            row,
            ..
        } = job;
        let job_id = document.job_id;
        // check_job guarantees a guest and vmid for the kinds it accepts.
        let (Some(guest_id), Some(vmid)) = (document.target.guest_id, document.target.vmid) else {
            tracing::error!(%job_id, kind = row.name(), "a guest job without its guest; not run");
            return Err(NotAccepted::Dropped);
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
        Ok((accepted, ()))
    }

    /// The operation kind says what the job does; the step must agree.
    fn judge_again(
        _setup: &GuestSetup<P>,
        row: KindRow,
        accepted: &GuestAccepted,
    ) -> Result<(), JobError> {
        if accepted.kind == row.kind {
            Ok(())
        } else {
            Err(JobError::KindMismatch {
                kind: accepted.kind.as_str(),
                op: row.op,
            })
        }
    }

    /// Carries out an accepted guest job in its guest's queue slot and ends it.
    async fn carry_out(
        context: &JobContext<P>,
        setup: &GuestSetup<P>,
        op: OpJournal,
        row: KindRow,
        accepted: GuestAccepted,
        (): (),
        signer: &VerifiedSigner,
    ) {
        tracing::info!(job_id = %accepted.job_id, kind = row.name(), vmid = accepted.vmid, op_id = %op.op_id(), "running signed job");
        let guest = Some((accepted.vmid, accepted.guest_id));
        let Some(action) = row.runs.guest_action() else {
            let error = JobError::NotAJob { op: row.op };
            return context
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
            GuestAction::Restore => setup.restore_storage.clone(),
            GuestAction::Decommission | GuestAction::ForceBackup => setup.backup_storage.clone(),
        };
        let pve = Arc::clone(&context.pve);
        let journal = context.journal.clone();
        let work_op = op.clone();
        let work_accepted = accepted.clone();
        let patience = context.patience(accepted.expires_at, &op);
        let recovery = setup.recovery.clone();
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
        let result = match context
            .queue
            .run(GuestKey::guest(accepted.guest_id), work)
            .await
        {
            Ok(result) => result,
            Err(e) => Err(JobError::Queue(e)),
        };
        context
            .conclude(op, accepted.job_id, row.name(), guest, result)
            .await;
    }
}
