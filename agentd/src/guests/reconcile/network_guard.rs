//! The network guard on every guest the agent creates (DESIGN §7): a guest speaks only from
//! its own MAC, and from its own addresses where Proxmox knows them.
//!
//! Three settings, each only ever turned on:
//! - `firewall=1` on every interface (`netN`), so Proxmox puts the interface behind its
//!   firewall bridge;
//! - the guest's firewall `enable=1`, which (with Proxmox's default `macfilter`) drops what the
//!   guest sends from any MAC but its interface's own;
//! - `ipfilter=1` when every interface's addresses are static (`ip=a.b.c.d/n`, `ip6=…/n`, or
//!   none of a family): Proxmox's implicit `ipfilter-net<N>` set then holds exactly them (and
//!   the link-local address of the MAC), and what the guest sends from any other source
//!   address is dropped. An interface on `ip=dhcp`, `ip6=auto|dhcp` or `manual` configures no
//!   address Proxmox knows: `ipfilter` would drop every packet it sends from its lease, so such
//!   a guest gets the first two only.
//!
//! None of it filters anything until the operator turns the datacenter's firewall on
//! (`bosunctl pve check` says so). Provisioning and DR run [`guard`] as a front-half step
//! (a failure rolls the new guest back like any other step's); the reconciler runs it for a
//! guest of its own that lacks any of the three ([`needs_guard`]). It never turns anything
//! off: unsigned desired state only adds protection (DESIGN §5).

use std::net::IpAddr;

use bosun_pve::{
    ConfigUpdate, CtConfig, CtOptions, FirewallUpdate, GuestFirewall, NetConfig, Pve, Vmid,
};
use serde_json::json;

use crate::ops::operation::StepName;
use crate::ops::operation::{OpJournal, StepError};

/// A config's interfaces (`net0`…`net31`) with their raw property strings, by index.
fn interfaces(config: &CtConfig) -> Vec<(u8, String)> {
    numbered(config, "net")
}

/// A config's `<prefix>0`…`<prefix>31` values, by index. Walks the config's keys that start
/// with `prefix` (every pass reads every guest's interfaces this way), not 32 look-ups.
pub(super) fn numbered(config: &CtConfig, prefix: &str) -> Vec<(u8, String)> {
    let mut out: Vec<(u8, String)> = config
        .values
        .range::<str, _>((
            std::ops::Bound::Included(prefix),
            std::ops::Bound::Unbounded,
        ))
        .map_while(|(key, _)| key.strip_prefix(prefix).map(|index| (key, index)))
        .filter_map(|(key, index)| {
            // Only the canonical spelling counts: `net1`, never `net01` or `net+1`.
            let i: u8 = index.parse().ok().filter(|i| *i < 32)?;
            (i.to_string() == index).then_some(())?;
            config.get_str(key).map(|value| (i, value))
        })
        .collect();
    out.sort_unstable_by_key(|(i, _)| *i);
    out
}

/// The value of `key` in a `netN` property string.
pub(super) fn part<'a>(property: &'a str, key: &str) -> Option<&'a str> {
    property
        .split(',')
        .find_map(|p| p.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v))
}

/// The address of a static `ip=`/`ip6=` value (`10.0.0.5/24` → `10.0.0.5`); `None` for
/// `dhcp`, `auto`, `manual` or anything else.
fn static_address(value: &str) -> Option<IpAddr> {
    let (address, prefix) = value.split_once('/')?;
    prefix.parse::<u8>().ok()?;
    address.parse().ok()
}

/// The static addresses every interface of `config` configures: the only source addresses
/// Proxmox's `ipfilter` lets such a guest use.
pub fn configured_addresses(config: &CtConfig) -> Vec<IpAddr> {
    addresses_in(&interfaces(config))
}

/// The static `ip=`/`ip6=` addresses of `lines` (`netN` of a container, `ipconfigN` of a VM),
/// canonical, sorted, once each.
pub(super) fn addresses_in(lines: &[(u8, String)]) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = lines
        .iter()
        .flat_map(|(_, net)| {
            ["ip", "ip6"]
                .into_iter()
                .filter_map(|key| part(net, key).and_then(static_address))
        })
        .map(|ip| ip.to_canonical())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The refusal of an address desired state names for an existing guest `o` that its config
