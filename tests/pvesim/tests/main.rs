//! The simulated Proxmox node's suites, built as one test binary: every `*.rs` file beside this one
//! is a suite module, and `common/` the harness they share.
//! One binary instead of one per suite keeps a clean build's target directory small and links
//! once (decision 0089). Run one suite with a filter on its module:
//! `cargo nextest run -p bosun-pvesim binary::`.

mod common;

mod access_admin;
mod binary;
mod cloudflared_binary;
mod cluster_resources;
mod damaged_archives;
mod envelope;
mod faults_admin;
mod hung_mounts;
mod inspect;
mod lxc;
mod node_load;
mod pct_admin;
mod pct_tar;
mod pools;
mod qemu;
mod qemu_admin;
mod qemu_disks;
mod qemu_vzdump;
mod remote_storage;
mod remote_store;
mod restore;
mod root_cli;
mod snapshot_vzdump;
mod storage_tasks;
