//! What a signed job does once it is accepted: restore over a guest, destroy
//! it (decommission) or back it up — every destroy or overwrite asked of the
//! gate first, every Proxmox call journaled as a step.

use bosun_proto::error_chain;
use jiff::Timestamp;
use serde_json::{Value, json};

use super::decommission::{Patience, is_retryable, refused_for_now};
use super::runner::Accepted;
use crate::backup::interrupted::archive_size;
use crate::gate::{self, Action, Authority, GateRequest, JobAuthority, Provenance, Target};
use crate::journal::{BackupOutcome, JournalHandle};
use crate::operation::{OpJournal, StepError};
use crate::pve::{GuestStatus, Op, Pve, RestoreRequest, StorageId, Vmid, VolumeId, VzdumpRequest};

async fn ask_gate(
    journal: &JournalHandle,
    action: Action,
    vmid: u32,
    authority: &JobAuthority,
) -> Result<(), String> {
    let provenance = journal
        .provenance(vmid)
        .await
        .map_err(|e| error_chain(&e))?;
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
        Err(format!("gate denied {action:?}: {}", decision.reason()))
    }
}

/// The identity the journal recorded for the job's guest at the job's vmid, once the
/// guest there is shown to carry it (DESIGN §5): a destroy or overwrite acts only on
/// the guest this agent created. `Ok(None)`: the journal holds no record and no guest
/// holds the vmid (a decommission interrupted after it retired the record).
async fn verify_target<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    job: &Accepted,
    vmid: Vmid,
) -> Result<Option<String>, String> {
    let provenance = journal
        .provenance(job.vmid)
        .await
        .map_err(|e| error_chain(&e))?;
    let mismatch = |why: &str| {
        tracing::warn!(vmid = job.vmid, guest_id = %job.guest_id, why, "job target refused");
        format!(
            "target_mismatch: CT {} is not guest {} ({why}); not touched",
            job.vmid, job.guest_id
        )
    };
    let Some(provenance) = provenance else {
        return match pve.ct_config(vmid).await {
            Err(e) if crate::reconcile::observe::is_missing(&e) => Ok(None),
            Err(e) => Err(error_chain(&e)),
            Ok(_) => Err(mismatch("the journal holds no record of it")),
        };
    };
    if provenance.guest_id() != Some(job.guest_id.to_string().as_str()) {
        return Err(mismatch("the journal records another guest there"));
    }
    let identity = provenance.identity().to_owned();
    match crate::reconcile::lookup::holder(pve, vmid, &identity).await {
        Ok(crate::reconcile::lookup::Holder::Stranger) => Err(mismatch(
            "it does not carry the identity written when the guest was created",
        )),
        Ok(_) => Ok(Some(identity)),
        Err(e) => Err(error_chain(&e)),
    }
}

