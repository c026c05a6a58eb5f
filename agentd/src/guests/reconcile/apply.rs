//! The applier: carries out a [`Plan`] through the per-guest queue, one
//! journaled operation per action, and reports what it found.
//!
//! Actions of one guest run in plan order inside one queue entry; guests run
//! in parallel up to the queue's bound. Every action asks the gate first
//! (`Authority::DesiredState`); the planner never plans a destructive one, and
//! the gate would refuse it if it did.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestKind;
use bosun_pve::{Pve, PveQemu, Vmid};
use parking_lot::Mutex;
use serde_json::json;
use uuid::Uuid;

use super::failures::{FailureBook, Failures};
use super::plan::{Action, Finding, ObservedGuest, Plan};
use super::provision::Provisioner;
use crate::guests::queue::{GuestKey, GuestQueue};
use crate::ops::journal::{AuditEvent, FailureKind, JournalHandle, NewOperation, OpStatus};
use crate::ops::operation::{OpJournal, Origin, StepError};
use crate::trust::gate::{self, Action as GateAction, Authority, GateRequest, Provenance, Target};

/// How one guest's actions went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestOutcome {
    /// The guest.
    pub guest_id: Uuid,
    /// The actions attempted, by name.
    pub actions: Vec<&'static str>,
    /// The first failure, if any.
    pub error: Option<String>,
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Per guest that had actions.
    pub outcomes: Vec<GuestOutcome>,
}

impl ApplyReport {
    /// Whether any Proxmox mutation was attempted.
    pub fn acted(&self) -> bool {
        !self.outcomes.is_empty()
    }

    /// Whether every action succeeded.
    pub fn all_ok(&self) -> bool {
        self.outcomes.iter().all(|o| o.error.is_none())
    }
}

/// Carries out plans.
pub struct Applier<P: Pve> {
    pve: Arc<P>,
    journal: JournalHandle,
    queue: GuestQueue,
    provisioner: Provisioner<P>,
    memory: Arc<Mutex<Memory>>,
    /// Failed starts and DR restores per guest, kept in the journal.
    failures: Arc<FailureBook>,
    /// The backup tiers a lost guest is restored from (the newest verified archive).
    tiers: Option<tokio::sync::watch::Receiver<crate::data::backup::tiers::TierPlan>>,
    /// Checks an archive before a DR restore takes it.
    prover: Option<crate::data::backup::ArchiveProver>,
}

/// What the applier remembers between passes.
#[derive(Debug, Default)]
struct Memory {
    reported: BTreeSet<String>,
}

impl<P: Pve> std::fmt::Debug for Applier<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Applier")
            .field("queue", &self.queue)
            .field("provisioner", &self.provisioner)
            .finish()
    }
}

impl<P: Pve> Clone for Applier<P> {
    fn clone(&self) -> Self {
        Self {
            pve: Arc::clone(&self.pve),
            journal: self.journal.clone(),
            queue: self.queue.clone(),
            provisioner: self.provisioner.clone(),
            memory: Arc::clone(&self.memory),
            failures: Arc::clone(&self.failures),
            tiers: self.tiers.clone(),
            prover: self.prover.clone(),
        }
    }
}

