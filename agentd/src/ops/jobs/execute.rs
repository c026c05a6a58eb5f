//! What a signed job on one guest does once it is accepted ([`GuestAction`]): restore over
//! the guest, destroy it (decommission) or back it up — every action asked of the gate
//! first, every Proxmox call journaled as a step.

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestKind;
use bosun_pve::{Op, Pve, PveQemu, RestoreRequest, StorageId, Vmid, VolumeId, VzdumpRequest};
use serde_json::{Value, json};

use super::decommission::{Patience, refused_for_now};
use super::error::JobError;
use super::guest_accepted::GuestAccepted;
use super::kind::GuestAction;
use super::machine::{self, Held, Machine};
use super::power::{start_again, stop_if_running};
use crate::data::backup::interrupted::archive_size;
use crate::ops::jobs::restore_now::RestoreContext;
use crate::ops::journal::{BackupOutcome, JournalHandle};
use crate::ops::operation::OpJournal;
use crate::ops::operation::StepName;
use crate::trust::gate::{self, Action, Authority, GateRequest, JobAuthority, Provenance, Target};

/// An accepted job on one guest and what it runs with.
#[derive(Debug)]
pub(super) struct GuestWork<'a, P: Pve> {
    pub(super) pve: &'a P,
    pub(super) journal: &'a JournalHandle,
    pub(super) op: &'a OpJournal,
    pub(super) job: &'a GuestAccepted,
    pub(super) authority: &'a JobAuthority,
    /// Where a restore restores to, or a backup writes, unless the job names a storage.
    pub(super) storage: StorageId,
    pub(super) patience: Patience,
    pub(super) recovery: Option<&'a RestoreContext<P>>,
}

/// Carries out `action`, the accepted job `work.job`.
pub(super) async fn execute<P: Pve + PveQemu + 'static>(
    action: GuestAction,
    work: GuestWork<'_, P>,
) -> Result<Value, JobError> {
    let vmid = Vmid::new(work.job.vmid)?;
    match action {
        GuestAction::Restore => restore(work, vmid).await,
        GuestAction::Decommission => decommission(work, vmid).await,
        GuestAction::ForceBackup => force_backup(work, vmid).await,
    }
}

pub(super) async fn ask_gate(
    journal: &JournalHandle,
    action: Action,
    vmid: u32,
    authority: &JobAuthority,
) -> Result<(), JobError> {
    let provenance = journal
        .provenance(vmid)
        .await
        .map_err(JobError::journal("reading the guest's provenance"))?;
    let request = GateRequest {
        action,
        target: Target::Guest { vmid },
        authority: Authority::SignedJob(authority.clone()),
        provenance: Provenance::from_journal(provenance.as_ref()),
    };
    let decision = gate::decide(&request);
    let _ = journal.append_audit(decision.audit_event(&request)).await;
    if decision.is_allowed() {
        Ok(())
    } else {
        Err(JobError::GateDenied {
            action,
            reason: decision.reason(),
        })
    }
}

/// The identity the journal recorded for the job's guest at the job's vmid, and the kind
/// of guest (container or VM) that holds it, once the guest there is shown to carry it
/// (DESIGN §5): a destroy or overwrite acts only on the guest this agent created or
/// adopted. `Ok(None)`: the journal holds no record and no guest of either kind holds the
/// vmid (a decommission interrupted after it retired the record).
async fn verify_target<P: Pve + PveQemu>(
    pve: &P,
    journal: &JournalHandle,
    job: &GuestAccepted,
    vmid: Vmid,
) -> Result<Option<(String, Option<Machine>)>, JobError> {
    let provenance = journal
        .provenance(job.vmid)
        .await
        .map_err(JobError::journal("reading the guest's provenance"))?;
    let mismatch = |why: &'static str| {
        tracing::warn!(vmid = job.vmid, guest_id = %job.guest_id, why, "job target refused");
        JobError::TargetMismatch {
            vmid: job.vmid,
            guest_id: job.guest_id,
            why,
        }
    };
    let Some(provenance) = provenance else {
        return if machine::occupied(pve, vmid).await? {
            Err(mismatch("the journal holds no record of it"))
        } else {
            Ok(None)
        };
    };
    if provenance.guest_id() != Some(job.guest_id.to_string().as_str()) {
        return Err(mismatch("the journal records another guest there"));
    }
    let identity = provenance.identity().to_owned();
    match machine::held(pve, vmid, &identity).await? {
        Held::Stranger(_) => Err(mismatch(
            "it does not carry the identity written when the guest was created",
        )),
        // The journal recorded the guest's kind when it created it (decision 0123).
        Held::Ours(machine) if machine.kind() != provenance.kind() => Err(mismatch(
            "the guest there is not the kind the journal recorded for it",
        )),
        Held::Ours(machine) => Ok(Some((identity, Some(machine)))),
        Held::Nobody => Ok(Some((identity, None))),
    }
}

