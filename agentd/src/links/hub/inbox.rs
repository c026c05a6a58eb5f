//! The job inbox: what the hub loop does with the signed jobs of a poll answer.
//!
//! It owns the dedupe (a job is checked once while it is in flight, its ack pending or
//! its ack confirmed; a confirmed job the hub sends again is a replay, checked once
//! more so the journal refuses and audits it), the acks and the refusals:
//!
//! - an answer carries at most [`MAX_JOBS_PER_POLL`] jobs (the client skips the rest
//!   while parsing); a longer list is audited once (`hub.jobs_capped`) until an answer
//!   within the cap arrives;
//! - one poll's jobs are checked together ([`JobRunner::check_batch`]): signatures
//!   first, nothing written before, the refusals journaled in one transaction; a
//!   refused job is answered `rejected` (bounded: at most one per kept job);
//! - acks are bounded, deduplicated and expiring: a poll carries at most
//!   [`MAX_ACKED_JOBS`] (the hub refuses more), at most that many wait, and an ack the
//!   hub did not take within [`ACK_MAX_SENDS`] polls or [`ACK_TTL`] is dropped (the job
//!   is in the journal: if the hub sends it again, it is refused as already run).

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::job::SignedJob;
use bosun_proto::poll::{MAX_ACKED_JOBS, MAX_JOBS_PER_POLL};
use bosun_pve::Pve;
use futures::FutureExt as _;
use parking_lot::Mutex;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio::time::Instant;
use uuid::Uuid;

use crate::links::hub_client::client::CappedJobs;
use crate::ops::jobs::check::peek_job_id;
use crate::ops::jobs::runner::JobRunner;
use crate::ops::journal::{AuditEvent, JournalHandle, Refusal};
use crate::runtime::supervisor::Supervisor;

/// Polls an ack rides in before it is dropped.
pub const ACK_MAX_SENDS: u32 = 20;
/// How long an ack waits for the hub before it is dropped.
pub const ACK_TTL: Duration = Duration::from_secs(3600);
/// Job ids (and unreadable documents) remembered for dedupe.
const REMEMBERED: usize = 4 * MAX_ACKED_JOBS;

/// A set that forgets its oldest member past `capacity`.
#[derive(Debug)]
struct BoundedSet<T> {
    members: HashSet<T>,
    order: VecDeque<T>,
    capacity: usize,
}

impl<T: Eq + Hash + Clone> BoundedSet<T> {
    fn new(capacity: usize) -> Self {
        Self {
            members: HashSet::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    fn contains(&self, value: &T) -> bool {
        self.members.contains(value)
    }

    /// Whether `value` was new.
    fn insert(&mut self, value: T) -> bool {
        if !self.members.insert(value.clone()) {
            return false;
        }
        self.order.push_back(value);
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.members.remove(&old);
            }
        }
        true
    }
}

/// Remembered documents are keyed by digest: a bounded count of small keys.
fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[derive(Debug)]
struct PendingAck {
    job_id: Uuid,
    queued: Instant,
    sends: u32,
}

/// Acks waiting for the hub: deduplicated, at most [`MAX_ACKED_JOBS`] waiting and as
/// many per poll, each dropped after [`ACK_MAX_SENDS`] polls or [`ACK_TTL`].
#[derive(Debug, Default)]
struct AckQueue {
    /// Oldest first.
    pending: VecDeque<PendingAck>,
    /// The acks the poll in flight carries.
    sent: Vec<Uuid>,
}

impl AckQueue {
    fn contains(&self, job_id: Uuid) -> bool {
        self.pending.iter().any(|a| a.job_id == job_id)
    }

    fn push(&mut self, job_id: Uuid, now: Instant) {
        if self.contains(job_id) {
            return;
        }
        self.pending.push_back(PendingAck {
            job_id,
            queued: now,
            sends: 0,
        });
        while self.pending.len() > MAX_ACKED_JOBS {
            if let Some(dropped) = self.pending.pop_front() {
                tracing::warn!(job_id = %dropped.job_id, "too many acks waiting for the hub; the oldest dropped");
            }
        }
    }

    /// The acks of the next poll.
    fn for_poll(&mut self, now: Instant) -> Vec<Uuid> {
        self.pending.retain(|a| {
            let keep = a.sends < ACK_MAX_SENDS && now.duration_since(a.queued) < ACK_TTL;
            if !keep {
                tracing::warn!(job_id = %a.job_id, sends = a.sends, "the hub never took this ack; dropped");
            }
            keep
        });
        self.sent = self
            .pending
            .iter_mut()
            .take(MAX_ACKED_JOBS)
            .map(|a| {
                a.sends += 1;
                a.job_id
            })
            .collect();
        self.sent.clone()
    }

