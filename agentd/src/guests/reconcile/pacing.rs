//! When the reconcile loop's next pass runs, from how the passes before it ended.
//!
//! A pass whose actions all failed is followed by a pause that doubles with each such pass
//! in a row (from [`BACKOFF_FIRST`] up to [`BACKOFF_CAP`]) instead of an immediate next
//! pass; a pass where some actions failed and others succeeded pauses [`BACKOFF_FIRST`], so
//! one failing guest does not hold the others back. Passes that act and leave more to do
//! follow each other at once, but at most [`PROGRESS_STREAK`] in a row: an action that
//! succeeds without the host ever converging (Proxmox not showing what was set) pauses the
//! loop instead of spinning it against Proxmox.

use std::time::Duration;

/// The pause after the first failing pass.
pub const BACKOFF_FIRST: Duration = Duration::from_secs(1);
/// The longest pause between failing passes.
pub const BACKOFF_CAP: Duration = Duration::from_secs(120);

/// Passes in a row that acted and left more to do before the loop pauses
/// [`BACKOFF_FIRST`] all the same.
pub const PROGRESS_STREAK: u32 = 8;

/// The pause after `failures` failing passes in a row.
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    BACKOFF_FIRST
        .saturating_mul(1 << doublings)
        .min(BACKOFF_CAP)
}

/// How a pass ended, for choosing when the next one runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PassEnd {
    /// Nothing more to do now: the next pass at the interval.
    Settled,
    /// Actions succeeded and more remain: the next pass at once.
    Progressed,
    /// Some actions failed and others succeeded: progress was made, so the pause is the
    /// first backoff step, not a longer one (one failing guest must not hold the others
    /// back for minutes).
    Partly,
    /// Every action failed: the next pass after a backoff that grows with each such pass.
    Failed,
}

impl PassEnd {
    /// Its `outcome` label in the agent's metrics.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Settled => "settled",
            Self::Progressed => "progressed",
            Self::Partly => "partly_failed",
            Self::Failed => "failed",
        }
    }
}

/// When the next pass runs, from how the passes before ended.
#[derive(Debug)]
pub(super) struct Pacing {
    /// The pause after a settled pass.
    interval: Duration,
    /// Passes in a row where every action failed (a partly failed pass counts as one).
    failures: u32,
    /// Passes in a row that progressed.
    streak: u32,
}

impl Pacing {
    /// Pacing that pauses `interval` after a settled pass.
    pub(super) fn new(interval: Duration) -> Self {
        Self {
            interval,
            failures: 0,
            streak: 0,
        }
    }

    /// A new desired state: whatever failed before may succeed now.
    pub(super) fn reset(&mut self) {
        self.failures = 0;
        self.streak = 0;
    }

    /// The pause before the next pass after one that ended `end`; `None` for at once.
    pub(super) fn after(&mut self, end: PassEnd) -> Option<Duration> {
        if end != PassEnd::Progressed {
            self.streak = 0;
        }
        match end {
            PassEnd::Progressed => {
                self.failures = 0;
                self.streak += 1;
                if self.streak < PROGRESS_STREAK {
                    return None;
                }
                tracing::warn!(
                    passes = self.streak,
                    "reconcile passes keep acting without the host converging; pausing"
                );
                self.streak = 0;
                Some(BACKOFF_FIRST)
            }
            PassEnd::Settled => {
                self.failures = 0;
                Some(self.interval)
            }
            PassEnd::Partly => {
                self.failures = 1;
                Some(backoff(1))
            }
            PassEnd::Failed => {
                self.failures = self.failures.saturating_add(1);
                let pause = backoff(self.failures);
                tracing::info!(
                    failures = self.failures,
                    pause_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                    "reconcile pass failed; backing off"
                );
                Some(pause)
            }
        }
    }
}

/// How a pass that acted ended: `remaining` whether a fresh plan still has actions,
/// `succeeded`/`failed` how many of this pass's actions did.
pub(super) fn pass_end(remaining: bool, succeeded: usize, failed: usize) -> PassEnd {
    if !remaining {
        PassEnd::Settled
    } else if failed == 0 {
        PassEnd::Progressed
    } else if succeeded == 0 {
        PassEnd::Failed
    } else {
        PassEnd::Partly
    }
}

#[cfg(test)]
#[path = "pacing_tests.rs"]
mod tests;
