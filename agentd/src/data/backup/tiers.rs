//! The backup tiers the agent runs, planned from the desired state held to the signed data
//! plan ([`crate::data::plan`]: its tiers are the plan's) and, before any plan, the signed
//! retention floor:
//!
//! ```text
//!  tier 0  backup_policy.{schedule, retention} on backup_policy.target (or the configured
//!          storage): the tier the controller quiesces for (`/v1/backup/due`)
//!  tier n  backup_policy.further_tiers[n-1]: a manifest target, on its policy's schedule
//!          and retention
//!  kept    (no plan) a tier the signed floor names that desired state dropped, while its
//!          target is still in the manifest
//! ```
//!
//! Retention is where a hub could destroy backups (pruning deletes them), so each tier's
//! applied retention is the desired one raised to the signed least retention
//! ([`Retention::at_least`]): the plan's tier retention, or before any plan the floor's;
//! without either, or for a tier the floor does not name, nothing is pruned (keep-all).
//!
//! Cadence is where a hub could fill disks and load the node, so each tier runs on the
//! plan's schedule and on the one desired state adds (a more frequent one), but never sooner
//! than the plan's least interval after its last good backup (before any plan, the agent's
//! configured one).

use bosun_proto::data_plan::DataPlan;
use bosun_proto::desired::{DesiredState, Retention, StorageTarget, StorageType};
use bosun_proto::retention::RetentionFloor;
use bosun_pve::StorageId;

use crate::data::storage::naming::target_storage_id;

/// Why a tier without a floor prunes nothing.
pub const HELD_NO_FLOOR: &str = "no signed retention floor: nothing is pruned";
/// Why a tier the floor does not name prunes nothing.
pub const HELD_NOT_IN_FLOOR: &str = "the signed floor does not name this tier: nothing is pruned";
/// Why a tier keeps more than desired state asks.
pub const HELD_BELOW_FLOOR: &str = "desired retention is below the signed floor";
/// Why a tier runs that desired state dropped.
pub const HELD_KEPT: &str = "kept by the signed floor: desired state dropped this tier";
/// Why a tier keeps more than desired state asks, under a plan.
pub const HELD_BELOW_PLAN: &str = "desired retention is below the signed data plan's";
/// Why a tier prunes nothing under a plan: its planned retention keeps all.
pub const HELD_PLAN_KEEPS_ALL: &str = "the signed data plan keeps every backup on this tier";

/// One tier as the agent runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    /// Position, 0 = the first (quiesced) tier.
    pub index: u32,
    /// The manifest target's `durable_id`; `None`: the configured storage.
    pub target: Option<String>,
    /// The kind of the manifest target, if it is one.
    pub kind: Option<StorageType>,
    /// The Proxmox storage the tier writes to.
    pub storage: StorageId,
    /// The tier's calendar event (the signed plan's, under a plan).
    pub schedule: String,
    /// A further calendar event desired state adds (a more frequent one), if any.
    pub extra_schedule: Option<String>,
    /// The least time between two backups of a guest on this tier, in seconds.
    pub min_interval_seconds: u32,
    /// Minutes a controller gets to quiesce (tier 0; 0 for the others, which never wait
    /// for a controller).
    pub quiesce_grace_minutes: u32,
    /// What desired state asks for.
    pub desired: Retention,
    /// What the agent applies.
    pub applied: Retention,
    /// Why `applied` differs from `desired`, or why the tier runs at all.
    pub held: Option<&'static str>,
}

impl Tier {
    /// What the tier's backups are reported under: the target's `durable_id`, else the
    /// storage id.
    pub fn report_key(&self) -> &str {
        self.target.as_deref().unwrap_or(self.storage.as_str())
    }

    /// The calendar events the tier runs on: its own, then the one desired state adds.
    pub fn schedules(&self) -> Vec<&str> {
        std::iter::once(self.schedule.as_str())
            .chain(self.extra_schedule.as_deref())
            .collect()
    }
}

/// The tiers, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TierPlan {
    /// Tier 0 first.
    pub tiers: Vec<Tier>,
    /// Targets the signed floor names that neither desired state nor its manifest still
    /// describe, so they cannot be backed up (reported, never silent).
    pub unplaceable: Vec<String>,
}

impl TierPlan {
    /// Tier `index`, if planned.
    pub fn tier(&self, index: u32) -> Option<&Tier> {
        self.tiers.iter().find(|t| t.index == index)
    }
}

/// Plans the tiers of `desired` (held to `data_plan` when there is one), with `floor` the
/// newest verified signed retention floor (used only without a plan), `configured` the
/// storage of a first tier that names no target and `min_interval_seconds` the least
/// interval without a plan.
pub fn plan(
    desired: &DesiredState,
    data_plan: Option<&DataPlan>,
    floor: Option<&RetentionFloor>,
    configured: &StorageId,
    min_interval_seconds: u32,
) -> TierPlan {
    let mut tiers = Tiers {
        desired,
        configured,
        min_interval_seconds: data_plan
            .map_or(min_interval_seconds, |p| p.backup.min_interval_seconds),
        tiers: Vec::new(),
    };
    if let Some(data_plan) = data_plan {
        tiers.by_data_plan(data_plan);
        return TierPlan {
            tiers: tiers.tiers,
            unplaceable: Vec::new(),
        };
    }
    tiers.by_policy(floor);
    let unplaceable = tiers.kept_by_floor(floor);
    TierPlan {
        tiers: tiers.tiers,
        unplaceable,
    }
}

