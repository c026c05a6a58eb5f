//! Guests come up and go down in an order (decision 0099): the planner's actions held back until
//! what a guest requires is running (to provision or start it) or until what requires it is
//! stopped (to stop it), and each ordered guest's Proxmox `startup` option, so a node's own
//! start at boot and stop at shutdown follow the same order.
//!
//! The order is the document's ([`bosun_proto::desired::order::boot_order`]): a requirement no
//! guest provides, only stopped guests provide, or that closes a cycle is refused (reported
//! with its reason, [`Finding::OrderRefused`]) and not waited on, so a hub can hold a start
//! only behind a guest the same document runs. A held action is [`Finding::Waiting`]; the pass
//! after its provider starts (or its dependent stops) takes it. A DR restore is never held:
//! ordering does not delay recovery.

use std::collections::{BTreeMap, BTreeSet};

use bosun_proto::desired::order::BootOrder;
use bosun_pve::StartupOrder;
use uuid::Uuid;

use super::plan::{Action, Finding, ObservedGuest, ObservedPower, Plan};

/// Seconds Proxmox waits after starting an ordered guest before the next: none, as the agent
/// starts the next once the first is running (which is when Proxmox's start task ends).
pub const STARTUP_UP_SECS: u32 = 0;
/// Seconds Proxmox gives an ordered guest to shut down: the agent's own shutdown timeout.
pub const STARTUP_DOWN_SECS: u32 = 60;

/// The `startup` an ordered guest should carry; `None` for a guest that provides and requires
/// nothing (its `startup` is left as it is).
pub fn startup_of(order: &BootOrder, guest: Uuid) -> Option<StartupOrder> {
    order.position.get(&guest).map(|position| StartupOrder {
        order: *position,
        up: Some(STARTUP_UP_SECS),
        down: Some(STARTUP_DOWN_SECS),
    })
}

/// Whether `observed`'s `startup` value differs from `want`: a value Proxmox cannot parse, or
/// none, differs from any.
pub fn startup_drifted(observed: Option<&str>, want: StartupOrder) -> bool {
    observed.and_then(StartupOrder::parse) != Some(want)
}

/// The refused requirements of `order`, as findings.
pub fn refusals(order: &BootOrder) -> impl Iterator<Item = Finding> + '_ {
    order.refused.iter().map(|r| Finding::OrderRefused {
        guest_id: r.guest_id,
        requirement: r.requirement.clone(),
        refusal: r.refusal.as_str(),
        reason: r.reason(),
    })
}

/// Holds back the actions of `plan` the order does not allow yet, each reported
/// [`Finding::Waiting`]: a provision or start of a guest while a guest it waits on is not
/// running, a stop while a guest waiting on it runs.
pub fn hold(plan: &mut Plan, order: &BootOrder, observed: &[ObservedGuest]) {
    let running: BTreeSet<Uuid> = observed
        .iter()
        .filter(|o| o.power == ObservedPower::Running)
        .filter_map(|o| o.guest_id)
        .collect();
    let mut waiting: BTreeMap<Uuid, (Vec<Uuid>, bool)> = BTreeMap::new();
    plan.actions.retain(|action| {
        let (guest, stopping) = match action {
            Action::Provision { spec } => (spec.guest_id, false),
            Action::Start { guest_id, .. } => (*guest_id, false),
            Action::Stop { guest_id, .. } => (*guest_id, true),
            _ => return true,
        };
        let on: Vec<Uuid> = if stopping {
            order
                .dependents(guest)
                .filter(|d| running.contains(d))
                .collect()
        } else {
            order
                .waits_on
                .get(&guest)
                .into_iter()
                .flatten()
                .filter(|p| !running.contains(p))
                .copied()
                .collect()
        };
        if on.is_empty() {
            return true;
        }
        waiting.insert(guest, (on, stopping));
        false
    });
    plan.findings.extend(
        waiting
            .into_iter()
            .map(|(guest_id, (on, stopping))| Finding::Waiting {
                guest_id,
                on,
                stopping,
            }),
    );
}

#[cfg(test)]
#[path = "order_tests.rs"]
mod tests;
