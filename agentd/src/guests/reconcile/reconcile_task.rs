//! The reconcile loop: a pass whenever the desired state changes, a job asks
//! for one, or `interval` passes.
//!
//! A pass observes the host, plans, applies through the queue and publishes
//! a [`ReconcileStatus`] on a `watch` channel for the hub loop to report. A
//! pass that fails to read the host is logged and retried at the next tick.
//! Cancelling the loop ends it at once, mid-pass too: a pass only reads, plans and
//! waits for the operations it queued, and those run on the [`GuestQueue`]'s own tasks
//! (journaled, waited for by the agent's stop), so leaving the pass loses nothing.
//!
//! [`GuestQueue`]: crate::guests::queue::GuestQueue
//!
//! When the next pass runs after one ends is [`super::pacing`]'s choice; a new desired
//! state or an explicit wake ends a pause early. Each pass runs inside a `reconcile` span
//! carrying the generation and the request id of the poll that brought it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::desired::{GuestKind, GuestResources};
use bosun_proto::report::{GuestReport, GuestStatus};
use bosun_pve::{Pve, PveQemu};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::apply::Applier;
use super::config_cache::ConfigCache;
use super::observe::{ObserveError, Observed};
use super::pacing::{Pacing, PassEnd, pass_end};
use super::plan::{Facts, Finding, ObservedPower, plan};
use crate::data::desired::DesiredSnapshot;
use crate::data::recovery::host_loss::HostLossSearch;
use crate::data::storage::hot::HotPlaces;
use crate::ops::journal::JournalHandle;
use crate::ops::operation::Origin;

/// The guests of a pass another node of the cluster holds, by guest id.
fn migrated_by_guest(observed: &Observed) -> BTreeMap<uuid::Uuid, (u32, String)> {
    observed
        .migrated
        .iter()
        .map(|m| (m.guest_id, (m.vmid, m.node.clone())))
        .collect()
}

/// The agent's own VMs of a pass, by guest id, as the planner sees them.
fn vms_by_guest(observed: &Observed) -> BTreeMap<uuid::Uuid, super::plan::ObservedGuest> {
    observed
        .vms
        .iter()
        .map(|v| (v.guest_id, v.guest.clone()))
        .collect()
}

/// The lost guests of a pass, by guest id.
fn lost_by_guest(observed: &Observed) -> std::collections::BTreeMap<uuid::Uuid, u32> {
    observed.lost.iter().map(|l| (l.guest_id, l.vmid)).collect()
}

/// What the last pass saw and did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReconcileStatus {
    /// Completed passes.
    pub passes: u64,
    /// The generation the last pass worked from.
    pub generation: u64,
    /// The newest generation a pass converged to completely.
    pub applied_generation: u64,
    /// Guests as last observed.
    pub guests: Vec<GuestReport>,
    /// Passes that attempted a Proxmox mutation.
    pub acting_passes: u64,
    /// The last pass's failure, if it failed.
    pub last_error: Option<String>,
    /// The static addresses of each guest of the agent's own, by guest id, as last observed:
    /// where the local API counts a connection to that guest before it authenticates
    /// ([`crate::guests::localapi::conn`]).
    pub addresses: BTreeMap<String, Vec<std::net::IpAddr>>,
    /// What of the generation the host will not apply, with why ([`super::refusals`]): while
    /// any is listed, the generation is not applied.
    pub refused: Vec<bosun_proto::refused::Refused>,
}

/// Handle to poke the loop.
#[derive(Debug, Clone)]
pub struct ReconcileHandle {
    wake: Arc<Notify>,
    status: watch::Receiver<ReconcileStatus>,
}

impl ReconcileHandle {
    /// Asks for a pass now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The status channel.
    pub fn status(&self) -> watch::Receiver<ReconcileStatus> {
        self.status.clone()
    }
}