    /// The poll carrying the last acks was answered; gives the acks it carried.
    fn delivered(&mut self) -> Vec<Uuid> {
        let sent: HashSet<Uuid> = self.sent.iter().copied().collect();
        self.pending.retain(|a| !sent.contains(&a.job_id));
        std::mem::take(&mut self.sent)
    }
}

/// The inbox.
#[derive(Debug)]
pub struct JobInbox<P: Pve> {
    runner: Arc<JobRunner<P>>,
    journal: JournalHandle,
    /// Runs the jobs: a job task that panics stops the agent (its restart resumes the job).
    tasks: Supervisor,
    ack_tx: mpsc::UnboundedSender<Uuid>,
    ack_rx: mpsc::UnboundedReceiver<Uuid>,
    acks: AckQueue,
    /// Jobs whose ack the hub received.
    confirmed: BoundedSet<Uuid>,
    /// Confirmed jobs the hub sent again, checked (and refused) once.
    replay_checked: BoundedSet<Uuid>,
    in_flight: Arc<Mutex<HashSet<Uuid>>>,
    /// Documents refused without a job id and unreadable envelopes (by SHA-256),
    /// remembered so they are refused once.
    refused_unreadable: BoundedSet<String>,
    /// Whether the current run of over-long job lists was audited.
    capped_audited: bool,
}

