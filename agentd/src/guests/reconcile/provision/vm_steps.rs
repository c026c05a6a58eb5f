//! A VM provisioning's steps after `restore_vm` ([`super::vm`]): the identity read back, the
//! firewall guard, the start, the guest agent waited for and the bootstrap written into the
//! VM this operation created; and the rollback of a VM half built.

use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::desired::{GuestSpec, Power};
use bosun_pve::{AgentFileWrite, FirewallUpdate, GuestStatus, Op, PveQemu, Vmid};
use futures::future::BoxFuture;
use serde_json::json;

use super::vm::{VM_USER, VmIdentity, VmProvisioner};
use super::{ProvisionError, op_tag};
use crate::guests::credentials::bootstrap::{
    BootstrapIssuer, BootstrapWriter, Delivery, IssueTarget, TokenPolicy,
};
use crate::guests::reconcile::lookup::has_tag;
use crate::ops::journal::{JournalHandle, OpStatus};
use crate::ops::operation::{OpJournal, OpKind, Origin, StepError, StepName};
use crate::trust::gate::{self, Action as GateAction, Authority, GateRequest, Provenance, Target};

/// Between two pings of a new VM's guest agent.
const PING_EVERY: Duration = Duration::from_millis(250);

/// How often a VM's rollback is tried before the operation is left for replay.
const ROLLBACK_ATTEMPTS: u32 = 5;

