//! Makes durable the polls the poll writer committed without waiting for the disk (heartbeats
//! and deltas stored without judging, [`crate::store::PollRecorded::durable`]): every
//! [`FLUSH_EVERY`], so a power loss takes back at most that much of them (decision 0045). The
//! hub flushes once more after it stopped serving.
//!
//! The same tick writes the hosts' history buckets that are over ([`crate::history`]); the
//! last flush writes the open ones too.

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
        write_history(&hub, false).await;
    }
}

/// Writes the history buckets due (`all`: the open ones too); a failure is logged and the
/// buckets are kept for the next tick.
pub async fn write_history(hub: &Hub, all: bool) {
    let buckets = hub.history().take(hub.clock().now_ms(), all);
    if buckets.is_empty() {
        return;
    }
    let kept = buckets.clone();
    if let Err(err) = hub
        .store_call(move |store| store.record_history(&buckets))
        .await
    {
        tracing::warn!(
            error = &err as &dyn std::error::Error,
            buckets = kept.len(),
            "writing the hosts' history failed; trying again"
        );
        hub.history().put_back(kept);
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
