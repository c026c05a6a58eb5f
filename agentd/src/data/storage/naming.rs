//! How a target is named in Proxmox: `bosun-<kind>-<32 hex digits>`, the digits the first
//! 128 bits of the SHA-256 of the target's whole identity (type, `durable_id`, namespace,
//! user, serial: [`TargetIdentity::canonical_bytes`]). The name is stable (the same target
//! always gets the same storage, on this host and on a replacement host), never collides
//! with an operator's own storages, which do not start with `bosun-`, and cannot be made to
//! collide: a changed namespace, datastore, server, path or serial is another storage, never
//! "drift" corrected in place, and finding two identities with one name takes a 128-bit
//! collision.

use std::collections::HashMap;

use bosun_proto::data_plan::TargetIdentity;
use bosun_proto::desired::{StorageTarget, StorageType};
use sha2::{Digest, Sha256};

use bosun_pve::StorageId;

/// The short name of a target kind inside its storage id.
pub fn kind_name(kind: StorageType) -> &'static str {
    match kind {
        StorageType::LocalDir => "dir",
        StorageType::Usb => "usb",
        StorageType::Nfs => "nfs",
        StorageType::Cifs => "cifs",
        StorageType::Pbs => "pbs",
    }
}

/// The Proxmox storage id of the target with `identity`.
pub fn storage_id(identity: &TargetIdentity) -> StorageId {
    let digest = Sha256::new()
        .chain_update(b"bosun-storage-id/v2\0")
        .chain_update(identity.canonical_bytes())
        .finalize();
    let mut short = [0u8; 16];
    short.copy_from_slice(&digest[..16]);
    StorageId::bosun_target(kind_name(identity.kind), &short)
}

/// The Proxmox storage id of `target`.
pub fn target_storage_id(target: &StorageTarget) -> StorageId {
    storage_id(&target.identity())
}

/// The storage ids of the manifest's targets, kept from one look to the next: the storage
/// watcher names each target several times a look, every few seconds, and each name is a
/// SHA-256. A name is reused only for the very identity it was made from.
#[derive(Debug, Default)]
pub struct StorageNames {
    known: HashMap<String, (TargetIdentity, StorageId)>,
}

impl StorageNames {
    /// The names of `manifest`'s targets, in its order; forgets the targets it no longer holds
    /// (so what is kept is bounded by the manifest).
    pub fn of_manifest(&mut self, manifest: &[StorageTarget]) -> Vec<StorageId> {
        self.known
            .retain(|durable_id, _| manifest.iter().any(|t| t.durable_id == *durable_id));
        manifest.iter().map(|target| self.of(target)).collect()
    }

    /// The name of `target`.
    pub fn of(&mut self, target: &StorageTarget) -> StorageId {
        let identity = target.identity();
        if let Some((known, id)) = self.known.get(&target.durable_id)
            && *known == identity
        {
            return id.clone();
        }
        let id = storage_id(&identity);
        self.known
            .insert(target.durable_id.clone(), (identity, id.clone()));
        id
    }
}

/// The Proxmox storage id of a target of `kind` at `durable_id` with no namespace, user or
/// serial.
pub fn storage_id_of(kind: StorageType, durable_id: &str) -> StorageId {
    storage_id(&TargetIdentity {
        kind,
        durable_id: durable_id.to_owned(),
        namespace: None,
        username: None,
        serial: None,
    })
}

/// Whether `id` is a storage this agent names (`bosun-…`).
pub fn is_bosun_storage(id: &str) -> bool {
    id.starts_with("bosun-")
}

/// How many hex digits of a retired key's fingerprint name its restore-only storage: the
/// 8 bytes of PBS's short key ID.
const KEY_ID_DIGITS: usize = 16;

/// The restore-only storage that reads `storage`'s archives made with the retired key
/// `fingerprint`: `<storage>-k<the key's short ID, 16 hex digits>`. It points at the same
/// datastore and namespace with that key, because a PVE storage has one key and PBS reads
/// an archive only with the key it was made with (`storage::watcher::keys`).
pub fn restore_only_id(storage: &StorageId, fingerprint: &str) -> StorageId {
    let key_id: String = fingerprint
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(KEY_ID_DIGITS)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    storage.restore_only(&key_id)
}

