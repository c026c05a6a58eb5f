//! Journaled steps: every Proxmox call of an operation writes its intent first, its UPID
//! once sent, and its outcome when it ends (DESIGN §9). Each write is a failpoint
//! (`<kind>.<step>.<phase>`), so every operation gets its kill-at-every-step test for free.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bosun_errchain::error_chain;
use bosun_pve::{Op, Pve, PveError, TaskOutcome, Upid};
use jiff::Timestamp;
use serde_json::Value;

use crate::clock::SharedClock;
use crate::failpoint;
use crate::ops::journal::{JournalError, JournalHandle, NewOperation, OpId, OpStatus, StepOutcome};
use crate::ops::operation::{OpKind, StepName};

/// Why a journaled step failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The journal refused the write; the step was not attempted (or its end
    /// could not be recorded).
    #[error("journal write for step {step} of operation {op_id}")]
    Journal {
        /// The operation.
        op_id: OpId,
        /// The step.
        step: String,
        /// The cause.
        #[source]
        source: JournalError,
    },
    /// Proxmox refused or failed the call or its task.
    #[error("step {step} of operation {op_id} failed in proxmox")]
    Pve {
        /// The operation.
        op_id: OpId,
        /// The step.
        step: String,
        /// The cause.
        #[source]
        source: PveError,
    },
    /// A local step failed; the cause is kept ([`OpJournal::local_typed`]).
    #[error("step {step} of operation {op_id} failed")]
    Failed {
        /// The operation.
        op_id: OpId,
        /// The step.
        step: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The job's signed timeout passed: the step was not started (decision 0072).
    #[error("timed out after {timeout_s} s: step {step} of operation {op_id} was not started")]
    TimedOut {
        /// The operation.
        op_id: OpId,
        /// The step that would have started.
        step: String,
        /// The job's timeout, seconds.
        timeout_s: u32,
    },
    /// Something other than Proxmox failed (an extension step, a refusal).
    #[error("step {step} of operation {op_id} failed: {reason}")]
    Other {
        /// The operation.
        op_id: OpId,
        /// The step.
        step: String,
        /// What went wrong.
        reason: String,
    },
}

impl StepError {
    /// The Proxmox error underneath, if any.
    pub fn pve(&self) -> Option<&PveError> {
        match self {
            StepError::Pve { source, .. } => Some(source),
            _ => None,
        }
    }

    /// The step that failed.
    pub fn step(&self) -> &str {
        match self {
            StepError::Journal { step, .. }
            | StepError::Pve { step, .. }
            | StepError::Failed { step, .. }
            | StepError::TimedOut { step, .. }
            | StepError::Other { step, .. } => step,
        }
    }

    /// Whether Proxmox, or the way to it, failed in a way that may clear up by itself: the
    /// request not sent or its answer lost, a busy server, or a handler's 5xx that does not
    /// say the guest is missing or locked. A refusal (4xx), a missing guest, a failed task
    /// and every local failure are not.
    pub fn may_clear_up(&self) -> bool {
        let Some(e) = self.pve() else { return false };
        if e.is_transient() {
            return true;
        }
        matches!(e, PveError::Api { status, .. } if *status >= 500) && !e.is_missing()
    }
}

/// One running operation in the journal, writing its steps.
#[derive(Debug, Clone)]
pub struct OpJournal {
    journal: JournalHandle,
    op_id: OpId,
    kind: OpKind,
    deadline: Option<Arc<Deadline>>,
}

/// A job's signed timeout, as a deadline its operation's steps are held to: once it has
/// passed, no step that begins new work is started ([`StepError::TimedOut`],
/// [`StepName::held_to_deadline`]). A step in flight is never cut short (cutting a Proxmox
/// task or a helper call in half is the half-done destructive step), and the steps that only
/// finish or undo what the job began (start what it stopped, await a controller's health,
/// revert, roll back, compensate) still run: the operation's own handling of a failed step
/// runs as it would after any failure there, and as replay would after a kill between the
/// same two steps.
#[derive(Debug)]
pub struct Deadline {
    at: Timestamp,
    timeout_s: u32,
    clock: SharedClock,
    fired: AtomicBool,
}

