//! The identity reset of a DR restore whose source may still run
//! ([`crate::data::recovery::IdentityPlan::reset_in_guest`], decision 0027): the restored guest
//! must not reach the bridge with the MAC, machine id or SSH host keys of a guest that may
//! be running elsewhere. Its steps, journaled in the DR operation around the front half:
//!
//! ```text
//!  restore ─► reset_identity ─► size … extensions ─► start_isolated ─► reset_guest_identity ─►
//!  (onboot=0)  (every link down,                     (links still     (helper, pct exec:
//!               fresh MACs)                           down)            host keys removed,
//!                                                                      machine id emptied)
//!  ─► shutdown_isolated ─► links_up ─► start
//!                          (MACs kept,  (its boot makes a new machine id and host keys)
//!                           onboot)
//! ```
//!
//! `pct exec` needs a running container, so the guest runs once with every link down; the
//! reset happens inside it (the container's namespaces, as its root), never on the host
//! through a path the customer's archive could redirect. A resumed operation runs these
//! steps again from `reset_identity` (every link down again, even on a guest a crash left
//! running connected), so a kill between any two of them converges; doing the reset twice
//! costs the guest one more set of fresh keys. Without a helper there is no way into the
//! guest: such a DR is refused before anything is restored
//! (`require_helper`).

use std::collections::BTreeMap;

use bosun_errchain::error_chain;
use bosun_proto::helper::{Request, ResetGuestIdentity, Vmid as HelperVmid};
use bosun_pve::{
    ConfigUpdate, CtConfig, CtOptions, GuestStatus, NetConfig, Op, Pve, Vmid, net_without_hwaddr,
};
use serde_json::json;

use crate::links::helper::HelperClient;
use crate::ops::operation::StepName;
use crate::ops::operation::{OpJournal, StepError};

/// How long the isolated guest is given to shut down cleanly before it is stopped.
const SHUTDOWN_TIMEOUT_SECS: u32 = 60;

/// Every network interface of `config` with its link down and without its MAC (Proxmox
/// makes a fresh one): what `reset_identity` sets before the guest first runs.
pub(super) fn isolated_nets(config: &CtConfig) -> Result<BTreeMap<u8, NetConfig>, String> {
    nets(config, |value| {
        let mut net = net_without_hwaddr(value)?;
        net.link_down = Some(true);
        Ok(net)
    })
}

/// Every network interface of `config` with its link up, keeping its MAC.
fn connected_nets(config: &CtConfig) -> Result<BTreeMap<u8, NetConfig>, String> {
    nets(config, |value| {
        let mut net = net_without_hwaddr(value)?;
        net.hwaddr = bosun_pve::hwaddr_of(value);
        net.link_down = None;
        Ok(net)
    })
}

fn nets(
    config: &CtConfig,
    each: impl Fn(&str) -> Result<NetConfig, String>,
) -> Result<BTreeMap<u8, NetConfig>, String> {
    let mut out = BTreeMap::new();
    for key in config.values.keys() {
        let Some(index) = key.strip_prefix("net").and_then(|i| i.parse::<u8>().ok()) else {
            continue;
        };
        if let Some(value) = config.get_str(key) {
            out.insert(index, each(&value)?);
        }
    }
    Ok(out)
}

/// A DR whose source may still run needs the helper to reach inside the restored guest:
/// without one it is refused before anything is restored, rather than bringing up a second
/// guest with the source's machine id and SSH host keys.
#[expect(
    clippy::result_large_err,
    reason = "StepError is the one error of every journaled step"
)]
pub(super) fn require_helper<'a>(
    op: &OpJournal,
    helper: Option<&'a HelperClient>,
) -> Result<&'a HelperClient, StepError> {
    helper.ok_or_else(|| StepError::Other {
        op_id: op.op_id(),
        step: "reset_guest_identity".into(),
        reason: "the lost guest's source may still run and no [helper] is configured to \
                 reset the restored guest's machine id and SSH host keys: not restored"
            .into(),
    })
}

