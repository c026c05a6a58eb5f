//! Guest-loss DR and host loss of a QEMU guest (DESIGN §8, §8b; decision 0121), as one
//! journaled `dr_restore_vm` operation:
//!
//! ```text
//!  assign_address ─► choose_source ─► next_id? ─► check_bootstrap ─► restore_vm ──────────►
//!  (the addresses    (the archive      (only when   (the token kept    (qmrestore of the archive
//!   the guest held)   proven as a VM's  the lost     or revoked, as     into pool `bosun`, the
//!                     right before)     vmid is      for a container)   operation's tag, name,
//!                                       taken)                          ciuser, sshkeys, ipconfig0)
//!  ─► read_config ─► reset_identity ─► guard_firewall ─► vm_volume… ─► start_vm
//!                    (the MAC rule on net0, firewall=1;    (a bulk disk made
//!                     a fresh MAC brings a fresh SMBIOS     again, empty)
//!                     uuid)
//! ```
//!
//! **The MAC rule and the instance identity.** The restored VM keeps the archive's MAC only
//! if it is the one the journal recorded for the guest (at its last backup) and nothing that
//! may be the source still runs at the lost vmid; otherwise it gets a fresh MAC (`unique=1`,
//! or `net0` written back without one) and a fresh SMBIOS uuid. Proxmox's NoCloud
//! `instance-id` is a digest of the cloud-init user and network data it generates, and the
//! network data names each interface's MAC: a fresh MAC is a new cloud-init instance, on whose
//! first boot the image regenerates machine-id and SSH host keys (decision 0114) — the VM
//! counterpart of a container's reset inside the guest (decision 0027), made without entering
//! the VM. A kept MAC, with the same name, address and keys, is the same instance: the guest
//! keeps the machine-id and host keys its customer's SSH clients know, as a container does.
//!
//! A failure rolls back what this operation restored (through the gate, only while the VM at
//! the vmid carries the operation's tag) and leaves the guest lost; a crash leaves the
//! operation for replay ([`super::vm_lookup::replay`]), which resumes it after `restore_vm`
//! from the source `choose_source` journaled, or rolls it back.

use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestSpec;
use bosun_pve::{IpConfig, Pve, PveQemu, VmConfigUpdate, VmNet, VmOptions, VmRestoreRequest, Vmid};
use serde_json::json;
use uuid::Uuid;

use super::address::NetPlan;
use super::dr_restore::Recovery;
use super::restore::Sent;
use super::vm::{VM_USER, VmProvisioner};
use super::{Bringup, ProvisionError, Reservation, op_tag};
use crate::ops::journal::{AssignedAddress, OpStatus};
use crate::ops::operation::{OpJournal, OpKind, Origin, StepError, StepName};

/// Whether the restored VM's MAC is the archive's or a fresh one, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MacRule {
    /// The archive's MAC, the one the journal recorded for the guest.
    Kept,
    /// A fresh MAC: the source may still run at the lost vmid.
    SourceMayRun,
    /// A fresh MAC: the archive's is not the one the journal recorded (or none was).
    NotRecorded,
}

impl MacRule {
    /// The rule for a restored VM whose `net0` has `archive` and whose guest's journaled MAC
    /// is `recorded`.
    pub(super) fn decide(
        source_may_run: bool,
        archive: Option<&str>,
        recorded: Option<&str>,
    ) -> Self {
        if source_may_run {
            return Self::SourceMayRun;
        }
        match (archive, recorded) {
            (Some(a), Some(r)) if a.eq_ignore_ascii_case(r) => Self::Kept,
            _ => Self::NotRecorded,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Kept => "kept",
            Self::SourceMayRun => "fresh: the source may still run",
            Self::NotRecorded => "fresh: not the recorded MAC",
        }
    }
}

/// Whether nothing, container or VM, holds `vmid`.
async fn vmid_free<Q: PveQemu>(pve: &Q, vmid: Vmid) -> Result<bool, String> {
    match pve.vm_config(vmid).await {
        Err(e) if e.is_missing() => {}
        Err(e) => return Err(error_chain(&e)),
        Ok(_) => return Ok(false),
    }
    match Pve::ct_config(pve, vmid).await {
        Err(e) if e.is_missing() => Ok(true),
        Err(e) => Err(error_chain(&e)),
        Ok(_) => Ok(false),
    }
}