/// does not hold: the agent never moves an address of a guest that exists (decision 0101).
/// A family desired state leaves to the pool asks for nothing.
pub fn address_change(
    spec: &bosun_proto::desired::GuestSpec,
    o: &super::plan::ObservedGuest,
) -> Option<super::plan::Finding> {
    let want = spec
        .network
        .as_ref()?
        .static_addresses()
        .map(|ip| ip.to_canonical())
        .find(|ip| !o.addresses.contains(ip))?;
    Some(super::plan::Finding::AddressRefused {
        guest_id: spec.guest_id,
        vmid: o.vmid,
        want,
        have: o.addresses.clone(),
    })
}

/// Whether `ipfilter` keeps the guest's traffic: every interface's addresses are static or
/// absent, and at least one is static.
pub fn ipfilter_fits(config: &CtConfig) -> bool {
    ipfilter_fits_lines(&interfaces(config))
}

/// Whether `ipfilter` keeps a guest whose addresses `lines` configure: every one static or
/// absent, at least one static.
pub(super) fn ipfilter_fits_lines(lines: &[(u8, String)]) -> bool {
    let all_static = lines.iter().all(|(_, net)| {
        ["ip", "ip6"]
            .into_iter()
            .all(|key| part(net, key).is_none_or(|v| static_address(v).is_some()))
    });
    all_static && !addresses_in(lines).is_empty()
}

/// The firewall options `config`'s guest lacks: `None` when it has them all.
fn missing_options(config: &CtConfig, firewall: &GuestFirewall) -> Option<FirewallUpdate> {
    let update = FirewallUpdate {
        enable: !firewall.enable,
        ipfilter: !firewall.ipfilter && ipfilter_fits(config),
    };
    (update.enable || update.ipfilter).then_some(update)
}

/// An interface of the guest's config that does not read as one.
#[derive(Debug, thiserror::Error)]
#[error("net{index}")]
struct UnreadableInterface {
    /// The interface's index.
    index: u8,
    /// Why it does not read.
    #[source]
    source: bosun_pve::ValueError,
}

/// The interfaces of `config` without `firewall=1`, each as it is with `firewall=1` added.
fn unguarded_interfaces(config: &CtConfig) -> Result<CtOptions, UnreadableInterface> {
    let mut set = CtOptions::default();
    for (index, raw) in interfaces(config) {
        let mut net =
            NetConfig::parse(&raw).map_err(|source| UnreadableInterface { index, source })?;
        if net.firewall != Some(true) {
            net.firewall = Some(true);
            set.net.insert(index, net);
        }
    }
    Ok(set)
}

/// Whether the guest lacks any part of the guard (an interface without `firewall=1`, its
/// firewall off, or `ipfilter` off although its addresses are static).
pub fn needs_guard(config: &CtConfig, firewall: &GuestFirewall) -> bool {
    let unfirewalled = interfaces(config)
        .iter()
        .any(|(_, net)| part(net, "firewall") != Some("1"));
    unfirewalled || missing_options(config, firewall).is_some()
}

