//! The family of `break-glass-enable` and `break-glass-disable` ([`crate::trust::break_glass`]):
//! a claimed job is journaled as accepted (the key, the deadline computed from the job's
//! duration, the reason), the door is opened or closed through the helper in one local
//! step, and the job ends with the door's facts as its output. Without a helper the kinds
//! are refused. A crash resumes the job from its `accepted` step: opening again writes the
//! same line (or fails if the deadline passed meanwhile), closing again removes nothing
//! more; the journal records each door once.

use bosun_proto::break_glass::{BreakGlassParams, SshPublicKey};
use bosun_proto::job::JobKind as WireKind;
use bosun_pve::Pve;
use bosun_pve::PveQemu;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use uuid::Uuid;

use super::check::JobRefusal;
use super::context::JobContext;
use super::error::JobError;
use super::family::{Claimed, JobFamily, NotAccepted};
use super::kind::{Door, KindRow};
use crate::ops::journal::DoorClosed;
use crate::ops::operation::OpJournal;
use crate::ops::operation::StepName;
use crate::trust::break_glass::{BreakGlass, DoorRequest};
use crate::trust::signing::VerifiedSigner;

/// What a break-glass job asks, once accepted; stored in its `accepted` step.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct BreakGlassAccepted {
    pub(super) job_id: Uuid,
    /// `break-glass-enable` or `break-glass-disable`.
    pub(super) kind: WireKind,
    /// The operator's key (enable).
    #[serde(default)]
    pub(super) key: Option<SshPublicKey>,
    /// The deadline: acceptance time plus the job's duration (enable).
    #[serde(default)]
    pub(super) expires_at: Option<Timestamp>,
    /// The operator's reason (enable).
    #[serde(default)]
    pub(super) reason: Option<String>,
    pub(super) signer: String,
    pub(super) principals: String,
}

/// The family of `break-glass-enable` and `break-glass-disable`
/// ([`super::kind::Runs::BreakGlass`]).
#[derive(Debug)]
pub(super) struct BreakGlassJobs;

impl<P: Pve + PveQemu + 'static> JobFamily<P> for BreakGlassJobs {
    type Accepted = BreakGlassAccepted;
    type Setup = BreakGlass;
    /// The door the kind opens or closes.
    type Work = Option<Door>;
    const MISSING: &'static str = "helper";

    fn job_id(accepted: &BreakGlassAccepted) -> String {
        accepted.job_id.to_string()
    }

    fn guest(_accepted: &BreakGlassAccepted) -> Option<(u32, Uuid)> {
        None
    }

    fn signer(accepted: &BreakGlassAccepted) -> VerifiedSigner {
        VerifiedSigner::resumed(&accepted.signer, &accepted.principals)
    }

    /// Both kinds share their operation kind: the `accepted` step says which one ran.
    fn row_of(_row: KindRow, accepted: &BreakGlassAccepted) -> KindRow {
        KindRow::of(accepted.kind)
    }

    async fn accept(
        context: &JobContext<P>,
        _setup: &BreakGlass,
        job: &Claimed,
    ) -> Result<(BreakGlassAccepted, Option<Door>), NotAccepted> {
        let Claimed {
            document,
            signer,
            row,
            ..
        } = job;
        let mut accepted = BreakGlassAccepted {
            job_id: document.job_id,
            kind: row.kind,
            key: None,
            expires_at: None,
            reason: None,
            signer: signer.fingerprint().to_owned(),
            principals: signer.principals().to_owned(),
        };
        if row.runs.door() == Some(Door::Open) {
            // The document was validated with its parameters; read them again here.
            let params = BreakGlassParams::from_params(&document.params)
                .map_err(|e| NotAccepted::Refused(JobRefusal::Malformed(e)))?;
            let duration = SignedDuration::from_secs(
                i64::try_from(params.duration_seconds).unwrap_or(i64::MAX),
            );
            accepted.expires_at = context.clock.now().checked_add(duration).ok();
            accepted.key = Some(params.ssh_public_key);
            accepted.reason = Some(params.reason);
        }
        Ok((accepted, row.runs.door()))
    }

    /// Opening again writes the same line (or fails if the deadline passed meanwhile),
    /// closing again removes nothing more: the door the accepted step names.
    fn judge_again(
        _setup: &BreakGlass,
        row: KindRow,
        _accepted: &BreakGlassAccepted,
    ) -> Result<Option<Door>, JobError> {
        Ok(row.runs.door())
    }

    async fn carry_out(
        context: &JobContext<P>,
        setup: &BreakGlass,
        op: OpJournal,
        row: KindRow,
        accepted: BreakGlassAccepted,
        door: Option<Door>,
        _signer: &VerifiedSigner,
    ) {
        let result = match door {
            None => Err(JobError::KindMismatch {
                kind: row.name(),
                op: op.kind(),
            }),
            Some(way) => act(setup, &op, way, &accepted).await,
        };
        context
            .conclude(op, accepted.job_id.to_string(), row.name(), None, result)
            .await;
    }
}

/// Opens or closes the door in the job's one local step.
async fn act(
    door: &BreakGlass,
    op: &OpJournal,
    way: Door,
    accepted: &BreakGlassAccepted,
) -> Result<Value, JobError> {
    if way == Door::Close {
        let run = door.close(DoorClosed::Disable, Some(accepted.job_id));
        return Ok(op
            .local_typed(StepName::HelperClose, json!({}), run)
            .await?);
    }
    let (Some(key), Some(expires_at), Some(reason)) =
        (&accepted.key, accepted.expires_at, &accepted.reason)
    else {
        return Err(JobError::IncompleteDoor);
    };
    let request = DoorRequest {
        job_id: accepted.job_id,
        key: key.clone(),
        expires_at,
        reason: reason.clone(),
        signer: accepted.signer.clone(),
    };
    let detail = json!({
        "fingerprint": key.fingerprint(),
        "expires_at": expires_at.to_string(),
    });
    Ok(op
        .local_typed(StepName::HelperOpen, detail, door.open(&request))
        .await?)
}
