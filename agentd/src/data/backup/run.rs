//! One backup run inside the guest's queue slot: vzdump as a journaled step (intent, UPID,
//! outcome), follow its log, journal the end.

use bosun_errchain::error_chain;

use bosun_proto::desired::Retention;
use bosun_pve::{PruneBackups, TaskState, Upid, VzdumpRequest, archive_volid_from_log};

use crate::ops::journal::{BackupOutcome, StepOutcome};
use crate::ops::operation::OpJournal;

use super::tiers::Tier;
use super::{
    BackupPhase, BackupRequest, BackupService, GuestRef, LogProgress, RunKey, StorageSnapshot,
};
use crate::ops::operation::StepName;

/// Log lines read per poll.
const LOG_PAGE: u64 = 500;

/// How a run ended, before it is journaled.
enum Ending {
    Succeeded {
        archive: Option<String>,
        warnings: u32,
    },
    Failed {
        error: String,
    },
}

impl BackupService {
    pub(super) async fn run(
        &self,
        guest: GuestRef,
        op: OpJournal,
        request: BackupRequest,
        tier: Tier,
    ) {
        let op_id = op.op_id();
        let key: RunKey = (guest.guest_id.clone(), tier.index);
        let started_at = self.inner.clock.now();
        if let Some(prover) = &self.inner.prover {
            prover
                .mark_guest_as(&guest.guest_id, guest.vmid, guest.kind)
                .await;
        }
        let mut ending = self.run_steps(&guest, &op, request, &tier).await;
        let mut outcome = BackupOutcome {
            storage: tier.storage.as_str().to_owned(),
            target: tier.target.clone(),
            tier: Some(tier.index),
            started_at: Some(started_at),
            ..BackupOutcome::default()
        };
        if let Ending::Succeeded {
            archive: Some(volid),
            ..
        } = &ending
        {
            let item = self.archive_item(&guest, &tier, volid).await;
            if let Some(item) = &item {
                outcome.size_bytes = item.size;
                outcome.encrypted = item.encrypted.is_some();
            }
            if let Some(prover) = &self.inner.prover {
                match prover
                    .prove(&guest.guest_id, guest.vmid, volid, item.as_ref())
                    .await
                {
                    Ok(proof) => outcome.proof = Some(proof),
                    Err(reason) => {
                        ending = Ending::Failed {
                            error: format!(
                                "the archive {volid} was written but cannot be proven, so it \
                                 would never be restored: {}",
                                error_chain(&reason)
                            ),
                        };
                    }
                }
            }
        }
        let error = match &ending {
            Ending::Succeeded { archive, warnings } => {
                outcome.ok = true;
                outcome.archive.clone_from(archive);
                outcome.warnings = *warnings;
                None
            }
            Ending::Failed { error } => Some(error.clone()),
        };
        let finished = self
            .inner
            .journal
            .finish_backup(op_id, outcome, error)
            .await;
        if let Err(e) = finished {
            tracing::error!(op_id = %op_id, guest_id = %guest.guest_id, error = %e, "could not journal the end of a backup");
        }
        let now = self.inner.clock.now();
        match ending {
            Ending::Succeeded { archive, warnings } => {
                self.record_success(&guest.guest_id, &tier.storage, now);
                self.update(&key, |r| {
                    r.phase = BackupPhase::Done;
                    r.archive = archive.or(r.archive.take());
                    r.consistent_at.get_or_insert(now);
                });
                tracing::info!(op_id = %op_id, guest_id = %guest.guest_id, vmid = %guest.vmid, tier = tier.index, storage = %tier.storage, warnings, "backup done");
            }
            Ending::Failed { error } => {
                tracing::warn!(op_id = %op_id, guest_id = %guest.guest_id, vmid = %guest.vmid, tier = tier.index, storage = %tier.storage, error = %error, "backup failed");
                self.update(&key, |r| {
                    r.phase = BackupPhase::Failed;
                    r.error = Some(error);
                });
            }
        }
    }

