//! `storage-wipe`: delete from a manifest target's storage the archives this agent's backups
//! wrote there, and nothing else. Only a signed job does this (DESIGN §5, the gate's
//! `WipeStorage` row); the operator wipes a target before detaching it, while Proxmox still
//! has its storage.
//!
//! What a wipe may touch is bounded three ways:
//!
//! - the storage resolves from the agent's own naming, by the rules of a detach
//!   (`detach::resolve`): a `bosun-…` storage of a target desired state no longer
//!   attaches and no backup tier writes to, present in Proxmox as the target's type;
//! - the archives are those the journal recorded a backup writing to that storage (at most
//!   [`MAX_ARCHIVES`], each a volume id on that very storage), fixed when the job is
//!   accepted and kept in its `accepted` step;
//! - each is deleted only while the storage's listing shows it: anything else on the
//!   target (another host's archives, an operator's files) is left and counted as `left`.
//!
//! Steps (`storage_wipe_job.<step>.<phase>`): `accepted`, then one `delete_archive` per
//! archive (task `imgdel`, id `<vmid>@<storage>`). Before each delete, and after one whose
//! answer was lost, the wipe looks at the storage's listing and at the node's running
//! `imgdel` tasks on that storage: an archive already gone counts as deleted, a delete still
//! running is waited for, and only an archive still listed with no delete running is asked
//! for. A pass resumed after a crash does the same, so no archive is asked for twice.

use std::collections::BTreeSet;

use bosun_errchain::error_chain;
use bosun_pve::{ContentFilter, ContentType, Op, Pve, StorageId, Upid, VolumeId};
use serde_json::{Value, json};

use super::decommission::{Patience, is_retryable};
use super::detach::{DetachAccepted, DetachTarget, ask_gate};
use super::detach_refusal::DetachRefusal;
use super::error::JobError;
use crate::data::storage::naming::kind_name;
use crate::ops::journal::{AuditEvent, JournalHandle, RecordedArchive, StepOutcome};
use crate::ops::operation::{OpJournal, StepError, StepName};
use crate::trust::gate::{Action, JobAuthority};

/// Most archives one wipe deletes (a storage holding more is refused: prune it first).
pub const MAX_ARCHIVES: u32 = 4096;

/// What a wipe job asks, once accepted; stored in its `accepted` step.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct WipeAccepted {
    /// The storage, as a detach's `accepted` step holds it (its fields stand beside
    /// `archives` in the step's JSON).
    #[serde(flatten)]
    pub(super) storage: DetachAccepted,
    /// The archives the journal recorded on the storage when the job was accepted.
    pub(super) archives: Vec<RecordedArchive>,
}

/// The archives the journal recorded backups writing to the target's storage: only volume
/// ids on that storage (a row naming another is left out and logged).
pub(super) async fn recorded(
    journal: &JournalHandle,
    target: &DetachTarget,
) -> Result<Vec<RecordedArchive>, DetachRefusal> {
    let storage = target.storage.as_str();
    let mut archives = journal
        .archives_on(storage.to_owned(), MAX_ARCHIVES + 1)
        .await
        .map_err(|source| DetachRefusal::JournalUnreadable {
            storage: storage.to_owned(),
            source,
        })?;
    if archives.len() > MAX_ARCHIVES as usize {
        return Err(DetachRefusal::TooManyArchives {
            storage: storage.to_owned(),
            limit: MAX_ARCHIVES,
        });
    }
    archives.retain(|archive| {
        let on_storage = VolumeId::new(archive.volid.clone()).is_ok_and(|v| v.storage() == storage);
        if !on_storage {
            tracing::warn!(storage, volid = %archive.volid, "a recorded archive is not a volume of its storage; the wipe leaves it");
        }
        on_storage
    });
    Ok(archives)
}

/// The backup volumes the storage lists now, retrying what may clear up on its own.
async fn listed<P: Pve>(
    pve: &P,
    storage: &StorageId,
    patience: &mut Patience,
) -> Result<BTreeSet<String>, JobError> {
    let filter = || ContentFilter {
        content: Some(ContentType::Backup),
        vmid: None,
    };
    loop {
        match pve.list_content(storage, filter()).await {
            Ok(items) => return Ok(items.into_iter().map(|i| i.volid).collect()),
            Err(e) if is_retryable(&e) && patience.pause().await => {
                tracing::info!(storage = %storage, error = %error_chain(&e), "listing the storage failed; trying again");
            }
            Err(source) => {
                return Err(JobError::StorageUnreadable {
                    storage: storage.as_str().to_owned(),
                    source: Box::new(source),
                });
            }
        }
    }
}

/// A delete of `archive` Proxmox is running now (an `imgdel` task on its guest and storage),
/// if any; a listing that fails counts as none (the next pass looks again).
async fn running_delete<P: Pve>(
    pve: &P,
    storage: &StorageId,
    archive: &RecordedArchive,
) -> Option<Upid> {
    let owner = match archive.vmid {
        Some(vmid) => format!("{vmid}@{storage}"),
        None => format!("@{storage}"),
    };
    match pve.active_tasks().await {
        Ok(tasks) => tasks
            .into_iter()
            .find(|t| {
                t.task_type == "imgdel" && t.id.as_deref().is_some_and(|id| id.ends_with(&owner))
            })
            .map(|t| t.upid),
        Err(e) => {
            tracing::warn!(storage = %storage, error = %error_chain(&e), "listing the node's running tasks failed");
            None
        }
    }
}

