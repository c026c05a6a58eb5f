//! The storage manifest: each target registered in Proxmox (USB disks mounted by
//! filesystem UUID through the helper first), its settings kept in line with the manifest,
//! watched, and reported, with the speed class of each target's storage for the local API.

pub mod classes;
pub mod hot;
pub mod local_dir;
pub mod naming;
pub mod reason;
pub mod target;
pub mod watcher;

pub use classes::StorageClasses;
pub use watcher::{StorageFacts, StorageWatcher, WatcherParts};
