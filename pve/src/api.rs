//! The `Pve` trait: every PVE call the agent makes, on the node the implementation drives.

use std::future::Future;

use super::catalogue::Op;
use super::error::PveError;
use super::firewall::{FirewallUpdate, GuestFirewall};
use super::hardware::{NodeDisk, SmartData, ThinPool, ZfsPool};
use super::model::{
    BackupOutcome, ClusterGuest, ContentItem, CtConfig, CtInterface, CtStatus, CtSummary,
    NetworkInterface, NodeInfo, NodeStatus, SnapshotInfo, StorageInfo, TaskLog, TaskOutcome,
    TaskStatusInfo, TaskSummary, VersionInfo, VolumeAttributes,
};
use super::policy::RetryPolicy;
use super::property::{CtDisk, DiskSize};
use super::requests::{
    ConfigUpdate, ContentFilter, RestoreRequest, StorageCreate, StorageUpdate, TaskFilter,
    VzdumpRequest,
};
use super::tasks;
use super::types::{NodeName, SnapName, StorageId, Upid, Vmid, VolumeId};

/// The Proxmox VE API as the agent uses it, for one node.
///
/// Methods that start a task return its [`Upid`]; pass it to [`Pve::wait_task`]. The
/// provided methods (`wait_task`, `restore_ct_next_id`, `backup_ct`) are built from the
/// required ones, so a fake gets PVE's waiting and retry rules for free.
pub trait Pve: Send + Sync {
    /// The node every call goes to.
    fn node(&self) -> &NodeName;
    /// The waiting and retry bounds.
    fn retry_policy(&self) -> &RetryPolicy;
    /// A count that moves whenever this client sends a request that may change the node, and
    /// again when that request ends: every request but a read, and every read of a task's
    /// status (a task changes the node while it runs). Equal marks before and after a read
    /// say the agent changed nothing on the node meanwhile. `None` (the default) where the
    /// implementation keeps no count: nothing read from the node may then be kept as still
    /// true.
    fn change_mark(&self) -> Option<u64> {
        None
    }

