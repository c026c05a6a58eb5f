//! The hub loop: long-poll the hub, hand desired state to the reconciler and
//! signed jobs to the job runner, and report.
//!
//! ```text
//!            ┌──────── PollTask ────────┐  watch<DesiredSnapshot>  ┌──────────────┐
//!  hub ◄─────┤ poll (long) / job results├─────────────────────────►│ReconcileTask │
//!            │  backoff + jitter        │◄──── watch<Status> ──────┤              │
//!            └──┬──────────────▲────────┘                          └──────────────┘
//!               │ spawn         │ mpsc<JobResult>, mpsc<acked job id>
//!               ▼               │
//!            JobRunner::handle ─┘
//! ```
//!
//! Reporting follows the heartbeat rules: every poll is a heartbeat; a report
//! goes out at once after an acting reconcile pass or a finished backup (the
//! journal signals each recorded backup outcome), otherwise at most one per
//! `report_min_interval` when the observed state changes. A poll carries only
//! what changed since the report the hub acknowledged, and a full report after
//! start, after a reconnect and whenever the hub asks (see [`super::report`]);
//! audit entries are sent only past the sequence the hub acknowledged.
//!
//! Job results go through the journal's outbox: a result stays queued until
//! the hub acknowledged it, and results left undelivered by a crash go out
//! before the first poll after the restart.
//!
//! Desired state is cached in the journal before it is acted on; the cache is
//! loaded at start, so the agent keeps reconciling while the hub is away.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bosun_proto::desired::DesiredState;
use bosun_proto::job::{JobResult, SignedJob};
use bosun_proto::poll::PollRequest;
use bosun_proto::report::{AuditEntry as WireAudit, HostMetrics, StateReport, Versions};
use parking_lot::Mutex;
use rand::Rng;
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::client::{HubClient, HubClientError, RawPollResponse};
use super::identity::HostIdentity;
use super::report::{ReportBody, Reporter};
use crate::config::PollSettings;
use crate::jobs::check::peek_job_id;
use crate::jobs::runner::JobRunner;
use crate::journal::{AuditEvent, JournalHandle};
use crate::pve::Pve;
use crate::reconcile::reconcile_task::{DesiredSnapshot, ReconcileHandle, ReconcileStatus};
use crate::reconcile::steps::error_chain;

/// What the hub loop tells the rest of the agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HubStatus {
    /// Whether the last poll succeeded.
    pub connected: bool,
    /// Successful polls.
    pub polls: u64,
    /// Failed polls in a row.
    pub failures: u32,
    /// Reports sent because the observed state changed or an action ran.
    pub prompted_reports: u64,
    /// Answered polls that carried a full report.
    pub full_reports: u64,
    /// Answered polls that carried a delta.
    pub delta_reports: u64,
}

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
    tracker: TaskTracker,
}

