//! The `guest-firewall` check: whether the network guard the agent puts on every guest (its
//! firewall on, `firewall=1` on its interfaces, `ipfilter` for static addresses) can be set,
//! and whether it filters anything.

use bosun_pve::{BOSUN_AGENT_ROLE, PveClient};

use super::Plan;
use super::report::{Check, Report};

/// What the agent needs on `/vms` to put the guard on (and read it back).
const GUARD_PRIVILEGES: &[&str] = &["VM.Config.Network", "VM.Audit"];

/// The `guest-firewall` check: fails when the token cannot set a guest's firewall options,
/// warns when the datacenter's firewall is off (nothing is filtered then) or unreadable.
pub(super) async fn guest_firewall(client: &PveClient, plan: &Plan, report: &mut Report) {
    let token = &plan.config.token_id;
    let held = match client.permissions("/vms").await {
        Ok(held) => held,
        Err(e) => {
            report.checks.push(Check::fail(
                "guest-firewall",
                format!(
                    "reading the token's permissions on /vms: {}",
                    bosun_errchain::error_chain(&e)
                ),
                vec![format!(
                    "pveum user token permissions {} --path /vms  # on the node",
                    token.replace('!', " ")
                )],
            ));
            return;
        }
    };
    let missing: Vec<&str> = GUARD_PRIVILEGES
        .iter()
        .copied()
        .filter(|p| !held.contains_key(*p))
        .collect();
    if !missing.is_empty() {
        report.checks.push(Check::fail(
            "guest-firewall",
            format!(
                "the token lacks {} on /vms: the agent cannot turn each new guest's firewall \
                 and ipfilter on (PUT /nodes/NODE/lxc/VMID/firewall/options), so provisioning \
                 fails",
                missing.join(", ")
            ),
            vec![format!(
                "pveum role modify {BOSUN_AGENT_ROLE} --privs \"{}\" --append 1",
                missing.join(",")
            )],
        ));
        return;
    }
    let enable_fix = || {
        vec![
            "allow 8006 and 22 from your management network, and the local API's port (8443) \
             from the guests' bridge, in Datacenter → Firewall and the node's firewall"
                .to_owned(),
            "pvesh set /cluster/firewall/options --enable 1  # on the node, as root".to_owned(),
        ]
    };
    match client.datacenter_firewall().await {
        Ok(dc) if dc.enable => report.checks.push(Check::ok(
            "guest-firewall",
            "the token may set guests' firewall options and the datacenter firewall is on: \
             each guest is held to its MAC, and with static addresses to them",
        )),
        Ok(_) => report.checks.push(Check::warn(
            "guest-firewall",
            "the datacenter firewall is off: the firewall and ipfilter the agent sets on each \
             guest filter nothing, so a guest can speak from any address on the bridge",
            enable_fix(),
        )),
        Err(e) => report.checks.push(Check::warn(
            "guest-firewall",
            format!(
                "cannot tell whether the datacenter firewall is on: {}",
                bosun_errchain::error_chain(&e)
            ),
            match e.status() {
                Some(403) => vec![format!(
                    "pveum acl modify / --tokens '{token}' --roles {BOSUN_AGENT_ROLE} --propagate 0  # Sys.Audit on /"
                )],
                _ => enable_fix(),
            },
        )),
    }
}
