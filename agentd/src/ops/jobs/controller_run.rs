//! The family of `controller-update`: journal the claimed job as accepted (its guest, vmid
//! and signed digest), run the rollout ([`crate::guests::controller::rollout`]) in the guest's queue
//! slot and end the job with its outcome; at start, resume one a crash interrupted from the
//! steps its journal holds.

use bosun_pve::Pve;
use bosun_pve::PveQemu;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::check::JobRefusal;
use super::context::JobContext;
use super::error::JobError;
use super::family::{Claimed, JobFamily, NotAccepted};
use super::kind::KindRow;
use crate::guests::controller::RolloutContext;
use crate::guests::controller::rollout::{self, Rollout};
use crate::guests::queue::GuestKey;
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

impl<P: Pve + PveQemu + 'static> JobFamily<P> for ControllerJobs {
    type Accepted = ControllerAccepted;
    type Setup = RolloutContext;
    type Work = ();
    const MISSING: &'static str = "controller rollout context";

    fn job_id(accepted: &ControllerAccepted) -> String {
        accepted.job_id.clone()
    }

    fn guest(accepted: &ControllerAccepted) -> Option<(u32, Uuid)> {
        Some((accepted.vmid, accepted.guest_id))
    }

    fn signer(accepted: &ControllerAccepted) -> VerifiedSigner {
        VerifiedSigner::resumed(&accepted.signer, &accepted.principals)
    }

    async fn accept(
        context: &JobContext<P>,
        _setup: &RolloutContext,
        job: &Claimed,
    ) -> Result<(ControllerAccepted, ()), NotAccepted> {
        let Claimed {
            document,
            signer,
            row,
            ..
        } = job;
        let job_id = document.job_id;
        // check_job guarantees the guest, its vmid and (by validation) the digest.
        let (Some(guest_id), Some(vmid)) = (document.target.guest_id, document.target.vmid) else {
            tracing::error!(%job_id, kind = row.name(), "a guest job without its guest; not run");
            return Err(NotAccepted::Dropped);
        };
        // A VM's controller lives in its image: the rollout's snapshot, placement and heal
        // are a container's (`pct push`, `pct exec`), and the guest agent's `exec` reaches only
        // a restore test's scratch VM (decision 0120). Refused before anything is asked.
        let recorded = context.journal.provenance(vmid).await.ok().flatten();
        if recorded.is_some_and(|p| p.kind() == bosun_proto::desired::GuestKind::Qemu) {
            return Err(NotAccepted::Refused(JobRefusal::NotForVm {
                kind: row.name(),
                vmid,
            }));
        }
        let digest = document
            .params
            .get(bosun_proto::controller::DIGEST_PARAM)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let accepted = ControllerAccepted {
            job_id: job_id.to_string(),
            guest_id,
            vmid,
            digest,
            signer: signer.fingerprint().to_owned(),
            principals: signer.principals().to_owned(),
        };
        Ok((accepted, ()))
    }

    /// The rollout runs on from the steps its journal holds.
    fn judge_again(
        _setup: &RolloutContext,
        _row: KindRow,
        _accepted: &ControllerAccepted,
    ) -> Result<(), JobError> {
        Ok(())
    }

    async fn carry_out(
        context: &JobContext<P>,
        setup: &RolloutContext,
        op: OpJournal,
        row: KindRow,
        accepted: ControllerAccepted,
        (): (),
        signer: &VerifiedSigner,
    ) {
        tracing::info!(job_id = %accepted.job_id, vmid = accepted.vmid, digest = %accepted.digest, op_id = %op.op_id(), "running signed controller rollout");
        let guest = Some((accepted.vmid, accepted.guest_id));
        let rollout_context = setup.clone();
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
            rollout::run(&rollout_context, &work_op, &rollout, &authority)
                .await
                .map_err(|reason| JobError::Rollout { reason })
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
