//! The hub loop: long-poll the hub, hand desired state to the reconciler and
//! signed jobs to the job runner, and report.
//!
//! ```text
//!            ┌──────── PollTask ────────┐  watch<DesiredSnapshot>  ┌──────────────┐
//!  hub ◄─────┤ poll (long) / job results├─────────────────────────►│ReconcileTask │
//!            │  backoff + jitter        │◄──── watch<Status> ──────┤              │
//!            └──┬──────────────▲────────┘                          └──────────────┘
//!               │ JobInbox:     │ mpsc<JobResult>, mpsc<handled job id>
//!               ▼ one batch     │
//!            JobRunner::check_batch → run_checked (per accepted job)
//! ```
//!
//! Reporting follows the heartbeat rules: every poll is a heartbeat; a report
//! goes out at once after an acting reconcile pass or a finished backup (the
//! journal signals each recorded backup outcome) or when a health condition is raised or
//! cleared, otherwise at most one per
//! `report_min_interval` when the observed state changes. A poll carries only
//! what changed since the report the hub acknowledged, and a full report after
//! start, after a reconnect and whenever the hub asks (see [`super::report`]);
//! audit entries are sent only past the sequence the hub acknowledged.
//!
//! Job results go through the journal's outbox: a result stays queued until
//! the hub acknowledged it, and results left undelivered by a crash go out
//! before the first poll after the restart.
//!
//! A host enrolled with a token that requires approval is refused by the hub
//! (`host_pending_approval`) until an operator approves it: the loop says so once (warn, and
//! [`HubLink::PendingApproval`] for `bosun-agentd status`) and asks again every
//! `[poll] pending_interval_ms` (3/4 to 1 × it), not on the failure backoff.
//!
//! A planned stop is not an outage: when the agent is told to stop (SIGTERM; the
//! [`PollTask::with_planned_stop`] token), the loop sends one last poll saying `stopping`, so
//! the hub shows the host `stopped` instead of paging it. That poll is bounded by
//! [`STOP_POLL_TIMEOUT`] (well inside systemd's `TimeoutStopSec`), so a stop never hangs on a
//! dead hub; when it cannot be delivered the hub simply pages the silence as for any other.
//!
//! The loop only fetches and routes: signed jobs go to the [`JobInbox`] (dedupe,
//! acks, refusals), desired state to the [`DesiredIntake`] (cached before it is acted
//! on, the same document; the cache is loaded at start, so the agent keeps reconciling
//! while the hub is away), timings to [`HubTimings`] (bounded), and report state lives
//! in the [`ReportState`]. An answer larger than
//! [`MAX_RESPONSE_BYTES`](bosun_proto::poll::MAX_RESPONSE_BYTES) is a failed poll,
//! audited once per run (`hub.answer_too_large`).

use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::job::JobResult;
use bosun_proto::poll::PollRequest;
use bosun_pve::Pve;
use rand::Rng;
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::client::{HubClient, HubClientError, RawPollResponse};
use super::desired_intake::DesiredIntake;
use super::identity::HostIdentity;
use super::inbox::JobInbox;
pub use super::link::{HubLink, HubStatus};
use super::op_tail::OpTail;
use super::pins::HubPins;
use super::reporter::{ReportSources, ReportState};
use super::timing::HubTimings;
use crate::config::PollSettings;
use crate::desired::DesiredSnapshot;
use crate::jobs::runner::JobRunner;
use crate::journal::{AuditEvent, JournalHandle};
use crate::reconcile::reconcile_task::ReconcileHandle;
use crate::supervisor::Supervisor;

/// The longest the last poll of a planned stop may take, from building its report to the
/// hub's answer. systemd gives the whole stop `TimeoutStopSec=30s`
/// (`systemd/bosun-agentd.service`); the rest of the shutdown runs meanwhile.
pub const STOP_POLL_TIMEOUT: Duration = Duration::from_secs(5);

