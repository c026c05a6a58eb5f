//! The clock seam: every piece of the agent that reads the time or waits goes
//! through a [`Clock`], so tests can run days of policy in milliseconds.
//!
//! - [`SystemClock`] reads the wall clock and sleeps on the tokio timer.
//! - [`ManualClock`] holds a time that only moves when a test calls
//!   [`ManualClock::advance`] or [`ManualClock::set`]; sleepers wake as soon as
//!   the time passes their deadline, without any real waiting.
//!
//! Share a clock as [`SharedClock`] (`Arc<dyn Clock>`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;

/// A boxed future returned by [`Clock::sleep`].
pub type SleepFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// A clock shared between tasks.
pub type SharedClock = Arc<dyn Clock>;

/// The time source of the agent.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current instant.
    fn now(&self) -> Timestamp;

    /// Wait until `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> SleepFuture<'_>;

    /// Wait until this clock reads `at` or later; at once if it already does. Unlike a
    /// `sleep` computed from an earlier reading, a clock that moved in between is not
    /// waited for twice.
    fn sleep_until(&self, at: Timestamp) -> SleepFuture<'_> {
        let left = Duration::try_from(at.duration_since(self.now())).unwrap_or(Duration::ZERO);
        self.sleep(left)
    }
}

/// The real clock: the system's wall time and the tokio timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl SystemClock {
    /// A system clock behind an `Arc`, ready to share.
    pub fn shared() -> SharedClock {
        Arc::new(SystemClock)
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn sleep(&self, duration: Duration) -> SleepFuture<'_> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A clock that only moves when told to. Cloning shares the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<watch::Sender<Timestamp>>,
}

impl ManualClock {
    /// A manual clock reading `start`.
    pub fn new(start: Timestamp) -> Self {
        let (now, _) = watch::channel(start);
        Self { now: Arc::new(now) }
    }

    /// The same clock as a [`SharedClock`].
    pub fn shared(&self) -> SharedClock {
        Arc::new(self.clone())
    }

    /// Move the clock forward by `duration` and wake every sleeper whose
    /// deadline has passed.
    pub fn advance(&self, duration: Duration) {
        let step = SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX);
        self.now.send_modify(|now| {
            *now = now.saturating_add(step).unwrap_or(Timestamp::MAX);
        });
    }

    /// Set the clock to `to`. Moving backwards is allowed (a wall clock can be
    /// stepped back); sleepers keep waiting for their deadline.
    pub fn set(&self, to: Timestamp) {
        self.now.send_replace(to);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.borrow()
    }

    fn sleep(&self, duration: Duration) -> SleepFuture<'_> {
        let step = SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX);
        self.sleep_until(self.now().saturating_add(step).unwrap_or(Timestamp::MAX))
    }

    fn sleep_until(&self, deadline: Timestamp) -> SleepFuture<'_> {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            loop {
                if *rx.borrow_and_update() >= deadline {
                    return;
                }
                if rx.changed().await.is_err() {
                    // The clock is gone: nobody can advance it any more, so the
                    // deadline will never come.
                    std::future::pending::<()>().await;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    #[tokio::test]
    async fn sleeping_until_a_time_is_not_pushed_back_by_a_clock_that_moved_first() {
        let clock = ManualClock::new(start());
        let shared = clock.shared();
        let wake = start() + SignedDuration::from_hours(1);
        // The clock moves past the wake time before the sleep starts: no wait at all.
        clock.advance(Duration::from_secs(2 * 3600));
        tokio::time::timeout(Duration::from_secs(5), shared.sleep_until(wake))
            .await
            .expect("a passed time is not waited for");
        // A time ahead is waited for until the clock gets there.
        let later = start() + SignedDuration::from_hours(3);
        let sleeper = tokio::spawn(async move { shared.sleep_until(later).await });
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.set(later);
        tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .expect("woke at its time")
            .unwrap();
    }

    #[tokio::test]
    async fn manual_clock_jumps_days_without_waiting() {
        let clock = ManualClock::new(start());
        let shared = clock.shared();
        let sleeper = tokio::spawn(async move {
            shared.sleep(Duration::from_secs(3 * 86_400)).await;
            shared.now()
        });
        tokio::task::yield_now().await;
        clock.advance(Duration::from_secs(86_400));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished(), "woke a day early");
        clock.advance(Duration::from_secs(2 * 86_400));
        let woke_at = tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .expect("sleeper did not wake")
            .unwrap();
        assert_eq!(woke_at, start() + SignedDuration::from_hours(72));
    }

    #[tokio::test]
    async fn manual_clock_zero_sleep_returns_at_once() {
        let clock = ManualClock::new(start());
        tokio::time::timeout(Duration::from_secs(5), clock.sleep(Duration::ZERO))
            .await
            .expect("zero sleep blocked");
        assert_eq!(clock.now(), start());
    }

    #[tokio::test]
    async fn manual_clock_stepped_back_keeps_sleeper_waiting() {
        let clock = ManualClock::new(start());
        let c2 = clock.clone();
        let sleeper = tokio::spawn(async move { c2.sleep(Duration::from_secs(60)).await });
        tokio::task::yield_now().await;
        clock.set(start() - SignedDuration::from_hours(1));
        clock.advance(Duration::from_secs(3_600));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.advance(Duration::from_secs(60));
        tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .expect("sleeper did not wake")
            .unwrap();
    }

    #[tokio::test]
    async fn system_clock_moves_forward() {
        let clock = SystemClock;
        let before = clock.now();
        clock.sleep(Duration::from_millis(5)).await;
        assert!(clock.now() > before);
    }
}
