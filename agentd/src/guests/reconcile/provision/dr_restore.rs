//! Guest-loss DR's restore (DESIGN §8): a lost guest brought back from its own backup through
//! provisioning's bring-up ([`Provisioner::recover`]), with the identity the scenario gives
//! it ([`crate::data::recovery::identity_for`]) and, when the source may still run, the identity
//! reset inside it ([`super::dr_identity`]).
//!
//! Disaster recovery, end to end: what to restore from and which identity to give
//! ([`crate::data::recovery`]: the surviving tiers' newest proven backup, a lost host's guests
//! found on PBS); who starts it (a reconcile pass under the `auto` policy,
//! `reconcile::apply`, or an operator's signed `restore-now`, [`crate::ops::jobs::restore_now`]);
//! this restore; and its resumption after a crash (`reconcile::replay`).

use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestSpec;
use bosun_pve::{Pve, RestoreRequest, Vmid};
use serde_json::json;

use super::restore::Sent;
use super::{Bringup, ProvisionError, Provisioner, Reservation, op_tag};
use crate::data::recovery::identity::{Scenario, identity_for};
use crate::ops::journal::AuditEvent;
use crate::ops::operation::StepName;
use crate::ops::operation::{OpJournal, OpKind, Origin, StepError};

/// A lost guest's restore from its own backup (guest-loss DR, DESIGN §8).
#[derive(Debug, Clone)]
pub struct Recovery {
    /// The vmid the journal recorded for the lost guest.
    pub lost_vmid: u32,
    /// The archive, from the fastest surviving tier.
    pub source: crate::data::recovery::BackupSource,
    /// When the guest was first found lost (the start of the RTO).
    pub lost_since: jiff::Timestamp,
    /// `auto` (the host's DR policy) or `job` (a signed `restore-now`).
    pub trigger: &'static str,
}

