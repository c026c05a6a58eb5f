//! Reading the host: Proxmox's guests joined with the journal's provenance,
//! turned into the planner's [`ObservedGuest`]s; and the property-string
//! parsing the reconciler needs (`netN`, `rootfs` size).
//!
//! A container is the journal's guest only if its config carries the identity the
//! agent wrote when it created it (DESIGN §5), never by its vmid alone. A guest the
//! journal records that Proxmox no longer holds — or whose vmid now holds a container
//! without its identity (a stranger, never touched) — is [`LostGuest`], unless the
//! operation creating it is still running (its restore may not have ended yet).
//!
//! On a node of a Proxmox cluster a guest can leave the node without being lost: migrated to
//! another node. Before a guest is judged lost, the cluster's guest list
//! (`GET /cluster/resources`) is read once: a guest the journal records that another node
//! now holds under the identity the agent wrote is [`MigratedGuest`] — reported, never
//! recovered (a DR restore would run a second copy of it beside the first).
//!
//! A container's config and firewall options are read again only when the listing shows a
//! change, the agent may have changed the node, or it is the container's turn
//! ([`super::config_cache`], decision 0110). The agent's own VMs are read the same way
//! ([`super::observe_vm`], decision 0117).

use std::collections::{BTreeMap, BTreeSet};

use bosun_pve::{CtConfig, GuestFirewall, GuestStatus, PveError, PveQemu};
use uuid::Uuid;

use super::config_cache::{self, ConfigCache};
use super::plan::{ObservedGuest, ObservedPower};
use crate::ops::journal::{JournalError, JournalHandle};

/// Why the host could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// Listing or reading guests failed.
    #[error("reading guests from proxmox")]
    Pve(#[source] PveError),
    /// Reading provenance failed.
    #[error("reading guest provenance from the journal")]
    Journal(#[source] JournalError),
}

/// A guest the agent created that Proxmox no longer holds under its identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LostGuest {
    /// The hub's guest id.
    pub guest_id: Uuid,
    /// The vmid the journal recorded for it.
    pub vmid: u32,
}

/// A guest the agent created that another node of the cluster now holds, under its identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct MigratedGuest {
    /// The hub's guest id.
    pub guest_id: Uuid,
    /// Its vmid (the same cluster-wide).
    pub vmid: u32,
    /// The node that holds it now.
    pub node: String,
}

/// A VM the agent created (decision 0114), as the node's VM listing and its config show it
/// under the identity the agent wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedVm {
    /// The hub's guest id.
    pub guest_id: Uuid,
    /// Its vmid.
    pub vmid: u32,
    /// Whether it runs.
    pub running: bool,
    /// The planner's view of it: power, cores, memory, root disk, addresses, guard
    /// (decision 0117).
    pub guest: ObservedGuest,
}

/// One pass's view of the host.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Every container on the node.
    pub guests: Vec<ObservedGuest>,
    /// The agent's own VMs on the node (held, so never lost; planned like containers,
    /// decision 0117).
    pub vms: Vec<ObservedVm>,
    /// Guests the agent created that are gone (or whose vmid a stranger holds).
    pub lost: Vec<LostGuest>,
    /// Guests the agent created that another node of the cluster holds now.
    pub migrated: Vec<MigratedGuest>,
    /// Guests a signed decommission destroyed (the journal's tombstones).
    pub gone: BTreeSet<Uuid>,
    /// Guests whose container vanished between the list and the read of its config: neither
    /// present nor lost this pass, so nothing is decided about them until the next one.
    pub unsettled: BTreeSet<Uuid>,
}

/// What the journal says a vmid should hold.
pub(super) struct Record {
    /// The guest it is.
    pub(super) guest_id: Option<Uuid>,
    /// The identity tag the agent wrote into it.
    pub(super) identity: String,
    /// Whether the operation creating it still runs.
    pub(super) creating: bool,
}

/// What the journal knows before Proxmox is read: the provenance of every guest the agent
/// created (scratch guests apart), the scratch guests' vmids and the tombstones.
pub(super) struct Known {
    /// What each journaled vmid should hold.
    pub(super) provenance: BTreeMap<u32, Record>,
    scratch: BTreeSet<u32>,
    gone: BTreeSet<Uuid>,
}

impl Known {
    async fn read(journal: &JournalHandle) -> Result<Self, ObserveError> {
        let running: BTreeSet<crate::ops::journal::OpId> = journal
            .unfinished_operations()
            .await
            .map_err(ObserveError::Journal)?
            .into_iter()
            .map(|u| u.operation.op_id)
            .collect();
        let all = journal
            .all_provenance()
            .await
            .map_err(ObserveError::Journal)?;
        // A restore test's scratch guest is the tester's alone: never a guest of desired state,
        // never an orphan, never in the report.
        let scratch: BTreeSet<u32> = all
            .iter()
            .filter(|p| p.is_scratch())
            .map(|p| p.vmid())
            .collect();
        let provenance: BTreeMap<u32, Record> = all
            .into_iter()
            .filter(|p| !p.is_scratch())
            .map(|p| {
                let record = Record {
                    guest_id: p.guest_id().and_then(|g| Uuid::parse_str(g).ok()),
                    identity: p.identity().to_owned(),
                    creating: running.contains(&p.created_by_op()),
                };
                (p.vmid(), record)
            })
            .collect();
        let gone: BTreeSet<Uuid> = journal
            .tombstones()
            .await
            .map_err(ObserveError::Journal)?
            .into_iter()
            .filter_map(|t| Uuid::parse_str(&t.guest_id).ok())
            .collect();
        Ok(Self {
            provenance,
            scratch,
            gone,
        })
    }
}

