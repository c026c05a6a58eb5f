//! The fourth phase: each subsystem's tasks started under the supervisor, one function per
//! subsystem, each returning the handles the ones after it need. [`super::run_with`] calls
//! them in the order they depend on each other.

use std::net::SocketAddr;
use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::desired::BackupPolicy;
use bosun_proto::job::JobResult;
use bosun_pve::{PveClient, PveOps, StorageId};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::identify::Identified;
use super::replay::Replayed;
use super::{AgentError, DesiredRx, metrics_sources};
use crate::clock::SharedClock;
use crate::config::AgentConfig;
use crate::data::backup::scheduler::DesiredRunningGuests;
use crate::data::backup::tiers::TierPlan;
use crate::data::backup::{
    ArchiveProver, BackupConfig, BackupService, FloorKeeper, PolicyScheduler, SchedulerConfig,
};
use crate::data::desired::DesiredSnapshot;
use crate::data::recovery::host_loss::HostLossSearch;
use crate::data::restore_test::{RestoreTestConfig, RestoreTester};
use crate::data::storage::{StorageFacts, StorageWatcher, WatcherParts};
use crate::guests::controller::ControllerBoard;
use crate::guests::localapi::{RestoreTestBoard, SlotBook};
use crate::guests::queue::GuestQueue;
use crate::guests::reconcile::apply::Applier;
use crate::guests::reconcile::reconcile_task::{ReconcileHandle, ReconcileStatus, ReconcileTask};
use crate::health::{HealthFacts, HealthTask};
use crate::links::helper::HelperClient;
use crate::links::hub::poll_task::{HubStatus, PollParts, PollTask};
use crate::links::hub::reporter::ReportSources;
use crate::ops::jobs::detach::DetachContext;
use crate::ops::jobs::restore_now::RestoreContext;
use crate::ops::jobs::runner::JobRunner;
use crate::ops::journal::{JournalHandle, UnfinishedOperation};
use crate::runtime::supervisor::Supervisor;
use crate::trust::break_glass::BreakGlass;

/// What every subsystem is started with.
pub(super) struct Wiring<'a> {
    /// The configuration.
    pub config: &'a AgentConfig,
    /// The journal.
    pub journal: &'a JournalHandle,
    /// The clock every task reads.
    pub clock: &'a SharedClock,
    /// Proxmox.
    pub pve: &'a Arc<PveClient>,
    /// Where tasks run.
    pub tasks: &'a Supervisor,
    /// Stops them.
    pub cancel: &'a CancellationToken,
    /// The per-guest queue.
    pub queue: &'a GuestQueue,
    /// This host.
    pub host_id: Uuid,
    /// The desired state every task acts on.
    pub desired: &'a DesiredRx,
}

impl Wiring<'_> {
    pub(super) fn helper(&self) -> Option<HelperClient> {
        self.config.helper.clone().map(HelperClient::new)
    }
}

/// The backup tiers of each desired state, held to the signed retention floor.
pub(super) async fn backup_tiers(
    w: &Wiring<'_>,
    backup_storage: &StorageId,
) -> watch::Receiver<TierPlan> {
    let keeper = Arc::new(FloorKeeper::new(
        w.journal.clone(),
        w.config.allowed_signers.clone(),
        w.host_id,
        Arc::clone(w.clock),
    ));
    crate::data::backup::tiers::spawn_feed(
        w.tasks,
        w.desired.clone(),
        keeper,
        backup_storage.clone(),
        w.config.backup.min_interval_seconds,
        w.journal.clone(),
        w.cancel.clone(),
    )
    .await
}