impl Deadline {
    /// The deadline `timeout_s` seconds after `start`, read on `clock`.
    pub fn after(start: Timestamp, timeout_s: u32, clock: SharedClock) -> Self {
        let at = start
            .checked_add(jiff::SignedDuration::from_secs(i64::from(timeout_s)))
            .unwrap_or(Timestamp::MAX);
        Self {
            at,
            timeout_s,
            clock,
            fired: AtomicBool::new(false),
        }
    }

    /// Whether the deadline has refused a step.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// The timeout, seconds.
    pub fn timeout_s(&self) -> u32 {
        self.timeout_s
    }

    /// How long until the deadline (zero once it has passed).
    pub fn left(&self) -> std::time::Duration {
        let ms = self.at.as_millisecond() - self.clock.now().as_millisecond();
        std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0))
    }

    /// Whether `step` is refused: it begins new work and the clock is past the deadline.
    fn refuses(&self, step: StepName) -> bool {
        let refused = step.held_to_deadline() && self.clock.now() > self.at;
        if refused {
            self.fired.store(true, Ordering::SeqCst);
        }
        refused
    }
}

impl OpJournal {
    /// Begins an operation.
    pub async fn begin(journal: &JournalHandle, new: NewOperation) -> Result<Self, JournalError> {
        let kind = new.kind;
        let op_id = journal.begin_operation(new).await?;
        Ok(Self {
            journal: journal.clone(),
            op_id,
            kind,
            deadline: None,
        })
    }

    /// Begins an operation caused by a desired-state generation: `correlation_id` is the
    /// operator's id of that generation, recorded with the operation.
    pub async fn begin_correlated(
        journal: &JournalHandle,
        new: NewOperation,
        correlation_id: Option<String>,
    ) -> Result<Self, JournalError> {
        let kind = new.kind;
        let op_id = journal
            .begin_correlated_operation(new, correlation_id)
            .await?;
        Ok(Self {
            journal: journal.clone(),
            op_id,
            kind,
            deadline: None,
        })
    }

    /// Continues an operation found unfinished at start.
    pub fn resume(journal: &JournalHandle, op_id: OpId, kind: OpKind) -> Self {
        Self {
            journal: journal.clone(),
            op_id,
            kind,
            deadline: None,
        }
    }

    /// The same operation, its steps held to `deadline` (a job's signed timeout).
    #[must_use]
    pub fn with_deadline(mut self, deadline: Deadline) -> Self {
        self.deadline = Some(Arc::new(deadline));
        self
    }

    /// The timeout, seconds, when the operation's deadline refused a step or has passed.
    pub fn timed_out(&self) -> Option<u32> {
        self.deadline
            .as_ref()
            .filter(|d| d.fired() || d.left().is_zero())
            .map(|d| d.timeout_s())
    }

    /// How long until the operation's deadline, when it has one: retries of transient
    /// failures (a locked guest) stop there too.
    pub fn time_left(&self) -> Option<std::time::Duration> {
        self.deadline.as_ref().map(|d| d.left())
    }

    /// The operation id.
    pub fn op_id(&self) -> OpId {
        self.op_id
    }

    /// The operation's kind.
    pub fn kind(&self) -> OpKind {
        self.kind
    }

    /// The journal.
    pub fn journal(&self) -> &JournalHandle {
        &self.journal
    }

    fn journal_err(&self, step: &str) -> impl FnOnce(JournalError) -> StepError {
        let op_id = self.op_id;
        let step = step.to_owned();
        move |source| StepError::Journal {
            op_id,
            step,
            source,
        }
    }

    fn point(&self, step: StepName, phase: &str) {
        failpoint::hit(&format!("{}.{step}.{phase}", self.kind.as_str()));
    }

    /// Writes a step's intent; returns its sequence number.
    pub async fn intent(&self, step: StepName, detail: Value) -> Result<u32, StepError> {
        if let Some(deadline) = &self.deadline
            && deadline.refuses(step)
        {
            tracing::warn!(op_id = %self.op_id, step = step.as_str(), timeout_s = deadline.timeout_s(), "job timed out; step not started");
            return Err(StepError::TimedOut {
                op_id: self.op_id,
                step: step.as_str().to_owned(),
                timeout_s: deadline.timeout_s(),
            });
        }
        let seq = self
            .journal
            .step_intent(self.op_id, step.as_str(), detail)
            .await
            .map_err(self.journal_err(step.as_str()))?;
        self.point(step, "intent");
        Ok(seq)
    }