/// When the backup archive was written (its `ctime` in the storage listing), if known.
pub(super) async fn backup_ctime<P: Pve>(pve: &P, archive: &VolumeId) -> Option<u64> {
    let storage = StorageId::new(archive.storage().to_owned()).ok()?;
    let filter = bosun_pve::ContentFilter {
        content: Some(bosun_pve::ContentType::Backup),
        vmid: None,
    };
    match pve.list_content(&storage, filter).await {
        Ok(items) => items
            .into_iter()
            .find(|i| i.volid == archive.to_string())
            .and_then(|i| i.ctime),
        Err(e) => {
            tracing::warn!(archive = %archive, error = %error_chain(&e), "could not read the backup's time; its bootstrap counts as stale");
            None
        }
    }
}

/// Proves the archive `volid` the job's backup of its guest just wrote to `storage`.
async fn prove<P: Pve>(
    pve: &P,
    prover: &crate::data::backup::ArchiveProver,
    job: &GuestAccepted,
    storage: &StorageId,
    volid: &str,
) -> Result<crate::ops::journal::ArchiveProof, JobError> {
    let vmid = Vmid::new(job.vmid)?;
    let filter = bosun_pve::ContentFilter {
        content: Some(bosun_pve::ContentType::Backup),
        vmid: Some(vmid),
    };
    let listed =
        pve.list_content(storage, filter)
            .await
            .map_err(|source| JobError::StorageUnreadable {
                storage: storage.to_string(),
                source: Box::new(source),
            })?;
    let item = listed.iter().find(|i| i.volid == volid);
    prover
        .prove(&job.guest_id.to_string(), vmid, volid, item)
        .await
        .map_err(JobError::ProofRefused)
}

/// Journals how the job's backup ended: the source of the hub's "last backup".
async fn record_backup(
    journal: &JournalHandle,
    op: &OpJournal,
    storage: &StorageId,
    ok: bool,
    archive: Option<String>,
    size_bytes: Option<u64>,
    proof: Option<crate::ops::journal::ArchiveProof>,
) -> Result<(), JobError> {
    let outcome = BackupOutcome {
        storage: storage.as_str().to_owned(),
        ok,
        archive,
        size_bytes,
        proof,
        ..BackupOutcome::default()
    };
    journal
        .record_backup(op.op_id(), outcome)
        .await
        .map_err(JobError::journal("recording the backup's outcome"))
}

/// The storage the job names, else `default`.
pub(super) fn storage_of(job: &GuestAccepted, default: StorageId) -> Result<StorageId, JobError> {
    match &job.storage {
        Some(s) => Ok(StorageId::new(s.clone())?),
        None => Ok(default),
    }
}

