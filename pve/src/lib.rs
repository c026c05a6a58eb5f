//! `bosun-pve`: the Proxmox VE API, its [`Pve`] seam and its HTTPS client [`PveClient`].
//!
//! The host agent drives its node through it, `bosunctl pve check` probes a token with it,
//! and the conformance tests hold it, against the simulator, to Proxmox's published schema.
//! It depends on nothing of the agent: a config file's `[pve]` table arrives as
//! [`PveSettings`], and the agent counts the client's requests through a [`RequestObserver`]
//! it attaches.
//!
//! - [`Pve`] is the trait the agent core and its tests use. Its methods return
//!   `impl Future + Send`, so it is **not** object-safe: the agent holds it **generically**
//!   (`struct Reconciler<P: Pve>`, shared as `Arc<P>`), and tests substitute a fake by
//!   implementing the trait. Waiting, lock wait-out and the restore/backup helpers are
//!   provided methods, so fakes inherit the same rules.
//! - [`PveClient`] speaks HTTPS (reqwest + rustls/ring) with a `PVEAPIToken` header whose
//!   secret stays in a [`secrecy::SecretString`]. The certificate is pinned by SHA-256
//!   fingerprint or verified against a CA file ([`TlsTrust`]); there is no accept-any switch.
//! - [`CATALOGUE`] lists every `(method, path template)` the client can emit; the schema
//!   conformance test holds it to Proxmox's published API schema.
//! - Errors ([`PveError`]) say whether a request was **not sent** (retry freely) or **sent,
//!   outcome unknown** (look before retrying), and carry status, message, per-parameter errors
//!   and the missing privilege of a 403.
//!
//! ```text
//! agent core ──► P: Pve ──► PveClient ──HTTPS, pinned cert──► pveproxy /api2/json
//!                   └─ wait_task / restore_ct_next_id / backup_ct (provided methods)
//! ```

#![warn(missing_docs)]

mod access_admin;
mod api;
mod catalogue;
mod client;
mod decimal;
pub mod decode;
mod error;
mod firewall;
mod guest_ops;
mod hardware;
mod model;
mod observer;
mod policy;
mod property;
mod qemu;
mod qemu_devices;
mod qemu_disks;
mod qemu_model;
mod qemu_requests;
mod requests;
mod role;
mod setup;
mod startup;
mod tasks;
mod tls;
mod types;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;

pub use access_admin::{
    AclChange, AclEntry, AclKind, NewToken, PoolInfo, RoleInfo, UserInfo, UserToken,
};
pub use api::Pve;
pub use catalogue::{CATALOGUE, Endpoint, HttpMethod, Op};
pub use client::{PveClient, PveConfig};
pub use decimal::Thousandths;
pub use error::{PveError, parse_lock_message, parse_permission_message};
pub use firewall::{DatacenterFirewall, FirewallUpdate, GuestFirewall};
pub use guest_ops::{GuestOps, PveOps};
pub use hardware::{NodeDisk, SmartAttribute, SmartData, ThinPool, ZfsPool};
pub use model::{
    BackupOutcome, ClusterGuest, ClusterMember, ContentItem, CpuInfo, CtConfig, CtInterface,
    CtStatus, CtSummary, GuestStatus, KernelInfo, NetworkInterface, NodeInfo, NodeStatus,
    NodeUsage, SnapshotInfo, StorageInfo, TaskLog, TaskLogLine, TaskOutcome, TaskState,
    TaskStatusInfo, TaskSummary, VersionInfo, VolumeAttributes,
};
pub use observer::{RequestObserver, RequestOutcome};
pub use policy::{Backoff, RetryPolicy};
pub use property::{
    CtDisk, DiskSize, Ipv4Config, NetConfig, PruneBackups, SizeUnit, hwaddr_of, net_without_hwaddr,
};
pub use qemu::{PveQemu, VmConfig};
pub use qemu_devices::VmDisk;
pub use qemu_disks::{NewVmDisk, NewVmDisks, SCSI_SLOTS, SERIAL_MAX, drive_option};
pub use qemu_model::{
    CloudinitItem, ExecStarted, ExecStatus, FileRead, FreezeStatus, GuestInterface, GuestIpAddress,
    VmSummary,
};
pub use qemu_requests::{
    AgentExec, AgentFileWrite, EXEC_MAX_ARG_LEN, EXEC_MAX_ARGS, EXEC_MAX_INPUT, FILE_READ_MAX,
    FILE_WRITE_MAX, GUEST_PATH_MAX, IpConfig, PoolId, VM_CPULIMIT_MAX, VM_CPUUNITS_RANGE,
    VmConfigUpdate, VmNet, VmOptions, VmRestoreRequest,
};
pub use requests::{
    BackupMode, Compression, ConfigUpdate, ContentFilter, ContentType, CtOptions, NewMountPoint,
    Params, RestoreRequest, StorageCreate, StorageKind, StorageUpdate, TaskFilter, VzdumpRequest,
};
pub use role::{
    BOSUN_AGENT_PRIVILEGES, BOSUN_AGENT_ROLE, BOSUN_AGENT_TOKEN_ID, BOSUN_AGENT_USER,
    BOSUN_GUEST_PRIVILEGES, BOSUN_GUEST_PRIVILEGES_PVE8, BOSUN_GUEST_ROLE, BOSUN_POOL,
    GUEST_REACH_PRIVILEGES, POOL_MEMBERSHIP_PRIVILEGES, guest_privileges_for,
};
pub use setup::{PveSettings, PveSetupError, client_from_settings};
pub use startup::StartupOrder;
pub use tasks::{archive_volid_from_log, find_task, read_log, run_task_waiting_out_locks};
pub use tls::{TlsTrust, format_fingerprint, parse_fingerprint};
pub use types::{
    NodeName, SnapName, StorageId, Upid, ValueError, Vmid, VolumeId, check_dns_name, check_tag,
};
