//! What the applier sends for a container of the agent's own: hostname, cores, memory and
//! share (`PUT …/lxc/{vmid}/config`, the network rate on its interfaces), the rootfs grown
//! (`PUT …/lxc/{vmid}/resize`), the network guard, start and shutdown. A VM's are in
//! [`super::apply_vm`].

use bosun_pve::{ConfigUpdate, CtDisk, CtOptions, DiskSize, Op, Pve, SizeUnit, Vmid};
use serde_json::json;

use super::apply_vm::SHUTDOWN_TIMEOUT_SECS;
use super::plan::Action;
use crate::ops::operation::{OpJournal, StepError, StepName};

/// Carries out `action` on container `vmid` as steps of `op`.
pub(super) async fn ct_action<P: Pve>(
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
            let mut update = ConfigUpdate {
                set: CtOptions {
                    hostname: hostname.clone(),
                    cores: cores.map(u32::from),
                    memory: memory_mib.map(u64::from),
                    startup: *startup,
                    ..CtOptions::default()
                },
                ..ConfigUpdate::default()
            };
            if let Some(share) = share {
                super::share::put_cpu(share, &mut update);
            }
            if update != ConfigUpdate::default() {
                op.call(
                    StepName::SetSpec,
                    json!({
                        "vmid": vmid.get(),
                        "hostname": hostname,
                        "cores": cores,
                        "memory_mib": memory_mib,
                        "startup": startup.map(|s| s.to_string()),
                        "cpu_weight": update.set.cpuunits,
                        "cpu_limit": update.set.cpulimit.map(|t| t.to_string()),
                        "delete": update.delete,
                    }),
                    pve.update_ct_config(vmid, &update),
                )
                .await?;
            }
            match share.and_then(|s| s.net_rate) {
                Some(rate) => super::share::set_net_rate(pve, op, vmid, rate).await,
                None => Ok(()),
            }
        }
        Action::GrowRootfs {
            from_gib, to_gib, ..
        } => op
            .task(
                pve,
                Op::ResizeDisk,
                StepName::ResizeRootfs,
                json!({ "vmid": vmid.get(), "from_gib": from_gib, "to_gib": to_gib }),
                pve.resize_disk(
                    vmid,
                    CtDisk::RootFs,
                    DiskSize::Absolute(u64::from(*to_gib), SizeUnit::G),
                ),
            )
            .await
            .map(|_| ()),
        Action::GuardNetwork { .. } => super::network_guard::guard(pve, op, vmid).await,
        Action::Start { .. }
            if pve
                .ct_status(vmid)
                .await
                .is_ok_and(|s| s.status == bosun_pve::GuestStatus::Running) =>
        {
            // Started meanwhile (a job ahead of us in the guest's line).
            Ok(())
        }
        Action::Start { .. } => op
            .task(
                pve,
                Op::StartCt,
                StepName::Start,
                json!({ "vmid": vmid.get() }),
                pve.start_ct(vmid),
            )
            .await
            .map(|_| ()),
        Action::Stop { .. } => op
            .task(
                pve,
                Op::ShutdownCt,
                StepName::Shutdown,
                json!({ "vmid": vmid.get(), "timeout_secs": SHUTDOWN_TIMEOUT_SECS, "force_stop": true }),
                pve.shutdown_ct(vmid, Some(SHUTDOWN_TIMEOUT_SECS), true),
            )
            .await
            .map(|_| ()),
        // Dispatched to the provisioner in `run_action`; nothing to do here.
        Action::Provision { .. } | Action::DeliverBootstrap { .. } | Action::Recover { .. } => {
            Ok(())
        }
    }
}