/// `restore-now`: a lost guest is brought back by DR; an existing one (shown to be the
/// job's guest) is stopped, overwritten from one of its own proven backups, and started
/// again if it ran.
async fn restore<P: Pve + PveQemu + 'static>(
    work: GuestWork<'_, P>,
    vmid: Vmid,
) -> Result<Value, JobError> {
    let GuestWork {
        pve,
        journal,
        op,
        job,
        authority,
        storage,
        mut patience,
        recovery,
    } = work;
    let lost = super::restore_now::lost_note(journal, job.guest_id).await?;
    if let Some((lost_vmid, _)) = lost
        && recorded_kind(journal, lost_vmid).await? == Some(GuestKind::Qemu)
    {
        // A lost VM is brought back by the DR of VMs, not by a container's DR.
        return Err(JobError::NotForVm {
            vmid,
            kind: job.kind.as_str(),
        });
    }
    if let Some((lost_vmid, lost_since)) = lost {
        // Lost: nothing to overwrite; the guest is brought back by DR.
        let recovery = recovery.ok_or(JobError::NotSetUp {
            kind: job.kind.as_str(),
            missing: "restore of lost guests",
        })?;
        let source = recovery.source(pve, journal, job).await?;
        return recovery
            .recover(op, job, lost_vmid, lost_since, source)
            .await;
    }
    ask_gate(journal, GuestAction::Restore.asks(), job.vmid, authority).await?;
    match verify_target(pve, journal, job, vmid).await? {
        None | Some((_, None)) => {
            return Err(JobError::TargetMismatch {
                vmid: job.vmid,
                guest_id: job.guest_id,
                why: "no such guest",
            });
        }
        Some((_, Some(Machine::Vm))) => {
            let work = GuestWork {
                pve,
                journal,
                op,
                job,
                authority,
                storage,
                patience,
                recovery,
            };
            return super::restore_vm::restore_vm(work, vmid).await;
        }
        Some((_, Some(Machine::Container))) => {}
    }
    // Named or not, the archive must be one of the guest's own journaled backups and
    // pass its proof (`recovery::proof`).
    let recovery = recovery.ok_or(JobError::NotSetUp {
        kind: job.kind.as_str(),
        missing: "backup records to check the archive against",
    })?;
    let source = recovery.source(pve, journal, job).await?;
    let backup = source.archive.to_string();
    let taken_at = backup_ctime(pve, &source.archive).await;
    let was_running = stop_if_running(pve, op, GuestKind::Lxc, vmid, &mut patience).await?;
    let storage = storage_of(job, storage)?;
    // The restored filesystem will hold the backup's bootstrap (see `credentials::stale`);
    // checked before the restore, so a crash after it cannot leave a newer token behind.
    let guest_id = job.guest_id.to_string();
    op.local_typed(
        StepName::CheckBootstrap,
        json!({ "vmid": job.vmid, "backup_ctime": taken_at }),
        crate::guests::credentials::stale::revoke_if_minted_after(
            journal, &guest_id, job.vmid, taken_at, "restore",
        ),
    )
    .await?;
    // An archive of a retired key is read through the storage that holds that key.
    let mut request = RestoreRequest::new(vmid, source.restore_volume(), storage);
    // Guest-loss DR keeps identity: no fresh MACs (DESIGN §8).
    request.unique = false;
    // Refused while the guest is busy (a lock, the daemon's 500): nothing was
    // done, so the same request is sent again after a pause.
    loop {
        let restored = op
            .task(
                pve,
                Op::RestoreCtOverwrite,
                StepName::RestoreOverwrite,
                json!({ "vmid": job.vmid, "backup": backup }),
                pve.restore_ct_overwrite(&request),
            )
            .await;
        match restored {
            Ok(_) => break,
            Err(e) if e.pve().is_some_and(refused_for_now) && patience.pause().await => {
                tracing::info!(vmid = job.vmid, error = %error_chain(&e), "restore refused for now; trying again");
            }
            Err(e) => return Err(e.into()),
        }
    }
    if was_running {
        start_again(pve, op, GuestKind::Lxc, vmid, &mut patience).await?;
    }
    Ok(json!({ "vmid": job.vmid, "backup": backup }))
}

/// `decommission`: destroys the job's guest (shown to be it) and retires its record.
async fn decommission<P: Pve + PveQemu>(
    work: GuestWork<'_, P>,
    vmid: Vmid,
) -> Result<Value, JobError> {
    let GuestWork {
        pve,
        journal,
        op,
        job,
        authority,
        patience,
        ..
    } = work;
    ask_gate(
        journal,
        GuestAction::Decommission.asks(),
        job.vmid,
        authority,
    )
    .await?;
    match verify_target(pve, journal, job, vmid).await? {
        Some((identity, _)) => {
            super::decommission::decommission(pve, journal, op, vmid, &identity, patience).await
        }
        None => Ok(json!({ "vmid": job.vmid, "already_gone": true })),
    }
}

