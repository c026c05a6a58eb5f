//! [`ControllerBoard`]: what each guest's controller is told to run and what it last reported,
//! shared by the local API (which serves the one and records the other), the rollout (which
//! announces a digest and waits for its health report) and the heal task (which restarts a
//! controller that went silent).
//!
//! The announced digest is mirrored from the journal (`controllers`), loaded at start; health
//! reports live here only: after a restart the agent waits for the next one. The digest the
//! helper measured of the image archive in each guest at its last restart through the helper,
//! which the report carries in place of what the controller says (decision 0102), is journaled
//! too ([`keep_measurement`]) and loaded with the records.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::ops::journal::{ControllerRecord, ControllerState, OpId};

/// Most characters of a health report's detail kept.
pub const MAX_DETAIL_CHARS: usize = 200;

/// One health report, as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthReport {
    /// The digest the controller says it runs.
    pub digest: String,
    /// Whether it says it is healthy.
    pub healthy: bool,
    /// What it said about it.
    pub detail: Option<String>,
    /// The board's sequence number of the report (increasing across all guests).
    pub seq: u64,
    /// When it arrived.
    pub at: Instant,
}

/// What a guest's controller is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announced {
    /// The digest to run (`None`: neither its golden base nor a signed rollout named one).
    pub digest: Option<String>,
    /// Where it stands.
    pub state: ControllerState,
    /// The rollout that announced it.
    pub op_id: Option<OpId>,
}

#[derive(Debug, Default)]
struct Entry {
    vmid: u32,
    announced: Option<Announced>,
    last: Option<HealthReport>,
    last_healthy: Option<Instant>,
    /// The digest the helper measured of the image archive in the guest at its last restart.
    measured: Option<String>,
}

#[derive(Debug)]
struct Inner {
    guests: Mutex<HashMap<String, Entry>>,
    seq: watch::Sender<u64>,
    /// Whether any guest's controller was announced (the journal holds a record of it).
    named: watch::Sender<bool>,
}

/// The shared board. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ControllerBoard {
    inner: Arc<Inner>,
}

impl Default for ControllerBoard {
    fn default() -> Self {
        Self::new()
    }
}

/// Why waiting for a healthy report ended without one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HealthWait {
    /// The controller reported the digest unhealthy.
    #[error("the controller reported {digest} unhealthy: {detail}")]
    Unhealthy {
        /// The digest.
        digest: String,
        /// What it said.
        detail: String,
    },
    /// No healthy report for the digest within the window.
    #[error("no healthy report for {digest} within {window_ms} ms")]
    TimedOut {
        /// The digest.
        digest: String,
        /// The window.
        window_ms: u128,
    },
}

impl HealthWait {
    /// Whether `text`, a wait's failure as the journal keeps it, is the controller's own
    /// [`HealthWait::Unhealthy`] report of `digest` (its `Display`); anything else, a timeout
    /// included, is not a verdict the controller gave.
    pub fn is_unhealthy_report(text: &str, digest: &str) -> bool {
        text.starts_with(&format!("the controller reported {digest} unhealthy: "))
    }
}

/// Keeps what the helper measured of `guest_id`'s controller image on `board` and in the
/// journal, so a restarted agent still reports the measurement, never the controller's own
/// word. A journal that cannot write it is logged: the board holds it until the agent stops.
pub async fn keep_measurement(
    journal: &crate::ops::journal::JournalHandle,
    board: &ControllerBoard,
    guest_id: &str,
    measured: Option<String>,
) {
    board.measured(guest_id, measured.clone());
    if let Err(e) = journal
        .controller_measured(guest_id.to_owned(), measured)
        .await
    {
        tracing::warn!(%guest_id, error = %bosun_errchain::error_chain(&e), "could not journal the controller's measurement");
    }
}

