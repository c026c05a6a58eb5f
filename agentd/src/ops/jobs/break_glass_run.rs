//! The runner's side of `break-glass-enable` and `break-glass-disable` ([`crate::trust::break_glass`]):
//! a claimed job is journaled as accepted (the key, the deadline computed from the job's
//! duration, the reason), the door is opened or closed through the helper in one local
//! step, and the job ends with the door's facts as its output. Without a helper the kinds
//! are refused. A crash resumes the job from its `accepted` step: opening again writes the
//! same line (or fails if the deadline passed meanwhile), closing again removes nothing
//! more; the journal records each door once.

use bosun_errchain::error_chain;
use bosun_proto::break_glass::{BreakGlassParams, SshPublicKey};
use bosun_proto::job::JobKind as WireKind;
use bosun_pve::Pve;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use uuid::Uuid;

use super::check::JobRefusal;
use super::dispatch::{Claimed, JobFamily};
use super::error::JobError;
use super::kind::{Door, KindRow};
use super::runner::JobRunner;
use crate::ops::journal::{DoorClosed, NewOperation};
use crate::ops::operation::OpJournal;
use crate::trust::break_glass::{BreakGlass, DoorRequest};

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

impl JobFamily for BreakGlassJobs {
    type Accepted = BreakGlassAccepted;

    async fn run<P: Pve + 'static>(runner: &JobRunner<P>, job: Claimed) {
        let Claimed {
            document,
            signer,
            request_id,
            row,
        } = job;
        let job_id = document.job_id;
        if runner.break_glass.is_none() {
            let refusal = JobRefusal::UnsupportedKind {
                kind: row.name().to_owned(),
            };
            return runner.refuse_claimed(job_id, &refusal, request_id).await;
        }
        let mut accepted = BreakGlassAccepted {
            job_id,
            kind: row.kind,
            key: None,
            expires_at: None,
            reason: None,
            signer: signer.fingerprint().to_owned(),
            principals: signer.principals().to_owned(),
        };
        if row.runs.door() == Some(Door::Open) {
            // The document was validated with its parameters; read them again here.
            let params = match BreakGlassParams::from_params(&document.params) {
                Ok(params) => params,
                Err(e) => {
                    let refusal = JobRefusal::Malformed(e);
                    return runner.refuse_claimed(job_id, &refusal, request_id).await;
                }
            };
            let duration = SignedDuration::from_secs(
                i64::try_from(params.duration_seconds).unwrap_or(i64::MAX),
            );
            accepted.expires_at = runner.clock.now().checked_add(duration).ok();
            accepted.key = Some(params.ssh_public_key);
            accepted.reason = Some(params.reason);
        }
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
        runner.carry_out_break_glass(op, accepted).await;
    }

    /// Opening again writes the same line (or fails if the deadline passed meanwhile),
    /// closing again removes nothing more: the door the accepted step names.
    async fn resume<P: Pve + 'static>(
        runner: &JobRunner<P>,
        op: OpJournal,
        _row: KindRow,
        accepted: BreakGlassAccepted,
    ) {
        runner.carry_out_break_glass(op, accepted).await;
    }
}

impl<P: Pve + 'static> JobRunner<P> {
    async fn carry_out_break_glass(&self, op: OpJournal, accepted: BreakGlassAccepted) {
        let row = KindRow::of(accepted.kind);
        let result = match (&self.break_glass, row.runs.door()) {
            (None, _) => Err(JobError::NotSetUp {
                kind: row.name(),
                missing: "helper",
            }),
            (Some(_), None) => Err(JobError::KindMismatch {
                kind: row.name(),
                op: op.kind(),
            }),
            (Some(door), Some(way)) => act(door, &op, way, &accepted).await,
        };
        self.conclude(op, accepted.job_id.to_string(), row.name(), None, result)
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
        let run = async {
            door.close(DoorClosed::Disable, Some(accepted.job_id))
                .await
                .map_err(|e| error_chain(&e))
        };
        return Ok(op.local("helper.close", json!({}), run).await?);
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
    let run = async { door.open(&request).await.map_err(|e| error_chain(&e)) };
    Ok(op.local("helper.open", detail, run).await?)
}