/// The tiers planned so far, and what each new one is planned from.
struct Tiers<'a> {
    desired: &'a DesiredState,
    configured: &'a StorageId,
    min_interval_seconds: u32,
    tiers: Vec<Tier>,
}

impl<'a> Tiers<'a> {
    /// The manifest's target `id`.
    fn manifest(&self, id: &str) -> Option<&'a StorageTarget> {
        self.desired.storage.iter().find(|t| t.durable_id == id)
    }

    /// Appends the next tier.
    fn push(
        &mut self,
        target: Option<String>,
        schedule: String,
        extra_schedule: Option<String>,
        grace: u32,
        desired: Retention,
        (applied, held): (Retention, Option<&'static str>),
    ) {
        let planned = target.as_deref().and_then(|id| self.manifest(id));
        let kind = planned.map(|t| t.kind);
        let storage = planned.map_or_else(|| self.configured.clone(), target_storage_id);
        let index = u32::try_from(self.tiers.len()).unwrap_or(u32::MAX);
        self.tiers.push(Tier {
            index,
            kind,
            target,
            storage,
            extra_schedule: extra_schedule.filter(|extra| *extra != schedule),
            schedule,
            min_interval_seconds: self.min_interval_seconds,
            quiesce_grace_minutes: grace,
            desired,
            applied,
            held,
        });
    }

    /// The signed data plan's tiers: its first, then its further ones, each held to the plan.
    fn by_data_plan(&mut self, data_plan: &DataPlan) {
        let desired: &'a DesiredState = self.desired;
        let policy = &desired.backup_policy;
        let backup = &data_plan.backup;
        self.push(
            backup.target.clone(),
            backup.schedule.clone(),
            Some(policy.schedule.clone()),
            policy.quiesce_grace_minutes,
            policy.retention,
            held_to(&policy.retention, &backup.retention, HELD_BELOW_PLAN),
        );
        for id in &backup.further_tiers {
            // Validation guarantees the plan's target exists and has a schedule.
            if let (Some(planned), Some(target)) = (data_plan.target(id), self.manifest(id))
                && let Some(schedule) = &planned.policy.schedule
            {
                let (schedule, extra, retention) = (
                    schedule.clone(),
                    target.policy.schedule.clone(),
                    target.policy.retention,
                );
                self.push(
                    Some(id.clone()),
                    schedule,
                    extra,
                    0,
                    retention,
                    held_to(&retention, &planned.policy.retention, HELD_BELOW_PLAN),
                );
            }
        }
    }

    /// The backup policy's tiers, each held to the signed floor.
    fn by_policy(&mut self, floor: Option<&RetentionFloor>) {
        let desired: &'a DesiredState = self.desired;
        let policy = &desired.backup_policy;
        self.push(
            policy.target.clone(),
            policy.schedule.clone(),
            None,
            policy.quiesce_grace_minutes,
            policy.retention,
            applied_retention(&policy.retention, floor, policy.target.as_deref()),
        );
        for id in &policy.further_tiers {
            // Validation guarantees the target exists and has a schedule.
            if let Some(target) = self.manifest(id)
                && let Some(schedule) = &target.policy.schedule
            {
                let (schedule, retention) = (schedule.clone(), target.policy.retention);
                self.push(
                    Some(id.clone()),
                    schedule,
                    None,
                    0,
                    retention,
                    applied_retention(&retention, floor, Some(id)),
                );
            }
        }
    }

    /// The tiers the signed floor keeps that the policy no longer plans (their backups are
    /// kept, so is their schedule); gives the floor's targets the manifest no longer
    /// describes.
    fn kept_by_floor(&mut self, floor: Option<&RetentionFloor>) -> Vec<String> {
        let desired: &'a DesiredState = self.desired;
        let policy = &desired.backup_policy;
        let mut unplaceable = Vec::new();
        for kept in floor.iter().flat_map(|f| &f.tiers) {
            let planned = kept.target.as_deref() == policy.target.as_deref()
                || kept
                    .target
                    .as_ref()
                    .is_some_and(|id| policy.further_tiers.contains(id));
            if planned {
                continue;
            }
            let (applied, _) = applied_retention(&kept.retention, floor, kept.target.as_deref());
            match &kept.target {
                // The floor names the configured storage, and the first tier moved elsewhere.
                None => self.push(
                    None,
                    policy.schedule.clone(),
                    None,
                    0,
                    kept.retention,
                    (applied, Some(HELD_KEPT)),
                ),
                Some(id) => match self.manifest(id) {
                    Some(target) => {
                        let schedule = target
                            .policy
                            .schedule
                            .clone()
                            .unwrap_or_else(|| policy.schedule.clone());
                        self.push(
                            Some(id.clone()),
                            schedule,
                            None,
                            0,
                            kept.retention,
                            (applied, Some(HELD_KEPT)),
                        );
                    }
                    None => unplaceable.push(id.clone()),
                },
            }
        }
        unplaceable
    }
}