/// The value of `key=` in a property string.
fn part<'a>(value: &'a str, key: &str) -> Option<&'a str> {
    value
        .split(',')
        .find_map(|p| p.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

impl<Q: PveQemu + 'static> VmProvisioner<Q> {
    /// `check_vm_identity`: the VM's config carries this operation's tag, the SMBIOS uuid and
    /// cloud-init identity the restore sent, the guest agent device, and `net0` on the bridge
    /// with `firewall=1`; anything else fails the step (and rolls the VM back).
    pub(super) async fn check_identity(
        &self,
        op: &OpJournal,
        vmid: Vmid,
        identity: &VmIdentity,
    ) -> Result<(), StepError> {
        let pve = &*self.base.pve;
        let tag = op_tag(op);
        let expected_ip = format!("{:?}", identity.ipconfig0);
        let check = async {
            let config = pve.vm_config(vmid).await.map_err(|e| error_chain(&e))?;
            let get = |key: &str| config.get_str(key).unwrap_or_default();
            let mut wrong = Vec::new();
            if !has_tag(Some(&get("tags")), &tag) {
                wrong.push("tags");
            }
            if part(&get("smbios1"), "uuid")
                != Some(identity.smbios_uuid.hyphenated().to_string().as_str())
            {
                wrong.push("smbios1");
            }
            if get("ciuser") != VM_USER {
                wrong.push("ciuser");
            }
            let ip = match identity.ipconfig0 {
                bosun_pve::IpConfig::Static {
                    address, prefix, ..
                } => format!("{address}/{prefix}"),
                bosun_pve::IpConfig::Dhcp => "dhcp".to_owned(),
            };
            if part(&get("ipconfig0"), "ip") != Some(ip.as_str()) {
                wrong.push("ipconfig0");
            }
            let net0 = get("net0");
            if part(&net0, "firewall") != Some("1")
                || part(&net0, "bridge") != Some(identity.bridge.as_str())
            {
                wrong.push("net0");
            }
            let agent = get("agent");
            if !(agent == "1" || part(&agent, "enabled") == Some("1")) {
                wrong.push("agent");
            }
            if wrong.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "the restored VM's config does not hold the identity sent: {}",
                    wrong.join(", ")
                ))
            }
        };
        op.local(
            StepName::CheckVmIdentity,
            json!({ "vmid": vmid.get(), "smbios_uuid": identity.smbios_uuid.to_string(), "ipconfig0": expected_ip }),
            check,
        )
        .await
    }

    /// `guard_firewall`: the VM's own firewall on, with `ipfilter` (its address is static,
    /// from `ipconfig0`); `net0` carries `firewall=1` from the restore.
    pub(super) async fn guard(&self, op: &OpJournal, vmid: Vmid) -> Result<(), StepError> {
        let pve = &*self.base.pve;
        let update = FirewallUpdate {
            enable: true,
            ipfilter: true,
        };
        op.call(
            StepName::GuardFirewall,
            json!({ "vmid": vmid.get(), "enable": true, "ipfilter": true }),
            pve.set_vm_firewall(vmid, &update),
        )
        .await
    }

    /// `start_vm`, when the guest should run and does not; gives whether it runs now. A VM
    /// that fails to start is kept (it is complete).
    pub(super) async fn start(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        vmid: Vmid,
    ) -> Result<bool, StepError> {
        let pve = &*self.base.pve;
        let running = pve
            .vm_status(vmid)
            .await
            .is_ok_and(|s| s.status == GuestStatus::Running);
        if spec.power != Power::Running || running {
            return Ok(running);
        }
        let started = op
            .task(
                pve,
                Op::StartVm,
                StepName::StartVm,
                json!({ "vmid": vmid.get() }),
                pve.start_vm(vmid),
            )
            .await;
        match started {
            Ok(_) => Ok(true),
            Err(e @ StepError::Pve { .. }) => {
                tracing::warn!(vmid = vmid.get(), error = %error_chain(&e), "new vm did not start; its bootstrap waits for a later pass");
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// The guest agent waited for, then the bootstrap written; a failure keeps the VM and is
    /// left to a later pass.
    pub(super) async fn post_start(&self, op: &OpJournal, spec: &GuestSpec, vmid: Vmid) {
        if let Err(e) = self.bootstrap(op, spec, vmid).await {
            tracing::warn!(vmid = vmid.get(), error = %error_chain(&e), "vm bootstrap failed; the vm is kept and a later pass retries");
        }
    }

    /// `agent_ping` (bounded), then the bootstrap issued and written through the guest
    /// agent into `vmid` only.
    async fn bootstrap(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        vmid: Vmid,
    ) -> Result<(), StepError> {
        let Some(issuer) = &self.issuer else {
            return Ok(());
        };
        let pve = &*self.base.pve;
        await_guest_agent(pve, op, vmid, self.agent_wait).await?;
        let target = IssueTarget {
            guest_id: spec.guest_id,
            vmid,
            customer: spec.customer.clone(),
        };
        write_vm_bootstrap(pve, op, issuer, &target).await
    }

    /// A running VM's bootstrap delivered on a later pass, in its own `deliver_bootstrap`
    /// operation.
    pub(super) async fn deliver(
        &self,
        spec: &GuestSpec,
        vmid: Vmid,
        origin: Origin,
    ) -> Result<(), ProvisionError> {
        let op = self
            .base
            .begin(OpKind::DeliverBootstrap, spec, Some(vmid.get()), origin)
            .await?;
        let result = self.bootstrap(&op, spec, vmid).await;
        let (status, error) = match &result {
            Ok(()) => (OpStatus::Done, None),
            Err(e) => (OpStatus::Failed, Some(error_chain(e))),
        };
        if let Err(e) = op.finish(status, error).await {
            tracing::warn!(vmid = vmid.get(), error = %error_chain(&e), "could not journal the end of a vm bootstrap delivery");
        }
        result.map_err(|source| ProvisionError::PostStart {
            guest_id: spec.guest_id.to_string(),
            source,
        })
    }
}

/// `agent_ping`: waits at most `wait` for the guest agent of VM `vmid` to answer, as a step of
/// `op`; a silence past it fails the step, naming the VM and the wait.
pub(crate) async fn await_guest_agent<Q: PveQemu>(
    pve: &Q,
    op: &OpJournal,
    vmid: Vmid,
    wait: Duration,
) -> Result<(), StepError> {
    op.local(
        StepName::AgentPing,
        json!({ "vmid": vmid.get(), "wait_ms": u64::try_from(wait.as_millis()).unwrap_or(u64::MAX) }),
        async {
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                match pve.agent_ping(vmid).await {
                    Ok(()) => return Ok(()),
                    Err(e) if tokio::time::Instant::now() >= deadline => {
                        return Err(format!(
                            "the guest agent of vm {vmid} did not answer within {} s: {}",
                            wait.as_secs(),
                            error_chain(&e)
                        ));
                    }
                    Err(_) => tokio::time::sleep(PING_EVERY.min(wait)).await,
                }
            }
        },
    )
    .await
}

/// The bootstrap of `target` issued (the token kept when the journal holds one) and written
/// through the guest agent's `file-write` into `target.vmid` alone, as steps of `op`: each
/// write is refused unless the journal records that vmid as `target.guest_id` (no scratch)
/// and the VM carries the identity the journal wrote. Provisioning, a later pass and the
/// `adopt` job of a VM deliver a VM's bootstrap through this one path.
pub(crate) async fn write_vm_bootstrap<Q: PveQemu>(
    pve: &Q,
    op: &OpJournal,
    issuer: &BootstrapIssuer,
    target: &IssueTarget,
) -> Result<(), StepError> {
    let writer = OwnVm {
        pve,
        journal: op.journal(),
        vmid: target.vmid,
        guest_id: target.guest_id.to_string(),
    };
    issuer
        .run_via(
            op,
            target,
            TokenPolicy::KeepExisting,
            Delivery::GuestAgent(&writer),
        )
        .await
        .map(|_| ())
}

/// Writes into one VM: the one an operation of this agent created for `guest_id`, judged
/// before every write from the journal (its provenance names the guest, and it is no
/// scratch) and from Proxmox (the VM carries the identity the journal wrote). Any other vmid
/// is refused without a call.
struct OwnVm<'a, Q: PveQemu> {
    pve: &'a Q,
    journal: &'a JournalHandle,
    vmid: Vmid,
    guest_id: String,
}

