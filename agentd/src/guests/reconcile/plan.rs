//! The planner: a pure function from (desired, observed, journal facts) to the
//! actions that move the host toward the desired state, plus the findings the
//! agent reports without acting (orphans, refused shrinks, broken guests).
//!
//! It never plans anything destructive: a guest missing from desired state is
//! reported [`Finding::Orphaned`] and left alone, a smaller rootfs is reported
//! [`Finding::ShrinkRefused`], and a guest that failed to start
//! `restart_limit` times is reported [`Finding::Broken`] and not started
//! again. Destroying or overwriting needs a signed job (`crate::ops::jobs`).
//!
//! Nor does it build what cannot be whole: a guest with a bulk volume that has no target of
//! its class (a `fast` volume on a host whose bulk-data targets are all `slow`) is neither
//! provisioned nor restored, and each such volume is reported [`Finding::PlacementRefused`];
//! so is a guest with a hot volume whose storage the signed plan does not class `fast`
//! ([`Finding::HotRefused`]).
//!
//! Per guest, actions come in the order they must run: spec, rootfs, network guard, power.
//! Across guests, the document's order holds ([`super::order`]): a guest is provisioned or
//! started only once what it requires runs, and stopped only once what requires it is stopped.

use std::collections::{BTreeMap, BTreeSet};

use bosun_proto::desired::{
    DesiredState, DrPolicy, GuestKind, GuestSpec, PlacementRefusal, Power, StorageClass,
};
use uuid::Uuid;

use bosun_proto::share::{Share, ShareBounds, ShareRefusal};

use super::share::{ObservedShare, ShareChange};
use crate::data::recovery::BackupSource;
use crate::data::storage::hot::HotPlaces;

/// The power state Proxmox reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObservedPower {
    /// Running.
    Running,
    /// Stopped.
    Stopped,
    /// Anything else (paused, unknown).
    Other,
}

/// One guest as observed on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedGuest {
    /// Its vmid.
    pub vmid: u32,
    /// The hub's guest id, from the agent's journal (`None`: not created by the agent).
    pub guest_id: Option<Uuid>,
    /// Power state.
    pub power: ObservedPower,
    /// Hostname, if known.
    pub hostname: Option<String>,
    /// Cores, if known.
    pub cores: Option<u16>,
    /// Memory in MiB, if known.
    pub memory_mib: Option<u32>,
    /// Rootfs size in GiB, if known.
    pub rootfs_gib: Option<u32>,
    /// Whether a config lock is held (another task is working on it).
    pub locked: bool,
    /// A guest of the agent's own that lacks part of its network guard
    /// ([`super::network_guard::needs_guard`]); `false` for any other guest, or when it could
    /// not be read this pass.
    pub unguarded: bool,
    /// The static addresses its interfaces configure (`ip=`, `ip6=`): where it speaks from
    /// when Proxmox's `ipfilter` holds it to them.
    pub addresses: Vec<std::net::IpAddr>,
    /// Its CPU weight, CPU limit and interfaces' rate as Proxmox holds them.
    pub share: ObservedShare,
    /// Its `startup` option as Proxmox holds it, if any.
    pub startup: Option<String>,
}