/// The retention applied when `desired` is held to the signed `least`, and why it differs.
fn held_to(
    desired: &Retention,
    least: &Retention,
    below: &'static str,
) -> (Retention, Option<&'static str>) {
    if least.keeps_all() {
        return (
            Retention::default(),
            (!desired.keeps_all()).then_some(HELD_PLAN_KEEPS_ALL),
        );
    }
    let applied = desired.at_least(least);
    (applied, (applied != *desired).then_some(below))
}

/// The retention applied to the tier on `target` and why it differs from `desired`.
fn applied_retention(
    desired: &Retention,
    floor: Option<&RetentionFloor>,
    target: Option<&str>,
) -> (Retention, Option<&'static str>) {
    if desired.keeps_all() {
        return (*desired, None);
    }
    let Some(floor) = floor else {
        return (Retention::default(), Some(HELD_NO_FLOOR));
    };
    let Some(tier) = floor.tier(target) else {
        return (Retention::default(), Some(HELD_NOT_IN_FLOOR));
    };
    held_to(desired, &tier.retention, HELD_BELOW_FLOOR)
}

#[cfg(test)]
mod tests;

/// Follows desired state: offers each signed floor to `keeper`, plans the tiers and
/// publishes the plan (the first one before returning, so backups never start without
/// one). A changed plan is audited (`backup.tiers`).
pub async fn spawn_feed(
    tasks: &crate::runtime::supervisor::Supervisor,
    mut desired: tokio::sync::watch::Receiver<
        Option<std::sync::Arc<crate::data::desired::DesiredSnapshot>>,
    >,
    keeper: std::sync::Arc<super::FloorKeeper>,
    configured: StorageId,
    min_interval_seconds: u32,
    journal: crate::ops::journal::JournalHandle,
    cancel: tokio_util::sync::CancellationToken,
) -> tokio::sync::watch::Receiver<TierPlan> {
    let first = desired.borrow_and_update().clone();
    let mut current = replan(first.as_deref(), &keeper, &configured, min_interval_seconds).await;
    let (tx, rx) = tokio::sync::watch::channel(current.clone());
    tasks.spawn("tier_feed", async move {
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                changed = desired.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
            }
            let snapshot = desired.borrow_and_update().clone();
            let plan = replan(
                snapshot.as_deref(),
                &keeper,
                &configured,
                min_interval_seconds,
            )
            .await;
            if plan != current {
                audit_plan(&journal, &plan).await;
                tx.send_replace(plan.clone());
                current = plan;
            }
        }
    });
    rx
}

async fn replan(
    desired: Option<&crate::data::desired::DesiredSnapshot>,
    keeper: &super::FloorKeeper,
    configured: &StorageId,
    min_interval_seconds: u32,
) -> TierPlan {
    let Some(desired) = desired else {
        return TierPlan::default();
    };
    if let Some(verified) = &desired.plan {
        // The plan's tier retention is the least retention: no floor document is read.
        return plan(
            &desired.state,
            Some(&verified.plan),
            None,
            configured,
            min_interval_seconds,
        );
    }
    if let Some(signed) = &desired.state.backup_policy.floor {
        // Refusals are audited by the keeper; the stored floor stays either way.
        keeper.offer(signed).await;
    }
    let floor = match keeper.current().await {
        Ok(floor) => floor,
        Err(e) => {
            tracing::error!(error = %bosun_errchain::error_chain(&e), "the retention floor is unreadable; pruning nothing");
            None
        }
    };
    let floor = floor.filter(|f| {
        // A floor from before a restore onto this host names the old host: not ours.
        let ours = f.host_id == keeper.host_id();
        if !ours {
            tracing::warn!(host_id = %f.host_id, "the stored retention floor names another host; pruning nothing");
        }
        ours
    });
    plan(
        &desired.state,
        None,
        floor.as_ref(),
        configured,
        min_interval_seconds,
    )
}

async fn audit_plan(journal: &crate::ops::journal::JournalHandle, plan: &TierPlan) {
    let tiers: Vec<serde_json::Value> = plan
        .tiers
        .iter()
        .map(|t| {
            serde_json::json!({
                "tier": t.index,
                "target": t.report_key(),
                "storage": t.storage.as_str(),
                "schedule": t.schedule,
                "extra_schedule": t.extra_schedule,
                "min_interval_seconds": t.min_interval_seconds,
                "desired": t.desired,
                "applied": t.applied,
                "held": t.held,
            })
        })
        .collect();
    let event = crate::ops::journal::AuditEvent {
        detail: serde_json::json!({ "tiers": tiers, "unplaceable": plan.unplaceable }),
        ..crate::ops::journal::AuditEvent::new("backup.tiers")
    };
    if let Err(e) = journal.append_audit(event).await {
        tracing::error!(error = %bosun_errchain::error_chain(&e), "could not audit the backup tiers");
    }
}