impl<Q: PveQemu> OwnVm<'_, Q> {
    async fn write_checked(&self, vmid: Vmid, path: &str, document: &[u8]) -> Result<(), String> {
        if vmid != self.vmid {
            return Err(format!(
                "refused: vm {vmid} is not the vm {} this bootstrap is for",
                self.vmid
            ));
        }
        let provenance = self
            .journal
            .provenance(vmid.get())
            .await
            .map_err(|e| error_chain(&e))?
            .ok_or_else(|| format!("refused: vm {vmid} is not in the agent's journal"))?;
        if provenance.is_scratch() || provenance.guest_id() != Some(self.guest_id.as_str()) {
            return Err(format!(
                "refused: the journal does not record vm {vmid} as guest {}",
                self.guest_id
            ));
        }
        let config = self
            .pve
            .vm_config(vmid)
            .await
            .map_err(|e| error_chain(&e))?;
        if !crate::guests::reconcile::lookup::carries_identity(&config, provenance.identity()) {
            return Err(format!(
                "refused: vm {vmid} does not carry the identity the agent wrote"
            ));
        }
        let write = AgentFileWrite {
            path: path.to_owned(),
            content: document.to_vec(),
        };
        self.pve
            .agent_file_write(vmid, &write)
            .await
            .map_err(|e| error_chain(&e))
    }
}

impl<Q: PveQemu> BootstrapWriter for OwnVm<'_, Q> {
    fn write<'a>(
        &'a self,
        vmid: Vmid,
        path: &'a str,
        document: &'a [u8],
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.write_checked(vmid, path, document))
    }
}

