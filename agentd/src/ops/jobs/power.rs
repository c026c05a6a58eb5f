//! Stopping a guest before a signed job overwrites its disks and starting it again after:
//! the same steps for a container and a VM, each journaled, each asked again while Proxmox
//! refuses it for now (a lock held by a task ending) within the job's patience.

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestKind;
use bosun_pve::{GuestStatus, Op, Pve, PveQemu, Vmid};
use serde_json::{Value, json};

use super::decommission::{Patience, is_retryable, refused_for_now};
use super::error::JobError;
use crate::ops::operation::{OpJournal, StepName};

/// The step's arguments: a VM's name their kind, a container's stay as they always were so
/// older journals read the same.
fn args(kind: GuestKind, vmid: Vmid) -> Value {
    match kind {
        GuestKind::Lxc => json!({ "vmid": vmid.get() }),
        GuestKind::Qemu => json!({ "vmid": vmid.get(), "kind": kind.as_str() }),
    }
}

/// Stops the guest if it runs (a hard stop: its disks are about to be replaced); whether it
/// ran.
pub(super) async fn stop_if_running<P: Pve + PveQemu>(
    pve: &P,
    op: &OpJournal,
    kind: GuestKind,
    vmid: Vmid,
    patience: &mut Patience,
) -> Result<bool, JobError> {
    let status = loop {
        let read = match kind {
            GuestKind::Lxc => pve.ct_status(vmid).await.map(|s| s.status),
            GuestKind::Qemu => pve.vm_status(vmid).await.map(|s| s.status),
        };
        match read {
            Ok(status) => break status,
            Err(e) if is_retryable(&e) && patience.pause().await => {
                tracing::info!(%vmid, kind = kind.as_str(), error = %error_chain(&e), "status read failed; trying again");
            }
            Err(e) => return Err(e.into()),
        }
    };
    if status != GuestStatus::Running {
        return Ok(false);
    }
    match kind {
        GuestKind::Lxc => {
            op.task(
                pve,
                Op::StopCt,
                StepName::Stop,
                args(kind, vmid),
                pve.stop_ct(vmid),
            )
            .await?
        }
        GuestKind::Qemu => {
            op.task(
                pve,
                Op::StopVm,
                StepName::Stop,
                args(kind, vmid),
                pve.stop_vm(vmid),
            )
            .await?
        }
    };
    Ok(true)
}

/// Starts the restored guest again, asking again while the start is refused for now.
pub(super) async fn start_again<P: Pve + PveQemu>(
    pve: &P,
    op: &OpJournal,
    kind: GuestKind,
    vmid: Vmid,
    patience: &mut Patience,
) -> Result<(), JobError> {
    loop {
        let started = match kind {
            GuestKind::Lxc => {
                op.task(
                    pve,
                    Op::StartCt,
                    StepName::Start,
                    args(kind, vmid),
                    pve.start_ct(vmid),
                )
                .await
            }
            GuestKind::Qemu => {
                op.task(
                    pve,
                    Op::StartVm,
                    StepName::Start,
                    args(kind, vmid),
                    pve.start_vm(vmid),
                )
                .await
            }
        };
        match started {
            Ok(_) => return Ok(()),
            Err(e) if e.pve().is_some_and(refused_for_now) && patience.pause().await => {
                tracing::info!(%vmid, kind = kind.as_str(), error = %error_chain(&e), "start refused for now; trying again");
            }
            Err(e) => return Err(e.into()),
        }
    }
}