impl ControllerBoard {
    /// An empty board.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                guests: Mutex::new(HashMap::new()),
                seq: watch::channel(0).0,
                named: watch::channel(false).0,
            }),
        }
    }

    /// Mirrors the journal's records (at start).
    pub fn load(&self, records: &[ControllerRecord]) {
        let mut guests = self.inner.guests.lock();
        for record in records {
            let entry = guests.entry(record.guest_id.clone()).or_default();
            entry.vmid = record.vmid;
            entry.measured.clone_from(&record.measured);
            entry.announced = Some(Announced {
                digest: record.digest.clone(),
                state: record.state,
                op_id: record.op_id,
            });
        }
        if !records.is_empty() {
            self.inner
                .named
                .send_if_modified(|named| !std::mem::replace(named, true));
        }
    }

    /// Mirrors one change the journal recorded.
    pub fn announce(&self, guest_id: &str, vmid: u32, announced: Announced) {
        let mut guests = self.inner.guests.lock();
        let entry = guests.entry(guest_id.to_owned()).or_default();
        entry.vmid = vmid;
        entry.announced = Some(announced);
        self.inner
            .named
            .send_if_modified(|named| !std::mem::replace(named, true));
    }

    /// Forgets `guest_id`'s controller (its provisioning was rolled back).
    pub fn forget(&self, guest_id: &str) {
        self.inner.guests.lock().remove(guest_id);
    }

    /// Becomes true once any guest's controller is announced (loaded from the journal, or by
    /// a rollout): until then there is no controller to heal.
    pub fn names_controllers(&self) -> watch::Receiver<bool> {
        self.inner.named.subscribe()
    }

    /// What `guest_id`'s controller is told.
    pub fn announced(&self, guest_id: &str) -> Option<Announced> {
        self.inner
            .guests
            .lock()
            .get(guest_id)
            .and_then(|e| e.announced.clone())
    }

    /// The board's current report sequence number: reports after it are newer.
    pub fn seq(&self) -> u64 {
        *self.inner.seq.borrow()
    }

    /// Records a health report from `guest_id`'s controller; gives the digest it is told.
    pub fn report(
        &self,
        guest_id: &str,
        vmid: u32,
        digest: String,
        healthy: bool,
        detail: Option<String>,
    ) -> Option<String> {
        let detail = detail.map(|d| d.chars().take(MAX_DETAIL_CHARS).collect());
        let now = Instant::now();
        let mut seq = 0;
        self.inner.seq.send_modify(|s| {
            *s += 1;
            seq = *s;
        });
        let mut guests = self.inner.guests.lock();
        let entry = guests.entry(guest_id.to_owned()).or_default();
        entry.vmid = vmid;
        if healthy {
            entry.last_healthy = Some(now);
        }
        entry.last = Some(HealthReport {
            digest,
            healthy,
            detail,
            seq,
            at: now,
        });
        entry.announced.as_ref().and_then(|a| a.digest.clone())
    }

    /// Records what the helper measured of `guest_id`'s controller image (`None`: the guest
    /// holds no image archive to measure).
    pub fn measured(&self, guest_id: &str, digest: Option<String>) {
        let mut guests = self.inner.guests.lock();
        guests.entry(guest_id.to_owned()).or_default().measured = digest;
    }

    /// The digest the helper last measured of `guest_id`'s controller image, if any.
    pub fn last_measured(&self, guest_id: &str) -> Option<String> {
        let guests = self.inner.guests.lock();
        guests.get(guest_id).and_then(|e| e.measured.clone())
    }

    /// The last report of `guest_id`.
    pub fn last_report(&self, guest_id: &str) -> Option<HealthReport> {
        self.inner
            .guests
            .lock()
            .get(guest_id)
            .and_then(|e| e.last.clone())
    }

    /// Forgets when `guest_id`'s controller last reported healthy: only a report from now on
    /// shows it recovered (a rollout that gave up on a silent controller calls it).
    pub fn forget_healthy(&self, guest_id: &str) {
        if let Some(entry) = self.inner.guests.lock().get_mut(guest_id) {
            entry.last_healthy = None;
        }
    }

    /// When `guest_id`'s controller last reported healthy (any digest).
    pub fn last_healthy(&self, guest_id: &str) -> Option<Instant> {
        self.inner
            .guests
            .lock()
            .get(guest_id)
            .and_then(|e| e.last_healthy)
    }

    /// Waits for a report newer than `after` from `guest_id` naming `digest`: healthy ends
    /// the wait well, unhealthy at once with its detail; none within `window` times out.
    /// Reports of other digests (the old controller still running) are ignored.
    pub async fn wait_healthy(
        &self,
        guest_id: &str,
        digest: &str,
        after: u64,
        window: Duration,
    ) -> Result<HealthReport, HealthWait> {
        let deadline = Instant::now() + window;
        let mut changes = self.inner.seq.subscribe();
        loop {
            if let Some(report) = self
                .last_report(guest_id)
                .filter(|r| r.seq > after && r.digest == digest)
            {
                return if report.healthy {
                    Ok(report)
                } else {
                    Err(HealthWait::Unhealthy {
                        digest: digest.to_owned(),
                        detail: report.detail.unwrap_or_default(),
                    })
                };
            }
            let timed_out = tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err();
            if timed_out {
                return Err(HealthWait::TimedOut {
                    digest: digest.to_owned(),
                    window_ms: window.as_millis(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEW: &str = "sha256:new";
    const OLD: &str = "sha256:old";

    #[tokio::test]
    async fn a_journaled_measurement_is_loaded_and_kept_over_the_controllers_word() {
        let dir = tempfile::tempdir().unwrap();
        let journal = crate::ops::journal::JournalHandle::open(
            &dir.path().join("j.sqlite"),
            crate::clock::SystemClock::shared(),
        )
        .await
        .unwrap();
        journal
            .controller_announce("g".into(), 101, NEW.into(), OpId::new())
            .await
            .unwrap();
        let running = ControllerBoard::new();
        keep_measurement(&journal, &running, "g", Some(NEW.into())).await;
        // The agent restarts: a new board from the journal, then the controller's own word.
        let restarted = ControllerBoard::new();
        restarted.load(&journal.controllers().await.unwrap());
        restarted.report("g", 101, OLD.into(), true, None);
        assert_eq!(restarted.last_measured("g").as_deref(), Some(NEW));
    }

    #[tokio::test]
    async fn only_a_newer_report_of_the_announced_digest_ends_the_wait() {
        let board = ControllerBoard::new();
        board.report("g", 101, NEW.into(), true, None);
        let after = board.seq();
        let waiter = {
            let board = board.clone();
            tokio::spawn(async move {
                board
                    .wait_healthy("g", NEW, after, Duration::from_secs(5))
                    .await
            })
        };
        tokio::task::yield_now().await;
        board.report("g", 101, OLD.into(), true, None);
        board.report("other", 102, NEW.into(), true, None);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiter.is_finished(),
            "an old report, another digest or guest does not count"
        );
        board.report("g", 101, NEW.into(), true, Some("ok".into()));
        let report = waiter.await.unwrap().unwrap();
        assert_eq!(report.detail.as_deref(), Some("ok"));
    }

    #[tokio::test]
    async fn an_unhealthy_report_or_silence_fails_the_wait() {
        let board = ControllerBoard::new();
        let after = board.seq();
        board.report("g", 101, NEW.into(), false, Some("x".repeat(500)));
        match board
            .wait_healthy("g", NEW, after, Duration::from_secs(5))
            .await
        {
            Err(HealthWait::Unhealthy { detail, .. }) => {
                assert_eq!(detail.chars().count(), MAX_DETAIL_CHARS, "detail bounded");
            }
            other => panic!("{other:?}"),
        }
        let after = board.seq();
        let started = Instant::now();
        let silent = board
            .wait_healthy("g", NEW, after, Duration::from_millis(50))
            .await;
        assert!(
            matches!(silent, Err(HealthWait::TimedOut { .. })),
            "{silent:?}"
        );
        assert!(started.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn only_the_controllers_own_unhealthy_report_reads_as_one() {
        let unhealthy = HealthWait::Unhealthy {
            digest: NEW.into(),
            detail: "no healthy report for it within 1 ms".into(),
        };
        assert!(HealthWait::is_unhealthy_report(&unhealthy.to_string(), NEW));
        assert!(!HealthWait::is_unhealthy_report(
            &unhealthy.to_string(),
            OLD
        ));
        let silent = HealthWait::TimedOut {
            digest: NEW.into(),
            window_ms: 1,
        };
        assert!(!HealthWait::is_unhealthy_report(&silent.to_string(), NEW));
        assert!(!HealthWait::is_unhealthy_report(
            "interrupted; the call may or may not have been sent",
            NEW
        ));
        assert!(!HealthWait::is_unhealthy_report("", NEW));
    }

    #[test]
    fn a_forgotten_healthy_report_no_longer_counts() {
        let board = ControllerBoard::new();
        board.report("g", 101, OLD.into(), true, None);
        assert!(board.last_healthy("g").is_some());
        board.forget_healthy("g");
        assert_eq!(board.last_healthy("g"), None);
        assert!(
            board.last_report("g").is_some(),
            "the report itself is kept"
        );
        board.forget_healthy("nobody");
    }
}
