//! The third phase, before any new work: the desired state the agent acts on (the cached
//! one until the hub answers, held to the signed data plan), provisioning, and the replay
//! of what a crash left. Reconcile's own operations (provisions and DR restores) are
//! resumed or rolled back here; the rest wait for their subsystems in [`Leftover`].

use std::sync::Arc;

use bosun_pve::{PveClient, StorageId};
use tokio::sync::watch;

use super::identify::Identified;
use super::open::Opened;
use super::{AgentError, DesiredRx, notify};
use crate::config::AgentConfig;
use crate::data::desired::DesiredSnapshot;
use crate::guests::controller::ControllerBoard;
use crate::guests::credentials::bootstrap::BootstrapIssuer;
use crate::guests::reconcile::golden::GoldenCheck;
use crate::guests::reconcile::golden::PendingBuild;
use crate::guests::reconcile::provision::{ProvisionExtension, Provisioner, VmProvisioner};
use crate::links::helper::HelperClient;
use crate::ops::journal::UnfinishedOperation;
use crate::ops::operation::replay::Unfinished;

/// What the replay leaves for the tasks that start next.
pub(super) struct Replayed {
    /// Where the hub loop publishes each desired state it fetches.
    pub desired_tx: watch::Sender<Option<Arc<DesiredSnapshot>>>,
    /// The desired state every task acts on, held to the data plan.
    pub desired: DesiredRx,
    /// Provisioning and DR restores.
    pub provisioner: Provisioner<PveClient>,
    /// The golden build the check waits for.
    pub golden_pending: PendingBuild,
    /// What each guest's controller is told to run, as the journal records it (provisioning,
    /// the job runner's rollouts, the healer and the local API share the board).
    pub controllers: ControllerBoard,
    /// The bootstrap issuer provisioning uses, for the `adopt` jobs that ask for a bootstrap.
    pub bootstrap_issuer: Option<BootstrapIssuer>,
    /// The generation a reconcile pass last applied, as the journal recorded it: reported
    /// until a pass applies another.
    pub applied_generation: u64,
    /// The unfinished operations other subsystems replay.
    pub leftover: Leftover,
}

/// Unfinished operations replayed once their subsystem runs.
pub(super) struct Leftover {
    /// For the job runner's resume.
    pub jobs: Vec<UnfinishedOperation>,
    /// For the backup service's start-up pass.
    pub backups: Vec<UnfinishedOperation>,
    /// For the local API's start-up pass.
    pub local_api: Vec<UnfinishedOperation>,
    /// For the restore tester's start-up pass.
    pub restore_tests: Vec<UnfinishedOperation>,
}

/// Publishes the cached desired state through the data plan's gate, builds provisioning
/// and replays the journal's unfinished reconcile operations.
pub(super) async fn replay(
    config: &AgentConfig,
    opened: &Opened,
    host: &Identified,
    storage: StorageId,
    extensions: Vec<Arc<dyn ProvisionExtension<PveClient>>>,
    bootstrap_issuer: Option<BootstrapIssuer>,
    sd: bool,
) -> Result<Replayed, AgentError> {
    let Opened {
        journal,
        clock,
        tasks,
        cancel,
        ..
    } = opened;
    let cached = cached_desired(journal).await?;
    let applied_generation = journal
        .applied_generation()
        .await
        .map_err(AgentError::Journal)?;
    // The hub's document (from the cache, then each poll) goes through the data plan's gate:
    // every task acts on the document held to the signed plan.
    let (desired_tx, raw_desired_rx) = watch::channel(cached);
    let plans = Arc::new(crate::data::plan::PlanKeeper::new(
        journal.clone(),
        config.allowed_signers.clone(),
        host.identity.host_id,
        Arc::clone(clock),
    ));
    let credentials = crate::data::plan::CredentialKeeper::new(
        Arc::clone(&host.credentials),
        journal.clone(),
        host.identity.host_id,
    );
    let desired = crate::data::desired::spawn_gate(
        tasks,
        raw_desired_rx,
        plans,
        credentials,
        journal.clone(),
        cancel.clone(),
    )
    .await;
    let golden_pending = PendingBuild::default();
    let golden = Arc::new(
        GoldenCheck::new(
            journal.clone(),
            config.helper.clone().map(HelperClient::new),
            config.allowed_signers.clone(),
            host.identity.host_id,
            Arc::clone(clock),
        )
        .with_pending(golden_pending.clone()),
    );
    let controllers = ControllerBoard::new();
    controllers.load(&journal.controllers().await.map_err(AgentError::Journal)?);
    let mut provisioner = Provisioner::new(
        Arc::clone(&host.pve),
        journal.clone(),
        storage,
        config.reconcile.swap_mib,
        golden,
    )
    .with_controllers(controllers.clone());
    // Bulk volumes are placed on the manifest's targets of the desired state acted on.
    provisioner = provisioner.with_placement(desired.clone());
    // A DR whose source may still run resets the restored guest's identity inside it.
    provisioner = provisioner.with_guest_helper(config.helper.clone().map(HelperClient::new));
    // Every new guest's address comes from the host's pool (decision 0101).
    provisioner = provisioner.with_addresses(config.addresses.clone());
    for extension in extensions {
        provisioner = provisioner.with_extension(extension);
    }
    if let Some(issuer) = bootstrap_issuer.clone() {
        provisioner = provisioner.with_post_start_extension(Arc::new(issuer));
    }
    // QEMU guests, from their signed VM golden archive into Bosun's pool (decision 0114),
    // sharing the journal, golden check, address pool and vmid reservations.
    match bosun_pve::PoolId::new(bosun_pve::BOSUN_POOL) {
        Ok(pool) => {
            let vms = VmProvisioner::new(provisioner.clone(), bootstrap_issuer.clone(), pool);
            provisioner = provisioner.with_vms(Arc::new(vms));
        }
        Err(e) => {
            tracing::error!(error = %e, "bosun's proxmox pool id is not valid; qemu guests are refused");
        }
    }
    notify(
        sd,
        &[sd_notify::NotifyState::Status("replaying the journal")],
    );
    let Unfinished {
        reconcile,
        jobs,
        backups,
        local_api,
        restore_tests,
        unregistered,
    } = crate::ops::operation::replay::sort(journal)
        .await
        .map_err(AgentError::Journal)?;
    let summary =
        crate::guests::reconcile::replay::replay(&*host.pve, journal, &provisioner, reconcile)
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
    Ok(Replayed {
        desired_tx,
        desired,
        provisioner,
        golden_pending,
        controllers,
        bootstrap_issuer,
        applied_generation,
        leftover: Leftover {
            jobs,
            backups,
            local_api,
            restore_tests,
        },
    })
}

/// The desired state the journal cached from the hub's last answer, acted on until the hub
/// answers again.
async fn cached_desired(
    journal: &crate::ops::journal::JournalHandle,
) -> Result<Option<Arc<DesiredSnapshot>>, AgentError> {
    let cached = match journal
        .cached_desired_state()
        .await
        .map_err(AgentError::Journal)?
    {
        Some(cached) => match crate::links::hub::desired_intake::parse_cached(&cached.body) {
            Ok(parsed) => Some(Arc::new(DesiredSnapshot {
                generation: cached.generation,
                state: parsed.state,
                request_id: None,
                correlation_id: cached.correlation_id,
                plan: None,
                refused: Vec::new(),
                unknown_kinds: parsed.refused,
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
    Ok(cached)
}
