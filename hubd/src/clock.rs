//! The one clock seam: policy time (token expiry, last-seen, the dead-man's switch) is read
//! through [`Clock`] so tests can move it by hand.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use parking_lot::Mutex;

/// A source of "now".
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// The current instant.
    fn now(&self) -> Timestamp;

    /// The current instant in Unix milliseconds.
    fn now_ms(&self) -> i64 {
        self.now().as_millisecond()
    }
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that only moves when told to (for tests and simulations).
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<Timestamp>>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock();
        let span = jiff::SignedDuration::try_from(by).unwrap_or(jiff::SignedDuration::MAX);
        *now = now.saturating_add(span).unwrap_or(Timestamp::MAX);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock()
    }
}