/// What the journal and the agent's own memory add.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// Guests with an operation still running (queued work or replay pending).
    pub busy: BTreeSet<Uuid>,
    /// Consecutive failed starts per guest.
    pub start_failures: BTreeMap<Uuid, u32>,
    /// Failed starts after which a guest is broken.
    pub restart_limit: u32,
    /// Guests this agent provisioned (or adopted by a job that asked for a bootstrap) that
    /// hold no local-API token yet (their bootstrap was never delivered); empty when
    /// provisioning delivers no bootstrap.
    pub tokenless: BTreeSet<Uuid>,
    /// Guests holding a token whose bootstrap carries other SSH keys than the signed plan in
    /// force trusts for them (decision 0107): their bootstrap is delivered again.
    pub access_stale: BTreeSet<Uuid>,
    /// Guests this agent created that Proxmox no longer holds under their identity, with
    /// the vmid the journal recorded: never provisioned again (DESIGN §5).
    pub lost: BTreeMap<Uuid, u32>,
    /// Guests a signed decommission destroyed: never provisioned again.
    pub gone: BTreeSet<Uuid>,
    /// The agent's own VMs on the node, as observed (decision 0114): never provisioned again,
    /// planned like a container otherwise (power, name, cores and memory, share, `startup`, root
    /// disk, network guard, bootstrap), and orphaned when desired state drops them (decisions
    /// 0117, 0125).
    pub vms: BTreeMap<Uuid, ObservedGuest>,
    /// Guests this agent created that another node of the cluster holds now, with their vmid
    /// and that node: never provisioned or recovered here.
    pub migrated: BTreeMap<Uuid, (u32, String)>,
    /// Consecutive failed DR restores per lost guest: after `restart_limit` of them the
    /// guest waits for an operator (a signed `restore-now`) instead.
    pub recover_failures: BTreeMap<Uuid, u32>,
    /// On a box that took over a lost host: the guests found on PBS, with the vmid their
    /// archive was taken of and the archive. They are restored whatever the DR policy (the
    /// operator's restore-mode enrollment asked for it).
    pub host_loss: BTreeMap<Uuid, (u32, BackupSource)>,
    /// On such a box: the guests that wait for K or for PBS, neither restored nor
    /// provisioned.
    pub awaiting_recovery: BTreeSet<Uuid>,
    /// Where hot volumes may go: the storages the signed plan (or an attached target) classes.
    pub hot_places: HotPlaces,
    /// The signed plan's bounds on every guest's share (its `guest_share`; the agent's own
    /// where it names none).
    pub share_bounds: ShareBounds,
}

/// Something to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create the guest by restoring its golden archive (DESIGN §8).
    Provision {
        /// The guest's spec.
        spec: Box<GuestSpec>,
    },
    /// Correct hostname, cores, memory or the guest's share (CPU weight, CPU limit, network
    /// rate).
    SetSpec {
        /// The guest.
        guest_id: Uuid,
        /// Its vmid.
        vmid: u32,
        /// A container or a VM: which of Proxmox's calls carry the action out.
        kind: GuestKind,
        /// New hostname, if it drifted.
        hostname: Option<String>,
        /// New cores, if they drifted.
        cores: Option<u16>,
        /// New memory, if it drifted.
        memory_mib: Option<u32>,
        /// The share to write, if it drifted.
        share: Option<ShareChange>,
        /// Its place in the node's start and stop order, if it drifted ([`super::order`]).
        startup: Option<bosun_pve::StartupOrder>,
    },
    /// Grow the rootfs.
    GrowRootfs {
        /// The guest.
        guest_id: Uuid,
        /// Its vmid.
        vmid: u32,
        /// A container or a VM: which of Proxmox's calls carry the action out.
        kind: GuestKind,
        /// Its size now.
        from_gib: u32,
        /// The size wanted.
        to_gib: u32,
    },
    /// Start the guest.
    Start {
        /// The guest.
        guest_id: Uuid,
        /// Its vmid.
        vmid: u32,
        /// A container or a VM: which of Proxmox's calls carry the action out.
        kind: GuestKind,
    },
    /// Shut the guest down.
    Stop {
        /// The guest.
        guest_id: Uuid,
        /// Its vmid.
        vmid: u32,
        /// A container or a VM: which of Proxmox's calls carry the action out.
        kind: GuestKind,
    },
    /// Restore a lost guest from its fastest surviving backup tier (the host's DR policy
    /// is `auto`).
    Recover {
        /// The guest's spec.
        spec: Box<GuestSpec>,
        /// The vmid the journal recorded for it.
        lost_vmid: u32,
        /// The archive, when the plan already knows it (host loss); else the fastest
        /// surviving tier's newest journaled archive.
        source: Option<Box<BackupSource>>,
    },
    /// Put the network guard on (`firewall=1` on its interfaces, its firewall and, for static
    /// addresses, `ipfilter` on): protection only, never turned off.
    GuardNetwork {
        /// The guest.
        guest_id: Uuid,
        /// Its vmid.
        vmid: u32,
        /// A container or a VM: which of Proxmox's calls carry the action out.
        kind: GuestKind,
    },
    /// Deliver the bootstrap (mint a token, push `bootstrap.json`) to a running guest
    /// this agent provisioned that has no token: its start or push failed during
    /// provisioning.
    DeliverBootstrap {
        /// The guest's spec (the bootstrap names its customer).
        spec: Box<GuestSpec>,
        /// Its vmid.
        vmid: u32,
    },
}

