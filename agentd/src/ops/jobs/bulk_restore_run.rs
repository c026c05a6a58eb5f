//! The family of `restore-bulk` (decision 0108): a bulk volume's archive put back into the
//! volume, as the operator signed it.
//!
//! What is restored is the operator's signed decision (the guest, the volume, optionally the
//! archive's name); what comes back is what Bosun recorded when the archive was written. The
//! job names no path, size or digest: the agent takes them from its own journal's
//! record of the archive for that guest and volume (the newest, or the one named among those
//! the helper still keeps), and the volume's mount path and the archive's directory from the
//! verified plan. A job naming an archive the journal does not hold for that guest and volume
//! (another guest's, one pruned, a made-up name), or a volume the plan does not archive, is
//! refused before anything runs.
//!
//! Accepted, the record is journaled in the `accepted` step, the gate is asked
//! (`RestoreBulkVolume`, covered by a `restore-bulk` signature only) and the helper's
//! `bulk_restore` runs as the journaled step `restore_bulk`, in the guest's queue slot: the
//! helper re-hashes the archive and refuses it on any mismatch before the guest is touched, has
//! the guest's tar extract it into a fresh directory on the volume and swaps it in. A lost
//! answer is asked once more at once; a job a crash interrupted asks once more when it resumes,
//! unless its `restore_bulk` step had ended well. The helper's extract first finishes a swap it
//! had approved and clears an unapproved extraction, so asking again converges. Each outcome is
//! audited for the guest (`bulk.restored`, `bulk.restore_failed`).

use bosun_pve::PveQemu;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::helper::{
    ArchiveBytes, ArchiveSeconds, BulkRestore, GuestPath, Output, Request, Sha256Hex, StorageDir,
    Vmid, VolumeName,
};
use bosun_proto::job::RestoreBulkParams;
use bosun_pve::Pve;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::watch;
use uuid::Uuid;

use super::check::JobRefusal;
use super::context::JobContext;
use super::error::JobError;
use super::execute::ask_gate;
use super::family::{Claimed, JobFamily, NotAccepted};
use super::kind::KindRow;
use crate::data::desired::DesiredSnapshot;
use crate::data::storage::naming::target_storage_id;
use crate::data::storage::target::directory_of;
use crate::guests::queue::GuestKey;
use crate::links::helper::HelperClient;
use crate::ops::journal::{AuditEvent, JournalError, JournalHandle, StepState};
use crate::ops::operation::{OpJournal, StepName};
use crate::trust::gate::{Action, JobAuthority, Target};
use crate::trust::signing::VerifiedSigner;

/// The longest one restore may take (the helper's own limit; its answer is awaited a minute
/// longer, plus the archive read twice at 50 MiB/s).
const RESTORE_TIMEOUT: Duration = Duration::from_secs(86_400);

/// What a `restore-bulk` job asks, once accepted: the journal's record of the archive and
/// where the plan puts it; stored in its `accepted` step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct BulkRestoreAccepted {
    job_id: String,
    guest_id: Uuid,
    vmid: u32,
    volume: String,
    /// The volume's mount path in the guest, from the plan's entry.
    path: String,
    /// The plan target the archive lies on, and its directory on the node.
    target: String,
    storage_dir: String,
    /// The archive's name, size and SHA-256 as the journal recorded them.
    archive: String,
    size_bytes: u64,
    sha256: String,
    signer: String,
    principals: String,
}

/// What `restore-bulk` jobs use: the verified plan (through desired state), the helper and
/// where USB targets are mounted.
#[derive(Debug, Clone)]
pub struct BulkRestoreSetup {
    desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    helper: Option<HelperClient>,
    mount_root: PathBuf,
}

impl BulkRestoreSetup {
    /// A setup following `desired`, restoring through `helper` (without one, every restore
    /// fails, saying why), USB targets mounted beneath `mount_root`.
    pub fn new(
        desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
        helper: Option<HelperClient>,
        mount_root: PathBuf,
    ) -> Self {
        Self {
            desired,
            helper,
            mount_root,
        }
    }

    /// The plan's mount path of `volume` and the directory of `target`, or why not.
    fn placed(
        &self,
        guest_id: Uuid,
        volume: &str,
        target: &str,
    ) -> Result<(String, String), String> {
        let snapshot = self.desired.borrow().clone();
        let plan = snapshot.as_ref().and_then(|s| s.plan.as_ref());
        let Some(plan) = plan.map(|p| &p.plan) else {
            return Err("no verified data plan: nothing says where the volume is".into());
        };
        let Some(entry) = plan.bulk_backup(guest_id, volume) else {
            return Err(format!(
                "the signed plan archives no volume {volume:?} of guest {guest_id}"
            ));
        };
        let Some(found) = plan.target(target) else {
            return Err(format!(
                "the signed plan no longer names target {target:?}, which holds the archive"
            ));
        };
        let storage = target_storage_id(found);
        let dir = directory_of(found, &storage, &self.mount_root)
            .ok_or_else(|| format!("target {target:?} is not a directory on this node"))?;
        Ok((entry.path.clone(), dir))
    }
}

