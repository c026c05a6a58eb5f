//! The backup tiers the agent runs, planned from desired state and the signed retention
//! floor:
//!
//! ```text
//!  tier 0  backup_policy.{schedule, retention} on backup_policy.target (or the configured
//!          storage): the tier the controller quiesces for (`/v1/backup/due`)
//!  tier n  backup_policy.further_tiers[n-1]: a manifest target, on its policy's schedule
//!          and retention
//!  kept    a tier the signed floor names that desired state dropped, while its target is
//!          still in the manifest
//! ```
//!
//! Retention is where a hub could destroy backups (pruning deletes them), so each tier's
//! applied retention is the desired one raised to the signed floor ([`Retention::at_least`]);
//! without a floor, or for a tier the floor does not name, nothing is pruned (keep-all).
//! Lengthening retention is free; shortening it below the floor, or dropping a tier the
//! floor names, needs a newer signed floor (DESIGN §5).

use bosun_proto::desired::{DesiredState, Retention, StorageType};
use bosun_proto::retention::RetentionFloor;

use crate::pve::StorageId;
use crate::storage::naming::storage_id_of;

/// Why a tier without a floor prunes nothing.
pub const HELD_NO_FLOOR: &str = "no signed retention floor: nothing is pruned";
/// Why a tier the floor does not name prunes nothing.
pub const HELD_NOT_IN_FLOOR: &str = "the signed floor does not name this tier: nothing is pruned";
/// Why a tier keeps more than desired state asks.
pub const HELD_BELOW_FLOOR: &str = "desired retention is below the signed floor";
/// Why a tier runs that desired state dropped.
pub const HELD_KEPT: &str = "kept by the signed floor: desired state dropped this tier";

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
    /// The tier's calendar event.
    pub schedule: String,
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

/// Plans the tiers of `desired`, with `floor` the newest verified signed floor and
/// `configured` the storage of a first tier that names no target.
pub fn plan(
    desired: &DesiredState,
    floor: Option<&RetentionFloor>,
    configured: &StorageId,
) -> TierPlan {
    let policy = &desired.backup_policy;
    let manifest = |id: &str| desired.storage.iter().find(|t| t.durable_id == id);
    let mut tiers = Vec::new();
    let mut push = |target: Option<String>,
                    kind: Option<StorageType>,
                    schedule: String,
                    grace: u32,
                    desired: Retention,
                    kept: bool| {
        let storage = match (&target, kind) {
            (Some(id), Some(kind)) => storage_id_of(kind, id),
            _ => configured.clone(),
        };
        let (applied, held) = applied_retention(&desired, floor, target.as_deref());
        let index = u32::try_from(tiers.len()).unwrap_or(u32::MAX);
        tiers.push(Tier {
            index,
            target,
            kind,
            storage,
            schedule,
            quiesce_grace_minutes: grace,
            desired,
            applied,
            held: if kept { Some(HELD_KEPT) } else { held },
        });
    };
    let first_kind = policy.target.as_deref().and_then(manifest).map(|t| t.kind);
    push(
        policy.target.clone(),
        first_kind,
        policy.schedule.clone(),
        policy.quiesce_grace_minutes,
        policy.retention,
        false,
    );
    for id in &policy.further_tiers {
        // Validation guarantees the target exists and has a schedule.
        if let Some(target) = manifest(id)
            && let Some(schedule) = &target.policy.schedule
        {
            push(
                Some(id.clone()),
                Some(target.kind),
                schedule.clone(),
                0,
                target.policy.retention,
                false,
            );
        }
    }
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
        match &kept.target {
            // The floor names the configured storage, and the first tier moved elsewhere.
            None => push(None, None, policy.schedule.clone(), 0, kept.retention, true),
            Some(id) => match manifest(id) {
                Some(target) => push(
                    Some(id.clone()),
                    Some(target.kind),
                    target
                        .policy
                        .schedule
                        .clone()
                        .unwrap_or_else(|| policy.schedule.clone()),
                    0,
                    kept.retention,
                    true,
                ),
                None => unplaceable.push(id.clone()),
            },
        }
    }
    TierPlan { tiers, unplaceable }
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
    let applied = desired.at_least(&tier.retention);
    let held = (applied != *desired).then_some(HELD_BELOW_FLOOR);
    (applied, held)
}

#[cfg(test)]
mod tests;

/// Follows desired state: offers each signed floor to `keeper`, plans the tiers and
/// publishes the plan (the first one before returning, so backups never start without
/// one). A changed plan is audited (`backup.tiers`).
pub async fn spawn_feed(
    tracker: &tokio_util::task::TaskTracker,
    mut desired: tokio::sync::watch::Receiver<
        Option<std::sync::Arc<crate::reconcile::reconcile_task::DesiredSnapshot>>,
    >,
    keeper: std::sync::Arc<super::FloorKeeper>,
    configured: StorageId,
    journal: crate::journal::JournalHandle,
    cancel: tokio_util::sync::CancellationToken,
) -> tokio::sync::watch::Receiver<TierPlan> {
    let first = desired.borrow_and_update().clone();
    let mut current = replan(first.as_deref(), &keeper, &configured).await;
    let (tx, rx) = tokio::sync::watch::channel(current.clone());
    tracker.spawn(async move {
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
            let plan = replan(snapshot.as_deref(), &keeper, &configured).await;
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
    desired: Option<&crate::reconcile::reconcile_task::DesiredSnapshot>,
    keeper: &super::FloorKeeper,
    configured: &StorageId,
) -> TierPlan {
    let Some(desired) = desired else {
        return TierPlan::default();
    };
    if let Some(signed) = &desired.state.backup_policy.floor {
        // Refusals are audited by the keeper; the stored floor stays either way.
        keeper.offer(signed).await;
    }
    let floor = match keeper.current().await {
        Ok(floor) => floor,
        Err(e) => {
            tracing::error!(error = %bosun_proto::error_chain(&e), "the retention floor is unreadable; pruning nothing");
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
    plan(&desired.state, floor.as_ref(), configured)
}

async fn audit_plan(journal: &crate::journal::JournalHandle, plan: &TierPlan) {
    let tiers: Vec<serde_json::Value> = plan
        .tiers
        .iter()
        .map(|t| {
            serde_json::json!({
                "tier": t.index,
                "target": t.report_key(),
                "storage": t.storage.as_str(),
                "schedule": t.schedule,
                "desired": t.desired,
                "applied": t.applied,
                "held": t.held,
            })
        })
        .collect();
    let event = crate::journal::AuditEvent {
        detail: serde_json::json!({ "tiers": tiers, "unplaceable": plan.unplaceable }),
        ..crate::journal::AuditEvent::new("backup.tiers")
    };
    if let Err(e) = journal.append_audit(event).await {
        tracing::error!(error = %bosun_proto::error_chain(&e), "could not audit the backup tiers");
    }
}
