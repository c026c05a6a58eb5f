//! Starting and stopping the agent: [`run`] opens the journal, enrolls on
//! first start, replays unfinished operations, starts the tasks and waits for
//! shutdown (see the crate docs for the task diagram).

mod metrics_sources;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backup::scheduler::DesiredRunningGuests;
use crate::backup::{ArchiveProver, ArchiveReader};
use crate::backup::{BackupConfig, BackupService, FloorKeeper, PolicyScheduler, SchedulerConfig};
use crate::clock::{SharedClock, SystemClock};
use crate::config::{AgentConfig, LocalApiSettings};
use crate::credentials::bootstrap::{BootstrapEndpoints, BootstrapIssuer};
use crate::credentials::cert::{CertError, LocalApiCert};
use crate::desired::DesiredSnapshot;
use crate::health::HealthTask;
use crate::helper_client::HelperClient;
use crate::hub::client::{HubClient, HubClientError};
use crate::hub::identity::{HostIdentity, IdentityError};
use crate::hub::pins::HubPins;
use crate::hub::poll_task::{HubStatus, PollTask};
use crate::hub::reporter::{HostKeys, ReportSources};
use crate::jobs::detach::DetachContext;
use crate::jobs::restore_now::RestoreContext;
use crate::jobs::runner::JobRunner;
use crate::journal::{JournalError, JournalHandle};
use crate::keys::pbs_key::PbsKeySource;
use crate::keys::sealing::StorageIdentity;
use crate::localapi::{
    self, LocalApi, LocalApiConfig, LocalApiParts, LocalApiTls, RestoreTestBoard,
};
use crate::metrics::PveRequestCounter;
use crate::operation::replay::Unfinished;
use crate::queue::GuestQueue;
use crate::reconcile::apply::Applier;
use crate::reconcile::golden::GoldenCheck;
use crate::reconcile::provision::{ProvisionExtension, Provisioner};
use crate::reconcile::reconcile_task::{ReconcileHandle, ReconcileStatus, ReconcileTask};
use crate::reconcile::replay::replay;
use crate::recovery::host_loss::HostLossSearch;
use crate::restore_test::{RestoreTestConfig, RestoreTester};
use crate::storage::{StorageWatcher, WatcherParts};
use crate::supervisor::{Supervisor, TaskFailure};
use crate::watchdog_task::WatchdogTask;
use bosun_errchain::error_chain;
use bosun_proto::bootstrap::PinnedEndpoint;
use bosun_proto::desired::BackupPolicy;
use bosun_pve::{Pve, PveClient, PveError, PveOps, PveSetupError, StorageId, client_from_settings};

