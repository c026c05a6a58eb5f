//! The runner's side of `agent-update` ([`crate::update`]): judge the claimed job (the
//! update window of the poll config, unless the operator signed `override_window`), then
//! as a journaled operation `accepted`, `download` (the artifact from the hub, checked
//! against the signed SHA-256 before it is kept), `stage` (the helper copies it into the
//! inactive slot, checking the digest again, records the trial and flips `current`). The
//! job succeeds once staged; the health gate restarts the agent and decides, and its verdict
//! is audited by whichever binary runs next.
//!
//! A job interrupted by a crash is resumed from `accepted`: a trial already recorded for
//! this job is taken as it stands (staged, committed or rolled back), never staged again.

use std::sync::Arc;

use bosun_proto::error_chain;
use bosun_proto::helper::{AgentVersion, Output, Request, Sha256Hex, StageAgentUpdate};
use bosun_proto::job::JobDocument;
use bosun_proto::update::{AgentUpdateParams, MAX_ARTIFACT_BYTES, UpdatePhase};
use secrecy::SecretString;
use serde_json::{Value, json};
use tracing::Instrument;
use uuid::Uuid;

use super::check::JobRefusal;
use super::runner::{JobRunner, job_span};
use crate::helper_client::HelperClient;
use crate::hub::client::HubClient;
use crate::journal::{AuditEvent, JournalError, NewOperation, OpKind, Operation};
use crate::operation::OpJournal;
use crate::pve::Pve;
use crate::signing::VerifiedSigner;
use crate::update::{UpdateContext, in_window};

/// What `agent-update` jobs need beyond the runner.
#[derive(Debug, Clone)]
pub struct UpdateJobs {
    /// Paths, window, verdicts.
    pub context: Arc<UpdateContext>,
    /// Where the artifact comes from.
    pub hub: HubClient,
    /// This host.
    pub host_id: Uuid,
    /// Its key.
    pub host_key: SecretString,
    /// Stages the binary; without it every update job fails.
    pub helper: Option<HelperClient>,
}

/// What an accepted update job asks; stored in its `accepted` step.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct UpdateAccepted {
    job_id: Uuid,
    version: String,
    sha256: String,
    override_window: bool,
    signer: String,
    principals: String,
}

