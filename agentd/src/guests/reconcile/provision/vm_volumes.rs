//! The `vm_volume` step: a VM's hot and bulk volumes as disks (decision 0124). Each volume is
//! an SCSI disk (the golden VM base boots from `scsi0` on `virtio-scsi-single`) whose
//! `serial=` is the volume's name, so the guest finds it as
//! `/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_<name>` and the agent finds it again in the
//! config: a hot volume with `backup=1` on a storage the signed plan classes `fast` (the
//! containers' rule, [`crate::data::storage::hot`]), a bulk volume with `backup=0` on its
//! bulk target's storage. A disk already carrying the volume's serial (a resumed operation, a
//! lost answer, a DR restore whose archive held it) is left as it is; otherwise the volume
//! takes the lowest free `scsi` slot.

use bosun_proto::desired::GuestSpec;
use bosun_pve::{
    NewVmDisk, NewVmDisks, PveQemu, SCSI_SLOTS, StorageId, VmConfig, VmConfigUpdate, VmDisk, Vmid,
    drive_option,
};
use serde_json::json;

use super::vm::VmProvisioner;
use crate::ops::operation::{OpJournal, StepError, StepName};

/// One disk a VM's spec asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct WantedDisk {
    /// The volume's name (the disk's serial).
    pub(super) name: String,
    /// `hot` or `bulk`.
    pub(super) role: &'static str,
    /// Where it is allocated.
    pub(super) storage: StorageId,
    /// Its size.
    pub(super) size_gib: u32,
    /// Whether vzdump includes it.
    pub(super) backup: bool,
}

/// The bus slot (`scsi1`, `virtio0`, …) of the disk whose serial is `serial`, if any.
pub(crate) fn disk_with_serial(config: &VmConfig, serial: &str) -> Option<String> {
    config
        .values
        .iter()
        .filter(|(key, _)| VmDisk::is_bus_slot(key))
        .find(|(_, value)| {
            value.as_str().is_some_and(|v| {
                !v.contains("media=cdrom") && drive_option(v, "serial") == Some(serial)
            })
        })
        .map(|(key, _)| key.clone())
}

/// The lowest `scsi` slot `config` leaves free.
fn free_scsi_slot(config: &VmConfig) -> Option<u8> {
    (0..SCSI_SLOTS).find(|slot| !config.values.contains_key(&format!("scsi{slot}")))
}

impl<Q: PveQemu + 'static> VmProvisioner<Q> {
    /// The disks `spec` asks for, each with the storage it goes on; the first volume without
    /// a place refuses the whole guest (nothing is built for it).
    #[expect(
        clippy::result_large_err,
        reason = "StepError is the one error of every journaled step"
    )]
    pub(super) fn wanted_disks(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
    ) -> Result<Vec<WantedDisk>, StepError> {
        let refused = |name: &str, why: String| StepError::Other {
            op_id: op.op_id(),
            step: StepName::VmVolume.as_str().into(),
            reason: format!("volume {name}: {why}"),
        };
        let mut wanted = Vec::new();
        for volume in &spec.bulk_volumes {
            let storage = self
                .base
                .place(volume)
                .map_err(|why| refused(&volume.name, why))?;
            wanted.push(WantedDisk {
                name: volume.name.clone(),
                role: "bulk",
                storage,
                size_gib: volume.size_gib,
                backup: false,
            });
        }
        for volume in &spec.hot_volumes {
            let storage = self
                .base
                .place_hot(volume)
                .map_err(|why| refused(&volume.name, why))?;
            wanted.push(WantedDisk {
                name: volume.name.clone(),
                role: "hot",
                storage,
                size_gib: volume.size_gib,
                backup: true,
            });
        }
        Ok(wanted)
    }

    /// The `vm_volume` steps: each volume of `spec` not yet a disk of `vmid` (by serial)
    /// allocated and added in the lowest free `scsi` slot, one journaled config change each.
    pub(super) async fn volumes(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        vmid: Vmid,
    ) -> Result<(), StepError> {
        if spec.bulk_volumes.is_empty() && spec.hot_volumes.is_empty() {
            return Ok(());
        }
        let wanted = self.wanted_disks(op, spec)?;
        let pve = &*self.base.pve;
        let mut config = op
            .call(
                StepName::ReadConfig,
                json!({ "vmid": vmid.get() }),
                pve.vm_config(vmid),
            )
            .await?;
        for disk in wanted {
            if let Some(slot) = disk_with_serial(&config, &disk.name) {
                tracing::debug!(vmid = vmid.get(), volume = %disk.name, %slot, "the vm already has the volume's disk");
                continue;
            }
            let slot = free_scsi_slot(&config).ok_or_else(|| StepError::Other {
                op_id: op.op_id(),
                step: StepName::VmVolume.as_str().into(),
                reason: format!("volume {}: the vm has no free scsi slot", disk.name),
            })?;
            let new = NewVmDisk {
                storage: disk.storage.clone(),
                size_gib: disk.size_gib,
                backup: disk.backup,
                serial: disk.name.clone(),
            };
            let mut update = VmConfigUpdate::default();
            update.set.new_disks = NewVmDisks([(slot, new)].into_iter().collect());
            let record = json!({
                "vmid": vmid.get(),
                "name": disk.name,
                "role": disk.role,
                "disk": format!("scsi{slot}"),
                "storage": disk.storage.as_str(),
                "size_gib": disk.size_gib,
                "backup": disk.backup,
            });
            op.call(
                StepName::VmVolume,
                record,
                pve.update_vm_config(vmid, &update),
            )
            .await?;
            tracing::info!(vmid = vmid.get(), volume = %disk.name, role = disk.role, slot, storage = %disk.storage, "vm volume added");
            // The slot is taken now: the next volume looks past it.
            config.values.insert(
                format!("scsi{slot}"),
                json!(format!("{}:new,serial={}", disk.storage, disk.name)),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn config(pairs: &[(&str, &str)]) -> VmConfig {
        VmConfig {
            digest: String::new(),
            values: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
                .collect(),
        }
    }

    #[test]
    fn a_volume_is_found_by_its_serial_on_a_bus_slot_only() {
        let c = config(&[
            ("scsi0", "local-lvm:vm-100-disk-0,size=10G"),
            (
                "scsi1",
                "local-lvm:vm-100-disk-1,backup=1,serial=db,size=2G",
            ),
            ("ide2", "local-lvm:vm-100-cloudinit,media=cdrom"),
            ("unused0", "local-lvm:vm-100-disk-2"),
            (
                "description",
                "scsi2: bulk:vm-100-disk-3,backup=0,serial=media",
            ),
        ]);
        assert_eq!(disk_with_serial(&c, "db").as_deref(), Some("scsi1"));
        assert_eq!(disk_with_serial(&c, "media"), None);
        assert_eq!(disk_with_serial(&c, "d"), None);
    }

    #[test]
    fn the_lowest_free_scsi_slot_is_taken() {
        let c = config(&[
            ("scsi0", "local-lvm:vm-100-disk-0"),
            ("scsi2", "local-lvm:vm-100-disk-1"),
        ]);
        assert_eq!(free_scsi_slot(&c), Some(1));
        let full: Vec<(String, String)> = (0..SCSI_SLOTS)
            .map(|i| (format!("scsi{i}"), "x".to_owned()))
            .collect();
        let full: Vec<(&str, &str)> = full.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(free_scsi_slot(&config(&full)), None);
    }
}
