//! What the applier sends for a VM of the agent's own (decision 0117): the VM counterparts of
//! a container's calls, journaled the same way, under the same operation kinds.
//!
//! - name, cores, memory, share and `startup`: one `PUT …/qemu/{vmid}/config` (`set_spec`;
//!   `cpuunits`, `cpulimit` set or deleted, and for a new network rate every `netN` read first
//!   and written back whole with its MAC, under the digest read, decision 0125);
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
            hostname,
            cores,
            memory_mib,
            share,
            startup,
            ..
        } => {
            let mut update = VmConfigUpdate {
                set: VmOptions {
                    name: hostname.clone(),
                    cores: cores.map(u32::from),
                    memory: memory_mib.map(u64::from),
                    startup: *startup,
                    ..VmOptions::default()
                },
                ..VmConfigUpdate::default()
            };
            if let Some(share) = share {
                super::share::put_vm_cpu(share, &mut update);
            }
            if let Some(rate) = share.and_then(|s| s.net_rate) {
                rate_devices(pve, op, vmid, rate, &mut update).await?;
            }
            if update.set.is_empty() && update.delete.is_empty() {
                return Ok(());
            }
            let rate = update.set.net.values().next().map(|n| n.rate);
            op.call(
                StepName::SetSpec,
                json!({
                    "vmid": vmid.get(),
                    "name": hostname,
                    "cores": cores,
                    "memory_mib": memory_mib,
                    "startup": startup.map(|s| s.to_string()),
                    "cpu_weight": update.set.cpuunits,
                    "cpu_limit": update.set.cpulimit.map(|t| t.to_string()),
                    "delete": update.delete,
                    "interfaces": update.set.net.keys().map(|i| format!("net{i}")).collect::<Vec<_>>(),
                    "rate_mbytes_per_s": rate.flatten().map(|t| t.to_string()),
                }),
                pve.update_vm_config(vmid, &update),
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

/// Puts `rate` on every network device of VM `vmid` that lacks it into `update`: the config
/// read first, each device written back whole with its MAC, bridge, firewall and link state as
/// read, under the config's digest so a change made meanwhile is never overwritten.
async fn rate_devices<P: PveQemu>(
    pve: &P,
    op: &OpJournal,
    vmid: Vmid,
    rate: super::share::Limit,
    update: &mut VmConfigUpdate,
) -> Result<(), StepError> {
    let config = op
        .call(
            StepName::ReadConfig,
            json!({ "vmid": vmid.get() }),
            pve.vm_config(vmid),
        )
        .await?;
    update.set.net =
        super::share::vm_rated_devices(&config, rate).map_err(|source| StepError::Failed {
            op_id: op.op_id(),
            step: StepName::SetSpec.as_str().into(),
            source: Box::new(source),
        })?;
    update.digest = Some(config.digest.clone());
    Ok(())
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