impl Action {
    /// The guest the action is for.
    pub fn guest_id(&self) -> Uuid {
        match self {
            Action::Provision { spec }
            | Action::DeliverBootstrap { spec, .. }
            | Action::Recover { spec, .. } => spec.guest_id,
            Action::SetSpec { guest_id, .. }
            | Action::GrowRootfs { guest_id, .. }
            | Action::GuardNetwork { guest_id, .. }
            | Action::Start { guest_id, .. }
            | Action::Stop { guest_id, .. } => *guest_id,
        }
    }

    /// Whether the action is for a container or a VM.
    pub fn kind(&self) -> GuestKind {
        match self {
            Action::Provision { spec }
            | Action::DeliverBootstrap { spec, .. }
            | Action::Recover { spec, .. } => spec.kind,
            Action::SetSpec { kind, .. }
            | Action::GrowRootfs { kind, .. }
            | Action::GuardNetwork { kind, .. }
            | Action::Start { kind, .. }
            | Action::Stop { kind, .. } => *kind,
        }
    }

    /// The kind of the journaled operation that carries the action out.
    pub fn op_kind(&self) -> crate::ops::operation::OpKind {
        use crate::ops::operation::OpKind;
        match self {
            Action::Provision { .. } => OpKind::Provision,
            Action::SetSpec { .. } => OpKind::SetSpec,
            Action::GrowRootfs { .. } => OpKind::GrowRootfs,
            Action::GuardNetwork { .. } => OpKind::GuardNetwork,
            Action::Start { .. } => OpKind::Start,
            Action::Stop { .. } => OpKind::Stop,
            Action::DeliverBootstrap { .. } => OpKind::DeliverBootstrap,
            Action::Recover { spec, .. } => match spec.kind {
                GuestKind::Lxc => OpKind::Recover,
                GuestKind::Qemu => OpKind::RecoverVm,
            },
        }
    }

    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Provision { .. } => "provision",
            Action::SetSpec { .. } => "set_spec",
            Action::GrowRootfs { .. } => "grow_rootfs",
            Action::GuardNetwork { .. } => "guard_network",
            Action::Start { .. } => "start",
            Action::Stop { .. } => "stop",
            Action::DeliverBootstrap { .. } => "deliver_bootstrap",
            Action::Recover { .. } => "recover",
        }
    }
}

