//! Running signed jobs: check ([`super::check`]), claim (nonce once, job id
//! once), then hand the job to its kind's family (`jobs::dispatch`, as the table
//! `jobs::kind` says), which asks the gate, carries it out as a journaled operation
//! (through the guest's queue for a guest) and ends it here (`JobRunner::conclude`):
//! its outcome journaled, audited and reported. Every refusal is audited (`job.refused`)
//! and reported to the hub (`rejected`), except a replay of a job that already
//! ran, which is audited only: its real result was already reported and must
//! not be overwritten.
//!
//! | kind | steps | gate action |
//! |---|---|---|
//! | `restore-now` | `accepted`, `stop` (if running), `restore_overwrite`, `start` (if it was running) | `RestoreOverGuest` |
//! | `decommission` | `accepted`, `stop` (if running), `destroy` (purge) | `DecommissionGuest` |
//! | `force-backup` | `accepted`, `backup` | `Backup` |
//! | `storage-detach` | `accepted`, `delete_storage`, `unmount` (USB) | `DetachStorage` |
//! | `controller-update` | `accepted`, `snapshot`, `announce`, `await_health`, `commit` (or `revert`, `check_bootstrap`, `rollback`) | `Snapshot`; `RollbackToSnapshot` by own snapshot |
//! | `break-glass-enable` | `accepted`, `helper.open` | — (host door, not a guest action) |
//! | `break-glass-disable` | `accepted`, `helper.close` | — |
//! | `agent-update` | `accepted`, `download`, `stage` | — (the agent itself) |
//!
//! A job interrupted by a crash is resumed on start ([`JobRunner::resume`])
//! from its `accepted` step, which holds everything needed to run it again;
//! each kind's steps are safe to repeat, and it still counts as one run.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::job::{JobOutcome as WireOutcome, JobResult, SignedJob};
use bosun_pve::{Pve, StorageId};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tracing::Instrument;
use uuid::Uuid;

use super::check::{CheckedJob, DEFAULT_SKEW, GuestIndex, JobRefusal, check_job, peek_job_id};
use super::decommission::RETRY_WINDOW_MAX;
use super::detach::DetachContext;
use super::dispatch::Claimed;
use super::error::JobError;
use super::kind::KindRow;
use crate::clock::SharedClock;
use crate::guests::queue::GuestQueue;
use crate::ops::journal::{
    AuditEvent, JobClaim, JobOutcome, JournalError, JournalHandle, NewOperation, OpStatus, Refusal,
};
use crate::ops::operation::OpJournal;
use crate::trust::signing::AllowedSigners;

/// What the runner needs.
#[derive(Debug)]
pub struct JobRunner<P: Pve> {
    pub(super) pve: Arc<P>,
    pub(super) journal: JournalHandle,
    pub(super) queue: GuestQueue,
    pub(super) clock: SharedClock,
    signers_path: PathBuf,
    host_id: Uuid,
    pub(super) restore_storage: StorageId,
    pub(super) backup_storage: StorageId,
    results: mpsc::UnboundedSender<JobResult>,
    /// What `storage-detach` jobs are judged on; without it they are refused.
    pub(super) detach: Option<DetachContext>,
    /// What `restore-now` restores from without a named archive, and how it brings back
    /// a lost guest; without it, it needs an archive and an existing guest.
    pub(super) recovery: Option<Arc<super::restore_now::RestoreContext<P>>>,
    /// What `controller-update` jobs roll out through; without it they fail.
    pub(super) controller: Option<crate::guests::controller::RolloutContext>,
    /// The break-glass door; without it (no helper) break-glass jobs are refused.
    pub(super) break_glass: Option<crate::trust::break_glass::BreakGlass>,
    /// What `agent-update` jobs need; without it they are refused.
    pub(super) update: Option<super::update_run::UpdateJobs>,
}

/// What [`JobRunner::check_batch`] found.
#[derive(Debug, Default)]
pub struct CheckedBatch {
    /// Jobs that passed every check but the claim.
    pub accepted: Vec<CheckedJob>,
    /// Refused jobs (recorded and reported), by id where the document names one.
    pub refused: Vec<Option<Uuid>>,
}