/// When the backup archive was written (its `ctime` in the storage listing), if known.
async fn backup_ctime<P: Pve>(pve: &P, archive: &VolumeId) -> Option<u64> {
    let storage = StorageId::new(archive.storage().to_owned()).ok()?;
    let filter = crate::pve::ContentFilter {
        content: Some(crate::pve::ContentType::Backup),
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
    prover: &crate::recovery::ArchiveProver,
    job: &Accepted,
    storage: &StorageId,
    volid: &str,
) -> Result<crate::recovery::ArchiveProof, String> {
    let vmid = Vmid::new(job.vmid).map_err(|e| e.to_string())?;
    let filter = crate::pve::ContentFilter {
        content: Some(crate::pve::ContentType::Backup),
        vmid: Some(vmid),
    };
    let listed = pve
        .list_content(storage, filter)
        .await
        .map_err(|e| format!("{storage} cannot be read: {}", error_chain(&e)))?;
    let item = listed.iter().find(|i| i.volid == volid);
    prover
        .prove(&job.guest_id.to_string(), vmid, volid, item)
        .await
}

/// Journals how the job's backup ended: the source of the hub's "last backup".
async fn record_backup(
    journal: &JournalHandle,
    op: &OpJournal,
    storage: &StorageId,
    ok: bool,
    archive: Option<String>,
    size_bytes: Option<u64>,
    proof: Option<crate::recovery::ArchiveProof>,
) -> Result<(), String> {
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
        .map_err(|e| error_chain(&e))
}

fn step_text(e: StepError) -> String {
    error_chain(&e)
}

#[expect(
    clippy::too_many_arguments,
    reason = "the job, its journal and what the runner decided for it, passed as they are"
)]
#[expect(
    clippy::too_many_lines,
    reason = "one arm per job kind, each a short sequence of journaled steps"
)]
pub(super) async fn execute<P: Pve + 'static>(
    pve: &P,
    journal: &JournalHandle,
    op: &OpJournal,
    job: &Accepted,
    authority: JobAuthority,
    restore_storage: StorageId,
    backup_storage: StorageId,
    patience: Patience,
    recovery: Option<&super::recover::RestoreContext<P>>,
) -> Result<Value, String> {
    let vmid = Vmid::new(job.vmid).map_err(|e| e.to_string())?;
    match job.kind.as_str() {
        "restore-now" => {
            if let Some((lost_vmid, lost_since)) =
                super::recover::lost_note(journal, job.guest_id).await?
            {
                // Lost: nothing to overwrite; the guest is brought back by DR.
                let recovery = recovery.ok_or("restoring a lost guest is not set up here")?;
                let source = recovery.source(pve, journal, job).await?;
                return recovery
                    .recover(op, job, lost_vmid, lost_since, source)
                    .await;
            }
            ask_gate(journal, Action::RestoreOverGuest, job.vmid, &authority).await?;
            if verify_target(pve, journal, job, vmid).await?.is_none() {
                return Err(format!(
                    "target_mismatch: CT {} is not guest {} (no such guest); not touched",
                    job.vmid, job.guest_id
                ));
            }
            // Named or not, the archive must be one of the guest's own journaled backups and
            // pass its proof (`recovery::proof`).
            let source = match recovery {
                Some(recovery) => recovery.source(pve, journal, job).await?,
                None => {
                    return Err("restore-now needs the agent's backup records to check the \
                                archive against, and they are not set up here"
                        .into());
                }
            };
            let backup = source.archive.to_string();
            let taken_at = backup_ctime(pve, &source.archive).await;
            let mut patience = patience;
            let was_running = stop_if_running(pve, op, vmid, &mut patience).await?;
            let storage = match &job.storage {
                Some(s) => StorageId::new(s.clone()).map_err(|e| e.to_string())?,
                None => restore_storage,
            };
            // The restored filesystem will hold the backup's bootstrap (see `credentials::stale`);
            // checked before the restore, so a crash after it cannot leave a newer token behind.
            let guest_id = job.guest_id.to_string();
            op.local(
                "check_bootstrap",
                json!({ "vmid": job.vmid, "backup_ctime": taken_at }),
                async {
                    crate::credentials::stale::revoke_if_minted_after(
                        journal, &guest_id, job.vmid, taken_at, "restore",
                    )
                    .await
                    .map_err(|e| error_chain(&e))
                },
            )
            .await
            .map_err(step_text)?;
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
                        "restore_overwrite",
                        json!({ "vmid": job.vmid, "backup": backup }),
                        pve.restore_ct_overwrite(&request),
                    )
                    .await;
                match restored {
                    Ok(_) => break,
                    Err(e) if e.pve().is_some_and(refused_for_now) && patience.pause().await => {
                        tracing::info!(vmid = job.vmid, error = %error_chain(&e), "restore refused for now; trying again");
                    }
                    Err(e) => return Err(step_text(e)),
                }
            }
            if was_running {
                start_again(pve, op, job.vmid, vmid, &mut patience).await?;
            }
            Ok(json!({ "vmid": job.vmid, "backup": backup }))
        }
        "decommission" => {
            ask_gate(journal, Action::DecommissionGuest, job.vmid, &authority).await?;
            match verify_target(pve, journal, job, vmid).await? {
                Some(identity) => {
                    super::decommission::decommission(pve, journal, op, vmid, &identity, patience)
                        .await
                }
                None => Ok(json!({ "vmid": job.vmid, "already_gone": true })),
            }
        }
        _ => {
            ask_gate(journal, Action::Backup, job.vmid, &authority).await?;
            let storage = match &job.storage {
                Some(s) => StorageId::new(s.clone()).map_err(|e| e.to_string())?,
                None => backup_storage,
            };
            let mut request = VzdumpRequest::new(vmid, storage.clone());
            request.notes_template = Some(crate::recovery::host_loss::backup_notes(
                &job.guest_id.to_string(),
            ));
            let mut patience = patience;
            let (seq, backed_up) = loop {
                let seq = op
                    .intent(
                        "backup",
                        json!({ "vmid": job.vmid, "storage": storage.as_str() }),
                    )
                    .await
                    .map_err(step_text)?;
                match pve.backup_ct(&request).await {
                    // Refused, or a task that failed on the guest's lock: nothing was
                    // written, so the same backup is asked again within the job's window.
                    Err(e) if (refused_for_now(&e) || met_a_lock(&e)) && patience.pause().await => {
                        let text = error_chain(&e);
                        tracing::info!(vmid = job.vmid, error = %text, "backup refused for now; trying again");
                        op.finished(
                            "backup",
                            seq,
                            crate::journal::StepOutcome::Failed { error: text },
                        )
                        .await
                        .map_err(step_text)?;
                    }
                    other => break (seq, other),
                }
            };
            match backed_up {
                Ok(outcome) => {
                    op.finished(
                        "backup",
                        seq,
                        crate::journal::StepOutcome::Ok {
                            warnings: outcome.task.warnings,
                        },
                    )
                    .await
                    .map_err(step_text)?;
                    let size_bytes = archive_size(pve, storage.as_str(), &outcome.volid).await;
                    // What proves the archive before a restore takes it (`recovery::proof`).
                    let proof = match recovery {
                        Some(recovery) => {
                            match prove(pve, recovery.prover(), job, &storage, &outcome.volid).await
                            {
                                Ok(proof) => Some(proof),
                                Err(why) => {
                                    let text = format!(
                                        "the archive {} was written but cannot be proven, so it \
                                         would never be restored: {why}",
                                        outcome.volid
                                    );
                                    record_backup(journal, op, &storage, false, None, None, None)
                                        .await?;
                                    return Err(text);
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
                    Ok(
                        json!({ "vmid": job.vmid, "volid": outcome.volid, "size_bytes": size_bytes, "at": Timestamp::now().to_string() }),
                    )
                }
                Err(e) => {
                    let text = error_chain(&e);
                    let _ = op
                        .finished(
                            "backup",
                            seq,
                            crate::journal::StepOutcome::Failed {
                                error: text.clone(),
                            },
                        )
                        .await;
                    if let Err(journaled) =
                        record_backup(journal, op, &storage, false, None, None, None).await
                    {
                        tracing::error!(op_id = %op.op_id(), error = %journaled, "could not journal the failed backup's outcome");
                    }
                    Err(text)
                }
            }
        }
    }
}

/// Starts the restored guest again, asking again while the start is refused for now.
async fn start_again<P: Pve>(
    pve: &P,
    op: &OpJournal,
    raw_vmid: u32,
    vmid: Vmid,
    patience: &mut Patience,
) -> Result<(), String> {
    loop {
        let started = op
            .task(
                pve,
                Op::StartCt,
                "start",
                json!({ "vmid": raw_vmid }),
                pve.start_ct(vmid),
            )
            .await;
        match started {
            Ok(_) => return Ok(()),
            Err(e) if e.pve().is_some_and(refused_for_now) && patience.pause().await => {
                tracing::info!(vmid = raw_vmid, error = %error_chain(&e), "start refused for now; trying again");
            }
            Err(e) => return Err(step_text(e)),
        }
    }
}

/// Whether a failed backup task failed on the guest's lock (its exit status, or vzdump's
/// `ERROR: Backup of VM … failed - CT is locked (…)` in the log): nothing was written.
fn met_a_lock(error: &crate::pve::PveError) -> bool {
    error.is_lock_contention()
        || matches!(error, crate::pve::PveError::TaskFailed { log_tail, .. }
            if log_tail.iter().any(|l| crate::pve::parse_lock_message(l).is_some()))
}

async fn stop_if_running<P: Pve>(
    pve: &P,
    op: &OpJournal,
    vmid: Vmid,
    patience: &mut Patience,
) -> Result<bool, String> {
    let status = loop {
        match pve.ct_status(vmid).await {
            Ok(status) => break status,
            Err(e) if is_retryable(&e) && patience.pause().await => {
                tracing::info!(%vmid, error = %error_chain(&e), "status read failed; trying again");
            }
            Err(e) => return Err(error_chain(&e)),
        }
    };
    if status.status != GuestStatus::Running {
        return Ok(false);
    }
    op.task(
        pve,
        Op::StopCt,
        "stop",
        json!({ "vmid": vmid.get() }),
        pve.stop_ct(vmid),
    )
    .await
    .map_err(step_text)?;
    Ok(true)
}
