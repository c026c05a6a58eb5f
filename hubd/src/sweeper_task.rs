//! Runs the dead-man's switch every `sweep_interval` until the hub shuts down.

use std::time::Duration;

use crate::Hub;

/// The sweeper loop.
pub async fn run(hub: Hub, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let shutdown = hub.shutdown_token().clone();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        if let Err(err) = hub.sweep_once().await {
            tracing::error!(
                error = &err as &dyn std::error::Error,
                "dead-man's switch sweep failed"
            );
        }
    }
}
