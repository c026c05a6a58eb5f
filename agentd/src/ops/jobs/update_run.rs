//! The runner's side of `agent-update` ([`crate::runtime::update`]): judge the claimed job (the
//! update window of the poll config, unless the operator signed `override_window`), then
//! as a journaled operation `accepted`, `download` (the artifact from the hub, checked
//! against the signed SHA-256 before it is kept), `stage` (the helper copies it into the
//! inactive slot, checking the digest again, records the trial and flips `current`). The
//! job succeeds once staged; the health gate restarts the agent and decides, and its verdict
//! is audited by whichever binary runs next.
//!
//! A job interrupted by a crash is resumed from `accepted`: a trial already recorded for
//! this job is taken as it stands (staged, committed or rolled back), never staged again.

use std::path::PathBuf;
use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::helper::{AgentVersion, Output, Request, Sha256Hex, StageAgentUpdate};
use bosun_proto::update::{AgentUpdateParams, MAX_ARTIFACT_BYTES, UpdatePhase};
use bosun_pve::Pve;
use serde_json::{Value, json};
use uuid::Uuid;

use super::check::JobRefusal;
use super::dispatch::{Claimed, JobFamily};
use super::error::JobError;
use super::kind::KindRow;
use super::runner::JobRunner;
use crate::links::helper::HelperClient;
use crate::links::hub_client::client::HubClient;
use crate::ops::journal::{AuditEvent, NewOperation};
use crate::ops::operation::{OpJournal, StepError};
use crate::runtime::update::{UpdateContext, in_window};

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
    pub host_key: crate::links::hub_client::identity::HostKey,
    /// Stages the binary; without it every update job fails.
    pub helper: Option<HelperClient>,
}

/// What an accepted update job asks; stored in its `accepted` step.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct UpdateAccepted {
    job_id: Uuid,
    version: String,
    sha256: String,
    override_window: bool,
    signer: String,
    principals: String,
}

/// Why an `agent-update` job did not reach its trial. The text leads with the failure's
/// code ([`AgentUpdateError::code`]), the `failure` of its `agent_update.failed` audit row.
#[derive(Debug, thiserror::Error)]
pub enum AgentUpdateError {
    /// The hub did not serve the artifact.
    #[error("artifact_unavailable: fetching {sha256} from the hub")]
    Fetch {
        /// The signed digest.
        sha256: String,
        /// The cause.
        #[source]
        source: crate::links::hub_client::client::HubClientError,
    },
    /// The inbox has no directory to write in.
    #[error("artifact_unavailable: {} has no parent", path.display())]
    NoInbox {
        /// The inbox.
        path: PathBuf,
    },
    /// The artifact could not be written to the inbox.
    #[error("artifact_unavailable: {what} {}", dir.display())]
    Keep {
        /// What was being done.
        what: &'static str,
        /// The inbox's directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The hub served other bytes than the signed digest names.
    #[error(
        "digest_mismatch: the hub served {size} bytes hashing to {found}, not the signed {want}"
    )]
    DigestMismatch {
        /// How many bytes.
        size: u64,
        /// Their digest.
        found: String,
        /// The signed digest.
        want: String,
    },
    /// No helper is configured to stage the update.
    #[error("no helper is configured to stage the update")]
    NoHelper,
    /// The helper refused or failed to stage it.
    #[error("stage_failed")]
    Stage(#[source] crate::links::helper::HelperClientError),
    /// The health gate rolled the staged trial of this job back.
    #[error("rolled back by the health gate ({failure}): {detail}")]
    RolledBack {
        /// The gate's failure.
        failure: &'static str,
        /// Its detail.
        detail: String,
    },
}

impl AgentUpdateError {
    /// The short code the hub's `agent_update_failed` alert names.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Fetch { .. } | Self::NoInbox { .. } | Self::Keep { .. } => "artifact_unavailable",
            Self::DigestMismatch { .. } => "digest_mismatch",
            Self::NoHelper => "no_helper",
            Self::Stage(_) => "stage_failed",
            Self::RolledBack { .. } => "rolled_back",
        }
    }
}

/// The family of `agent-update` ([`super::kind::Runs::AgentUpdate`]).
#[derive(Debug)]
pub(super) struct AgentUpdateJobs;

