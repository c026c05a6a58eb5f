//! Starting and stopping the agent: [`run`] opens the journal, enrolls on
//! first start, replays unfinished operations, starts the tasks and waits for
//! shutdown (see the crate docs for the task diagram).

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::{SharedClock, SystemClock};
use crate::config::AgentConfig;
use crate::hub::client::{HubClient, HubClientError};
use crate::hub::identity::{HostIdentity, IdentityError};
use crate::hub::poll_task::{HubStatus, PollTask};
use crate::jobs::runner::JobRunner;
use crate::journal::{JournalError, JournalHandle};
use crate::pve::{NodeName, Pve, PveClient, PveConfig, PveError, RetryPolicy, StorageId, TlsTrust};
use crate::queue::GuestQueue;
use crate::reconcile::apply::Applier;
use crate::reconcile::provision::{ProvisionExtension, Provisioner};
use crate::reconcile::reconcile_task::{
    DesiredSnapshot, ReconcileHandle, ReconcileStatus, ReconcileTask,
};
use crate::reconcile::replay::replay;
use crate::reconcile::steps::error_chain;

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
    /// The agent has not enrolled and has no enrollment token.
    #[error("this host has not enrolled and hub.enrollment_token_file is not set")]
    NotEnrolled,
    /// Talking to the hub failed during enrollment.
    #[error("enrolling at the hub")]
    Enroll(#[source] HubClientError),
    /// The hub client could not be set up.
    #[error("setting up the hub client")]
    HubClient(#[source] HubClientError),
}

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
}

/// Options beyond the config file.
#[derive(Debug, Default)]
pub struct RunOptions {
    /// Send sd-notify messages (set when `NOTIFY_SOCKET` is present).
    pub notify_systemd: bool,
    /// Steps appended to provisioning (the back half).
    pub extensions: Vec<Arc<dyn ProvisionExtension<PveClient>>>,
    /// Receives the handles once the agent runs.
    pub started: Option<tokio::sync::oneshot::Sender<AgentHandles>>,
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
    let clock: SharedClock = SystemClock::shared();
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

    let pve = Arc::new(pve_client(&config)?);
    let hub = HubClient::new(config.hub.url.clone(), &config.hub.fingerprint)
        .map_err(AgentError::HubClient)?;
    let identity = match HostIdentity::load(&config.state_dir).map_err(AgentError::Identity)? {
        Some(identity) => identity,
        None => {
            notify(sd, &[sd_notify::NotifyState::Status("enrolling")]);
            enroll(&config, &hub, &*pve).await?
        }
    };
    tracing::info!(host_id = %identity.host_id, "host identity");

    let storage = StorageId::new(config.pve.storage.clone()).map_err(|e| AgentError::Value {
        field: "pve.storage",
        reason: e.to_string(),
    })?;
    let backup_storage = StorageId::new("local").map_err(|e| AgentError::Value {
        field: "backup storage",
        reason: e.to_string(),
    })?;
    let queue = GuestQueue::new(config.reconcile.max_parallel);
    let tracker = TaskTracker::new();
    let cancel = shutdown.child_token();

    let mut provisioner = Provisioner::new(
        Arc::clone(&pve),
        journal.clone(),
        storage.clone(),
        config.reconcile.swap_mib,
    );
    for extension in options.extensions {
        provisioner = provisioner.with_extension(extension);
    }
    // Replay before any new work: resume or roll back what a crash left.
    notify(
        sd,
        &[sd_notify::NotifyState::Status("replaying the journal")],
    );
    let summary = replay(&*pve, &journal, &provisioner)
        .await
        .map_err(AgentError::Journal)?;
    tracing::info!(
        resumed = summary.resumed,
        rolled_back = summary.rolled_back,
        closed = summary.closed,
        stuck = summary.stuck,
        "journal replayed"
    );

