//! Forgets the nonces of signed jobs that expired long ago, so the journal's nonce table does
//! not grow with every job the agent ever ran.
//!
//! A nonce is kept until its job's `expires_at` plus the clock skew the job check tolerates
//! ([`DEFAULT_SKEW`]) plus [`KEEP_AFTER_EXPIRY`] has passed. By then the check refuses the
//! job's exact bytes as expired before its nonce is looked at, so replay refusal does not
//! depend on the forgotten row; the margin covers a wall clock stepped back after the prune,
//! and the job id, which `job_runs` keeps, refuses a rerun in any case.
//!
//! One pass at start, then one every [`PRUNE_EVERY`] on the clock seam; a pass forgets at
//! most [`PRUNE_BATCH`] nonces in one short transaction on the journal thread (what is left
//! goes at the next pass). Decision 0031 records why.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio_util::sync::CancellationToken;

use crate::clock::SharedClock;
use crate::ops::jobs::check::DEFAULT_SKEW;
use crate::ops::journal::{JournalError, JournalHandle};

/// How long a nonce is kept beyond its job's expiry and the check's skew.
pub const KEEP_AFTER_EXPIRY: SignedDuration = SignedDuration::from_hours(24);

/// How often the table is pruned.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Most nonces one pass forgets.
pub const PRUNE_BATCH: u32 = 1_000;

/// The pruning loop.
#[derive(Debug)]
pub struct NoncePruneTask {
    journal: JournalHandle,
    clock: SharedClock,
}

impl NoncePruneTask {
    /// A loop over `journal`, reading the time from `clock`.
    pub fn new(journal: JournalHandle, clock: SharedClock) -> Self {
        Self { journal, clock }
    }

    /// The expiry before which a nonce may be forgotten at `now`: a job that expired before
    /// it is refused as expired by the check at `now` (and for [`KEEP_AFTER_EXPIRY`] of clock
    /// stepped back).
    pub fn cutoff(now: Timestamp) -> Timestamp {
        now.saturating_sub(DEFAULT_SKEW)
            .and_then(|t| t.saturating_sub(KEEP_AFTER_EXPIRY))
            .unwrap_or(Timestamp::MIN)
    }

    /// One pass: forgets at most [`PRUNE_BATCH`] nonces whose job expired before
    /// [`Self::cutoff`] of now; gives how many.
    pub async fn prune_once(&self) -> Result<usize, JournalError> {
        let cutoff = Self::cutoff(self.clock.now());
        let pruned = self.journal.prune_nonces(cutoff, PRUNE_BATCH).await?;
        if pruned > 0 {
            tracing::info!(pruned, expired_before = %cutoff, "nonces of long-expired jobs pruned");
        }
        Ok(pruned)
    }

    /// Prunes at once and then every [`PRUNE_EVERY`] until `cancel`.
    pub async fn run(self, cancel: CancellationToken) {
        loop {
            if let Err(e) = self.prune_once().await {
                tracing::warn!(
                    error = %bosun_errchain::error_chain(&e),
                    "could not prune expired job nonces; kept until the next pass"
                );
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.clock.sleep(PRUNE_EVERY) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock as _, ManualClock};
    use crate::ops::journal::JobClaim;

    fn start() -> Timestamp {
        "2026-11-21T00:00:00Z".parse().unwrap()
    }

    fn claim(job_id: &str, expires_at: Timestamp) -> JobClaim {
        JobClaim {
            job_id: job_id.into(),
            kind: "force-backup".into(),
            nonce: format!("nonce-{job_id}"),
            expires_at,
            signer_fingerprint: "SHA256:abc".into(),
            principals: "op@example".into(),
            timeout_s: None,
        }
    }

    async fn journal(dir: &tempfile::TempDir, clock: &ManualClock) -> JournalHandle {
        JournalHandle::open(&dir.path().join("journal.sqlite"), clock.shared())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_pass_forgets_a_nonce_only_past_its_expiry_the_skew_and_the_margin() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(start());
        let journal = journal(&dir, &clock).await;
        let expires = start() + SignedDuration::from_hours(1);
        journal.claim_job(claim("job", expires)).await.unwrap();
        let task = NoncePruneTask::new(journal.clone(), clock.shared());
        let edge = expires + DEFAULT_SKEW + KEEP_AFTER_EXPIRY;
        for at in [start(), expires, expires + DEFAULT_SKEW, edge] {
            clock.set(at);
            assert_eq!(task.prune_once().await.unwrap(), 0, "pruned at {at}");
            assert!(journal.nonce_seen("nonce-job".into()).await.unwrap());
        }
        clock.set(edge + SignedDuration::from_millis(1));
        assert_eq!(task.prune_once().await.unwrap(), 1);
        assert!(!journal.nonce_seen("nonce-job".into()).await.unwrap());
        // The job id still refuses a rerun.
        let err = journal.claim_job(claim("job", expires)).await.unwrap_err();
        assert!(matches!(err, JournalError::JobAlreadyRun { .. }), "{err:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_loop_prunes_at_start_and_again_each_period() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(start());
        let journal = journal(&dir, &clock).await;
        let expires = start() + SignedDuration::from_hours(1);
        let long_ago = start() - DEFAULT_SKEW - KEEP_AFTER_EXPIRY - SignedDuration::from_secs(1);
        journal.claim_job(claim("old", long_ago)).await.unwrap();
        journal.claim_job(claim("job", expires)).await.unwrap();
        let seen = |nonce: &'static str| {
            let journal = journal.clone();
            async move { journal.nonce_seen(nonce.into()).await.unwrap() }
        };
        let cancel = CancellationToken::new();
        let running =
            tokio::spawn(NoncePruneTask::new(journal.clone(), clock.shared()).run(cancel.clone()));
        // The pass at start forgets the long-expired nonce, not the other.
        wait_until(|| async { !seen("nonce-old").await }).await;
        assert!(seen("nonce-job").await);
        // Each period on the clock brings a pass; the one past the margin forgets the other.
        wait_until(|| {
            clock.advance(PRUNE_EVERY);
            async { !seen("nonce-job").await }
        })
        .await;
        assert!(clock.now() > expires + DEFAULT_SKEW + KEEP_AFTER_EXPIRY);
        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(5), running)
            .await
            .unwrap()
            .unwrap();
    }

    #[test]
    fn a_nonce_is_forgettable_only_once_the_check_refuses_its_job_as_expired() {
        let expires = start();
        for secs in [0, 1, 119, 120, 121, 3_600, 86_519, 86_520, 86_521, 200_000] {
            let now = expires + SignedDuration::from_secs(secs);
            let forgettable = NoncePruneTask::cutoff(now) > expires;
            let refused = now > expires + DEFAULT_SKEW;
            assert!(
                !forgettable || refused,
                "{secs} s after expiry: forgettable while accepted"
            );
            assert_eq!(forgettable, secs > 86_520, "{secs} s after expiry");
        }
    }

    /// Waits (10 s at most) until `done` holds.
    async fn wait_until<F, Fut>(mut done: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !done().await {
            assert!(tokio::time::Instant::now() < deadline, "timed out");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