struct LoopState {
    known_generation: u64,
    audit_acked: u64,
    long_poll: Duration,
    poll_interval: Duration,
    acked: BTreeSet<Uuid>,
    /// Jobs whose ack the hub received.
    confirmed: HashSet<Uuid>,
    /// Confirmed jobs the hub sent again, checked (and refused) once.
    replay_checked: HashSet<Uuid>,
    in_flight: Arc<Mutex<HashSet<Uuid>>>,
    refused_unreadable: HashSet<String>,
    pending_results: Vec<JobResult>,
    last_report: Option<Instant>,
    reported_acting: u64,
    reported_guests: Vec<bosun_proto::report::GuestReport>,
    backoff: Duration,
    pve_version: Option<String>,
    reporter: Reporter,
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
        tracker: TaskTracker,
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
                tracker,
            },
            status_rx,
        )
    }

    /// Runs until `cancel`.
    pub async fn run(mut self, cancel: CancellationToken) {
        let known_generation = self.desired.borrow().as_ref().map_or(0, |d| d.generation);
        let pve_version = self.pve.version().await.ok().map(|v| v.version);
        let mut state = LoopState {
            known_generation,
            audit_acked: 0,
            long_poll: self.settings.long_poll,
            poll_interval: Duration::from_secs(30),
            acked: BTreeSet::new(),
            confirmed: HashSet::new(),
            replay_checked: HashSet::new(),
            in_flight: Arc::default(),
            refused_unreadable: HashSet::new(),
            pending_results: Vec::new(),
            last_report: None,
            reported_acting: 0,
            reported_guests: Vec::new(),
            backoff: self.settings.backoff_initial,
            pve_version,
            reporter: Reporter::new(
                u64::try_from(jiff::Timestamp::now().as_millisecond()).unwrap_or(1),
            ),
        };
        self.load_outbox(&mut state).await;
        let (ack_tx, mut ack_rx) = mpsc::unbounded_channel::<Uuid>();
        let mut reconcile_status = self.reconcile.status();
        let mut backups = self.journal.backups_changed();
        let mut urgent = true;
        loop {
            while let Ok(result) = self.results.try_recv() {
                push_result(&mut state.pending_results, result);
            }
            while let Ok(job_id) = ack_rx.try_recv() {
                state.acked.insert(job_id);
            }
            self.flush_results(&mut state).await;
            let snapshot = reconcile_status.borrow_and_update().clone();
            // Backups recorded from here on are reported by the next poll.
            backups.borrow_and_update();
            let request = self.build_request(&mut state, &snapshot).await;
            let wait = if urgent || !state.pending_results.is_empty() {
                Duration::ZERO
            } else {
                state.long_poll
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
                        () = cancel.cancelled() => return,
                        changed = reconcile_status.changed() => {
                            if changed.is_err() { continue; }
                            let now = reconcile_status.borrow().clone();
                            if now.acting_passes > state.reported_acting {
                                break None;
                            }
                            if now.guests != state.reported_guests {
                                let next = state.last_report.map_or(Instant::now(), |t| t + self.settings.report_min_interval);
                                if next <= Instant::now() { break None; }
                                report_due = Some(next);
                            }
                        }
                        // A finished backup is an action: report it at once.
                        Ok(()) = backups.changed() => break None,
                        Some(result) = self.results.recv() => {
                            push_result(&mut state.pending_results, result);
                            break None;
                        }
                        Some(job_id) = ack_rx.recv() => {
                            state.acked.insert(job_id);
                            break None;
                        }
                        () = async { match due { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => break None,
                    }
                }
            };
            let Some(result) = outcome else {
                // Abandon the held poll: something to report now.
                state.reporter.abandoned();
                self.status.send_modify(|s| s.prompted_reports += 1);
                urgent = true;
                continue;
            };
            urgent = false;
            match result {
                Ok(response) => {
                    state.last_report = Some(sent_at);
                    state.reported_acting = snapshot.acting_passes;
                    state.reported_guests = snapshot.guests.clone();
                    let reconnected = self.status.borrow().failures > 0;
                    let full = request.report.is_some();
                    self.status.send_modify(|s| {
                        s.connected = true;
                        s.polls += 1;
                        s.failures = 0;
                        if full {
                            s.full_reports += 1;
                        } else {
                            s.delta_reports += 1;
                        }
                    });
                    if reconnected {
                        tracing::info!(%request_id, "hub reachable again");
                        // A full report: every audit entry past what the hub acknowledged.
                        urgent = true;
                    }
                    state.backoff = self.settings.backoff_initial;
                    for job_id in &request.acked_jobs {
                        state.acked.remove(job_id);
                        state.confirmed.insert(*job_id);
                    }
                    if state
                        .reporter
                        .answered(response.report_seq, response.full_report)
                    {
                        tracing::info!(%request_id, "hub asked for a full report");
                        urgent = true;
                    }
                    let held = wait > Duration::ZERO;
                    self.handle_response(&mut state, response, &request_id, &ack_tx)
                        .await;
                    if !held && !urgent && state.long_poll.is_zero() {
                        tokio::select! {
                            () = cancel.cancelled() => return,
                            () = tokio::time::sleep(state.poll_interval) => {}
                        }
                    }
                }
                Err(e) => {
                    state.reporter.failed();
                    let failures = self.status.borrow().failures + 1;
                    self.status.send_modify(|s| {
                        s.connected = false;
                        s.failures = failures;
                    });
                    let pause = jitter(state.backoff);
                    if e.is_unauthorized() {
                        tracing::error!(%request_id, error = %error_chain(&e), "the hub refused this host's key; an operator must act");
                    } else {
                        tracing::warn!(%request_id, failures, retry_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX), error = %error_chain(&e), "hub poll failed; reconciling from the cached desired state");
                    }
                    state.backoff = (state.backoff * 2).min(self.settings.backoff_max);
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(pause) => {}
                    }
                    urgent = true;
                }
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

    async fn build_request(&self, state: &mut LoopState, status: &ReconcileStatus) -> PollRequest {
        let audit = match self.journal.audit_since(state.audit_acked, 500).await {
            Ok(entries) => entries
                .into_iter()
                .map(|e| WireAudit {
                    seq: e.seq,
                    at: e.at,
                    action: e.event.event.clone(),
                    detail: json!({
                        "op_id": e.event.op_id.map(|o| o.to_string()),
                        "job_id": e.event.job_id,
                        "guest_id": e.event.guest_id,
                        "vmid": e.event.vmid,
                        "request_id": e.event.request_id,
                        "detail": e.event.detail,
                        "hash": hex::encode(e.hash),
                    }),
                })
                .collect(),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "audit tail unreadable; report sent without it");
                Vec::new()
            }
        };
        let host = match self.pve.nodes().await {
            Ok(nodes) => nodes
                .into_iter()
                .find(|n| n.node == self.pve.node().as_str())
                .map(|n| HostMetrics {
                    cpu_count: n.maxcpu.and_then(|c| u32::try_from(c).ok()).unwrap_or(0),
                    cpu_usage: n.cpu.unwrap_or(0.0).clamp(0.0, 1.0),
                    memory_total_mib: n.maxmem.unwrap_or(0) / (1024 * 1024),
                    memory_used_mib: n.mem.unwrap_or(0) / (1024 * 1024),
                    ..HostMetrics::default()
                })
                .unwrap_or_default(),
            Err(_) => HostMetrics::default(),
        };
        let current = StateReport {
            schema: bosun_proto::report::SCHEMA.to_owned(),
            seq: 0,
            host,
            guests: status.guests.clone(),
            storage: Vec::new(),
            last_backups: super::report::last_backups(&self.journal).await,
            last_restore_test: None,
            tunnel: None,
            versions: Versions {
                agent: env!("CARGO_PKG_VERSION").to_owned(),
                controller: None,
                pve: state.pve_version.clone(),
            },
            audit,
        };
        let (report, delta) = match state.reporter.body(current) {
            ReportBody::Full(report) => (Some(report), None),
            ReportBody::Delta(delta) => (None, Some(delta)),
        };
        PollRequest {
            schema: bosun_proto::poll::REQUEST_SCHEMA.to_owned(),
            known_generation: state.known_generation,
            applied_generation: status.applied_generation.min(state.known_generation),
            acked_jobs: state.acked.iter().copied().collect(),
            report,
            delta,
        }
    }

    async fn handle_response(
        &self,
        state: &mut LoopState,
        response: RawPollResponse,
        request_id: &str,
        ack_tx: &mpsc::UnboundedSender<Uuid>,
    ) {
        if response.schema != bosun_proto::poll::RESPONSE_SCHEMA {
            tracing::warn!(%request_id, schema = %response.schema, "hub answered with an unknown schema; ignored");
            return;
        }
        if response.config.validate().is_ok() {
            state.long_poll = Duration::from_secs(u64::from(response.config.long_poll_seconds));
            state.poll_interval =
                Duration::from_secs(u64::from(response.config.poll_interval_seconds));
        }
        if let Some(seq) = response.audit_acked_seq {
            state.audit_acked = seq;
            // Audit rows up to `seq` may now be pruned (retention bound).
            self.journal.record_audit_ack(seq).await;
        }
        if let Some(body) = response.desired {
            self.take_desired(state, response.generation, body, request_id)
                .await;
        }
        for raw in response.jobs {
            self.take_job(state, raw, request_id, ack_tx).await;
        }
    }

    async fn take_desired(
        &self,
        state: &mut LoopState,
        generation: u64,
        body: serde_json::Value,
        request_id: &str,
    ) {
        // Seen, valid or not: asking again would only bring the same document.
        state.known_generation = generation;
        let parsed = serde_json::from_value::<DesiredState>(body.clone())
            .map_err(|e| e.to_string())
            .and_then(|d| d.validate().map(|()| d).map_err(|e| e.to_string()));
        let desired = match parsed {
            Ok(d) => d,
            Err(reason) => {
                tracing::warn!(%request_id, generation, reason = %reason, "hub sent an invalid desired state; keeping the previous one");
                let mut event = AuditEvent::new("desired.refused");
                event.request_id = Some(request_id.to_owned());
                event.detail = json!({ "generation": generation, "reason": reason });
                let _ = self.journal.append_audit(event).await;
                return;
            }
        };
        match self
            .journal
            .cache_desired_state(generation, body.to_string())
            .await
        {
            Ok(_) => {}
            Err(e) => {
                tracing::error!(%request_id, error = %error_chain(&e), "could not cache the desired state; not acting on it");
                return;
            }
        }
        tracing::info!(%request_id, generation, guests = desired.guests.len(), "new desired state");
        self.desired.send_replace(Some(Arc::new(DesiredSnapshot {
            generation,
            state: desired,
            request_id: Some(request_id.to_owned()),
        })));
    }

    async fn take_job(
        &self,
        state: &mut LoopState,
        raw: serde_json::Value,
        request_id: &str,
        ack_tx: &mpsc::UnboundedSender<Uuid>,
    ) {
        let signed = match serde_json::from_value::<SignedJob>(raw.clone()) {
            Ok(s) => s,
            Err(e) => {
                let key = raw.to_string();
                if state.refused_unreadable.insert(key) {
                    let mut event = AuditEvent::new("job.refused");
                    event.request_id = Some(request_id.to_owned());
                    event.detail = json!({ "code": "malformed", "reason": e.to_string() });
                    let _ = self.journal.append_audit(event).await;
                }
                return;
            }
        };
        let job_id = peek_job_id(&signed);
        tracing::debug!(%request_id, job_id = ?job_id, "signed job received");
        if let Some(id) = job_id {
            // A job the hub sends again after its ack is a replay: run it
            // through the checks once more (the journal refuses it, and the
            // refusal is audited), then ignore further copies.
            if state.acked.contains(&id) || state.replay_checked.contains(&id) {
                return;
            }
            if state.confirmed.contains(&id) {
                state.replay_checked.insert(id);
            }
            if !state.in_flight.lock().insert(id) {
                return;
            }
        } else if !state.refused_unreadable.insert(signed.document.clone()) {
            return;
        }
        let runner = Arc::clone(&self.runner);
        let in_flight = Arc::clone(&state.in_flight);
        let ack_tx = ack_tx.clone();
        let request_id = request_id.to_owned();
        self.tracker.spawn(async move {
            runner.handle(&signed, Some(request_id)).await;
            if let Some(id) = job_id {
                in_flight.lock().remove(&id);
                let _ = ack_tx.send(id);
            }
        });
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
