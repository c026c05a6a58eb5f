//! [`GuestOps`]: the Proxmox calls the local API and the backup runner make, as an
//! object-safe seam over any [`Pve`], so handlers are plain functions (which the OpenAPI
//! generator needs) and tests can count what reached Proxmox.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::{
    ConfigUpdate, ContentFilter, ContentItem, ContentType, CtConfig, Op, PveError, PveQemu,
    SnapName, SnapshotInfo, StorageId, TaskLog, TaskOutcome, TaskStatusInfo, Upid, VmConfig,
    VmConfigUpdate, Vmid, VolumeAttributes, VolumeId, VzdumpRequest,
};

/// The guest-scoped Proxmox calls behind the local API. Every method takes the vmid the
/// caller's token resolved to; nothing here accepts a caller-supplied id.
pub trait GuestOps: Send + Sync + std::fmt::Debug {
    /// A guest's snapshots (without the `current` pseudo-entry).
    fn list_snapshots(&self, vmid: Vmid) -> BoxFuture<'_, Result<Vec<SnapshotInfo>, PveError>>;
    /// Starts a snapshot task.
    fn create_snapshot<'a>(
        &'a self,
        vmid: Vmid,
        name: &'a SnapName,
        description: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Upid, PveError>>;
    /// Starts a rollback task that starts the guest again afterwards.
    fn rollback<'a>(
        &'a self,
        vmid: Vmid,
        name: &'a SnapName,
    ) -> BoxFuture<'a, Result<Upid, PveError>>;
    /// A VM's snapshots (without the `current` pseudo-entry).
    fn list_vm_snapshots(&self, vmid: Vmid) -> BoxFuture<'_, Result<Vec<SnapshotInfo>, PveError>>;
    /// Starts a VM's snapshot task (`qmsnapshot`).
    fn create_vm_snapshot<'a>(
        &'a self,
        vmid: Vmid,
        name: &'a SnapName,
        description: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Upid, PveError>>;
    /// Starts a VM's rollback task (`qmrollback`) that starts the VM again afterwards.
    fn rollback_vm<'a>(
        &'a self,
        vmid: Vmid,
        name: &'a SnapName,
    ) -> BoxFuture<'a, Result<Upid, PveError>>;
    /// The task of `task_type` on `vmid` started since `asked_at`, if any: the look after a
    /// call whose answer was lost ([`crate::find_task`]).
    fn find_task(
        &self,
        vmid: Vmid,
        task_type: &'static str,
        asked_at: jiff::Timestamp,
    ) -> BoxFuture<'_, Result<Option<Upid>, PveError>>;
    /// Waits for a task to end; a failed task is an error.
    fn wait_task<'a>(
        &'a self,
        op: Op,
        upid: &'a Upid,
    ) -> BoxFuture<'a, Result<TaskOutcome, PveError>>;
    /// The guest's configuration.
    fn ct_config(&self, vmid: Vmid) -> BoxFuture<'_, Result<CtConfig, PveError>>;
    /// Starts a vzdump task.
    fn vzdump<'a>(&'a self, request: &'a VzdumpRequest) -> BoxFuture<'a, Result<Upid, PveError>>;
    /// One poll of a task's status.
    fn task_status<'a>(&'a self, upid: &'a Upid)
    -> BoxFuture<'a, Result<TaskStatusInfo, PveError>>;
    /// Task log lines from `start`.
    fn task_log<'a>(
        &'a self,
        upid: &'a Upid,
        start: u64,
        limit: u64,
    ) -> BoxFuture<'a, Result<TaskLog, PveError>>;
    /// The guest's backup archives in `storage`.
    fn list_backups<'a>(
        &'a self,
        storage: &'a StorageId,
        vmid: Vmid,
    ) -> BoxFuture<'a, Result<Vec<ContentItem>, PveError>>;
    /// One volume's attributes.
    fn volume_attributes<'a>(
        &'a self,
        volume: &'a VolumeId,
    ) -> BoxFuture<'a, Result<VolumeAttributes, PveError>>;
    /// Replaces a backup's notes.
    fn set_volume_notes<'a>(
        &'a self,
        volume: &'a VolumeId,
        notes: &'a str,
    ) -> BoxFuture<'a, Result<(), PveError>>;
    /// The guest configuration inside a backup archive.
    fn extract_config<'a>(
        &'a self,
        volume: &'a VolumeId,
    ) -> BoxFuture<'a, Result<String, PveError>>;
    /// Changes a guest's configuration (synchronous).
    fn update_config<'a>(
        &'a self,
        vmid: Vmid,
        update: &'a ConfigUpdate,
    ) -> BoxFuture<'a, Result<(), PveError>>;
    /// A VM's configuration (pending values merged).
    fn vm_config(&self, vmid: Vmid) -> BoxFuture<'_, Result<VmConfig, PveError>>;
    /// Changes a VM's configuration (synchronous).
    fn update_vm_config<'a>(
        &'a self,
        vmid: Vmid,
        update: &'a VmConfigUpdate,
    ) -> BoxFuture<'a, Result<(), PveError>>;
}

/// [`GuestOps`] over a [`PveQemu`] implementation.
#[derive(Debug)]
pub struct PveOps<P> {
    pve: Arc<P>,
}