/// Whether `id` names a restore-only storage (`bosun-<kind>-<32 hex>-k<16 hex>`): not a
/// target of the manifest, never reported as one.
pub fn is_restore_only(id: &str) -> bool {
    let Some((main, key_id)) = id.rsplit_once("-k") else {
        return false;
    };
    is_bosun_storage(main)
        && key_id.len() == KEY_ID_DIGITS
        && key_id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_name_is_given_only_for_the_identity_it_was_made_from() {
        use bosun_proto::desired::StorageRole;
        let mut usb = crate::data::storage::target::test_target(
            StorageType::Usb,
            "2f1c-aa",
            StorageRole::VzdumpTarget,
        );
        usb.serial = Some("WD-1".into());
        let nfs = crate::data::storage::target::test_target(
            StorageType::Nfs,
            "nas:/export",
            StorageRole::VzdumpTarget,
        );
        let mut names = StorageNames::default();
        let first = names.of_manifest(&[usb.clone(), nfs.clone()]);
        assert_eq!(first, [target_storage_id(&usb), target_storage_id(&nfs)]);
        assert_eq!(names.of(&usb), first[0]);
        // Another disk under the same filesystem UUID is another storage, at once.
        usb.serial = Some("WD-2".into());
        let moved = names.of(&usb);
        assert_eq!(moved, target_storage_id(&usb));
        assert_ne!(moved, first[0]);
        // A target that left the manifest is forgotten.
        assert_eq!(
            names.of_manifest(std::slice::from_ref(&nfs)),
            [target_storage_id(&nfs)]
        );
        assert_eq!(names.known.len(), 1);
    }

    #[test]
    fn names_are_stable_distinct_and_valid() {
        let a = storage_id_of(StorageType::Usb, "2f1c-aa");
        assert_eq!(a, storage_id_of(StorageType::Usb, "2f1c-aa"));
        assert_eq!(StorageId::new(a.as_str()).unwrap(), a);
        assert!(a.as_str().starts_with("bosun-usb-"));
        assert_eq!(a.as_str().len(), "bosun-usb-".len() + 32);
        assert_ne!(a, storage_id_of(StorageType::Usb, "2f1c-ab"));
        assert_ne!(
            storage_id_of(StorageType::Nfs, "h:/x"),
            storage_id_of(StorageType::Cifs, "h:/x")
        );
        assert!(is_bosun_storage(a.as_str()));
        assert!(!is_bosun_storage("local"));
    }

    #[test]
    fn a_retired_key_reads_through_its_own_storage() {
        let main = storage_id_of(StorageType::Pbs, "bosun@pbs@pbs.example:store");
        let fingerprint = "0E:AB:d4:46:0b:6e:b9:ca:34:50:23:de:e2:b7:78:c7:\
                           90:e5:4a:16:83:b9:65:9c:0a:57:ae:19:90:90:15:9b";
        let restore = restore_only_id(&main, fingerprint);
        assert_eq!(
            restore.as_str(),
            format!("{}-k0eabd4460b6eb9ca", main.as_str())
        );
        assert_eq!(StorageId::new(restore.as_str()).unwrap(), restore);
        assert!(is_restore_only(restore.as_str()));
        assert!(is_bosun_storage(restore.as_str()));
        assert!(!is_restore_only(main.as_str()));
        assert!(!is_restore_only("local-k0eabd4460b6eb9ca"));
        assert!(!is_restore_only(&format!("{}-kxyz", main.as_str())));
        let other = restore_only_id(&main, &("aa:".repeat(31) + "aa"));
        assert_ne!(other, restore);
    }

    #[test]
    fn every_identity_field_names_another_storage() {
        let base = TargetIdentity {
            kind: StorageType::Pbs,
            durable_id: "bosun@pbs@pbs.example:store".into(),
            namespace: Some("hosts/a".into()),
            username: None,
            serial: None,
        };
        let id = storage_id(&base);
        let others = [
            TargetIdentity {
                namespace: Some("hosts/b".into()),
                ..base.clone()
            },
            TargetIdentity {
                namespace: None,
                ..base.clone()
            },
            TargetIdentity {
                durable_id: "bosun@pbs@pbs.example:other".into(),
                ..base.clone()
            },
            TargetIdentity {
                username: Some("u".into()),
                ..base.clone()
            },
            TargetIdentity {
                serial: Some("S1".into()),
                ..base.clone()
            },
        ];
        for other in &others {
            assert_ne!(storage_id(other), id, "{other:?}");
        }
    }
}
