//! The runner's side of `break-glass-enable` and `break-glass-disable` ([`crate::break_glass`]):
//! a claimed job is journaled as accepted (the key, the deadline computed from the job's
//! duration, the reason), the door is opened or closed through the helper in one local
//! step, and the job ends with the door's facts as its output. Without a helper the kinds
//! are refused. A crash resumes the job from its `accepted` step: opening again writes the
//! same line (or fails if the deadline passed meanwhile), closing again removes nothing
//! more; the journal records each door once.

use bosun_proto::break_glass::{BreakGlassParams, SshPublicKey};
use bosun_proto::error_chain;
use bosun_proto::job::{JobDocument, JobKind as WireKind};
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use tracing::Instrument;
use uuid::Uuid;

use super::check::JobRefusal;
use super::runner::{JobRunner, job_span};
use crate::break_glass::{BreakGlass, DoorRequest};
use crate::journal::{DoorClosed, JournalError, NewOperation, OpKind, Operation};
use crate::operation::OpJournal;
use crate::pve::Pve;
use crate::signing::VerifiedSigner;

/// What a break-glass job asks, once accepted; stored in its `accepted` step.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct BreakGlassAccepted {
    pub(super) job_id: Uuid,
    /// `break-glass-enable` or `break-glass-disable`.
    pub(super) kind: String,
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

impl<P: Pve + 'static> JobRunner<P> {
    /// Accepts and runs a claimed break-glass job.
    pub(super) async fn run_break_glass(
        &self,
        document: JobDocument,
        signer: &VerifiedSigner,
        request_id: Option<String>,
    ) {
        let job_id = document.job_id;
        if self.break_glass.is_none() {
            let refusal = JobRefusal::UnsupportedKind {
                kind: document.kind.as_str(),
            };
            return self.refuse_claimed(job_id, &refusal, request_id).await;
        }
        let mut accepted = BreakGlassAccepted {
            job_id,
            kind: document.kind.as_str().to_owned(),
            key: None,
            expires_at: None,
            reason: None,
            signer: signer.fingerprint().to_owned(),
            principals: signer.principals().to_owned(),
        };
        if document.kind == WireKind::BreakGlassEnable {
            // The document was validated with its parameters; read them again here.
            let params = match BreakGlassParams::from_params(&document.params) {
                Ok(params) => params,
                Err(e) => {
                    let refusal = JobRefusal::Malformed(e);
                    return self.refuse_claimed(job_id, &refusal, request_id).await;
                }
            };
            let duration = SignedDuration::from_secs(
                i64::try_from(params.duration_seconds).unwrap_or(i64::MAX),
            );
            accepted.expires_at = self.clock.now().checked_add(duration).ok();
            accepted.key = Some(params.ssh_public_key);
            accepted.reason = Some(params.reason);
        }
        let operation = NewOperation {
            kind: OpKind::BreakGlassJob,
            guest_id: None,
            vmid: None,
            job_id: Some(job_id.to_string()),
            request_id,
        };
        let Some(op) = self.begin_accepted(operation, job_id, &accepted).await else {
            return;
        };
        self.carry_out_break_glass(op, accepted).await;
    }

    async fn carry_out_break_glass(&self, op: OpJournal, accepted: BreakGlassAccepted) {
        let result = match &self.break_glass {
            None => Err("break-glass is not run by this agent (no helper)".to_owned()),
            Some(door) => act(door, &op, &accepted).await,
        };
        self.conclude(
            op,
            accepted.job_id.to_string(),
            &accepted.kind,
            None,
            result,
        )
        .await;
    }

    /// Resumes a break-glass job a crash interrupted.
    pub(super) async fn resume_break_glass(
        &self,
        op: OpJournal,
        operation: &Operation,
    ) -> Result<(), JournalError> {
        let steps = self.journal.steps(operation.op_id).await?;
        let accepted = steps
            .iter()
            .find(|s| s.name == "accepted")
            .and_then(|s| serde_json::from_value::<BreakGlassAccepted>(s.detail.clone()).ok());
        let job_id = operation.job_id.clone().unwrap_or_default();
        let span = job_span(Some(&job_id), operation.request_id.as_deref());
        let Some(accepted) = accepted else {
            let reason = "interrupted before acceptance".to_owned();
            self.conclude(op, job_id, "break-glass", None, Err(reason))
                .instrument(span)
                .await;
            return Ok(());
        };
        async {
            tracing::info!(op_id = %operation.op_id, "resuming an interrupted break-glass job");
            self.carry_out_break_glass(op, accepted).await;
        }
        .instrument(span)
        .await;
        Ok(())
    }
}

/// Opens or closes the door in the job's one local step.
async fn act(
    door: &BreakGlass,
    op: &OpJournal,
    accepted: &BreakGlassAccepted,
) -> Result<Value, String> {
    if accepted.kind == WireKind::BreakGlassDisable.as_str() {
        let run = async {
            door.close(DoorClosed::Disable, Some(accepted.job_id))
                .await
                .map_err(|e| error_chain(&e))
        };
        return op
            .local("helper.close", json!({}), run)
            .await
            .map_err(|e| error_chain(&e));
    }
    let (Some(key), Some(expires_at), Some(reason)) =
        (&accepted.key, accepted.expires_at, &accepted.reason)
    else {
        return Err("the accepted break-glass job lacks its key, deadline or reason".into());
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
    op.local("helper.open", detail, run)
        .await
        .map_err(|e| error_chain(&e))
}