impl<P: PveQemu + std::fmt::Debug + 'static> PveOps<P> {
    /// Wraps a shared PVE client.
    pub fn shared(pve: Arc<P>) -> Arc<dyn GuestOps> {
        Arc::new(Self { pve })
    }
}

impl<P: PveQemu + std::fmt::Debug + 'static> GuestOps for PveOps<P> {
    fn list_snapshots(&self, vmid: Vmid) -> BoxFuture<'_, Result<Vec<SnapshotInfo>, PveError>> {
        Box::pin(async move {
            let all = self.pve.list_snapshots(vmid).await?;
            Ok(all.into_iter().filter(|s| !s.is_current()).collect())
        })
    }

    fn create_snapshot<'a>(
        &'a self,
        vmid: Vmid,
        name: &'a SnapName,
        description: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Upid, PveError>> {
        Box::pin(self.pve.create_snapshot(vmid, name, description))
    }

    fn rollback<'a>(
        &'a self,
        vmid: Vmid,
        name: &'a SnapName,
    ) -> BoxFuture<'a, Result<Upid, PveError>> {
        Box::pin(self.pve.rollback_snapshot(vmid, name, true))
    }

    fn list_vm_snapshots(&self, vmid: Vmid) -> BoxFuture<'_, Result<Vec<SnapshotInfo>, PveError>> {
        Box::pin(async move {
            let all = self.pve.list_vm_snapshots(vmid).await?;
            Ok(all.into_iter().filter(|s| !s.is_current()).collect())
        })
    }

    fn create_vm_snapshot<'a>(
        &'a self,
        vmid: Vmid,
        name: &'a SnapName,
        description: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Upid, PveError>> {
        Box::pin(self.pve.create_vm_snapshot(vmid, name, description))
    }

    fn rollback_vm<'a>(
        &'a self,
        vmid: Vmid,
        name: &'a SnapName,
    ) -> BoxFuture<'a, Result<Upid, PveError>> {
        Box::pin(self.pve.rollback_vm_snapshot(vmid, name, true))
    }

    fn find_task(
        &self,
        vmid: Vmid,
        task_type: &'static str,
        asked_at: jiff::Timestamp,
    ) -> BoxFuture<'_, Result<Option<Upid>, PveError>> {
        Box::pin(super::tasks::find_task(
            &*self.pve, vmid, task_type, asked_at,
        ))
    }

    fn wait_task<'a>(
        &'a self,
        op: Op,
        upid: &'a Upid,
    ) -> BoxFuture<'a, Result<TaskOutcome, PveError>> {
        Box::pin(self.pve.wait_task(op, upid))
    }

    fn ct_config(&self, vmid: Vmid) -> BoxFuture<'_, Result<CtConfig, PveError>> {
        Box::pin(self.pve.ct_config(vmid))
    }

    fn vzdump<'a>(&'a self, request: &'a VzdumpRequest) -> BoxFuture<'a, Result<Upid, PveError>> {
        Box::pin(self.pve.vzdump(request))
    }

    fn task_status<'a>(
        &'a self,
        upid: &'a Upid,
    ) -> BoxFuture<'a, Result<TaskStatusInfo, PveError>> {
        Box::pin(self.pve.task_status(upid))
    }

    fn task_log<'a>(
        &'a self,
        upid: &'a Upid,
        start: u64,
        limit: u64,
    ) -> BoxFuture<'a, Result<TaskLog, PveError>> {
        Box::pin(self.pve.task_log(upid, start, limit))
    }

    fn list_backups<'a>(
        &'a self,
        storage: &'a StorageId,
        vmid: Vmid,
    ) -> BoxFuture<'a, Result<Vec<ContentItem>, PveError>> {
        Box::pin(async move {
            let filter = ContentFilter {
                content: Some(ContentType::Backup),
                vmid: Some(vmid),
            };
            let items = self.pve.list_content(storage, filter).await?;
            let want = u64::from(vmid.get());
            Ok(items.into_iter().filter(|i| i.vmid == Some(want)).collect())
        })
    }

    fn volume_attributes<'a>(
        &'a self,
        volume: &'a VolumeId,
    ) -> BoxFuture<'a, Result<VolumeAttributes, PveError>> {
        Box::pin(self.pve.volume_attributes(volume))
    }

    fn set_volume_notes<'a>(
        &'a self,
        volume: &'a VolumeId,
        notes: &'a str,
    ) -> BoxFuture<'a, Result<(), PveError>> {
        Box::pin(self.pve.set_volume_notes(volume, notes))
    }

    fn extract_config<'a>(
        &'a self,
        volume: &'a VolumeId,
    ) -> BoxFuture<'a, Result<String, PveError>> {
        Box::pin(self.pve.extract_config(volume))
    }

    fn update_config<'a>(
        &'a self,
        vmid: Vmid,
        update: &'a ConfigUpdate,
    ) -> BoxFuture<'a, Result<(), PveError>> {
        Box::pin(self.pve.update_ct_config(vmid, update))
    }

    fn vm_config(&self, vmid: Vmid) -> BoxFuture<'_, Result<VmConfig, PveError>> {
        Box::pin(self.pve.vm_config(vmid))
    }

    fn update_vm_config<'a>(
        &'a self,
        vmid: Vmid,
        update: &'a VmConfigUpdate,
    ) -> BoxFuture<'a, Result<(), PveError>> {
        Box::pin(self.pve.update_vm_config(vmid, update))
    }
}