/// Why the agent could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The state directory could not be created.
    #[error("creating the state directory {path}")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The journal could not be opened or replayed.
    #[error("the journal")]
    Journal(#[source] JournalError),
    /// The Proxmox client could not be set up.
    #[error("setting up the proxmox client")]
    Pve(#[source] PveError),
    /// A configured name is invalid.
    #[error("config value {field} is invalid: {reason}")]
    Value {
        /// The key.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// The host identity could not be read or stored.
    #[error("the host identity")]
    Identity(#[source] IdentityError),
    /// The PBS encryption key could not be loaded or made.
    #[error("the PBS encryption key")]
    PbsKey(#[source] crate::keys::pbs_key::PbsKeyError),
    /// The host's storage identity (what credentials are sealed to) could not be loaded.
    #[error("the host storage identity")]
    Sealing(#[source] crate::keys::sealing::SealingError),
    /// The agent has not enrolled and has no enrollment token.
    #[error("this host has not enrolled and hub.enrollment_token_file is not set")]
    NotEnrolled,
    /// Talking to the hub failed during enrollment.
    #[error("enrolling at the hub")]
    Enroll(#[source] HubClientError),
    /// The hub client could not be set up.
    #[error("setting up the hub client")]
    HubClient(#[source] HubClientError),
    /// The hub pins the agent journaled cannot be read.
    #[error("reading the hub keys this agent trusts")]
    HubPins(#[source] crate::hub::pins::PinsError),
    /// The state directory is locked by an offline command (a certificate rotation).
    #[error("the state directory is locked")]
    StateLock(#[source] crate::state_lock::LockError),
    /// The local API's address could not be bound.
    #[error("binding the local api to {addr}")]
    LocalApiBind {
        /// The configured address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The local API's certificate could not be loaded or created.
    #[error("the local api certificate in {dir}")]
    LocalApiCert {
        /// The state directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: CertError,
    },
    /// The tunnel's readiness probe could not be set up.
    #[error("the tunnel readiness probe")]
    TunnelProbe(#[source] crate::health::tunnel::ProbeSetupError),
    /// A task panicked or ended while the agent was running: the agent stopped so that
    /// systemd restarts it.
    #[error("the agent stopped after a task failed")]
    TaskFailed(#[source] TaskFailure),
}

/// How long the other tasks and the queue get to stop after a task failed, before the agent
/// exits all the same (the journal is crash-safe; systemd's stop timeout does not apply).
const STOP_AFTER_FAILURE: std::time::Duration = std::time::Duration::from_secs(20);

/// Handles a running agent exposes (for tests and the local API).
#[derive(Debug, Clone)]
pub struct AgentHandles {
    /// The journal.
    pub journal: JournalHandle,
    /// The per-guest queue.
    pub queue: GuestQueue,
    /// Reconcile status.
    pub reconcile: watch::Receiver<ReconcileStatus>,
    /// Hub status.
    pub hub: watch::Receiver<HubStatus>,
    /// The desired state being reconciled (cached or fresh from the hub);
    /// the local API derives its backup policy from it.
    pub desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    /// The host's id at the hub.
    pub host_id: uuid::Uuid,
    /// Where the local API listens, when it is served.
    pub local_api: Option<LocalApiEndpoint>,
    /// Where `/metrics` is served, when it is (`[metrics]`).
    pub metrics: Option<SocketAddr>,
}

/// The local API as guests reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalApiEndpoint {
    /// The bound address (the real port when the config asked for 0).
    pub addr: SocketAddr,
    /// SHA-256 of the leaf certificate, 64 lowercase hex digits.
    pub fingerprint: String,
}

/// The local API bound but not yet serving.
struct BoundLocalApi {
    listener: std::net::TcpListener,
    tls: LocalApiTls,
    endpoint: LocalApiEndpoint,
    settings: LocalApiSettings,
}

/// Options beyond the config file.
#[derive(Debug, Default)]
pub struct RunOptions {
    /// Send sd-notify messages (set when `NOTIFY_SOCKET` is present).
    pub notify_systemd: bool,
    /// Steps appended to provisioning (the guest's bootstrap).
    pub extensions: Vec<Arc<dyn ProvisionExtension<PveClient>>>,
    /// Receives the handles once the agent runs.
    pub started: Option<tokio::sync::oneshot::Sender<AgentHandles>>,
    /// The clock every task reads; the system clock when `None`. A test passes a
    /// `ManualClock` to run days of policy in milliseconds.
    pub clock: Option<SharedClock>,
}

/// Hands each reconcile pass's guest addresses to the local API's connection slots, so a
/// guest's connections are counted as its own before they authenticate.
async fn follow_guest_addresses(
    mut status: watch::Receiver<ReconcileStatus>,
    slots: Arc<crate::localapi::SlotBook>,
    stop: CancellationToken,
) {
    loop {
        let addresses = status.borrow_and_update().addresses.clone();
        slots.set_addresses(&addresses);
        tokio::select! {
            () = stop.cancelled() => return,
            changed = status.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

fn notify(enabled: bool, states: &[sd_notify::NotifyState<'_>]) {
    if enabled {
        let _ = sd_notify::notify(states);
    }
}

/// Runs the agent until `shutdown` is cancelled.
pub async fn run(config: AgentConfig, shutdown: CancellationToken) -> Result<(), AgentError> {
    run_with(config, shutdown, RunOptions::default()).await
}

/// [`run`] with options.
pub async fn run_with(
    config: AgentConfig,
    shutdown: CancellationToken,
    options: RunOptions,
) -> Result<(), AgentError> {
    let sd = options.notify_systemd;
    create_state_dir(&config)?;
    // Held while the agent runs: a second agent on the same state directory and offline
    // commands (certificate rotation) refuse meanwhile.
    let _state_lock = crate::state_lock::StateLock::exclusive(&config.state_dir)
        .map_err(AgentError::StateLock)?;
    let clock: SharedClock = options.clock.clone().unwrap_or_else(SystemClock::shared);
    let journal = JournalHandle::open(&config.journal_path(), Arc::clone(&clock))
        .await
        .map_err(AgentError::Journal)?;
    notify(
        sd,
        &[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status("journal open"),
        ],
    );
    tracing::info!(state_dir = %config.state_dir.display(), "journal open");
    let cancel = shutdown.child_token();
    // A task that panics, or ends before shutdown, stops the agent (supervisor.rs).
    let tasks = Supervisor::new(TaskTracker::new(), cancel.clone());
    let tracker = tasks.tracker().clone();
    // Any early return below stops the tasks started so far, not only a shutdown.
    let _stop_tasks = cancel.clone().drop_guard();
    // systemd expects pings from READY=1 on, through enrollment and replay too.
    if sd && let Some(watchdog) = WatchdogTask::from_env(journal.clone()) {
        tracing::info!(
            period_ms = u64::try_from(watchdog.period().as_millis()).unwrap_or(u64::MAX),
            "systemd watchdog pings"
        );
        tasks.spawn("watchdog", watchdog.run(cancel.clone()));
    }

    let pve = Arc::new(pve_client(&config)?);
    let hub = HubClient::with_trust(config.hub.url.clone(), &config.hub.trust)
        .map_err(AgentError::HubClient)?;
    // The keys the hub announced last, when pins alone decide whom to trust.
    let hub_pins = hub
        .pins()
        .map(|set| HubPins::open(&config.state_dir, &config.hub.pins, Arc::clone(set)))
        .transpose()
        .map_err(AgentError::HubPins)?;
    let identity = match HostIdentity::load(&config.state_dir).map_err(AgentError::Identity)? {
        Some(identity) => identity,
        None => {
            notify(sd, &[sd_notify::NotifyState::Status("enrolling")]);
            enroll(&config, &hub, &*pve, clock.now()).await?
        }
    };
    tracing::info!(host_id = %identity.host_id, "host identity");
    // Made on the first start: what operators seal storage credentials to.
    let storage_identity =
        StorageIdentity::load_or_create(&config.state_dir).map_err(AgentError::Sealing)?;
    // K, the PBS client encryption key: made once, never leaves the box; its fingerprint
    // is reported. A box that took over a lost host waits for K from the escrow instead.
    let pbs_key = PbsKeySource::new(&config.state_dir, identity.replaces.is_none());
    pbs_key.load().map_err(AgentError::PbsKey)?;
    let keys = HostKeys {
        storage_recipient: Some(storage_identity.recipient()),
        pbs_key: pbs_key.clone(),
    };
    // What proves each archive when its backup ends, checked before every restore.
    let prover = ArchiveProver::new(
        PveOps::shared(Arc::clone(&pve)),
        config
            .helper
            .clone()
            .map(|t| Arc::new(HelperClient::new(t)) as Arc<dyn ArchiveReader>),
        Some(pbs_key.clone()),
        journal.clone(),
    );

    let storage = StorageId::new(config.guest_storage.clone()).map_err(|e| AgentError::Value {
        field: "pve.storage",
        reason: e.to_string(),
    })?;
    let backup_storage =
        StorageId::new(config.backup.storage.clone()).map_err(|e| AgentError::Value {
            field: "backup.storage",
            reason: e.to_string(),
        })?;
    let bound = config
        .local_api
        .map(|settings| bind_local_api(&config, settings))
        .transpose()?;
    let extensions = options.extensions;
    let bootstrap_issuer = bootstrap_issuer(&config, bound.as_ref(), &journal)?;
    let queue = GuestQueue::new(config.reconcile.max_parallel);

    let cached = match journal
        .cached_desired_state()
        .await
        .map_err(AgentError::Journal)?
    {
        Some(cached) => match crate::hub::desired_intake::parse_cached(&cached.body) {
            Ok(state) => Some(Arc::new(DesiredSnapshot {
                generation: cached.generation,
                state,
                request_id: None,
                correlation_id: cached.correlation_id,
                plan: None,
                refused: Vec::new(),
            })),
            Err(e) => {
                tracing::warn!(error = %e, "cached desired state unreadable; waiting for the hub");
                None
            }
        },
        None => None,
    };
    if let Some(c) = &cached {
        tracing::info!(
            generation = c.generation,
            "acting on the cached desired state"
        );
    }
    // The hub's document (from the cache, then each poll) goes through the data plan's gate:
    // every task below acts on the document held to the signed plan.
    let (desired_tx, raw_desired_rx) = watch::channel(cached);
    let plans = Arc::new(crate::data_plan::PlanKeeper::new(
        journal.clone(),
        config.allowed_signers.clone(),
        identity.host_id,
        Arc::clone(&clock),
    ));
    let desired_rx = crate::desired::spawn_gate(
        &tasks,
        raw_desired_rx,
        plans,
        journal.clone(),
        cancel.clone(),
    )
    .await;
    let golden_pending = crate::golden_build::PendingBuild::default();
    let golden = Arc::new(
        GoldenCheck::new(
            journal.clone(),
            config.helper.clone().map(HelperClient::new),
            config.allowed_signers.clone(),
            identity.host_id,
            Arc::clone(&clock),
        )
        .with_pending(golden_pending.clone()),
    );
    let mut provisioner = Provisioner::new(
        Arc::clone(&pve),
        journal.clone(),
        storage.clone(),
        config.reconcile.swap_mib,
        golden,
    );
    // Bulk volumes are placed on the manifest's targets of the desired state acted on.
    provisioner = provisioner.with_placement(desired_rx.clone());
    // A DR whose source may still run resets the restored guest's identity inside it.
    provisioner = provisioner.with_guest_helper(config.helper.clone().map(HelperClient::new));
    for extension in extensions {
        provisioner = provisioner.with_extension(extension);
    }
    if let Some(issuer) = &bootstrap_issuer {
        provisioner = provisioner.with_post_start_extension(Arc::new(issuer.clone()));
    }
    // Replay before any new work: resume or roll back what a crash left.
    notify(
        sd,
        &[sd_notify::NotifyState::Status("replaying the journal")],
    );
    let Unfinished {
        reconcile: reconcile_ops,
        jobs: job_ops,
        backups: backup_ops,
        local_api: local_api_ops,
        restore_tests: restore_test_ops,
        unregistered,
    } = crate::operation::replay::sort(&journal)
        .await
        .map_err(AgentError::Journal)?;
    let summary = replay(&*pve, &journal, &provisioner, reconcile_ops)
        .await
        .map_err(AgentError::Journal)?;
    tracing::info!(
        unregistered,
        resumed = summary.resumed,
        rolled_back = summary.rolled_back,
        closed = summary.closed,
        stuck = summary.stuck,
        "journal replayed"
    );

    let desired_for_handles = desired_rx.clone();
    let desired_for_report = desired_rx.clone();
    // Backups run whether or not guests have a local API: the tiers, each on its schedule.
    let keeper = Arc::new(FloorKeeper::new(
        journal.clone(),
        config.allowed_signers.clone(),
        identity.host_id,
        Arc::clone(&clock),
    ));
    let tiers = crate::backup::tiers::spawn_feed(
        &tasks,
        desired_rx.clone(),
        keeper,
        backup_storage.clone(),
        config.backup.min_interval_seconds,
        journal.clone(),
        cancel.clone(),
    )
    .await;
    let (results_tx, results_rx) = mpsc::unbounded_channel();
    // What each guest's controller is told to run, as the journal last recorded it.
    let controllers = crate::controller::ControllerBoard::new();
    controllers.load(&journal.controllers().await.map_err(AgentError::Journal)?);
    // The break-glass door needs the helper; its expiry task closes it at the deadline
    // (and at once for a door that expired while the agent was down).
    let break_glass = config.helper.clone().map(|transport| {
        crate::break_glass::BreakGlass::new(
            HelperClient::new(transport),
            journal.clone(),
            Arc::clone(&clock),
        )
    });
    if let Some(door) = &break_glass {
        let task = crate::break_glass::expiry_task::ExpiryTask::new(door.clone());
        tasks.spawn("break_glass_expiry", task.run(cancel.clone()));
    }
    // What was run through a door, from the support shell's spool into the audit trail; a
    // session can outlive its door, so the spool is read whether a door is open or not.
    let spool = crate::break_glass::spool::SpoolTask::new(
        journal.clone(),
        config.break_glass_spool.clone(),
        config.break_glass_scan_interval,
    );
    tasks.spawn("break_glass_spool", spool.run(cancel.clone()));
    // Golden images: built through the helper for the signed recipe in the desired state.
    if let Some(transport) = config.helper.clone() {
        let builder = crate::golden_build::GoldenBuilder::new(
            HelperClient::new(transport),
            journal.clone(),
            Arc::clone(&clock),
            config.allowed_signers.clone(),
            config.golden.clone(),
        )
        .with_pending(golden_pending);
        let task =
            crate::golden_build::build_task::GoldenBuildTask::new(builder, desired_rx.clone());
        tasks.spawn("golden_build", task.run(cancel.clone()));
    }
    let mut runner = JobRunner::new(
        Arc::clone(&pve),
        journal.clone(),
        queue.clone(),
        Arc::clone(&clock),
        config.allowed_signers.clone(),
        identity.host_id,
        storage.clone(),
        backup_storage.clone(),
        results_tx,
    )
    .with_storage_detach(DetachContext::new(
        desired_rx.clone(),
        tiers.clone(),
        config.helper.clone().map(HelperClient::new),
    ))
    .with_recovery(RestoreContext::new(
        provisioner.clone(),
        tiers.clone(),
        desired_rx.clone(),
        prover.clone(),
    ))
    .with_controller(crate::controller::RolloutContext {
        ops: PveOps::shared(Arc::clone(&pve)),
        journal: journal.clone(),
        board: controllers.clone(),
        helper: config.helper.clone().map(HelperClient::new),
        settings: config.controller,
    })
    .with_update(crate::jobs::update_run::UpdateJobs {
        context: Arc::new(crate::update::UpdateContext::new(
            &config.state_dir,
            &config.slots_root,
        )),
        hub: hub.clone(),
        host_id: identity.host_id,
        host_key: identity.host_key.clone(),
        helper: config.helper.clone().map(HelperClient::new),
    });
    if let Some(door) = break_glass {
        runner = runner.with_break_glass(door);
    }
    let runner = Arc::new(runner);
    // The nonces of jobs long expired are forgotten, at start and hourly: the check refuses
    // those jobs' bytes as expired, and their ids stay in the journal.
    tasks.spawn(
        "nonce_prune",
        crate::nonce_prune_task::NoncePruneTask::new(journal.clone(), Arc::clone(&clock))
            .run(cancel.clone()),
    );
    // A controller gone silent is restarted in place, a bounded number of times.
    tasks.spawn(
        "controller_heal",
        crate::controller::HealTask::new(
            Arc::clone(&pve),
            journal.clone(),
            controllers.clone(),
            config.helper.clone().map(HelperClient::new),
            config.controller,
        )
        .run(cancel.clone()),
    );
    {
        // The guest-scoped replayers wait in their guests' queue slots, so they run beside
        // the tasks below; new work on a guest queues behind its replay.
        let runner = Arc::clone(&runner);
        let (pve, journal, queue) = (Arc::clone(&pve), journal.clone(), queue.clone());
        let prover = prover.clone();
        let backup_storage = backup_storage.clone();
        tasks.spawn_once("resume_interrupted", async move {
            let backups = crate::backup::interrupted::close_interrupted_backups(
                &pve,
                &journal,
                &queue,
                &backup_storage,
                &backup_ops,
                &prover,
            )
            .await;
            let local = crate::localapi::interrupted::close_interrupted(
                &pve,
                &journal,
                &queue,
                local_api_ops,
            )
            .await;
            if backups + local > 0 {
                tracing::info!(backups, local_api = local, "interrupted operations closed");
            }
            match runner.resume(job_ops).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(jobs = n, "interrupted jobs resumed"),
                Err(e) => {
                    tracing::error!(error = %error_chain(&e), "resuming interrupted jobs failed")
                }
            }
        });
    }

    let ops = PveOps::shared(Arc::clone(&pve));
    let backups = BackupService::with_tiers(
        Arc::clone(&ops),
        journal.clone(),
        queue.clone(),
        Arc::clone(&clock),
        BackupConfig {
            min_interval_seconds: Some(config.backup.min_interval_seconds),
            ..BackupConfig::new(backup_storage)
        },
        tiers.clone(),
        Some(prover.clone()),
    );
    let policy = spawn_policy_feed(&tasks, desired_rx.clone(), cancel.clone());
    // The policy backup the controller did not take by its deadline, and every later tier.
    let scheduler = PolicyScheduler::new(
        backups.clone(),
        Arc::new(DesiredRunningGuests::new(
            Arc::clone(&pve),
            journal.clone(),
            desired_rx.clone(),
        )),
        policy.clone(),
        SchedulerConfig::default(),
    );
    tasks.spawn("backup_scheduler", scheduler.run(cancel.clone()));
    let (watcher, storage_facts) = StorageWatcher::new(
        WatcherParts {
            pve: Arc::clone(&pve),
            journal: journal.clone(),
            helper: config.helper.clone().map(HelperClient::new),
            sealing: Arc::new(storage_identity),
            host_id: identity.host_id,
            pbs_key: pbs_key.clone(),
            mount_root: config.backup.mount_root.clone(),
            local_dir_roots: config.storage.local_dir_roots.clone(),
            interval: config.backup.watch_interval,
            call_timeout: config.backup.storage_call_timeout,
            clock: Arc::clone(&clock),
        },
        desired_rx.clone(),
    );
    tasks.spawn("storage_watcher", watcher.run(cancel.clone()));
    let tunnel = config
        .tunnel
        .clone()
        .map(|settings| {
            crate::health::tunnel::ReadinessProbe::new(&settings).map(|probe| (settings, probe))
        })
        .transpose()
        .map_err(AgentError::TunnelProbe)?;
    let (health_task, health) = HealthTask::new(
        Arc::clone(&pve),
        config.helper.clone().map(HelperClient::new),
        Arc::clone(&clock),
        config.health.clone(),
        tunnel,
    );
    tasks.spawn("health", health_task.run(cancel.clone()));
    // Restore tests prove the tiers restore: interrupted ones are cleaned up first.
    let restore_board = RestoreTestBoard::new();
    {
        let tester = RestoreTester::new(
            Arc::clone(&pve),
            journal.clone(),
            Arc::clone(&clock),
            desired_rx.clone(),
            tiers.clone(),
            restore_board.clone(),
            RestoreTestConfig {
                stay_up: config.backup.restore_test_stay_up,
                min_free_memory_mib: config.backup.restore_test_min_free_mib,
                max_active_tasks: config.backup.restore_test_max_tasks,
                minute: config.backup.restore_test_minute,
                poll: config
                    .backup
                    .restore_test_stay_up
                    .min(std::time::Duration::from_secs(2)),
                ..RestoreTestConfig::new(storage.clone())
            },
            prover.clone(),
        )
        // The guest's own restore check runs inside the scratch guest through the helper.
        .with_helper(config.helper.clone().map(HelperClient::new));
        let (pve, journal, stop) = (Arc::clone(&pve), journal.clone(), cancel.clone());
        tasks.spawn("restore_tests", async move {
            let closed =
                crate::restore_test::close_interrupted(&*pve, &journal, restore_test_ops).await;
            if closed > 0 {
                tracing::info!(
                    restore_tests = closed,
                    "interrupted restore tests cleaned up"
                );
            }
            tester.run(stop).await;
        });
    }
    let mut local_api_slots = None;
    let local_api_endpoint = match bound {
        Some(bound) => {
            let endpoint = bound.endpoint.clone();
            let settings = bound.settings;
            let api = LocalApi::new(LocalApiParts {
                ops,
                journal: journal.clone(),
                queue: queue.clone(),
                backups,
                policy,
                // Live: each mount's class as the storage watcher knows it now.
                storage: storage_facts.clone(),
                restore_tests: restore_board.clone(),
                controllers: controllers.clone(),
                clock: Arc::clone(&clock),
                config: LocalApiConfig {
                    max_body_bytes: settings.max_body_bytes,
                    rate_per_s: settings.rate_per_s,
                    burst: settings.burst,
                    shutdown_grace: settings.shutdown_grace,
                    connections: settings.connections,
                    controller_report_interval: config.controller.report_interval,
                    ..LocalApiConfig::default()
                },
            });
            local_api_slots = Some(Arc::clone(api.slots()));
            let stop = cancel.clone();
            tasks.spawn("local_api", async move {
                let BoundLocalApi { listener, tls, .. } = bound;
                if let Err(e) = localapi::serve(listener, &tls, api, stop.cancelled_owned()).await
                {
                    tracing::error!(error = %error_chain(&e), "the local api stopped with an error");
                }
            });
            Some(endpoint)
        }
        None => None,
    };

    let applier = Applier::new(
        Arc::clone(&pve),
        journal.clone(),
        queue.clone(),
        provisioner,
    )
    .with_tiers(tiers.clone(), prover.clone());
    let (reconcile_task, reconcile): (_, ReconcileHandle) = ReconcileTask::new(
        Arc::clone(&pve),
        journal.clone(),
        applier,
        desired_rx,
        config.reconcile.interval,
        config.reconcile.restart_attempts,
    );
    // A box that took over a lost host restores the host's guests from PBS.
    let reconcile_task = if identity.replaces.is_some() {
        reconcile_task.with_host_loss(HostLossSearch::new(
            Arc::clone(&pve),
            journal.clone(),
            pbs_key.clone(),
            tiers.clone(),
            identity.enrolled_at.unwrap_or_else(jiff::Timestamp::now),
            prover.clone(),
        ))
    } else {
        reconcile_task
    };
    let (poll_task, hub_status) = PollTask::new(
        hub,
        identity.clone(),
        journal.clone(),
        Arc::clone(&pve),
        desired_tx,
        reconcile.clone(),
        runner,
        results_rx,
        config.poll,
        tasks.clone(),
        ReportSources {
            keys,
            storage: storage_facts,
            tiers,
            desired: desired_for_report,
            health,
        },
    );
    let poll_task = match hub_pins {
        Some(pins) => poll_task.with_hub_pins(pins),
        None => poll_task,
    };
    tasks.spawn("reconcile", reconcile_task.run(cancel.clone()));
    // Told to stop (not failing), the hub loop tells the hub it is a planned stop.
    tasks.spawn(
        "poll",
        poll_task
            .with_planned_stop(shutdown.clone())
            .run(cancel.clone()),
    );
    tasks.spawn(
        "hub_link_file",
        crate::hub::link::follow(
            hub_status.clone(),
            config.state_dir.clone(),
            identity.host_id,
            Arc::clone(&clock),
        ),
    );
    if let Some(slots) = local_api_slots {
        tasks.spawn(
            "guest_addresses",
            follow_guest_addresses(reconcile.status(), slots, cancel.clone()),
        );
    }
    let metrics = config.metrics.and_then(|settings| {
        let sources = metrics_sources::Sources {
            journal: journal.clone(),
            journal_path: config.journal_path(),
            queue: queue.clone(),
            reconcile: reconcile.status(),
            hub: hub_status.clone(),
        };
        crate::metrics::metrics_task::spawn(
            &tasks,
            settings.listen,
            Arc::new(sources),
            cancel.clone(),
        )
    });
    notify(sd, &[sd_notify::NotifyState::Status("running")]);
    if let Some(started) = options.started {
        let _ = started.send(AgentHandles {
            journal: journal.clone(),
            queue: queue.clone(),
            reconcile: reconcile.status(),
            hub: hub_status,
            desired: desired_for_handles,
            host_id: identity.host_id,
            local_api: local_api_endpoint,
            metrics,
        });
    }

    // Until shutdown, or until a task fails: then the agent stops the same way, bounded in
    // time, and returns the failure (a non-zero exit, and systemd restarts it).
    let failed = tokio::select! {
        () = shutdown.cancelled() => false,
        _ = tasks.failed() => true,
    };
    notify(
        sd,
        &[
            sd_notify::NotifyState::Stopping,
            sd_notify::NotifyState::Status("stopping"),
        ],
    );
    if failed {
        tracing::error!("stopping after a task failed");
    } else {
        tracing::info!("shutting down");
    }
    cancel.cancel();
    queue.close();
    tracker.close();
    let stopped = async {
        queue.wait_idle().await;
        tracker.wait().await;
    };
    if !failed {
        stopped.await;
    } else if tokio::time::timeout(STOP_AFTER_FAILURE, stopped)
        .await
        .is_err()
    {
        tracing::error!(
            waited_ms = u64::try_from(STOP_AFTER_FAILURE.as_millis()).unwrap_or(u64::MAX),
            "tasks still running after a task failed; exiting without them"
        );
    }
    let closed = journal.close().await;
    // A panic while stopping fails the stop too.
    if let Some(failure) = tasks.failure() {
        if let Err(e) = &closed {
            tracing::error!(error = %error_chain(e), "closing the journal failed");
        }
        return Err(AgentError::TaskFailed(failure));
    }
    closed.map_err(AgentError::Journal)?;
    tracing::info!("stopped");
    Ok(())
}

fn create_state_dir(config: &AgentConfig) -> Result<(), AgentError> {
    use std::os::unix::fs::DirBuilderExt;
    let path = &config.state_dir;
    if path.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|source| AgentError::StateDir {
            path: path.clone(),
            source,
        })
}

/// Binds the local API's listener and loads (or creates once) its certificate, so the
/// bootstrap can name the real address and fingerprint before provisioning starts.
fn bind_local_api(
    config: &AgentConfig,
    settings: LocalApiSettings,
) -> Result<BoundLocalApi, AgentError> {
    let wanted = SocketAddr::new(settings.bind, settings.port);
    let bind_err = |source| AgentError::LocalApiBind {
        addr: wanted,
        source,
    };
    let listener = std::net::TcpListener::bind(wanted).map_err(bind_err)?;
    let addr = listener.local_addr().map_err(bind_err)?;
    let cert_err = |source| AgentError::LocalApiCert {
        dir: config.state_dir.clone(),
        source,
    };
    let cert = LocalApiCert::load_or_create(&config.state_dir, &[settings.bind.to_string()])
        .map_err(cert_err)?;
    let tls = LocalApiTls::new(&cert).map_err(cert_err)?;
    tracing::info!(addr = %addr, fingerprint = %cert.fingerprint(), "local api bound");
    Ok(BoundLocalApi {
        listener,
        tls,
        settings,
        endpoint: LocalApiEndpoint {
            addr,
            fingerprint: cert.fingerprint().to_owned(),
        },
    })
}

/// The guest bootstrap issuer, when the config names a helper.
fn bootstrap_issuer(
    config: &AgentConfig,
    bound: Option<&BoundLocalApi>,
    journal: &JournalHandle,
) -> Result<Option<BootstrapIssuer>, AgentError> {
    let Some(transport) = config.helper.clone() else {
        tracing::warn!(
            "no [helper] configured: no golden archive can be hashed, so no guest is provisioned"
        );
        return Ok(None);
    };
    let Some(bound) = bound else {
        // The helper still hashes golden archives; there is no local API to bootstrap.
        tracing::info!("no [local_api] configured; provisioning stops before the bootstrap");
        return Ok(None);
    };
    let endpoints = BootstrapEndpoints {
        hub: PinnedEndpoint {
            url: config.bootstrap_hub.url.clone(),
            fingerprint: config.bootstrap_hub.fingerprint.clone(),
        },
        local_api_url: format!("https://{}", bound.endpoint.addr),
        local_api_fingerprint: bound.endpoint.fingerprint.clone(),
    };
    Ok(Some(BootstrapIssuer::new(
        Arc::new(HelperClient::new(transport)),
        journal.clone(),
        endpoints,
    )))
}

/// Publishes the backup policy of each desired state the agent acts on.
fn spawn_policy_feed(
    tasks: &Supervisor,
    mut desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    cancel: CancellationToken,
) -> watch::Receiver<Option<BackupPolicy>> {
    let policy_of = |d: &Option<Arc<DesiredSnapshot>>| {
        d.as_ref()
            .map(|snapshot| snapshot.state.backup_policy.clone())
    };
    let (tx, rx) = watch::channel(policy_of(&desired.borrow_and_update()));
    tasks.spawn("policy_feed", async move {
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                changed = desired.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let policy = policy_of(&desired.borrow_and_update());
                    tx.send_replace(policy);
                }
            }
        }
    });
    rx
}

/// The Proxmox client the config describes, its requests counted in the agent's metrics.
fn pve_client(config: &AgentConfig) -> Result<PveClient, AgentError> {
    let client = client_from_settings(&config.pve).map_err(|e| match e {
        PveSetupError::Value { field, reason } => AgentError::Value { field, reason },
        PveSetupError::Client(e) => AgentError::Pve(e),
    })?;
    Ok(client.observed_by(Arc::new(PveRequestCounter)))
}

/// The box's name: the kernel's hostname, else the Proxmox node's name.
pub fn local_hostname(config: &AgentConfig) -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| config.pve.node.clone())
}

async fn enroll<P: Pve>(
    config: &AgentConfig,
    hub: &HubClient,
    pve: &P,
    now: jiff::Timestamp,
) -> Result<HostIdentity, AgentError> {
    let token = config
        .hub
        .enrollment_token
        .as_ref()
        .ok_or(AgentError::NotEnrolled)?;
    let hostname = local_hostname(config);
    let pve_version = pve.version().await.ok().map(|v| v.version);
    let response = hub
        .enroll(token, &hostname, pve_version)
        .await
        .map_err(AgentError::Enroll)?;
    let identity = HostIdentity {
        host_id: response.host_id,
        host_key: secrecy::SecretString::from(response.host_key.expose().to_owned()),
        replaces: response
            .replaces
            .as_ref()
            .map(|r| r.hostname.chars().take(253).collect()),
        enrolled_at: Some(now),
    };
    identity
        .store(&config.state_dir)
        .map_err(AgentError::Identity)?;
    tracing::info!(host_id = %identity.host_id, status = ?response.status, "enrolled at the hub; host key stored");
    if let Some(replaced) = &response.replaces {
        tracing::warn!(
            host_id = %identity.host_id,
            replaces = %replaced.hostname,
            "enrolled in restore mode: this box takes over a lost host; its PBS key comes back \
             with `bosun-agentd escrow recover` and the customer's recovery code"
        );
    }
    Ok(identity)
}