impl<P: Pve + 'static> JobRunner<P> {
    /// Judges and runs a claimed `agent-update` job.
    pub(super) async fn run_update(
        &self,
        document: JobDocument,
        signer: &VerifiedSigner,
        request_id: Option<String>,
    ) {
        let job_id = document.job_id;
        let Some(jobs) = &self.update else {
            let refusal = JobRefusal::UnsupportedKind {
                kind: document.kind.as_str(),
            };
            return self.refuse_claimed(job_id, &refusal, request_id).await;
        };
        let params = match AgentUpdateParams::from_params(&document.params) {
            Ok(params) => params,
            Err(e) => {
                return self
                    .refuse_claimed(job_id, &JobRefusal::Malformed(e), request_id)
                    .await;
            }
        };
        if !params.override_window {
            let window = jobs.context.window();
            let inside = window
                .as_ref()
                .is_some_and(|w| in_window(w, self.clock.now()));
            if !inside {
                let refusal = JobRefusal::OutsideUpdateWindow {
                    window: window.map_or_else(
                        || "none configured".to_owned(),
                        |w| format!("{} for {} min", w.start, w.duration_minutes),
                    ),
                };
                return self.refuse_claimed(job_id, &refusal, request_id).await;
            }
        }
        let accepted = UpdateAccepted {
            job_id,
            version: params.version,
            sha256: params.sha256,
            override_window: params.override_window,
            signer: signer.fingerprint().to_owned(),
            principals: signer.principals().to_owned(),
        };
        let operation = NewOperation {
            kind: OpKind::AgentUpdateJob,
            guest_id: None,
            vmid: None,
            job_id: Some(job_id.to_string()),
            request_id,
        };
        let Some(op) = self.begin_accepted(operation, job_id, &accepted).await else {
            return;
        };
        self.carry_out_update(op, &accepted, jobs).await;
    }

    /// Resumes an update a crash interrupted.
    pub(super) async fn resume_update(
        &self,
        op: OpJournal,
        operation: &Operation,
    ) -> Result<(), JournalError> {
        let steps = self.journal.steps(operation.op_id).await?;
        let accepted = steps
            .iter()
            .find(|s| s.name == "accepted")
            .and_then(|s| serde_json::from_value::<UpdateAccepted>(s.detail.clone()).ok());
        let job_id = operation.job_id.clone().unwrap_or_default();
        let span = job_span(Some(&job_id), operation.request_id.as_deref());
        match (accepted, &self.update) {
            (Some(accepted), Some(jobs)) => {
                tracing::info!(op_id = %op.op_id(), "resuming an interrupted agent update");
                self.carry_out_update(op, &accepted, jobs)
                    .instrument(span)
                    .await;
            }
            _ => {
                let reason = "interrupted before acceptance".to_owned();
                self.conclude(op, job_id, "agent-update", None, Err(reason))
                    .instrument(span)
                    .await;
            }
        }
        Ok(())
    }

    async fn carry_out_update(&self, op: OpJournal, accepted: &UpdateAccepted, jobs: &UpdateJobs) {
        tracing::info!(job_id = %accepted.job_id, version = %accepted.version, sha256 = %accepted.sha256, op_id = %op.op_id(), "running signed agent update");
        let result = self.update_steps(&op, accepted, jobs).await;
        if let Err(reason) = &result {
            self.audit_update_failure(accepted, reason).await;
        }
        self.conclude(
            op,
            accepted.job_id.to_string(),
            "agent-update",
            None,
            result,
        )
        .await;
    }

    async fn update_steps(
        &self,
        op: &OpJournal,
        accepted: &UpdateAccepted,
        jobs: &UpdateJobs,
    ) -> Result<Value, String> {
        // A trial of this job already recorded (a crash after staging): take it as it is.
        if let Some(record) = jobs.context.record()
            && record.update_id == accepted.job_id
        {
            return match record.phase {
                UpdatePhase::RolledBack | UpdatePhase::RollingBack => Err(format!(
                    "rolled back by the health gate ({}): {}",
                    record.failure.map_or("-", |f| f.as_str()),
                    record.detail.unwrap_or_default()
                )),
                UpdatePhase::Trial | UpdatePhase::Committed => Ok(json!({
                    "slot": record.trial.as_str(),
                    "previous": record.good.as_str(),
                    "version": record.version,
                    "sha256": record.sha256,
                    "phase": record.phase.as_str(),
                })),
            };
        }
        let helper = jobs
            .helper
            .clone()
            .ok_or_else(|| "no helper is configured to stage the update".to_owned())?;
        let version = AgentVersion::new(accepted.version.clone()).map_err(|e| e.to_string())?;
        let sha256 = Sha256Hex::new(accepted.sha256.clone()).map_err(|e| e.to_string())?;

        let inbox = jobs.context.inbox();
        let detail = json!({ "sha256": accepted.sha256, "inbox": inbox.display().to_string() });
        let download = async {
            let bytes = jobs
                .hub
                .artifact(
                    &jobs.host_id,
                    &jobs.host_key,
                    &accepted.sha256,
                    MAX_ARTIFACT_BYTES,
                )
                .await
                .map_err(|e| format!("artifact_unavailable: {}", error_chain(&e)))?;
            let want = accepted.sha256.clone();
            let path = inbox.clone();
            tokio::task::spawn_blocking(move || keep_if_digest_matches(&path, &bytes, &want))
                .await
                .map_err(|e| format!("artifact_unavailable: {e}"))?
        };
        let size = op
            .local("download", detail, download)
            .await
            .map_err(|e| error_chain(&e))?;

        let request = Request::StageAgentUpdate(StageAgentUpdate {
            update_id: accepted.job_id,
            version,
            sha256,
        });
        let stage = async {
            helper
                .call(&request)
                .await
                .map_err(|e| format!("stage_failed: {}", error_chain(&e)))
        };
        let detail = json!({ "version": accepted.version, "size": size });
        let output = op
            .local("stage", detail, stage)
            .await
            .map_err(|e| error_chain(&e))?;
        match output {
            Output::AgentUpdateStaged {
                slot,
                previous,
                version,
                sha256,
                size,
                already_staged,
            } => {
                tracing::info!(%slot, %previous, %version, size, already_staged, "agent update staged; the health gate restarts the agent and decides");
                // The slot holds its own copy now.
                let _ = std::fs::remove_file(jobs.context.inbox());
                Ok(json!({
                    "slot": slot,
                    "previous": previous,
                    "version": version,
                    "sha256": sha256,
                    "size": size,
                    "phase": "trial",
                }))
            }
            other => Err(format!(
                "the helper answered {other:?} to stage_agent_update"
            )),
        }
    }

    /// An update that never reached its trial is audited as failed (the hub raises
    /// `agent_update_failed`), like one the gate rolled back.
    async fn audit_update_failure(&self, accepted: &UpdateAccepted, reason: &str) {
        let failure = reason.split(':').next().unwrap_or("stage_failed");
        let mut event = AuditEvent::new("agent_update.failed");
        event.job_id = Some(accepted.job_id.to_string());
        event.detail = json!({
            "update_id": accepted.job_id.to_string(),
            "version": accepted.version,
            "sha256": accepted.sha256,
            "failure": failure,
            "detail": reason,
            "running_version": env!("CARGO_PKG_VERSION"),
        });
        if let Err(e) = self.journal.append_audit(event).await {
            tracing::error!(error = %error_chain(&e), "could not audit the failed update");
        }
    }
}

/// Writes `bytes` to `path` (through a temporary name, mode 0644) when they hash to `want`;
/// gives their length. Bytes that do not match are never written.
fn keep_if_digest_matches(path: &std::path::Path, bytes: &[u8], want: &str) -> Result<u64, String> {
    use sha2::Digest as _;
    use std::io::Write as _;
    let found = hex::encode(sha2::Sha256::digest(bytes));
    if found != want {
        return Err(format!(
            "digest_mismatch: the hub served {} bytes hashing to {found}, not the signed {want}",
            bytes.len()
        ));
    }
    let dir = path
        .parent()
        .ok_or_else(|| format!("artifact_unavailable: {} has no parent", path.display()))?;
    let io = |what: &str, e: std::io::Error| {
        format!("artifact_unavailable: {what} {}: {e}", dir.display())
    };
    std::fs::create_dir_all(dir).map_err(|e| io("creating", e))?;
    let tmp = dir.join(".download");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| io("writing in", e))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| io("writing in", e))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(|e| io("renaming in", e))?;
    Ok(bytes.len() as u64)
}
