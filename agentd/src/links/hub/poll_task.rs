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
//! [`HubLink::PendingApproval`] for `bosun-agentctl status`) and asks again every
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
//!
//! A round of the loop, in three parts: [`PollTask::run`] builds the poll (`Round` holds what
//! the loop keeps between polls) and waits for its answer or for something that must be
//! reported at once (`wait_or_prompt`, each `select!` arm with its cancel-safety note);
//! `answer.rs` acts on the answer, or on the failure; `outbox.rs` delivers job results.

mod answer;
mod outbox;
mod pin_intake;

use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::job::JobResult;
use bosun_proto::poll::PollRequest;
use bosun_pve::Pve;
use rand::Rng;
use secrecy::SecretString;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::desired_intake::DesiredIntake;
use super::inbox::JobInbox;
pub use super::link::{HubLink, HubStatus};
use super::op_tail::OpTail;
use super::reporter::{ReportSources, ReportState};
use super::timing::HubTimings;
use crate::clock::SharedClock;
use crate::config::PollSettings;
use crate::data::desired::DesiredSnapshot;
use crate::guests::reconcile::reconcile_task::{ReconcileHandle, ReconcileStatus};
use crate::health::HealthFacts;
use crate::links::hub_client::client::{HubClient, HubClientError, RawPollResponse};
use crate::links::hub_client::identity::HostIdentity;
use crate::links::hub_client::pins::HubPins;
use crate::ops::jobs::runner::JobRunner;
use crate::ops::journal::JournalHandle;
use crate::runtime::supervisor::Supervisor;
use crate::runtime::watchdog::Progress;

/// The longest the last poll of a planned stop may take, from building its report to the
/// hub's answer. systemd gives the whole stop `TimeoutStopSec=30s`
/// (`systemd/bosun-agentd.service`); the rest of the shutdown runs meanwhile.
pub const STOP_POLL_TIMEOUT: Duration = Duration::from_secs(5);

/// What the hub loop is built from.
#[derive(Debug)]
pub struct PollParts<P: Pve> {
    /// The hub, over its pinned channel.
    pub client: HubClient,
    /// Who this host is at the hub, and its key.
    pub identity: HostIdentity,
    /// The journal (desired-state cache, job-result outbox, audit).
    pub journal: JournalHandle,
    /// Proxmox, for the version the report names.
    pub pve: Arc<P>,
    /// Where desired state goes: the reconciler watches it.
    pub desired: watch::Sender<Option<Arc<DesiredSnapshot>>>,
    /// The reconciler, whose status the reports follow.
    pub reconcile: ReconcileHandle,
    /// Where signed jobs are checked and run.
    pub runner: Arc<JobRunner<P>>,
    /// Finished jobs' results.
    pub results: mpsc::UnboundedReceiver<JobResult>,
    /// Timings and backoff.
    pub settings: PollSettings,
    /// Where the jobs the hub hands over run (a job task that panics stops the agent, whose
    /// restart resumes the job from the journal).
    pub tasks: Supervisor,
    /// Where the report's host facts come from.
    pub sources: ReportSources,
    /// The agent's clock (signature validity, the host key's rotation pace).
    pub clock: SharedClock,
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
    tasks: Supervisor,
    sources: ReportSources,
    /// Cancelled when the agent is told to stop (not when it fails): the loop then announces
    /// the planned stop in one last poll.
    planned_stop: Option<CancellationToken>,
    /// The pins the hub is trusted by, when pins alone decide: the operator's signed pin set
    /// goes there, and the hub is told which the agent holds.
    hub_pins: Option<HubPins>,
    clock: SharedClock,
    /// Beaten as the loop runs: at each round and through its waits (the watchdog's).
    progress: Progress,
}

/// What the loop keeps between polls: what it reports from and routes to, and how the link
/// is doing.
struct Round<P: Pve> {
    reporter: ReportState,
    op_tail: OpTail,
    inbox: JobInbox<P>,
    intake: DesiredIntake,
    timings: HubTimings,
    watches: Watches,
    pending_results: Vec<JobResult>,
    backoff: Duration,
    /// Whether the current run of over-large answers was audited.
    too_large_audited: bool,
    /// Whether the other host key was tried since the last answered poll.
    tried_other_key: bool,
    /// The next poll goes at once, without a long-poll.
    urgent: bool,
}

/// What prompts a report before the held poll's answer.
struct Watches {
    reconcile: watch::Receiver<ReconcileStatus>,
    backups: watch::Receiver<u64>,
    storage: watch::Receiver<crate::data::storage::StorageFacts>,
    tiers: watch::Receiver<crate::data::backup::tiers::TierPlan>,
    health: watch::Receiver<HealthFacts>,
}

/// A poll on its way, and what its answer is judged against.
struct Sent {
    request: PollRequest,
    /// The host key it presented.
    presented: SecretString,
    request_id: String,
    sent_at: Instant,
    wait: Duration,
    snapshot: ReconcileStatus,
    /// The health conditions raised when the poll was built.
    alarms: crate::health::Alarms,
}