impl JobFamily for AgentUpdateJobs {
    type Accepted = UpdateAccepted;

    async fn run<P: Pve + 'static>(runner: &JobRunner<P>, job: Claimed) {
        let Claimed {
            document,
            signer,
            request_id,
            row,
        } = job;
        let job_id = document.job_id;
        let Some(jobs) = &runner.update else {
            let refusal = JobRefusal::UnsupportedKind {
                kind: row.name().to_owned(),
            };
            return runner.refuse_claimed(job_id, &refusal, request_id).await;
        };
        let params = match AgentUpdateParams::from_params(&document.params) {
            Ok(params) => params,
            Err(e) => {
                return runner
                    .refuse_claimed(job_id, &JobRefusal::Malformed(e), request_id)
                    .await;
            }
        };
        if !params.override_window {
            let window = jobs.context.window();
            let inside = window
                .as_ref()
                .is_some_and(|w| in_window(w, runner.clock.now()));
            if !inside {
                let refusal = JobRefusal::OutsideUpdateWindow {
                    window: window.map_or_else(
                        || "none configured".to_owned(),
                        |w| format!("{} for {} min", w.start, w.duration_minutes),
                    ),
                };
                return runner.refuse_claimed(job_id, &refusal, request_id).await;
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
            kind: row.op,
            guest_id: None,
            vmid: None,
            job_id: Some(job_id.to_string()),
            request_id,
        };
        let Some(op) = runner.begin_accepted(operation, job_id, &accepted).await else {
            return;
        };
        runner.carry_out_update(op, row, &accepted, jobs).await;
    }

    /// A trial already recorded for this job is taken as it stands, never staged again.
    async fn resume<P: Pve + 'static>(
        runner: &JobRunner<P>,
        op: OpJournal,
        row: KindRow,
        accepted: UpdateAccepted,
    ) {
        match &runner.update {
            Some(jobs) => runner.carry_out_update(op, row, &accepted, jobs).await,
            None => {
                let error = JobError::NotSetUp {
                    kind: row.name(),
                    missing: "update context",
                };
                let job_id = accepted.job_id.to_string();
                runner
                    .conclude(op, job_id, row.name(), None, Err(error))
                    .await;
            }
        }
    }
}

