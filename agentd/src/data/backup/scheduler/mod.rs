//! The agent's own policy backups: when a guest's backup is due and its deadline passed
//! without the controller backing up, the agent takes the backup itself; every later tier
//! is backed up on its own schedule the same way (with no controller to wait for).
//!
//! ```text
//!  wake ──► plan (or policy)? ──► every running desired guest, every tier:
//!             verdict (BackupService::tier_verdict; tier 0's is GET /v1/backup/due's)
//!             ├─ not due ................................. wait for the next scheduled time
//!             ├─ deadline before the scheduler started ... missed, wait for the next one
//!             ├─ a run queued or in progress ............. leave it
//!             ├─ now < deadline or < retry time .......... wait for it
//!             └─ otherwise ............................... BackupService::start (initiator: scheduler)
//!  sleep until the earliest moment found (a run's next scheduled time included), at most
//!  `max_sleep`, or until the policy or the tier plan changes or a run ends
//! ```
//!
//! With a tier plan, the first tier is scheduled from the plan too, so its schedule and its
//! retention (raised to the signed floor) always change together.
//!
//! A deadline that passed while the agent was not running is not caught up on (as
//! Proxmox's own backup jobs without `repeat-missed`): the next scheduled time is.
//! A run the scheduler started that fails is retried after a backoff: `first_backoff`
//! (5 min), doubling with each consecutive failure, never longer than the schedule's
//! interval (a day when the interval is unknown). A success ends the backoff.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::tiers::{Tier, TierPlan};
use super::{
    BackupError, BackupInitiator, BackupPhase, BackupRequest, BackupService, DueVerdict, GuestRef,
};
use crate::ops::journal::{AuditEvent, OpId};
use bosun_proto::desired::BackupPolicy;

mod guests;

pub use guests::{
    DesiredRunningGuests, GuestSourceError, KindMismatch, recorded_of, running_guests,
};

/// The guests the scheduler backs up.
pub trait GuestSource: Send + Sync + std::fmt::Debug {
    /// The desired guests that run now, with their vmids.
    fn running_guests(&self) -> BoxFuture<'_, Result<Vec<GuestRef>, GuestSourceError>>;
}

/// How the scheduler paces itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// The longest sleep between passes, so changes are picked up.
    pub max_sleep: Duration,
    /// The wait after a first failed run; doubles per consecutive failure.
    pub first_backoff: Duration,
    /// The wait after a first pass that could not decide for every guest (the guests or a
    /// storage's backups could not be read); doubles per such pass, at most `max_sleep`.
    pub first_unsure_retry: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_sleep: Duration::from_secs(60),
            first_backoff: Duration::from_secs(5 * 60),
            first_unsure_retry: Duration::from_secs(5),
        }
    }
}

/// What the scheduler does about one guest now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// No backup is due; look again at the next scheduled time.
    NotDue {
        /// The next scheduled time, if any.
        next_run: Option<Timestamp>,
    },
    /// The deadline passed before the scheduler started; look again at the next scheduled time.
    Missed {
        /// The next scheduled time, if any.
        next_run: Option<Timestamp>,
    },
    /// A run is queued or in progress; leave it.
    Busy,
    /// Due, but the controller still has time, or a failed run waits out its backoff.
    WaitUntil(Timestamp),
    /// Due and the deadline passed: back up now.
    BackUp,
}

impl Decision {
    /// When to look at this guest again (`None`: at the latest after the longest sleep).
    pub fn wake_at(self) -> Option<Timestamp> {
        match self {
            Self::NotDue { next_run } | Self::Missed { next_run } => next_run,
            Self::WaitUntil(at) => Some(at),
            Self::Busy | Self::BackUp => None,
        }
    }
}

