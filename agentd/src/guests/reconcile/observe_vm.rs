//! Reading the agent's own VMs (decision 0117): the node's VM listing joined with the
//! journal's provenance, each VM's config (from the config cache, decision 0110) and its
//! firewall options, turned into the planner's [`ObservedGuest`].
//!
//! Only a VM at a vmid the journal records for a guest, carrying the identity the agent wrote
//! when it created it, is the agent's; a VM at such a vmid without it is a stranger (never
//! read further, and the journal's guest is lost). VMs nobody journaled (an operator's, even
//! in Bosun's pool) are never read beyond the listing. What is read is bounded by the journal:
//! one config and one firewall read per VM of the agent's own, at most, per pass.

use std::collections::{BTreeMap, BTreeSet};

use bosun_pve::{GuestStatus, PveQemu, VmConfig, VmDisk};
use uuid::Uuid;

use super::config_cache::{self, ConfigCache};
use super::observe::{Known, ObserveError, ObservedVm};
use super::plan::{ObservedGuest, ObservedPower};

/// The lock qemu-server holds on a VM's config while an archive is restored over it.
const RESTORING: &str = "restore";

/// The agent's own VMs on this node: every journaled guest no container holds is looked for
/// in the node's VM listing (read once, only while there is such a guest). Each one found
/// under its identity is held (never lost) and given; one whose config vanished between the
/// listing and its read, or that an archive is being restored over, is `unsettled` (judged
/// next pass).
pub(super) async fn own_vms<P: PveQemu>(
    pve: &P,
    known: &Known,
    held: &mut BTreeSet<u32>,
    unsettled: &mut BTreeSet<Uuid>,
    cache: &mut ConfigCache,
) -> Result<Vec<ObservedVm>, ObserveError> {
    let candidates: BTreeMap<u32, (Uuid, &str)> = known
        .provenance
        .iter()
        .filter(|(vmid, record)| !record.creating && !held.contains(vmid))
        .filter_map(|(vmid, record)| {
            record
                .guest_id
                .map(|g| (*vmid, (g, record.identity.as_str())))
        })
        .collect();
    cache.begin(pve.change_mark());
    if candidates.is_empty() {
        cache.keep_only(&BTreeSet::new());
        return Ok(Vec::new());
    }
    let list = pve.list_vms().await.map_err(ObserveError::Pve)?;
    cache.keep_only(&list.iter().map(|v| v.vmid.get()).collect());
    let mut vms = Vec::new();
    for vm in list.iter().filter(|v| !v.template) {
        let vmid = vm.vmid;
        let Some(&(guest_id, identity)) = candidates.get(&vmid.get()) else {
            continue;
        };
        let entry = match cache.read_vm(pve, vm).await {
            Ok(entry) => entry,
            Err(e) if e.is_missing() => {
                held.insert(vmid.get());
                unsettled.insert(guest_id);
                continue;
            }
            Err(e) => return Err(ObserveError::Pve(e)),
        };
        if !super::lookup::carries_identity(&entry.config, identity)
            && entry.config.lock().as_deref() == Some(RESTORING)
        {
            // `qmrestore force=1` over the VM (a signed `restore-now`, decision 0123) empties
            // its config to `lock: restore` until the archive's config, identity included, is
            // written: judged again once it ends, never taken for lost while it runs.
            tracing::info!(
                vmid = vmid.get(),
                %guest_id,
                "the vm at a journaled vmid is being restored over; judged once the restore ends"
            );
            held.insert(vmid.get());
            unsettled.insert(guest_id);
            continue;
        }
        if !super::lookup::carries_identity(&entry.config, identity) {
            tracing::warn!(
                vmid = vmid.get(),
                %guest_id,
                "the vm at a journaled vmid does not carry the identity written when it was created; not ours"
            );
            continue;
        }
        held.insert(vmid.get());
        let locked = vm.lock.is_some() || entry.config.lock().is_some();
        if !locked {
            config_cache::read_vm_firewall(pve, vmid, entry).await;
        }
        let firewall = entry.firewall.as_ref().filter(|_| !locked);
        let power = match vm.status {
            GuestStatus::Running => ObservedPower::Running,
            GuestStatus::Stopped => ObservedPower::Stopped,
            GuestStatus::Unknown => ObservedPower::Other,
        };
        let config = &entry.config;
        vms.push(ObservedVm {
            guest_id,
            vmid: vmid.get(),
            running: power == ObservedPower::Running,
            guest: ObservedGuest {
                vmid: vmid.get(),
                guest_id: Some(guest_id),
                power,
                hostname: config.get_str("name").or_else(|| vm.name.clone()),
                cores: config.get_u64("cores").and_then(|v| u16::try_from(v).ok()),
                memory_mib: memory_mib(config),
                rootfs_gib: root_disk(config)
                    .and_then(|(_, drive)| super::observe::volume_size_gib(&drive)),
                locked,
                unguarded: !locked
                    && firewall.is_some_and(|f| super::vm_guard::vm_needs_guard(config, f)),
                addresses: super::vm_guard::vm_addresses(config),
                share: super::share::observed(config),
                startup: config.get_str("startup"),
            },
        });
    }
    vms.sort_by_key(|v| v.vmid);
    Ok(vms)
}

