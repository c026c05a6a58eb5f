//! The simulator's clock: the wall clock unless a test sets the time, so a week of daily
//! backups (archive names, ctimes, log lines, UPID start times) runs in seconds.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};
use parking_lot::Mutex;

/// The wall clock, or a time a test set that stays put until it is set or advanced again.
#[derive(Debug, Default)]
pub(crate) struct SimClock {
    fixed: Mutex<Option<Timestamp>>,
}

impl SimClock {
    /// Now, in the node's time zone (the system's).
    pub(crate) fn now(&self) -> Zoned {
        match *self.fixed.lock() {
            Some(ts) => ts.to_zoned(TimeZone::system()),
            None => Zoned::now(),
        }
    }

    /// Seconds since the epoch.
    pub(crate) fn epoch(&self) -> i64 {
        self.now().timestamp().as_second()
    }

    /// Fixes the time (`Some`) or returns to the wall clock (`None`).
    pub(crate) fn set(&self, at: Option<Timestamp>) {
        *self.fixed.lock() = at;
    }

    /// The fixed time, if one is set.
    pub(crate) fn fixed(&self) -> Option<Timestamp> {
        *self.fixed.lock()
    }

    /// Moves the fixed time on by `by` (starting from the wall clock when none is set);
    /// `None` when the result is outside jiff's range.
    pub(crate) fn advance(&self, by: SignedDuration) -> Option<Timestamp> {
        let mut fixed = self.fixed.lock();
        let next = fixed.unwrap_or_else(Timestamp::now).checked_add(by).ok()?;
        *fixed = Some(next);
        Some(next)
    }
}
