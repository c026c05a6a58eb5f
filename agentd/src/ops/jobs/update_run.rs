//! The family of `agent-update` ([`crate::runtime::update`]): judge the claimed job (the
//! update window of the poll config, unless the operator signed `override_window`), then
//! as a journaled operation `accepted`, `download` (the artifact from the hub, checked
//! against the signed SHA-256 before it is kept), `stage` (the helper copies it into the
//! inactive slot, checking the digest again, records the trial and flips `current`). The
//! job succeeds once staged; the health gate restarts the agent and decides, and its verdict
//! is audited by whichever binary runs next.
//!
//! A job interrupted by a crash is resumed from `accepted`: a trial already recorded for
//! this job is taken as it stands (staged, committed or rolled back), never staged again.

use bosun_pve::PveQemu;
use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::helper::{AgentVersion, Output, Request, Sha256Hex, StageAgentUpdate};
use bosun_proto::update::{AgentUpdateParams, MAX_ARTIFACT_BYTES, UpdatePhase};
use bosun_pve::Pve;
use serde_json::{Value, json};
use uuid::Uuid;

use super::check::JobRefusal;
use super::context::JobContext;
use super::error::JobError;
use super::family::{Claimed, JobFamily, NotAccepted};
use super::kind::KindRow;
pub use super::update_error::AgentUpdateError;
use crate::links::helper::HelperClient;
use crate::links::hub_client::client::HubClient;
use crate::ops::journal::{AuditEvent, JournalHandle};
use crate::ops::operation::StepName;
use crate::ops::operation::{OpJournal, StepError};
use crate::runtime::update::{UpdateContext, in_window};
use crate::trust::signing::VerifiedSigner;

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

/// The family of `agent-update` ([`super::kind::Runs::AgentUpdate`]).
#[derive(Debug)]
pub(super) struct AgentUpdateJobs;

impl<P: Pve + PveQemu + 'static> JobFamily<P> for AgentUpdateJobs {
    type Accepted = UpdateAccepted;
    type Setup = UpdateJobs;
    type Work = ();
    const MISSING: &'static str = "update context";

    fn job_id(accepted: &UpdateAccepted) -> String {
        accepted.job_id.to_string()
    }

    fn guest(_accepted: &UpdateAccepted) -> Option<(u32, Uuid)> {
        None
    }

    fn signer(accepted: &UpdateAccepted) -> VerifiedSigner {
        VerifiedSigner::resumed(&accepted.signer, &accepted.principals)
    }

    /// Refused outside the update window, unless the operator signed `override_window`.
    async fn accept(
        context: &JobContext<P>,
        setup: &UpdateJobs,
        job: &Claimed,
    ) -> Result<(UpdateAccepted, ()), NotAccepted> {
        let Claimed {
            document, signer, ..
        } = job;
        let params = AgentUpdateParams::from_params(&document.params)
            .map_err(|e| NotAccepted::Refused(JobRefusal::Malformed(e)))?;
        if !params.override_window {
            let window = setup.context.window();
            let inside = window
                .as_ref()
                .is_some_and(|w| in_window(w, context.clock.now()));
            if !inside {
                return Err(NotAccepted::Refused(JobRefusal::OutsideUpdateWindow {
                    window: window.map_or_else(
                        || "none configured".to_owned(),
                        |w| format!("{} for {} min", w.start, w.duration_minutes),
                    ),
                }));
            }
        }
        let accepted = UpdateAccepted {
            job_id: document.job_id,
            version: params.version,
            sha256: params.sha256,
            override_window: params.override_window,
            signer: signer.fingerprint().to_owned(),
            principals: signer.principals().to_owned(),
        };
        Ok((accepted, ()))
    }

    /// A trial already recorded for this job is taken as it stands, never staged again.
    fn judge_again(
        _setup: &UpdateJobs,
        _row: KindRow,
        _accepted: &UpdateAccepted,
    ) -> Result<(), JobError> {
        Ok(())
    }

    async fn carry_out(
        context: &JobContext<P>,
        setup: &UpdateJobs,
        op: OpJournal,
        row: KindRow,
        accepted: UpdateAccepted,
        (): (),
        _signer: &VerifiedSigner,
    ) {
        tracing::info!(job_id = %accepted.job_id, version = %accepted.version, sha256 = %accepted.sha256, op_id = %op.op_id(), "running signed agent update");
        let result = update_steps(&op, &accepted, setup).await;
        if let Err(error) = &result {
            audit_update_failure(&context.journal, &accepted, error).await;
        }
        context
            .conclude(op, accepted.job_id.to_string(), row.name(), None, result)
            .await;
    }
}

/// Downloads and stages the update (or takes the trial already recorded for this job).
async fn update_steps(
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
    let download = async {
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
    let size = match op.local_typed(StepName::Download, detail, download).await {
        Ok(size) => size,
        Err(e) => return Err(step_failure("download", e)),
    };

    let request = Request::StageAgentUpdate(StageAgentUpdate {
        update_id: accepted.job_id,
        version,
        sha256,
    });
    let stage = async { helper.call(&request).await.map_err(AgentUpdateError::Stage) };
    let detail = json!({ "version": accepted.version, "size": size });
    let output = match op.local_typed(StepName::Stage, detail, stage).await {
        Ok(output) => output,
        Err(e) => return Err(step_failure("stage", e)),
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
async fn audit_update_failure(
    journal: &JournalHandle,
    accepted: &UpdateAccepted,
    error: &JobError,
) {
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
    if let Err(e) = journal.append_audit(event).await {
        tracing::error!(error = %error_chain(&e), "could not audit the failed update");
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

/// The failure of update step `step`: the update's own failure the step met, else the
/// journal's.
fn step_failure(step: &'static str, error: StepError) -> JobError {
    match error {
        StepError::Failed {
            op_id,
            step: name,
            source,
        } => match source.downcast::<AgentUpdateError>() {
            Ok(failure) => JobError::UpdateStep {
                step,
                failure: *failure,
            },
            Err(source) => StepError::Failed {
                op_id,
                step: name,
                source,
            }
            .into(),
        },
        other => other.into(),
    }
}