/// Decides for one guest at `now`: the scheduler started at `started_at`; `busy` says a run
/// is queued or in progress; `retry_at` is when a failed run may be retried.
pub fn decide(
    verdict: &DueVerdict,
    now: Timestamp,
    started_at: Timestamp,
    busy: bool,
    retry_at: Option<Timestamp>,
) -> Decision {
    let (true, Some(deadline)) = (verdict.due, verdict.deadline) else {
        return Decision::NotDue {
            next_run: verdict.next_run,
        };
    };
    // A deadline that passed before the scheduler started is missed, unless a later due
    // event (one desired state adds) still has its deadline ahead.
    let deadline = if deadline < started_at {
        match verdict.latest_deadline.filter(|at| *at >= started_at) {
            Some(later) => later,
            None => {
                return Decision::Missed {
                    next_run: verdict.next_run,
                };
            }
        }
    } else {
        deadline
    };
    if busy {
        return Decision::Busy;
    }
    let not_before = retry_at.map_or(deadline, |r| r.max(deadline));
    if now < not_before {
        Decision::WaitUntil(not_before)
    } else {
        Decision::BackUp
    }
}

/// The wait after `failures` consecutive failed runs: `first` doubling, at most `interval`
/// (a day when unknown), at least a second.
pub fn backoff(first: Duration, failures: u32, interval: Option<SignedDuration>) -> Duration {
    let cap = interval
        .and_then(|i| Duration::try_from(i).ok())
        .unwrap_or(Duration::from_secs(86_400));
    let doublings = failures.saturating_sub(1).min(20);
    let wait = first.saturating_mul(1 << doublings);
    wait.min(cap).max(Duration::from_secs(1))
}

/// The longest sleep after `unsure` consecutive passes that could not decide for every
/// guest: `max_sleep` after a pass that could, else `first_unsure_retry` doubling up to it.
/// A listing that failed once (a storage that was not active yet) is not left a minute.
pub fn longest_sleep(config: &SchedulerConfig, unsure: u32) -> Duration {
    if unsure == 0 {
        return config.max_sleep;
    }
    let doublings = (unsure - 1).min(20);
    config
        .first_unsure_retry
        .saturating_mul(1 << doublings)
        .min(config.max_sleep)
}

/// Consecutive failures of the scheduler's runs of one guest on one tier.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Retry {
    failures: u32,
    last_failed_run: String,
    retry_at: Timestamp,
}

/// Takes the policy backup of every running desired guest whose deadline passed.
#[derive(Debug)]
pub struct PolicyScheduler {
    backups: BackupService,
    guests: Arc<dyn GuestSource>,
    policy: watch::Receiver<Option<BackupPolicy>>,
    config: SchedulerConfig,
    started_at: Timestamp,
    retries: HashMap<(String, u32), Retry>,
    /// Changes with the tier plan, if the service follows one.
    tiers: Option<watch::Receiver<TierPlan>>,
    /// Changes when a backup run ends.
    finished: watch::Receiver<u64>,
    /// Whether the pass under way could not decide for some guest.
    unsure: bool,
    /// Consecutive passes that could not decide for every guest.
    unsure_passes: u32,
}

impl PolicyScheduler {
    /// A scheduler over `guests`, following `policy`, starting runs through `backups`.
    pub fn new(
        backups: BackupService,
        guests: Arc<dyn GuestSource>,
        policy: watch::Receiver<Option<BackupPolicy>>,
        config: SchedulerConfig,
    ) -> Self {
        let started_at = backups.clock().now();
        let tiers = backups.tier_changes();
        let finished = backups.journal().backups_changed();
        Self {
            tiers,
            finished,
            backups,
            guests,
            policy,
            config,
            started_at,
            retries: HashMap::new(),
            unsure: false,
            unsure_passes: 0,
        }
    }