impl<P: Pve + 'static> JobRunner<P> {
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
            pve,
            journal,
            queue,
            clock,
            signers_path,
            host_id,
            restore_storage,
            backup_storage,
            results,
            detach: None,
            recovery: None,
            controller: None,
            break_glass: None,
            update: None,
        }
    }

    /// The same runner, running break-glass jobs through `door`.
    #[must_use]
    pub fn with_break_glass(mut self, door: crate::trust::break_glass::BreakGlass) -> Self {
        self.break_glass = Some(door);
        self
    }

    /// The same runner, running `agent-update` jobs with `jobs`.
    #[must_use]
    pub fn with_update(mut self, jobs: super::update_run::UpdateJobs) -> Self {
        self.update = Some(jobs);
        self
    }

    /// The update context, when `agent-update` jobs run here.
    pub fn update_context(&self) -> Option<&Arc<crate::runtime::update::UpdateContext>> {
        self.update.as_ref().map(|u| &u.context)
    }

    /// The same runner, resolving `restore-now` sources and restoring lost guests with
    /// `context`.
    #[must_use]
    pub fn with_recovery(mut self, context: super::restore_now::RestoreContext<P>) -> Self {
        self.recovery = Some(Arc::new(context));
        self
    }

    /// The same runner, rolling `controller-update` jobs out through `context`.
    #[must_use]
    pub fn with_controller(mut self, context: crate::guests::controller::RolloutContext) -> Self {
        self.controller = Some(context);
        self
    }

    /// The same runner, running `storage-detach` jobs against `context`.
    #[must_use]
    pub fn with_storage_detach(mut self, context: DetachContext) -> Self {
        self.detach = Some(context);
        self
    }

    fn result_of(
        &self,
        job_id: Uuid,
        outcome: WireOutcome,
        detail: &str,
        output: Value,
    ) -> JobResult {
        JobResult {
            schema: bosun_proto::job::RESULT_SCHEMA.to_owned(),
            job_id,
            outcome,
            finished_at: self.clock.now(),
            detail: detail.chars().take(4000).collect(),
            output,
        }
    }

    /// Queues a result in the journal's outbox, then hands it to the hub loop.
    pub(super) async fn report(
        &self,
        job_id: Uuid,
        outcome: WireOutcome,
        detail: String,
        output: Value,
    ) {
        let result = self.result_of(job_id, outcome, &detail, output);
        match serde_json::to_string(&result) {
            Ok(body) => {
                if let Err(e) = self
                    .journal
                    .queue_job_result(job_id.to_string(), body)
                    .await
                {
                    tracing::error!(%job_id, error = %error_chain(&e), "could not queue the job result; sending it without a durable copy");
                }
            }
            Err(e) => tracing::error!(%job_id, error = %e, "could not encode the job result"),
        }
        let _ = self.results.send(result);
    }

    pub(super) async fn refuse(
        &self,
        job_id: Option<Uuid>,
        refusal: &JobRefusal,
        request_id: Option<String>,
    ) {
        let reason = error_chain(refusal);
        tracing::warn!(job_id = job_id.map(tracing::field::display), code = refusal.code(), reason = %reason, "signed job refused");
        let mut event = AuditEvent::new("job.refused");
        event.job_id = job_id.map(|j| j.to_string());
        event.request_id = request_id;
        event.detail = json!({ "code": refusal.code(), "reason": reason });
        if let Err(e) = self.journal.append_audit(event).await {
            tracing::error!(error = %error_chain(&e), "failed to audit a job refusal");
        }
        if let (Some(job_id), false) = (job_id, matches!(refusal, JobRefusal::AlreadyRun { .. })) {
            self.report(
                job_id,
                WireOutcome::Rejected,
                format!("{}: {reason}", refusal.code()),
                json!({ "code": refusal.code() }),
            )
            .await;
        }
    }

    /// Refuses a job already claimed: reported `rejected`, its run recorded as failed, so
    /// the same job id never runs later.
    pub(super) async fn refuse_claimed(
        &self,
        job_id: Uuid,
        refusal: &JobRefusal,
        request_id: Option<String>,
    ) {
        self.refuse(Some(job_id), refusal, request_id).await;
        let detail = format!("{}: {}", refusal.code(), error_chain(refusal));
        if let Err(e) = self
            .journal
            .finish_job(job_id.to_string(), JobOutcome::Failed, None, Some(detail))
            .await
        {
            tracing::error!(%job_id, error = %error_chain(&e), "could not record the refused job's end");
        }
    }

    /// The agent's own records of its guests: provenance (guests it created) and
    /// tombstones (guests a signed decommission destroyed). Desired state plays no part:
    /// a hub pin never makes a guest the target of a job (DESIGN §5).
    async fn guest_index(&self) -> Result<GuestIndex, JournalError> {
        let mut index = GuestIndex::default();
        for p in self.journal.all_provenance().await? {
            if let Some(g) = p.guest_id().and_then(|g| Uuid::parse_str(g).ok()) {
                index.by_vmid.insert(p.vmid(), g);
            }
        }
        for t in self.journal.tombstones().await? {
            if let Ok(g) = Uuid::parse_str(&t.guest_id) {
                index.gone.insert(g);
            }
        }
        // A lost guest whose record a rolled-back DR dropped is still known at its last vmid.
        for (guest, vmid, _) in self.journal.lost_guests().await? {
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
        let now = self.clock.now();
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
                self.result_of(
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
            self.journal.record_refusals(records).await?;
        }
        for result in results {
            let _ = self.results.send(result);
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
        };
        match self.journal.claim_job(claim).await {
            Ok(()) => {}
            Err(JournalError::JobAlreadyRun { job_id, .. }) => {
                return self
                    .refuse(
                        Some(document.job_id),
                        &JobRefusal::AlreadyRun { job_id },
                        request_id,
                    )
                    .await;
            }
            Err(JournalError::NonceReused { first_job_id }) => {
                return self
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
        self.run_claimed(job).await;
    }

    /// How long a job may retry transient failures: until it expires (a resumed job
    /// journaled without its expiry gets the longest window).
    pub(super) fn retry_window(&self, expires_at: Option<jiff::Timestamp>) -> Duration {
        match expires_at {
            Some(end) => {
                let left = end.as_millisecond() - self.clock.now().as_millisecond();
                Duration::from_millis(u64::try_from(left).unwrap_or(0))
            }
            None => RETRY_WINDOW_MAX,
        }
    }

    /// Ends a job that ran: its operation's status, the job's outcome and result (in the
    /// outbox before it is sent), the `job.finished` audit row.
    pub(super) async fn conclude(
        &self,
        op: OpJournal,
        job_id: String,
        kind: &str,
        guest: Option<(u32, Uuid)>,
        result: Result<Value, JobError>,
    ) {
        let (status, outcome, wire, detail, output) = match result {
            Ok(output) => (
                OpStatus::Done,
                JobOutcome::Succeeded,
                WireOutcome::Succeeded,
                "done".to_owned(),
                output,
            ),
            Err(error) => (
                OpStatus::Failed,
                JobOutcome::Failed,
                WireOutcome::Failed,
                error_chain(&error),
                Value::Null,
            ),
        };
        let _ = op
            .finish(status, (status == OpStatus::Failed).then(|| detail.clone()))
            .await;
        let result = Uuid::parse_str(&job_id)
            .ok()
            .map(|id| self.result_of(id, wire, &detail, output));
        let body = result
            .as_ref()
            .and_then(|r| serde_json::to_string(r).ok())
            .unwrap_or_default();
        let recorded = if result.is_some() {
            self.journal
                .finish_job_with_result(
                    job_id.clone(),
                    outcome,
                    Some(op.op_id()),
                    Some(detail.clone()),
                    body,
                )
                .await
        } else {
            self.journal
                .finish_job(
                    job_id.clone(),
                    outcome,
                    Some(op.op_id()),
                    Some(detail.clone()),
                )
                .await
        };
        if let Err(e) = recorded {
            tracing::error!(%job_id, error = %error_chain(&e), "could not record the job's end");
        }
        let mut event = AuditEvent::new("job.finished");
        event.job_id = Some(job_id.clone());
        event.op_id = Some(op.op_id());
        event.vmid = guest.map(|(vmid, _)| vmid);
        event.guest_id = guest.map(|(_, guest_id)| guest_id.to_string());
        event.detail = json!({ "kind": kind, "outcome": outcome.as_str(), "detail": detail });
        let _ = self.journal.append_audit(event).await;
        tracing::info!(%job_id, outcome = outcome.as_str(), "signed job ended");
        // The result is in the outbox: a crash from here on re-sends it after the restart.
        crate::failpoint::hit("job.result.queued");
        if let Some(result) = result {
            let _ = self.results.send(result);
        }
    }
}

/// The span every log line of one job carries.
pub(super) fn job_span(job_id: Option<&str>, request_id: Option<&str>) -> tracing::Span {
    tracing::info_span!(
        "job",
        job_id = %job_id.unwrap_or_default(),
        request_id = %request_id.unwrap_or_default()
    )
}

impl<P: Pve + 'static> JobRunner<P> {
    /// Opens the job's operation and journals its `accepted` step with `accepted` as the
    /// detail; `None` (logged) when the journal refuses either.
    pub(super) async fn begin_accepted(
        &self,
        operation: NewOperation,
        job_id: impl std::fmt::Display,
        accepted: &impl serde::Serialize,
    ) -> Option<OpJournal> {
        let op = match OpJournal::begin(&self.journal, operation).await {
            Ok(op) => op,
            Err(e) => {
                tracing::error!(%job_id, error = %error_chain(&e), "could not begin the job's operation");
                return None;
            }
        };
        let detail = serde_json::to_value(accepted).unwrap_or(Value::Null);
        if let Err(e) = op
            .local("accepted", detail, async { Ok::<(), String>(()) })
            .await
        {
            tracing::error!(%job_id, error = %error_chain(&e), "could not journal the accepted job");
            return None;
        }
        Some(op)
    }
}