/// A VM's memory in MiB: `memory` is a number, or a property string whose `current=` (or
/// first, unnamed value) is it.
pub(super) fn memory_mib(config: &VmConfig) -> Option<u32> {
    if let Some(n) = config.get_u64("memory") {
        return u32::try_from(n).ok();
    }
    let value = config.get_str("memory")?;
    value
        .split(',')
        .find_map(|part| match part.split_once('=') {
            Some(("current", v)) => Some(v),
            Some(_) => None,
            None => Some(part),
        })
        .and_then(|v| v.parse().ok())
}

/// A VM's root disk and its drive string: the first disk of its `boot` order, else the first
/// disk of a bus (`scsi0`…, `virtio0`…, `sata0`…, `ide0`…) that is not a cdrom.
pub fn root_disk(config: &VmConfig) -> Option<(VmDisk, String)> {
    let drive = |key: &str| {
        config
            .get_str(key)
            .filter(|d| !d.split(',').any(|p| p == "media=cdrom"))
            .and_then(|d| VmDisk::new(key).ok().map(|k| (k, d)))
    };
    let booted = config.get_str("boot").and_then(|boot| {
        boot.split(',')
            .find_map(|p| p.strip_prefix("order="))
            .and_then(|order| {
                order
                    .split(';')
                    .filter(|k| VmDisk::is_bus_slot(k))
                    .find_map(drive)
            })
    });
    booted.or_else(|| {
        ["scsi", "virtio", "sata", "ide"]
            .iter()
            .flat_map(|bus| (0..31).map(move |n| format!("{bus}{n}")))
            .filter(|k| VmDisk::is_bus_slot(k))
            .find_map(|k| drive(&k))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(pairs: &[(&str, serde_json::Value)]) -> VmConfig {
        let mut values: serde_json::Map<String, serde_json::Value> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        values.insert("digest".into(), json!("d"));
        serde_json::from_value(serde_json::Value::Object(values)).unwrap()
    }

    #[test]
    fn the_root_disk_is_the_first_booted_disk_never_a_cdrom() {
        let vm = config(&[
            ("boot", json!("order=ide2;scsi1;net0")),
            ("ide2", json!("local-lvm:vm-100-cloudinit,media=cdrom")),
            ("scsi0", json!("local-lvm:vm-100-disk-0,size=10G")),
            ("scsi1", json!("local-lvm:vm-100-disk-1,size=32G")),
        ]);
        let (disk, drive) = root_disk(&vm).unwrap();
        assert_eq!(disk.as_str(), "scsi1");
        assert_eq!(super::super::observe::volume_size_gib(&drive), Some(32));
        let unbooted = config(&[
            ("ide0", json!("local:iso/x.iso,media=cdrom")),
            ("virtio0", json!("local-lvm:vm-100-disk-0,size=8G")),
        ]);
        assert_eq!(root_disk(&unbooted).unwrap().0.as_str(), "virtio0");
        assert!(root_disk(&config(&[("ide2", json!("none,media=cdrom"))])).is_none());
    }

    #[test]
    fn memory_reads_as_a_number_or_its_current_value() {
        assert_eq!(memory_mib(&config(&[("memory", json!(2048))])), Some(2048));
        assert_eq!(
            memory_mib(&config(&[("memory", json!("1024"))])),
            Some(1024)
        );
        assert_eq!(
            memory_mib(&config(&[("memory", json!("current=4096"))])),
            Some(4096)
        );
        assert_eq!(memory_mib(&config(&[])), None);
    }
}
