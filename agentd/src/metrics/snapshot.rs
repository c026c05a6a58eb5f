//! What a scrape reads at the moment it runs: the journal's backups and restore tests, its
//! size on disk, the queue, and the reconcile and hub status, as plain numbers. A
//! [`ReadSnapshot`] gathers it (the daemon's, `runtime::metrics_sources`, queries the
//! journal on its thread); `SnapshotCollector` encodes it.

use std::sync::Arc;

use futures::future::BoxFuture;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

/// How many guests of one kind the last reconcile pass reported in one status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestFigures {
    /// The reported status (`running`, `stopped`, …).
    pub status: String,
    /// The guest's kind as the journal recorded it when the agent made, recovered or adopted
    /// it (decision 0123); for a guest the journal has no record of, what Proxmox lists it as.
    pub kind: bosun_proto::desired::GuestKind,
    /// How many.
    pub count: u64,
}

/// The newest backup of one guest to one target.
#[derive(Debug, Clone, PartialEq)]
pub struct BackupFigures {
    /// The hub's guest id.
    pub guest: String,
    /// The manifest target's durable id, or the Proxmox storage id.
    pub target: String,
    /// Whether the newest run succeeded.
    pub succeeded: bool,
    /// When the newest successful run finished, Unix seconds.
    pub last_success: Option<f64>,
}

/// The newest restore test of one guest's backups on one tier's storage.
#[derive(Debug, Clone, PartialEq)]
pub struct RestoreTestFigures {
    /// The hub's guest id.
    pub guest: String,
    /// The storage the archive came from.
    pub target: String,
    /// Whether it passed.
    pub passed: bool,
    /// When it finished, Unix seconds.
    pub finished: f64,
    /// When the newest passing test finished, Unix seconds.
    pub last_pass: Option<f64>,
}

/// One scrape's reading.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Operations queued or running.
    pub queue_operations: usize,
    /// Guests with an operation queued or running.
    pub queue_busy_guests: usize,
    /// Bytes of the journal's database file.
    pub journal_database_bytes: u64,
    /// Bytes of its write-ahead log (0 when there is none).
    pub journal_wal_bytes: u64,
    /// The desired generation the last pass worked from.
    pub desired_generation: u64,
    /// The newest generation a pass converged to.
    pub applied_generation: u64,
    /// Whether the last pass reported an error.
    pub reconcile_last_failed: bool,
    /// Guests by reported status and kind.
    pub guests: Vec<GuestFigures>,
    /// Whether the last hub poll succeeded.
    pub hub_connected: bool,
    /// Failed polls in a row.
    pub hub_poll_failures: u32,
    /// Newest backup per guest and target (empty when the journal could not be read).
    pub backups: Vec<BackupFigures>,
    /// Newest restore test per guest and target.
    pub restore_tests: Vec<RestoreTestFigures>,
}

/// Where a scrape reads its [`Snapshot`] from. The daemon's wiring gathers it from the
/// journal, the queue and the status channels (`runtime::metrics_sources`); this module
/// sees only the numbers.
pub trait ReadSnapshot: Send + Sync + std::fmt::Debug {
    /// Reads everything one scrape shows.
    fn read(&self) -> BoxFuture<'_, Snapshot>;
}

/// Encodes the current [`Snapshot`] under the agent's prefix.
#[derive(Debug)]
pub(super) struct SnapshotCollector {
    snapshot: Arc<Mutex<Snapshot>>,
}

impl SnapshotCollector {
    pub(super) fn new(snapshot: Arc<Mutex<Snapshot>>) -> Self {
        Self { snapshot }
    }
}

/// Counts and sizes as sample values (exact below 2^53).
#[allow(clippy::cast_precision_loss)]
fn float(value: u64) -> f64 {
    value as f64
}

fn flag(value: bool) -> f64 {
    if value { 1.0 } else { 0.0 }
}

