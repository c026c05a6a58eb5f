//! The desired state the agent acts on: the hub's document held to the signed data plan.
//!
//! ```text
//!  storage targets   the plan's, with their whole identity and state; from the hub's entry
//!                    of the same (type, durable_id) and identity only: its sealed
//!                    credentials, its label, a longer retention and a further schedule
//!  hub's targets     not in the plan, or in it with another identity: refused
//!  tiers             the plan's, in its order (tier 0's target included); the hub's
//!                    retention and schedule adjust them within the plan (tiers.rs)
//!  hub's tiers       naming a target that is not one of the plan's tiers: refused
//!  no plan           no target at all; tier 0 on the configured storage, as the hub asks,
//!                    with the signed retention floor (the way before plans)
//!  restore tests     the hub's policy, turned on and at least as frequent as the plan's
//!                    `restore_test_days` when the plan names it (decision 0051)
//!  verification      likewise: on, and at least as frequent as the plan's `verify_hours`
//!                    (decision 0079)
//! ```
//!
//! Everything else of the document (guests, DR policy, golden recipe) passes as it is: those
//! may add protection but not move data, or carry signatures of their own.

use bosun_proto::data_plan::DataPlan;
use bosun_proto::desired::{DesiredState, StorageTarget, StorageType};
use bosun_proto::report::TargetReason;

/// A storage target or tier of the hub's document the agent does not act on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Refusal {
    /// The target's `durable_id`, as the hub named it.
    pub durable_id: String,
    /// Its kind, when the hub named a target (not for a tier naming an unknown target).
    pub kind: Option<StorageType>,
    /// Why: [`TargetReason::NotInPlan`] or [`TargetReason::IdentityMismatch`].
    pub reason: TargetReason,
    /// For an identity mismatch, the identity fields that differ from the plan's.
    pub fields: Vec<&'static str>,
    /// Whether a tier (rather than a target) was refused.
    pub tier: bool,
}

/// The hub's document held to the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    /// What the agent acts on.
    pub state: DesiredState,
    /// What it refused, in document order.
    pub refused: Vec<Refusal>,
}

/// Holds `desired` to `plan` (the newest verified data plan for this host, if any).
pub fn apply(desired: &DesiredState, plan: Option<&DataPlan>) -> Effective {
    let mut state = desired.clone();
    let mut refused = Vec::new();
    let Some(plan) = plan else {
        for target in &desired.storage {
            refused.push(Refusal {
                durable_id: target.durable_id.clone(),
                kind: Some(target.kind),
                reason: TargetReason::NotInPlan,
                fields: Vec::new(),
                tier: false,
            });
        }
        refuse_tiers(desired, |_| false, &mut refused);
        state.storage.clear();
        state.backup_policy.target = None;
        state.backup_policy.further_tiers.clear();
        return Effective { state, refused };
    };
    for target in &desired.storage {
        match plan
            .targets
            .iter()
            .find(|p| p.kind == target.kind && p.durable_id == target.durable_id)
        {
            None => refused.push(Refusal {
                durable_id: target.durable_id.clone(),
                kind: Some(target.kind),
                reason: TargetReason::NotInPlan,
                fields: Vec::new(),
                tier: false,
            }),
            Some(planned) => {
                let fields = planned.identity().differences(&target.identity());
                if !fields.is_empty() {
                    refused.push(Refusal {
                        durable_id: target.durable_id.clone(),
                        kind: Some(target.kind),
                        reason: TargetReason::IdentityMismatch,
                        fields,
                        tier: false,
                    });
                }
            }
        }
    }
    state.storage = plan
        .targets
        .iter()
        .map(|planned| {
            let hubs = desired.storage.iter().find(|t| {
                t.kind == planned.kind
                    && t.durable_id == planned.durable_id
                    && t.identity() == planned.identity()
            });
            merged(planned, hubs)
        })
        .collect();
    let planned_tier = |id: &str| {
        plan.backup.target.as_deref() == Some(id)
            || plan.backup.further_tiers.iter().any(|t| t == id)
    };
    refuse_tiers(desired, planned_tier, &mut refused);
    state.backup_policy.target = plan.backup.target.clone();
    state.backup_policy.further_tiers = plan.backup.further_tiers.clone();
    // The plan's tier retention is the floor now; an older floor document means nothing.
    state.backup_policy.floor = None;
    // Restore tests run at least as often as the plan says, whatever the hub turned off.
    state.restore_test_policy = plan.backup.restore_test_policy(state.restore_test_policy);
    // Verification runs at least as often as the plan says, whatever the hub turned off.
    state.verify_policy =
        bosun_proto::verify::effective_policy(plan.backup.verify_hours, state.verify_policy);
    Effective { state, refused }
}

/// The plan's target with what the hub's entry of the same identity may add: sealed
/// credentials (bound to this target, checked when opened), a label, a longer retention and
/// a further schedule (held to the plan's least interval by the scheduler).
fn merged(planned: &StorageTarget, hubs: Option<&StorageTarget>) -> StorageTarget {
    let mut target = planned.clone();
    let Some(hubs) = hubs else {
        return target;
    };
    if hubs.credentials.is_some() {
        target.credentials.clone_from(&hubs.credentials);
    }
    if hubs.label.is_some() {
        target.label.clone_from(&hubs.label);
    }
    target.policy.retention = hubs.policy.retention.at_least(&planned.policy.retention);
    if hubs.policy.schedule.is_some() {
        target.policy.schedule.clone_from(&hubs.policy.schedule);
    }
    target
}

/// Refuses each tier of `desired` whose target `planned` does not accept.
fn refuse_tiers(desired: &DesiredState, planned: impl Fn(&str) -> bool, out: &mut Vec<Refusal>) {
    let policy = &desired.backup_policy;
    for id in policy.target.iter().chain(&policy.further_tiers) {
        if !planned(id) {
            out.push(Refusal {
                durable_id: id.clone(),
                kind: desired
                    .storage
                    .iter()
                    .find(|t| &t.durable_id == id)
                    .map(|t| t.kind),
                reason: TargetReason::NotInPlan,
                fields: Vec::new(),
                tier: true,
            });
        }
    }
}
