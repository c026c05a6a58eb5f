//! Refused cross-guest requests, counted rather than journaled one by one.
//!
//! The first refusal of a guest at an endpoint opens a window: it is audited at once
//! (`localapi.foreign_guest`, with what it named) and logged at WARN. Further refusals of the
//! same guest, reason and endpoint within the window are only counted; when the window ends
//! ([`RefusalLedger::take_due`], driven by the server's flusher, and at shutdown) one
//! `localapi.foreign_guest.repeated` row carries the count, with one WARN line. A guest
//! hammering the API thus writes at most two rows and two lines per endpoint and window,
//! whatever its rate. The ledger is bounded by guests × endpoints.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::ops::journal::AuditEvent;

/// The default length of a counting window.
pub const DEFAULT_REFUSAL_WINDOW: Duration = Duration::from_secs(60);

/// Who was refused where, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RefusalKey {
    /// The caller's guest.
    pub guest_id: String,
    /// The caller's vmid.
    pub vmid: u32,
    /// Why (`foreign_guest`).
    pub reason: &'static str,
    /// The endpoint asked for.
    pub endpoint: String,
}

#[derive(Debug)]
struct Tally {
    opened: Instant,
    opened_at: jiff::Timestamp,
    repeated: u64,
}

/// Whether a refusal opened a window (audit it) or was counted in an open one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// The first in its window: write its own row.
    First,
    /// Counted; the window's summary row will carry it.
    Repeated,
}

/// Refusal counts per (guest, reason, endpoint) and window.
#[derive(Debug)]
pub struct RefusalLedger {
    window: Duration,
    tallies: Mutex<HashMap<RefusalKey, Tally>>,
}

impl RefusalLedger {
    /// A ledger with windows of `window`.
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            tallies: Mutex::new(HashMap::new()),
        }
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Counts one refusal. A window that ended but was not yet taken is summarised by the
    /// returned event (write it before the refusal's own row).
    pub fn count(&self, key: &RefusalKey, now: jiff::Timestamp) -> (Counted, Option<AuditEvent>) {
        let mut tallies = self.tallies.lock();
        let at = Instant::now();
        match tallies.get_mut(key) {
            Some(tally) if at.duration_since(tally.opened) < self.window => {
                tally.repeated = tally.repeated.saturating_add(1);
                (Counted::Repeated, None)
            }
            Some(tally) => {
                let summary = summary(key, tally, now, self.window);
                *tally = Tally {
                    opened: at,
                    opened_at: now,
                    repeated: 0,
                };
                (Counted::First, summary)
            }
            None => {
                tallies.insert(
                    key.clone(),
                    Tally {
                        opened: at,
                        opened_at: now,
                        repeated: 0,
                    },
                );
                (Counted::First, None)
            }
        }
    }

    /// Summaries of the windows that have ended (all windows when `all`), which are closed.
    pub fn take_due(&self, now: jiff::Timestamp, all: bool) -> Vec<AuditEvent> {
        let mut tallies = self.tallies.lock();
        let at = Instant::now();
        let mut events = Vec::new();
        tallies.retain(|key, tally| {
            if all || at.duration_since(tally.opened) >= self.window {
                events.extend(summary(key, tally, now, self.window));
                false
            } else {
                true
            }
        });
        events
    }
}

/// The `localapi.foreign_guest.repeated` row of a window with repeats, if it had any.
fn summary(
    key: &RefusalKey,
    tally: &Tally,
    now: jiff::Timestamp,
    window: Duration,
) -> Option<AuditEvent> {
    if tally.repeated == 0 {
        return None;
    }
    tracing::warn!(
        guest_id = %key.guest_id,
        vmid = key.vmid,
        endpoint = %key.endpoint,
        reason = key.reason,
        count = tally.repeated,
        window_s = window.as_secs(),
        "local api refused repeated cross-guest requests"
    );
    let mut event = AuditEvent::new("localapi.foreign_guest.repeated");
    event.guest_id = Some(key.guest_id.clone());
    event.vmid = Some(key.vmid);
    event.detail = serde_json::json!({
        "reason": key.reason,
        "endpoint": key.endpoint,
        "count": tally.repeated,
        "window_start": tally.opened_at.to_string(),
        "window_end": now.to_string(),
    });
    Some(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(endpoint: &str) -> RefusalKey {
        RefusalKey {
            guest_id: "g".to_owned(),
            vmid: 101,
            reason: "foreign_guest",
            endpoint: endpoint.to_owned(),
        }
    }

    #[test]
    fn repeats_in_a_window_are_counted_into_one_summary() {
        let ledger = RefusalLedger::new(Duration::from_secs(3600));
        let now = jiff::Timestamp::UNIX_EPOCH;
        assert_eq!(ledger.count(&key("a"), now), (Counted::First, None));
        for _ in 0..99 {
            assert_eq!(ledger.count(&key("a"), now), (Counted::Repeated, None));
        }
        assert_eq!(ledger.count(&key("b"), now), (Counted::First, None));
        assert!(ledger.take_due(now, false).is_empty(), "windows still open");
        let events = ledger.take_due(now, true);
        assert_eq!(events.len(), 1, "b had no repeats: {events:?}");
        assert_eq!(events[0].detail["count"], 99);
        assert_eq!(events[0].detail["endpoint"], "a");
        assert_eq!(ledger.count(&key("a"), now), (Counted::First, None));
    }
}
