//! The `PveQemu` seam: every QEMU call Bosun makes, beside [`Pve`]'s container calls.
//!
//! A separate trait, so the agent's container code and its fakes are untouched until the
//! agent drives VMs. The guest agent's calls are here too; which of them the agent makes,
//! and on which VMs, is decision 0113: only on VMs in Bosun's own pool, where alone the
//! token holds `VM.GuestAgent.*` (`VM.Monitor` before PVE 9).

use std::future::Future;

use serde_json::Value;

use super::api::Pve;
use super::catalogue::Op;
use super::client::{Ctx, PveClient};
use super::error::PveError;
use super::firewall::{FirewallUpdate, GuestFirewall};
use super::model::{CtConfig, SnapshotInfo};
use super::property::DiskSize;
use super::qemu_devices::VmDisk;
use super::qemu_model::{
    AgentResult, CloudinitItem, ExecStarted, ExecStatus, FileRead, FileReadAnswer, FreezeStatus,
    GuestInterface, VmSummary,
};
use super::qemu_requests::{
    AgentExec, AgentFileWrite, FILE_READ_MAX, VmConfigUpdate, VmRestoreRequest, file_read_params,
};
use super::requests::Params;
use super::types::{SnapName, Upid, Vmid};

/// A VM's config: the same shape as a container's (`digest` plus raw values).
pub type VmConfig = CtConfig;

