//! The `hot_volume` step: each hot volume of the guest becomes a mount point the guest's
//! vzdump includes (`backup=1`), allocated on a storage the signed plan classes `fast`
//! ([`crate::data::storage::hot`]); never on another (decision 0087).

use bosun_proto::desired::{GuestSpec, HotVolume, StorageClass};
use bosun_pve::{ConfigUpdate, CtConfig, CtOptions, NewMountPoint, Pve, StorageId, Vmid};
use serde_json::json;

use super::Provisioner;
use crate::data::storage::hot::HotPlaces;
use crate::ops::operation::StepName;
use crate::ops::operation::{OpJournal, StepError};

/// Most mount points a container has (`mp0`…`mp255`).
const MOUNT_POINT_SLOTS: u16 = 256;

impl<P: Pve + 'static> Provisioner<P> {
    /// The storage a hot volume goes on: the one it names or the root volume's, only when the
    /// signed plan (or an attached target) classes it `fast`; else why not.
    pub(super) fn place_hot(&self, volume: &HotVolume) -> Result<StorageId, String> {
        let desired = self
            .placement
            .as_ref()
            .and_then(|placement| placement.borrow().clone())
            .ok_or("no desired state to place it by")?;
        let places = HotPlaces::new(
            &desired.state,
            desired.plan.as_ref().map(|p| &p.plan),
            self.storage.as_str(),
        );
        let storage = places.storage_of(volume).to_owned();
        let placed = places.place(volume).map_err(|refusal| {
            format!(
                "storage {storage}: {}",
                refusal.describe(StorageClass::Fast)
            )
        })?;
        StorageId::new(placed.clone()).map_err(|e| format!("storage {placed}: {e}"))
    }

    /// The `hot_volume` step: each hot volume not yet mounted at its path (a resumed
    /// operation, or a DR restore whose archive held it) becomes a `backup=1` mount point in
    /// the lowest free `mp` slot, on its `fast` storage.
    pub(super) async fn hot_volumes(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        vmid: Vmid,
    ) -> Result<(), StepError> {
        if spec.hot_volumes.is_empty() {
            return Ok(());
        }
        let pve = &*self.pve;
        let mut config = op
            .call(
                StepName::ReadConfig,
                json!({ "vmid": vmid.get() }),
                pve.ct_config(vmid),
            )
            .await?;
        for volume in &spec.hot_volumes {
            if mounted_at(&config, &volume.path) {
                continue;
            }
            let refused = |why: String| StepError::Other {
                op_id: op.op_id(),
                step: "hot_volume".into(),
                reason: format!("hot volume {}: {why}", volume.name),
            };
            let storage = self.place_hot(volume).map_err(refused)?;
            let index = free_slot(&config)
                .ok_or_else(|| refused("the container has no free mount point".to_owned()))?;
            let mount = NewMountPoint {
                storage,
                size_gib: volume.size_gib,
                path: volume.path.clone(),
                backup: true,
            };
            self.add_mount_point(
                op,
                StepName::HotVolume,
                vmid,
                (index, &volume.name),
                mount,
                &[],
            )
            .await?;
            // The slot is taken now: the next volume looks past it.
            config
                .values
                .insert(format!("mp{index}"), json!(format!("mp={}", volume.path)));
        }
        Ok(())
    }

    /// Adds `mount` to `vmid` as mount point `mp<index>` through the journaled step `step`,
    /// whose record names the volume (`name`), where it went and `extra` fields.
    pub(super) async fn add_mount_point(
        &self,
        op: &OpJournal,
        step: StepName,
        vmid: Vmid,
        (index, name): (u8, &str),
        mount: NewMountPoint,
        extra: &[(&str, serde_json::Value)],
    ) -> Result<(), StepError> {
        let mut record = json!({
            "vmid": vmid.get(),
            "name": name,
            "mp": format!("mp{index}"),
            "storage": mount.storage.as_str(),
            "size_gib": mount.size_gib,
            "path": mount.path,
        });
        if let Some(fields) = record.as_object_mut() {
            for (key, value) in extra {
                fields.insert((*key).to_owned(), value.clone());
            }
        }
        let mut set = CtOptions::default();
        set.mount_points.insert(index, mount);
        let update = ConfigUpdate {
            set,
            ..ConfigUpdate::default()
        };
        op.call(step, record, self.pve.update_ct_config(vmid, &update))
            .await?;
        Ok(())
    }
}

/// Whether some mount point of `config` is mounted at `path`.
fn mounted_at(config: &CtConfig, path: &str) -> bool {
    let want = format!("mp={path}");
    config
        .values
        .iter()
        .filter(|(key, _)| is_mount_point_key(key))
        .any(|(_, value)| {
            value
                .as_str()
                .is_some_and(|v| v.split(',').any(|p| p == want))
        })
}

/// The lowest `mp` slot `config` does not use.
fn free_slot(config: &CtConfig) -> Option<u8> {
    (0..MOUNT_POINT_SLOTS)
        .filter_map(|i| u8::try_from(i).ok())
        .find(|i| !config.values.contains_key(&format!("mp{i}")))
}

/// Whether `key` names a mount point (`mp` and a number).
fn is_mount_point_key(key: &str) -> bool {
    key.strip_prefix("mp")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}
