//! Where a guest's hot volumes may go (DESIGN §7, decision 0087): only on a Proxmox storage
//! of class `fast`, as the signed data plan classes the node's own storages
//! (`node_storages`) or as an attached volume target (`bulk-data` or `primary`) of the
//! desired state held to that plan is classed. A storage with no class is never taken for
//! fast, so a host without a verified plan places a hot volume only on a fast target.

use bosun_proto::data_plan::DataPlan;
use bosun_proto::desired::{
    DesiredState, HotVolume, PlacementRefusal, StorageClass, StorageRole, TargetState,
};

use super::classes::StorageClasses;
use super::naming::target_storage_id;

/// The classes hot volumes are placed by, and the storage a volume that names none goes on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HotPlaces {
    root_storage: String,
    classes: StorageClasses,
}

impl HotPlaces {
    /// The places of `state` (already held to `plan`) on a host whose root volumes go on
    /// `root_storage`.
    pub fn new(state: &DesiredState, plan: Option<&DataPlan>, root_storage: &str) -> Self {
        let mut classes = StorageClasses::default();
        for target in state.storage.iter().filter(|t| {
            t.state == TargetState::Attached
                && matches!(t.role, StorageRole::BulkData | StorageRole::Primary)
        }) {
            classes.insert_storage(target_storage_id(target).as_str(), target.class);
        }
        if let Some(plan) = plan {
            classes.insert_node_storages(&plan.node_storages);
        }
        Self {
            root_storage: root_storage.to_owned(),
            classes,
        }
    }

    /// The storage `volume` asks for: the one it names, else the root volume's.
    pub fn storage_of<'a>(&'a self, volume: &'a HotVolume) -> &'a str {
        volume.storage.as_deref().unwrap_or(&self.root_storage)
    }

    /// The storage `volume` is allocated on ([`Self::storage_of`]), only when that storage is
    /// `fast`; else why it has no place.
    pub fn place(&self, volume: &HotVolume) -> Result<String, PlacementRefusal> {
        let storage = self.storage_of(volume);
        match self.classes.of_storage(storage) {
            Some(StorageClass::Fast) => Ok(storage.to_owned()),
            Some(StorageClass::Slow) => Err(PlacementRefusal::StorageNotFast),
            None => Err(PlacementRefusal::StorageUnclassed),
        }
    }
}

#[cfg(test)]
mod tests {
    use bosun_proto::data_plan::NodeStorage;
    use bosun_proto::desired::StorageType;

    use super::*;
    use crate::data::storage::target::test_target;

    fn volume(storage: Option<&str>) -> HotVolume {
        HotVolume {
            name: "db".into(),
            size_gib: 2,
            path: "/var/lib/db".into(),
            storage: storage.map(str::to_owned),
        }
    }

    #[test]
    fn a_hot_volume_goes_only_on_a_storage_classed_fast() {
        let mut state: DesiredState = serde_json::from_value(serde_json::json!({
            "schema": "bosun.desired/v1",
            "backup_policy": { "schedule": "daily", "retention": { "keep_daily": 1 } },
            "restore_test_policy": { "enabled": false, "interval_days": 7, "timeout_minutes": 30 },
        }))
        .expect("a desired state");
        let mut fast = test_target(StorageType::LocalDir, "/srv/fast", StorageRole::BulkData);
        fast.class = StorageClass::Fast;
        let mut vzdump = test_target(
            StorageType::LocalDir,
            "/srv/dump",
            StorageRole::VzdumpTarget,
        );
        vzdump.class = StorageClass::Fast;
        let mut gone = test_target(StorageType::LocalDir, "/srv/gone", StorageRole::BulkData);
        gone.class = StorageClass::Fast;
        gone.state = TargetState::Disconnected;
        state.storage = vec![fast.clone(), vzdump.clone(), gone.clone()];
        let mut plan: DataPlan = serde_json::from_value(serde_json::json!({
            "schema": "bosun.data-plan/v1",
            "host_id": uuid::Uuid::from_u128(1),
            "serial": 1,
            "issued_at": "2026-11-26T00:00:00Z",
            "backup": {
                "schedule": "daily",
                "retention": { "keep_daily": 1 },
                "min_interval_seconds": 3600,
                "restore_test_days": null,
                "verify_hours": null,
            },
        }))
        .expect("a plan");
        plan.node_storages = vec![
            NodeStorage {
                storage: "local-lvm".into(),
                class: StorageClass::Fast,
            },
            NodeStorage {
                storage: "hdd".into(),
                class: StorageClass::Slow,
            },
        ];
        let places = HotPlaces::new(&state, Some(&plan), "local-lvm");
        assert_eq!(places.place(&volume(None)), Ok("local-lvm".to_owned()));
        let on_fast = target_storage_id(&fast);
        assert_eq!(
            places.place(&volume(Some(on_fast.as_str()))),
            Ok(on_fast.as_str().to_owned())
        );
        assert_eq!(
            places.place(&volume(Some("hdd"))),
            Err(PlacementRefusal::StorageNotFast)
        );
        for never in [
            "local-zfs".to_owned(),
            target_storage_id(&vzdump).as_str().to_owned(),
            target_storage_id(&gone).as_str().to_owned(),
        ] {
            assert_eq!(
                places.place(&volume(Some(&never))),
                Err(PlacementRefusal::StorageUnclassed),
                "{never}"
            );
        }
        // The root's storage is fast only when the plan says so.
        let slow_root = HotPlaces::new(&state, Some(&plan), "hdd");
        assert_eq!(
            slow_root.place(&volume(None)),
            Err(PlacementRefusal::StorageNotFast)
        );
        let no_plan = HotPlaces::new(&state, None, "local-lvm");
        assert_eq!(
            no_plan.place(&volume(None)),
            Err(PlacementRefusal::StorageUnclassed)
        );
    }
}
