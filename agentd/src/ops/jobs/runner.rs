//! Running signed jobs: check ([`super::check`]), claim (nonce once, job id
//! once), then hand the job to its kind's family (`jobs::dispatch`, as the table
//! `jobs::kind` says), which asks the gate, carries it out as a journaled operation
//! (through the guest's queue for a guest) and ends it (`jobs::context`, `conclude`):
//! its outcome journaled, audited and reported. Every refusal is audited (`job.refused`)
//! and reported to the hub (`rejected`), except a replay of a job that already
//! ran, which is audited only: its real result was already reported and must
//! not be overwritten.
//!
//! | kind | steps | gate action |
//! |---|---|---|
//! | `restore-now` | `accepted`, `stop` (if running), `check_bootstrap`, `restore_overwrite` (a VM: `qmrestore` `force=1`, decision 0123), `start` (if it was running) | `RestoreOverGuest` |
//! | `decommission` | `accepted`, `stop` (if running), `destroy` (purge) | `DecommissionGuest` |
//! | `force-backup` | `accepted`, `backup` | `Backup` |
//! | `storage-detach` | `accepted`, `delete_storage`, `unmount` (USB) | `DetachStorage` |
//! | `storage-wipe` | `accepted`, `delete_archive` (one per recorded archive) | `WipeStorage` |
//! | `controller-update` | `accepted`, `snapshot`, `announce`, `await_health`, `commit` (or `revert`, `check_bootstrap`, `rollback`) | `Snapshot`; `RollbackToSnapshot` by own snapshot |
//! | `break-glass-enable` | `accepted`, `helper.open` | — (host door, not a guest action) |
//! | `break-glass-disable` | `accepted`, `helper.close` | — |
//! | `agent-update` | `accepted`, `download`, `stage` | — (the agent itself) |
//! | `adopt` | `accepted`, `adopt_check`, (a VM with a bootstrap: `agent_ping`), `record_adopted`, `tag_identity`, with a bootstrap `check_token`, `push_bootstrap` (a VM: `write_bootstrap`), `store_token` | `AdoptGuest` |
//! | `restore-bulk` | `accepted` (the journal's record of the archive), `restore_bulk` | `RestoreBulkVolume` |
//!
//! A job interrupted by a crash is resumed on start ([`JobRunner::resume`])
//! from its `accepted` step, which holds everything needed to run it again;
//! each kind's steps are safe to repeat, and it still counts as one run.

use bosun_pve::PveQemu;
use std::path::PathBuf;
use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::job::{JobOutcome as WireOutcome, JobResult, SignedJob};
use bosun_pve::{Pve, StorageId};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::Instrument;
use uuid::Uuid;

use super::check::{CheckedJob, DEFAULT_SKEW, GuestIndex, JobRefusal, check_job, peek_job_id};
use super::context::{JobContext, job_span};
use super::detach::DetachContext;
use super::dispatch::{self, Setups};
use super::family::Claimed;
use super::kind::KindRow;
use super::restore_now::RestoreContext;
use super::update_run::UpdateJobs;
use crate::clock::SharedClock;
use crate::guests::queue::GuestQueue;
use crate::ops::journal::{
    AuditEvent, JobClaim, JournalError, JournalHandle, Refusal, UnfinishedOperation,
};
use crate::trust::signing::AllowedSigners;

/// What the runner needs: what every family works with, what each was set up with, and
/// what checking a job takes (the signers file, this host).
#[derive(Debug)]
pub struct JobRunner<P: Pve> {
    pub(super) context: JobContext<P>,
    pub(super) setups: Setups<P>,
    signers_path: PathBuf,
    host_id: Uuid,
}

/// What [`JobRunner::check_batch`] found.
#[derive(Debug, Default)]
pub struct CheckedBatch {
    /// Jobs that passed every check but the claim.
    pub accepted: Vec<CheckedJob>,
    /// Refused jobs (recorded and reported), by id where the document names one.
    pub refused: Vec<Option<Uuid>>,
}