/// The steps after the front half (see the module docs): the guest, every link down, is
/// started, its identity reset through the helper, shut down, and its links brought up with
/// its fresh MACs kept and `onboot` set. The caller's `start` step follows.
pub(super) async fn reset_in_guest<P: Pve>(
    pve: &P,
    op: &OpJournal,
    helper: Option<&HelperClient>,
    vmid: Vmid,
    onboot: bool,
) -> Result<(), StepError> {
    let helper = require_helper(op, helper)?;
    let other = |step: &str, reason: String| StepError::Other {
        op_id: op.op_id(),
        step: step.into(),
        reason,
    };
    let running = pve
        .ct_status(vmid)
        .await
        .is_ok_and(|s| s.status == GuestStatus::Running);
    if !running {
        op.task(
            pve,
            Op::StartCt,
            StepName::StartIsolated,
            json!({ "vmid": vmid.get(), "links": "down" }),
            pve.start_ct(vmid),
        )
        .await?;
    }
    let guest = HelperVmid::new(u64::from(vmid.get()))
        .map_err(|e| other("reset_guest_identity", e.to_string()))?;
    op.local(
        StepName::ResetGuestIdentity,
        json!({ "vmid": vmid.get(), "reset": ["ssh host keys", "machine id"] }),
        async {
            helper
                .call(&Request::ResetGuestIdentity(ResetGuestIdentity {
                    vmid: guest,
                }))
                .await
                .map(|_| ())
                .map_err(|e| error_chain(&e))
        },
    )
    .await?;
    op.task(
        pve,
        Op::ShutdownCt,
        StepName::ShutdownIsolated,
        json!({ "vmid": vmid.get(), "timeout_secs": SHUTDOWN_TIMEOUT_SECS, "force_stop": true }),
        pve.shutdown_ct(vmid, Some(SHUTDOWN_TIMEOUT_SECS), true),
    )
    .await?;
    let config = op
        .call(
            StepName::ReadConfig,
            json!({ "vmid": vmid.get() }),
            pve.ct_config(vmid),
        )
        .await?;
    let net = connected_nets(&config).map_err(|reason| other("links_up", reason))?;
    let update = ConfigUpdate {
        set: CtOptions {
            onboot: Some(onboot),
            net,
            ..CtOptions::default()
        },
        ..ConfigUpdate::default()
    };
    op.call(
        StepName::LinksUp,
        json!({ "vmid": vmid.get(), "links": update.set.net.len(), "onboot": onboot }),
        pve.update_ct_config(vmid, &update),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(values: serde_json::Value) -> CtConfig {
        let mut values = values;
        values["digest"] = json!("d");
        serde_json::from_value(values).expect("a config")
    }

    #[test]
    fn isolation_takes_every_link_down_with_a_fresh_mac_and_connecting_keeps_the_mac() {
        let restored = config(json!({
            "hostname": "customer",
            "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,firewall=1,type=veth",
            "net3": "name=eth1,bridge=vmbr1,hwaddr=BC:24:11:00:00:02,ip=dhcp,type=veth",
            "netmask": "not an interface",
        }));
        let isolated = isolated_nets(&restored).expect("parses");
        let rendered: Vec<(u8, String)> = isolated
            .iter()
            .map(|(i, n)| (*i, n.to_property_string().expect("renders")))
            .collect();
        assert_eq!(
            rendered,
            vec![
                (
                    0,
                    "name=eth0,bridge=vmbr0,ip=dhcp,firewall=1,link_down=1".to_owned()
                ),
                (3, "name=eth1,bridge=vmbr1,ip=dhcp,link_down=1".to_owned()),
            ]
        );

        let down = config(json!({
            "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:AA:BB:CC,ip=dhcp,firewall=1,link_down=1,type=veth",
        }));
        let up = connected_nets(&down).expect("parses");
        assert_eq!(
            up[&0].to_property_string().expect("renders"),
            "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:AA:BB:CC,ip=dhcp,firewall=1"
        );
    }

    #[test]
    fn an_interface_the_agent_cannot_model_is_refused_not_left_up() {
        let restored = config(json!({ "net0": "name=eth0,bridge=vmbr0,mtu=1400" }));
        assert!(isolated_nets(&restored).is_err());
        // A rate limit is modelled (decision 0100): kept through the isolation.
        let restored = config(json!({ "net0": "name=eth0,bridge=vmbr0,rate=5" }));
        let isolated = isolated_nets(&restored).expect("a rate is modelled");
        assert!(
            isolated[&0]
                .to_property_string()
                .expect("renders")
                .contains("rate=5"),
            "{isolated:?}"
        );
    }
}
