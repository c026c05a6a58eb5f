//! A fair share for every guest (decision 0100): the CPU weight (`cpuunits`), CPU time
//! limit (`cpulimit`) and network rate (`rate=` on each `netN`) Proxmox holds for a guest of
//! the agent's own, read from its config, compared with what
//! [`bosun_proto::share::resolve`] gives for its class within the signed plan's bounds, and
//! corrected when they differ (drift: someone changed them by hand, or a restore brought the
//! archive's back). A container's network rate is written in its own step
//! ([`set_net_rate`]); a VM's devices in its `set_spec` write ([`vm_rated_devices`], decision
//! 0125).
//!
//! Proxmox reads an absent `cpuunits` as its default weight (100 on cgroup v2) and an absent
//! or zero `cpulimit` or `rate` as no limit, and so does the agent: a guest at the defaults
//! needs no write.

use bosun_proto::share::{DEFAULT_CPU_WEIGHT, Share};
use std::collections::BTreeMap;

use bosun_pve::{
    ConfigUpdate, CtConfig, CtOptions, NetConfig, Pve, Thousandths, VM_CPULIMIT_MAX,
    VM_CPUUNITS_RANGE, VmConfig, VmConfigUpdate, VmNet, Vmid,
};
use serde_json::json;

use super::network_guard::{numbered, part};
use crate::ops::operation::{OpJournal, StepError, StepName};

/// What Proxmox holds of a guest's share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedShare {
    /// `cpuunits`; `None`: unset (Proxmox's default weight).
    pub cpu_weight: Option<u32>,
    /// `cpulimit` in cores (zero: no limit); `None`: a value that does not read as one.
    pub cpu_limit: Option<Thousandths>,
    /// Each interface's `rate=` in MB/s (zero: no limit), in index order; `None`: a value
    /// that does not read as one.
    pub net_rates: Vec<Option<Thousandths>>,
}

impl Default for ObservedShare {
    /// A guest at Proxmox's defaults, with no interface.
    fn default() -> Self {
        Self {
            cpu_weight: None,
            cpu_limit: Some(Thousandths(0)),
            net_rates: Vec::new(),
        }
    }
}

/// A config's interfaces (`net0`…`net31`) with their raw property strings, by index: the
/// network guard's walk over the keys, not 32 look-ups (every pass reads every guest's).
fn interfaces(config: &CtConfig) -> Vec<(u8, String)> {
    numbered(config, "net")
}

/// The share `config` holds.
pub fn observed(config: &CtConfig) -> ObservedShare {
    let number = |value: Option<String>| match value {
        None => Some(Thousandths(0)),
        Some(v) => Thousandths::parse(&v).ok(),
    };
    ObservedShare {
        cpu_weight: config
            .get_u64("cpuunits")
            .and_then(|v| u32::try_from(v).ok()),
        cpu_limit: number(config.get_str("cpulimit")),
        net_rates: interfaces(config)
            .iter()
            .map(|(_, net)| number(part(net, "rate").map(str::to_owned)))
            .collect(),
    }
}

/// A limit to write: a value, or none (the key removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Limit to this many thousandths (of a core; of a MB/s).
    To(Thousandths),
    /// No limit.
    Lifted,
}

impl Limit {
    fn of(value: Option<u32>, unit: u64) -> Self {
        value.map_or(Self::Lifted, |v| Self::To(Thousandths(u64::from(v) * unit)))
    }

    fn thousandths(self) -> Thousandths {
        match self {
            Self::To(t) => t,
            Self::Lifted => Thousandths(0),
        }
    }
}

/// What of a guest's share to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareChange {
    /// A new `cpuunits`.
    pub cpu_weight: Option<u32>,
    /// A new `cpulimit`.
    pub cpu_limit: Option<Limit>,
    /// A new `rate=` for every interface.
    pub net_rate: Option<Limit>,
}

impl ShareChange {
    /// Whether it writes `cpuunits` or `cpulimit`.
    pub fn touches_cpu(&self) -> bool {
        self.cpu_weight.is_some() || self.cpu_limit.is_some()
    }
}

/// What must change for a guest holding `have` to hold `want`; `None` when nothing does.
pub fn change(want: &Share, have: &ObservedShare) -> Option<ShareChange> {
    let cpu_weight = (have.cpu_weight.unwrap_or(DEFAULT_CPU_WEIGHT) != want.cpu_weight)
        .then_some(want.cpu_weight);
    // Millicores are thousandths of a core; MB/s are written in thousandths of themselves.
    let cpu = Limit::of(want.cpu_limit_millicores, 1);
    let cpu_limit = (have.cpu_limit != Some(cpu.thousandths())).then_some(cpu);
    let rate = Limit::of(want.net_rate_mbytes_per_s, 1000);
    let net_rate = have
        .net_rates
        .iter()
        .any(|r| *r != Some(rate.thousandths()))
        .then_some(rate);
    let change = ShareChange {
        cpu_weight,
        cpu_limit,
        net_rate,
    };
    (change.touches_cpu() || net_rate.is_some()).then_some(change)
}

