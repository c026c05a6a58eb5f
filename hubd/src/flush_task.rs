//! Makes durable the polls the poll writer committed without waiting for the disk (heartbeats
//! and deltas stored without judging, [`crate::store::PollRecorded::durable`]): every
//! [`FLUSH_EVERY`], so a power loss takes back at most that much of them (decision 0045). The
//! hub flushes once more after it stopped serving.

use crate::Hub;
use crate::store::FLUSH_EVERY;

/// Flushes until the hub shuts down.
pub async fn run(hub: Hub) {
    let mut ticker = tokio::time::interval(FLUSH_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let shutdown = hub.shutdown_token().clone();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        flush(&hub).await;
    }
}

/// One flush; a failure is logged (the next tick tries again).
pub async fn flush(hub: &Hub) {
    if let Err(err) = hub.store_call(|store| store.flush()).await {
        tracing::error!(
            error = &err as &dyn std::error::Error,
            "making recorded polls durable failed"
        );
    }
}