/// Reads every container, its config (from `cache` where it still holds), the agent's own VMs
/// (theirs from `vm_cache`) and the journal's provenance.
pub async fn observe<P: PveQemu>(
    pve: &P,
    journal: &JournalHandle,
    cache: &mut ConfigCache,
    vm_cache: &mut ConfigCache,
) -> Result<Observed, ObserveError> {
    let known = Known::read(journal).await?;
    let mut held: BTreeSet<u32> = BTreeSet::new();
    let mut unsettled: BTreeSet<Uuid> = BTreeSet::new();
    // Read before the list: a change the agent makes from here on is seen by the next pass.
    cache.begin(pve.change_mark());
    let list = pve.list_cts().await.map_err(ObserveError::Pve)?;
    let listed: BTreeSet<u32> = list.iter().map(|c| c.vmid.get()).collect();
    cache.keep_only(&listed);
    let mut guests = Vec::with_capacity(list.len());
    for ct in list
        .into_iter()
        .filter(|c| !c.template && !known.scratch.contains(&c.vmid.get()))
    {
        let vmid = ct.vmid;
        let record = known.provenance.get(&vmid.get());
        let entry = match cache.read(pve, &ct).await {
            Ok(entry) => entry,
            // Destroyed between the list and the read: skip it this pass (and judge
            // nothing about the journal's guest there until the next one).
            Err(e) if e.is_missing() => {
                held.insert(vmid.get());
                if let Some(guest_id) = record.and_then(|r| r.guest_id) {
                    unsettled.insert(guest_id);
                }
                continue;
            }
            Err(e) => return Err(ObserveError::Pve(e)),
        };
        let guest_id = ours(vmid.get(), record, &entry.config);
        if guest_id.is_some() {
            held.insert(vmid.get());
        }
        let locked = ct.lock.is_some() || entry.config.lock().is_some();
        // A guest of the agent's own is checked for its network guard, which its firewall
        // options are part of (read with its config; a failed read leaves the question to the
        // next pass).
        let guard_checked = guest_id.is_some() && !locked;
        if guard_checked {
            config_cache::read_firewall(pve, vmid, entry).await;
        }
        let firewall = entry.firewall.as_ref().filter(|_| guard_checked);
        guests.push(observed_guest(
            ct,
            &entry.config,
            firewall,
            guest_id,
            locked,
        ));
    }
    let vms = super::observe_vm::own_vms(pve, &known, &mut held, &mut unsettled, vm_cache).await?;
    let (lost, migrated) = lost_and_migrated(pve, journal, &known, &held, &unsettled).await?;
    Ok(Observed {
        guests,
        vms,
        lost,
        migrated,
        gone: known.gone,
        unsettled,
    })
}

/// The guest id of the container at `vmid` when it is the journal's guest there: it carries
/// the identity written when it was created, or is still being created by a running
/// operation (the identity arrives with the end of the restore).
fn ours(vmid: u32, record: Option<&Record>, config: &CtConfig) -> Option<Uuid> {
    let record = record?;
    if super::lookup::carries_identity(config, &record.identity)
        || (record.creating && config.lock().as_deref() == Some("create"))
    {
        return record.guest_id;
    }
    tracing::warn!(
        vmid,
        guest_id = record.guest_id.map(tracing::field::display),
        "the guest at a journaled vmid does not carry the identity written when it was created; not ours"
    );
    None
}

/// The planner's view of one container, its config and, for a guest of the agent's own,
/// its firewall options.
fn observed_guest(
    ct: bosun_pve::CtSummary,
    config: &CtConfig,
    firewall: Option<&GuestFirewall>,
    guest_id: Option<Uuid>,
    locked: bool,
) -> ObservedGuest {
    let power = match ct.status {
        GuestStatus::Running => ObservedPower::Running,
        GuestStatus::Stopped => ObservedPower::Stopped,
        GuestStatus::Unknown => ObservedPower::Other,
    };
    let unguarded = guest_id.is_some()
        && !locked
        && firewall.is_some_and(|f| super::network_guard::needs_guard(config, f));
    ObservedGuest {
        vmid: ct.vmid.get(),
        guest_id,
        power,
        hostname: config.hostname().or(ct.name),
        cores: config.get_u64("cores").and_then(|v| u16::try_from(v).ok()),
        memory_mib: config.get_u64("memory").and_then(|v| u32::try_from(v).ok()),
        rootfs_gib: config.get_str("rootfs").and_then(|r| volume_size_gib(&r)),
        locked,
        unguarded,
        addresses: super::network_guard::configured_addresses(config),
        share: super::share::observed(config),
        startup: config.get_str("startup"),
    }
}

