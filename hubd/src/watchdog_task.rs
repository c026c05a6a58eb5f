//! systemd's watchdog: `WATCHDOG=1` at half the interval systemd asks for
//! (`WATCHDOG_USEC`, the unit's `WatchdogSec=`), each one only after a read through the
//! store on the blocking pool, the path every request takes. A wedged store or blocking
//! pool, or a runtime that no longer runs this task, stops the pings, and systemd
//! restarts the hub once a whole interval passes without one.

use std::time::Duration;

use crate::Hub;

/// The watchdog loop.
#[derive(Debug)]
pub struct WatchdogTask {
    hub: Hub,
    period: Duration,
}

impl WatchdogTask {
    /// The loop systemd asks for: `None` unless `NOTIFY_SOCKET` is set and `WATCHDOG_USEC`
    /// names a non-zero interval for this process.
    pub fn from_env(hub: Hub) -> Option<Self> {
        std::env::var_os("NOTIFY_SOCKET")?;
        let interval = sd_notify::watchdog_enabled().filter(|i| !i.is_zero())?;
        Some(Self::new(hub, interval))
    }

    /// A loop for a watchdog `interval`: it pings every `interval / 2`.
    pub fn new(hub: Hub, interval: Duration) -> Self {
        Self {
            hub,
            period: (interval / 2).max(Duration::from_millis(1)),
        }
    }

    /// How often it pings.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Pings until the hub shuts down.
    pub async fn run(self) {
        let mut ticker = tokio::time::interval(self.period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let shutdown = self.hub.shutdown_token().clone();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let probe = self.hub.store_call(|store| store.check_initialized());
            match tokio::time::timeout(self.period, probe).await {
                Ok(Ok(())) => {
                    if let Err(err) = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]) {
                        tracing::warn!(error = %err, "could not send the watchdog ping");
                    }
                }
                Ok(Err(err)) => tracing::warn!(
                    error = &err as &dyn std::error::Error,
                    "the store failed its liveness read; no watchdog ping"
                ),
                Err(_) => tracing::warn!(
                    waited_ms = u64::try_from(self.period.as_millis()).unwrap_or(u64::MAX),
                    "the store did not answer its liveness read; no watchdog ping"
                ),
            }
        }
    }
}
