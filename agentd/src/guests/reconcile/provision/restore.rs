//! The `restore` step of provisioning: a fresh vmid (reserved against parallel provisions,
//! its provenance recorded before the call), the golden archive restored onto it, and a
//! restore whose answer was lost looked up before anything is decided.

use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestSpec;
use bosun_pve::{Op, Pve, RestoreRequest, Vmid, VolumeId};
use serde_json::json;

use super::{Provisioner, Reservation, UNKNOWN_RESTORE_WAIT, VMID_ATTEMPTS, op_tag};
use crate::ops::operation::StepName;
use crate::ops::operation::{OpJournal, StepError};

/// How a sent restore ended, when it did not fail outright.
pub(super) enum Sent {
    /// The guest was restored at this vmid.
    Restored(Vmid),
    /// Someone else holds the vmid (the step recorded failed, the vmid forgotten).
    Taken(StepError),
}

impl<P: Pve + 'static> Provisioner<P> {
    /// Reserves the first vmid at or above `offered` no parallel provision holds.
    #[expect(
        clippy::result_large_err,
        reason = "StepError is the one error of every journaled step"
    )]
    pub(super) fn reserve_from(&self, op: &OpJournal, offered: u32) -> Result<Vmid, StepError> {
        let mut reserved = self.reserved.lock();
        let mut candidate = offered;
        while reserved.contains(&candidate) {
            candidate = candidate.saturating_add(1);
        }
        reserved.insert(candidate);
        Vmid::new(candidate).map_err(|e| StepError::Other {
            op_id: op.op_id(),
            step: "restore".into(),
            reason: format!("no usable vmid: {e}"),
        })
    }

    /// Sends `request` as the `restore` step (its vmid recorded in `created` first) and
    /// follows its task. A restore whose answer was lost is looked up before anything is
    /// decided; a vmid someone else took meanwhile is forgotten and given back as
    /// [`Sent::Taken`], so the caller may try another.
    pub(super) async fn send_restore(
        &self,
        op: &OpJournal,
        request: &RestoreRequest,
        detail: serde_json::Value,
        created: &mut Option<Vmid>,
    ) -> Result<Sent, StepError> {
        let pve = &*self.pve;
        let vmid = request.vmid;
        let seq = op.intent(StepName::Restore, detail).await?;
        *created = Some(vmid);
        // Proxmox stamps its tasks with the host's wall clock, not the agent's clock seam.
        let asked_at = jiff::Timestamp::now();
        let e = match pve.restore_ct(request).await {
            Ok(upid) => {
                op.sent(StepName::Restore, seq, &upid).await?;
                op.wait(pve, Op::RestoreCt, StepName::Restore, seq, &upid)
                    .await?;
                return Ok(Sent::Restored(vmid));
            }
            Err(e) if e.is_outcome_unknown() => {
                return self
                    .after_unknown_restore(op, seq, (vmid, asked_at), created, e)
                    .await
                    .map(Sent::Restored);
            }
            Err(e) => e,
        };
        let taken = e.is_already_exists();
        if taken {
            // Someone else holds the id: it is not ours, forget it.
            *created = None;
            let _ = op.journal().forget_guest(op.op_id(), vmid.get()).await;
        }
        op.finished(
            StepName::Restore,
            seq,
            crate::ops::journal::StepOutcome::Failed {
                error: error_chain(&e),
            },
        )
        .await?;
        let failed = StepError::Pve {
            op_id: op.op_id(),
            step: "restore".into(),
            source: e,
        };
        if taken {
            Ok(Sent::Taken(failed))
        } else {
            Err(failed)
        }
    }

    /// A restore (asked for at `asked_at`) whose answer was lost: the operation stays open
    /// while the request may still land ([`crate::guests::reconcile::lookup::await_landing`]: the guest, or the
    /// node's task list, proves it ran; or the landing window passes), then continues with
    /// the guest if it carries this operation's tag, forgets the vmid if another guest holds
    /// it, and fails the step otherwise (the rollback then finds nothing, or waits out a
    /// restore still running). A restore that did not land in its window is watched for
    /// afterwards ([`crate::guests::reconcile::late_landing`]).
    async fn after_unknown_restore(
        &self,
        op: &OpJournal,
        seq: u32,
        (vmid, asked_at): (Vmid, jiff::Timestamp),
        created: &mut Option<Vmid>,
        error: bosun_pve::PveError,
    ) -> Result<Vmid, StepError> {
        let pve = &*self.pve;
        let window = crate::guests::reconcile::lookup::landing_window(pve.retry_policy());
        let seen = crate::guests::reconcile::lookup::await_landing(
            pve,
            vmid,
            &op_tag(op),
            asked_at,
            window,
            UNKNOWN_RESTORE_WAIT,
        )
        .await;
        tracing::info!(vmid = vmid.get(), op_id = %op.op_id(), ?seen, "looked at a restore whose answer was lost");
        if matches!(
            seen,
            Ok(crate::guests::reconcile::lookup::RestoreSeen::Unlanded)
        ) {
            crate::guests::reconcile::late_landing::watch(op, vmid, asked_at)
                .await
                .map_err(|source| StepError::Journal {
                    op_id: op.op_id(),
                    step: "restore".into(),
                    source,
                })?;
        }
        if matches!(
            seen,
            Ok(crate::guests::reconcile::lookup::RestoreSeen::Ours)
        ) {
            op.finished(
                StepName::Restore,
                seq,
                crate::ops::journal::StepOutcome::Ok { warnings: 0 },
            )
            .await?;
            return Ok(vmid);
        }
        if matches!(
            seen,
            Ok(crate::guests::reconcile::lookup::RestoreSeen::Foreign)
        ) {
            *created = None;
            let _ = op.journal().forget_guest(op.op_id(), vmid.get()).await;
        }
        op.finished(
            StepName::Restore,
            seq,
            crate::ops::journal::StepOutcome::Failed {
                error: error_chain(&error),
            },
        )
        .await?;
        Err(StepError::Pve {
            op_id: op.op_id(),
            step: "restore".into(),
            source: error,
        })
    }

    /// The `restore` step: picks a vmid, records provenance *before* the call,
    /// restores the golden archive, and takes another vmid if the one offered
    /// was claimed in the meantime.
    pub(super) async fn restore(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        created: &mut Option<Vmid>,
    ) -> Result<Vmid, StepError> {
        let pve = &*self.pve;
        let other = |reason: String| StepError::Other {
            op_id: op.op_id(),
            step: "restore".into(),
            reason,
        };
        // Only an archive of known provenance seeds a guest: a hub cannot point a new
        // guest at another customer's backup. A golden version maps to this host's build.
        let detail = json!({
            "volid": spec.golden.volid,
            "sha256": spec.golden.sha256,
            "version": spec.golden.version,
        });
        let record = op
            .local(StepName::CheckGolden, detail, async {
                self.golden
                    .check(&spec.golden, spec.kind)
                    .await
                    .map_err(|e| error_chain(&e))
            })
            .await?;
        let archive =
            VolumeId::new(record.volid.clone()).map_err(|e| other(format!("golden volid: {e}")))?;
        let mut attempt = 0;
        // Ids at or below this one are held by an older operation's provenance row (its
        // guest may exist: its outcome was unknown and its rollback has not finished), so
        // the next attempt looks above it instead of being offered the same id again.
        let mut floor = 0;
        loop {
            attempt += 1;
            let vmid = match spec.vmid {
                Some(v) => Vmid::new(v).map_err(|e| other(format!("pinned vmid: {e}")))?,
                None => {
                    let offered = op.call(StepName::NextId, json!({}), pve.next_id()).await?;
                    self.reserve_from(op, offered.get().max(floor))?
                }
            };
            let _release = Reservation {
                reserved: Arc::clone(&self.reserved),
                vmid: vmid.get(),
            };
            let mut request = RestoreRequest::new(vmid, archive.clone(), self.storage.clone());
            request.options.tags = vec![op_tag(op)];
            // Provenance first: a guest that appears without a row could never
            // be cleaned up without an operator signature.
            if let Err(source) = op
                .journal()
                .record_created(
                    op.op_id(),
                    vmid.get(),
                    Some(spec.guest_id.to_string()),
                    bosun_proto::desired::GuestKind::Lxc,
                )
                .await
            {
                if matches!(
                    source,
                    crate::ops::journal::JournalError::VmidAlreadyRecorded { .. }
                ) && spec.vmid.is_none()
                    && attempt < VMID_ATTEMPTS
                {
                    floor = vmid.get().saturating_add(1);
                    continue;
                }
                return Err(StepError::Journal {
                    op_id: op.op_id(),
                    step: "restore".into(),
                    source,
                });
            }
            self.provisioning(spec, vmid.get());
            let detail = json!({ "vmid": vmid.get(), "archive": archive.to_string(), "storage": self.storage.to_string(), "tag": op_tag(op) });
            match self.send_restore(op, &request, detail, created).await? {
                Sent::Restored(vmid) => return Ok(vmid),
                // Another id is offered next time round, unless the operator pinned this one.
                Sent::Taken(_) if spec.vmid.is_none() && attempt < VMID_ATTEMPTS => {}
                Sent::Taken(e) => return Err(e),
            }
        }
    }
}