/// The guests the journal records that Proxmox no longer holds under their identity (and
/// those still lost from earlier passes), less the ones another node of the cluster holds
/// now, which are given apart.
async fn lost_and_migrated<P: PveQemu>(
    pve: &P,
    journal: &JournalHandle,
    known: &Known,
    held: &BTreeSet<u32>,
    unsettled: &BTreeSet<Uuid>,
) -> Result<(Vec<LostGuest>, Vec<MigratedGuest>), ObserveError> {
    let provenance = &known.provenance;
    let mut lost: Vec<LostGuest> = provenance
        .iter()
        .filter(|(vmid, record)| !record.creating && !held.contains(vmid))
        .filter_map(|(vmid, record)| {
            record.guest_id.map(|guest_id| LostGuest {
                guest_id,
                vmid: *vmid,
            })
        })
        .collect();
    let migrated = if lost.is_empty() {
        Vec::new()
    } else {
        migrated_away(pve, provenance, &mut lost).await?
    };
    // A lost guest stays lost until a DR restore brings it back, even once its record has
    // moved to the restore's vmid and the restore was rolled back: never free to be
    // provisioned blank.
    for l in &lost {
        journal
            .note_lost(l.guest_id.to_string(), l.vmid)
            .await
            .map_err(ObserveError::Journal)?;
    }
    let present: BTreeSet<Uuid> = provenance.values().filter_map(|r| r.guest_id).collect();
    for (guest_id, vmid, _) in journal.lost_guests().await.map_err(ObserveError::Journal)? {
        let Ok(guest_id) = Uuid::parse_str(&guest_id) else {
            continue;
        };
        if !present.contains(&guest_id)
            && !known.gone.contains(&guest_id)
            && !unsettled.contains(&guest_id)
        {
            lost.push(LostGuest { guest_id, vmid });
        }
    }
    lost.sort();
    lost.dedup();
    Ok((lost, migrated))
}

/// Takes out of `lost` the guests another node of the cluster holds under the identity the
/// journal recorded, and gives them. A vmid another node holds without that identity stays
/// lost (a stranger took the id); the list failing fails the pass, so nothing is judged lost
/// that may only have moved.
async fn migrated_away<P: PveQemu>(
    pve: &P,
    provenance: &BTreeMap<u32, Record>,
    lost: &mut Vec<LostGuest>,
) -> Result<Vec<MigratedGuest>, ObserveError> {
    let cluster = pve.cluster_guests().await.map_err(ObserveError::Pve)?;
    let here = pve.node().as_str();
    let mut migrated = Vec::new();
    lost.retain(|l| {
        let Some(record) = provenance.get(&l.vmid) else {
            return true;
        };
        let elsewhere = cluster.iter().find(|g| {
            g.vmid == u64::from(l.vmid)
                && (g.kind == "lxc" || g.kind == "qemu")
                && g.node.as_deref().is_some_and(|n| n != here)
                && super::lookup::has_tag(g.tags.as_deref(), &record.identity)
        });
        match elsewhere.and_then(|g| g.node.clone()) {
            Some(node) => {
                migrated.push(MigratedGuest {
                    guest_id: l.guest_id,
                    vmid: l.vmid,
                    node,
                });
                false
            }
            None => true,
        }
    });
    migrated.sort();
    Ok(migrated)
}

/// The `size=` of a volume property string (`local-lvm:vm-101-disk-0,size=8G`),
/// in whole GiB rounded up.
pub fn volume_size_gib(property: &str) -> Option<u32> {
    let size = property
        .split(',')
        .find_map(|part| part.strip_prefix("size="))?;
    let (digits, unit) = size.split_at(size.find(|c: char| !c.is_ascii_digit() && c != '.')?);
    let value: f64 = digits.parse().ok()?;
    let gib = match unit {
        "T" => value * 1024.0,
        "G" => value,
        "M" => value / 1024.0,
        "K" => value / (1024.0 * 1024.0),
        _ => return None,
    };
    let rounded = gib.ceil();
    (0.0..=f64::from(u32::MAX))
        .contains(&rounded)
        .then(|| format!("{rounded:.0}").parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rootfs_sizes() {
        assert_eq!(volume_size_gib("local-lvm:vm-101-disk-0,size=8G"), Some(8));
        assert_eq!(volume_size_gib("local-lvm:vm-1,size=512M"), Some(1));
        assert_eq!(volume_size_gib("x:y,size=1T"), Some(1024));
        assert_eq!(volume_size_gib("x:y"), None);
        assert_eq!(volume_size_gib("x:y,size=8Q"), None);
    }
}