    /// Records a step's end.
    pub async fn finished(
        &self,
        step: StepName,
        seq: u32,
        outcome: StepOutcome,
    ) -> Result<(), StepError> {
        self.journal
            .step_finished(self.op_id, seq, outcome)
            .await
            .map_err(self.journal_err(step.as_str()))?;
        self.point(step, "done");
        Ok(())
    }

    /// Records the end of a step the journal holds under `stored`, a name the step table does
    /// not hold (replay closing a journal another version wrote); no failpoint.
    pub(super) async fn record_end(
        &self,
        stored: &str,
        seq: u32,
        outcome: StepOutcome,
    ) -> Result<(), StepError> {
        self.journal
            .step_finished(self.op_id, seq, outcome)
            .await
            .map_err(self.journal_err(stored))
    }

    /// A step without a Proxmox call of its own (e.g. a refused shrink, an
    /// extension step): intent, `run`, outcome.
    pub async fn local<T, Fut>(
        &self,
        step: StepName,
        detail: Value,
        run: Fut,
    ) -> Result<T, StepError>
    where
        Fut: Future<Output = Result<T, String>>,
    {
        let seq = self.intent(step, detail).await?;
        match run.await {
            Ok(value) => {
                self.finished(step, seq, StepOutcome::Ok { warnings: 0 })
                    .await?;
                Ok(value)
            }
            Err(reason) => {
                self.finished(
                    step,
                    seq,
                    StepOutcome::Failed {
                        error: reason.clone(),
                    },
                )
                .await?;
                Err(StepError::Other {
                    op_id: self.op_id,
                    step: step.as_str().to_owned(),
                    reason,
                })
            }
        }
    }