/// Something to report without acting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// On the host, absent from desired state: left untouched.
    Orphaned {
        /// Its vmid.
        vmid: u32,
        /// Its guest id, if the agent created it.
        guest_id: Option<Uuid>,
    },
    /// Desired rootfs is smaller than the guest's: a shrink is never attempted.
    ShrinkRefused {
        /// The guest.
        guest_id: Uuid,
        /// Its vmid.
        vmid: u32,
        /// Its size now.
        have_gib: u32,
        /// The size asked for.
        want_gib: u32,
    },
    /// Failed to start too often; not started again until desired state changes.
    Broken {
        /// The guest.
        guest_id: Uuid,
        /// Its vmid.
        vmid: u32,
        /// Failed starts so far.
        failures: u32,
    },
    /// The pinned vmid is held by a guest the agent did not create for this guest id.
    VmidTaken {
        /// The guest.
        guest_id: Uuid,
        /// The pinned vmid.
        vmid: u32,
    },
    /// A guest the agent created is gone from Proxmox (or its vmid holds a stranger):
    /// `lost`, reported and left for DR, never replaced by a blank guest.
    Lost {
        /// The guest.
        guest_id: Uuid,
        /// The vmid the journal recorded for it.
        vmid: u32,
    },
    /// A guest the agent created was migrated to another node of the cluster: reported and
    /// left alone, never recovered (a restore here would run a second copy).
    Migrated {
        /// The guest.
        guest_id: Uuid,
        /// Its vmid.
        vmid: u32,
        /// The node holding it.
        node: String,
    },
    /// Desired state names a guest a signed decommission destroyed: not provisioned again.
    Decommissioned {
        /// The guest.
        guest_id: Uuid,
    },
    /// A bulk volume of a guest to build (provision or DR restore) has no place: no attached
    /// `bulk-data` target of its class. Nothing of the guest is built until it has one.
    PlacementRefused {
        /// The guest.
        guest_id: Uuid,
        /// The volume's name.
        volume: String,
        /// The class it asks for.
        class: StorageClass,
        /// Why it has no place.
        reason: PlacementRefusal,
    },
    /// A hot volume of a guest to build has no place: its storage (named, or the root
    /// volume's) is not classed `fast`. Nothing of the guest is built until it is.
    HotRefused {
        /// The guest.
        guest_id: Uuid,
        /// The volume's name.
        volume: String,
        /// The storage it would go on.
        storage: String,
        /// Why it has no place.
        reason: PlacementRefusal,
    },
    /// A share value desired state asks for crosses the signed plan's (or the agent's) bound:
    /// the bound is applied instead (decision 0100).
    ShareRefused {
        /// The guest.
        guest_id: Uuid,
        /// What was refused, and what holds instead.
        refusal: ShareRefusal,
    },
    /// A lock or a running operation; looked at again next pass.
    Deferred {
        /// The guest.
        guest_id: Uuid,
    },
    /// A requirement of the guest is refused and not waited on: no guest provides it, only
    /// stopped guests do, or it closes a cycle ([`super::order`]).
    OrderRefused {
        /// The guest.
        guest_id: Uuid,
        /// The capability it requires.
        requirement: String,
        /// The refusal's short name.
        refusal: &'static str,
        /// Why, in words.
        reason: String,
    },
    /// Desired state names an address the existing guest's config does not hold: an address
    /// never moves from a guest that exists by desired state (decision 0101).
    AddressRefused {
        /// The guest.
        guest_id: Uuid,
        /// Its vmid.
        vmid: u32,
        /// The address asked for.
        want: std::net::IpAddr,
        /// The static addresses its config holds.
        have: Vec<std::net::IpAddr>,
    },
    /// The guest's start (or provisioning) waits until the guests `on` run, or its stop until
    /// they are stopped.
    Waiting {
        /// The guest.
        guest_id: Uuid,
        /// What it waits on.
        on: Vec<Uuid>,
        /// Whether it waits to stop (else to start).
        stopping: bool,
    },
}

/// The planner's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// What to do, grouped per guest in run order.
    pub actions: Vec<Action>,
    /// What to report.
    pub findings: Vec<Finding>,
}

impl Plan {
    /// Whether the host already matches the desired state (nothing to do, nothing deferred).
    pub fn is_converged(&self) -> bool {
        self.actions.is_empty()
            && !self.findings.iter().any(|f| {
                matches!(
                    f,
                    Finding::Deferred { .. }
                        | Finding::VmidTaken { .. }
                        | Finding::Lost { .. }
                        | Finding::Migrated { .. }
                        | Finding::Decommissioned { .. }
                        | Finding::PlacementRefused { .. }
                        | Finding::HotRefused { .. }
                        | Finding::OrderRefused { .. }
                        | Finding::Waiting { .. }
                )
            })
    }
}

