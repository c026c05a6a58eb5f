//! Makes durable the polls the poll writer committed without waiting for the disk (heartbeats
//! and deltas stored without judging, [`crate::store::PollRecorded::durable`]): every
//! [`FLUSH_EVERY`], so a power loss takes back at most that much of them (decision 0045). The
//! hub flushes once more after it stopped serving.
//!
//! The same tick starts writing the hosts' history buckets that are over ([`crate::history`]),
//! in the table's key order and chunks of their own transactions, in a task of its own so the
//! next flush does not wait for it (decision 0138); the last flush writes the open ones too.

use tokio::task::JoinHandle;

use crate::Hub;
use crate::store::history::HistoryBucket;
use crate::store::{FLUSH_EVERY, StoreError};

/// Flushes until the hub shuts down.
pub async fn run(hub: Hub) {
    let mut ticker = tokio::time::interval(FLUSH_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let shutdown = hub.shutdown_token().clone();
    let mut history: Option<JoinHandle<HistoryWritten>> = None;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        flush(&hub).await;
        // The history beside the flushes, never in their way: a bucket's end at 100,000 hosts
        // is about a second of writes (and a sync per chunk), and the flushes keep the
        // heartbeats' second (decision 0045). One write at a time; the hub waits for it when
        // it stops serving.
        if history.as_ref().is_none_or(JoinHandle::is_finished) {
            let writer = hub.clone();
            history = Some(
                hub.tasks()
                    .spawn(async move { write_history(&writer, false).await }),
            );
        }
    }
}

/// Buckets written in one transaction. Writing every host's bucket at once held a SQLite
/// hub's only writer for as long as 100,000 upserts take, and every poll with it; a chunk
/// holds it for a few milliseconds (decision 0138).
pub const HISTORY_CHUNK: usize = 256;

/// What one [`write_history`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistoryWritten {
    /// Buckets written (a removed host's included: the store skips them).
    pub buckets: usize,
    /// Transactions they took.
    pub chunks: usize,
    /// The longest of those transactions, from the call to the store to its answer.
    pub longest: std::time::Duration,
    /// Buckets kept for the next tick because the store failed.
    pub kept: usize,
}

/// Writes the history buckets due (`all`: the open ones too), in host order and chunks of
/// [`HISTORY_CHUNK`], each its own transaction; a failure is logged and the buckets not yet
/// written are kept for the next tick.
pub async fn write_history(hub: &Hub, all: bool) -> HistoryWritten {
    let mut buckets = hub.history().take(hub.clock().now_ms(), all);
    // In the order of the table's key (and of the `hosts` key each write looks up): a chunk
    // then walks each B-tree once in order, where buckets in the map's order went to a page
    // anywhere in it each. Sorted here, not in `take`, whose lock every poll takes.
    buckets.sort_unstable_by_key(|b| (b.host_id, b.bucket_ms));
    let written = write_in_chunks(buckets, |chunk| async move {
        committed(
            hub.store_call(move |store| store.record_history(&chunk))
                .await,
        )
    })
    .await;
    if let Err((err, kept)) = written.outcome {
        tracing::warn!(
            error = &err as &dyn std::error::Error,
            buckets = kept.len(),
            "writing the hosts' history failed; trying again"
        );
        let summary = HistoryWritten {
            kept: kept.len(),
            ..written.summary
        };
        hub.history().put_back(kept);
        return summary;
    }
    written.summary
}

/// Whether a chunk is written. One that was committed but whose sync to disk failed counts as
/// written: given back, it would be added to its rows a second time, where a power loss can
/// take back at most that one chunk of figures.
fn committed(result: Result<usize, StoreError>) -> Result<(), StoreError> {
    match result {
        Ok(_) => Ok(()),
        Err(err @ StoreError::Sync { .. }) => {
            tracing::warn!(
                error = &err as &dyn std::error::Error,
                "a chunk of the hosts' history was written but not synced to disk"
            );
            Ok(())
        }
        Err(err) => Err(err),
    }
}

/// What [`write_in_chunks`] did, and on a failure the error with the buckets not written.
struct Chunked<E> {
    summary: HistoryWritten,
    outcome: Result<(), (E, Vec<HistoryBucket>)>,
}

