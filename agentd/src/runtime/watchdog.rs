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

use crate::ops::journal::JournalHandle;

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

    /// Pings systemd until `cancel`.
    pub async fn run(self, cancel: CancellationToken) {
        self.ping_while_alive(cancel, systemd_ping).await;
    }

    /// Calls `ping` after each journal round trip that answers within the period.
    async fn ping_while_alive(self, cancel: CancellationToken, mut ping: impl FnMut()) {
        let mut ticker = tokio::time::interval(self.period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let probe = self.journal.call(|_| Ok(()));
            match tokio::time::timeout(self.period, probe).await {
                Ok(Ok(())) => ping(),
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

fn systemd_ping() {
    if let Err(err) = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]) {
        tracing::warn!(error = %err, "could not send the watchdog ping");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::clock::SystemClock;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pings_stop_while_the_journal_is_wedged_and_resume_after() {
        let dir = tempfile::tempdir().unwrap();
        let journal =
            JournalHandle::open(&dir.path().join("journal.sqlite"), SystemClock::shared())
                .await
                .unwrap();
        let pings = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&pings);
        let cancel = CancellationToken::new();
        let task = WatchdogTask::new(journal.clone(), Duration::from_millis(200));
        assert_eq!(task.period(), Duration::from_millis(100));
        let running = tokio::spawn(task.ping_while_alive(cancel.clone(), move || {
            count.fetch_add(1, Ordering::SeqCst);
        }));
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(
            pings.load(Ordering::SeqCst) >= 2,
            "pings while the journal answers"
        );

        // The journal thread is busy for 1.5 s: no round trip completes, so no ping.
        let wedge = journal.clone();
        let wedged = tokio::spawn(async move {
            wedge
                .call(|_| {
                    std::thread::sleep(Duration::from_millis(1500));
                    Ok(())
                })
                .await
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = pings.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(pings.load(Ordering::SeqCst), before, "no ping while wedged");

        wedged.await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(pings.load(Ordering::SeqCst) > before, "pings resume");
        cancel.cancel();
        running.await.unwrap();
        journal.close().await.unwrap();
    }
}