impl<P: Pve + PveQemu + 'static> JobRunner<P> {
    /// A runner reporting results on `results`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        pve: Arc<P>,
        journal: JournalHandle,
        queue: GuestQueue,
        clock: SharedClock,
        signers_path: PathBuf,
        host_id: Uuid,
        restore_storage: StorageId,
        backup_storage: StorageId,
        results: mpsc::UnboundedSender<JobResult>,
    ) -> Self {
        Self {
            context: JobContext {
                pve,
                journal,
                queue,
                clock,
                results,
            },
            setups: Setups::new(restore_storage, backup_storage),
            signers_path,
            host_id,
        }
    }

    /// The same runner, running break-glass jobs through `door`.
    #[must_use]
    pub fn with_break_glass(mut self, door: crate::trust::break_glass::BreakGlass) -> Self {
        self.setups.break_glass = Some(door);
        self
    }

    /// The same runner, pushing the bootstraps `adopt` jobs ask for through `issuer`.
    #[must_use]
    pub fn with_bootstrap_issuer(
        mut self,
        issuer: crate::guests::credentials::bootstrap::BootstrapIssuer,
    ) -> Self {
        self.setups.adopt.issuer = Some(issuer);
        self
    }

    /// The same runner, running `agent-update` jobs with `jobs`.
    #[must_use]
    pub fn with_update(mut self, jobs: UpdateJobs) -> Self {
        self.setups.update = Some(jobs);
        self
    }

    /// The update context, when `agent-update` jobs run here.
    pub fn update_context(&self) -> Option<&Arc<crate::runtime::update::UpdateContext>> {
        self.setups.update.as_ref().map(|u| &u.context)
    }

    /// The same runner, resolving `restore-now` sources and restoring lost guests with
    /// `context`.
    #[must_use]
    pub fn with_recovery(mut self, context: RestoreContext<P>) -> Self {
        self.setups.set_recovery(context);
        self
    }

    /// The same runner, rolling `controller-update` jobs out through `context`.
    #[must_use]
    pub fn with_controller(mut self, context: crate::guests::controller::RolloutContext) -> Self {
        self.setups.controller = Some(context);
        self
    }

    /// The same runner, running `restore-bulk` jobs with `setup`.
    #[must_use]
    pub fn with_bulk_restore(mut self, setup: super::bulk_restore_run::BulkRestoreSetup) -> Self {
        self.setups.bulk_restore = Some(setup);
        self
    }

    /// The same runner, running `storage-detach` jobs against `context`.
    #[must_use]
    pub fn with_storage_detach(mut self, context: DetachContext) -> Self {
        self.setups.detach = Some(context);
        self
    }

    /// The agent's own records of its guests: provenance (guests it created) and
    /// tombstones (guests a signed decommission destroyed). Desired state plays no part:
    /// a hub pin never makes a guest the target of a job (DESIGN §5).
    async fn guest_index(&self) -> Result<GuestIndex, JournalError> {
        let mut index = GuestIndex::default();
        for p in self.context.journal.all_provenance().await? {
            index.held.insert(p.vmid());
            if let Some(g) = p.guest_id().and_then(|g| Uuid::parse_str(g).ok()) {
                index.by_vmid.insert(p.vmid(), g);
            }
        }
        for job in self.context.journal.adopting_jobs().await? {
            if let Ok(job) = Uuid::parse_str(&job) {
                index.adopted_by.insert(job);
            }
        }
        for t in self.context.journal.tombstones().await? {
            if let Ok(g) = Uuid::parse_str(&t.guest_id) {
                index.gone.insert(g);
            }
        }
        // A lost guest whose record a rolled-back DR dropped is still known at its last vmid.
        for (guest, vmid, _) in self.context.journal.lost_guests().await? {
            if let Ok(g) = Uuid::parse_str(&guest) {
                index.by_vmid.entry(vmid).or_insert(g);
            }
        }
        Ok(index)
    }

    /// Checks, claims and runs one signed job; returns once it has ended (or
    /// been refused).
    pub async fn handle(&self, signed: &SignedJob, request_id: Option<String>) {
        match self
            .check_batch(std::slice::from_ref(signed), request_id.clone())
            .await
        {
            Ok(batch) => {
                for checked in batch.accepted {
                    self.run_checked(checked, request_id.clone()).await;
                }
            }
            Err(e) => {
                tracing::error!(error = %error_chain(&e), "journal unreadable; job left for the next poll");
            }
        }
    }

    /// The intake of one poll's jobs: `allowed_signers` and the guest index are read
    /// once, every job's signature and document are checked before anything is
    /// written, and the refusals are journaled together in one transaction (audit row
    /// plus `rejected` result each). Gives the jobs that passed, for
    /// [`JobRunner::run_checked`], and the ids of the refused ones.
    pub async fn check_batch(
        &self,
        jobs: &[SignedJob],
        request_id: Option<String>,
    ) -> Result<CheckedBatch, JournalError> {
        crate::failpoint::panic_at("job_intake.check.panic");
        let signers = AllowedSigners::load(&self.signers_path);
        if let Err(e) = &signers {
            tracing::error!(path = %self.signers_path.display(), error = %error_chain(e), jobs = jobs.len(), "allowed_signers unreadable; refusing every job");
        }
        let index = match &signers {
            Ok(_) => Some(self.guest_index().await?),
            Err(_) => None,
        };
        let now = self.context.clock.now();
        let mut batch = CheckedBatch::default();
        let mut records = Vec::new();
        let mut results = Vec::new();
        for signed in jobs {
            let peeked = peek_job_id(signed);
            let (code, reason) = match (&signers, &index) {
                (Ok(signers), Some(index)) => {
                    match check_job(signed, signers, self.host_id, index, now, DEFAULT_SKEW) {
                        Ok(checked) => {
                            batch.accepted.push(checked);
                            continue;
                        }
                        Err(refusal) => (refusal.code(), error_chain(&refusal)),
                    }
                }
                _ => (
                    "signers_unreadable",
                    "allowed_signers unreadable".to_owned(),
                ),
            };
            tracing::warn!(job_id = peeked.map(tracing::field::display), code, reason = %reason, "signed job refused");
            let mut event = AuditEvent::new("job.refused");
            event.job_id = peeked.map(|j| j.to_string());
            event.request_id.clone_from(&request_id);
            event.detail = json!({ "code": code, "reason": reason });
            let result = peeked.map(|job_id| {
                self.context.result_of(
                    job_id,
                    WireOutcome::Rejected,
                    &format!("{code}: {reason}"),
                    json!({ "code": code }),
                )
            });
            let queued = result.as_ref().and_then(|r| {
                serde_json::to_string(r)
                    .ok()
                    .map(|body| (r.job_id.to_string(), body))
            });
            records.push(Refusal {
                event,
                result: queued,
            });
            results.extend(result);
            batch.refused.push(peeked);
        }
        if !records.is_empty() {
            self.context.journal.record_refusals(records).await?;
        }
        // Higher priority first, equal ones in the order the hub sent them (decision 0072).
        batch
            .accepted
            .sort_by_key(|checked| std::cmp::Reverse(checked.document.priority));
        for result in results {
            let _ = self.context.results.send(result);
        }
        Ok(batch)
    }

    /// Claims and runs a job that passed [`check_job`]; returns once it has ended
    /// (or been refused as a replay or for a reused nonce). Everything it logs
    /// carries the job id and request id.
    pub async fn run_checked(&self, checked: CheckedJob, request_id: Option<String>) {
        let span = job_span(
            Some(&checked.document.job_id.to_string()),
            request_id.as_deref(),
        );
        self.run_checked_in_span(checked, request_id)
            .instrument(span)
            .await;
    }

    async fn run_checked_in_span(&self, checked: CheckedJob, request_id: Option<String>) {
        let CheckedJob { document, signer } = checked;
        let job_id = document.job_id;
        let claim = JobClaim {
            job_id: job_id.to_string(),
            kind: document.kind.as_str().to_owned(),
            nonce: document.nonce.clone(),
            expires_at: document.expires_at,
            signer_fingerprint: signer.fingerprint().to_owned(),
            principals: signer.principals().to_owned(),
            timeout_s: document.timeout_s,
        };
        match self.context.journal.claim_job(claim).await {
            Ok(()) => {}
            Err(JournalError::JobAlreadyRun { job_id, .. }) => {
                return self
                    .context
                    .refuse(
                        Some(document.job_id),
                        &JobRefusal::AlreadyRun { job_id },
                        request_id,
                    )
                    .await;
            }
            Err(JournalError::NonceReused { first_job_id }) => {
                return self
                    .context
                    .refuse(
                        Some(job_id),
                        &JobRefusal::NonceReused { first_job_id },
                        request_id,
                    )
                    .await;
            }
            Err(e) => {
                tracing::error!(%job_id, error = %error_chain(&e), "could not claim job; left for the next poll");
                return;
            }
        }
        let job = Claimed {
            row: KindRow::of(document.kind),
            document,
            signer,
            request_id,
        };
        dispatch::run_claimed(&self.context, &self.setups, job).await;
    }

    /// Resumes the jobs a crash interrupted (the jobs list of
    /// [`crate::ops::operation::replay::sort`]: their operations are still running in the
    /// journal); gives how many ran on (those closed as interrupted before acceptance are
    /// not counted).
    pub async fn resume(
        &self,
        unfinished: Vec<UnfinishedOperation>,
    ) -> Result<usize, JournalError> {
        dispatch::resume(&self.context, &self.setups, unfinished).await
    }
}