impl<P: Pve + 'static> JobRunner<P> {
    async fn carry_out_update(
        &self,
        op: OpJournal,
        row: KindRow,
        accepted: &UpdateAccepted,
        jobs: &UpdateJobs,
    ) {
        tracing::info!(job_id = %accepted.job_id, version = %accepted.version, sha256 = %accepted.sha256, op_id = %op.op_id(), "running signed agent update");
        let result = self.update_steps(&op, accepted, jobs).await;
        if let Err(error) = &result {
            self.audit_update_failure(accepted, error).await;
        }
        self.conclude(op, accepted.job_id.to_string(), row.name(), None, result)
            .await;
    }

    async fn update_steps(
        &self,
        op: &OpJournal,
        accepted: &UpdateAccepted,
        jobs: &UpdateJobs,
    ) -> Result<Value, JobError> {
        // A trial of this job already recorded (a crash after staging): take it as it is.
        if let Some(record) = jobs.context.record()
            && record.update_id == accepted.job_id
        {
            return match record.phase {
                UpdatePhase::RolledBack | UpdatePhase::RollingBack => {
                    Err(JobError::Update(AgentUpdateError::RolledBack {
                        failure: record.failure.map_or("-", |f| f.as_str()),
                        detail: record.detail.unwrap_or_default(),
                    }))
                }
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
            .ok_or(JobError::Update(AgentUpdateError::NoHelper))?;
        let version = AgentVersion::new(accepted.version.clone())?;
        let sha256 = Sha256Hex::new(accepted.sha256.clone())?;

        let inbox = jobs.context.inbox();
        let detail = json!({ "sha256": accepted.sha256, "inbox": inbox.display().to_string() });
        // What failed in a step, typed; the step journals its text.
        let mut failed = None;
        let download = async {
            let kept = async {
                let fetch = |source| AgentUpdateError::Fetch {
                    sha256: accepted.sha256.clone(),
                    source,
                };
                let body = jobs
                    .hub
                    .artifact(
                        &jobs.host_id,
                        &jobs.host_key.presented(),
                        &accepted.sha256,
                        MAX_ARTIFACT_BYTES,
                    )
                    .await
                    .map_err(fetch)?;
                keep_if_digest_matches(&inbox, body, &accepted.sha256, fetch).await
            };
            kept.await.map_err(|e| typed(&mut failed, e))
        };
        let size = match op.local("download", detail, download).await {
            Ok(size) => size,
            Err(e) => return Err(step_failure("download", failed, e)),
        };

        let request = Request::StageAgentUpdate(StageAgentUpdate {
            update_id: accepted.job_id,
            version,
            sha256,
        });
        let mut failed = None;
        let stage = async {
            helper
                .call(&request)
                .await
                .map_err(|e| typed(&mut failed, AgentUpdateError::Stage(e)))
        };
        let detail = json!({ "version": accepted.version, "size": size });
        let output = match op.local("stage", detail, stage).await {
            Ok(output) => output,
            Err(e) => return Err(step_failure("stage", failed, e)),
        };
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
            other => Err(JobError::HelperAnswer {
                request: "stage_agent_update",
                answer: format!("{other:?}"),
            }),
        }
    }

    /// An update that never reached its trial is audited as failed (the hub raises
    /// `agent_update_failed`), like one the gate rolled back.
    async fn audit_update_failure(&self, accepted: &UpdateAccepted, error: &JobError) {
        // Outside its own failures (the helper's answer, the journal): staging failed.
        let failure = if let JobError::Update(e) | JobError::UpdateStep { failure: e, .. } = error {
            e.code()
        } else {
            "stage_failed"
        };
        let reason = error_chain(error);
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

/// Streams the artifact `body` into a temporary file beside `path`, hashing it as it comes,
/// and renames it to `path` only if its digest is `want` (the signed one); otherwise the file
/// is removed. Gives its size. The body is never held whole in memory: an artifact may be as
/// large as the hub's limit, the agent's unit far smaller.
async fn keep_if_digest_matches(
    path: &std::path::Path,
    mut body: crate::links::hub_client::client::AnswerBody,
    want: &str,
    fetch: impl Fn(crate::links::hub_client::client::HubClientError) -> AgentUpdateError,
) -> Result<u64, AgentUpdateError> {
    use sha2::Digest as _;
    use tokio::io::AsyncWriteExt as _;
    let dir = path.parent().ok_or_else(|| AgentUpdateError::NoInbox {
        path: path.to_owned(),
    })?;
    let io = |what: &'static str, source: std::io::Error| AgentUpdateError::Keep {
        what,
        dir: dir.to_owned(),
        source,
    };
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| io("creating", e))?;
    let tmp = dir.join(".download");
    let _ = tokio::fs::remove_file(&tmp).await;
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .await
        .map_err(|e| io("writing in", e))?;
    let mut hasher = sha2::Sha256::new();
    let mut size: u64 = 0;
    let written = async {
        while let Some(chunk) = body.chunk().await.map_err(&fetch)? {
            hasher.update(&chunk);
            size = size.saturating_add(chunk.len() as u64);
            file.write_all(&chunk)
                .await
                .map_err(|e| io("writing in", e))?;
        }
        file.sync_all().await.map_err(|e| io("writing in", e))
    }
    .await;
    drop(file);
    let found = hex::encode(hasher.finalize());
    let kept = written.and_then(|()| match found == want {
        true => Ok(()),
        false => Err(AgentUpdateError::DigestMismatch {
            size,
            found,
            want: want.to_owned(),
        }),
    });
    if let Err(e) = kept {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(e);
    }
    tokio::fs::rename(&tmp, path)
        .await
        .map_err(|e| io("renaming in", e))?;
    Ok(size)
}

/// Keeps `error` in `failed` for the step's caller and gives its text for the journal.
fn typed(failed: &mut Option<AgentUpdateError>, error: AgentUpdateError) -> String {
    let text = error_chain(&error);
    *failed = Some(error);
    text
}

/// The failure of update step `step`: the typed cause the step met, else the journal's.
fn step_failure(
    step: &'static str,
    failed: Option<AgentUpdateError>,
    error: StepError,
) -> JobError {
    match failed {
        Some(failure) => JobError::UpdateStep { step, failure },
        None => error.into(),
    }
}