    /// The archive's listing entry (size, encryption), if it can be read.
    async fn archive_item(
        &self,
        guest: &GuestRef,
        tier: &Tier,
        volid: &str,
    ) -> Option<bosun_pve::ContentItem> {
        match self.inner.ops.list_backups(&tier.storage, guest.vmid).await {
            Ok(items) => items.into_iter().find(|i| i.volid == volid),
            Err(e) => {
                tracing::warn!(vmid = %guest.vmid, archive = %volid, error = %e, "could not read the backup's size; reported without it");
                None
            }
        }
    }

    async fn run_steps(
        &self,
        guest: &GuestRef,
        op: &OpJournal,
        request: BackupRequest,
        tier: &Tier,
    ) -> Ending {
        let inner = &self.inner;
        let key: RunKey = (guest.guest_id.clone(), tier.index);
        // One vzdump per node; a run waiting here stays `queued`.
        let Ok(_slot) = inner.vzdump_slot.acquire().await else {
            return Ending::Failed {
                error: "the backup service is shutting down".into(),
            };
        };
        self.update(&key, |r| r.phase = BackupPhase::Running);
        let mut vzdump = VzdumpRequest::new(guest.vmid, tier.storage.clone());
        // Names the guest on the archive: what a box that takes over a lost host finds
        // its guests by (recovery/host_loss.rs).
        vzdump.notes_template = Some(crate::data::backup::notes::backup_notes(&guest.guest_id));
        if self.prunes() {
            vzdump.prune = Some(prune_of(&tier.applied));
        }
        let detail = serde_json::json!({
            "vmid": guest.vmid.get(),
            "storage": tier.storage.as_str(),
            "tier": tier.index,
            "target": tier.target,
            "prune": vzdump.prune.as_ref().and_then(|p| p.to_property_string().ok()),
            "mode": "snapshot",
            "quiesced": request.quiesced,
            "max_quiesce_s": request.max_quiesce_s,
            "initiator": request.initiator.as_str(),
        });
        let seq = match op.intent(StepName::Vzdump, detail).await {
            Ok(seq) => seq,
            Err(e) => {
                return Ending::Failed {
                    error: format!("journal refused the vzdump step: {}", error_chain(&e)),
                };
            }
        };
        let upid = match inner.ops.vzdump(&vzdump).await {
            Ok(upid) => upid,
            Err(e) => {
                let error = format!("vzdump was refused: {e}");
                self.finish_step(
                    op,
                    seq,
                    StepOutcome::Failed {
                        error: error.clone(),
                    },
                )
                .await;
                return Ending::Failed { error };
            }
        };
        if let Err(e) = op.sent(StepName::Vzdump, seq, &upid).await {
            // The task runs on; replay follows it by its type and start time.
            tracing::error!(op_id = %op.op_id(), upid = %upid, error = %error_chain(&e), "could not journal the vzdump task id");
        }
        self.update(&key, |r| r.upid = Some(upid.to_string()));
        let ending = self.follow(&key, &tier.storage, &upid).await;
        let outcome = match &ending {
            Ending::Succeeded { warnings, .. } => StepOutcome::Ok {
                warnings: *warnings,
            },
            Ending::Failed { error } => StepOutcome::Failed {
                error: error.clone(),
            },
        };
        self.finish_step(op, seq, outcome).await;
        ending
    }

    async fn finish_step(&self, op: &OpJournal, seq: u32, outcome: StepOutcome) {
        if let Err(e) = op.finished(StepName::Vzdump, seq, outcome).await {
            tracing::error!(op_id = %op.op_id(), seq, error = %error_chain(&e), "could not journal the end of the vzdump step");
        }
    }