/// The Proxmox VE API for QEMU guests, on the node the implementation drives.
pub trait PveQemu: Pve {
    /// `GET /nodes/{node}/qemu`: the node's VMs the token may audit.
    fn list_vms(&self) -> impl Future<Output = Result<Vec<VmSummary>, PveError>> + Send;
    /// A VM's config with pending values merged, plus its digest.
    fn vm_config(&self, vmid: Vmid) -> impl Future<Output = Result<VmConfig, PveError>> + Send;
    /// Changes a VM's config synchronously (`PUT`); waits out config locks.
    fn update_vm_config(
        &self,
        vmid: Vmid,
        update: &VmConfigUpdate,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
    /// A VM's runtime status (with `agent` and `qmpstatus`).
    fn vm_status(&self, vmid: Vmid) -> impl Future<Output = Result<VmSummary, PveError>> + Send;
    /// Starts a VM (task `qmstart`).
    fn start_vm(&self, vmid: Vmid) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Stops (kills) a VM (task `qmstop`).
    fn stop_vm(&self, vmid: Vmid) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Shuts a VM down, waiting `timeout_secs`, then failing or, with `force_stop`, killing
    /// it (task `qmshutdown`).
    fn shutdown_vm(
        &self,
        vmid: Vmid,
        timeout_secs: Option<u32>,
        force_stop: bool,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Creates a new VM by restoring a vzdump-qemu archive (task `qmrestore`); never
    /// overwrites: an existing `vmid` fails.
    fn restore_vm(
        &self,
        request: &VmRestoreRequest,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Destroys a stopped VM (task `qmdestroy`).
    fn destroy_vm(
        &self,
        vmid: Vmid,
        purge: bool,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// A VM's snapshots, with the `current` pseudo-entry.
    fn list_vm_snapshots(
        &self,
        vmid: Vmid,
    ) -> impl Future<Output = Result<Vec<SnapshotInfo>, PveError>> + Send;
    /// Takes a disk-only snapshot (task `qmsnapshot`; PVE freezes through the guest agent
    /// when one runs).
    fn create_vm_snapshot(
        &self,
        vmid: Vmid,
        name: &SnapName,
        description: Option<&str>,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Deletes a snapshot (task `qmdelsnapshot`).
    fn delete_vm_snapshot(
        &self,
        vmid: Vmid,
        name: &SnapName,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Rolls back to a snapshot (task `qmrollback`); `start` starts the VM afterwards.
    fn rollback_vm_snapshot(
        &self,
        vmid: Vmid,
        name: &SnapName,
        start: bool,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// Whether the VM's guest agent answers (`agent/ping`).
    fn agent_ping(&self, vmid: Vmid) -> impl Future<Output = Result<(), PveError>> + Send;
    /// Freezes the VM's filesystems; gives how many were frozen.
    fn agent_fsfreeze(&self, vmid: Vmid) -> impl Future<Output = Result<u64, PveError>> + Send;
    /// Thaws the VM's filesystems; gives how many were thawed.
    fn agent_fsthaw(&self, vmid: Vmid) -> impl Future<Output = Result<u64, PveError>> + Send;
    /// Whether the VM's filesystems are frozen.
    fn agent_fsfreeze_status(
        &self,
        vmid: Vmid,
    ) -> impl Future<Output = Result<FreezeStatus, PveError>> + Send;
    /// Starts a program inside the VM; gives its guest pid.
    fn agent_exec(
        &self,
        vmid: Vmid,
        exec: &AgentExec,
    ) -> impl Future<Output = Result<ExecStarted, PveError>> + Send;
    /// A program's state and captured output. The agent forgets a program once its exit has
    /// been read.
    fn agent_exec_status(
        &self,
        vmid: Vmid,
        pid: u64,
    ) -> impl Future<Output = Result<ExecStatus, PveError>> + Send;
    /// Writes a file inside the VM (created or truncated).
    fn agent_file_write(
        &self,
        vmid: Vmid,
        write: &AgentFileWrite,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
    /// Reads a file inside the VM as text: at most 16 MiB of it, `truncated` when it goes on.
    fn agent_file_read(
        &self,
        vmid: Vmid,
        path: &str,
    ) -> impl Future<Output = Result<FileRead, PveError>> + Send;
    /// The VM's interfaces and addresses, as its guest agent reports them.
    fn agent_network_interfaces(
        &self,
        vmid: Vmid,
    ) -> impl Future<Output = Result<Vec<GuestInterface>, PveError>> + Send;
    /// The VM's cloud-init keys: the values its drive was built with and the pending ones.
    fn vm_cloudinit(
        &self,
        vmid: Vmid,
    ) -> impl Future<Output = Result<Vec<CloudinitItem>, PveError>> + Send;
    /// Rebuilds the VM's cloud-init drive from its config (synchronous).
    fn regenerate_cloudinit(&self, vmid: Vmid)
    -> impl Future<Output = Result<(), PveError>> + Send;
    /// Grows a VM's disk to `size` (task `resize`); PVE refuses to shrink one. `digest`
    /// refuses the change when the config changed since it was read.
    fn resize_vm_disk(
        &self,
        vmid: Vmid,
        disk: &VmDisk,
        size: DiskSize,
        digest: Option<&str>,
    ) -> impl Future<Output = Result<Upid, PveError>> + Send;
    /// A VM's own firewall options (`…/qemu/{vmid}/firewall/options`).
    fn vm_firewall(
        &self,
        vmid: Vmid,
    ) -> impl Future<Output = Result<GuestFirewall, PveError>> + Send;
    /// Turns a VM's firewall filters on (synchronous); never turns one off.
    fn set_vm_firewall(
        &self,
        vmid: Vmid,
        update: &FirewallUpdate,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
}

impl PveClient {
    fn vm_path<'a>(&'a self, vmid: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
        let mut p = vec!["nodes", self.node().as_str(), "qemu", vmid];
        p.extend_from_slice(rest);
        p
    }

    async fn vm_call<T: serde::de::DeserializeOwned>(
        &self,
        op: Op,
        vmid: Vmid,
        rest: &[&str],
        params: &Params,
    ) -> Result<T, PveError> {
        let id = vmid.to_string();
        self.call(Ctx::ct(op, vmid), &self.vm_path(&id, rest), params)
            .await
    }

    async fn agent_result<T: serde::de::DeserializeOwned>(
        &self,
        op: Op,
        vmid: Vmid,
        command: &str,
    ) -> Result<T, PveError> {
        let answer: AgentResult<T> = self
            .vm_call(op, vmid, &["agent", command], &Params::new())
            .await?;
        Ok(answer.result)
    }
}

impl PveQemu for PveClient {
    async fn list_vms(&self) -> Result<Vec<VmSummary>, PveError> {
        self.call(
            Ctx::new(Op::ListVms),
            &["nodes", self.node().as_str(), "qemu"],
            &Params::new(),
        )
        .await
    }

    async fn vm_config(&self, vmid: Vmid) -> Result<VmConfig, PveError> {
        self.vm_call(Op::VmConfig, vmid, &["config"], &Params::new())
            .await
    }

    async fn update_vm_config(&self, vmid: Vmid, update: &VmConfigUpdate) -> Result<(), PveError> {
        let params = update.params(Op::UpdateVmConfig)?;
        let _: Value = self
            .vm_call(Op::UpdateVmConfig, vmid, &["config"], &params)
            .await?;
        Ok(())
    }

    async fn vm_status(&self, vmid: Vmid) -> Result<VmSummary, PveError> {
        self.vm_call(Op::VmStatus, vmid, &["status", "current"], &Params::new())
            .await
    }

    async fn start_vm(&self, vmid: Vmid) -> Result<Upid, PveError> {
        self.vm_call(Op::StartVm, vmid, &["status", "start"], &Params::new())
            .await
    }

    async fn stop_vm(&self, vmid: Vmid) -> Result<Upid, PveError> {
        self.vm_call(Op::StopVm, vmid, &["status", "stop"], &Params::new())
            .await
    }

    async fn shutdown_vm(
        &self,
        vmid: Vmid,
        timeout_secs: Option<u32>,
        force_stop: bool,
    ) -> Result<Upid, PveError> {
        let mut params = Params::new();
        if let Some(t) = timeout_secs {
            params.push(("timeout".into(), t.to_string()));
        }
        if force_stop {
            params.push(("forceStop".into(), "1".into()));
        }
        self.vm_call(Op::ShutdownVm, vmid, &["status", "shutdown"], &params)
            .await
    }

    async fn restore_vm(&self, request: &VmRestoreRequest) -> Result<Upid, PveError> {
        let params = request.params(Op::RestoreVm)?;
        self.call(
            Ctx::ct(Op::RestoreVm, request.vmid),
            &["nodes", self.node().as_str(), "qemu"],
            &params,
        )
        .await
    }

    async fn destroy_vm(&self, vmid: Vmid, purge: bool) -> Result<Upid, PveError> {
        let mut params = Params::new();
        if purge {
            params.push(("purge".into(), "1".into()));
        }
        self.vm_call(Op::DestroyVm, vmid, &[], &params).await
    }

    async fn list_vm_snapshots(&self, vmid: Vmid) -> Result<Vec<SnapshotInfo>, PveError> {
        self.vm_call(Op::ListVmSnapshots, vmid, &["snapshot"], &Params::new())
            .await
    }

    async fn create_vm_snapshot(
        &self,
        vmid: Vmid,
        name: &SnapName,
        description: Option<&str>,
    ) -> Result<Upid, PveError> {
        let mut params: Params = vec![("snapname".into(), name.to_string())];
        if let Some(d) = description {
            params.push(("description".into(), d.to_owned()));
        }
        self.vm_call(Op::CreateVmSnapshot, vmid, &["snapshot"], &params)
            .await
    }

    async fn delete_vm_snapshot(&self, vmid: Vmid, name: &SnapName) -> Result<Upid, PveError> {
        self.vm_call(
            Op::DeleteVmSnapshot,
            vmid,
            &["snapshot", name.as_str()],
            &Params::new(),
        )
        .await
    }

    async fn rollback_vm_snapshot(
        &self,
        vmid: Vmid,
        name: &SnapName,
        start: bool,
    ) -> Result<Upid, PveError> {
        let mut params = Params::new();
        if start {
            params.push(("start".into(), "1".into()));
        }
        self.vm_call(
            Op::RollbackVmSnapshot,
            vmid,
            &["snapshot", name.as_str(), "rollback"],
            &params,
        )
        .await
    }

    async fn agent_ping(&self, vmid: Vmid) -> Result<(), PveError> {
        let _: Value = self.agent_result(Op::AgentPing, vmid, "ping").await?;
        Ok(())
    }

    async fn agent_fsfreeze(&self, vmid: Vmid) -> Result<u64, PveError> {
        self.agent_result(Op::AgentFsFreeze, vmid, "fsfreeze-freeze")
            .await
    }

    async fn agent_fsthaw(&self, vmid: Vmid) -> Result<u64, PveError> {
        self.agent_result(Op::AgentFsThaw, vmid, "fsfreeze-thaw")
            .await
    }

    async fn agent_fsfreeze_status(&self, vmid: Vmid) -> Result<FreezeStatus, PveError> {
        self.agent_result(Op::AgentFsFreezeStatus, vmid, "fsfreeze-status")
            .await
    }

    async fn agent_exec(&self, vmid: Vmid, exec: &AgentExec) -> Result<ExecStarted, PveError> {
        let params = exec.params(Op::AgentExec)?;
        self.vm_call(Op::AgentExec, vmid, &["agent", "exec"], &params)
            .await
    }

    async fn agent_exec_status(&self, vmid: Vmid, pid: u64) -> Result<ExecStatus, PveError> {
        let params: Params = vec![("pid".into(), pid.to_string())];
        self.vm_call(
            Op::AgentExecStatus,
            vmid,
            &["agent", "exec-status"],
            &params,
        )
        .await
    }

    async fn agent_file_write(&self, vmid: Vmid, write: &AgentFileWrite) -> Result<(), PveError> {
        let params = write.params(Op::AgentFileWrite)?;
        let _: Value = self
            .vm_call(Op::AgentFileWrite, vmid, &["agent", "file-write"], &params)
            .await?;
        Ok(())
    }

    async fn agent_file_read(&self, vmid: Vmid, path: &str) -> Result<FileRead, PveError> {
        let params = file_read_params(Op::AgentFileRead, path)?;
        let answer: FileReadAnswer = self
            .vm_call(Op::AgentFileRead, vmid, &["agent", "file-read"], &params)
            .await?;
        // Each byte read is one character, at most two bytes of UTF-8.
        if answer.content.len() as u64 > 2 * FILE_READ_MAX {
            return Err(PveError::Decode {
                op: Op::AgentFileRead,
                vmid: Some(vmid),
                body_excerpt: format!("{} bytes", answer.content.len()),
                source: <serde_json::Error as serde::de::Error>::custom(
                    "more than PVE reads of a file",
                ),
            });
        }
        Ok(FileRead {
            content: answer.content,
            truncated: answer.truncated,
        })
    }

    async fn agent_network_interfaces(&self, vmid: Vmid) -> Result<Vec<GuestInterface>, PveError> {
        self.agent_result(Op::AgentNetworkInterfaces, vmid, "network-get-interfaces")
            .await
    }

    async fn vm_cloudinit(&self, vmid: Vmid) -> Result<Vec<CloudinitItem>, PveError> {
        self.vm_call(Op::VmCloudinit, vmid, &["cloudinit"], &Params::new())
            .await
    }

    async fn regenerate_cloudinit(&self, vmid: Vmid) -> Result<(), PveError> {
        let _: Value = self
            .vm_call(
                Op::RegenerateCloudinit,
                vmid,
                &["cloudinit"],
                &Params::new(),
            )
            .await?;
        Ok(())
    }

    async fn resize_vm_disk(
        &self,
        vmid: Vmid,
        disk: &VmDisk,
        size: DiskSize,
        digest: Option<&str>,
    ) -> Result<Upid, PveError> {
        let size = size.to_param().map_err(|source| PveError::InvalidRequest {
            op: Op::ResizeVmDisk,
            field: "size",
            source,
        })?;
        let mut params: Params = vec![("disk".into(), disk.to_string()), ("size".into(), size)];
        if let Some(digest) = digest {
            params.push(("digest".into(), digest.to_owned()));
        }
        self.vm_call(Op::ResizeVmDisk, vmid, &["resize"], &params)
            .await
    }

    async fn vm_firewall(&self, vmid: Vmid) -> Result<GuestFirewall, PveError> {
        self.vm_call(
            Op::GetVmFirewall,
            vmid,
            &["firewall", "options"],
            &Params::new(),
        )
        .await
    }

    async fn set_vm_firewall(&self, vmid: Vmid, update: &FirewallUpdate) -> Result<(), PveError> {
        let params = update.params(Op::SetVmFirewall)?;
        let _: Value = self
            .vm_call(Op::SetVmFirewall, vmid, &["firewall", "options"], &params)
            .await?;
        Ok(())
    }
}