/// [`compensate_vm`], tried again with backoff while the failure is transient; a rollback
/// that still fails leaves the operation `running` for replay.
pub(crate) async fn compensate_vm_with_retries<Q: PveQemu>(
    pve: &Q,
    op: &OpJournal,
    created: Option<Vmid>,
) -> Result<(), StepError> {
    let mut delay = Duration::from_millis(250);
    let mut attempt = 1;
    loop {
        match compensate_vm(pve, op, created).await {
            Ok(()) => return Ok(()),
            Err(err) if attempt < ROLLBACK_ATTEMPTS && !is_gate_denial(&err) => {
                tracing::warn!(op_id = %op.op_id(), attempt, error = %error_chain(&err), "vm rollback failed; trying again");
                tokio::time::sleep(delay).await;
                delay = delay.saturating_mul(2);
                attempt += 1;
            }
            Err(err) => return Err(err),
        }
    }
}

fn is_gate_denial(err: &StepError) -> bool {
    matches!(err, StepError::Other { step, .. } if step == "compensate")
}

/// Rolls back what `op` created: stops and destroys the VM at `created` if the gate allows it
/// as compensation of `op` and the VM carries `op`'s tag (a VM without it took the vmid
/// meanwhile and is never touched), then forgets its provenance.
pub(super) async fn compensate_vm<Q: PveQemu>(
    pve: &Q,
    op: &OpJournal,
    created: Option<Vmid>,
) -> Result<(), StepError> {
    let Some(vmid) = created else {
        return Ok(());
    };
    let journal_failed = |source| StepError::Journal {
        op_id: op.op_id(),
        step: "compensate".into(),
        source,
    };
    let pve_failed = |source| StepError::Pve {
        op_id: op.op_id(),
        step: "compensate".into(),
        source,
    };
    let provenance = op
        .journal()
        .provenance(vmid.get())
        .await
        .map_err(journal_failed)?;
    let request = GateRequest {
        action: GateAction::DestroyGuest,
        target: Target::Guest { vmid: vmid.get() },
        authority: Authority::Compensation { op_id: op.op_id() },
        provenance: Provenance::from_journal(provenance.as_ref()),
    };
    let decision = gate::decide(&request);
    let _ = op
        .journal()
        .append_audit(decision.audit_event(&request))
        .await;
    if !decision.is_allowed() {
        tracing::error!(vmid = vmid.get(), op_id = %op.op_id(), reason = %decision.reason(), "vm rollback refused by the gate; vm left in place");
        return Err(StepError::Other {
            op_id: op.op_id(),
            step: "compensate".into(),
            reason: format!("gate denied: {}", decision.reason()),
        });
    }
    let ours = match pve.vm_config(vmid).await {
        // A restore still running: its tag arrives when it ends; tried again.
        Ok(config) if config.lock().as_deref() == Some("create") => {
            return Err(StepError::Other {
                op_id: op.op_id(),
                step: "compensate_vm".into(),
                reason: format!("a restore is still running on vm {vmid}"),
            });
        }
        Ok(config) => has_tag(config.get_str("tags").as_deref(), &op_tag(op)),
        Err(e) if e.is_missing() => false,
        Err(e) => return Err(pve_failed(e)),
    };
    if ours {
        let status = pve.vm_status(vmid).await.map_err(pve_failed)?;
        if status.status == GuestStatus::Running {
            op.task(
                pve,
                Op::StopVm,
                StepName::CompensateStopVm,
                json!({ "vmid": vmid.get() }),
                pve.stop_vm(vmid),
            )
            .await?;
        }
        op.task(
            pve,
            Op::DestroyVm,
            StepName::CompensateDestroyVm,
            json!({ "vmid": vmid.get(), "purge": true }),
            pve.destroy_vm(vmid, true),
        )
        .await?;
        tracing::info!(vmid = vmid.get(), op_id = %op.op_id(), "rolled back a half-built vm");
    }
    op.journal()
        .forget_guest(op.op_id(), vmid.get())
        .await
        .map_err(journal_failed)?;
    Ok(())
}