/// The loop.
#[derive(Debug)]
pub struct ReconcileTask<P: Pve> {
    pve: Arc<P>,
    journal: JournalHandle,
    applier: Applier<P>,
    desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    status: watch::Sender<ReconcileStatus>,
    wake: Arc<Notify>,
    interval: Duration,
    restart_limit: u32,
    /// On a box that took over a lost host: where its guests come back from.
    host_loss: Option<HostLossSearch<P>>,
    /// The last reason host-loss guests waited for (logged when it changes).
    last_host_loss_reason: parking_lot::Mutex<Option<String>>,
    /// What the passes read of each container, kept for the next (decision 0110).
    configs: parking_lot::Mutex<ConfigCache>,
    /// What the passes read of each VM of the agent's own, kept the same way.
    vm_configs: parking_lot::Mutex<ConfigCache>,
}

impl<P: PveQemu + 'static> ReconcileTask<P> {
    /// A loop reading desired state from `desired`.
    pub fn new(
        pve: Arc<P>,
        journal: JournalHandle,
        applier: Applier<P>,
        desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
        interval: Duration,
        restart_limit: u32,
    ) -> (Self, ReconcileHandle) {
        let (status, status_rx) = watch::channel(ReconcileStatus::default());
        applier
            .provisioner()
            .on_provisioning(provisioning_reporter(status.clone()));
        let wake = Arc::new(Notify::new());
        let handle = ReconcileHandle {
            wake: Arc::clone(&wake),
            status: status_rx,
        };
        (
            Self {
                pve,
                journal,
                applier,
                desired,
                status,
                wake,
                interval,
                restart_limit,
                host_loss: None,
                last_host_loss_reason: parking_lot::Mutex::new(None),
                configs: parking_lot::Mutex::new(ConfigCache::default()),
                vm_configs: parking_lot::Mutex::new(ConfigCache::default()),
            },
            handle,
        )
    }

    /// Starts from `generation` applied, as the journal recorded it before a restart: the
    /// report says the same applied generation until a pass converges to another.
    #[must_use]
    pub fn with_applied(self, generation: u64) -> Self {
        self.status
            .send_modify(|s| s.applied_generation = generation);
        self
    }

    /// Restores the host's guests from PBS: this box took over a lost host.
    #[must_use]
    pub fn with_host_loss(mut self, search: HostLossSearch<P>) -> Self {
        self.host_loss = Some(search);
        self
    }

    /// Runs until `cancel`; a pass in progress is left where it is (see the module docs).
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut last_generation = 0;
        let mut pacing = Pacing::new(self.interval);
        let mut journaled = self.status.borrow().applied_generation;
        while !cancel.is_cancelled() {
            let snapshot = self.desired.borrow_and_update().clone();
            if let Some(s) = &snapshot
                && s.generation != last_generation
            {
                last_generation = s.generation;
                self.applier.new_generation();
                pacing.reset();
            }
            let span = match &snapshot {
                Some(s) => tracing::info_span!(
                    "reconcile",
                    generation = s.generation,
                    request_id = %s.request_id.as_deref().unwrap_or_default(),
                    correlation_id = %s.correlation_id.as_deref().unwrap_or_default()
                ),
                None => tracing::info_span!("reconcile", generation = 0u64),
            };
            let started = std::time::Instant::now();
            let end = tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    tracing::info!(
                        running_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                        "stopping: the reconcile pass in progress is left; what it queued still ends"
                    );
                    return;
                }
                end = self.pass(snapshot).instrument(span) => end,
            };
            crate::metrics::agent().reconcile_pass(end.as_str(), started.elapsed());
            journaled = self.journal_applied(journaled).await;
            let Some(pause) = pacing.after(end) else {
                continue;
            };
            tokio::select! {
                () = cancel.cancelled() => return,
                changed = self.desired.changed() => {
                    if changed.is_err() {
                        // The hub loop is gone; keep reconciling on the interval.
                        tokio::select! {
                            () = cancel.cancelled() => return,
                            () = tokio::time::sleep(pause) => {}
                        }
                    }
                }
                () = self.wake.notified() => {}
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Journals the applied generation when a pass changed it from `journaled`; gives the one
    /// the journal now holds (still `journaled` when the write failed: the next pass tries
    /// again).
    async fn journal_applied(&self, journaled: u64) -> u64 {
        let applied = self.status.borrow().applied_generation;
        if applied == journaled {
            return journaled;
        }
        match self.journal.record_applied_generation(applied).await {
            Ok(()) => applied,
            Err(e) => {
                tracing::warn!(
                    generation = applied,
                    error = %error_chain(&e),
                    "the applied generation could not be journaled; trying again after the next pass"
                );
                journaled
            }
        }
    }

    /// Observes the host with the configs the passes before kept (a pass cancelled meanwhile
    /// leaves none kept: the next reads every config).
    async fn observe(&self) -> Result<Observed, ObserveError> {
        let mut configs = std::mem::take(&mut *self.configs.lock());
        let mut vm_configs = std::mem::take(&mut *self.vm_configs.lock());
        let observed =
            super::observe::observe(&*self.pve, &self.journal, &mut configs, &mut vm_configs).await;
        *self.configs.lock() = configs;
        *self.vm_configs.lock() = vm_configs;
        observed
    }

    async fn pass(&self, snapshot: Option<Arc<DesiredSnapshot>>) -> PassEnd {
        // A restore that landed after its operation stopped waiting is destroyed before
        // anything is observed, so no pass reports it as a stranger.
        let swept = super::late_landing::sweep(&*self.pve, &self.journal).await;
        if swept.destroyed > 0 || swept.ended > 0 {
            tracing::info!(
                destroyed = swept.destroyed,
                ended = swept.ended,
                watching = swept.watching,
                "late landings swept"
            );
        }
        let Some(snapshot) = snapshot else {
            // Nothing desired yet: observe and report only; never act.
            match self.observe().await {
                Ok(observed) => self.publish(None, &observed, &[], false, None),
                Err(e) => self.publish_error(error_chain(&e)),
            }
            return PassEnd::Settled;
        };
        let observed = match self.observe().await {
            Ok(observed) => observed,
            Err(e) => {
                let text = error_chain(&e);
                tracing::warn!(error = %text, "reconcile pass could not read the host");
                self.publish_error(text);
                return PassEnd::Settled;
            }
        };
        let mut facts = self.facts(&snapshot, &observed).await;
        let mut waiting_reason = None;
        if let Some(search) = &self.host_loss {
            let view = search.look(&snapshot.state, &observed.gone).await;
            if view.reason != self.last_host_loss_reason.lock().clone() {
                if let Some(reason) = &view.reason {
                    tracing::warn!(waiting = view.waiting.len(), reason = %reason, "host loss: guests wait");
                }
                *self.last_host_loss_reason.lock() = view.reason.clone();
            }
            facts.host_loss = view.sources;
            facts.awaiting_recovery = view.waiting;
            waiting_reason = view.reason;
        }
        let the_plan = plan(&snapshot.state, &observed.guests, &facts);
        self.applier.record_findings(&the_plan.findings).await;
        if the_plan.actions.is_empty() {
            let converged = the_plan.is_converged();
            self.publish(
                Some(&snapshot),
                &observed,
                &the_plan.findings,
                converged,
                waiting_reason,
            );
            return PassEnd::Settled;
        }
        tracing::info!(actions = the_plan.actions.len(), "reconcile pass acting");
        let report = self
            .applier
            .apply(
                &the_plan,
                Origin {
                    request_id: snapshot.request_id.clone(),
                    correlation_id: snapshot.correlation_id.clone(),
                },
            )
            .await;
        let observed = self.observe().await.unwrap_or(observed);
        let first_error = report
            .outcomes
            .iter()
            .find_map(|o| o.error.clone())
            .or(waiting_reason);
        self.status.send_modify(|s| s.acting_passes += 1);
        // Converged only if a fresh plan has nothing left to do.
        let again = plan(
            &snapshot.state,
            &observed.guests,
            &Facts {
                start_failures: self.applier.failures(&snapshot.state.guests).await.start,
                restart_limit: self.restart_limit,
                lost: lost_by_guest(&observed),
                migrated: migrated_by_guest(&observed),
                vms: vms_by_guest(&observed),
                gone: observed.gone.clone(),
                awaiting_recovery: facts.awaiting_recovery.clone(),
                hot_places: facts.hot_places.clone(),
                share_bounds: facts.share_bounds,
                ..Facts::default()
            },
        );
        let all_ok = report.all_ok();
        self.publish(
            Some(&snapshot),
            &observed,
            &again.findings,
            again.is_converged() && all_ok,
            first_error,
        );
        let failed = report.outcomes.iter().filter(|o| o.error.is_some()).count();
        let succeeded = report.outcomes.len() - failed;
        pass_end(!again.actions.is_empty(), succeeded, failed)
    }

    /// What the journal and the agent's memory add to `observed` for one pass (no host loss
    /// yet: the pass adds it).
    async fn facts(&self, snapshot: &DesiredSnapshot, observed: &Observed) -> Facts {
        let failures = self.applier.failures(&snapshot.state.guests).await;
        Facts {
            busy: snapshot
                .state
                .guests
                .iter()
                .map(|g| g.guest_id)
                .filter(|g| self.applier.is_busy(*g))
                // A guest whose container vanished mid-read is judged next pass.
                .chain(observed.unsettled.iter().copied())
                .collect(),
            start_failures: failures.start,
            restart_limit: self.restart_limit,
            tokenless: self
                .applier
                .tokenless(&observed.guests, &observed.vms)
                .await,
            access_stale: self
                .applier
                .access_stale(
                    &snapshot.state.guests,
                    snapshot.plan.as_ref().map(|p| &p.plan),
                )
                .await,
            lost: lost_by_guest(observed),
            migrated: migrated_by_guest(observed),
            vms: vms_by_guest(observed),
            gone: observed.gone.clone(),
            recover_failures: failures.recover,
            host_loss: BTreeMap::new(),
            awaiting_recovery: BTreeSet::new(),
            hot_places: self.hot_places(snapshot),
            share_bounds: snapshot
                .plan
                .as_ref()
                .and_then(|p| p.plan.guest_share)
                .unwrap_or_default(),
        }
    }

    /// Where `snapshot`'s hot volumes may go: the storages its signed plan classes.
    fn hot_places(&self, snapshot: &DesiredSnapshot) -> HotPlaces {
        HotPlaces::new(
            &snapshot.state,
            snapshot.plan.as_ref().map(|p| &p.plan),
            self.applier.provisioner().root_storage().as_str(),
        )
    }

    fn publish_error(&self, error: String) {
        self.status.send_modify(|s| {
            s.passes += 1;
            s.last_error = Some(error);
        });
    }

    fn publish(
        &self,
        snapshot: Option<&DesiredSnapshot>,
        observed: &Observed,
        findings: &[Finding],
        converged: bool,
        error: Option<String>,
    ) {
        // A lost guest is reported under the vmid the journal recorded for it; a stranger
        // that took that vmid meanwhile is left out of the report (it is audited as an
        // orphan), since a report names each vmid once.
        let lost_vmids: std::collections::BTreeSet<u32> =
            observed.lost.iter().map(|l| l.vmid).collect();
        // Nothing is observed of a lost or migrated guest here: its kind is the one its desired
        // state gives (a guest is never converted from one kind to the other).
        let desired_kind = |guest_id: uuid::Uuid| {
            snapshot
                .and_then(|s| s.state.guests.iter().find(|g| g.guest_id == guest_id))
                .map_or(GuestKind::Lxc, |g| g.kind)
        };
        let lost = observed
            .lost
            .iter()
            .map(|l| (l.guest_id, l.vmid, GuestStatus::Lost))
            .chain(
                observed
                    .migrated
                    .iter()
                    .map(|m| (m.guest_id, m.vmid, GuestStatus::Migrated)),
            )
            .map(|(guest_id, vmid, status)| GuestReport {
                guest_id: Some(guest_id),
                vmid,
                kind: desired_kind(guest_id),
                hostname: String::new(),
                status,
                resources: None,
                controller_digest: None,
                controller_expected: None,
                addresses: Vec::new(),
            });
        let guests = observed
            .guests
            .iter()
            .filter(|o| !lost_vmids.contains(&o.vmid))
            .map(|o| GuestReport {
                guest_id: o.guest_id,
                vmid: o.vmid,
                kind: GuestKind::Lxc,
                hostname: o.hostname.clone().unwrap_or_default(),
                status: reported_status(o, findings, snapshot.is_some()),
                resources: reported_resources(o),
                controller_digest: None,
                controller_expected: None,
                addresses: o.addresses.iter().map(ToString::to_string).collect(),
            })
            .chain(lost)
            .chain(observed.vms.iter().map(|v| {
                GuestReport {
                    guest_id: Some(v.guest_id),
                    vmid: v.vmid,
                    kind: GuestKind::Qemu,
                    hostname: snapshot
                        .and_then(|s| s.state.guests.iter().find(|g| g.guest_id == v.guest_id))
                        .map(|g| g.hostname.clone())
                        .unwrap_or_default(),
                    status: reported_status(&v.guest, findings, snapshot.is_some()),
                    resources: reported_resources(&v.guest),
                    controller_digest: None,
                    controller_expected: None,
                    addresses: v.guest.addresses.iter().map(ToString::to_string).collect(),
                }
            }))
            .collect();
        let refused = snapshot.map_or_else(Vec::new, |s| {
            // A guest of an unknown kind first: it is refused whole, before any of its fields.
            s.unknown_kinds
                .iter()
                .cloned()
                .chain(super::refusals::of(
                    &s.state.guests,
                    findings,
                    &s.refused,
                    s.plan.as_ref().map(|p| &p.plan),
                ))
                .take(bosun_proto::refused::MAX_REFUSED)
                .collect()
        });
        // A generation with refusals is never applied (decision 0065).
        let converged = converged && refused.is_empty();
        let addresses = observed
            .guests
            .iter()
            .chain(observed.vms.iter().map(|v| &v.guest))
            .filter(|o| !o.addresses.is_empty())
            .filter_map(|o| o.guest_id.map(|g| (g.to_string(), o.addresses.clone())))
            .collect();
        self.status.send_modify(|s| {
            s.passes += 1;
            s.guests = guests;
            s.addresses = addresses;
            s.last_error = error;
            s.refused = refused;
            if let Some(snapshot) = snapshot {
                s.generation = snapshot.generation;
                if converged {
                    s.applied_generation = snapshot.generation;
                }
            }
        });
    }
}

