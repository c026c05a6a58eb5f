//! A VM disk allocated by a config change (qemu-server's `create_disks`): a drive whose volume
//! is written `STORAGE:SIZE_IN_GiB` gets a new volume `vm-<vmid>-disk-<n>` on that storage
//! (Datastore.AllocateSpace on `/storage/<sid>`, a storage holding `images`), and the drive
//! is written back with the new volume and `size=<N>G`, every other option kept
//! (`backup=0`, `serial=…`).

use std::collections::BTreeMap;

use crate::api::{ApiError, Ctx};
use crate::qemu::is_disk_key;
use crate::state::{NodeState, StorageKind, Volume};

/// The `STORAGE:N` of a drive that asks for a new volume, with the size in GiB.
fn allocation(value: &str) -> Option<(&str, u64)> {
    let file = value.split(',').next()?;
    let (sid, size) = file.split_once(':')?;
    let size = size.parse::<u64>().ok()?;
    Some((sid, size))
}

/// Checks the caller may allocate every new disk of `values` (before any is made).
pub(crate) fn check_allocations(
    ctx: &Ctx,
    values: &BTreeMap<String, String>,
) -> Result<(), ApiError> {
    for value in values
        .iter()
        .filter(|(k, _)| is_disk_key(k))
        .map(|(_, v)| v)
    {
        if let Some((sid, _)) = allocation(value) {
            ctx.require(&format!("/storage/{sid}"), "Datastore.AllocateSpace")?;
        }
    }
    Ok(())
}

/// Allocates every new disk of `values` for VM `vmid`, rewriting its drive to the new volume.
pub(crate) fn allocate(
    st: &mut NodeState,
    vmid: u32,
    values: &mut BTreeMap<String, String>,
    now: i64,
) -> Result<(), String> {
    for (key, value) in values.iter_mut().filter(|(k, _)| is_disk_key(k)) {
        let Some((sid, gib)) = allocation(value) else {
            continue;
        };
        let storage = st
            .storages
            .get(sid)
            .ok_or_else(|| format!("storage '{sid}' does not exist"))?;
        if !storage.content.contains("images") {
            return Err(format!("storage '{sid}' does not support vm images"));
        }
        let size = gib << 30;
        if storage.used() + size > storage.total {
            return Err(format!("not enough free space on storage '{sid}' ({key})"));
        }
        let is_dir = matches!(storage.kind, StorageKind::Dir { .. });
        let taken: std::collections::BTreeSet<&str> =
            storage.volumes.iter().map(|v| v.volid.as_str()).collect();
        let volid = (0..)
            .map(|n| {
                if is_dir {
                    format!("{sid}:{vmid}/vm-{vmid}-disk-{n}.raw")
                } else {
                    format!("{sid}:vm-{vmid}-disk-{n}")
                }
            })
            .find(|v| !taken.contains(v.as_str()))
            .ok_or_else(|| "unable to allocate a volume name".to_owned())?;
        let mut parts = vec![volid.clone()];
        parts.extend(
            value
                .split(',')
                .skip(1)
                .filter(|p| !p.starts_with("size="))
                .map(str::to_owned),
        );
        parts.push(format!("size={gib}G"));
        *value = parts.join(",");
        st.push_volume(Volume {
            volid,
            content: "images".to_owned(),
            format: "raw".to_owned(),
            size,
            ctime: now,
            vmid: Some(vmid),
            notes: None,
            protected: false,
            encrypted: None,
            archive: None,
        });
    }
    Ok(())
}

/// Whether a drive is left out of backups (`backup=0`), as vzdump and qmrestore read it.
pub(crate) fn excluded_from_backup(value: &str) -> bool {
    value
        .split(',')
        .any(|p| matches!(p, "backup=0" | "backup=no" | "backup=off" | "backup=false"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_storage_colon_size_allocates() {
        assert_eq!(
            allocation("bulk:8,backup=0,serial=media"),
            Some(("bulk", 8))
        );
        assert_eq!(allocation("local-lvm:vm-100-disk-1,size=8G"), None);
        assert_eq!(allocation("none,media=cdrom"), None);
    }

    #[test]
    fn backup_off_is_read_in_each_spelling() {
        assert!(excluded_from_backup("bulk:vm-1-disk-0,backup=0,size=8G"));
        assert!(excluded_from_backup("bulk:vm-1-disk-0,backup=no"));
        assert!(!excluded_from_backup("bulk:vm-1-disk-0,backup=1"));
        assert!(!excluded_from_backup("bulk:vm-1-disk-0"));
    }
}