/// Puts the guard on `vmid`'s guest as journaled steps of `op`; a guest that has it is left
/// as it is (each setting is read first, so a repeated or resumed step changes nothing).
pub async fn guard<P: Pve>(pve: &P, op: &OpJournal, vmid: Vmid) -> Result<(), StepError> {
    let config = op
        .call(
            StepName::ReadConfig,
            json!({ "vmid": vmid.get() }),
            pve.ct_config(vmid),
        )
        .await?;
    let set = unguarded_interfaces(&config).map_err(|source| StepError::Failed {
        op_id: op.op_id(),
        step: "guard_net".into(),
        source: Box::new(source),
    })?;
    if !set.net.is_empty() {
        let names: Vec<String> = set.net.keys().map(|i| format!("net{i}")).collect();
        let update = ConfigUpdate {
            set,
            delete: Vec::new(),
            digest: Some(config.digest.clone()),
        };
        op.call(
            StepName::GuardNet,
            json!({ "vmid": vmid.get(), "firewall": names }),
            pve.update_ct_config(vmid, &update),
        )
        .await?;
    }
    let firewall = op
        .call(
            StepName::ReadFirewall,
            json!({ "vmid": vmid.get() }),
            pve.ct_firewall(vmid),
        )
        .await?;
    if let Some(update) = missing_options(&config, &firewall) {
        op.call(
            StepName::GuardFirewall,
            json!({
                "vmid": vmid.get(),
                "enable": update.enable || firewall.enable,
                "ipfilter": update.ipfilter || firewall.ipfilter,
                "addresses": configured_addresses(&config),
            }),
            pve.set_ct_firewall(vmid, &update),
        )
        .await?;
    }
    if !ipfilter_fits(&config) {
        tracing::debug!(
            vmid = vmid.get(),
            "guest has no static addresses; its firewall holds it to its MAC, not to an address"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> CtConfig {
        let mut values: serde_json::Map<String, serde_json::Value> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        values.insert("digest".into(), json!("d"));
        serde_json::from_value(serde_json::Value::Object(values)).unwrap()
    }

    #[test]
    fn numbered_values_are_the_canonical_indexes_below_32_in_order() {
        let c = config(&[
            ("net10", "name=eth10"),
            ("net2", "name=eth2"),
            ("net0", "name=eth0"),
            ("net01", "name=padded"),
            ("net32", "name=too-far"),
            ("net+3", "name=signed"),
            ("netx", "name=not-a-number"),
            ("nameserver", "1.1.1.1"),
            ("ne", "before the prefix"),
            ("nf0", "after the prefix"),
            ("net31", "name=last"),
        ]);
        let got = numbered(&c, "net");
        let want: Vec<(u8, String)> = [(0, "eth0"), (2, "eth2"), (10, "eth10"), (31, "last")]
            .into_iter()
            .map(|(i, name)| (i, format!("name={name}")))
            .collect();
        assert_eq!(got, want);
        assert!(numbered(&c, "ipconfig").is_empty());
    }

    fn on(enable: bool, ipfilter: bool) -> GuestFirewall {
        GuestFirewall {
            enable,
            ipfilter,
            ..GuestFirewall::default()
        }
    }

    #[test]
    fn an_interface_that_does_not_read_is_refused_by_its_name() {
        let broken = config(&[
            ("net0", "name=eth0,bridge=vmbr0,ip=dhcp,type=veth"),
            ("net1", "name=eth1,tag=ten"),
        ]);
        let error = unguarded_interfaces(&broken).unwrap_err();
        assert_eq!(error.index, 1);
        let text = bosun_errchain::error_chain(&error);
        assert!(text.starts_with("net1: "), "{text}");
        assert!(text.contains("ten"), "{text}");
    }

    #[test]
    fn a_dhcp_guest_gets_the_firewall_without_ipfilter() {
        let dhcp = config(&[(
            "net0",
            "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth",
        )]);
        assert!(!ipfilter_fits(&dhcp));
        assert!(configured_addresses(&dhcp).is_empty());
        assert!(
            needs_guard(&dhcp, &on(true, false)),
            "net0 lacks firewall=1"
        );
        assert_eq!(
            missing_options(&dhcp, &on(false, false)),
            Some(FirewallUpdate {
                enable: true,
                ipfilter: false
            })
        );
        let set = unguarded_interfaces(&dhcp).unwrap();
        assert_eq!(
            set.net[&0].to_property_string().unwrap(),
            "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,firewall=1,type=veth",
            "the MAC and every other key are kept"
        );
        let guarded = config(&[(
            "net0",
            "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,firewall=1,type=veth",
        )]);
        assert!(!needs_guard(&guarded, &on(true, false)));
        assert!(unguarded_interfaces(&guarded).unwrap().net.is_empty());
    }

    #[test]
    fn a_static_guest_gets_ipfilter_and_its_addresses_are_known() {
        let fixed = config(&[
            (
                "net0",
                "name=eth0,bridge=vmbr0,ip=10.0.0.5/24,gw=10.0.0.1,ip6=fd00::5/64,firewall=1",
            ),
            (
                "net1",
                "name=eth1,bridge=vmbr1,ip=192.168.1.9/24,firewall=1",
            ),
        ]);
        assert!(ipfilter_fits(&fixed));
        let want: Vec<IpAddr> = ["10.0.0.5", "192.168.1.9", "fd00::5"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(configured_addresses(&fixed), want);
        assert!(needs_guard(&fixed, &on(true, false)), "ipfilter is off");
        assert!(!needs_guard(&fixed, &on(true, true)));
        // One interface on DHCP and ipfilter would cut its traffic: not asked for.
        let mixed = config(&[
            ("net0", "name=eth0,bridge=vmbr0,ip=10.0.0.5/24,firewall=1"),
            ("net1", "name=eth1,bridge=vmbr1,ip6=auto,firewall=1"),
        ]);
        assert!(!ipfilter_fits(&mixed));
        assert!(!needs_guard(&mixed, &on(true, false)));
    }

    #[test]
    fn nothing_is_ever_turned_off() {
        let dhcp = config(&[("net0", "name=eth0,bridge=vmbr0,ip=dhcp,firewall=1")]);
        // An operator's ipfilter on a DHCP guest stays: the agent only adds.
        assert_eq!(missing_options(&dhcp, &on(true, true)), None);
    }
}