/// The break-glass door (with the helper): its expiry task closes it at the deadline (and
/// at once for a door that expired while the agent was down). What was run through a door
/// goes from the support shell's spool into the audit trail; a session can outlive its
/// door, so the spool is read whether a door is open or not.
pub(super) fn break_glass(w: &Wiring<'_>) -> Option<BreakGlass> {
    let door = w.config.helper.clone().map(|transport| {
        BreakGlass::new(
            HelperClient::new(transport),
            w.journal.clone(),
            Arc::clone(w.clock),
        )
    });
    if let Some(door) = &door {
        let task = crate::trust::break_glass::expiry_task::ExpiryTask::new(door.clone());
        w.tasks
            .spawn("break_glass_expiry", task.run(w.cancel.clone()));
    }
    let spool = crate::trust::break_glass::spool::SpoolTask::new(
        w.journal.clone(),
        w.config.break_glass_spool.clone(),
        w.config.break_glass_scan_interval,
    );
    w.tasks
        .spawn("break_glass_spool", spool.run(w.cancel.clone()));
    door
}

/// Golden images built through the helper for the signed recipe in the desired state.
pub(super) fn golden_build(
    w: &Wiring<'_>,
    pending: crate::guests::reconcile::golden::PendingBuild,
    storage: StorageId,
) {
    let Some(transport) = w.config.helper.clone() else {
        return;
    };
    let mut boot_test = crate::guests::golden_build::boot_test::BootTester::new(
        Arc::clone(w.pve),
        w.journal.clone(),
        storage,
    );
    boot_test.stay_up = w.config.golden.boot_stay_up;
    boot_test.poll = boot_test.stay_up.min(std::time::Duration::from_secs(2));
    let builder = crate::guests::golden_build::GoldenBuilder::new(
        HelperClient::new(transport),
        w.journal.clone(),
        Arc::clone(w.clock),
        w.config.allowed_signers.clone(),
        w.config.golden.clone(),
    )
    .with_pending(pending)
    .with_boot_test(Arc::new(boot_test))
    .with_remover(Arc::new(crate::guests::golden_build::prune::PveRemover(
        Arc::clone(w.pve),
    )));
    let task =
        crate::guests::golden_build::build_task::GoldenBuildTask::new(builder, w.desired.clone());
    w.tasks.spawn("golden_build", task.run(w.cancel.clone()));
}

/// What the job runner is built from beyond the wiring.
pub(super) struct JobParts<'a> {
    /// Where restores go.
    pub storage: &'a StorageId,
    /// Where backups go.
    pub backup_storage: &'a StorageId,
    /// The backup tiers.
    pub tiers: &'a watch::Receiver<TierPlan>,
    /// Where job results go to the hub loop.
    pub results: mpsc::UnboundedSender<JobResult>,
    /// The controllers' board.
    pub controllers: &'a ControllerBoard,
    /// The break-glass door, with a helper.
    pub break_glass: Option<BreakGlass>,
}