    /// Runs passes until `cancel` fires.
    pub async fn run(mut self, cancel: CancellationToken) {
        tracing::info!(
            max_sleep_s = self.config.max_sleep.as_secs(),
            "backup scheduler started"
        );
        loop {
            let wake = self.pass().await;
            self.unsure_passes = if self.unsure {
                self.unsure_passes.saturating_add(1)
            } else {
                0
            };
            let clock = Arc::clone(self.backups.clock());
            let now = clock.now();
            // An absolute time: a wake time that passed during the pass, or a clock that
            // moves before the sleep starts, means look again at once.
            let longest = SignedDuration::try_from(longest_sleep(&self.config, self.unsure_passes))
                .ok()
                .and_then(|d| now.checked_add(d).ok())
                .unwrap_or(Timestamp::MAX);
            let until = wake.map_or(longest, |at| at.min(longest));
            let tiers_changed = async {
                match self.tiers.as_mut() {
                    Some(rx) => {
                        if rx.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = cancel.cancelled() => break,
                () = clock.sleep_until(until) => {}
                () = tiers_changed => {}
                // A run ended: its guest may be due on another tier, or wait out a backoff.
                Ok(()) = self.finished.changed() => {}
                changed = self.policy.changed() => {
                    if changed.is_err() {
                        // The policy feed is gone (the agent stops): only the sleep remains.
                        tokio::select! {
                            () = cancel.cancelled() => break,
                            () = clock.sleep_until(until) => {}
                        }
                    }
                }
            }
        }
        tracing::info!("backup scheduler stopped");
    }

    /// One pass over the guests; returns the earliest moment worth waking for.
    pub async fn pass(&mut self) -> Option<Timestamp> {
        self.unsure = false;
        self.finished.borrow_and_update();
        let policy = self.policy.borrow_and_update().clone();
        let planned = match self.tiers.as_mut() {
            Some(tiers) => {
                // Read below through the service; marked seen so only a new change wakes us.
                tiers.borrow_and_update();
                true
            }
            None => false,
        };
        // No policy or plan yet: nothing is due; a change wakes the loop.
        if policy.is_none() && !planned {
            return None;
        }
        let guests = match self.guests.running_guests().await {
            Ok(guests) => guests,
            Err(e) => {
                tracing::warn!(error = %e, "backup scheduler could not list guests; trying again later");
                self.unsure = true;
                return None;
            }
        };
        // With a plan every tier, the first included, is scheduled from it: its schedule and
        // its retention (raised to the signed floor) change together, never one before the
        // other. Without one, the first tier follows the policy.
        let first = u32::from(!planned);
        let tiers: Vec<Tier> = (first..)
            .map_while(|index| self.backups.tier(index))
            .collect();
        let mut wake: Option<Timestamp> = None;
        let mut earliest = |at: Option<Timestamp>| {
            wake = match (wake, at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        };
        for guest in guests {
            if let (false, Some(policy)) = (planned, &policy) {
                earliest(self.consider(&guest, policy).await);
            }
            for tier in &tiers {
                earliest(self.consider_tier(&guest, tier).await);
            }
        }
        wake
    }

    /// Decides for one guest and acts; returns when to look at it again.
    async fn consider(&mut self, guest: &GuestRef, policy: &BackupPolicy) -> Option<Timestamp> {
        let verdict = match self.backups.policy_verdict(guest, policy).await {
            Ok(v) => v.verdict,
            Err(e) => {
                tracing::warn!(guest_id = %guest.guest_id, vmid = %guest.vmid, error = %e, "backup scheduler could not evaluate the policy");
                self.unsure = true;
                return None;
            }
        };
        self.act(guest, 0, &verdict).await
    }

    /// Decides for one guest on a tier after the first (its own schedule, no controller
    /// to wait for) and acts; returns when to look at it again.
    async fn consider_tier(&mut self, guest: &GuestRef, tier: &Tier) -> Option<Timestamp> {
        let verdict = match self.backups.tier_verdict(guest, tier).await {
            Ok(v) => v.verdict,
            Err(e) => {
                tracing::warn!(guest_id = %guest.guest_id, vmid = %guest.vmid, tier = tier.index, storage = %tier.storage, error = %e, "backup scheduler could not evaluate the tier");
                self.unsure = true;
                return None;
            }
        };
        self.act(guest, tier.index, &verdict).await
    }

    async fn act(
        &mut self,
        guest: &GuestRef,
        tier: u32,
        verdict: &DueVerdict,
    ) -> Option<Timestamp> {
        let busy = self.note_last_run(guest, tier, verdict);
        let now = self.backups.clock().now();
        let key = (guest.guest_id.clone(), tier);
        let retry_at = self.retries.get(&key).map(|r| r.retry_at);
        let decision = decide(verdict, now, self.started_at, busy, retry_at);
        if decision == Decision::BackUp {
            self.back_up(guest, tier, verdict).await;
        }
        // A run started or going on: the end of the run wakes the loop, the next scheduled
        // time at the latest.
        decision.wake_at().or(verdict.next_run)
    }

    /// Reads the guest's latest run: counts a newly failed scheduler run, forgets the
    /// backoff after a success. Returns whether a run is queued or in progress.
    fn note_last_run(&mut self, guest: &GuestRef, tier: u32, verdict: &DueVerdict) -> bool {
        let Some(run) = self.backups.status_of(&guest.guest_id, tier) else {
            return false;
        };
        let key = (guest.guest_id.clone(), tier);
        match run.phase {
            BackupPhase::Done => {
                self.retries.remove(&key);
                false
            }
            BackupPhase::Failed if run.initiator == BackupInitiator::Scheduler => {
                let known = self
                    .retries
                    .get(&key)
                    .is_some_and(|r| r.last_failed_run == run.run_id);
                if !known {
                    let failures = self
                        .retries
                        .get(&key)
                        .map_or(1, |r| r.failures.saturating_add(1));
                    let wait = backoff(self.config.first_backoff, failures, verdict.interval);
                    let step = SignedDuration::try_from(wait).unwrap_or(SignedDuration::MAX);
                    let retry_at = run
                        .updated_at
                        .saturating_add(step)
                        .unwrap_or(Timestamp::MAX);
                    tracing::warn!(guest_id = %guest.guest_id, vmid = %guest.vmid, tier, run_id = %run.run_id, failures, retry_at = %retry_at, error = run.error.as_deref().unwrap_or(""), "scheduled backup failed; backing off");
                    self.retries.insert(
                        key,
                        Retry {
                            failures,
                            last_failed_run: run.run_id,
                            retry_at,
                        },
                    );
                }
                false
            }
            BackupPhase::Failed => false,
            _ => true,
        }
    }

    async fn back_up(&mut self, guest: &GuestRef, tier: u32, verdict: &DueVerdict) {
        let request = BackupRequest {
            tier,
            quiesced: false,
            max_quiesce_s: None,
            initiator: BackupInitiator::Scheduler,
        };
        let due_since = verdict.due_since.map(|t| t.to_string());
        let deadline = verdict.deadline.map(|t| t.to_string());
        let due = due_since.as_deref().unwrap_or("");
        let request_id = Some(if tier == 0 {
            format!("scheduler:{due}")
        } else {
            format!("scheduler:tier{tier}:{due}")
        });
        match self.backups.start(guest.clone(), request, request_id).await {
            Ok(run) => {
                let reason = if tier == 0 {
                    "deadline passed, controller did not back up"
                } else {
                    "the tier's scheduled time passed"
                };
                tracing::info!(guest_id = %guest.guest_id, vmid = %guest.vmid, tier, run_id = %run.run_id, due_since = due_since.as_deref().unwrap_or(""), deadline = deadline.as_deref().unwrap_or(""), reason, "backup started by the agent");
                let op_id = uuid::Uuid::parse_str(&run.run_id).ok().map(OpId::from);
                let event = AuditEvent {
                    op_id,
                    guest_id: Some(guest.guest_id.clone()),
                    vmid: Some(guest.vmid.get()),
                    detail: serde_json::json!({
                        "reason": reason,
                        "tier": tier,
                        "run_id": run.run_id,
                        "due_since": due_since,
                        "deadline": deadline,
                    }),
                    ..AuditEvent::new("backup.scheduled")
                };
                if let Err(e) = self.backups.journal().append_audit(event).await {
                    tracing::error!(guest_id = %guest.guest_id, error = %e, "could not audit a scheduled backup");
                }
            }
            // A controller's run got there first: nothing to do.
            Err(BackupError::InProgress { phase, .. }) => {
                tracing::debug!(guest_id = %guest.guest_id, phase, "backup already in progress");
            }
            Err(e) => {
                tracing::warn!(guest_id = %guest.guest_id, vmid = %guest.vmid, error = %e, "backup scheduler could not start a backup");
            }
        }
    }
}

#[cfg(test)]
mod tests;
