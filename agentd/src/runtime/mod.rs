//! Starting and stopping the agent. [`run_with`] reads as its phases, each a function
//! returning the handles the next one needs (see the crate docs for the task diagram):
//!
//! 1. open (`open.rs`): the state directory's lock, the journal (then `READY=1`), the
//!    supervisor and the systemd watchdog;
//! 2. identify (`identify.rs`): the Proxmox and hub clients, the host's identity (enrolling
//!    on the first start) and its keys;
//! 3. replay (`replay.rs`): the desired state (cached, held to the data plan), provisioning,
//!    and the replay of what a crash left, before any new work;
//! 4. spawn (`spawn.rs`, the local API in `local_api.rs`): one function per subsystem, each
//!    starting its tasks under the supervisor and returning their handles;
//! 5. run until shutdown or a failed task, then stop (`stop`): the queue drained, every
//!    task waited for, the journal closed last.
//!
//! Beside the phases, the rest of the agent's own life: what its two programs share
//! ([`program`]), the state directory's lock ([`state_lock`]), the [`supervisor`] every task
//! runs under, systemd's [`watchdog`], the agent's side of its own [`update`], and
//! [`code_pages`]: the daemon's code given back to the kernel once it has settled.

pub mod code_pages;
pub mod program;
pub mod state_lock;
pub mod supervisor;
pub mod update;
pub mod watchdog;

mod identify;
mod local_api;
mod metrics_sources;
mod open;
mod replay;
mod spawn;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_pve::{PveClient, PveError, StorageId};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::clock::{SharedClock, SystemClock};
use crate::config::AgentConfig;
use crate::data::desired::DesiredSnapshot;
use crate::guests::credentials::cert::CertError;
use crate::guests::queue::GuestQueue;
use crate::guests::reconcile::provision::ProvisionExtension;
use crate::guests::reconcile::reconcile_task::ReconcileStatus;
use crate::links::hub::poll_task::HubStatus;
use crate::links::hub_client::client::HubClientError;
use crate::links::hub_client::identity::IdentityError;
use crate::ops::journal::{JournalError, JournalHandle};
use crate::runtime::supervisor::{Supervisor, TaskFailure};