/// Plans one pass.
pub fn plan(desired: &DesiredState, observed: &[ObservedGuest], facts: &Facts) -> Plan {
    let mut out = Plan::default();
    let by_guest: BTreeMap<Uuid, &ObservedGuest> = observed
        .iter()
        .filter_map(|o| o.guest_id.map(|g| (g, o)))
        .collect();
    let by_vmid: BTreeMap<u32, &ObservedGuest> = observed.iter().map(|o| (o.vmid, o)).collect();
    let mut claimed: BTreeSet<u32> = BTreeSet::new();
    let order = bosun_proto::desired::order::boot_order(&desired.guests);
    out.findings.extend(super::order::refusals(&order));

    for spec in &desired.guests {
        let guest_id = spec.guest_id;
        // Only a guest the journal binds to this guest id (by the identity the agent
        // wrote) is managed: a pinned vmid never makes an existing guest this guest.
        let found = by_guest.get(&guest_id).copied();
        if let Some(o) = found {
            claimed.insert(o.vmid);
        }
        let (share, refused) =
            bosun_proto::share::resolve(desired.share_class_of(spec), &facts.share_bounds);
        out.findings.extend(
            refused
                .into_iter()
                .map(|refusal| Finding::ShareRefused { guest_id, refusal }),
        );
        if facts.busy.contains(&guest_id) {
            out.findings.push(Finding::Deferred { guest_id });
            continue;
        }
        if let Some(vm) = facts.vms.get(&guest_id) {
            // A VM of the agent's own: the guest it is, whatever kind desired state says now.
            claimed.insert(vm.vmid);
            if vm.locked {
                out.findings.push(Finding::Deferred { guest_id });
            } else {
                plan_existing(spec, &share, vm, facts, &order, GuestKind::Qemu, &mut out);
            }
            continue;
        }
        let Some(o) = found else {
            if facts.awaiting_recovery.contains(&guest_id) {
                out.findings.push(Finding::Deferred { guest_id });
                continue;
            }
            if let Some((vmid, node)) = facts.migrated.get(&guest_id) {
                out.findings.push(Finding::Migrated {
                    guest_id,
                    vmid: *vmid,
                    node: node.clone(),
                });
                continue;
            }
            let host_loss = facts.host_loss.get(&guest_id);
            if let Some(vmid) = facts
                .lost
                .get(&guest_id)
                .copied()
                .or(host_loss.map(|(vmid, _)| *vmid))
            {
                out.findings.push(Finding::Lost { guest_id, vmid });
                let failures = facts.recover_failures.get(&guest_id).copied().unwrap_or(0);
                // A lost VM comes back as a container does, from its own archives proven as
                // a VM's (decision 0121).
                let wanted = desired.dr_policy == DrPolicy::Auto || host_loss.is_some();
                if wanted
                    && failures < facts.restart_limit.max(1)
                    && placeable(desired, spec, &facts.hot_places, &mut out)
                {
                    out.actions.push(Action::Recover {
                        spec: Box::new(spec.clone()),
                        lost_vmid: vmid,
                        source: host_loss.map(|(_, source)| Box::new(source.clone())),
                    });
                }
                continue;
            }
            if facts.gone.contains(&guest_id) {
                out.findings.push(Finding::Decommissioned { guest_id });
                continue;
            }
            if let Some(v) = spec.vmid
                && by_vmid.contains_key(&v)
            {
                out.findings.push(Finding::VmidTaken { guest_id, vmid: v });
                continue;
            }
            if !placeable(desired, spec, &facts.hot_places, &mut out) {
                continue;
            }
            out.actions.push(Action::Provision {
                spec: Box::new(spec.clone()),
            });
            continue;
        };
        if o.locked {
            out.findings.push(Finding::Deferred { guest_id });
            continue;
        }
        plan_existing(spec, &share, o, facts, &order, GuestKind::Lxc, &mut out);
    }
    let everyone: Vec<ObservedGuest> = observed.iter().chain(facts.vms.values()).cloned().collect();
    super::order::hold(&mut out, &order, &everyone);

    for o in &everyone {
        if !claimed.contains(&o.vmid) {
            out.findings.push(Finding::Orphaned {
                vmid: o.vmid,
                guest_id: o.guest_id,
            });
        }
    }
    out
}

