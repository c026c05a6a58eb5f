//! systemd's watchdog: `WATCHDOG=1` at half the interval systemd asks for
//! (`WATCHDOG_USEC`, the unit's `WatchdogSec=`), each one only after a round trip through
//! the journal thread, which every operation of the agent needs, and only while the hub loop
//! makes progress (DESIGN §12, decision 0104). A wedged journal, a hub loop stuck for longer
//! than `[poll] stall_limit_ms`, or a runtime that no longer runs this task, stops the pings,
//! and systemd restarts the agent once a whole interval passes without one.
//!
//! The hub loop's progress ([`Progress`]) is that the loop runs, not that the hub answers: the
//! loop beats when it begins a round, and while it is inside one of its waits (a long poll held
//! by the hub, a poll that fails after its timeout, the backoff after it, the pause between
//! polls) it counts as beating now, with no timer waking the idle agent to say so. An
//! unreachable hub keeps it beating; a round stuck anywhere else (an await that never ends, a
//! lock never released) does not. Before the loop's first beat (enrollment, replay) only the
//! journal is judged.
//!
//! The pings do not come from the reconcile loop: a pass may take longer than the
//! interval, and the loop sleeps `reconcile.interval_seconds` between passes.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::ops::journal::JournalHandle;

/// The hub loop's progress: when it last beat, and whether it is inside one of its waits.
/// Cheap to clone; every clone is the same clock.
#[derive(Debug, Clone)]
pub struct Progress {
    /// When the clock started.
    origin: Instant,
    /// Milliseconds from `origin` to the last beat, plus one (0: never beat).
    last: Arc<AtomicU64>,
    /// How many of the loop's waits are in progress.
    waits: Arc<AtomicU64>,
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
            waits: Arc::new(AtomicU64::new(0)),
        }
    }
}

/// One wait of the loop in progress: counted from its start until it ends or is dropped (a
/// `select!` that took another branch), which is a beat.
struct InWait<'a>(&'a Progress);

impl Drop for InWait<'_> {
    fn drop(&mut self) {
        self.0.waits.fetch_sub(1, Ordering::AcqRel);
        self.0.beat();
    }
}

impl Progress {
    /// The loop made progress now.
    pub fn beat(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms.saturating_add(1), Ordering::Relaxed);
    }

    /// How long since the last beat; `None` before the first. Zero while the loop is inside
    /// one of its waits.
    pub fn since(&self) -> Option<Duration> {
        if self.waits.load(Ordering::Acquire) > 0 {
            return Some(Duration::ZERO);
        }
        let last = self.last.load(Ordering::Relaxed).checked_sub(1)?;
        let now = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        Some(Duration::from_millis(now.saturating_sub(last)))
    }

    /// Runs `wait` (a wait for the hub, a pause), the loop counting as beating all through it:
    /// the loop waiting as it should is progress. Each wait is bounded by its own timeout, so
    /// a loop stuck elsewhere still stops beating; a timer beating through the wait would wake
    /// the idle agent twice a second for nothing more.
    pub async fn waiting<F: Future>(&self, wait: F) -> F::Output {
        self.beat();
        self.waits.fetch_add(1, Ordering::AcqRel);
        let _in_wait = InWait(self);
        wait.await
    }
}

/// The watchdog loop.
#[derive(Debug)]
pub struct WatchdogTask {
    journal: JournalHandle,
    period: Duration,
    /// The hub loop's progress and how long it may stall.
    progress: Option<(Progress, Duration)>,
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
            progress: None,
        }
    }

    /// The same loop, pinging only while `progress` beat within `limit` (once it has beaten).
    #[must_use]
    pub fn with_progress(mut self, progress: Progress, limit: Duration) -> Self {
        self.progress = Some((progress, limit));
        self
    }

    /// How often it pings.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Pings systemd until `cancel`.
    pub async fn run(self, cancel: CancellationToken) {
        self.ping_while_alive(cancel, systemd_ping).await;
    }

    /// Calls `ping` after each journal round trip that answers within the period, while the
    /// hub loop makes progress.
    async fn ping_while_alive(self, cancel: CancellationToken, mut ping: impl FnMut()) {
        let mut ticker = tokio::time::interval(self.period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = ticker.tick() => {}
            }
            if let Some((progress, limit)) = &self.progress
                && let Some(stalled) = progress.since().filter(|s| s >= limit)
            {
                tracing::error!(
                    stalled_ms = u64::try_from(stalled.as_millis()).unwrap_or(u64::MAX),
                    limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
                    "the hub loop has made no progress; no watchdog ping (systemd restarts the agent)"
                );
                continue;
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pings_stop_while_the_hub_loop_stalls_but_not_while_it_waits() {
        let dir = tempfile::tempdir().unwrap();
        let journal =
            JournalHandle::open(&dir.path().join("journal.sqlite"), SystemClock::shared())
                .await
                .unwrap();
        let pings = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&pings);
        let cancel = CancellationToken::new();
        let progress = Progress::default();
        let task = WatchdogTask::new(journal.clone(), Duration::from_millis(200))
            .with_progress(progress.clone(), Duration::from_millis(800));
        let running = tokio::spawn(task.ping_while_alive(cancel.clone(), move || {
            count.fetch_add(1, Ordering::SeqCst);
        }));
        // Before the loop's first beat (enrollment, replay), only the journal is judged.
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(
            pings.load(Ordering::SeqCst) >= 2,
            "pings before the loop runs"
        );

        // A loop waiting (a long poll, a backoff after an unreachable hub) keeps beating.
        let waiter = progress.clone();
        let waited = tokio::spawn(async move {
            waiter
                .waiting(tokio::time::sleep(Duration::from_millis(1500)))
                .await
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = pings.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert!(
            pings.load(Ordering::SeqCst) >= before + 5,
            "a waiting loop is not a stalled one"
        );
        waited.await.unwrap();

        // Then the loop stops beating: after the limit, no ping.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let stalled = pings.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(
            pings.load(Ordering::SeqCst),
            stalled,
            "no ping while stalled"
        );

        // A beat again: pings resume.
        progress.beat();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(pings.load(Ordering::SeqCst) > stalled, "pings resume");
        cancel.cancel();
        running.await.unwrap();
        journal.close().await.unwrap();
    }

    /// A wait counts as progress only while it lasts: one that a `select!` dropped for another
    /// branch leaves the loop judged by its last beat, the end of that wait.
    #[tokio::test]
    async fn a_wait_counts_while_it_lasts_and_a_dropped_one_ends_it() {
        let progress = Progress::default();
        assert_eq!(progress.since(), None, "never beat");
        tokio::select! {
            () = progress.waiting(tokio::time::sleep(Duration::from_secs(3600))) => {
                unreachable!("the other branch ends first")
            }
            () = async {
                tokio::time::sleep(Duration::from_millis(700)).await;
                assert_eq!(progress.since(), Some(Duration::ZERO), "inside the wait");
            } => {}
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let since = progress.since().unwrap();
        assert!(
            since >= Duration::from_millis(250) && since < Duration::from_millis(700),
            "judged from the dropped wait's end, not its start: {since:?}"
        );
    }
}