    /// Polls the task's status and log until it stops, moving the run's phase along.
    async fn follow(&self, key: &RunKey, storage: &bosun_pve::StorageId, upid: &Upid) -> Ending {
        let inner = &self.inner;
        let mut lines: Vec<String> = Vec::new();
        let mut progress = LogProgress::default();
        let mut poll_errors = 0u32;
        loop {
            tokio::time::sleep(inner.config.poll_interval).await;
            let state = match inner.ops.task_status(upid).await {
                Ok(info) => info.state(),
                Err(e) => {
                    poll_errors += 1;
                    tracing::warn!(upid = %upid, attempt = poll_errors, error = %e, "backup task poll failed; still tracking");
                    if poll_errors > inner.config.max_poll_errors {
                        return Ending::Failed {
                            error: format!(
                                "lost track of task {upid} after {poll_errors} failed polls: {e}"
                            ),
                        };
                    }
                    continue;
                }
            };
            poll_errors = 0;
            // Read the log after the status, so a stopped task's log is complete.
            self.read_more_log(upid, &mut lines, &mut progress).await;
            self.apply_progress(key, progress);
            match state {
                TaskState::Running => {}
                TaskState::Ok | TaskState::Warnings(_) => {
                    let warnings = match state {
                        TaskState::Warnings(n) => n,
                        _ => 0,
                    };
                    let archive =
                        archive_volid_from_log(lines.iter().map(String::as_str), storage.as_str());
                    self.update(key, |r| {
                        r.phase = BackupPhase::Archived;
                        r.archive = archive.clone();
                        if r.storage_snapshot == StorageSnapshot::Pending {
                            r.storage_snapshot = StorageSnapshot::Unavailable;
                        }
                    });
                    return Ending::Succeeded { archive, warnings };
                }
                TaskState::Failed(exitstatus) => {
                    let cause = lines
                        .iter()
                        .rev()
                        .find(|l| l.starts_with("ERROR:"))
                        .map(|l| format!(" ({l})"))
                        .unwrap_or_default();
                    return Ending::Failed {
                        error: format!("vzdump failed: {exitstatus}{cause}"),
                    };
                }
            }
        }
    }

    async fn read_more_log(
        &self,
        upid: &Upid,
        lines: &mut Vec<String>,
        progress: &mut LogProgress,
    ) {
        loop {
            let start = u64::try_from(lines.len()).unwrap_or(u64::MAX);
            match self.inner.ops.task_log(upid, start, LOG_PAGE).await {
                Ok(page) => {
                    let got = page.lines.len();
                    let fresh: Vec<String> = page.lines.into_iter().map(|l| l.t).collect();
                    progress.feed(fresh.iter().map(String::as_str));
                    lines.extend(fresh);
                    let read = u64::try_from(lines.len()).unwrap_or(u64::MAX);
                    if got == 0 || read >= page.total {
                        return;
                    }
                }
                Err(e) => {
                    // The next poll reads on from the same place.
                    tracing::debug!(upid = %upid, error = %e, "backup task log read failed");
                    return;
                }
            }
        }
    }

    fn apply_progress(&self, key: &RunKey, progress: LogProgress) {
        let now = self.inner.clock.now();
        self.update(key, |r| {
            if progress.no_storage_snapshot {
                r.storage_snapshot = StorageSnapshot::Unavailable;
            } else if progress.snapshot_taken {
                r.storage_snapshot = StorageSnapshot::Taken;
            }
            let phase = if progress.archive_written {
                BackupPhase::Archived
            } else if progress.snapshot_consistent() {
                BackupPhase::Snapshotted
            } else {
                BackupPhase::Running
            };
            if phase != BackupPhase::Running && r.consistent_at.is_none() {
                r.consistent_at = Some(now);
            }
            r.phase = phase;
        });
    }
}

/// `prune-backups` for `retention`: `keep-all=1` when it keeps everything (so a storage's
/// own, possibly shorter, setting never prunes a tier's backups).
fn prune_of(retention: &Retention) -> PruneBackups {
    if retention.keeps_all() {
        return PruneBackups {
            keep_all: true,
            ..PruneBackups::default()
        };
    }
    let set = |n: u32| (n > 0).then_some(n);
    PruneBackups {
        keep_last: set(retention.keep_last),
        keep_daily: set(retention.keep_daily),
        keep_weekly: set(retention.keep_weekly),
        keep_monthly: set(retention.keep_monthly),
        ..PruneBackups::default()
    }
}