/// Whether every bulk volume of `spec` has a target of its class and every hot volume a
/// storage classed `fast`; reports each one that has none.
fn placeable(desired: &DesiredState, spec: &GuestSpec, hot: &HotPlaces, out: &mut Plan) -> bool {
    let mut placeable = true;
    for volume in &spec.bulk_volumes {
        if let Err(reason) = desired.place_bulk(volume) {
            placeable = false;
            out.findings.push(Finding::PlacementRefused {
                guest_id: spec.guest_id,
                volume: volume.name.clone(),
                class: volume.class,
                reason,
            });
        }
    }
    for volume in &spec.hot_volumes {
        if let Err(reason) = hot.place(volume) {
            placeable = false;
            out.findings.push(Finding::HotRefused {
                guest_id: spec.guest_id,
                volume: volume.name.clone(),
                storage: hot.storage_of(volume).to_owned(),
                reason,
            });
        }
    }
    placeable
}

/// The actions that move an existing guest of `kind` to `spec`. A VM is planned as a
/// container is (decisions 0117, 0125): its name (the guest's hostname), cores, memory, share,
/// `startup`, root disk, guard and power; its CPU limit held to what Proxmox takes for a VM
/// ([`super::share::for_vm`]).
fn plan_existing(
    spec: &GuestSpec,
    share: &Share,
    o: &ObservedGuest,
    facts: &Facts,
    order: &bosun_proto::desired::order::BootOrder,
    kind: GuestKind,
    out: &mut Plan,
) {
    let guest_id = spec.guest_id;
    let vmid = o.vmid;
    let want = spec.resources;
    let hostname =
        (o.hostname.as_deref() != Some(spec.hostname.as_str())).then(|| spec.hostname.clone());
    let cores = (o.cores != Some(want.cores)).then_some(want.cores);
    let memory_mib = (o.memory_mib != Some(want.memory_mib)).then_some(want.memory_mib);
    let share = match kind {
        GuestKind::Lxc => super::share::change(share, &o.share),
        GuestKind::Qemu => super::share::change(&super::share::for_vm(share), &o.share),
    };
    let startup = super::order::startup_of(order, guest_id)
        .filter(|s| super::order::startup_drifted(o.startup.as_deref(), *s));
    if hostname.is_some()
        || cores.is_some()
        || memory_mib.is_some()
        || share.is_some()
        || startup.is_some()
    {
        out.actions.push(Action::SetSpec {
            guest_id,
            vmid,
            kind,
            hostname,
            cores,
            memory_mib,
            share,
            startup,
        });
    }
    if let Some(have) = o.rootfs_gib {
        if have < want.rootfs_gib {
            out.actions.push(Action::GrowRootfs {
                guest_id,
                vmid,
                kind,
                from_gib: have,
                to_gib: want.rootfs_gib,
            });
        } else if have > want.rootfs_gib {
            out.findings.push(Finding::ShrinkRefused {
                guest_id,
                vmid,
                have_gib: have,
                want_gib: want.rootfs_gib,
            });
        }
    }
    out.findings
        .extend(super::network_guard::address_change(spec, o));
    if o.unguarded && o.guest_id == Some(guest_id) {
        out.actions.push(Action::GuardNetwork {
            guest_id,
            vmid,
            kind,
        });
    }
    match (spec.power, o.power) {
        (Power::Running, ObservedPower::Running)
            if o.guest_id == Some(guest_id)
                && (facts.tokenless.contains(&guest_id)
                    || facts.access_stale.contains(&guest_id)) =>
        {
            out.actions.push(Action::DeliverBootstrap {
                spec: Box::new(spec.clone()),
                vmid,
            });
        }
        (Power::Running, ObservedPower::Running) | (Power::Stopped, ObservedPower::Stopped) => {}
        (Power::Running, _) => {
            let failures = facts.start_failures.get(&guest_id).copied().unwrap_or(0);
            if failures >= facts.restart_limit {
                out.findings.push(Finding::Broken {
                    guest_id,
                    vmid,
                    failures,
                });
            } else {
                out.actions.push(Action::Start {
                    guest_id,
                    vmid,
                    kind,
                });
            }
        }
        (Power::Stopped, _) => out.actions.push(Action::Stop {
            guest_id,
            vmid,
            kind,
        }),
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
pub(in crate::guests::reconcile) mod tests;

#[cfg(test)]
#[path = "plan_bootstrap_tests.rs"]
mod bootstrap_tests;

#[cfg(test)]
#[path = "plan_vm_tests.rs"]
mod vm_tests;