/// The family of `restore-bulk` ([`super::kind::Runs::RestoreBulk`]).
#[derive(Debug)]
pub(super) struct BulkRestoreJobs;

impl<P: Pve + PveQemu + 'static> JobFamily<P> for BulkRestoreJobs {
    type Accepted = BulkRestoreAccepted;
    type Setup = BulkRestoreSetup;
    type Work = ();
    const MISSING: &'static str = "bulk restore setup";

    fn job_id(accepted: &BulkRestoreAccepted) -> String {
        accepted.job_id.clone()
    }

    fn guest(accepted: &BulkRestoreAccepted) -> Option<(u32, Uuid)> {
        Some((accepted.vmid, accepted.guest_id))
    }

    fn signer(accepted: &BulkRestoreAccepted) -> VerifiedSigner {
        VerifiedSigner::resumed(&accepted.signer, &accepted.principals)
    }

    /// The archive is the journal's record for the guest's volume, or the job is refused.
    async fn accept(
        context: &JobContext<P>,
        setup: &BulkRestoreSetup,
        job: &Claimed,
    ) -> Result<(BulkRestoreAccepted, ()), NotAccepted> {
        let Claimed {
            document,
            signer,
            row,
            ..
        } = job;
        let job_id = document.job_id;
        let (Some(guest_id), Some(vmid)) = (document.target.guest_id, document.target.vmid) else {
            tracing::error!(%job_id, kind = row.name(), "a guest job without its guest; not run");
            return Err(NotAccepted::Dropped);
        };
        let refuse = |reason: String| {
            tracing::warn!(%job_id, %guest_id, reason = %reason, "restore-bulk refused");
            NotAccepted::Refused(JobRefusal::BulkArchiveUnknown { reason })
        };
        let params = RestoreBulkParams::from_params(&document.params)
            .map_err(|e| refuse(error_chain(&e)))?;
        let unreadable =
            |e: JournalError| refuse(format!("the journal is unreadable: {}", error_chain(&e)));
        let id = guest_id.to_string();
        let record = match &params.archive {
            // A named archive: one the journal recorded for this guest's volume and the helper
            // still keeps (its newest `keep_last`).
            Some(named) => context
                .journal
                .bulk_archive_named(id, params.volume.clone(), named.clone())
                .await
                .map_err(unreadable)?
                .ok_or_else(|| {
                    refuse(format!(
                        "the journal holds no archive {named:?} of volume {:?} of guest {guest_id}",
                        params.volume
                    ))
                })?,
            // None named: the volume's newest.
            None => context
                .journal
                .last_bulk_archives()
                .await
                .map_err(unreadable)?
                .into_iter()
                .find(|r| r.guest_id == id && r.volume == params.volume)
                .and_then(|r| r.archive)
                .map(|(archive, _)| archive)
                .ok_or_else(|| {
                    refuse(format!(
                        "the journal holds no archive of volume {:?} of guest {guest_id}",
                        params.volume
                    ))
                })?,
        };
        let (path, storage_dir) = setup
            .placed(guest_id, &params.volume, &record.target)
            .map_err(refuse)?;
        let accepted = BulkRestoreAccepted {
            job_id: job_id.to_string(),
            guest_id,
            vmid,
            volume: params.volume,
            path,
            target: record.target,
            storage_dir,
            archive: record.name,
            size_bytes: record.size_bytes,
            sha256: record.sha256,
            signer: signer.fingerprint().to_owned(),
            principals: signer.principals().to_owned(),
        };
        Ok((accepted, ()))
    }

    /// The record the job was accepted with stands: it is what the journal held.
    fn judge_again(
        _setup: &BulkRestoreSetup,
        _row: KindRow,
        _accepted: &BulkRestoreAccepted,
    ) -> Result<(), JobError> {
        Ok(())
    }

    async fn carry_out(
        context: &JobContext<P>,
        setup: &BulkRestoreSetup,
        op: OpJournal,
        row: KindRow,
        accepted: BulkRestoreAccepted,
        (): (),
        signer: &VerifiedSigner,
    ) {
        tracing::info!(job_id = %accepted.job_id, vmid = accepted.vmid, volume = %accepted.volume, archive = %accepted.archive, op_id = %op.op_id(), "running signed bulk restore");
        let guest = Some((accepted.vmid, accepted.guest_id));
        let authority = JobAuthority::new(
            signer,
            row.gate,
            Target::Guest {
                vmid: accepted.vmid,
            },
            accepted.job_id.clone(),
        );
        let (journal, helper) = (context.journal.clone(), setup.helper.clone());
        let (work_op, work_accepted) = (op.clone(), accepted.clone());
        let work = async move {
            ask_gate(
                &journal,
                Action::RestoreBulkVolume,
                work_accepted.vmid,
                &authority,
            )
            .await?;
            restore((&journal, &work_op), helper, &work_accepted).await
        };
        let result = match context
            .queue
            .run(GuestKey::guest(accepted.guest_id), work)
            .await
        {
            Ok(result) => result,
            Err(e) => Err(JobError::Queue(e)),
        };
        audit(context, &accepted, &result).await;
        context
            .conclude(op, accepted.job_id, row.name(), guest, result)
            .await;
    }
}