impl<P: Pve + 'static> Provisioner<P> {
    /// Restores lost guest `spec` from `recovery.source` into its old vmid if free (else a
    /// fresh one), with the DR identity policy: the backup's MAC (unless the old vmid holds
    /// a stranger that may be the source still running), hostname, bootstrap and token as
    /// the backup holds them; bulk volumes reattached per the manifest; no controller
    /// redeploy. A failure rolls back what this operation created and leaves the guest lost.
    /// A `qemu` guest is restored by the VM provisioner instead (decision 0121).
    pub async fn recover(
        &self,
        spec: &GuestSpec,
        recovery: Recovery,
        origin: impl Into<Origin>,
    ) -> Result<Vmid, ProvisionError> {
        if spec.kind == bosun_proto::desired::GuestKind::Qemu {
            return self
                .vms_for(spec)?
                .recover(spec, recovery, origin.into())
                .await;
        }
        let op = self
            .begin(
                OpKind::Recover,
                spec,
                Some(recovery.lost_vmid),
                origin.into(),
            )
            .await?;
        self.drive(&op, spec, None, &Bringup::Recover(Box::new(recovery)))
            .await
    }

    /// Continues the DR restore `op` (found unfinished at start) after its restore produced
    /// `vmid`: the remaining steps run again (each is idempotent), then the restore is
    /// audited with its RPO and RTO; a failing step rolls the guest back.
    pub async fn resume_recovery(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        vmid: Vmid,
        recovery: Recovery,
    ) -> Result<Vmid, ProvisionError> {
        tracing::info!(guest_id = %spec.guest_id, vmid = vmid.get(), op_id = %op.op_id(), "resuming an interrupted DR restore");
        self.drive(op, spec, Some(vmid), &Bringup::Recover(Box::new(recovery)))
            .await
    }

    /// The DR `restore` step: picks the old vmid if free (else a fresh one, and then the
    /// source may still be live), checks the guest's token against the backup's age, moves
    /// the guest's record to the new vmid, and restores the archive. Gives the vmid and
    /// whether the source guest may still be live.
    pub(super) async fn restore_backup(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        recovery: &Recovery,
        created: &mut Option<Vmid>,
    ) -> Result<(Vmid, bool), StepError> {
        let pve = &*self.pve;
        let other = |step: &str, reason: String| StepError::Other {
            op_id: op.op_id(),
            step: step.into(),
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
            }),
            async { Ok::<(), String>(()) },
        )
        .await?;
        let lost = Vmid::new(recovery.lost_vmid).map_err(|e| other("restore", e.to_string()))?;
        let free = match pve.ct_config(lost).await {
            Err(e) if e.is_missing() => true,
            Err(e) => return Err(other("restore", error_chain(&e))),
            Ok(_) => false,
        };
        let (vmid, may_be_live) = if free {
            (lost, false)
        } else {
            super::dr_identity::require_helper(op, self.guest_helper.as_ref())?;
            let offered = op.call(StepName::NextId, json!({}), pve.next_id()).await?;
            (self.reserve_from(op, offered.get())?, true)
        };
        let _release = Reservation {
            reserved: Arc::clone(&self.reserved),
            vmid: vmid.get(),
        };
        let taken = u64::try_from(source.taken_at.as_second()).ok();
        op.local(
            StepName::CheckBootstrap,
            json!({ "vmid": vmid.get(), "backup_ctime": taken }),
            async {
                if vmid != lost {
                    // The token names the old vmid: a fresh bootstrap follows once it runs.
                    self.journal
                        .revoke_token(guest_id.clone())
                        .await
                        .map(|_| ())
                        .map_err(|e| error_chain(&e))
                } else {
                    crate::guests::credentials::stale::revoke_if_minted_after(
                        &self.journal,
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
        self.journal
            .record_recovered(
                op.op_id(),
                guest_id.clone(),
                recovery.lost_vmid,
                vmid.get(),
                // DR restores a container's archive with `pct restore`.
                bosun_proto::desired::GuestKind::Lxc,
            )
            .await
            .map_err(|source| StepError::Journal {
                op_id: op.op_id(),
                step: "restore".into(),
                source,
            })?;
        let identity_plan = identity_for(Scenario::GuestLossDr {
            source_may_be_live: may_be_live,
        });
        // An archive of a retired key is read through the storage that holds that key.
        let mut request = RestoreRequest::new(vmid, source.restore_volume(), self.storage.clone());
        request.unique = identity_plan.fresh_mac;
        request.options.tags = vec![op_tag(op)];
        if identity_plan.reset_in_guest {
            // Never started by a host boot before its links are down and its identity reset.
            request.options.onboot = Some(false);
        }
        let detail = json!({ "vmid": vmid.get(), "archive": source.archive.to_string(), "storage": self.storage.to_string(), "tag": op_tag(op), "unique": request.unique, "onboot": request.options.onboot });
        match self.send_restore(op, &request, detail, created).await? {
            Sent::Restored(vmid) => Ok((vmid, may_be_live)),
            Sent::Taken(e) => Err(e),
        }
    }

    /// A DR restore ended with the guest back: its RPO (the backup's age) and RTO (lost →
    /// running again) are audited as `guest.restored` for the hub, and the lost note is
    /// cleared.
    pub(super) async fn recovered(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        vmid: Vmid,
        recovery: &Recovery,
    ) {
        let now = match self.journal.now().await {
            Ok(now) => now,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "could not read the clock to audit a restored guest");
                return;
            }
        };
        let rpo = now
            .duration_since(recovery.source.taken_at)
            .as_secs()
            .max(0);
        let rto = now.duration_since(recovery.lost_since).as_secs().max(0);
        let guest_id = spec.guest_id.to_string();
        let mut event = AuditEvent::new("guest.restored");
        event.op_id = Some(op.op_id());
        event.vmid = Some(vmid.get());
        event.guest_id = Some(guest_id.clone());
        event.detail = json!({
            "guest_id": guest_id,
            "vmid": vmid.get(),
            "lost_vmid": recovery.lost_vmid,
            "archive": recovery.source.archive.to_string(),
            "tier": recovery.source.storage.as_str(),
            "taken_at": recovery.source.taken_at,
            "rpo_seconds": rpo,
            "rto_seconds": rto,
            "trigger": recovery.trigger,
        });
        tracing::info!(%guest_id, vmid = vmid.get(), rpo_seconds = rpo, rto_seconds = rto, archive = %recovery.source.archive, "lost guest restored");
        if let Err(e) = self.journal.append_audit(event).await {
            tracing::warn!(error = %error_chain(&e), "could not audit a restored guest");
        }
        if let Err(e) = self.journal.clear_lost(guest_id).await {
            tracing::warn!(error = %error_chain(&e), "could not clear a restored guest's lost note");
        }
    }
}
