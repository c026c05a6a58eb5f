//! What the reconcile passes read of each container, kept from one pass to the next
//! (decision 0110).
//!
//! A pass lists the node's containers (one request) and reads a container's config again,
//! and for a guest of the agent's own its firewall options, only when:
//!
//! - the listing shows that something its config sets changed (power, name, lock, memory,
//!   root disk, cores, tags, template) or that it restarted (its uptime went back);
//! - the agent may have changed the node since it was read: the client's
//!   [`Pve::change_mark`] moved (every request but a read, every read of a task's status), or
//!   the client keeps no mark; then nothing kept is used;
//! - it is the container's turn: every [`REFRESH_PASSES`]th pass, staggered by vmid, so a
//!   change made behind the agent's back that the listing does not show (an interface's
//!   `firewall=1`, the guest's firewall options, a mount point, `startup`) is seen within
//!   that many passes, and a steady pass reads a [`REFRESH_PASSES`]th of the configs.
//!
//! What is kept is bounded by the listing: a container it no longer shows is forgotten.
//!
//! The agent's own VMs are kept the same way in a cache of their own, from the node's VM
//! listing (`GET /nodes/{node}/qemu`, which shows the same fields): [`ConfigCache::read_vm`].

use std::collections::btree_map::Entry as Slot;
use std::collections::{BTreeMap, BTreeSet};

use bosun_pve::{
    CtConfig, CtSummary, GuestFirewall, GuestStatus, Pve, PveError, PveQemu, VmSummary, Vmid,
};

/// A container's config is read again at least every this many passes.
pub const REFRESH_PASSES: u64 = 4;

/// What the listing shows of a container that a change of its config moves.
#[derive(Debug, Clone, PartialEq)]
struct Listed {
    status: GuestStatus,
    name: Option<String>,
    lock: Option<String>,
    maxmem: Option<u64>,
    maxdisk: Option<u64>,
    cpus: Option<f64>,
    tags: Option<String>,
    template: bool,
}

impl Listed {
    fn of(ct: &CtSummary) -> Self {
        Self {
            status: ct.status.clone(),
            name: ct.name.clone(),
            lock: ct.lock.clone(),
            maxmem: ct.maxmem,
            maxdisk: ct.maxdisk,
            cpus: ct.cpus,
            tags: ct.tags.clone(),
            template: ct.template,
        }
    }

    fn of_vm(vm: &VmSummary) -> Self {
        Self {
            status: vm.status.clone(),
            name: vm.name.clone(),
            lock: vm.lock.clone(),
            maxmem: vm.maxmem,
            maxdisk: vm.maxdisk,
            cpus: vm.cpus,
            tags: vm.tags.clone(),
            template: vm.template,
        }
    }
}

/// One container as last read.
#[derive(Debug)]
pub struct Entry {
    listed: Listed,
    uptime: Option<u64>,
    /// Its config.
    pub config: CtConfig,
    /// Its firewall options, once read since the config was (`None` until a pass needs them,
    /// or when reading them failed: the next pass tries again).
    pub firewall: Option<GuestFirewall>,
}

/// The containers' configs as the passes read them.
#[derive(Debug, Default)]
pub struct ConfigCache {
    /// Passes begun: the stagger's clock.
    passes: u64,
    /// The client's change mark when this pass began.
    mark: Option<u64>,
    entries: BTreeMap<u32, Entry>,
}

/// Why a container's config is read this pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Nothing kept of it (first pass, a new container, or the agent changed the node).
    Unknown,
    /// The listing shows a change its config makes, or a restart.
    Listed,
    /// Its turn of the periodic read.
    Turn,
}

impl ConfigCache {
    /// Begins a pass; `mark` is the client's [`Pve::change_mark`], read before the listing.
    pub fn begin(&mut self, mark: Option<u64>) {
        self.passes = self.passes.wrapping_add(1);
        if mark.is_none() || mark != self.mark {
            self.entries.clear();
        }
        self.mark = mark;
    }

    /// Why `ct`'s config must be read this pass; `None`: what is kept still holds.
    pub fn due(&self, ct: &CtSummary) -> Option<Reason> {
        due(
            self.entries.get(&ct.vmid.get()),
            &Listed::of(ct),
            ct.uptime,
            self.turn(ct.vmid),
        )
    }

    /// Whether this pass is `vmid`'s turn of the periodic read.
    fn turn(&self, vmid: Vmid) -> bool {
        self.passes.wrapping_add(u64::from(vmid.get())) % REFRESH_PASSES == 0
    }

