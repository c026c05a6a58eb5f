//! The storage manifest: each target registered in Proxmox (USB disks mounted by
//! filesystem UUID through the helper first), its settings kept in line with the manifest,
//! watched, and reported.

pub mod local_dir;
pub mod naming;
pub mod reason;
pub mod target;
pub mod watcher;

pub use watcher::{StorageFacts, StorageWatcher, WatcherParts};