/// The loop.
#[derive(Debug)]
pub struct PollTask<P: Pve> {
    client: HubClient,
    identity: HostIdentity,
    journal: JournalHandle,
    pve: Arc<P>,
    desired: watch::Sender<Option<Arc<DesiredSnapshot>>>,
    reconcile: ReconcileHandle,
    runner: Arc<JobRunner<P>>,
    results: mpsc::UnboundedReceiver<JobResult>,
    settings: PollSettings,
    status: watch::Sender<HubStatus>,
    /// Where the jobs the hub hands over run (a job task that panics stops the agent, whose
    /// restart resumes the job from the journal).
    tasks: Supervisor,
    /// Where the report's host facts come from.
    sources: ReportSources,
    /// Cancelled when the agent is told to stop (not when it fails): the loop then announces
    /// the planned stop in one last poll.
    planned_stop: Option<CancellationToken>,
    /// The pins the hub is trusted by, when pins alone decide: the hub's announced keys go
    /// there, and the hub is told which the agent holds.
    hub_pins: Option<HubPins>,
}

/// What the loop keeps between polls besides its parts.
struct LoopState {
    pending_results: Vec<JobResult>,
    backoff: Duration,
    /// Whether the current run of over-large answers was audited.
    too_large_audited: bool,
}

impl<P: Pve + 'static> PollTask<P> {
    /// A hub loop; `desired` is the sender the reconciler watches.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: HubClient,
        identity: HostIdentity,
        journal: JournalHandle,
        pve: Arc<P>,
        desired: watch::Sender<Option<Arc<DesiredSnapshot>>>,
        reconcile: ReconcileHandle,
        runner: Arc<JobRunner<P>>,
        results: mpsc::UnboundedReceiver<JobResult>,
        settings: PollSettings,
        tasks: Supervisor,
        sources: ReportSources,
    ) -> (Self, watch::Receiver<HubStatus>) {
        let (status, status_rx) = watch::channel(HubStatus::default());
        (
            Self {
                client,
                identity,
                journal,
                pve,
                desired,
                reconcile,
                runner,
                results,
                settings,
                status,
                tasks,
                sources,
                planned_stop: None,
                hub_pins: None,
            },
            status_rx,
        )
    }

    /// Announces a planned stop to the hub when the loop ends with `stop` cancelled (the
    /// agent's shutdown token: SIGTERM), in one last poll bounded by [`STOP_POLL_TIMEOUT`].
    #[must_use]
    pub fn with_planned_stop(mut self, stop: CancellationToken) -> Self {
        self.planned_stop = Some(stop);
        self
    }

    /// Takes the keys the hub announces into `pins`, and tells the hub which it holds.
    #[must_use]
    pub fn with_hub_pins(mut self, pins: HubPins) -> Self {
        self.hub_pins = Some(pins);
        self
    }

    /// Runs until `cancel`.
    pub async fn run(mut self, cancel: CancellationToken) {
        let pve_version = self.pve.version().await.ok().map(|v| v.version);
        let mut reporter = ReportState::new(pve_version, self.sources.clone());
        let mut storage_facts = self.sources.storage.clone();
        let mut tier_plan = self.sources.tiers.clone();
        let mut health = self.sources.health.clone();
        let mut inbox = JobInbox::new(
            Arc::clone(&self.runner),
            self.journal.clone(),
            self.tasks.clone(),
        );
        let mut intake = DesiredIntake::new(self.journal.clone(), self.desired.clone());
        let mut op_tail = OpTail::new();
        let mut timings = HubTimings::new(self.settings.long_poll);
        let mut state = LoopState {
            pending_results: Vec::new(),
            backoff: self.settings.backoff_initial,
            too_large_audited: false,
        };
        self.load_outbox(&mut state).await;
        let mut reconcile_status = self.reconcile.status();
        let mut backups = self.journal.backups_changed();
        let mut urgent = true;
        'run: loop {
            while let Ok(result) = self.results.try_recv() {
                push_result(&mut state.pending_results, result);
            }
            inbox.drain_handled();
            self.flush_results(&mut state).await;
            let snapshot = reconcile_status.borrow_and_update().clone();
            // Backups recorded from here on are reported by the next poll; so are storage
            // status and tier changes.
            backups.borrow_and_update();
            storage_facts.borrow_and_update();
            tier_plan.borrow_and_update();
            let reported_alarms = health.borrow_and_update().alarms();
            let (report, delta) = reporter.body(&self.journal, &*self.pve, &snapshot).await;
            let operations = op_tail.pending(&self.journal, report.is_some()).await;
            let known_generation = intake.known_generation();
            let request = PollRequest {
                schema: bosun_proto::poll::REQUEST_SCHEMA.to_owned(),
                known_generation,
                applied_generation: applied(&snapshot, known_generation),
                acked_jobs: inbox.acks_for_poll(),
                report,
                delta,
                operations,
                stopping: false,
                hub_pins: self
                    .hub_pins
                    .as_ref()
                    .map(HubPins::to_send)
                    .unwrap_or_default(),
            };
            let wait = if urgent || !state.pending_results.is_empty() {
                Duration::ZERO
            } else {
                timings.long_poll
            };
            let request_id = Uuid::new_v4().to_string();
            let sent_at = Instant::now();
            let outcome = {
                let poll = self.client.poll(
                    self.identity.host_id,
                    &self.identity.host_key,
                    wait,
                    &request,
                    &request_id,
                );
                tokio::pin!(poll);
                let mut report_due: Option<Instant> = None;
                loop {
                    let due = report_due;
                    tokio::select! {
                        result = &mut poll => break Some(result),
                        () = cancel.cancelled() => {
                            // The hub may have recorded the poll: build on what it acknowledged.
                            reporter.abandoned();
                            break 'run;
                        }
                        changed = reconcile_status.changed() => {
                            if changed.is_err() { continue; }
                            let now = reconcile_status.borrow().clone();
                            match reporter.prompted_by(&now, self.settings.report_min_interval, Instant::now()) {
                                Ok(true) => break None,
                                Ok(false) => {}
                                Err(at) => report_due = Some(at),
                            }
                        }
                        // A finished backup is an action: report it at once.
                        Ok(()) = backups.changed() => break None,
                        // So is a storage target lost or back, and a new tier plan.
                        Ok(()) = storage_facts.changed() => break None,
                        Ok(()) = tier_plan.changed() => break None,
                        // And a health condition raised or cleared (not every new reading).
                        Ok(()) = health.changed() => {
                            if health.borrow_and_update().alarms() != reported_alarms {
                                break None;
                            }
                        }
                        Some(result) = self.results.recv() => {
                            push_result(&mut state.pending_results, result);
                            break None;
                        }
                        Some(_) = inbox.handled() => break None,
                        () = async { match due { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => break None,
                    }
                }
            };
            let Some(result) = outcome else {
                // Abandon the held poll: something to report now.
                reporter.abandoned();
                op_tail.unanswered();
                self.status.send_modify(|s| s.prompted_reports += 1);
                urgent = true;
                continue;
            };
            urgent = false;
            match result {
                Ok(response) => {
                    let (reconnected, approved) = {
                        let s = self.status.borrow();
                        (s.failures > 0, s.link == HubLink::PendingApproval)
                    };
                    let full = request.report.is_some();
                    self.status.send_modify(|s| {
                        s.link = HubLink::Connected;
                        s.connected = true;
                        s.polls += 1;
                        s.failures = 0;
                        if full {
                            s.full_reports += 1;
                        } else {
                            s.delta_reports += 1;
                        }
                    });
                    if approved {
                        tracing::info!(%request_id, host_id = %self.identity.host_id, "the hub approved this host; polling normally");
                        urgent = true;
                    } else if reconnected {
                        tracing::info!(%request_id, "hub reachable again");
                        // A full report: every audit entry past what the hub acknowledged.
                        urgent = true;
                    }
                    state.backoff = self.settings.backoff_initial;
                    state.too_large_audited = false;
                    inbox.acks_delivered();
                    let held = wait > Duration::ZERO;
                    if response.schema == bosun_proto::poll::RESPONSE_SCHEMA {
                        op_tail.answered();
                        if reporter.answered(
                            sent_at,
                            &snapshot,
                            response.report_seq,
                            response.full_report,
                            response.audit_acked_seq,
                        ) {
                            tracing::info!(%request_id, "hub asked for a full report");
                            urgent = true;
                        }
                        if let Some(seq) = response.audit_acked_seq {
                            // Audit retention never prunes past what the hub acknowledged.
                            self.journal.record_audit_ack(seq).await;
                        }
                        timings
                            .apply(&response.config, &self.journal, &request_id)
                            .await;
                        if let Some(update) = self.runner.update_context() {
                            if response.config.validate().is_ok() {
                                update.set_window(response.config.update_window.clone());
                            }
                            // The health gate counts this poll for the binary on trial.
                            let at_ms = jiff::Timestamp::now().as_millisecond();
                            update.poll_succeeded(&self.journal, at_ms).await;
                        }
                        if let Some(body) = response.desired {
                            intake
                                .take(
                                    response.generation,
                                    body,
                                    response.correlation_id,
                                    &request_id,
                                )
                                .await;
                        }
                        inbox.take(response.jobs, &request_id).await;
                        if let Some(pins) = &self.hub_pins {
                            pins.answered(&request.hub_pins);
                            take_announced(pins, &response.hub_pins, &request_id);
                        }
                    } else {
                        tracing::warn!(%request_id, schema = %response.schema, "hub answered with an unknown schema; ignored");
                        reporter.failed();
                        op_tail.unanswered();
                    }
                    if !held && !urgent && timings.long_poll.is_zero() {
                        tokio::select! {
                            () = cancel.cancelled() => break 'run,
                            () = tokio::time::sleep(timings.pause()) => {}
                        }
                    }
                }
                Err(e) if e.is_pending_approval() => {
                    reporter.failed();
                    op_tail.unanswered();
                    if !self.awaiting_approval(&request_id, &cancel).await {
                        break 'run;
                    }
                    urgent = true;
                }
                Err(e) => {
                    reporter.failed();
                    op_tail.unanswered();
                    let failures = self.status.borrow().failures + 1;
                    let link = if e.is_unauthorized() {
                        HubLink::Refused
                    } else {
                        HubLink::Unreachable
                    };
                    self.status.send_modify(|s| {
                        s.link = link;
                        s.connected = false;
                        s.failures = failures;
                    });
                    let pause = jitter(state.backoff);
                    let chain = error_chain(&e);
                    if e.is_unauthorized() {
                        tracing::error!(%request_id, error = %chain, "the hub refused this host's key; an operator must act");
                    } else if chain.contains(bosun_pin::UNTRUSTED_KEY) {
                        // Not a network fault: the hub presents a key this agent was never
                        // told of (its key was rotated while this host was away, or another
                        // server answers at the hub's address). Nothing trusts it silently.
                        tracing::error!(%request_id, failures, pins = ?self.hub_pins.as_ref().map(HubPins::trusted), error = %chain, "the hub presents a key this agent does not trust; if the hub's key was rotated while this host was offline, enroll this host again");
                    } else {
                        tracing::warn!(%request_id, failures, retry_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX), error = %chain, "hub poll failed; reconciling from the cached desired state");
                    }
                    if let HubClientError::TooLarge { limit, .. } = &e
                        && !state.too_large_audited
                    {
                        state.too_large_audited = true;
                        let mut event = AuditEvent::new("hub.answer_too_large");
                        event.request_id = Some(request_id.clone());
                        event.detail = json!({ "limit_bytes": limit });
                        if let Err(e) = self.journal.append_audit(event).await {
                            tracing::warn!(error = %error_chain(&e), "could not audit the over-large answer");
                        }
                    }
                    state.backoff = (state.backoff * 2).min(self.settings.backoff_max);
                    tokio::select! {
                        () = cancel.cancelled() => break 'run,
                        () = tokio::time::sleep(pause) => {}
                    }
                    urgent = true;
                }
            }
        }
        let announced = if self
            .planned_stop
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            let known_generation = intake.known_generation();
            let acked_jobs = inbox.acks_for_poll();
            self.announce_stop(
                &mut reporter,
                &reconcile_status,
                known_generation,
                acked_jobs,
            )
            .await
        } else {
            false
        };
        self.status.send_modify(|s| {
            s.link = HubLink::Stopped;
            s.connected = false;
            s.stop_announced = announced;
        });
    }

    /// The hub refused the poll: the host waits for an operator's approval. Says so once,
    /// then waits `pending_interval` (3/4 to 1 × it) before the next poll. Gives `false` when
    /// the agent is stopping meanwhile.
    async fn awaiting_approval(&self, request_id: &str, cancel: &CancellationToken) -> bool {
        let newly = self.status.borrow().link != HubLink::PendingApproval;
        self.status.send_modify(|s| {
            s.link = HubLink::PendingApproval;
            s.connected = false;
            s.failures = s.failures.saturating_add(1);
        });
        let interval = self.settings.pending_interval;
        let host_id = self.identity.host_id;
        if newly {
            tracing::warn!(%request_id, %host_id, every_s = interval.as_secs(), "the hub holds this host until an operator approves it (bosunctl hosts approve HOST_ID); asking again slowly until then");
        } else {
            tracing::debug!(%request_id, %host_id, "still waiting for the hub's approval");
        }
        let ms = u64::try_from(interval.as_millis())
            .unwrap_or(u64::MAX)
            .max(4);
        let pause = Duration::from_millis(rand::rng().random_range(ms / 4 * 3..=ms));
        tokio::select! {
            () = cancel.cancelled() => false,
            () = tokio::time::sleep(pause) => true,
        }
    }

    /// The last poll before a planned stop: says `stopping`, asks for no long-poll and acts on
    /// nothing in the answer (what it carries comes again after the restart). Bounded by
    /// [`STOP_POLL_TIMEOUT`], from building the report to the answer. Gives whether the hub
    /// answered it; a hub that holds the host for approval, or refuses its key, is not asked.
    async fn announce_stop(
        &self,
        reporter: &mut ReportState,
        reconcile: &watch::Receiver<crate::reconcile::reconcile_task::ReconcileStatus>,
        known_generation: u64,
        acked_jobs: Vec<Uuid>,
    ) -> bool {
        let link = self.status.borrow().link;
        if matches!(link, HubLink::PendingApproval | HubLink::Refused) {
            return false;
        }
        let request_id = Uuid::new_v4().to_string();
        let exchange = async {
            let snapshot = reconcile.borrow().clone();
            let (report, delta) = reporter.body(&self.journal, &*self.pve, &snapshot).await;
            let request = PollRequest {
                schema: bosun_proto::poll::REQUEST_SCHEMA.to_owned(),
                known_generation,
                applied_generation: applied(&snapshot, known_generation),
                acked_jobs,
                report,
                delta,
                operations: Vec::new(),
                stopping: true,
                hub_pins: Vec::new(),
            };
            self.client
                .poll(
                    self.identity.host_id,
                    &self.identity.host_key,
                    Duration::ZERO,
                    &request,
                    &request_id,
                )
                .await
        };
        match tokio::time::timeout(STOP_POLL_TIMEOUT, exchange).await {
            Ok(Ok(response)) => stop_answered(&request_id, &response),
            Ok(Err(e)) => {
                tracing::warn!(%request_id, error = %error_chain(&e), "could not tell the hub this is a planned stop; it pages the host once its grace window passes");
                false
            }
            Err(_) => {
                tracing::warn!(%request_id, timeout_ms = u64::try_from(STOP_POLL_TIMEOUT.as_millis()).unwrap_or(u64::MAX), "the hub did not answer the planned-stop poll in time; it pages the host once its grace window passes");
                false
            }
        }
    }

    async fn flush_results(&self, state: &mut LoopState) {
        let mut keep = Vec::new();
        for result in std::mem::take(&mut state.pending_results) {
            match self
                .client
                .job_result(self.identity.host_id, &self.identity.host_key, &result)
                .await
            {
                Ok(()) => {
                    tracing::info!(job_id = %result.job_id, outcome = ?result.outcome, "job result reported");
                    self.delivered(result.job_id).await;
                }
                Err(HubClientError::Status { status, body, .. })
                    if (400..500).contains(&status)
                        && status != 401
                        && status != 403
                        && status != 429 =>
                {
                    tracing::warn!(job_id = %result.job_id, status, body = %body, "hub refused a job result; dropped");
                    self.delivered(result.job_id).await;
                }
                Err(e) => {
                    tracing::info!(job_id = %result.job_id, error = %error_chain(&e), "job result not delivered yet");
                    keep.push(result);
                }
            }
        }
        state.pending_results = keep;
    }

    /// Results a crash left undelivered: they go out before the first poll.
    async fn load_outbox(&self, state: &mut LoopState) {
        match self.journal.undelivered_job_results().await {
            Ok(pending) => {
                for entry in pending {
                    match serde_json::from_str::<JobResult>(&entry.body) {
                        Ok(result) => {
                            tracing::info!(job_id = %entry.job_id, "job result from before the restart queued again");
                            push_result(&mut state.pending_results, result);
                        }
                        Err(e) => {
                            tracing::warn!(job_id = %entry.job_id, error = %e, "queued job result unreadable; dropped");
                            if let Ok(id) = Uuid::parse_str(&entry.job_id) {
                                self.delivered(id).await;
                            }
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "job-result outbox unreadable");
            }
        }
    }

    async fn delivered(&self, job_id: Uuid) {
        if let Err(e) = self
            .journal
            .mark_job_result_delivered(job_id.to_string())
            .await
        {
            tracing::warn!(%job_id, error = %error_chain(&e), "could not mark a job result delivered; it may be sent again");
        }
    }
}

/// The generation to report applied: past what the agent holds, the applied generation
/// belongs to the document before a hub reset, so nothing of the current one is applied yet.
fn applied(
    snapshot: &crate::reconcile::reconcile_task::ReconcileStatus,
    known_generation: u64,
) -> u64 {
    if snapshot.applied_generation > known_generation {
        0
    } else {
        snapshot.applied_generation
    }
}

/// Whether the hub's answer to the planned-stop poll is one (its schema known).
fn stop_answered(request_id: &str, response: &RawPollResponse) -> bool {
    if response.schema == bosun_proto::poll::RESPONSE_SCHEMA {
        tracing::info!(%request_id, "the hub knows this is a planned stop");
        true
    } else {
        tracing::warn!(%request_id, schema = %response.schema, "hub answered the planned-stop poll with an unknown schema");
        false
    }
}

/// Queues a result once: the outbox and the runner may both hand over the same job's.
fn push_result(pending: &mut Vec<JobResult>, result: JobResult) {
    if !pending.iter().any(|r| r.job_id == result.job_id) {
        pending.push(result);
    }
}

/// A pause between `base / 2` and `base`.
fn jitter(base: Duration) -> Duration {
    let ms = u64::try_from(base.as_millis()).unwrap_or(u64::MAX).max(2);
    Duration::from_millis(rand::rng().random_range(ms / 2..=ms))
}

/// Takes the keys a poll answer announced, saying so (or why not) in the log.
fn take_announced(pins: &HubPins, announced: &[String], request_id: &str) {
    match pins.adopt(announced) {
        Ok(true) => tracing::info!(
            %request_id,
            pins = ?pins.trusted(),
            "the hub announced its keys; trusting them from the next connection on"
        ),
        Ok(false) => {}
        Err(err) => tracing::warn!(
            %request_id,
            error = %bosun_errchain::error_chain(&err),
            "the hub's announced keys were not taken; trusting the keys as before"
        ),
    }
}