/// Deletes one archive as a journaled step: intent, the call, its `imgdel` task (looked for
/// among the node's running tasks when the answer was lost), its end.
async fn delete_one<P: Pve>(
    pve: &P,
    op: &OpJournal,
    storage: &StorageId,
    archive: &RecordedArchive,
) -> Result<(), StepError> {
    let step = StepName::DeleteArchive;
    let failed = |source| StepError::Pve {
        op_id: op.op_id(),
        step: step.as_str().to_owned(),
        source,
    };
    let volume = VolumeId::new(archive.volid.clone()).map_err(|e| StepError::Failed {
        op_id: op.op_id(),
        step: step.as_str().to_owned(),
        source: Box::new(e),
    })?;
    let detail =
        json!({ "volid": archive.volid, "vmid": archive.vmid, "storage": storage.as_str() });
    let seq = op.intent(step, detail).await?;
    let upid = match pve.delete_volume(&volume).await {
        Ok(upid) => upid,
        Err(source) => {
            let found = if source.is_outcome_unknown() {
                running_delete(pve, storage, archive).await
            } else {
                None
            };
            let Some(upid) = found else {
                let outcome = StepOutcome::Failed {
                    error: error_chain(&source),
                };
                op.finished(step, seq, outcome).await?;
                return Err(failed(source));
            };
            tracing::info!(volid = %archive.volid, upid = %upid, "the delete's answer was lost but its task exists; following it");
            Some(upid)
        }
    };
    let Some(upid) = upid else {
        return op
            .finished(step, seq, StepOutcome::Ok { warnings: 0 })
            .await;
    };
    op.sent(step, seq, &upid).await?;
    match pve.wait_task(Op::DeleteVolume, &upid).await {
        Ok(done) => {
            let outcome = StepOutcome::Ok {
                warnings: done.warnings,
            };
            op.finished(step, seq, outcome).await
        }
        Err(source) => {
            let outcome = StepOutcome::Failed {
                error: error_chain(&source),
            };
            op.finished(step, seq, outcome).await?;
            Err(failed(source))
        }
    }
}

/// What a wipe did.
#[derive(Debug, Default)]
struct Tally {
    deleted: u32,
    already_gone: u32,
}

/// Deletes `archive` while the storage lists it: a delete that failed in a way that may
/// have reached Proxmox is judged by the next listing.
async fn wipe_one<P: Pve>(
    pve: &P,
    op: &OpJournal,
    storage: &StorageId,
    archive: &RecordedArchive,
    listing: &mut BTreeSet<String>,
    patience: &mut Patience,
    tally: &mut Tally,
) -> Result<(), JobError> {
    if !listing.contains(&archive.volid) {
        tally.already_gone += 1;
        return Ok(());
    }
    loop {
        // A delete an earlier pass sent (its answer lost, or the agent killed) may still run.
        if let Some(upid) = running_delete(pve, storage, archive).await {
            tracing::info!(volid = %archive.volid, upid = %upid, "a delete on the archive's storage is running; waiting for it");
            if let Err(e) = pve.wait_task(Op::DeleteVolume, &upid).await {
                tracing::info!(upid = %upid, error = %error_chain(&e), "the running delete did not end well");
            }
            *listing = listed(pve, storage, patience).await?;
            if !listing.contains(&archive.volid) {
                tally.already_gone += 1;
                return Ok(());
            }
        }
        match delete_one(pve, op, storage, archive).await {
            Ok(()) => {
                listing.remove(&archive.volid);
                tally.deleted += 1;
                return Ok(());
            }
            Err(e) if e.pve().is_some_and(|p| p.is_missing() || is_retryable(p)) => {
                tracing::info!(volid = %archive.volid, error = %error_chain(&e), "the delete did not finish; looking again");
                *listing = listed(pve, storage, patience).await?;
                if !listing.contains(&archive.volid) {
                    tally.deleted += 1;
                    return Ok(());
                }
                if !patience.pause().await {
                    return Err(e.into());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Carries out an accepted wipe: gate, list the storage, delete each recorded archive it
/// still lists, audit what was done.
pub(super) async fn wipe<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    op: &OpJournal,
    target: &DetachTarget,
    archives: &[RecordedArchive],
    authority: &JobAuthority,
    mut patience: Patience,
) -> Result<Value, JobError> {
    let storage = &target.storage;
    ask_gate(journal, Action::WipeStorage, storage, authority).await?;
    let mut listing = listed(pve, storage, &mut patience).await?;
    let mut tally = Tally::default();
    for archive in archives {
        wipe_one(
            pve,
            op,
            storage,
            archive,
            &mut listing,
            &mut patience,
            &mut tally,
        )
        .await?;
    }
    let recorded: BTreeSet<&str> = archives.iter().map(|a| a.volid.as_str()).collect();
    let left = listing
        .iter()
        .filter(|v| !recorded.contains(v.as_str()))
        .count();
    let mut event = AuditEvent::new("storage.wiped");
    event.op_id = Some(op.op_id());
    event.job_id = Some(authority.job_id().to_owned());
    event.detail = json!({
        "storage": storage.as_str(),
        "durable_id": target.durable_id,
        "type": kind_name(target.kind),
        "deleted": tally.deleted,
        "already_gone": tally.already_gone,
        "left": left,
    });
    let _ = journal.append_audit(event).await;
    tracing::info!(storage = %storage, deleted = tally.deleted, already_gone = tally.already_gone, left, "storage wiped");
    Ok(json!({
        "storage": storage.as_str(),
        "durable_id": target.durable_id,
        "recorded": archives.len(),
        "deleted": tally.deleted,
        "already_gone": tally.already_gone,
        "left": left,
    }))
}
