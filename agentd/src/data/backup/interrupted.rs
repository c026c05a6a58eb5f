//! Local-API backups a stop or crash interrupted: at start their operations are still
//! `running` in the journal. Each is ended in its guest's queue slot (so a new backup of
//! the guest waits for it): a vzdump task that was sent is followed to its end, an intent
//! that may or may not have reached Proxmox counts as failed, and the outcome is journaled
//! like any other backup's, so the hub's "last backup" reflects it. A written archive is
//! proven then (`recovery::proof`); one that cannot be proven ends the backup failed.

use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_pve::{
    ContentFilter, ContentType, Pve, StorageId, Upid, archive_volid_from_log, read_log,
};
use serde_json::Value;

use crate::data::backup::ArchiveProver;
use crate::guests::queue::{GuestKey, GuestQueue};
use crate::ops::journal::{BackupOutcome, JournalHandle, OpStatus, StepState, UnfinishedOperation};
use crate::ops::operation::OpJournal;
use crate::ops::operation::OpKind;
use crate::ops::operation::StepName;
use crate::ops::operation::replay::close_open_step;

/// Ends every interrupted backup (the backups list of
/// [`crate::ops::operation::replay::sort`]), proving written archives with `prover`; gives how
/// many it ended.
pub async fn close_interrupted_backups<P: Pve + 'static>(
    pve: &Arc<P>,
    journal: &JournalHandle,
    queue: &GuestQueue,
    default_storage: &StorageId,
    unfinished: &[UnfinishedOperation],
    prover: &ArchiveProver,
) -> usize {
    let mut closed = 0;
    for interrupted in unfinished {
        let op_id = interrupted.operation.op_id;
        let work = {
            let (pve, journal, interrupted) =
                (Arc::clone(pve), journal.clone(), interrupted.clone());
            let (default_storage, prover) = (default_storage.clone(), prover.clone());
            async move { close_one(&*pve, &journal, &interrupted, &default_storage, &prover).await }
        };
        let key = match &interrupted.operation.guest_id {
            Some(guest_id) => GuestKey::guest(guest_id),
            None => GuestKey::vmid(interrupted.operation.vmid.unwrap_or(0)),
        };
        match queue.run(key, work).await {
            Ok(Ok(())) => closed += 1,
            Ok(Err(error)) => {
                tracing::error!(op_id = %op_id, error = %error, "could not end an interrupted backup");
            }
            Err(e) => {
                tracing::warn!(op_id = %op_id, error = %error_chain(&e), "interrupted backup left for the next start");
            }
        }
    }
    closed
}

