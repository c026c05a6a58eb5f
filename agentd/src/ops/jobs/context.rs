//! What every job family works with ([`JobContext`]): Proxmox, the journal, the guests'
//! work queues, the clock and the channel results go out on, with the steps every job
//! shares: open its operation with the `accepted` step, refuse it, end it
//! ([`JobContext::conclude`]: its outcome journaled, audited and reported).

use bosun_pve::PveQemu;
use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::job::{JobOutcome as WireOutcome, JobResult};
use bosun_pve::Pve;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::check::JobRefusal;
use super::decommission::{Patience, RETRY_WINDOW_MAX};
use super::error::JobError;
use crate::clock::SharedClock;
use crate::guests::queue::GuestQueue;
use crate::ops::journal::{
    AuditEvent, JobOutcome, JobRun, JournalHandle, NewOperation, OpStatus, Step,
};
use crate::ops::operation::StepName;
use crate::ops::operation::{Deadline, OpJournal};

/// What a job family needs of the agent, whatever its kind.
#[derive(Debug)]
pub(super) struct JobContext<P: Pve> {
    pub(super) pve: Arc<P>,
    pub(super) journal: JournalHandle,
    pub(super) queue: GuestQueue,
    pub(super) clock: SharedClock,
    pub(super) results: mpsc::UnboundedSender<JobResult>,
}