    /// A step without a Proxmox call of its own whose failure is a typed error: intent,
    /// `run`, outcome. The journal records the failure's whole chain; the error keeps it
    /// as its source ([`StepError::Failed`]).
    pub async fn local_typed<T, E, Fut>(
        &self,
        step: StepName,
        detail: Value,
        run: Fut,
    ) -> Result<T, StepError>
    where
        Fut: Future<Output = Result<T, E>>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let seq = self.intent(step, detail).await?;
        match run.await {
            Ok(value) => {
                self.finished(step, seq, StepOutcome::Ok { warnings: 0 })
                    .await?;
                Ok(value)
            }
            Err(source) => {
                let error = error_chain(&source);
                self.finished(step, seq, StepOutcome::Failed { error })
                    .await?;
                Err(StepError::Failed {
                    op_id: self.op_id,
                    step: step.as_str().to_owned(),
                    source: Box::new(source),
                })
            }
        }
    }

    /// A synchronous Proxmox call: intent, call, outcome.
    pub async fn call<T, Fut>(
        &self,
        step: StepName,
        detail: Value,
        call: Fut,
    ) -> Result<T, StepError>
    where
        Fut: Future<Output = Result<T, PveError>>,
    {
        let seq = self.intent(step, detail).await?;
        let result = call.await;
        self.end(step, seq, result.as_ref().map(|_| 0)).await?;
        result.map_err(|source| self.pve_error(step, source))
    }

    /// A task-starting Proxmox call: intent, call, UPID, wait, outcome.
    pub async fn task<P, Fut>(
        &self,
        pve: &P,
        op: Op,
        step: StepName,
        detail: Value,
        start: Fut,
    ) -> Result<TaskOutcome, StepError>
    where
        P: Pve,
        Fut: Future<Output = Result<Upid, PveError>>,
    {
        self.task_via(step, detail, start, |upid| async move {
            pve.wait_task(op, &upid).await
        })
        .await
    }

    /// A task-starting call whose task is followed by `follow` (for callers that reach
    /// Proxmox through another seam than [`Pve`]): intent, call, UPID, follow, outcome.
    pub async fn task_via<Start, Follow, FollowFut>(
        &self,
        step: StepName,
        detail: Value,
        start: Start,
        follow: Follow,
    ) -> Result<TaskOutcome, StepError>
    where
        Start: Future<Output = Result<Upid, PveError>>,
        Follow: FnOnce(Upid) -> FollowFut,
        FollowFut: Future<Output = Result<TaskOutcome, PveError>>,
    {
        let look = |_| async { Ok(None) };
        self.task_looked(step, detail, start, look, follow).await
    }

    /// Like [`OpJournal::task_via`], but a call whose answer was lost is looked up with
    /// `look` (given the wall-clock time just before the call) before it is judged: a task
    /// found is followed as if its UPID had arrived; none found, the step failed.
    pub async fn task_looked<Start, Look, LookFut, Follow, FollowFut>(
        &self,
        step: StepName,
        detail: Value,
        start: Start,
        look: Look,
        follow: Follow,
    ) -> Result<TaskOutcome, StepError>
    where
        Start: Future<Output = Result<Upid, PveError>>,
        Look: FnOnce(jiff::Timestamp) -> LookFut,
        LookFut: Future<Output = Result<Option<Upid>, PveError>>,
        Follow: FnOnce(Upid) -> FollowFut,
        FollowFut: Future<Output = Result<TaskOutcome, PveError>>,
    {
        // Proxmox stamps its tasks with the host's wall clock, not the agent's clock seam.
        let asked_at = jiff::Timestamp::now();
        let seq = self.intent(step, detail).await?;
        let upid = match start.await {
            Ok(upid) => upid,
            Err(source) => {
                let found = if source.is_outcome_unknown() {
                    match look(asked_at).await {
                        Ok(found) => found,
                        Err(e) => {
                            tracing::warn!(op_id = %self.op_id, step = %step, error = %error_chain(&e), "looking for the task of a lost answer failed");
                            None
                        }
                    }
                } else {
                    None
                };
                let Some(upid) = found else {
                    self.end(step, seq, Err(&source)).await?;
                    return Err(self.pve_error(step, source));
                };
                tracing::info!(op_id = %self.op_id, step = %step, upid = %upid, "the answer was lost but the task exists; following it");
                upid
            }
        };
        self.sent(step, seq, &upid).await?;
        let result = follow(upid).await;
        self.end(step, seq, result.as_ref().map(|o| o.warnings))
            .await?;
        result.map_err(|source| self.pve_error(step, source))
    }

    /// Records the UPID of a step's task.
    pub async fn sent(&self, step: StepName, seq: u32, upid: &Upid) -> Result<(), StepError> {
        self.journal
            .step_sent(self.op_id, seq, Some(upid.as_str().to_owned()))
            .await
            .map_err(self.journal_err(step.as_str()))?;
        self.point(step, "sent");
        Ok(())
    }

    /// Waits for a step's task and records how it ended.
    pub async fn wait<P: Pve>(
        &self,
        pve: &P,
        op: Op,
        step: StepName,
        seq: u32,
        upid: &Upid,
    ) -> Result<TaskOutcome, StepError> {
        let result = pve.wait_task(op, upid).await;
        self.end(step, seq, result.as_ref().map(|o| o.warnings))
            .await?;
        result.map_err(|source| self.pve_error(step, source))
    }

    fn pve_error(&self, step: StepName, source: PveError) -> StepError {
        StepError::Pve {
            op_id: self.op_id,
            step: step.as_str().to_owned(),
            source,
        }
    }

    async fn end(
        &self,
        step: StepName,
        seq: u32,
        result: Result<u32, &PveError>,
    ) -> Result<(), StepError> {
        let outcome = match result {
            Ok(warnings) => StepOutcome::Ok { warnings },
            Err(e) => StepOutcome::Failed {
                error: error_chain(e),
            },
        };
        self.finished(step, seq, outcome).await
    }

    /// Ends the operation.
    pub async fn finish(&self, status: OpStatus, error: Option<String>) -> Result<(), StepError> {
        self.journal
            .finish_operation(self.op_id, status, error)
            .await
            .map_err(self.journal_err("finish"))
    }
}

#[cfg(test)]
#[path = "steps_tests.rs"]
mod tests;
