//! The retry delay of a loop that must outlive the local API being away: after a failure it
//! waits one second, doubling at each failure in a row up to [`MAX_DELAY`], and says so in
//! one log line per failure (so a long outage logs at most one line per loop every
//! [`MAX_DELAY`]). The first success after failures is logged once.

use std::time::Duration;

/// The first delay after a failure.
pub const FIRST_DELAY: Duration = Duration::from_secs(1);
/// The longest delay between two attempts.
pub const MAX_DELAY: Duration = Duration::from_secs(60);

/// A loop's failures in a row and the delay before its next attempt.
#[derive(Debug, Clone)]
pub struct Backoff {
    what: &'static str,
    failures: u32,
}

impl Backoff {
    /// No failure yet; `what` names the loop in its log lines.
    pub fn new(what: &'static str) -> Self {
        Self { what, failures: 0 }
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The delay after `failures` failures in a row (none after none).
    pub fn delay(failures: u32) -> Duration {
        match failures {
            0 => Duration::ZERO,
            n => FIRST_DELAY
                .saturating_mul(1_u32 << (n - 1).min(16))
                .min(MAX_DELAY),
        }
    }

    /// Counts a failure, logs it with its cause chain and gives the delay before the next try.
    pub fn failed(&mut self, error: &(dyn std::error::Error + 'static)) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let delay = Self::delay(self.failures);
        tracing::warn!(
            error = %bosun_errchain::error_chain(error),
            failures = self.failures,
            retry_in_s = delay.as_secs(),
            "{} failed; retrying",
            self.what
        );
        delay
    }

    /// Counts a success, logging the recovery when failures came before it.
    pub fn succeeded(&mut self) {
        if self.failures > 0 {
            tracing::info!(failures = self.failures, "{} works again", self.what);
        }
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_from_one_second_up_to_the_bound() {
        let delays: Vec<u64> = (0..10).map(|n| Backoff::delay(n).as_secs()).collect();
        assert_eq!(delays, [0, 1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(Backoff::delay(u32::MAX), MAX_DELAY);
    }

    #[test]
    fn a_success_starts_the_count_again() {
        let mut backoff = Backoff::new("test loop");
        let error = std::io::Error::other("unreachable");
        assert_eq!(backoff.failed(&error), Duration::from_secs(1));
        assert_eq!(backoff.failed(&error), Duration::from_secs(2));
        assert_eq!(backoff.failures(), 2);
        backoff.succeeded();
        assert_eq!(backoff.failures(), 0);
        assert_eq!(backoff.failed(&error), Duration::from_secs(1));
    }
}