/// The signed-job runner (its jobs arrive from the hub loop); then the nonce pruner, which
/// forgets the nonces of jobs long expired at start and hourly (the check refuses those
/// jobs' bytes as expired, and their ids stay in the journal), and the controller healer,
/// which restarts a controller gone silent in place, a bounded number of times.
pub(super) fn jobs(
    w: &Wiring<'_>,
    host: &Identified,
    replayed: &Replayed,
    parts: JobParts<'_>,
) -> Arc<JobRunner<PveClient>> {
    let config = w.config;
    let mut runner = JobRunner::new(
        Arc::clone(w.pve),
        w.journal.clone(),
        w.queue.clone(),
        Arc::clone(w.clock),
        config.allowed_signers.clone(),
        w.host_id,
        parts.storage.clone(),
        parts.backup_storage.clone(),
        parts.results,
    )
    .with_storage_detach(DetachContext::new(
        w.desired.clone(),
        parts.tiers.clone(),
        w.helper(),
    ))
    .with_recovery(RestoreContext::new(
        replayed.provisioner.clone(),
        parts.tiers.clone(),
        w.desired.clone(),
        host.prover.clone(),
    ))
    .with_bulk_restore(crate::ops::jobs::BulkRestoreSetup::new(
        w.desired.clone(),
        w.helper(),
        config.backup.mount_root.clone(),
    ))
    .with_controller(crate::guests::controller::RolloutContext {
        ops: PveOps::shared(Arc::clone(w.pve)),
        journal: w.journal.clone(),
        board: parts.controllers.clone(),
        helper: w.helper(),
        settings: config.controller,
    })
    .with_update(crate::ops::jobs::update_run::UpdateJobs {
        context: Arc::new(crate::runtime::update::UpdateContext::new(
            &config.state_dir,
            &config.slots_root,
        )),
        hub: host.hub.clone(),
        host_id: w.host_id,
        host_key: host.identity.host_key.clone(),
        helper: w.helper(),
    });
    if let Some(door) = parts.break_glass {
        runner = runner.with_break_glass(door);
    }
    if let Some(issuer) = replayed.bootstrap_issuer.clone() {
        runner = runner.with_bootstrap_issuer(issuer);
    }
    let runner = Arc::new(runner);
    w.tasks.spawn(
        "nonce_prune",
        crate::ops::nonce_prune::NoncePruneTask::new(w.journal.clone(), Arc::clone(w.clock))
            .run(w.cancel.clone()),
    );
    w.tasks.spawn(
        "controller_heal",
        crate::guests::controller::HealTask::new(
            Arc::clone(w.pve),
            w.journal.clone(),
            parts.controllers.clone(),
            w.helper(),
            config.controller,
        )
        .run(w.cancel.clone()),
    );
    runner
}

/// The guest-scoped replayers: interrupted backups, snapshots and rollbacks closed, then
/// interrupted jobs resumed. They wait in their guests' queue slots, so they run beside the
/// tasks started after them; new work on a guest queues behind its replay.
pub(super) fn resume_interrupted(
    w: &Wiring<'_>,
    runner: &Arc<JobRunner<PveClient>>,
    prover: &ArchiveProver,
    backup_storage: &StorageId,
    (jobs, backups, local_api): (
        Vec<UnfinishedOperation>,
        Vec<UnfinishedOperation>,
        Vec<UnfinishedOperation>,
    ),
) {
    let runner = Arc::clone(runner);
    let (pve, journal, queue) = (Arc::clone(w.pve), w.journal.clone(), w.queue.clone());
    let prover = prover.clone();
    let backup_storage = backup_storage.clone();
    w.tasks.spawn_once("resume_interrupted", async move {
        let closed_backups = crate::data::backup::interrupted::close_interrupted_backups(
            &pve,
            &journal,
            &queue,
            &backup_storage,
            &backups,
            &prover,
        )
        .await;
        let local = crate::guests::localapi::interrupted::close_interrupted(
            &pve, &journal, &queue, local_api,
        )
        .await;
        if closed_backups + local > 0 {
            tracing::info!(
                backups = closed_backups,
                local_api = local,
                "interrupted operations closed"
            );
        }
        match runner.resume(jobs).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(jobs = n, "interrupted jobs resumed"),
            Err(e) => {
                tracing::error!(error = %error_chain(&e), "resuming interrupted jobs failed")
            }
        }
    });
}

/// The backup service, whether or not guests have a local API: the tiers, each on its
/// schedule. The policy scheduler takes the policy backup the controller did not take by
/// its deadline, and every later tier.
pub(super) fn backups(
    w: &Wiring<'_>,
    backup_storage: StorageId,
    tiers: &watch::Receiver<TierPlan>,
    prover: &ArchiveProver,
) -> (BackupService, watch::Receiver<Option<BackupPolicy>>) {
    let backups = BackupService::with_tiers(
        PveOps::shared(Arc::clone(w.pve)),
        w.journal.clone(),
        w.queue.clone(),
        Arc::clone(w.clock),
        BackupConfig {
            min_interval_seconds: Some(w.config.backup.min_interval_seconds),
            ..BackupConfig::new(backup_storage)
        },
        tiers.clone(),
        Some(prover.clone()),
    );
    let policy = policy_feed(w.tasks, w.desired.clone(), w.cancel.clone());
    let scheduler = PolicyScheduler::new(
        backups.clone(),
        Arc::new(
            DesiredRunningGuests::new(Arc::clone(w.pve), w.journal.clone(), w.desired.clone())
                .with_vms(),
        ),
        policy.clone(),
        SchedulerConfig::default(),
    );
    w.tasks
        .spawn("backup_scheduler", scheduler.run(w.cancel.clone()));
    (backups, policy)
}