/// `force-backup`: backs the guest up now (asking again while the guest is busy), proves
/// the archive and journals the outcome.
async fn force_backup<P: Pve + PveQemu + 'static>(
    work: GuestWork<'_, P>,
    vmid: Vmid,
) -> Result<Value, JobError> {
    let GuestWork {
        pve,
        journal,
        op,
        job,
        authority,
        storage,
        mut patience,
        recovery,
    } = work;
    ask_gate(
        journal,
        GuestAction::ForceBackup.asks(),
        job.vmid,
        authority,
    )
    .await?;
    let storage = storage_of(job, storage)?;
    // The guest's kind is the one the journal recorded when the agent created it (decision
    // 0123); a vmid the journal holds no record of for this guest is backed up as before, as
    // a container.
    let kind = match journal
        .provenance(job.vmid)
        .await
        .map_err(JobError::journal("reading the guest's provenance"))?
    {
        Some(p) if p.guest_id() == Some(job.guest_id.to_string().as_str()) => p.kind(),
        _ => GuestKind::Lxc,
    };
    if let Some(recovery) = recovery {
        recovery
            .prover()
            .mark_guest_as(&job.guest_id.to_string(), vmid, kind)
            .await;
    }
    let mut request = VzdumpRequest::new(vmid, storage.clone());
    request.notes_template = Some(crate::data::backup::notes::backup_notes(
        &job.guest_id.to_string(),
    ));
    let (seq, backed_up) = loop {
        let seq = op
            .intent(
                StepName::Backup,
                json!({ "vmid": job.vmid, "storage": storage.as_str() }),
            )
            .await?;
        match pve.backup_ct(&request).await {
            // Refused, or a task that failed on the guest's lock: nothing was
            // written, so the same backup is asked again within the job's window.
            Err(e) if (refused_for_now(&e) || met_a_lock(&e)) && patience.pause().await => {
                let text = error_chain(&e);
                tracing::info!(vmid = job.vmid, error = %text, "backup refused for now; trying again");
                op.finished(
                    StepName::Backup,
                    seq,
                    crate::ops::journal::StepOutcome::Failed { error: text },
                )
                .await?;
            }
            other => break (seq, other),
        }
    };
    let outcome = match backed_up {
        Ok(outcome) => outcome,
        Err(e) => {
            let _ = op
                .finished(
                    StepName::Backup,
                    seq,
                    crate::ops::journal::StepOutcome::Failed {
                        error: error_chain(&e),
                    },
                )
                .await;
            if let Err(journaled) =
                record_backup(journal, op, &storage, false, None, None, None).await
            {
                tracing::error!(op_id = %op.op_id(), error = %error_chain(&journaled), "could not journal the failed backup's outcome");
            }
            return Err(e.into());
        }
    };
    op.finished(
        StepName::Backup,
        seq,
        crate::ops::journal::StepOutcome::Ok {
            warnings: outcome.task.warnings,
        },
    )
    .await?;
    let size_bytes = archive_size(pve, storage.as_str(), &outcome.volid).await;
    // vzdump names the archive after the kind of guest it read: it must be the guest's.
    let archived_as = VolumeId::new(outcome.volid.clone())
        .map_err(crate::data::backup::ProofError::Volume)
        .and_then(|volume| {
            crate::data::backup::content::check_kind_by_name(&volume, kind).map_err(Into::into)
        });
    if let Err(why) = archived_as {
        record_backup(journal, op, &storage, false, None, None, None).await?;
        return Err(JobError::Unproven {
            volid: outcome.volid,
            source: Box::new(JobError::ProofRefused(why)),
        });
    }
    // What proves the archive before a restore takes it (`recovery::proof`).
    let proof = match recovery {
        Some(recovery) => {
            match prove(pve, recovery.prover(), job, &storage, &outcome.volid).await {
                Ok(proof) => Some(proof),
                Err(why) => {
                    record_backup(journal, op, &storage, false, None, None, None).await?;
                    return Err(JobError::Unproven {
                        volid: outcome.volid,
                        source: Box::new(why),
                    });
                }
            }
        }
        None => None,
    };
    record_backup(
        journal,
        op,
        &storage,
        true,
        Some(outcome.volid.clone()),
        size_bytes,
        proof,
    )
    .await?;
    let at = journal
        .now()
        .await
        .map_err(JobError::journal("reading the clock"))?;
    Ok(
        json!({ "vmid": job.vmid, "kind": kind.as_str(), "volid": outcome.volid, "size_bytes": size_bytes, "at": at.to_string() }),
    )
}

/// The kind the journal recorded for the guest at `vmid`, if it holds a record.
async fn recorded_kind(journal: &JournalHandle, vmid: u32) -> Result<Option<GuestKind>, JobError> {
    Ok(journal
        .provenance(vmid)
        .await
        .map_err(JobError::journal("reading the guest's provenance"))?
        .map(|p| p.kind()))
}

/// Whether a failed backup task failed on the guest's lock (its exit status, or vzdump's
/// `ERROR: Backup of VM … failed - CT is locked (…)` in the log): nothing was written.
fn met_a_lock(error: &bosun_pve::PveError) -> bool {
    error.is_lock_contention()
        || matches!(error, bosun_pve::PveError::TaskFailed { log_tail, .. }
            if log_tail.iter().any(|l| bosun_pve::parse_lock_message(l).is_some()))
}