impl<P: Pve + bosun_pve::PveQemu + 'static> JobInbox<P> {
    /// An inbox handing jobs to `runner`, each run as a task of `tasks`.
    pub fn new(runner: Arc<JobRunner<P>>, journal: JournalHandle, tasks: Supervisor) -> Self {
        let (ack_tx, ack_rx) = mpsc::unbounded_channel();
        Self {
            runner,
            journal,
            tasks,
            ack_tx,
            ack_rx,
            acks: AckQueue::default(),
            confirmed: BoundedSet::new(REMEMBERED),
            replay_checked: BoundedSet::new(REMEMBERED),
            in_flight: Arc::default(),
            refused_unreadable: BoundedSet::new(REMEMBERED),
            capped_audited: false,
        }
    }

    /// Waits for a job to be handled (its ack is then due); cancel-safe.
    pub async fn handled(&mut self) -> Option<Uuid> {
        let id = self.ack_rx.recv().await;
        if let Some(id) = id {
            self.queue_ack(id);
        }
        id
    }

    /// Takes the acks of jobs handled since the last call.
    pub fn drain_handled(&mut self) {
        while let Ok(id) = self.ack_rx.try_recv() {
            self.queue_ack(id);
        }
    }

    fn queue_ack(&mut self, job_id: Uuid) {
        self.acks.push(job_id, Instant::now());
    }

    /// The acks the next poll carries: at most [`MAX_ACKED_JOBS`], expired ones dropped.
    pub fn acks_for_poll(&mut self) -> Vec<Uuid> {
        self.acks.for_poll(Instant::now())
    }

    /// The poll carrying the last acks was answered: the hub has them.
    pub fn acks_delivered(&mut self) {
        for id in self.acks.delivered() {
            self.confirmed.insert(id);
        }
    }

    /// Routes the jobs of an answer: dedupe, the cap's audit, then one batch check.
    pub async fn take(&mut self, jobs: CappedJobs, request_id: &str) {
        let CappedJobs { kept, offered } = jobs;
        if offered > MAX_JOBS_PER_POLL {
            if !self.capped_audited {
                self.capped_audited = true;
                tracing::warn!(%request_id, offered, kept = MAX_JOBS_PER_POLL, "the hub sent more jobs than one poll may carry; the rest ignored");
                let mut event = AuditEvent::new("hub.jobs_capped");
                event.request_id = Some(request_id.to_owned());
                event.detail = json!({ "offered": offered, "kept": MAX_JOBS_PER_POLL });
                if let Err(e) = self.journal.append_audit(event).await {
                    tracing::warn!(error = %error_chain(&e), "could not audit the capped job list");
                }
            }
        } else {
            self.capped_audited = false;
        }
        let mut unreadable = Vec::new();
        let mut batch = Vec::new();
        let mut ids = Vec::new();
        for raw in kept {
            let key = digest(raw.to_string().as_bytes());
            let signed = match serde_json::from_value::<SignedJob>(raw) {
                Ok(signed) => signed,
                Err(e) => {
                    if self.refused_unreadable.insert(key) {
                        let mut event = AuditEvent::new("job.refused");
                        event.request_id = Some(request_id.to_owned());
                        event.detail = json!({ "code": "malformed", "reason": e.to_string() });
                        unreadable.push(Refusal {
                            event,
                            result: None,
                        });
                    }
                    continue;
                }
            };
            let job_id = peek_job_id(&signed);
            match job_id {
                Some(id) => {
                    if self.acks.contains(id) || self.replay_checked.contains(&id) {
                        continue;
                    }
                    if self.confirmed.contains(&id) {
                        self.replay_checked.insert(id);
                    }
                    if !self.in_flight.lock().insert(id) {
                        continue;
                    }
                }
                None => {
                    if !self
                        .refused_unreadable
                        .insert(digest(signed.document.as_bytes()))
                    {
                        continue;
                    }
                }
            }
            ids.push(job_id);
            batch.push(signed);
        }
        if !unreadable.is_empty()
            && let Err(e) = self.journal.record_refusals(unreadable).await
        {
            tracing::warn!(error = %error_chain(&e), "could not audit unreadable jobs");
        }
        if batch.is_empty() {
            return;
        }
        tracing::debug!(%request_id, jobs = batch.len(), "signed jobs received");
        let runner = Arc::clone(&self.runner);
        let in_flight = Arc::clone(&self.in_flight);
        let ack_tx = self.ack_tx.clone();
        let tasks = self.tasks.clone();
        let request_id = request_id.to_owned();
        self.tasks.spawn_once("job_intake", async move {
            // What the hub sent is checked here, before any signature is trusted: a panic while
            // checking it (a bug the hub's bytes reach) is this batch's failure, not the
            // agent's, so a hub cannot stop the agent over and over by sending it again.
            let check =
                std::panic::AssertUnwindSafe(runner.check_batch(&batch, Some(request_id.clone())))
                    .catch_unwind();
            let failed = |why: &str| {
                tracing::error!(jobs = batch.len(), "{why}; jobs left for the next poll");
                let mut in_flight = in_flight.lock();
                for id in ids.iter().flatten() {
                    in_flight.remove(id);
                }
            };
            let checked = match check.await {
                Ok(Ok(checked)) => checked,
                Ok(Err(e)) => {
                    return failed(&format!("journal unavailable: {}", error_chain(&e)));
                }
                Err(_) => return failed("checking the jobs the hub sent panicked"),
            };
            for id in checked.refused.into_iter().flatten() {
                in_flight.lock().remove(&id);
                let _ = ack_tx.send(id);
            }
            for job in checked.accepted {
                let runner = Arc::clone(&runner);
                let in_flight = Arc::clone(&in_flight);
                let ack_tx = ack_tx.clone();
                let request_id = request_id.clone();
                tasks.spawn_once("job", async move {
                    crate::failpoint::panic_at("job.run.panic");
                    let id = job.document.job_id;
                    runner.run_checked(job, Some(request_id)).await;
                    in_flight.lock().remove(&id);
                    let _ = ack_tx.send(id);
                });
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_are_bounded_deduplicated_and_expire() {
        let start = Instant::now();
        let mut acks = AckQueue::default();
        let ids: Vec<Uuid> = (0..MAX_ACKED_JOBS + 200).map(|_| Uuid::new_v4()).collect();
        for id in &ids {
            acks.push(*id, start);
            acks.push(*id, start);
        }
        let first = acks.for_poll(start);
        assert_eq!(
            first.len(),
            MAX_ACKED_JOBS,
            "never more than the hub accepts"
        );
        assert_eq!(
            first[0], ids[200],
            "the oldest beyond the bound are dropped"
        );
        assert_eq!(
            first.iter().collect::<HashSet<_>>().len(),
            first.len(),
            "no ack twice"
        );
        // A hub that never takes them: each rides in ACK_MAX_SENDS polls, then goes.
        for _ in 1..ACK_MAX_SENDS {
            assert_eq!(acks.for_poll(start).len(), MAX_ACKED_JOBS);
        }
        assert!(acks.for_poll(start).is_empty());
        // Delivered acks leave; old ones expire.
        acks.push(ids[0], start);
        acks.push(ids[1], start);
        assert_eq!(acks.for_poll(start), vec![ids[0], ids[1]]);
        assert_eq!(acks.delivered(), vec![ids[0], ids[1]]);
        assert!(acks.for_poll(start).is_empty());
        acks.push(ids[2], start);
        assert!(acks.for_poll(start + ACK_TTL).is_empty(), "expired");
    }

    #[test]
    fn a_bounded_set_forgets_its_oldest_member() {
        let mut set = BoundedSet::new(2);
        assert!(set.insert(1));
        assert!(!set.insert(1));
        assert!(set.insert(2));
        assert!(set.insert(3));
        assert!(!set.contains(&1));
        assert!(set.contains(&2) && set.contains(&3));
    }
}