/// Writes one gauge family: its descriptor, then each labelled sample.
fn gauges<'l>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (&'l [(&'static str, &'l str)], f64)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in samples {
        ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The backups' gauges: each guest's newest success and whether its newest run succeeded.
fn backup_gauges(encoder: &mut DescriptorEncoder<'_>, s: &Snapshot) -> Result<(), std::fmt::Error> {
    let backup_labels: Vec<[(&'static str, &str); 2]> = s
        .backups
        .iter()
        .map(|b| [("guest", b.guest.as_str()), ("target", b.target.as_str())])
        .collect();
    gauges(
        encoder,
        "backup_last_success_timestamp_seconds",
        "When the newest successful backup of the guest to the target finished",
        backup_labels
            .iter()
            .zip(&s.backups)
            .filter_map(|(l, b)| Some((&l[..], b.last_success?))),
    )?;
    gauges(
        encoder,
        "backup_last_run_succeeded",
        "1 when the newest backup of the guest to the target succeeded, else 0",
        backup_labels
            .iter()
            .zip(&s.backups)
            .map(|(l, b)| (&l[..], flag(b.succeeded))),
    )?;
    Ok(())
}

/// The restore tests' gauges: each guest's newest test, whether it passed, its last pass.
fn restore_test_gauges(
    encoder: &mut DescriptorEncoder<'_>,
    s: &Snapshot,
) -> Result<(), std::fmt::Error> {
    let test_labels: Vec<[(&'static str, &str); 2]> = s
        .restore_tests
        .iter()
        .map(|t| [("guest", t.guest.as_str()), ("target", t.target.as_str())])
        .collect();
    gauges(
        encoder,
        "restore_test_last_timestamp_seconds",
        "When the newest restore test of the guest's backups on the target finished",
        test_labels
            .iter()
            .zip(&s.restore_tests)
            .map(|(l, t)| (&l[..], t.finished)),
    )?;
    gauges(
        encoder,
        "restore_test_last_passed",
        "1 when the newest restore test of the guest's backups on the target passed, else 0",
        test_labels
            .iter()
            .zip(&s.restore_tests)
            .map(|(l, t)| (&l[..], flag(t.passed))),
    )?;
    gauges(
        encoder,
        "restore_test_last_pass_timestamp_seconds",
        "When the newest passing restore test of the guest's backups on the target finished",
        test_labels
            .iter()
            .zip(&s.restore_tests)
            .filter_map(|(l, t)| Some((&l[..], t.last_pass?))),
    )?;
    Ok(())
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let s = self.snapshot.lock().clone();
        let scalar = [
            (
                "queue_operations",
                "Guest operations queued or running",
                float(u64::try_from(s.queue_operations).unwrap_or(u64::MAX)),
            ),
            (
                "queue_busy_guests",
                "Guests with an operation queued or running",
                float(u64::try_from(s.queue_busy_guests).unwrap_or(u64::MAX)),
            ),
            (
                "desired_generation",
                "The desired state's generation the last reconcile pass worked from",
                float(s.desired_generation),
            ),
            (
                "applied_generation",
                "The newest desired generation a reconcile pass converged to",
                float(s.applied_generation),
            ),
            (
                "reconcile_last_pass_failed",
                "1 when the last reconcile pass reported an error, else 0",
                flag(s.reconcile_last_failed),
            ),
            (
                "hub_connected",
                "1 when the last poll of the hub succeeded, else 0",
                flag(s.hub_connected),
            ),
            (
                "hub_poll_failures",
                "Failed polls of the hub in a row",
                f64::from(s.hub_poll_failures),
            ),
        ];
        for (name, help, value) in scalar {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        gauges(
            &mut encoder,
            "journal_size_bytes",
            "Size of the journal's files on disk",
            [
                (&[("file", "database")][..], float(s.journal_database_bytes)),
                (&[("file", "wal")][..], float(s.journal_wal_bytes)),
            ],
        )?;
        let guests: Vec<[(&'static str, &str); 2]> = s
            .guests
            .iter()
            .map(|g| [("status", g.status.as_str()), ("kind", g.kind.as_str())])
            .collect();
        gauges(
            &mut encoder,
            "guests",
            "Guests by the status the last reconcile pass reported and their kind",
            guests
                .iter()
                .zip(&s.guests)
                .map(|(labels, g)| (&labels[..], float(g.count))),
        )?;
        backup_gauges(&mut encoder, &s)?;
        restore_test_gauges(&mut encoder, &s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_encodes_its_families_with_bounded_labels() {
        let snapshot = Arc::new(Mutex::new(Snapshot {
            queue_operations: 3,
            journal_database_bytes: 4096,
            guests: vec![
                GuestFigures {
                    status: "running".to_owned(),
                    kind: bosun_proto::desired::GuestKind::Lxc,
                    count: 2,
                },
                GuestFigures {
                    status: "running".to_owned(),
                    kind: bosun_proto::desired::GuestKind::Qemu,
                    count: 1,
                },
            ],
            backups: vec![
                BackupFigures {
                    guest: "g1".to_owned(),
                    target: "local".to_owned(),
                    succeeded: false,
                    last_success: Some(1_700_000_000.5),
                },
                BackupFigures {
                    guest: "g2".to_owned(),
                    target: "local".to_owned(),
                    succeeded: false,
                    last_success: None,
                },
            ],
            restore_tests: vec![RestoreTestFigures {
                guest: "g1".to_owned(),
                target: "local".to_owned(),
                passed: true,
                finished: 1_700_000_100.0,
                last_pass: Some(1_700_000_100.0),
            }],
            ..Snapshot::default()
        }));
        let mut registry = prometheus_client::registry::Registry::default();
        registry
            .sub_registry_with_prefix("bosun_agent")
            .register_collector(Box::new(SnapshotCollector::new(snapshot)));
        let text =
            bosun_metrics::render(&registry, bosun_metrics::Format::Text004).expect("encode");
        for line in [
            "bosun_agent_queue_operations 3.0",
            "bosun_agent_journal_size_bytes{file=\"database\"} 4096.0",
            "bosun_agent_guests{status=\"running\",kind=\"lxc\"} 2.0",
            "bosun_agent_guests{status=\"running\",kind=\"qemu\"} 1.0",
            "bosun_agent_backup_last_success_timestamp_seconds{guest=\"g1\",target=\"local\"} 1700000000.5",
            "bosun_agent_backup_last_run_succeeded{guest=\"g2\",target=\"local\"} 0.0",
            "bosun_agent_restore_test_last_passed{guest=\"g1\",target=\"local\"} 1.0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
        // A guest that never had a good backup has no success time, not a zero.
        assert!(
            !text.contains("backup_last_success_timestamp_seconds{guest=\"g2\""),
            "{text}"
        );
    }
}
