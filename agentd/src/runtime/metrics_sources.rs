//! What the agent's `/metrics` reads at each scrape, gathered from the journal, the queue and
//! the reconcile and hub status channels into the plain numbers of a [`Snapshot`]; the
//! metrics module itself knows none of these.

use std::path::{Path, PathBuf};

use bosun_errchain::error_chain;
use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::guests::queue::GuestQueue;
use crate::guests::reconcile::reconcile_task::ReconcileStatus;
use crate::links::hub::poll_task::HubStatus;
use crate::metrics::snapshot::{BackupFigures, ReadSnapshot, RestoreTestFigures, Snapshot};
use crate::ops::journal::{JournalHandle, TestOutcome};

/// Where a scrape reads from.
#[derive(Debug, Clone)]
pub struct Sources {
    /// The journal.
    pub journal: JournalHandle,
    /// The journal's database file (its WAL is beside it).
    pub journal_path: PathBuf,
    /// The per-guest queue.
    pub queue: GuestQueue,
    /// The reconcile loop's status.
    pub reconcile: watch::Receiver<ReconcileStatus>,
    /// The hub loop's status.
    pub hub: watch::Receiver<HubStatus>,
}

fn unix_seconds(at: jiff::Timestamp) -> f64 {
    at.as_duration().as_secs_f64()
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

impl ReadSnapshot for Sources {
    /// Reads everything a scrape shows. A journal that cannot be read leaves the backup and
    /// restore-test families empty for this scrape (logged).
    fn read(&self) -> BoxFuture<'_, Snapshot> {
        Box::pin(self.gather())
    }
}

impl Sources {
    async fn gather(&self) -> Snapshot {
        let depth = self.queue.depth();
        let mut wal = self.journal_path.clone().into_os_string();
        wal.push("-wal");
        let (desired_generation, applied_generation, reconcile_last_failed, guests) = {
            let status = self.reconcile.borrow();
            let mut by_status = std::collections::BTreeMap::<String, u64>::new();
            for guest in &status.guests {
                let name = serde_json::to_value(guest.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "unknown".to_owned());
                *by_status.entry(name).or_default() += 1;
            }
            (
                status.generation,
                status.applied_generation,
                status.last_error.is_some(),
                by_status.into_iter().collect(),
            )
        };
        let (hub_connected, hub_poll_failures) = {
            let hub = self.hub.borrow();
            (hub.connected, hub.failures)
        };
        let backups = match self.journal.last_backups().await {
            Ok(backups) => backups
                .into_iter()
                .map(|b| BackupFigures {
                    guest: b.guest_id,
                    target: b.target.unwrap_or(b.storage),
                    succeeded: b.ok,
                    last_success: b
                        .last_ok_at
                        .or(b.ok.then_some(b.finished_at))
                        .map(unix_seconds),
                })
                .collect(),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "metrics: reading the last backups failed");
                Vec::new()
            }
        };
        let restore_tests = match self.journal.last_restore_tests().await {
            Ok(tests) => tests
                .into_iter()
                .map(|t| {
                    let passed = t.result.outcome == TestOutcome::Passed;
                    RestoreTestFigures {
                        guest: t.result.guest_id,
                        target: t.result.storage,
                        passed,
                        finished: unix_seconds(t.finished_at),
                        last_pass: t
                            .last_passed_at
                            .or(passed.then_some(t.finished_at))
                            .map(unix_seconds),
                    }
                })
                .collect(),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "metrics: reading the last restore tests failed");
                Vec::new()
            }
        };
        Snapshot {
            queue_operations: depth.operations,
            queue_busy_guests: depth.guests,
            journal_database_bytes: file_len(&self.journal_path),
            journal_wal_bytes: file_len(Path::new(&wal)),
            desired_generation,
            applied_generation,
            reconcile_last_failed,
            guests,
            hub_connected,
            hub_poll_failures,
            backups,
            restore_tests,
        }
    }
}
