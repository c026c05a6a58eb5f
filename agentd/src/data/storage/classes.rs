//! The speed class of every place a guest's mount may live: each manifest target's Proxmox
//! storage and, for a target with a directory on the host (`local-dir`, `usb`), that
//! directory; and the node's own storages (where a root volume lives) as the signed data
//! plan classes them. The storage watcher rebuilds it at every pass from the targets it watches, so
//! what the local API tells a controller follows the targets as they come and go.

use std::collections::BTreeMap;
use std::path::Path;

use bosun_proto::data_plan::NodeStorage;
use bosun_proto::desired::{StorageClass, StorageTarget, StorageType};
use bosun_pve::StorageId;

use super::target::usb_mount_path;

/// Speed classes by Proxmox storage id and by host directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageClasses {
    by_storage: BTreeMap<String, StorageClass>,
    by_dir: BTreeMap<String, StorageClass>,
}

impl StorageClasses {
    /// The classes of a manifest's targets, each with its storage id, USB targets mounted
    /// under `mount_root`.
    pub fn of_named<'a>(
        targets: impl IntoIterator<Item = (&'a StorageTarget, &'a StorageId)>,
        mount_root: &Path,
    ) -> Self {
        let mut classes = Self::default();
        for (target, storage) in targets {
            let dir = match target.kind {
                StorageType::LocalDir => Some(target.durable_id.clone()),
                StorageType::Usb => Some(usb_mount_path(mount_root, storage)),
                StorageType::Nfs | StorageType::Cifs | StorageType::Pbs => None,
            };
            classes.insert_storage(storage.as_str(), target.class);
            if let Some(dir) = dir {
                classes.insert_dir(&dir, target.class);
            }
        }
        classes
    }

    /// Records the classes a signed plan gives the node's own storages. A `bosun-…` storage
    /// keeps its target's class (a plan cannot name one; this checks again).
    pub fn insert_node_storages(&mut self, nodes: &[NodeStorage]) {
        for node in nodes {
            if !node.storage.starts_with("bosun-") {
                self.by_storage
                    .entry(node.storage.clone())
                    .or_insert(node.class);
            }
        }
    }

    /// Records the class of Proxmox storage `storage`.
    pub fn insert_storage(&mut self, storage: &str, class: StorageClass) {
        self.by_storage.insert(storage.to_owned(), class);
    }

    /// Records the class of host directory `dir` (absolute; a relative one is ignored) and
    /// everything beneath it.
    pub fn insert_dir(&mut self, dir: &str, class: StorageClass) {
        let dir = dir.trim_end_matches('/');
        if dir.starts_with('/') {
            self.by_dir.insert(dir.to_owned(), class);
        }
    }

    /// The class of Proxmox storage `storage`, if a target is registered as it.
    pub fn of_storage(&self, storage: &str) -> Option<StorageClass> {
        self.by_storage.get(storage).copied()
    }

    /// The class of host path `path`: that of the deepest known directory holding it (whole
    /// path components only: `/srv/bulk` does not hold `/srv/bulk2`).
    pub fn of_path(&self, path: &str) -> Option<StorageClass> {
        self.by_dir
            .iter()
            .filter(|(dir, _)| {
                path.strip_prefix(dir.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            })
            .max_by_key(|(dir, _)| dir.len())
            .map(|(_, class)| *class)
    }
}

#[cfg(test)]
mod tests {
    use bosun_proto::desired::StorageRole;

    use super::*;
    use crate::data::storage::naming::{StorageNames, target_storage_id};
    use crate::data::storage::target::test_target;

    #[test]
    fn each_targets_storage_and_directory_carry_its_class() {
        let mut fast = test_target(StorageType::LocalDir, "/srv/fast", StorageRole::BulkData);
        fast.class = StorageClass::Fast;
        let slow = test_target(
            StorageType::LocalDir,
            "/srv/fast/slow",
            StorageRole::BulkData,
        );
        let uuid = "0b7f8c5e-1d2a-4c3b-9e8f-7a6b5c4d3e2f";
        let mut usb = test_target(StorageType::Usb, uuid, StorageRole::BulkData);
        usb.class = StorageClass::Fast;
        let nfs = test_target(StorageType::Nfs, "nas:/export", StorageRole::VzdumpTarget);
        let manifest = [fast.clone(), slow.clone(), usb.clone(), nfs.clone()];
        let names = StorageNames::default().of_manifest(&manifest);
        let classes =
            StorageClasses::of_named(manifest.iter().zip(&names), Path::new("/mnt/bosun"));

        assert_eq!(
            classes.of_storage(target_storage_id(&fast).as_str()),
            Some(StorageClass::Fast)
        );
        assert_eq!(
            classes.of_storage(target_storage_id(&nfs).as_str()),
            Some(nfs.class)
        );
        assert_eq!(classes.of_storage("local-lvm"), None);

        // The node's own storages take the plan's class; a target's storage keeps its own.
        let mut planned = classes.clone();
        planned.insert_node_storages(&[
            NodeStorage {
                storage: "local-lvm".into(),
                class: StorageClass::Fast,
            },
            NodeStorage {
                storage: target_storage_id(&nfs).as_str().to_owned(),
                class: StorageClass::Fast,
            },
        ]);
        assert_eq!(planned.of_storage("local-lvm"), Some(StorageClass::Fast));
        assert_eq!(
            planned.of_storage(target_storage_id(&nfs).as_str()),
            Some(nfs.class)
        );

        for (path, want) in [
            ("/srv/fast", Some(StorageClass::Fast)),
            ("/srv/fast/101/db", Some(StorageClass::Fast)),
            ("/srv/fast/slow/101", Some(slow.class)),
            ("/srv/faster/101", None),
            ("/srv", None),
        ] {
            assert_eq!(classes.of_path(path), want, "{path}");
        }
        let usb_dir = usb_mount_path(Path::new("/mnt/bosun"), &target_storage_id(&usb));
        assert_eq!(
            classes.of_path(&format!("{usb_dir}/media")),
            Some(StorageClass::Fast)
        );
    }
}
