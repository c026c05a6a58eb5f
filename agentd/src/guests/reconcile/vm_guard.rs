//! The network guard on a VM the agent created (DESIGN §7, §8b; decision 0117), the VM
//! counterpart of [`super::network_guard`]'s, each setting only ever turned on:
//!
//! - `firewall=1` on every network device (`netN`), so Proxmox puts it behind its firewall
//!   bridge;
//! - the VM's firewall `enable=1` (with Proxmox's default `macfilter`, the VM sends from its
//!   device's own MAC only);
//! - `ipfilter=1` when every cloud-init interface (`ipconfigN`) is static or absent and one is
//!   static: Proxmox's `ipfilter-net<N>` set then holds the `ipconfigN` addresses, and what the
//!   VM sends from any other source address is dropped.
//!
//! A device is written back whole ([`VmNet::parse`] refuses a model or key it would drop), with
//! the config's digest, so nothing but `firewall=1` ever changes on it.

use std::net::IpAddr;

use bosun_pve::{
    FirewallUpdate, GuestFirewall, PveQemu, VmConfig, VmConfigUpdate, VmNet, VmOptions, Vmid,
};
use serde_json::json;

use super::network_guard::{addresses_in, ipfilter_fits_lines, numbered, part};
use crate::ops::operation::{OpJournal, StepError, StepName};

/// The static addresses a VM's cloud-init interfaces (`ipconfigN`) configure: where
/// `ipfilter` holds it.
pub fn vm_addresses(config: &VmConfig) -> Vec<IpAddr> {
    addresses_in(&numbered(config, "ipconfig"))
}

/// Whether `ipfilter` keeps the VM's traffic (its `ipconfigN` all static or absent, one static).
pub fn vm_ipfilter_fits(config: &VmConfig) -> bool {
    ipfilter_fits_lines(&numbered(config, "ipconfig"))
}

/// The firewall options the VM lacks: `None` when it has them all.
fn missing_options(config: &VmConfig, firewall: &GuestFirewall) -> Option<FirewallUpdate> {
    let update = FirewallUpdate {
        enable: !firewall.enable,
        ipfilter: !firewall.ipfilter && vm_ipfilter_fits(config),
    };
    (update.enable || update.ipfilter).then_some(update)
}

/// Whether the VM lacks any part of the guard: a device without `firewall=1`, its firewall
/// off, or `ipfilter` off although its addresses are static.
pub fn vm_needs_guard(config: &VmConfig, firewall: &GuestFirewall) -> bool {
    let unfirewalled = numbered(config, "net")
        .iter()
        .any(|(_, net)| !matches!(part(net, "firewall"), Some("1" | "on" | "yes" | "true")));
    unfirewalled || missing_options(config, firewall).is_some()
}

/// A network device of the VM's config that does not read as one Bosun can write back.
#[derive(Debug, thiserror::Error)]
#[error("net{index}")]
struct UnreadableDevice {
    /// The device's index.
    index: u8,
    /// Why it does not read.
    #[source]
    source: bosun_pve::ValueError,
}

/// The devices of `config` without `firewall=1`, each as it is with `firewall=1` added.
fn unguarded_devices(config: &VmConfig) -> Result<VmOptions, UnreadableDevice> {
    let mut set = VmOptions::default();
    for (index, raw) in numbered(config, "net") {
        let mut net = VmNet::parse(&raw).map_err(|source| UnreadableDevice { index, source })?;
        if net.firewall != Some(true) {
            net.firewall = Some(true);
            set.net.insert(index, net);
        }
    }
    Ok(set)
}

/// Puts the guard on VM `vmid` as journaled steps of `op`; a VM that has it is left as it is
/// (each setting is read first, so a repeated step changes nothing).
pub async fn guard_vm<P: PveQemu>(pve: &P, op: &OpJournal, vmid: Vmid) -> Result<(), StepError> {
    let config = op
        .call(
            StepName::ReadConfig,
            json!({ "vmid": vmid.get() }),
            pve.vm_config(vmid),
        )
        .await?;
    let set = unguarded_devices(&config).map_err(|source| StepError::Failed {
        op_id: op.op_id(),
        step: StepName::GuardNet.as_str().into(),
        source: Box::new(source),
    })?;
    if !set.net.is_empty() {
        let names: Vec<String> = set.net.keys().map(|i| format!("net{i}")).collect();
        let update = VmConfigUpdate {
            set,
            delete: Vec::new(),
            digest: Some(config.digest.clone()),
        };
        op.call(
            StepName::GuardNet,
            json!({ "vmid": vmid.get(), "firewall": names }),
            pve.update_vm_config(vmid, &update),
        )
        .await?;
    }
    let firewall = op
        .call(
            StepName::ReadFirewall,
            json!({ "vmid": vmid.get() }),
            pve.vm_firewall(vmid),
        )
        .await?;
    if let Some(update) = missing_options(&config, &firewall) {
        op.call(
            StepName::GuardFirewall,
            json!({
                "vmid": vmid.get(),
                "enable": update.enable || firewall.enable,
                "ipfilter": update.ipfilter || firewall.ipfilter,
                "addresses": vm_addresses(&config),
            }),
            pve.set_vm_firewall(vmid, &update),
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> VmConfig {
        let mut values: serde_json::Map<String, serde_json::Value> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        values.insert("digest".into(), json!("d"));
        serde_json::from_value(serde_json::Value::Object(values)).unwrap()
    }

    fn on(enable: bool, ipfilter: bool) -> GuestFirewall {
        GuestFirewall {
            enable,
            ipfilter,
            ..GuestFirewall::default()
        }
    }

    #[test]
    fn a_vm_is_held_to_its_cloud_init_addresses() {
        let vm = config(&[
            ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1"),
            ("ipconfig0", "ip=192.0.2.20/24,gw=192.0.2.1"),
        ]);
        assert_eq!(
            vm_addresses(&vm),
            vec!["192.0.2.20".parse::<IpAddr>().unwrap()]
        );
        assert!(vm_ipfilter_fits(&vm));
        assert!(!vm_needs_guard(&vm, &on(true, true)));
        assert!(vm_needs_guard(&vm, &on(false, true)), "its firewall is off");
        assert!(vm_needs_guard(&vm, &on(true, false)), "ipfilter is off");
        let unfirewalled = config(&[
            ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
            ("ipconfig0", "ip=192.0.2.20/24"),
        ]);
        assert!(vm_needs_guard(&unfirewalled, &on(true, true)));
        let set = unguarded_devices(&unfirewalled).unwrap();
        assert_eq!(
            set.net[&0].to_property_string().unwrap(),
            "virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1",
            "the MAC is kept"
        );
    }

    #[test]
    fn dhcp_keeps_ipfilter_off_and_a_device_it_cannot_write_back_is_refused() {
        let dhcp = config(&[
            ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1"),
            ("ipconfig0", "ip=dhcp"),
        ]);
        assert!(!vm_ipfilter_fits(&dhcp));
        assert!(!vm_needs_guard(&dhcp, &on(true, false)));
        assert_eq!(
            missing_options(&dhcp, &on(true, true)),
            None,
            "never turned off"
        );
        let odd = config(&[("net0", "e1000=BC:24:11:00:00:01,bridge=vmbr0")]);
        let error = unguarded_devices(&odd).unwrap_err();
        assert_eq!(error.index, 0);
    }
}
