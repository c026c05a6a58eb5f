//! systemd's watchdog: `WATCHDOG=1` at half the interval systemd asks for
//! (`WATCHDOG_USEC`, the unit's `WatchdogSec=`), each one only after a round trip through
//! the journal thread, which every operation of the agent needs. A wedged journal, or a
//! runtime that no longer runs this task, stops the pings, and systemd restarts the agent
//! once a whole interval passes without one.
//!
//! The pings do not come from the reconcile loop: a pass may take longer than the
//! interval, and the loop sleeps `reconcile.interval_seconds` between passes.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::journal::JournalHandle;

/// The watchdog loop.
#[derive(Debug)]
pub struct WatchdogTask {
    journal: JournalHandle,
    period: Duration,
}

impl WatchdogTask {
    /// The loop systemd asks for: `None` unless `WATCHDOG_USEC` names a non-zero interval
    /// for this process (`WATCHDOG_PID`, when set, must be this process).
    pub fn from_env(journal: JournalHandle) -> Option<Self> {
        let interval = sd_notify::watchdog_enabled().filter(|i| !i.is_zero())?;
        Some(Self::new(journal, interval))
    }

    /// A loop for a watchdog `interval`: it pings every `interval / 2`.
    pub fn new(journal: JournalHandle, interval: Duration) -> Self {
        Self {
            journal,
            period: (interval / 2).max(Duration::from_millis(1)),
        }
    }

    /// How often it pings.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Pings until `cancel`.
    pub async fn run(self, cancel: CancellationToken) {
        let mut ticker = tokio::time::interval(self.period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let probe = self.journal.call(|_| Ok(()));
            match tokio::time::timeout(self.period, probe).await {
                Ok(Ok(())) => {
                    if let Err(err) = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]) {
                        tracing::warn!(error = %err, "could not send the watchdog ping");
                    }
                }
                Ok(Err(err)) => tracing::warn!(
                    error = &err as &dyn std::error::Error,
                    "the journal failed its liveness call; no watchdog ping"
                ),
                Err(_) => tracing::warn!(
                    waited_ms = u64::try_from(self.period.as_millis()).unwrap_or(u64::MAX),
                    "the journal did not answer its liveness call; no watchdog ping"
                ),
            }
        }
    }
}