    /// `ct`'s entry, its config read from Proxmox first when [`Self::due`]. A failed read
    /// forgets the container and gives the error.
    pub async fn read<P: Pve>(&mut self, pve: &P, ct: &CtSummary) -> Result<&mut Entry, PveError> {
        self.read_listed(ct.vmid, Listed::of(ct), ct.uptime, pve.ct_config(ct.vmid))
            .await
    }

    /// `vm`'s entry (a VM's config has a container's shape), read as [`Self::read`] reads a
    /// container's.
    pub async fn read_vm<P: PveQemu>(
        &mut self,
        pve: &P,
        vm: &VmSummary,
    ) -> Result<&mut Entry, PveError> {
        self.read_listed(
            vm.vmid,
            Listed::of_vm(vm),
            vm.uptime,
            pve.vm_config(vm.vmid),
        )
        .await
    }

    async fn read_listed(
        &mut self,
        vmid: Vmid,
        listed: Listed,
        uptime: Option<u64>,
        fetch: impl Future<Output = Result<CtConfig, PveError>>,
    ) -> Result<&mut Entry, PveError> {
        let turn = self.turn(vmid);
        let slot = self.entries.entry(vmid.get());
        let kept = match &slot {
            Slot::Occupied(o) => Some(o.get()),
            Slot::Vacant(_) => None,
        };
        let reason = due(kept, &listed, uptime, turn);
        match (slot, reason) {
            (Slot::Occupied(o), None) => {
                let entry = o.into_mut();
                entry.uptime = uptime;
                Ok(entry)
            }
            (slot, reason) => {
                let config = match fetch.await {
                    Ok(config) => config,
                    Err(e) => {
                        if let Slot::Occupied(o) = slot {
                            o.remove();
                        }
                        return Err(e);
                    }
                };
                if reason == Some(Reason::Turn)
                    && let Slot::Occupied(o) = &slot
                    && o.get().config.digest != config.digest
                {
                    tracing::info!(
                        vmid = vmid.get(),
                        digest = %config.digest,
                        "a guest's config changed without the listing showing it; seen on its periodic read"
                    );
                }
                let fresh = Entry {
                    listed,
                    uptime,
                    config,
                    firewall: None,
                };
                Ok(match slot {
                    Slot::Occupied(mut o) => {
                        o.insert(fresh);
                        o.into_mut()
                    }
                    Slot::Vacant(v) => v.insert(fresh),
                })
            }
        }
    }

    /// Forgets every container but `listed`.
    pub fn keep_only(&mut self, listed: &BTreeSet<u32>) {
        self.entries.retain(|vmid, _| listed.contains(vmid));
    }

    /// How many containers' configs are kept.
    pub fn kept(&self) -> usize {
        self.entries.len()
    }
}

/// Why the config `kept` of a guest the listing shows as `listed`, up for `uptime`, must be
/// read again; `turn`: this pass is its turn of the periodic read.
fn due(kept: Option<&Entry>, listed: &Listed, uptime: Option<u64>, turn: bool) -> Option<Reason> {
    let Some(kept) = kept else {
        return Some(Reason::Unknown);
    };
    let restarted = matches!((kept.uptime, uptime), (Some(was), Some(now)) if now < was);
    if restarted || kept.listed != *listed {
        Some(Reason::Listed)
    } else {
        turn.then_some(Reason::Turn)
    }
}

/// Reads `vmid`'s firewall options into `entry` when not read since its config was; a failed
/// read leaves them unknown until the next pass.
pub async fn read_firewall<P: Pve>(pve: &P, vmid: Vmid, entry: &mut Entry) {
    if entry.firewall.is_some() {
        return;
    }
    match pve.ct_firewall(vmid).await {
        Ok(firewall) => entry.firewall = Some(firewall),
        Err(e) => {
            tracing::debug!(vmid = vmid.get(), error = %bosun_errchain::error_chain(&e), "could not read the guest's firewall options");
        }
    }
}

/// Reads VM `vmid`'s firewall options into `entry`, as [`read_firewall`] does a container's.
pub async fn read_vm_firewall<P: PveQemu>(pve: &P, vmid: Vmid, entry: &mut Entry) {
    if entry.firewall.is_some() {
        return;
    }
    match pve.vm_firewall(vmid).await {
        Ok(firewall) => entry.firewall = Some(firewall),
        Err(e) => {
            tracing::debug!(vmid = vmid.get(), error = %bosun_errchain::error_chain(&e), "could not read the vm's firewall options");
        }
    }
}

#[cfg(test)]
#[path = "config_cache_tests.rs"]
mod tests;
