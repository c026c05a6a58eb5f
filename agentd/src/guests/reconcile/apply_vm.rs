//! What the applier sends for a VM of the agent's own (decision 0117): the VM counterparts of
//! a container's calls, journaled the same way, under the same operation kinds.
//!
//! - cores and memory: `PUT …/qemu/{vmid}/config` (`set_spec`);
//! - the root disk: its config read, then `PUT …/qemu/{vmid}/resize` to the size desired, with
//!   the digest read (`resize_vm_disk`); never sent when the disk is as large already or its
//!   size cannot be read, so a shrink never reaches Proxmox;
//! - the network guard: [`super::vm_guard::guard_vm`];
//! - power: `qmstart` (`start_vm`, skipped when the VM runs by then), `qmshutdown` with the
//!   containers' timeout and forced off after it (`shutdown_vm`).

use bosun_pve::{DiskSize, Op, PveQemu, SizeUnit, VmConfigUpdate, VmOptions, Vmid};
use serde_json::json;

use super::plan::Action;
use crate::ops::operation::{OpJournal, StepError, StepName};

/// Seconds a VM is given to shut down before it is forced off (a container's too).
pub const SHUTDOWN_TIMEOUT_SECS: u32 = 60;

/// Carries out `action` on VM `vmid` as steps of `op`.
pub(super) async fn vm_action<P: PveQemu>(
    pve: &P,
    action: &Action,
    op: &OpJournal,
    vmid: Vmid,
) -> Result<(), StepError> {
    match action {
        Action::SetSpec {
            cores, memory_mib, ..
        } => {
            let set = VmOptions {
                cores: cores.map(u32::from),
                memory: memory_mib.map(u64::from),
                ..VmOptions::default()
            };
            if set.is_empty() {
                return Ok(());
            }
            op.call(
                StepName::SetSpec,
                json!({ "vmid": vmid.get(), "cores": cores, "memory_mib": memory_mib }),
                pve.update_vm_config(
                    vmid,
                    &VmConfigUpdate {
                        set,
                        ..VmConfigUpdate::default()
                    },
                ),
            )
            .await
        }
        Action::GrowRootfs { to_gib, .. } => grow_root_disk(pve, op, vmid, *to_gib).await,
        Action::GuardNetwork { .. } => super::vm_guard::guard_vm(pve, op, vmid).await,
        Action::Start { .. }
            if pve
                .vm_status(vmid)
                .await
                .is_ok_and(|s| s.status == bosun_pve::GuestStatus::Running) =>
        {
            // Started meanwhile (a job ahead of us in the guest's line).
            Ok(())
        }
        Action::Start { .. } => op
            .task(
                pve,
                Op::StartVm,
                StepName::StartVm,
                json!({ "vmid": vmid.get() }),
                pve.start_vm(vmid),
            )
            .await
            .map(|_| ()),
        Action::Stop { .. } => op
            .task(
                pve,
                Op::ShutdownVm,
                StepName::ShutdownVm,
                json!({
                    "vmid": vmid.get(),
                    "timeout_secs": SHUTDOWN_TIMEOUT_SECS,
                    "force_stop": true,
                }),
                pve.shutdown_vm(vmid, Some(SHUTDOWN_TIMEOUT_SECS), true),
            )
            .await
            .map(|_| ()),
        // Dispatched to the provisioner before any Proxmox call of the applier's own.
        Action::Provision { .. } | Action::DeliverBootstrap { .. } | Action::Recover { .. } => {
            Ok(())
        }
    }
}

/// Grows the VM's root disk to `to_gib`, read from its config first: a disk that is as large
/// already is left (nothing sent), one whose size does not read is refused.
async fn grow_root_disk<P: PveQemu>(
    pve: &P,
    op: &OpJournal,
    vmid: Vmid,
    to_gib: u32,
) -> Result<(), StepError> {
    let config = op
        .call(
            StepName::ReadConfig,
            json!({ "vmid": vmid.get() }),
            pve.vm_config(vmid),
        )
        .await?;
    let refuse = |reason: &str| StepError::Other {
        op_id: op.op_id(),
        step: StepName::ResizeVmDisk.as_str().into(),
        reason: reason.to_owned(),
    };
    let (disk, drive) = super::observe_vm::root_disk(&config)
        .ok_or_else(|| refuse("the vm has no root disk to grow"))?;
    let have = super::observe::volume_size_gib(&drive)
        .ok_or_else(|| refuse("the root disk's size does not read; nothing is sent"))?;
    if have >= to_gib {
        tracing::info!(
            vmid = vmid.get(),
            disk = %disk,
            have_gib = have,
            want_gib = to_gib,
            "the vm's root disk is as large already; nothing sent"
        );
        return Ok(());
    }
    op.task(
        pve,
        Op::ResizeVmDisk,
        StepName::ResizeVmDisk,
        json!({ "vmid": vmid.get(), "disk": disk.as_str(), "from_gib": have, "to_gib": to_gib }),
        pve.resize_vm_disk(
            vmid,
            &disk,
            DiskSize::Absolute(u64::from(to_gib), SizeUnit::G),
            Some(&config.digest),
        ),
    )
    .await
    .map(|_| ())
}