/// How a guest the pass observed is reported: `orphaned` (once desired state is known) or
/// `broken` by the pass's findings, else its power.
fn reported_status(
    o: &super::plan::ObservedGuest,
    findings: &[Finding],
    desired_known: bool,
) -> GuestStatus {
    let orphan = findings
        .iter()
        .any(|f| matches!(f, Finding::Orphaned { vmid, .. } if *vmid == o.vmid));
    let broken = findings
        .iter()
        .any(|f| matches!(f, Finding::Broken { vmid, .. } if *vmid == o.vmid));
    if orphan && desired_known {
        GuestStatus::Orphaned
    } else if broken {
        GuestStatus::Broken
    } else {
        match o.power {
            ObservedPower::Running => GuestStatus::Running,
            ObservedPower::Stopped => GuestStatus::Stopped,
            ObservedPower::Other => GuestStatus::Unknown,
        }
    }
}

/// A guest's resources as Proxmox holds them, when all three read.
fn reported_resources(o: &super::plan::ObservedGuest) -> Option<GuestResources> {
    match (o.cores, o.memory_mib, o.rootfs_gib) {
        (Some(cores), Some(memory_mib), Some(rootfs_gib)) => Some(GuestResources {
            cores,
            memory_mib,
            rootfs_gib,
        }),
        _ => None,
    }
}

/// Reports a guest `provisioning` from the moment its container is about to be made until the
/// pass that makes it publishes what it observed (DESIGN §4: the report says what is going on).
fn provisioning_reporter(
    status: watch::Sender<ReconcileStatus>,
) -> super::provision::ProvisioningHook {
    Arc::new(move |spec, vmid| {
        status.send_modify(|s| {
            s.guests
                .retain(|g| g.vmid != vmid && g.guest_id != Some(spec.guest_id));
            s.guests.push(GuestReport {
                guest_id: Some(spec.guest_id),
                vmid,
                kind: spec.kind,
                hostname: spec.hostname.clone(),
                status: GuestStatus::Provisioning,
                resources: None,
                controller_digest: None,
                controller_expected: None,
                addresses: Vec::new(),
            });
        });
    })
}