    /// `GET /version`.
    fn version(&self) -> impl Future<Output = Result<VersionInfo, PveError>> + Send;
    /// `GET /nodes`.
    fn nodes(&self) -> impl Future<Output = Result<Vec<NodeInfo>, PveError>> + Send;
    /// `GET /nodes/{node}/status`: the node's CPU, memory, root filesystem and load.
    fn node_status(&self) -> impl Future<Output = Result<NodeStatus, PveError>> + Send;
    /// `GET /nodes/{node}/disks/list`: every disk with its SMART health and wear.
    fn list_disks(&self) -> impl Future<Output = Result<Vec<NodeDisk>, PveError>> + Send;
    /// `GET /nodes/{node}/disks/smart`: one disk's SMART data (`device` as `/dev/…`; a
    /// device path PVE's pattern refuses is refused here, unsent).
    fn disk_smart(&self, device: &str) -> impl Future<Output = Result<SmartData, PveError>> + Send;
    /// `GET /nodes/{node}/disks/lvmthin`: the LVM thin pools with data and metadata use.
    fn thin_pools(&self) -> impl Future<Output = Result<Vec<ThinPool>, PveError>> + Send;
    /// `GET /nodes/{node}/network`: the node's interfaces as its network configuration lists
    /// them (any authenticated user may read it).
    fn network(&self) -> impl Future<Output = Result<Vec<NetworkInterface>, PveError>> + Send;
    /// `GET /nodes/{node}/disks/zfs`: the ZFS pools with their fill and health.
    fn zfs_pools(&self) -> impl Future<Output = Result<Vec<ZfsPool>, PveError>> + Send;
    /// `GET /cluster/nextid`: a currently free guest id.
    fn next_id(&self) -> impl Future<Output = Result<Vmid, PveError>> + Send;
    /// `GET /cluster/resources?type=vm`: the guests of the whole cluster (filtered by what the
    /// token may audit) and the node each is on; on a standalone node, its own guests.
    fn cluster_guests(&self) -> impl Future<Output = Result<Vec<ClusterGuest>, PveError>> + Send;
    /// The node's containers (filtered by what the token may audit).
    fn list_cts(&self) -> impl Future<Output = Result<Vec<CtSummary>, PveError>> + Send;
    /// A container's config with pending values merged, plus its digest.
    fn ct_config(&self, vmid: Vmid) -> impl Future<Output = Result<CtConfig, PveError>> + Send;
    /// Changes a container's config (synchronous). Waits out config locks.
    fn update_ct_config(
        &self,
        vmid: Vmid,
        update: &ConfigUpdate,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
    /// A container's runtime status.
    fn ct_status(&self, vmid: Vmid) -> impl Future<Output = Result<CtStatus, PveError>> + Send;
    /// A running container's interfaces, as its network namespace has them.
    fn ct_interfaces(
        &self,
        vmid: Vmid,
    ) -> impl Future<Output = Result<Vec<CtInterface>, PveError>> + Send;
    /// Starts a container (task `vzstart`).
    fn start_ct(&self, vmid: Vmid) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Stops (kills) a container (task `vzstop`).
    fn stop_ct(&self, vmid: Vmid) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Shuts a container down, waiting `timeout_secs` before failing or, with `force_stop`,
    /// killing it (task `vzshutdown`).
    fn shutdown_ct(
        &self,
        vmid: Vmid,
        timeout_secs: Option<u32>,
        force_stop: bool,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Creates a new container by restoring an archive (task `vzrestore`). Never overwrites:
    /// an existing `vmid` fails with `CT … already exists`.
    fn restore_ct(
        &self,
        request: &RestoreRequest,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Restores an archive **over** an existing, stopped container (`force=1`), destroying its
    /// volumes. Only the agent's gate may decide to call this.
    fn restore_ct_overwrite(
        &self,
        request: &RestoreRequest,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Destroys a stopped container (task `vzdestroy`); `purge` also removes it from backup
    /// jobs and HA.
    fn destroy_ct(
        &self,
        vmid: Vmid,
        purge: bool,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// A container's snapshots, including the `current` pseudo-entry.
    fn list_snapshots(
        &self,
        vmid: Vmid,
    ) -> impl Future<Output = Result<Vec<SnapshotInfo>, PveError>> + Send;
    /// Takes a snapshot (task `vzsnapshot`).
    fn create_snapshot(
        &self,
        vmid: Vmid,
        name: &SnapName,
        description: Option<&str>,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Deletes a snapshot (task `vzdelsnapshot`).
    fn delete_snapshot(
        &self,
        vmid: Vmid,
        name: &SnapName,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Rolls back to a snapshot, killing a running guest first (task `vzrollback`); `start`
    /// starts it again afterwards.
    fn rollback_snapshot(
        &self,
        vmid: Vmid,
        name: &SnapName,
        start: bool,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Grows a volume (task `resize`).
    fn resize_disk(
        &self,
        vmid: Vmid,
        disk: CtDisk,
        size: DiskSize,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Starts a backup (task `vzdump`). See [`Pve::backup_ct`] for the archive's volid.
    fn vzdump(
        &self,
        request: &VzdumpRequest,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// The node's storages the token may see.
    fn list_storage(&self) -> impl Future<Output = Result<Vec<StorageInfo>, PveError>> + Send;
    /// One storage's status.
    fn storage_status(
        &self,
        storage: &StorageId,
    ) -> impl Future<Output = Result<StorageInfo, PveError>> + Send;
    /// Adds a storage to the datacenter.
    fn create_storage(
        &self,
        request: &StorageCreate,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
    /// A storage's configuration as `key → value` (secrets are never shown).
    fn storage_config(
        &self,
        storage: &StorageId,
    ) -> impl Future<Output = Result<serde_json::Map<String, serde_json::Value>, PveError>> + Send;
    /// Changes the settings of a storage that may change in place.
    fn update_storage(
        &self,
        storage: &StorageId,
        update: &StorageUpdate,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
    /// Removes a storage's definition from the datacenter (`storage.cfg`); Proxmox leaves
    /// the data on the target. A storage that does not exist is an error here
    /// ("storage '…' does not exist"); callers that repeat a removal look first.
    fn delete_storage(
        &self,
        storage: &StorageId,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
    /// A storage's volumes the token may see.
    fn list_content(
        &self,
        storage: &StorageId,
        filter: ContentFilter,
    ) -> impl Future<Output = Result<Vec<ContentItem>, PveError>> + Send;
    /// Deletes a volume; gives the `imgdel` task when PVE runs one.
    fn delete_volume(
        &self,
        volume: &VolumeId,
    ) -> impl Future<Output = Result<Option<Upid>, PveError>> + Send;
    /// One volume's attributes: where it is on the node, a backup's whole notes.
    fn volume_attributes(
        &self,
        volume: &VolumeId,
    ) -> impl Future<Output = Result<VolumeAttributes, PveError>> + Send;
    /// Replaces a backup's notes.
    fn set_volume_notes(
        &self,
        volume: &VolumeId,
        notes: &str,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
    /// The guest configuration inside backup archive `volume` (`pct.conf` as text).
    fn extract_config(
        &self,
        volume: &VolumeId,
    ) -> impl Future<Output = Result<String, PveError>> + Send;
    /// The node's tasks that match `filter`, running or finished, oldest first.
    fn list_tasks(
        &self,
        filter: TaskFilter,
    ) -> impl Future<Output = Result<Vec<TaskSummary>, PveError>> + Send;
    /// The node's running tasks (`source=active`), at most [`TaskFilter::ACTIVE_LIMIT`]:
    /// how busy the node's workers are before the agent adds optional work.
    fn active_tasks(&self) -> impl Future<Output = Result<Vec<TaskSummary>, PveError>> + Send;
    /// A task's status (asked of the node in the UPID).
    fn task_status(
        &self,
        upid: &Upid,
    ) -> impl Future<Output = Result<TaskStatusInfo, PveError>> + Send;
    /// A container's own firewall options (`…/firewall/options`).
    fn ct_firewall(
        &self,
        vmid: Vmid,
    ) -> impl Future<Output = Result<GuestFirewall, PveError>> + Send;
    /// Turns a container's firewall filters on (synchronous); never turns one off.
    fn set_ct_firewall(
        &self,
        vmid: Vmid,
        update: &FirewallUpdate,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
    /// `limit` task log lines from line `start` (0-based).
    fn task_log(
        &self,
        upid: &Upid,
        start: u64,
        limit: u64,
    ) -> impl Future<Output = Result<TaskLog, PveError>> + Send;

    /// Polls `upid` with backoff until it stops. `OK` and `WARNINGS: n` are success; any
    /// other exit status is [`PveError::TaskFailed`] with the log tail. Transient poll
    /// failures (a dropped connection, a busy or 5xx answer) are tolerated up to the policy's
    /// bound of consecutive failed polls.
    fn wait_task(
        &self,
        op: Op,
        upid: &Upid,
    ) -> impl Future<Output = Result<TaskOutcome, PveError>> + Send {
        tasks::wait_task(self, op, upid)
    }

    /// Restores `request` onto the next free id, taking another id when the one offered was
    /// claimed in the meantime (`already exists`). Gives the id used and the task.
    fn restore_ct_next_id(
        &self,
        request: &RestoreRequest,
    ) -> impl Future<Output = Result<(Vmid, Upid), PveError>> + Send {
        tasks::restore_ct_next_id(self, request)
    }

    /// Backs one guest up, waits for the task and finds the archive's volid (from the task
    /// log, else the newest backup of the guest in the storage listing).
    fn backup_ct(
        &self,
        request: &VzdumpRequest,
    ) -> impl Future<Output = Result<BackupOutcome, PveError>> + Send {
        tasks::backup_ct(self, request)
    }
}
