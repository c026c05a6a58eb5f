//! The steps a scratch guest goes through wherever the agent starts one to watch it (a restore
//! test of a backup, the boot test of a golden base): its vmid recorded scratch before Proxmox
//! is asked for it, its restore under the operation's identity tag and a scratch hostname,
//! every network link down before its first start, and the watch that it stays up.

use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestKind;
use bosun_proto::helper::SCRATCH_HOSTNAME_PREFIX;
use bosun_pve::{
    CtConfig, CtOptions, GuestStatus, Op, Pve, PveQemu, RestoreRequest, Vmid, net_without_hwaddr,
};
use serde_json::json;

use super::{OpJournal, StepError, StepName};
use crate::ops::journal::{JournalError, JournalHandle, identity_tag};

/// A step of `op` that failed outside Proxmox, and why.
pub fn other(op: &OpJournal, step: &str, reason: String) -> StepError {
    StepError::Other {
        op_id: op.op_id(),
        step: step.to_owned(),
        reason,
    }
}

/// `next_id`, then a scratch container's vmid recorded as `op`'s before Proxmox is asked for
/// it; an id an older operation's record holds is passed over (`tries` offers at most).
pub async fn scratch_vmid<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    op: &OpJournal,
    tries: u32,
) -> Result<Vmid, StepError> {
    scratch_vmid_as(pve, journal, op, tries, GuestKind::Lxc).await
}

/// [`scratch_vmid`] for a scratch guest of `kind` (a VM's is recorded as a VM's).
pub async fn scratch_vmid_as<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    op: &OpJournal,
    tries: u32,
    kind: GuestKind,
) -> Result<Vmid, StepError> {
    let mut floor = 0;
    for _ in 0..tries {
        let offered = op.call(StepName::NextId, json!({}), pve.next_id()).await?;
        let candidate =
            Vmid::new(offered.get().max(floor)).map_err(|e| other(op, "next_id", e.to_string()))?;
        match journal
            .record_scratch(op.op_id(), candidate.get(), kind)
            .await
        {
            Ok(()) => return Ok(candidate),
            Err(JournalError::VmidAlreadyRecorded { .. }) => {
                floor = candidate.get().saturating_add(1);
            }
            Err(source) => {
                return Err(StepError::Journal {
                    op_id: op.op_id(),
                    step: "record_scratch".into(),
                    source,
                });
            }
        }
    }
    Err(other(op, "next_id", "no free vmid".into()))
}

/// The `restore` step of the scratch guest `request` names: tagged with `op`'s identity (so
/// replay tells it from a guest that took the vmid meanwhile), named scratch, started at boot
/// only if `onboot`; the step records `archive` (the archive as the caller knows it).
pub async fn restore<P: Pve>(
    pve: &P,
    op: &OpJournal,
    mut request: RestoreRequest,
    onboot: bool,
    archive: &str,
) -> Result<(), StepError> {
    let vmid = request.vmid;
    request.options.tags = vec![identity_tag(op.op_id())];
    request.options.hostname = Some(format!("{SCRATCH_HOSTNAME_PREFIX}{vmid}"));
    request.options.onboot = Some(onboot);
    op.task(
        pve,
        Op::RestoreCt,
        StepName::Restore,
        json!({ "vmid": vmid.get(), "archive": archive, "storage": request.storage.as_str(), "scratch": true }),
        pve.restore_ct(&request),
    )
    .await?;
    Ok(())
}

/// Every network link of `config` set down, its MAC address dropped (the `isolate` step's
/// options).
#[expect(
    clippy::result_large_err,
    reason = "the step error every scratch step returns; built once, on the way out"
)]
pub fn links_down(op: &OpJournal, config: &CtConfig) -> Result<CtOptions, StepError> {
    let mut set = CtOptions::default();
    for (key, value) in &config.values {
        if let Some(index) = key.strip_prefix("net").and_then(|i| i.parse::<u8>().ok())
            && let Some(value) = value.as_str()
        {
            let mut net = net_without_hwaddr(value).map_err(|r| other(op, "isolate", r))?;
            net.link_down = Some(true);
            set.net.insert(index, net);
        }
    }
    Ok(set)
}

/// Watches the started scratch guest `vmid` every `poll` (at most `stay_up`) until it has
/// run for `stay_up`; a guest that stops fails the `stay_up` step with `stopped(ran)`, how
/// long it ran.
pub async fn stay_up<P: Pve>(
    pve: &P,
    op: &OpJournal,
    vmid: Vmid,
    watch: (Duration, Duration),
    stopped: impl FnOnce(Duration) -> String,
) -> Result<(), StepError> {
    let status = || async { pve.ct_status(vmid).await.map(|s| s.status) };
    watch_running(op, watch, status, stopped).await
}

/// [`stay_up`] for a scratch VM.
pub async fn stay_up_vm<Q: PveQemu>(
    pve: &Q,
    op: &OpJournal,
    vmid: Vmid,
    watch: (Duration, Duration),
    stopped: impl FnOnce(Duration) -> String,
) -> Result<(), StepError> {
    let status = || async { pve.vm_status(vmid).await.map(|s| s.status) };
    watch_running(op, watch, status, stopped).await
}

/// Reads `status` every `poll` until the guest has run for `stay_up`, failing the `stay_up`
/// step with `stopped(ran)` when it is not running.
async fn watch_running<F, Fut>(
    op: &OpJournal,
    (stay_up, poll): (Duration, Duration),
    status: F,
    stopped: impl FnOnce(Duration) -> String,
) -> Result<(), StepError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<GuestStatus, bosun_pve::PveError>>,
{
    let deadline = tokio::time::Instant::now() + stay_up;
    loop {
        let status = status()
            .await
            .map_err(|e| other(op, "stay_up", error_chain(&e)))?;
        if status != GuestStatus::Running {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            return Err(other(op, "stay_up", stopped(stay_up.saturating_sub(left))));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(());
        }
        tokio::time::sleep(poll.min(stay_up)).await;
    }
}