/// How waiting for an answer ended.
enum Waited {
    /// The answer, or why there is none (boxed: an answer is large beside the other arms).
    Answered(Box<Result<RawPollResponse, HubClientError>>),
    /// Something must be reported now: the held poll is abandoned.
    Prompted,
    /// The agent is stopping.
    Cancelled,
}

/// Whether the loop goes on after a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Poll,
    Stop,
}

impl<P: Pve + bosun_pve::PveQemu + 'static> PollTask<P> {
    /// A hub loop.
    pub fn new(parts: PollParts<P>) -> (Self, watch::Receiver<HubStatus>) {
        let (status, status_rx) = watch::channel(HubStatus::default());
        let PollParts {
            client,
            identity,
            journal,
            pve,
            desired,
            reconcile,
            runner,
            results,
            settings,
            tasks,
            sources,
            clock,
        } = parts;
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
                clock,
                progress: Progress::default(),
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

    /// Beats `progress` as the loop runs, for the systemd watchdog: at each round and all
    /// through its waits for the hub and its pauses, so an unreachable hub is not a stall.
    #[must_use]
    pub fn with_progress(mut self, progress: Progress) -> Self {
        self.progress = progress;
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
        let mut round = self.first_round().await;
        let progress = self.progress.clone();
        loop {
            progress.beat();
            // The crash suites' wedge: the loop stops here for good, as a round stuck on an
            // await that never ends would (the watchdog suite).
            crate::failpoint::stall_at("poll.round.stall").await;
            let sent = self.prepare(&mut round).await;
            let waited = progress.waiting(self.wait_or_prompt(&mut round, &sent, &cancel));
            let next = match waited.await {
                Waited::Cancelled => Next::Stop,
                Waited::Prompted => {
                    // Abandon the held poll: something to report now.
                    round.reporter.abandoned();
                    round.op_tail.unanswered();
                    self.status.send_modify(|s| s.prompted_reports += 1);
                    round.urgent = true;
                    Next::Poll
                }
                Waited::Answered(result) => {
                    round.urgent = false;
                    match *result {
                        Ok(response) => self.on_answer(&mut round, &sent, response, &cancel).await,
                        Err(e) => self.on_failure(&mut round, &sent, e, &cancel).await,
                    }
                }
            };
            if next == Next::Stop {
                break;
            }
        }
        let announced = if self
            .planned_stop
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            self.announce_stop(&mut round).await
        } else {
            false
        };
        self.status.send_modify(|s| {
            s.link = HubLink::Stopped;
            s.connected = false;
            s.stop_announced = announced;
        });
    }

    /// The loop's state before its first poll, with the job results a crash left undelivered
    /// queued.
    async fn first_round(&mut self) -> Round<P> {
        let pve_version = self.pve.version().await.ok().map(|v| v.version);
        let mut round = Round {
            reporter: ReportState::new(pve_version, self.sources.clone()),
            op_tail: OpTail::new(),
            inbox: JobInbox::new(
                Arc::clone(&self.runner),
                self.journal.clone(),
                self.tasks.clone(),
            ),
            intake: DesiredIntake::new(self.journal.clone(), self.desired.clone()),
            timings: HubTimings::new(self.settings.long_poll),
            watches: Watches {
                reconcile: self.reconcile.status(),
                backups: self.journal.backups_changed(),
                storage: self.sources.storage.clone(),
                tiers: self.sources.tiers.clone(),
                health: self.sources.health.clone(),
            },
            pending_results: Vec::new(),
            backoff: self.settings.backoff_initial,
            too_large_audited: false,
            tried_other_key: false,
            urgent: true,
        };
        self.load_outbox(&mut round).await;
        round
    }

    /// Delivers finished jobs' results, then builds the poll: a full report or a delta, the
    /// operations since the last answer, acks, the pins held and a next host key's hash.
    async fn prepare(&mut self, round: &mut Round<P>) -> Sent {
        while let Ok(result) = self.results.try_recv() {
            push_result(&mut round.pending_results, result);
        }
        round.inbox.drain_handled();
        self.flush_results(round).await;
        let watches = &mut round.watches;
        let snapshot = watches.reconcile.borrow_and_update().clone();
        // Backups recorded from here on are reported by the next poll; so are storage status
        // and tier changes.
        watches.backups.borrow_and_update();
        watches.storage.borrow_and_update();
        watches.tiers.borrow_and_update();
        let alarms = watches.health.borrow_and_update().alarms();
        let (report, delta) = round
            .reporter
            .body(&self.journal, &*self.pve, &snapshot)
            .await;
        let operations = round.op_tail.pending(&self.journal, report.is_some()).await;
        let capabilities = round
            .reporter
            .capabilities(&*self.pve, report.is_some())
            .await;
        let known_generation = round.intake.known_generation();
        let request = PollRequest {
            capabilities,
            schema: bosun_proto::poll::REQUEST_SCHEMA.to_owned(),
            known_generation,
            applied_generation: applied(&snapshot, known_generation),
            acked_jobs: round.inbox.acks_for_poll(),
            report,
            delta,
            operations,
            stopping: false,
            hub_pins: self
                .hub_pins
                .as_ref()
                .map(HubPins::to_send)
                .unwrap_or_default(),
            next_host_key_sha256: self.identity.host_key.next_to_send(),
        };
        let wait = if round.urgent || !round.pending_results.is_empty() {
            Duration::ZERO
        } else {
            round.timings.long_poll
        };
        Sent {
            request,
            presented: self.identity.host_key.presented(),
            request_id: Uuid::new_v4().to_string(),
            sent_at: Instant::now(),
            wait,
            snapshot,
            alarms,
        }
    }

    /// Sends the poll and waits for its answer, or for something that must be reported
    /// before a held poll would end (the poll is then dropped: [`Waited::Prompted`]).
    ///
    /// Cancel safety: dropping the poll future abandons the request; the hub may have
    /// recorded it, so the reporter builds on what the hub acknowledged last
    /// (`ReportState::abandoned`), and the operations are sent again. Every other arm is a
    /// `watch::changed`, `mpsc::recv` or sleep, each cancel-safe: nothing it took is lost when
    /// another arm wins.
    async fn wait_or_prompt(
        &mut self,
        round: &mut Round<P>,
        sent: &Sent,
        cancel: &CancellationToken,
    ) -> Waited {
        let poll = self.client.poll(
            self.identity.host_id,
            &sent.presented,
            sent.wait,
            &sent.request,
            &sent.request_id,
        );
        tokio::pin!(poll);
        let watches = &mut round.watches;
        let mut report_due: Option<Instant> = None;
        loop {
            let due = report_due;
            tokio::select! {
                result = &mut poll => return Waited::Answered(Box::new(result)),
                () = cancel.cancelled() => {
                    // The hub may have recorded the poll: build on what it acknowledged.
                    round.reporter.abandoned();
                    return Waited::Cancelled;
                }
                // A reconcile pass that acted is reported at once, a quiet one at most once
                // per `report_min_interval`.
                changed = watches.reconcile.changed() => {
                    if changed.is_err() { continue; }
                    let now = watches.reconcile.borrow().clone();
                    match round.reporter.prompted_by(&now, self.settings.report_min_interval, Instant::now()) {
                        Ok(true) => return Waited::Prompted,
                        Ok(false) => {}
                        Err(at) => report_due = Some(at),
                    }
                }
                // A finished backup is an action: report it at once.
                Ok(()) = watches.backups.changed() => return Waited::Prompted,
                // So is a storage target lost or back, and a new tier plan.
                Ok(()) = watches.storage.changed() => return Waited::Prompted,
                Ok(()) = watches.tiers.changed() => return Waited::Prompted,
                // And a health condition raised or cleared (not every new reading).
                Ok(()) = watches.health.changed() => {
                    if watches.health.borrow_and_update().alarms() != sent.alarms {
                        return Waited::Prompted;
                    }
                }
                // A job's result goes out with the next poll, at once.
                Some(result) = self.results.recv() => {
                    push_result(&mut round.pending_results, result);
                    return Waited::Prompted;
                }
                // So does the ack of a job the runner finished with.
                Some(_) = round.inbox.handled() => return Waited::Prompted,
                () = async { match due { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => return Waited::Prompted,
            }
        }
    }

    /// The last poll before a planned stop: says `stopping`, asks for no long-poll and acts on
    /// nothing in the answer (what it carries comes again after the restart). Bounded by
    /// [`STOP_POLL_TIMEOUT`], from building the report to the answer. Gives whether the hub
    /// answered it; a hub that holds the host for approval, or refuses its key, is not asked.
    async fn announce_stop(&self, round: &mut Round<P>) -> bool {
        let link = self.status.borrow().link;
        if matches!(link, HubLink::PendingApproval | HubLink::Refused) {
            return false;
        }
        let request_id = Uuid::new_v4().to_string();
        let known_generation = round.intake.known_generation();
        let acked_jobs = round.inbox.acks_for_poll();
        let exchange = async {
            let snapshot = round.watches.reconcile.borrow().clone();
            let (report, delta) = round
                .reporter
                .body(&self.journal, &*self.pve, &snapshot)
                .await;
            let request = PollRequest {
                capabilities: None,
                schema: bosun_proto::poll::REQUEST_SCHEMA.to_owned(),
                known_generation,
                applied_generation: applied(&snapshot, known_generation),
                acked_jobs,
                report,
                delta,
                operations: Vec::new(),
                stopping: true,
                hub_pins: Vec::new(),
                next_host_key_sha256: None,
            };
            self.client
                .poll(
                    self.identity.host_id,
                    &self.identity.host_key.presented(),
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
}

/// The generation to report applied: past what the agent holds, the applied generation
/// belongs to the document before a hub reset, so nothing of the current one is applied yet.
fn applied(
    snapshot: &crate::guests::reconcile::reconcile_task::ReconcileStatus,
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