    let (results_tx, results_rx) = mpsc::unbounded_channel();
    let runner = Arc::new(JobRunner::new(
        Arc::clone(&pve),
        journal.clone(),
        queue.clone(),
        Arc::clone(&clock),
        config.allowed_signers.clone(),
        identity.host_id,
        storage.clone(),
        backup_storage,
        results_tx,
    ));
    {
        let runner = Arc::clone(&runner);
        tracker.spawn(async move {
            match runner.resume().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(jobs = n, "interrupted jobs resumed"),
                Err(e) => {
                    tracing::error!(error = %error_chain(&e), "resuming interrupted jobs failed")
                }
            }
        });
    }

    let cached = match journal
        .cached_desired_state()
        .await
        .map_err(AgentError::Journal)?
    {
        Some(cached) => match serde_json::from_str(&cached.body) {
            Ok(state) => Some(Arc::new(DesiredSnapshot {
                generation: cached.generation,
                state,
                request_id: None,
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
    let (desired_tx, desired_rx) = watch::channel(cached);
    let desired_for_handles = desired_rx.clone();

    let applier = Applier::new(
        Arc::clone(&pve),
        journal.clone(),
        queue.clone(),
        provisioner,
    );
    let (reconcile_task, reconcile): (_, ReconcileHandle) = ReconcileTask::new(
        Arc::clone(&pve),
        journal.clone(),
        applier,
        desired_rx,
        config.reconcile.interval,
        config.reconcile.restart_attempts,
        sd,
    );
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
        tracker.clone(),
    );
    tracker.spawn(reconcile_task.run(cancel.clone()));
    tracker.spawn(poll_task.run(cancel.clone()));
    // The local API (crate::localapi) is served next to these tasks with the
    // same journal, queue and shutdown token.
    notify(sd, &[sd_notify::NotifyState::Status("running")]);
    if let Some(started) = options.started {
        let _ = started.send(AgentHandles {
            journal: journal.clone(),
            queue: queue.clone(),
            reconcile: reconcile.status(),
            hub: hub_status,
            desired: desired_for_handles,
            host_id: identity.host_id,
        });
    }

    shutdown.cancelled().await;
    notify(
        sd,
        &[
            sd_notify::NotifyState::Stopping,
            sd_notify::NotifyState::Status("stopping"),
        ],
    );
    tracing::info!("shutting down");
    cancel.cancel();
    queue.close();
    tracker.close();
    queue.wait_idle().await;
    tracker.wait().await;
    journal.close().await.map_err(AgentError::Journal)?;
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

fn pve_client(config: &AgentConfig) -> Result<PveClient, AgentError> {
    let trust = match (&config.pve.fingerprint, &config.pve.ca_file) {
        (Some(fp), _) => TlsTrust::PinnedSha256(fp.clone()),
        (None, Some(ca)) => TlsTrust::CaFile(ca.clone()),
        (None, None) => {
            return Err(AgentError::Value {
                field: "pve.fingerprint",
                reason: "neither a fingerprint nor a CA file".into(),
            });
        }
    };
    let node = NodeName::new(config.pve.node.clone()).map_err(|e| AgentError::Value {
        field: "pve.node",
        reason: e.to_string(),
    })?;
    PveClient::new(PveConfig {
        base_url: config.pve.url.clone(),
        node,
        token_id: config.pve.token_id.clone(),
        token_secret: config.pve.token_secret.clone(),
        trust,
        policy: if config.pve.fast_retries {
            RetryPolicy::fast()
        } else {
            RetryPolicy::default()
        },
    })
    .map_err(AgentError::Pve)
}

async fn enroll<P: Pve>(
    config: &AgentConfig,
    hub: &HubClient,
    pve: &P,
) -> Result<HostIdentity, AgentError> {
    let token = config
        .hub
        .enrollment_token
        .as_ref()
        .ok_or(AgentError::NotEnrolled)?;
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| config.pve.node.clone());
    let pve_version = pve.version().await.ok().map(|v| v.version);
    let response = hub
        .enroll(token, &hostname, pve_version)
        .await
        .map_err(AgentError::Enroll)?;
    let identity = HostIdentity {
        host_id: response.host_id,
        host_key: secrecy::SecretString::from(response.host_key.expose().to_owned()),
    };
    identity
        .store(&config.state_dir)
        .map_err(AgentError::Identity)?;
    tracing::info!(host_id = %identity.host_id, status = ?response.status, "enrolled at the hub; host key stored");
    Ok(identity)
}