/// Publishes the backup policy of each desired state the agent acts on.
fn policy_feed(
    tasks: &Supervisor,
    mut desired: DesiredRx,
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

/// The storage watcher: the manifest's targets registered, mounted, corrected and watched.
pub(super) fn storage_watcher(
    w: &Wiring<'_>,
    sealing: Arc<crate::trust::keys::credentials::CredentialOpener>,
    pbs_key: &crate::trust::keys::pbs_key::PbsKeySource,
) -> watch::Receiver<StorageFacts> {
    let config = w.config;
    let (watcher, facts) = StorageWatcher::new(
        WatcherParts {
            pve: Arc::clone(w.pve),
            journal: w.journal.clone(),
            helper: w.helper(),
            sealing,
            host_id: w.host_id,
            pbs_key: pbs_key.clone(),
            mount_root: config.backup.mount_root.clone(),
            local_dir_roots: config.storage.local_dir_roots.clone(),
            interval: config.backup.watch_interval,
            call_timeout: config.backup.storage_call_timeout,
            clock: Arc::clone(w.clock),
        },
        w.desired.clone(),
    );
    w.tasks
        .spawn("storage_watcher", watcher.run(w.cancel.clone()));
    facts
}

/// Node status, SMART and the tunnel's readiness, each on its cadence; the managed tunnel's
/// sealed credentials open with `sealing`.
pub(super) fn health(
    w: &Wiring<'_>,
    sealing: Arc<crate::trust::keys::credentials::CredentialOpener>,
) -> Result<watch::Receiver<HealthFacts>, AgentError> {
    let tunnel = w
        .config
        .tunnel
        .clone()
        .map(|settings| {
            crate::health::tunnel::ReadinessProbe::new(&settings).map(|probe| (settings, probe))
        })
        .transpose()
        .map_err(AgentError::TunnelProbe)?;
    let managed = tunnel_manager(w, sealing)?;
    let (task, facts) = HealthTask::new(
        Arc::clone(w.pve),
        w.helper(),
        Arc::clone(w.clock),
        w.config.health.clone(),
        tunnel,
        Some(crate::health::GuestSources {
            journal: w.journal.clone(),
            desired: w.desired.clone(),
        }),
    );
    let task = match managed {
        Some(state) => task.with_managed_tunnel(state),
        None => task,
    };
    w.tasks.spawn("health", task.run(w.cancel.clone()));
    Ok(facts)
}

/// The tunnel task, when `[tunnel]` names a configuration file the agent owns; gives the
/// receiver of the tunnel's state.
fn tunnel_manager(
    w: &Wiring<'_>,
    sealing: Arc<crate::trust::keys::credentials::CredentialOpener>,
) -> Result<Option<watch::Receiver<Option<bosun_proto::tunnel::TunnelState>>>, AgentError> {
    let Some(settings) = w.config.tunnel.as_ref() else {
        return Ok(None);
    };
    let Some(managed) = settings.managed.clone() else {
        return Ok(None);
    };
    let service = crate::tunnel::service::Service::new(
        managed.systemctl.clone(),
        settings.timeout,
        managed.restart_timeout,
    )
    .map_err(|source| {
        AgentError::TunnelProbe(crate::health::tunnel::ProbeSetupError {
            url: managed.replicas[0].metrics.to_string(),
            source,
        })
    })?;
    let (task, state) = crate::tunnel::TunnelTask::new(
        Arc::clone(w.pve),
        w.journal.clone(),
        Arc::clone(w.clock),
        w.desired.clone(),
        managed,
        settings.interval,
        service,
    );
    let task = task.with_credentials(sealing, w.host_id);
    w.tasks.spawn("tunnel", task.run(w.cancel.clone()));
    Ok(Some(state))
}

/// The restore tester, which proves the tiers restore; the tests a crash interrupted are
/// cleaned up before its first pass.
pub(super) fn restore_tester(
    w: &Wiring<'_>,
    storage: StorageId,
    tiers: &watch::Receiver<TierPlan>,
    prover: &ArchiveProver,
    interrupted: Vec<UnfinishedOperation>,
) -> RestoreTestBoard {
    let board = RestoreTestBoard::new();
    let backup = &w.config.backup;
    let tester = RestoreTester::new(
        Arc::clone(w.pve),
        w.journal.clone(),
        Arc::clone(w.clock),
        w.desired.clone(),
        tiers.clone(),
        board.clone(),
        RestoreTestConfig {
            stay_up: backup.restore_test_stay_up,
            min_free_memory_mib: backup.restore_test_min_free_mib,
            max_active_tasks: backup.restore_test_max_tasks,
            minute: backup.restore_test_minute,
            // A look a minute: a guest's first backup is tested within one, however short
            // the policy's minute is made, but never more than one look a second (each may
            // list a storage).
            check_interval: backup
                .restore_test_minute
                .max(std::time::Duration::from_secs(1)),
            // A scratch VM's guest agent gets two of the policy's minutes to answer.
            agent_wait: backup.restore_test_minute.saturating_mul(2),
            poll: backup
                .restore_test_stay_up
                .min(std::time::Duration::from_secs(2)),
            ..RestoreTestConfig::new(storage)
        },
        prover.clone(),
    )
    // The guest's own restore check runs inside the scratch guest through the helper.
    .with_helper(w.helper());
    let (pve, journal, stop) = (Arc::clone(w.pve), w.journal.clone(), w.cancel.clone());
    w.tasks.spawn("restore_tests", async move {
        let closed =
            crate::data::restore_test::close_interrupted(&*pve, &journal, interrupted).await;
        if closed > 0 {
            tracing::info!(
                restore_tests = closed,
                "interrupted restore tests cleaned up"
            );
        }
        tester.run(stop).await;
    });
    board
}

/// What the reconcile loop and the hub loop are built from beyond the wiring.
pub(super) struct LoopParts {
    /// Provisioning and DR restores.
    pub provisioner: crate::guests::reconcile::provision::Provisioner<PveClient>,
    /// Where the hub loop publishes each desired state it fetches.
    pub desired_tx: watch::Sender<Option<Arc<DesiredSnapshot>>>,
    /// The job runner.
    pub runner: Arc<JobRunner<PveClient>>,
    /// The job runner's results.
    pub results: mpsc::UnboundedReceiver<JobResult>,
    /// The backup tiers.
    pub tiers: watch::Receiver<TierPlan>,
    /// The storage watcher's facts.
    pub storage: watch::Receiver<StorageFacts>,
    /// The health task's facts.
    pub health: watch::Receiver<HealthFacts>,
    /// The local API's connection slots, when it is served.
    pub slots: Option<Arc<SlotBook>>,
    /// The controllers' board: what each guest's controller reports it runs.
    pub controllers: ControllerBoard,
    /// The generation the journal recorded applied before this start.
    pub applied_generation: u64,
    /// Where the hub loop beats its progress (the watchdog judges it).
    pub progress: crate::runtime::watchdog::Progress,
}

/// The reconcile loop (with the host-loss search on a box that took over a lost host) and
/// the hub loop; the hub link file and the guest addresses follow their status. Gives the
/// reconcile loop's handle and the hub loop's status.
pub(super) fn reconcile_and_hub(
    w: &Wiring<'_>,
    host: Identified,
    shutdown: &CancellationToken,
    parts: LoopParts,
) -> (ReconcileHandle, watch::Receiver<HubStatus>) {
    let config = w.config;
    let applier = Applier::new(
        Arc::clone(w.pve),
        w.journal.clone(),
        w.queue.clone(),
        parts.provisioner,
    )
    .with_tiers(parts.tiers.clone(), host.prover.clone());
    let (reconcile_task, reconcile): (_, ReconcileHandle) = ReconcileTask::new(
        Arc::clone(w.pve),
        w.journal.clone(),
        applier,
        w.desired.clone(),
        config.reconcile.interval,
        config.reconcile.restart_attempts,
    );
    let reconcile_task = reconcile_task.with_applied(parts.applied_generation);
    // A box that took over a lost host restores the host's guests from PBS.
    let reconcile_task = if host.identity.replaces.is_some() {
        reconcile_task.with_host_loss(HostLossSearch::new(
            Arc::clone(w.pve),
            w.journal.clone(),
            host.pbs_key.clone(),
            parts.tiers.clone(),
            host.identity.enrolled_at.unwrap_or_else(|| w.clock.now()),
            host.prover.clone(),
        ))
    } else {
        reconcile_task
    };
    let (poll_task, hub_status) = PollTask::new(PollParts {
        client: host.hub,
        identity: host.identity.clone(),
        journal: w.journal.clone(),
        pve: Arc::clone(w.pve),
        desired: parts.desired_tx,
        reconcile: reconcile.clone(),
        runner: parts.runner,
        results: parts.results,
        settings: config.poll,
        tasks: w.tasks.clone(),
        sources: ReportSources {
            keys: host.keys,
            storage: parts.storage,
            tiers: parts.tiers,
            desired: w.desired.clone(),
            health: parts.health,
            controllers: parts.controllers,
            helper: config.helper.is_some(),
            address_pool: config.addresses.is_some(),
        },
        clock: Arc::clone(w.clock),
    });
    let poll_task = match host.hub_pins {
        Some(pins) => poll_task.with_hub_pins(pins),
        None => poll_task,
    };
    w.tasks
        .spawn("reconcile", reconcile_task.run(w.cancel.clone()));
    // Told to stop (not failing), the hub loop tells the hub it is a planned stop.
    w.tasks.spawn(
        "poll",
        poll_task
            .with_planned_stop(shutdown.clone())
            .with_progress(parts.progress)
            .run(w.cancel.clone()),
    );
    w.tasks.spawn(
        "hub_link_file",
        crate::links::hub::link::follow(
            hub_status.clone(),
            config.state_dir.clone(),
            host.identity.host_id,
            Arc::clone(w.clock),
        ),
    );
    if let Some(slots) = parts.slots {
        w.tasks.spawn(
            "guest_addresses",
            follow_guest_addresses(reconcile.status(), slots, w.cancel.clone()),
        );
    }
    (reconcile, hub_status)
}

/// Hands each reconcile pass's guest addresses to the local API's connection slots, so a
/// guest's connections are counted as its own before they authenticate.
async fn follow_guest_addresses(
    mut status: watch::Receiver<ReconcileStatus>,
    slots: Arc<SlotBook>,
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

/// Serves `/metrics` on its own local-only listener, when the config asks for it; gives the
/// bound address.
pub(super) fn metrics(
    w: &Wiring<'_>,
    reconcile: watch::Receiver<ReconcileStatus>,
    hub: watch::Receiver<HubStatus>,
) -> Option<SocketAddr> {
    let settings = w.config.metrics.as_ref()?;
    let sources = metrics_sources::Sources {
        journal: w.journal.clone(),
        journal_path: w.config.journal_path(),
        queue: w.queue.clone(),
        reconcile,
        hub,
    };
    crate::metrics::metrics_task::spawn(
        w.tasks,
        settings.listen,
        Arc::new(sources),
        w.cancel.clone(),
    )
}
