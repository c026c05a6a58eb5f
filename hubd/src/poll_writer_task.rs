//! Group commit for polls: one thread owns the write path for heartbeats, drains every poll
//! waiting in its queue and records them in a single transaction, then answers each caller.
//! Under load this turns N fsyncs and N lock hand-offs into one, without answering any poll
//! before what it must keep is durable (decision 0045). A batch with such a poll goes on to a
//! second thread, which syncs the log for every batch waiting and then answers them, while the
//! writer records the next batch (decision 0134): the writer never waits for the disk.
//!
//! A PostgreSQL heartbeat on the host row the replica last wrote goes from the caller's task
//! in one statement, without the writer (decision 0130). A poll that may wait for the disk,
//! arriving while the store's writer is free, is recorded at once on the caller's own thread
//! instead ([`Store::record_poll_now`](crate::store::PollStore::record_poll_now)): a SQLite hub's
//! usual heartbeat then costs no hand-off to the writer's thread and back, which at a few
//! hundred polls a second (one poll a batch) was a good part of a poll's cost.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::store::{PollRecord, PollRecorded, PollStore, PollView, Store, StoreError, StoreResult};

/// Most polls in one transaction.
const MAX_BATCH: usize = 512;

/// Most committed batches waiting for the syncer; past them the writer waits too.
const SYNCS_WAITING: usize = 16;

type Reply = oneshot::Sender<StoreResult<(PollRecorded, PollView)>>;

/// Submits polls to the writer thread.
#[derive(Debug, Clone)]
pub struct PollWriterHandle {
    queue: mpsc::Sender<(PollRecord, Reply)>,
    store: Arc<dyn Store>,
}

impl PollWriterHandle {
    /// Starts the writer thread; it stops when every handle is dropped.
    pub fn spawn(store: Arc<dyn Store>) -> std::io::Result<Self> {
        let (queue, requests) = mpsc::channel(4 * MAX_BATCH);
        let (syncer, committed) = std::sync::mpsc::sync_channel(SYNCS_WAITING);
        let writer = store.clone();
        std::thread::Builder::new()
            .name("bosun-poll-sync".into())
            .spawn(move || sync(writer.as_ref(), committed))?;
        let writer = store.clone();
        std::thread::Builder::new()
            .name("bosun-poll-writer".into())
            .spawn(move || write(writer.as_ref(), requests, syncer))?;
        Ok(Self { queue, store })
    }

    /// Records one poll and returns what it changed and the state to answer with.
    pub async fn record(&self, poll: PollRecord) -> StoreResult<(PollRecorded, PollView)> {
        // A PostgreSQL heartbeat on the row this replica last wrote: one statement from this
        // task (decision 0130); a row moved since is for the writer, which reads it again.
        if let Some(heartbeat) = self.store.clone().heartbeat(&poll)
            && let Some(outcome) = heartbeat.await
        {
            return outcome;
        }
        // Only when no batch waits either: polls queued before this one go first.
        if self.queue.capacity() == self.queue.max_capacity()
            && let Some(outcome) = self.store.record_poll_now(&poll)
        {
            let (recorded, view) = outcome?;
            if recorded.durable {
                let store = self.store.clone();
                tokio::task::spawn_blocking(move || store.sync())
                    .await
                    .map_err(|source| StoreError::Worker { source })??;
            }
            return Ok((recorded, view));
        }
        let (reply, answer) = oneshot::channel();
        let stopped = || StoreError::Batch {
            reason: "the poll writer has stopped".to_owned(),
        };
        self.queue
            .send((poll, reply))
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// A poll's answer, with where it goes.
type Answer = (Reply, StoreResult<(PollRecorded, PollView)>);

fn write(
    store: &dyn PollStore,
    mut requests: mpsc::Receiver<(PollRecord, Reply)>,
    syncer: std::sync::mpsc::SyncSender<Vec<Answer>>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = requests.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match requests.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let (polls, replies): (Vec<PollRecord>, Vec<Reply>) = batch.drain(..).unzip();
        let size = polls.len();
        match store.commit_polls(polls) {
            Ok(results) => {
                // What may wait for the disk (and what was refused) is answered now; what
                // must not waits for the syncer, while this thread records the next batch.
                let (durable, now): (Vec<Answer>, Vec<Answer>) = replies
                    .into_iter()
                    .zip(results)
                    .partition(|(_, result)| result.as_ref().is_ok_and(|(r, _)| r.durable));
                answer(now);
                if !durable.is_empty()
                    && let Err(std::sync::mpsc::SendError(durable)) = syncer.send(durable)
                {
                    fail(durable, "the poll writer's syncer has stopped");
                }
            }
            Err(err) => {
                tracing::error!(
                    error = &err as &dyn std::error::Error,
                    polls = size,
                    "recording a poll batch failed"
                );
                let reason = err.to_string();
                for reply in replies {
                    let _ = reply.send(Err(StoreError::Batch {
                        reason: reason.clone(),
                    }));
                }
            }
        }
    }
}

/// Makes committed batches durable and answers their polls: one sync for every batch that
/// waits when it begins (group commit).
fn sync(store: &dyn PollStore, batches: std::sync::mpsc::Receiver<Vec<Answer>>) {
    while let Ok(first) = batches.recv() {
        let mut waiting = vec![first];
        waiting.extend(batches.try_iter());
        match store.sync() {
            Ok(()) => waiting.into_iter().for_each(answer),
            Err(err) => {
                tracing::error!(
                    error = &err as &dyn std::error::Error,
                    polls = waiting.iter().map(Vec::len).sum::<usize>(),
                    "making a poll batch durable failed"
                );
                let reason = err.to_string();
                for batch in waiting {
                    fail(batch, &reason);
                }
            }
        }
    }
}

fn answer(answers: Vec<Answer>) {
    for (reply, result) in answers {
        // The caller may have gone away (client disconnected); nothing to do then.
        let _ = reply.send(result);
    }
}

/// Answers each poll with an error: it was committed, but is not known to be on disk, so its
/// agent sends it again.
fn fail(answers: Vec<Answer>, reason: &str) {
    for (reply, _) in answers {
        let _ = reply.send(Err(StoreError::Batch {
            reason: reason.to_owned(),
        }));
    }
}