/// The `restore_bulk` step: skipped when an earlier run's ended well, else the helper asked
/// (once more at once when its answer was lost).
async fn restore(
    (journal, op): (&JournalHandle, &OpJournal),
    helper: Option<HelperClient>,
    accepted: &BulkRestoreAccepted,
) -> Result<Value, JobError> {
    let output = json!({
        "volume": accepted.volume, "archive": accepted.archive, "target": accepted.target,
        "size_bytes": accepted.size_bytes, "sha256": accepted.sha256,
    });
    let steps = journal
        .steps(op.op_id())
        .await
        .map_err(JobError::journal("reading the job's steps"))?;
    let done = steps
        .iter()
        .any(|s| s.name == StepName::RestoreBulk && s.state == StepState::Ok);
    if done {
        tracing::info!(op_id = %op.op_id(), "the bulk restore had ended well before the agent stopped");
        return Ok(output);
    }
    let Some(helper) = helper else {
        return Err(JobError::HelperAnswer {
            request: "bulk_restore",
            answer: "no root helper is configured ([helper] in agent.toml)".into(),
        });
    };
    let request = Request::BulkRestore(to_helper(accepted)?);
    let wait = RESTORE_TIMEOUT
        + Duration::from_secs(60 + accepted.size_bytes.saturating_mul(2) / (50 << 20));
    let client = helper.with_timeout(wait);
    let call = async {
        match client.call(&request).await {
            Err(e) if e.is_transport() => {
                tracing::warn!(error = %error_chain(&e), "the helper's answer to bulk_restore was lost; asking once more");
                client.call(&request).await
            }
            answer => answer,
        }
    };
    let detail = json!({
        "vmid": accepted.vmid, "volume": accepted.volume, "archive": accepted.archive,
        "sha256": accepted.sha256, "size_bytes": accepted.size_bytes,
    });
    let answer = op
        .local_typed(StepName::RestoreBulk, detail, call)
        .await
        .map_err(JobError::from)?;
    match answer {
        Output::BulkRestored { .. } => Ok(output),
        other => Err(JobError::HelperAnswer {
            request: "bulk_restore",
            answer: format!("{other:?}"),
        }),
    }
}

/// The helper's request for `accepted`.
fn to_helper(accepted: &BulkRestoreAccepted) -> Result<BulkRestore, JobError> {
    Ok(BulkRestore {
        vmid: Vmid::new(u64::from(accepted.vmid))?,
        guest_id: accepted.guest_id,
        volume: VolumeName::new(accepted.volume.clone())?,
        path: GuestPath::new(accepted.path.clone())?,
        storage_dir: StorageDir::new(accepted.storage_dir.clone())?,
        archive: accepted.archive.clone(),
        sha256: Sha256Hex::new(accepted.sha256.clone())?,
        size: ArchiveBytes::new(accepted.size_bytes)?,
        timeout_secs: ArchiveSeconds::new(RESTORE_TIMEOUT.as_secs())?,
    })
}

/// Audits the outcome for the guest: `bulk.restored` or `bulk.restore_failed`.
async fn audit<P: Pve + PveQemu + 'static>(
    context: &JobContext<P>,
    accepted: &BulkRestoreAccepted,
    result: &Result<Value, JobError>,
) {
    let mut event = match result {
        Ok(_) => AuditEvent::new("bulk.restored"),
        Err(_) => AuditEvent::new("bulk.restore_failed"),
    };
    event.detail = json!({
        "job_id": accepted.job_id, "volume": accepted.volume, "target": accepted.target,
        "archive": accepted.archive, "size_bytes": accepted.size_bytes, "sha256": accepted.sha256,
    });
    if let Err(e) = result {
        event.detail["error"] = json!(error_chain(e));
    }
    event.guest_id = Some(accepted.guest_id.to_string());
    event.vmid = Some(accepted.vmid);
    if let Err(e) = context.journal.append_audit(event).await {
        tracing::warn!(error = %error_chain(&e), "could not audit a bulk restore");
    }
}