async fn close_one<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    interrupted: &UnfinishedOperation,
    default_storage: &StorageId,
    prover: &ArchiveProver,
) -> Result<(), String> {
    let operation = &interrupted.operation;
    let op = OpJournal::resume(journal, operation.op_id, OpKind::Backup);
    close_open_step(pve, &op, interrupted).await;
    let step = interrupted.last_step.as_ref();
    let storage = step
        .and_then(|s| s.detail.get("storage"))
        .and_then(Value::as_str)
        .map_or_else(|| default_storage.as_str().to_owned(), str::to_owned);
    // Runs of a tier name it in their step, so the outcome is reported under the tier.
    let tier = step
        .and_then(|s| s.detail.get("tier"))
        .and_then(Value::as_u64)
        .and_then(|t| u32::try_from(t).ok());
    let target = step
        .and_then(|s| s.detail.get("target"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let steps = journal
        .steps(operation.op_id)
        .await
        .map_err(|e| error_chain(&e))?;
    let ended = steps.last().filter(|s| s.name == StepName::Vzdump);
    let upid = ended
        .and_then(|s| s.upid.as_deref())
        .and_then(|u| Upid::parse(u).ok());
    let (outcome, error) = match (ended.map(|s| s.state), upid) {
        (Some(StepState::Ok), Some(upid)) => {
            let archive = match read_log(pve, &upid).await {
                Ok(lines) => archive_volid_from_log(lines.iter().map(|l| l.t.as_str()), &storage),
                Err(e) => {
                    tracing::warn!(upid = %upid, error = %error_chain(&e), "could not read the interrupted backup's log");
                    None
                }
            };
            let size_bytes = match &archive {
                Some(volid) => archive_size(pve, &storage, volid).await,
                None => None,
            };
            let proven = match (&archive, operation.guest_id.as_deref(), operation.vmid) {
                (Some(volid), Some(guest_id), Some(vmid)) => {
                    Some(prove(pve, prover, guest_id, vmid, &storage, volid).await)
                }
                _ => None,
            };
            let (ok, proof, error) = match proven {
                Some(Ok(proof)) => (true, Some(proof), None),
                Some(Err(why)) => (
                    false,
                    None,
                    Some(format!(
                        "the archive was written but cannot be proven, so it would never be \
                         restored: {}",
                        error_chain(&why)
                    )),
                ),
                None => (true, None, None),
            };
            let outcome = BackupOutcome {
                storage,
                ok,
                archive,
                size_bytes,
                target,
                tier,
                proof,
                ..BackupOutcome::default()
            };
            (outcome, error)
        }
        (state, _) => {
            let why = ended
                .and_then(|s| s.error.clone())
                .unwrap_or_else(|| "interrupted before vzdump was sent".to_owned());
            tracing::info!(op_id = %operation.op_id, step = ?state, "interrupted backup ends failed");
            let outcome = BackupOutcome {
                storage,
                ok: false,
                target,
                tier,
                ..BackupOutcome::default()
            };
            (outcome, Some(format!("interrupted: {why}")))
        }
    };
    if operation.guest_id.is_none() {
        return journal
            .finish_operation(operation.op_id, OpStatus::Failed, error)
            .await
            .map_err(|e| error_chain(&e));
    }
    tracing::info!(op_id = %operation.op_id, ok = outcome.ok, "interrupted backup ended");
    journal
        .finish_backup(operation.op_id, outcome, error)
        .await
        .map_err(|e| error_chain(&e))
}

/// The archive's size from the storage listing, if it can be read.
pub(crate) async fn archive_size<P: Pve>(pve: &P, storage: &str, volid: &str) -> Option<u64> {
    let storage = StorageId::new(storage.to_owned()).ok()?;
    let filter = ContentFilter {
        content: Some(ContentType::Backup),
        vmid: None,
    };
    match pve.list_content(&storage, filter).await {
        Ok(items) => items.into_iter().find(|i| i.volid == volid)?.size,
        Err(e) => {
            tracing::warn!(archive = %volid, error = %error_chain(&e), "could not read the backup's size; reported without it");
            None
        }
    }
}

/// Why the archive an interrupted backup wrote could not be proven.
#[derive(Debug, thiserror::Error)]
enum UnprovenError {
    /// The step's vmid or storage is not a valid one.
    #[error(transparent)]
    Value(#[from] bosun_pve::ValueError),
    /// The storage's backups could not be listed.
    #[error("{storage} cannot be read")]
    List {
        /// The storage.
        storage: StorageId,
        /// The cause.
        #[source]
        source: Box<bosun_pve::PveError>,
    },
    /// The prover refused the archive.
    #[error(transparent)]
    Proof(#[from] crate::data::backup::ProofError),
}

/// Proves `volid`, the archive an interrupted backup of `guest_id` (at `vmid`) wrote.
async fn prove<P: Pve>(
    pve: &P,
    prover: &ArchiveProver,
    guest_id: &str,
    vmid: u32,
    storage: &str,
    volid: &str,
) -> Result<crate::ops::journal::ArchiveProof, UnprovenError> {
    let vmid = bosun_pve::Vmid::new(vmid)?;
    let storage = StorageId::new(storage.to_owned())?;
    let filter = ContentFilter {
        content: Some(ContentType::Backup),
        vmid: Some(vmid),
    };
    let listed = match pve.list_content(&storage, filter).await {
        Ok(listed) => listed,
        Err(e) => {
            return Err(UnprovenError::List {
                storage,
                source: Box::new(e),
            });
        }
    };
    let item = listed.iter().find(|i| i.volid == volid);
    Ok(prover.prove(guest_id, vmid, volid, item).await?)
}