/// The desired state every task acts on.
type DesiredRx = watch::Receiver<Option<Arc<DesiredSnapshot>>>;

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
    PbsKey(#[source] crate::trust::keys::pbs_key::PbsKeyError),
    /// The host's storage identity (what credentials are sealed to) could not be loaded.
    #[error("the host storage identity")]
    Sealing(#[source] crate::trust::keys::sealing::SealingError),
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
    HubPins(#[source] crate::links::hub_client::pins::PinsError),
    /// The state directory is locked by an offline command (a certificate rotation).
    #[error("the state directory is locked")]
    StateLock(#[source] crate::runtime::state_lock::LockError),
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

/// How often a stop that is taking long says what it is still waiting for.
const STILL_STOPPING: std::time::Duration = std::time::Duration::from_secs(5);

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
    /// The agent's tasks: which still run ([`Supervisor::running`]).
    pub tasks: Supervisor,
}

/// The local API as guests reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalApiEndpoint {
    /// The bound address (the real port when the config asked for 0).
    pub addr: SocketAddr,
    /// SHA-256 of the leaf certificate, 64 lowercase hex digits.
    pub fingerprint: String,
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

fn notify(enabled: bool, states: &[sd_notify::NotifyState<'_>]) {
    if enabled {
        let _ = sd_notify::notify(states);
    }
}

/// Runs the agent until `shutdown` is cancelled.
pub async fn run(config: AgentConfig, shutdown: CancellationToken) -> Result<(), AgentError> {
    run_with(config, shutdown, RunOptions::default()).await
}

/// What the phases before spawning give besides the journal and tasks opened: the host
/// identified, the storage ids checked, the local API's listener bound and the journal
/// replayed.
struct Prepared {
    host: identify::Identified,
    storage: StorageId,
    backup_storage: StorageId,
    bound: Option<local_api::BoundLocalApi>,
    replayed: replay::Replayed,
}

/// The phases `open`, `identify` and `replay`, with the settings they need checked between.
async fn prepare(
    config: &AgentConfig,
    shutdown: &CancellationToken,
    sd: bool,
    extensions: Vec<Arc<dyn ProvisionExtension<PveClient>>>,
    clock: Option<SharedClock>,
) -> Result<(open::Opened, Prepared), AgentError> {
    let opened = open::open(
        config,
        shutdown,
        sd,
        clock.unwrap_or_else(SystemClock::shared),
    )
    .await?;
    let host = identify::identify(config, &opened, sd).await?;
    let storage = storage_id("pve.storage", &config.guest_storage)?;
    let backup_storage = storage_id("backup.storage", &config.backup.storage)?;
    let bound = config
        .local_api
        .map(|settings| local_api::bind(config, settings))
        .transpose()?;
    let issuer = local_api::bootstrap_issuer(
        config,
        bound.as_ref(),
        &opened.journal,
        host.identity.host_id,
    )?;
    let replayed = replay::replay(
        config,
        &opened,
        &host,
        storage.clone(),
        extensions,
        issuer,
        sd,
    )
    .await?;
    Ok((
        opened,
        Prepared {
            host,
            storage,
            backup_storage,
            bound,
            replayed,
        },
    ))
}

/// [`run`] with options.
pub async fn run_with(
    config: AgentConfig,
    shutdown: CancellationToken,
    options: RunOptions,
) -> Result<(), AgentError> {
    let RunOptions {
        notify_systemd: sd,
        extensions,
        started,
        clock,
    } = options;
    let (opened, prepared) = prepare(&config, &shutdown, sd, extensions, clock).await?;
    // Held until the agent stops, so every channel the tasks publish on keeps a reader.
    let handles = spawn_all(&config, &shutdown, &opened, prepared).await?;
    notify(sd, &[sd_notify::NotifyState::Status("running")]);
    if let Some(started) = started {
        let _ = started.send(handles.clone());
    }
    stop(
        &opened.tasks,
        &opened.cancel,
        &opened.journal,
        &handles.queue,
        &shutdown,
        sd,
    )
    .await
}

/// The phase `spawn`: every task started, the local API served; gives their handles.
async fn spawn_all(
    config: &AgentConfig,
    shutdown: &CancellationToken,
    opened: &open::Opened,
    prepared: Prepared,
) -> Result<AgentHandles, AgentError> {
    let Prepared {
        host,
        storage,
        backup_storage,
        bound,
        replayed,
    } = prepared;
    let queue = GuestQueue::new(config.reconcile.max_parallel);
    let pve = Arc::clone(&host.pve);
    let desired = replayed.desired.clone();
    let w = spawn::Wiring {
        config,
        journal: &opened.journal,
        clock: &opened.clock,
        pve: &pve,
        tasks: &opened.tasks,
        cancel: &opened.cancel,
        queue: &queue,
        host_id: host.identity.host_id,
        desired: &desired,
    };
    let tiers = spawn::backup_tiers(&w, &backup_storage).await;
    let (results_tx, results_rx) = mpsc::unbounded_channel();
    let controllers = replayed.controllers.clone();
    let break_glass = spawn::break_glass(&w);
    spawn::golden_build(&w, replayed.golden_pending.clone(), storage.clone());
    let runner = spawn::jobs(
        &w,
        &host,
        &replayed,
        spawn::JobParts {
            storage: &storage,
            backup_storage: &backup_storage,
            tiers: &tiers,
            results: results_tx,
            controllers: &controllers,
            break_glass,
        },
    );
    let replay::Replayed {
        desired_tx,
        provisioner,
        leftover,
        applied_generation,
        ..
    } = replayed;
    spawn::resume_interrupted(
        &w,
        &runner,
        &host.prover,
        &backup_storage,
        (leftover.jobs, leftover.backups, leftover.local_api),
    );
    let (backups, policy) = spawn::backups(&w, backup_storage, &tiers, &host.prover);
    let storage_facts = spawn::storage_watcher(&w, Arc::clone(&host.credentials), &host.pbs_key);
    let health = spawn::health(&w, Arc::clone(&host.credentials))?;
    let restore_tests =
        spawn::restore_tester(&w, storage, &tiers, &host.prover, leftover.restore_tests);
    spawn_verifier(&w, Arc::clone(&host.credentials), &tiers, &host.prover);
    spawn_bulk(&w);
    let (endpoint, slots) = local_api::serve(
        &w,
        bound,
        local_api::LocalApiSources {
            backups,
            policy,
            storage: storage_facts.clone(),
            restore_tests,
            controllers: controllers.clone(),
            consent: consent_book(&w, config, opened).await,
        },
    );
    let host_id = host.identity.host_id;
    let (reconcile, hub_status) = spawn::reconcile_and_hub(
        &w,
        host,
        shutdown,
        spawn::LoopParts {
            provisioner,
            desired_tx,
            runner,
            results: results_rx,
            tiers,
            storage: storage_facts,
            health,
            slots,
            controllers,
            applied_generation,
            progress: opened.progress.clone(),
        },
    );
    let metrics = spawn::metrics(&w, reconcile.status(), hub_status.clone());
    Ok(AgentHandles {
        journal: opened.journal.clone(),
        queue: queue.clone(),
        reconcile: reconcile.status(),
        hub: hub_status,
        desired: desired.clone(),
        host_id,
        local_api: endpoint,
        metrics,
        tasks: w.tasks.clone(),
    })
}

/// A configured storage id.
fn storage_id(field: &'static str, name: &str) -> Result<StorageId, AgentError> {
    StorageId::new(name.to_owned()).map_err(|e| AgentError::Value {
        field,
        reason: e.to_string(),
    })
}

/// Runs until shutdown, or until a task fails: then the agent stops the same way, bounded
/// in time, and returns the failure (a non-zero exit, and systemd restarts it). The queue
/// refuses new work and finishes what it holds, every task is waited for, and the journal
/// is closed last (`STOPPING=1` first).
async fn stop(
    tasks: &Supervisor,
    cancel: &CancellationToken,
    journal: &JournalHandle,
    queue: &GuestQueue,
    shutdown: &CancellationToken,
    sd: bool,
) -> Result<(), AgentError> {
    let tracker = tasks.tracker().clone();
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
        // Every task ends by itself; one that is slow to is named while the stop waits.
        tokio::pin!(stopped);
        while tokio::time::timeout(STILL_STOPPING, &mut stopped)
            .await
            .is_err()
        {
            let guests: Vec<String> = queue.busy().iter().map(ToString::to_string).collect();
            tracing::warn!(tasks = ?tasks.running(), ?guests, "still stopping: waiting for these tasks and guest operations to end");
        }
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

/// Enrolls this box at the hub with the configured enrollment token (`bosun-agentctl enroll`,
/// run before the daemon's first start): stores and gives the host identity.
pub async fn enroll_host(
    config: &AgentConfig,
) -> Result<crate::links::hub_client::identity::HostIdentity, AgentError> {
    identify::enroll_now(config).await
}

/// The box's name: the kernel's hostname, else the Proxmox node's name.
pub fn local_hostname(config: &AgentConfig) -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| config.pve.node.clone())
}

/// The PBS verifier (data/verify/): each guest's backup group on each PBS tier, on the cadence
/// desired state held to the signed plan asks for.
/// The guests' break-glass consents, read back from their file, dropping each guest's as soon as
/// it leaves its vmid (decision 0080).
async fn consent_book(
    w: &spawn::Wiring<'_>,
    config: &AgentConfig,
    opened: &open::Opened,
) -> crate::trust::break_glass::consent::ConsentBook {
    // Subscribed first: a guest that leaves its vmid while the file is read back is settled.
    let guests = opened.journal.guests_changed();
    let book = crate::trust::break_glass::consent::ConsentBook::open(
        config.break_glass_consent.clone(),
        opened.journal.clone(),
        Arc::clone(&opened.clock),
    )
    .await;
    w.tasks.spawn(
        "consent",
        book.clone().follow_guests(guests, w.cancel.clone()),
    );
    book
}

/// The bulk volumes' archives (decision 0090), through the helper when there is one.
fn spawn_bulk(w: &spawn::Wiring<'_>) {
    let archiver: Arc<dyn crate::data::bulk::Archiver> = match w.helper() {
        Some(helper) => Arc::new(helper),
        None => Arc::new(crate::data::bulk::NoHelper),
    };
    let check = w.config.backup.bulk_check;
    let scheduler = crate::data::bulk::BulkScheduler::new(
        w.journal.clone(),
        Arc::clone(w.clock),
        w.desired.clone(),
        Arc::new(crate::data::backup::scheduler::DesiredRunningGuests::new(
            Arc::clone(w.pve),
            w.journal.clone(),
            w.desired.clone(),
        )),
        w.queue.clone(),
        archiver,
        crate::data::bulk::BulkConfig {
            check_interval: check,
            retry_after: check * 5,
            archive_timeout: Duration::from_secs(86_400),
            mount_root: w.config.backup.mount_root.clone(),
            time_zone: jiff::tz::TimeZone::system(),
        },
    );
    w.tasks
        .spawn("bulk-archives", scheduler.run(w.cancel.clone()));
}

/// PBS verification, and the file tiers' re-hash when a helper can read their archives.
fn spawn_verifier(
    w: &spawn::Wiring<'_>,
    sealing: Arc<crate::trust::keys::credentials::CredentialOpener>,
    tiers: &tokio::sync::watch::Receiver<crate::data::backup::tiers::TierPlan>,
    prover: &crate::data::backup::ArchiveProver,
) {
    let mut verifier = crate::data::verify::Verifier::new(
        w.journal.clone(),
        Arc::clone(w.clock),
        w.desired.clone(),
        sealing,
        w.host_id,
        crate::data::verify::VerifyConfig {
            hour: w.config.backup.verify_hour,
            check_interval: (w.config.backup.verify_hour / 4).min(Duration::from_secs(60)),
            call_timeout: w
                .config
                .backup
                .storage_call_timeout
                .max(Duration::from_secs(5)),
            poll: (w.config.backup.verify_hour / 1800)
                .clamp(Duration::from_millis(100), Duration::from_secs(2)),
            ..Default::default()
        },
    );
    if w.config.helper.is_some() {
        verifier = verifier.with_files(crate::data::verify::files::FileTiers {
            pve: Arc::clone(w.pve),
            prover: prover.paced(w.config.backup.verify_rate_mib_s),
            tiers: tiers.clone(),
            journal: w.journal.clone(),
        });
    }
    w.tasks.spawn("verify", verifier.run(w.cancel.clone()));
}