/// Hands `buckets` to `write` in chunks of [`HISTORY_CHUNK`], stopping at the first failure:
/// the chunk that failed (its transaction rolled back) and those after it are given back.
async fn write_in_chunks<E, F, W>(mut buckets: Vec<HistoryBucket>, mut write: W) -> Chunked<E>
where
    W: FnMut(Vec<HistoryBucket>) -> F,
    F: std::future::Future<Output = Result<(), E>>,
{
    let mut summary = HistoryWritten::default();
    let mut start = 0;
    while start < buckets.len() {
        let end = buckets.len().min(start + HISTORY_CHUNK);
        let started = std::time::Instant::now();
        let result = write(buckets[start..end].to_vec()).await;
        summary.longest = summary.longest.max(started.elapsed());
        if let Err(err) = result {
            return Chunked {
                summary,
                outcome: Err((err, buckets.split_off(start))),
            };
        }
        summary.buckets += end - start;
        summary.chunks += 1;
        start = end;
    }
    Chunked {
        summary,
        outcome: Ok(()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn buckets(n: usize) -> Vec<HistoryBucket> {
        (0..n)
            .map(|i| HistoryBucket::new(Uuid::from_u128(i as u128), 0))
            .collect()
    }

    #[tokio::test]
    async fn every_bucket_goes_to_the_store_in_chunks_in_order() {
        let mut seen = Vec::new();
        let written = write_in_chunks(buckets(2 * HISTORY_CHUNK + 3), |chunk| {
            seen.push(chunk);
            async { Ok::<(), ()>(()) }
        })
        .await;
        assert!(written.outcome.is_ok());
        assert_eq!(written.summary.buckets, 2 * HISTORY_CHUNK + 3);
        assert_eq!(written.summary.chunks, 3);
        assert_eq!(
            seen.iter().map(Vec::len).collect::<Vec<_>>(),
            [HISTORY_CHUNK, HISTORY_CHUNK, 3]
        );
        let ids: Vec<u128> = seen.concat().iter().map(|b| b.host_id.as_u128()).collect();
        assert_eq!(ids, (0..ids.len() as u128).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_failed_chunk_and_the_ones_after_it_are_given_back_and_no_earlier_one() {
        let mut calls = 0;
        let written = write_in_chunks(buckets(4 * HISTORY_CHUNK), |_chunk| {
            calls += 1;
            let fails = calls == 2;
            async move { if fails { Err("disk full") } else { Ok(()) } }
        })
        .await;
        assert_eq!(calls, 2, "nothing is written after a failure");
        assert_eq!(written.summary.buckets, HISTORY_CHUNK);
        assert_eq!(written.summary.chunks, 1);
        let Err((err, kept)) = written.outcome else {
            panic!("the failure is reported");
        };
        assert_eq!(err, "disk full");
        let ids: Vec<u128> = kept.iter().map(|b| b.host_id.as_u128()).collect();
        let expected: Vec<u128> = (HISTORY_CHUNK as u128..4 * HISTORY_CHUNK as u128).collect();
        assert_eq!(ids, expected, "the first chunk, written, is not kept again");
    }

    #[test]
    fn a_chunk_committed_and_not_synced_is_not_written_again() {
        let io = || std::io::Error::other("EIO");
        let unsynced = StoreError::Sync {
            path: "hub.sqlite-wal".into(),
            source: io(),
        };
        assert!(
            committed(Err(unsynced)).is_ok(),
            "given back, it would count twice"
        );
        assert!(committed(Ok(3)).is_ok());
        let failed = StoreError::Batch {
            reason: "rolled back".into(),
        };
        assert!(matches!(
            committed(Err(failed)),
            Err(StoreError::Batch { .. })
        ));
    }

    #[tokio::test]
    async fn nothing_due_is_no_transaction() {
        let written = write_in_chunks(Vec::new(), |_chunk| -> std::future::Ready<Result<(), ()>> {
            panic!("no chunk to write")
        })
        .await;
        assert!(written.outcome.is_ok());
        assert_eq!(written.summary, HistoryWritten::default());
    }
}