impl<Q: PveQemu + 'static> VmProvisioner<Q> {
    /// Restores lost VM guest `spec` from `recovery.source` into its old vmid if free (else a
    /// fresh one: then the source may still run), with the DR identity of the module docs. A
    /// failure rolls back what this operation created and leaves the guest lost.
    pub(super) async fn recover_vm(
        &self,
        spec: &GuestSpec,
        recovery: Recovery,
        origin: Origin,
    ) -> Result<Vmid, ProvisionError> {
        let op = self
            .base
            .begin(OpKind::RecoverVm, spec, Some(recovery.lost_vmid), origin)
            .await?;
        self.drive_recovery(&op, spec, None, &recovery).await
    }

    /// Runs the DR steps from `restored` (a VM an interrupted operation already restored) or
    /// from the start; audits the restore with its RPO and RTO when it ends, rolls the VM back
    /// when a step fails.
    pub(super) async fn drive_recovery(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        restored: Option<Vmid>,
        recovery: &Recovery,
    ) -> Result<Vmid, ProvisionError> {
        let guest_id = spec.guest_id.to_string();
        let mut created = restored;
        match self.recovery_steps(op, spec, &mut created, recovery).await {
            Ok(vmid) => {
                self.base.recovered(op, spec, vmid, recovery).await;
                op.finish(OpStatus::Done, None).await.map_err(|source| {
                    ProvisionError::RolledBack {
                        guest_id: guest_id.clone(),
                        source,
                    }
                })?;
                tracing::info!(%guest_id, vmid = vmid.get(), op_id = %op.op_id(), "lost vm restored");
                Ok(vmid)
            }
            Err(failure) => {
                tracing::warn!(%guest_id, op_id = %op.op_id(), error = %error_chain(&failure), "vm DR restore failed; rolling back");
                match super::vm_steps::compensate_vm_with_retries(&*self.base.pve, op, created)
                    .await
                {
                    Ok(()) => {
                        let _ = op
                            .finish(OpStatus::Compensated, Some(error_chain(&failure)))
                            .await;
                        Err(ProvisionError::RolledBack {
                            guest_id,
                            source: failure,
                        })
                    }
                    Err(rollback) => Err(ProvisionError::RollbackFailed {
                        guest_id,
                        rollback: error_chain(&rollback),
                        source: failure,
                    }),
                }
            }
        }
    }

    async fn recovery_steps(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        created: &mut Option<Vmid>,
        recovery: &Recovery,
    ) -> Result<Vmid, StepError> {
        let plan = self
            .base
            .assign_addresses(op, spec, &Bringup::Recover(Box::new(recovery.clone())))
            .await?;
        let (vmid, source_may_run) = match *created {
            Some(vmid) => (vmid, vmid.get() != recovery.lost_vmid),
            None => {
                // Every volume has its place before anything is restored.
                self.wanted_disks(op, spec)?;
                self.restore_backup(op, spec, recovery, &plan, created)
                    .await?
            }
        };
        self.reset_vm_identity(op, spec, vmid, source_may_run)
            .await?;
        self.guard(op, vmid).await?;
        // The hot disks came back from the archive; a bulk disk (left out of it, its line
        // commented out by the restore) is made again, empty (decision 0124).
        self.volumes(op, spec, vmid).await?;
        // The VM runs with the bootstrap its backup holds; a revoked token (a new vmid, or
        // one minted after the backup) is delivered again by a later pass once it runs.
        self.start(op, spec, vmid).await?;
        Ok(vmid)
    }

    /// The DR `restore_vm` step: the old vmid if nothing holds it (else a fresh one, and the
    /// source may still run), the token checked against the backup's age, the guest's record
    /// moved to the vmid, and the archive restored into Bosun's pool with the operation's tag
    /// and the guest's cloud-init identity. Gives the vmid and whether the source may run.
    async fn restore_backup(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        recovery: &Recovery,
        plan: &NetPlan,
        created: &mut Option<Vmid>,
    ) -> Result<(Vmid, bool), StepError> {
        let pve = &*self.base.pve;
        let other = |reason: String| StepError::Other {
            op_id: op.op_id(),
            step: StepName::RestoreVm.as_str().into(),
            reason,
        };
        let guest_id = spec.guest_id.to_string();
        let source = &recovery.source;
        op.local(
            StepName::ChooseSource,
            json!({
                "archive": source.archive.to_string(),
                "storage": source.storage.as_str(),
                "tier": source.tier,
                "taken_at": source.taken_at.to_string(),
                "retired_key": source.retired_key,
                "lost_vmid": recovery.lost_vmid,
                "lost_since": recovery.lost_since.to_string(),
                "trigger": recovery.trigger,
                "kind": "qemu",
            }),
            async { Ok::<(), String>(()) },
        )
        .await?;
        let lost = Vmid::new(recovery.lost_vmid).map_err(|e| other(e.to_string()))?;
        let (vmid, source_may_run) = if vmid_free(pve, lost).await.map_err(other)? {
            (lost, false)
        } else {
            let offered = op.call(StepName::NextId, json!({}), pve.next_id()).await?;
            (self.base.reserve_from(op, offered.get())?, true)
        };
        let _release = Reservation {
            reserved: Arc::clone(&self.base.reserved),
            vmid: vmid.get(),
        };
        let taken = u64::try_from(source.taken_at.as_second()).ok();
        let journal = &self.base.journal;
        op.local(
            StepName::CheckBootstrap,
            json!({ "vmid": vmid.get(), "backup_ctime": taken }),
            async {
                if vmid != lost {
                    // The token names the old vmid: a fresh bootstrap follows once it runs.
                    journal
                        .revoke_token(guest_id.clone())
                        .await
                        .map(|_| ())
                        .map_err(|e| error_chain(&e))
                } else {
                    crate::guests::credentials::stale::revoke_if_minted_after(
                        journal,
                        &guest_id,
                        vmid.get(),
                        taken,
                        "dr",
                    )
                    .await
                    .map(|_| ())
                    .map_err(|e| error_chain(&e))
                }
            },
        )
        .await?;
        journal
            .record_recovered(
                op.op_id(),
                guest_id.clone(),
                recovery.lost_vmid,
                vmid.get(),
                bosun_proto::desired::GuestKind::Qemu,
            )
            .await
            .map_err(|source| StepError::Journal {
                op_id: op.op_id(),
                step: StepName::RestoreVm.as_str().into(),
                source,
            })?;
        let request = self
            .recovery_request(op, spec, plan, (vmid, source_may_run), recovery)
            .await?;
        let detail = json!({
            "vmid": vmid.get(),
            "archive": source.archive.to_string(),
            "storage": self.base.storage.to_string(),
            "pool": self.pool.as_str(),
            "tag": op_tag(op),
            "unique": request.unique,
            "smbios_uuid": request.options.smbios_uuid.map(|u| u.to_string()),
            "ciuser": VM_USER,
            "ssh_keys": request.options.sshkeys.len(),
        });
        match super::vm_lookup::send_restore(self, op, &request, detail, created).await? {
            Sent::Restored(vmid) => Ok((vmid, source_may_run)),
            Sent::Taken(e) => Err(e),
        }
    }

    /// The restore request of a DR: the archive (through the restore-only storage of a
    /// retired key) into Bosun's pool with the operation's tag, the guest's name, `ciuser`,
    /// the keys the signed plan trusts and `ipconfig0` from the address it held; fresh MACs,
    /// `vmgenid` and SMBIOS uuid only when the source may still run. `net0` is the archive's,
    /// so its MAC is judged after the restore ([`MacRule`]).
    async fn recovery_request(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        plan: &NetPlan,
        (vmid, source_may_run): (Vmid, bool),
        recovery: &Recovery,
    ) -> Result<VmRestoreRequest, StepError> {
        let mut request = VmRestoreRequest::new(
            vmid,
            recovery.source.restore_volume(),
            self.base.storage.clone(),
        );
        request.unique = source_may_run;
        request.pool = Some(self.pool.clone());
        let sshkeys = match &self.issuer {
            Some(issuer) => {
                let target = crate::guests::credentials::bootstrap::IssueTarget {
                    guest_id: spec.guest_id,
                    vmid,
                    customer: spec.customer.clone(),
                };
                issuer
                    .guest_keys(op, &target)
                    .await?
                    .iter()
                    .map(|k| k.as_str().to_owned())
                    .collect()
            }
            None => Vec::new(),
        };
        request.options = VmOptions {
            name: Some(spec.hostname.clone()),
            ipconfig: ipconfig0(&plan.addresses)
                .map(|ip| (0, ip))
                .into_iter()
                .collect(),
            ciuser: Some(VM_USER.to_owned()),
            sshkeys,
            agent: Some(true),
            smbios_uuid: source_may_run.then(Uuid::new_v4),
            tags: vec![op_tag(op)],
            ..VmOptions::default()
        };
        Ok(request)
    }

    /// `read_config`, then `reset_identity`: the MAC rule on `net0` ([`MacRule`]), which is
    /// written back whole with `firewall=1` and its link up; a fresh MAC comes with a fresh
    /// SMBIOS uuid (a source that may run already got both from `unique=1`).
    async fn reset_vm_identity(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        vmid: Vmid,
        source_may_run: bool,
    ) -> Result<(), StepError> {
        let pve = &*self.base.pve;
        let failed = |reason: String| StepError::Other {
            op_id: op.op_id(),
            step: StepName::ResetIdentity.as_str().into(),
            reason,
        };
        let config = op
            .call(
                StepName::ReadConfig,
                json!({ "vmid": vmid.get() }),
                pve.vm_config(vmid),
            )
            .await?;
        let net0 = config
            .get_str("net0")
            .ok_or_else(|| failed("the restored VM has no net0".into()))?;
        let mut net = VmNet::parse(&net0).map_err(|e| failed(e.to_string()))?;
        let recorded = self
            .base
            .journal
            .guest_mac(spec.guest_id.to_string())
            .await
            .map_err(|source| StepError::Journal {
                op_id: op.op_id(),
                step: StepName::ResetIdentity.as_str().into(),
                source,
            })?;
        let rule = MacRule::decide(source_may_run, net.macaddr.as_deref(), recorded.as_deref());
        // A source that may run: `unique=1` already made the MAC and the uuid fresh.
        let renew = rule == MacRule::NotRecorded;
        if renew {
            tracing::warn!(guest_id = %spec.guest_id, vmid = vmid.get(), archive_mac = ?net.macaddr, ?recorded, "the archive's MAC is not the one recorded for the guest; the vm gets a fresh one");
            net.macaddr = None;
        }
        net.firewall = Some(true);
        net.link_down = None;
        let smbios_uuid = renew.then(Uuid::new_v4);
        let update = VmConfigUpdate {
            set: VmOptions {
                net: [(0, net)].into_iter().collect(),
                smbios_uuid,
                ..VmOptions::default()
            },
            ..VmConfigUpdate::default()
        };
        op.call(
            StepName::ResetIdentity,
            json!({
                "vmid": vmid.get(),
                "mac": rule.as_str(),
                "smbios_uuid": smbios_uuid.map(|u| u.to_string()),
                "net0": "firewall=1",
            }),
            pve.update_vm_config(vmid, &update),
        )
        .await?;
        Ok(())
    }
}