/// Writes `change`'s CPU part into `update` (`cpuunits`, `cpulimit` set or deleted).
pub fn put_cpu(change: &ShareChange, update: &mut ConfigUpdate) {
    update.set.cpuunits = change.cpu_weight;
    match change.cpu_limit {
        Some(Limit::To(t)) => update.set.cpulimit = Some(t),
        Some(Limit::Lifted) => update.delete.push("cpulimit".to_owned()),
        None => {}
    }
}

/// The share a VM can hold (decision 0125): a VM's CPU limit goes to 128 cores in Proxmox
/// (a container's to 8192), so a larger limit is held at 128 cores, no looser for any VM of
/// at most 128 vCPUs; its weight is held to the VM's `cpuunits` range (a no-op for every
/// weight a class may name).
pub fn for_vm(share: &Share) -> Share {
    let max_millicores = u32::try_from(VM_CPULIMIT_MAX.0).unwrap_or(u32::MAX);
    let (min_weight, max_weight) = VM_CPUUNITS_RANGE;
    Share {
        cpu_weight: share.cpu_weight.clamp(min_weight, max_weight),
        cpu_limit_millicores: share.cpu_limit_millicores.map(|m| m.min(max_millicores)),
        net_rate_mbytes_per_s: share.net_rate_mbytes_per_s,
    }
}

/// Writes `change`'s CPU part into a VM's `update` (`cpuunits`, `cpulimit` set or deleted).
pub fn put_vm_cpu(change: &ShareChange, update: &mut VmConfigUpdate) {
    update.set.cpuunits = change.cpu_weight;
    match change.cpu_limit {
        Some(Limit::To(t)) => update.set.cpulimit = Some(t),
        Some(Limit::Lifted) => update.delete.push("cpulimit".to_owned()),
        None => {}
    }
}

/// The network devices of a VM's `config` whose `rate=` is not `rate`, each as it is with the
/// rate changed and nothing else: its model, MAC, bridge, firewall, link state and VLAN
/// exactly as read ([`VmNet::parse`] refuses a device with a key it would drop).
pub fn vm_rated_devices(
    config: &VmConfig,
    rate: Limit,
) -> Result<BTreeMap<u8, VmNet>, UnreadableInterface> {
    let want = match rate {
        Limit::To(t) => Some(t),
        Limit::Lifted => None,
    };
    let mut out = BTreeMap::new();
    for (index, raw) in interfaces(config) {
        let mut net = VmNet::parse(&raw).map_err(|source| UnreadableInterface { index, source })?;
        if net.rate.filter(|r| r.0 != 0) != want {
            net.rate = want;
            out.insert(index, net);
        }
    }
    Ok(out)
}

/// An interface of the guest's config that does not read as one.
#[derive(Debug, thiserror::Error)]
#[error("net{index}")]
pub struct UnreadableInterface {
    /// The interface's index.
    pub index: u8,
    /// Why it does not read.
    #[source]
    source: bosun_pve::ValueError,
}

/// Sets `rate` on every interface of `vmid`'s guest that lacks it, as journaled steps of `op`
/// (the config read first, and written back under its digest, so a change made meanwhile is
/// never overwritten).
pub async fn set_net_rate<P: Pve>(
    pve: &P,
    op: &OpJournal,
    vmid: Vmid,
    rate: Limit,
) -> Result<(), StepError> {
    let config = op
        .call(
            StepName::ReadConfig,
            json!({ "vmid": vmid.get() }),
            pve.ct_config(vmid),
        )
        .await?;
    let want = match rate {
        Limit::To(t) => Some(t),
        Limit::Lifted => None,
    };
    let mut set = CtOptions::default();
    for (index, raw) in interfaces(&config) {
        let mut net = NetConfig::parse(&raw).map_err(|source| StepError::Failed {
            op_id: op.op_id(),
            step: StepName::SetNetRate.as_str().into(),
            source: Box::new(UnreadableInterface { index, source }),
        })?;
        if net.rate.filter(|r| r.0 != 0) != want {
            net.rate = want;
            set.net.insert(index, net);
        }
    }
    if set.net.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = set.net.keys().map(|i| format!("net{i}")).collect();
    let update = ConfigUpdate {
        set,
        delete: Vec::new(),
        digest: Some(config.digest.clone()),
    };
    op.call(
        StepName::SetNetRate,
        json!({
            "vmid": vmid.get(),
            "interfaces": names,
            "rate_mbytes_per_s": want.map(|t| t.to_string()),
        }),
        pve.update_ct_config(vmid, &update),
    )
    .await
}

#[cfg(test)]
#[path = "share_tests.rs"]
mod tests;
