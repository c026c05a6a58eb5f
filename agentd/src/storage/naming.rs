//! How a manifest target is named in Proxmox: `bosun-<kind>-<8 hex digits>`, the digits
//! from the SHA-256 of the target's kind and `durable_id`. The name is stable (the same
//! target always gets the same storage, on this host and on a replacement host) and never
//! collides with an operator's own storages, which do not start with `bosun-`.

use bosun_proto::desired::StorageType;
use sha2::{Digest, Sha256};

use crate::pve::StorageId;

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

/// The Proxmox storage id of the target `durable_id` of `kind`.
pub fn storage_id_of(kind: StorageType, durable_id: &str) -> StorageId {
    let digest = Sha256::new()
        .chain_update(kind_name(kind).as_bytes())
        .chain_update([0])
        .chain_update(durable_id.as_bytes())
        .finalize();
    let mut short = [0u8; 4];
    short.copy_from_slice(&digest[..4]);
    StorageId::bosun_target(kind_name(kind), &short)
}

/// Whether `id` is a storage this agent names (`bosun-…`).
pub fn is_bosun_storage(id: &str) -> bool {
    id.starts_with("bosun-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_distinct_and_valid() {
        let a = storage_id_of(StorageType::Usb, "2f1c-aa");
        assert_eq!(a, storage_id_of(StorageType::Usb, "2f1c-aa"));
        assert_eq!(StorageId::new(a.as_str()).unwrap(), a);
        assert!(a.as_str().starts_with("bosun-usb-"));
        assert_eq!(a.as_str().len(), "bosun-usb-".len() + 8);
        assert_ne!(a, storage_id_of(StorageType::Usb, "2f1c-ab"));
        assert_ne!(
            storage_id_of(StorageType::Nfs, "h:/x"),
            storage_id_of(StorageType::Cifs, "h:/x")
        );
        assert!(is_bosun_storage(a.as_str()));
        assert!(!is_bosun_storage("local"));
    }
}