/// `ipconfig0` of the guest's IPv4 address, when it held one.
fn ipconfig0(addresses: &[AssignedAddress]) -> Option<IpConfig> {
    addresses.iter().find_map(|a| match (a.address, a.gateway) {
        (std::net::IpAddr::V4(address), gateway) => Some(IpConfig::Static {
            address,
            prefix: a.prefix,
            gateway: match gateway {
                Some(std::net::IpAddr::V4(gw)) => Some(gw),
                _ => None,
            },
        }),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::MacRule;

    #[test]
    fn the_mac_is_kept_only_when_it_is_the_recorded_one_and_no_source_may_run() {
        let mac = "BC:24:11:00:00:01";
        let table = [
            (false, Some(mac), Some(mac), MacRule::Kept),
            (false, Some(mac), Some("bc:24:11:00:00:01"), MacRule::Kept),
            (
                false,
                Some(mac),
                Some("BC:24:11:00:00:02"),
                MacRule::NotRecorded,
            ),
            (false, Some(mac), None, MacRule::NotRecorded),
            (false, None, Some(mac), MacRule::NotRecorded),
            (true, Some(mac), Some(mac), MacRule::SourceMayRun),
        ];
        for (may_run, archive, recorded, want) in table {
            let got = MacRule::decide(may_run, archive, recorded);
            assert_eq!(got, want, "{may_run} {archive:?} {recorded:?}");
        }
    }
}