impl<P: Pve + PveQemu + 'static> JobContext<P> {
    /// The result of job `job_id`, finished now (its detail bounded).
    pub(super) fn result_of(
        &self,
        job_id: Uuid,
        outcome: WireOutcome,
        detail: &str,
        output: Value,
    ) -> JobResult {
        JobResult {
            schema: bosun_proto::job::RESULT_SCHEMA.to_owned(),
            job_id,
            outcome,
            finished_at: self.clock.now(),
            detail: detail.chars().take(4000).collect(),
            output,
            started_at: None,
            duration_ms: None,
            retriable: false,
            retriable_reason: String::new(),
            timed_out: false,
            log_tail: Vec::new(),
        }
    }

    /// `op` held to the deadline of job `job_id`'s signed timeout, counted from its claim
    /// (so a job resumed after a restart keeps it); `op` as it is when the job has none.
    pub(super) async fn arm(&self, op: OpJournal, job_id: &str) -> OpJournal {
        match self.journal.job_run(job_id.to_owned()).await {
            Ok(Some(JobRun {
                timeout_s: Some(timeout_s),
                started_at,
                ..
            })) => op.with_deadline(Deadline::after(
                started_at,
                timeout_s,
                Arc::clone(&self.clock),
            )),
            Ok(_) => op,
            Err(e) => {
                tracing::error!(%job_id, error = %error_chain(&e), "could not read the job's timeout; it runs without one");
                op
            }
        }
    }

    /// Fills what a result says beyond its outcome: when the job began and how long it ran
    /// (its claim), whether it timed out, whether it is retriable and why, and the tail of its
    /// operation's journaled steps (bounded and redacted, [`bosun_proto::job_log`]).
    async fn describe(
        &self,
        result: &mut JobResult,
        op: &OpJournal,
        verdict: Option<(bool, &'static str)>,
    ) {
        if let Ok(Some(run)) = self.journal.job_run(result.job_id.to_string()).await {
            let ms = result.finished_at.as_millisecond() - run.started_at.as_millisecond();
            result.started_at = Some(run.started_at);
            result.duration_ms = u64::try_from(ms).ok();
        }
        result.timed_out = op.timed_out().is_some() && result.outcome == WireOutcome::Failed;
        let verdict = if result.timed_out {
            Some((true, super::retry::TIMED_OUT))
        } else {
            verdict
        };
        if let Some((retriable, reason)) = verdict {
            result.retriable = retriable;
            reason.clone_into(&mut result.retriable_reason);
        }
        match self.journal.steps(op.op_id()).await {
            Ok(steps) => {
                let lines: Vec<String> = steps.iter().map(log_line).collect();
                result.log_tail = bosun_proto::job_log::bound_tail(&lines);
            }
            Err(e) => {
                tracing::warn!(job_id = %result.job_id, error = %error_chain(&e), "could not read the job's steps for its log tail");
            }
        }
    }

    /// Queues a result in the journal's outbox, then hands it to the hub loop.
    async fn report(&self, job_id: Uuid, outcome: WireOutcome, detail: String, output: Value) {
        let result = self.result_of(job_id, outcome, &detail, output);
        match serde_json::to_string(&result) {
            Ok(body) => {
                if let Err(e) = self
                    .journal
                    .queue_job_result(job_id.to_string(), body)
                    .await
                {
                    tracing::error!(%job_id, error = %error_chain(&e), "could not queue the job result; sending it without a durable copy");
                }
            }
            Err(e) => tracing::error!(%job_id, error = %e, "could not encode the job result"),
        }
        let _ = self.results.send(result);
    }

    /// Audits a refusal (`job.refused`) and reports it `rejected`, unless the job already
    /// ran (its real result was reported and must not be overwritten).
    pub(super) async fn refuse(
        &self,
        job_id: Option<Uuid>,
        refusal: &JobRefusal,
        request_id: Option<String>,
    ) {
        let reason = error_chain(refusal);
        tracing::warn!(job_id = job_id.map(tracing::field::display), code = refusal.code(), reason = %reason, "signed job refused");
        let mut event = AuditEvent::new("job.refused");
        event.job_id = job_id.map(|j| j.to_string());
        event.request_id = request_id;
        event.detail = json!({ "code": refusal.code(), "reason": reason });
        if let Err(e) = self.journal.append_audit(event).await {
            tracing::error!(error = %error_chain(&e), "failed to audit a job refusal");
        }
        if let (Some(job_id), false) = (job_id, matches!(refusal, JobRefusal::AlreadyRun { .. })) {
            self.report(
                job_id,
                WireOutcome::Rejected,
                format!("{}: {reason}", refusal.code()),
                json!({ "code": refusal.code() }),
            )
            .await;
        }
    }

    /// Refuses a job already claimed: reported `rejected`, its run recorded as failed, so
    /// the same job id never runs later.
    pub(super) async fn refuse_claimed(
        &self,
        job_id: Uuid,
        refusal: &JobRefusal,
        request_id: Option<String>,
    ) {
        self.refuse(Some(job_id), refusal, request_id).await;
        let detail = format!("{}: {}", refusal.code(), error_chain(refusal));
        if let Err(e) = self
            .journal
            .finish_job(job_id.to_string(), JobOutcome::Failed, None, Some(detail))
            .await
        {
            tracing::error!(%job_id, error = %error_chain(&e), "could not record the refused job's end");
        }
    }

    /// How long a job may retry transient failures: until it expires (a resumed job
    /// journaled without its expiry gets the longest window) or its timeout passes,
    /// whichever comes first; a job its timeout stops retries until then.
    pub(super) fn patience(&self, expires_at: Option<jiff::Timestamp>, op: &OpJournal) -> Patience {
        let window = match expires_at {
            Some(end) => {
                let left = end.as_millisecond() - self.clock.now().as_millisecond();
                Duration::from_millis(u64::try_from(left).unwrap_or(0))
            }
            None => RETRY_WINDOW_MAX,
        };
        match op.time_left() {
            Some(left) if left < window.min(RETRY_WINDOW_MAX) => Patience::until_timeout(left),
            _ => Patience::for_window(window),
        }
    }

    /// Opens the job's operation and journals its `accepted` step with `accepted` as the
    /// detail; `None` (logged) when the journal refuses either.
    pub(super) async fn begin_accepted(
        &self,
        operation: NewOperation,
        job_id: impl std::fmt::Display,
        accepted: &impl serde::Serialize,
    ) -> Option<OpJournal> {
        let op = match OpJournal::begin(&self.journal, operation).await {
            Ok(op) => op,
            Err(e) => {
                tracing::error!(%job_id, error = %error_chain(&e), "could not begin the job's operation");
                return None;
            }
        };
        let detail = serde_json::to_value(accepted).unwrap_or(Value::Null);
        if let Err(e) = op
            .local_typed(StepName::Accepted, detail, async {
                Ok::<(), std::convert::Infallible>(())
            })
            .await
        {
            tracing::error!(%job_id, error = %error_chain(&e), "could not journal the accepted job");
            return None;
        }
        Some(self.arm(op, &job_id.to_string()).await)
    }

    /// Ends a job that ran: its operation's status, the job's outcome and result (in the
    /// outbox before it is sent), the `job.finished` audit row.
    pub(super) async fn conclude(
        &self,
        op: OpJournal,
        job_id: String,
        kind: &str,
        guest: Option<(u32, Uuid)>,
        result: Result<Value, JobError>,
    ) {
        let verdict = match &result {
            Ok(_) => None,
            Err(error) => Some(super::retry::judge(error)),
        };
        let (status, outcome, wire, detail, output) = match result {
            Ok(output) => (
                OpStatus::Done,
                JobOutcome::Succeeded,
                WireOutcome::Succeeded,
                "done".to_owned(),
                output,
            ),
            Err(error) => (
                OpStatus::Failed,
                JobOutcome::Failed,
                WireOutcome::Failed,
                error_chain(&error),
                Value::Null,
            ),
        };
        let _ = op
            .finish(status, (status == OpStatus::Failed).then(|| detail.clone()))
            .await;
        let mut result = Uuid::parse_str(&job_id)
            .ok()
            .map(|id| self.result_of(id, wire, &detail, output));
        if let Some(result) = &mut result {
            self.describe(result, &op, verdict).await;
        }
        let body = result
            .as_ref()
            .and_then(|r| serde_json::to_string(r).ok())
            .unwrap_or_default();
        let recorded = if result.is_some() {
            self.journal
                .finish_job_with_result(
                    job_id.clone(),
                    outcome,
                    Some(op.op_id()),
                    Some(detail.clone()),
                    body,
                )
                .await
        } else {
            self.journal
                .finish_job(
                    job_id.clone(),
                    outcome,
                    Some(op.op_id()),
                    Some(detail.clone()),
                )
                .await
        };
        if let Err(e) = recorded {
            tracing::error!(%job_id, error = %error_chain(&e), "could not record the job's end");
        }
        let mut event = AuditEvent::new("job.finished");
        event.job_id = Some(job_id.clone());
        event.op_id = Some(op.op_id());
        event.vmid = guest.map(|(vmid, _)| vmid);
        event.guest_id = guest.map(|(_, guest_id)| guest_id.to_string());
        event.detail = json!({ "kind": kind, "outcome": outcome.as_str(), "detail": detail });
        let _ = self.journal.append_audit(event).await;
        tracing::info!(%job_id, outcome = outcome.as_str(), "signed job ended");
        // The result is in the outbox: a crash from here on re-sends it after the restart.
        crate::failpoint::hit("job.result.queued");
        if let Some(result) = result {
            let _ = self.results.send(result);
        }
    }
}

/// One line of a job's log tail: when a step began, its name, how it stands, its Proxmox
/// task and its failure (never its detail, which may hold the job's parameters).
fn log_line(step: &Step) -> String {
    let mut line = format!("{} {} {}", step.intent_at, step.name, step.state.as_str());
    if let Some(upid) = &step.upid {
        line.push_str(" upid ");
        line.push_str(upid);
    }
    if let Some(warnings) = step.warnings.filter(|w| *w > 0) {
        line.push_str(&format!(" warnings {warnings}"));
    }
    if let Some(error) = &step.error {
        line.push_str(": ");
        line.push_str(error);
    }
    line
}

/// The span every log line of one job carries.
pub(super) fn job_span(job_id: Option<&str>, request_id: Option<&str>) -> tracing::Span {
    tracing::info_span!(
        "job",
        job_id = %job_id.unwrap_or_default(),
        request_id = %request_id.unwrap_or_default()
    )
}