impl<P: PveQemu + 'static> Applier<P> {
    /// An applier running through `queue`.
    pub fn new(
        pve: Arc<P>,
        journal: JournalHandle,
        queue: GuestQueue,
        provisioner: Provisioner<P>,
    ) -> Self {
        Self {
            pve,
            failures: Arc::new(FailureBook::new(journal.clone())),
            journal,
            queue,
            provisioner,
            memory: Arc::default(),
            tiers: None,
            prover: None,
        }
    }

    /// Restores lost guests from `tiers` (the host's DR policy decides whether it does).
    pub fn with_tiers(
        mut self,
        tiers: tokio::sync::watch::Receiver<crate::data::backup::tiers::TierPlan>,
        prover: crate::data::backup::ArchiveProver,
    ) -> Self {
        self.tiers = Some(tiers);
        self.prover = Some(prover);
        self
    }

    /// Consecutive failed starts and DR restores per guest that hold under `guests` (the
    /// desired ones), from the journal ([`FailureBook`]).
    pub async fn failures(&self, guests: &[bosun_proto::desired::GuestSpec]) -> Failures {
        self.failures.read(guests).await
    }

    /// The provisioner the applier builds guests with.
    pub fn provisioner(&self) -> &Provisioner<P> {
        &self.provisioner
    }

    /// The queue the applier uses.
    pub fn queue(&self) -> &GuestQueue {
        &self.queue
    }

    /// A new desired generation arrived: a guest still broken under it is audited again.
    /// Its failure counts stay (they are kept per guest spec, [`FailureBook`]).
    pub fn new_generation(&self) {
        self.memory
            .lock()
            .reported
            .retain(|key| !key.starts_with("broken:"));
    }

    /// The desired guests this agent provisioned that hold no local-API token, when
    /// provisioning has a bootstrap to deliver (see [`Facts::tokenless`](super::plan::Facts::tokenless)).
    pub async fn tokenless(
        &self,
        guests: &[ObservedGuest],
        vms: &[super::observe::ObservedVm],
    ) -> BTreeSet<Uuid> {
        if !self.provisioner.has_post_start() {
            return BTreeSet::new();
        }
        // One read for every guest: a pass wakes the journal once, not once per guest.
        let holding = match self.journal.guests_with_tokens().await {
            Ok(holding) => holding,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "could not read which guests hold tokens; bootstrap delivery waits");
                return BTreeSet::new();
            }
        };
        // A guest adopted without a bootstrap gets none: its signed job said so.
        let refused = match self.journal.adopted_without_bootstrap().await {
            Ok(refused) => refused,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "could not read which adopted guests take no bootstrap; bootstrap delivery waits");
                return BTreeSet::new();
            }
        };
        guests
            .iter()
            .filter_map(|o| o.guest_id)
            .chain(vms.iter().map(|v| v.guest_id))
            .filter(|guest_id| {
                let id = guest_id.to_string();
                !holding.contains(&id) && !refused.contains(&id)
            })
            .collect()
    }

    /// The desired guests holding a token whose bootstrap carries other SSH keys than `plan`
    /// trusts for them (none: no key), when provisioning has a bootstrap to deliver
    /// (decision 0107). A journal that cannot be read delays the delivery to a later pass.
    pub async fn access_stale(
        &self,
        guests: &[bosun_proto::desired::GuestSpec],
        plan: Option<&bosun_proto::data_plan::DataPlan>,
    ) -> BTreeSet<Uuid> {
        if !self.provisioner.has_post_start() {
            return BTreeSet::new();
        }
        let read = async {
            Ok::<_, crate::ops::journal::JournalError>((
                self.journal.guests_with_tokens().await?,
                self.journal.guest_access().await?,
            ))
        };
        let (holding, delivered) = match read.await {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "could not read which keys guests hold; key delivery waits");
                return BTreeSet::new();
            }
        };
        guests
            .iter()
            .filter(|g| holding.contains(&g.guest_id.to_string()))
            .filter(|g| {
                let keys = plan.map_or(&[][..], |p| {
                    p.guest_keys(g.guest_id, &g.customer.customer_id)
                });
                crate::guests::credentials::bootstrap::delivered_differs(
                    delivered.get(&g.guest_id.to_string()),
                    keys,
                )
            })
            .map(|g| g.guest_id)
            .collect()
    }

    /// Whether a guest has queued or running work.
    pub fn is_busy(&self, guest_id: Uuid) -> bool {
        self.queue.is_busy(&GuestKey::guest(guest_id))
    }

    /// Audits each finding once (orphans, refused shrinks, broken guests, bulk volumes with
    /// no place).
    pub async fn record_findings(&self, findings: &[Finding]) {
        for finding in findings {
            let Some((key, mut event)) = super::finding_audit::audit_of(finding) else {
                continue;
            };
            if !self.memory.lock().reported.insert(key) {
                continue;
            }
            if event.detail.is_null() {
                event.detail = json!({});
            }
            tracing::warn!(event = %event.event, vmid = event.vmid, guest_id = event.guest_id.as_deref(), "reconcile finding");
            if let Err(e) = self.journal.append_audit(event).await {
                tracing::error!(error = %error_chain(&e), "failed to audit a reconcile finding");
            }
        }
    }

    /// Runs `plan`'s actions, per guest through the queue, and waits for them; `origin` is
    /// recorded on the operations they begin.
    pub async fn apply(&self, plan: &Plan, origin: Origin) -> ApplyReport {
        let mut per_guest: BTreeMap<Uuid, Vec<Action>> = BTreeMap::new();
        for action in &plan.actions {
            per_guest
                .entry(action.guest_id())
                .or_default()
                .push(action.clone());
        }
        let mut waiting = Vec::new();
        for (guest_id, actions) in per_guest {
            let this = self.clone();
            let origin = origin.clone();
            let names: Vec<&'static str> = actions.iter().map(Action::name).collect();
            let work = async move {
                let mut error = None;
                for action in actions {
                    if let Err(e) = this.run_action(&action, origin.clone()).await {
                        error = Some(e);
                        break;
                    }
                }
                error
            };
            match self.queue.submit(GuestKey::guest(guest_id), work) {
                Ok(op) => waiting.push((guest_id, names, op)),
                Err(e) => tracing::info!(%guest_id, error = %e, "not queued"),
            }
        }
        let mut report = ApplyReport::default();
        for (guest_id, actions, op) in waiting {
            let error = match op.await {
                Ok(error) => error,
                Err(e) => Some(error_chain(&e)),
            };
            report.outcomes.push(GuestOutcome {
                guest_id,
                actions,
                error,
            });
        }
        report
    }

    /// Asks the gate whether the desired state may take `action` on the guest at `vmid`,
    /// and checks that guest is still the one the agent created for the action's guest id
    /// (the identity it wrote), looked at right before acting (DESIGN §5).
    async fn admit(
        &self,
        action: &Action,
        gate_action: GateAction,
        vmid: u32,
    ) -> Result<Vmid, String> {
        let guest_id = action.guest_id();
        let provenance = self
            .journal
            .provenance(vmid)
            .await
            .map_err(|e| error_chain(&e))?;
        let request = GateRequest {
            action: gate_action,
            target: Target::Guest { vmid },
            authority: Authority::DesiredState,
            provenance: Provenance::from_journal(provenance.as_ref()),
        };
        let decision = gate::decide(&request);
        if !decision.is_allowed() {
            let _ = self
                .journal
                .append_audit(decision.audit_event(&request))
                .await;
            return Err(format!(
                "gate denied {gate_action:?}: {}",
                decision.reason()
            ));
        }
        let pve_vmid = Vmid::new(vmid).map_err(|e| e.to_string())?;
        let bound = provenance
            .as_ref()
            .filter(|p| p.guest_id() == Some(guest_id.to_string().as_str()));
        let kind = action.kind();
        let ours = match bound {
            Some(p) => {
                let holder = match kind {
                    GuestKind::Lxc => {
                        super::lookup::holder(&*self.pve, pve_vmid, p.identity()).await
                    }
                    GuestKind::Qemu => {
                        super::lookup::vm_holder(&*self.pve, pve_vmid, p.identity()).await
                    }
                };
                holder.map_err(|e| error_chain(&e))? == super::lookup::Holder::Ours
            }
            None => false,
        };
        if !ours {
            tracing::warn!(%guest_id, vmid, kind = kind.as_str(), action = action.name(), "target_mismatch: the guest at the vmid is not the one the agent created; not touched");
            return Err(format!(
                "target_mismatch: {} {vmid} is not guest {guest_id}; not touched",
                match kind {
                    GuestKind::Lxc => "CT",
                    GuestKind::Qemu => "VM",
                }
            ));
        }
        Ok(pve_vmid)
    }

    async fn run_action(&self, action: &Action, origin: Origin) -> Result<(), String> {
        if let Action::Provision { spec } = action {
            return self
                .provisioner
                .provision(spec, origin)
                .await
                .map(|_| ())
                .map_err(|e| error_chain(&e));
        }
        if let Action::Recover {
            spec,
            lost_vmid,
            source,
        } = action
        {
            let result = self
                .recover(spec, *lost_vmid, source.as_deref(), origin)
                .await;
            self.failures
                .note(spec.guest_id, FailureKind::Recover, result.is_ok())
                .await;
            return result;
        }
        if let Action::DeliverBootstrap { spec, vmid } = action {
            let vmid = Vmid::new(*vmid).map_err(|e| e.to_string())?;
            return self
                .provisioner
                .deliver_post_start(spec, vmid, origin)
                .await
                .map_err(|e| error_chain(&e));
        }
        let (gate_action, vmid) = match action {
            Action::SetSpec { vmid, .. } => (GateAction::SetSpec, *vmid),
            Action::GrowRootfs { vmid, .. } => (GateAction::ResizeUp, *vmid),
            Action::GuardNetwork { vmid, .. } => (GateAction::GuardNetwork, *vmid),
            Action::Start { vmid, .. } => (GateAction::StartGuest, *vmid),
            Action::Stop { vmid, .. } => (GateAction::StopGuest, *vmid),
            Action::Provision { .. } | Action::DeliverBootstrap { .. } | Action::Recover { .. } => {
                return Ok(());
            }
        };
        let guest_id = action.guest_id();
        let pve_vmid = self.admit(action, gate_action, vmid).await?;
        let op = OpJournal::begin_correlated(
            &self.journal,
            NewOperation {
                kind: action.op_kind(),
                guest_id: Some(guest_id.to_string()),
                vmid: Some(vmid),
                job_id: None,
                request_id: origin.request_id,
            },
            origin.correlation_id,
        )
        .await
        .map_err(|e| error_chain(&e))?;
        let result = self.pve_action(action, &op, pve_vmid).await;
        if let Action::Start { .. } = action {
            self.failures
                .note(guest_id, FailureKind::Start, result.is_ok())
                .await;
        }
        match result {
            Ok(()) => {
                let _ = op.finish(OpStatus::Done, None).await;
                Ok(())
            }
            Err(e) => {
                let text = error_chain(&e);
                tracing::warn!(%guest_id, vmid, action = action.name(), error = %text, "reconcile action failed");
                let _ = op.finish(OpStatus::Failed, Some(text.clone())).await;
                Err(text)
            }
        }
    }

    /// Guest-loss DR: the lost guest restored from `known` (host loss: the archive the
    /// plan found on PBS), else the fastest surviving tier's newest backup of it. A failure
    /// is audited; the guest stays lost.
    async fn recover(
        &self,
        spec: &bosun_proto::desired::GuestSpec,
        lost_vmid: u32,
        known: Option<&crate::data::recovery::BackupSource>,
        origin: Origin,
    ) -> Result<(), String> {
        let guest_id = spec.guest_id.to_string();
        let spec = &super::lost_kind::kind_to_recover(&self.journal, spec, lost_vmid, known).await;
        let attempt = async {
            let Some(spec) = spec else {
                return Err(format!(
                    "the archive found for the lost guest names no kind of guest: {}",
                    known.map(|s| s.archive.to_string()).unwrap_or_default()
                ));
            };
            let source = match known {
                Some(source) => source.clone(),
                None => {
                    let plan = match &self.tiers {
                        Some(tiers) => tiers.borrow().clone(),
                        None => return Err("no backup tiers to restore from".to_owned()),
                    };
                    let prover = self
                        .prover
                        .as_ref()
                        .ok_or("no archive prover: archives cannot be checked before a restore")?;
                    // Each archive is proven as one of the guest's kind, right before its
                    // restore: a VM never comes back from a container's archive (0118, 0121).
                    crate::data::recovery::newest_surviving_as(
                        &*self.pve,
                        &self.journal,
                        prover,
                        (&guest_id, spec.kind),
                        &plan,
                    )
                    .await?
                }
            };
            let lost_since = self
                .journal
                .lost_since(guest_id.clone())
                .await
                .map_err(|e| error_chain(&e))?
                .unwrap_or_else(jiff::Timestamp::now);
            let recovery = super::provision::Recovery {
                lost_vmid,
                source,
                lost_since,
                trigger: if known.is_some() { "host_loss" } else { "auto" },
            };
            self.provisioner
                .recover(spec, recovery, origin)
                .await
                .map(|_| ())
                .map_err(|e| error_chain(&e))
        };
        let result = attempt.await;
        if let Err(reason) = &result {
            tracing::warn!(%guest_id, lost_vmid, error = %reason, "DR restore of a lost guest failed");
            let mut event = AuditEvent::new("guest.restore_failed");
            event.vmid = Some(lost_vmid);
            event.guest_id = Some(guest_id.clone());
            event.detail = json!({ "reason": reason });
            let _ = self.journal.append_audit(event).await;
        }
        result
    }

    async fn pve_action(
        &self,
        action: &Action,
        op: &OpJournal,
        vmid: Vmid,
    ) -> Result<(), StepError> {
        let pve = &*self.pve;
        if action.kind() == GuestKind::Qemu {
            return super::apply_vm::vm_action(pve, action, op, vmid).await;
        }
        super::apply_ct::ct_action(pve, action, op, vmid).await
    }
}
