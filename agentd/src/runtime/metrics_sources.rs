//! What the agent's `/metrics` reads at each scrape, gathered from the journal, the queue and
//! the reconcile and hub status channels into the plain numbers of a [`Snapshot`]; the
//! metrics module itself knows none of these.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestKind;
use bosun_proto::report::GuestReport;
use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::guests::queue::GuestQueue;
use crate::guests::reconcile::reconcile_task::ReconcileStatus;
use crate::links::hub::poll_task::HubStatus;
use crate::metrics::snapshot::{
    BackupFigures, GuestFigures, ReadSnapshot, RestoreTestFigures, Snapshot,
};
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

/// The reported guests counted by status and kind: the kind the journal `recorded` for the
/// guest's vmid, or (for a guest it has no record of) the kind Proxmox lists it as.
fn guest_figures(guests: &[GuestReport], recorded: &HashMap<u32, GuestKind>) -> Vec<GuestFigures> {
    let mut counts = BTreeMap::<(String, GuestKind), u64>::new();
    for guest in guests {
        let status = serde_json::to_value(guest.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| "unknown".to_owned());
        let kind = recorded.get(&guest.vmid).copied().unwrap_or(guest.kind);
        *counts.entry((status, kind)).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|((status, kind), count)| GuestFigures {
            status,
            kind,
            count,
        })
        .collect()
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
        // A guest's kind is the one the journal recorded when the agent made it (decision
        // 0123), never desired state's.
        let recorded: HashMap<u32, GuestKind> = match self.journal.all_provenance().await {
            Ok(rows) => rows.into_iter().map(|p| (p.vmid(), p.kind())).collect(),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "metrics: reading the guests' recorded kinds failed; using what Proxmox lists");
                HashMap::new()
            }
        };
        let (desired_generation, applied_generation, reconcile_last_failed, guests) = {
            let status = self.reconcile.borrow();
            (
                status.generation,
                status.applied_generation,
                status.last_error.is_some(),
                guest_figures(&status.guests, &recorded),
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

#[cfg(test)]
mod tests {
    use bosun_proto::report::GuestStatus;

    use super::*;

    fn reported(vmid: u32, kind: GuestKind, status: GuestStatus) -> GuestReport {
        GuestReport {
            guest_id: Some(uuid::Uuid::from_u128(u128::from(vmid))),
            vmid,
            kind,
            hostname: format!("g{vmid}"),
            status,
            resources: None,
            controller_digest: None,
            controller_expected: None,
            addresses: Vec::new(),
        }
    }

    #[test]
    fn a_guest_is_counted_as_the_kind_the_journal_recorded() {
        let guests = [
            reported(100, GuestKind::Lxc, GuestStatus::Running),
            reported(101, GuestKind::Lxc, GuestStatus::Running),
            // Reported as a container (a lost guest desired state calls one), recorded a VM.
            reported(102, GuestKind::Lxc, GuestStatus::Running),
            reported(103, GuestKind::Qemu, GuestStatus::Stopped),
            // No record: what Proxmox lists it as.
            reported(104, GuestKind::Qemu, GuestStatus::Running),
        ];
        let recorded = HashMap::from([
            (100, GuestKind::Lxc),
            (101, GuestKind::Lxc),
            (102, GuestKind::Qemu),
            (103, GuestKind::Qemu),
        ]);
        let figures: Vec<_> = guest_figures(&guests, &recorded)
            .into_iter()
            .map(|f| (f.status, f.kind, f.count))
            .collect();
        assert_eq!(
            figures,
            [
                ("running".to_owned(), GuestKind::Lxc, 2),
                ("running".to_owned(), GuestKind::Qemu, 2),
                ("stopped".to_owned(), GuestKind::Qemu, 1),
            ]
        );
    }
}
