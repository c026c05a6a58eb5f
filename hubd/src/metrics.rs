//! The hub's metrics, served at `/metrics` ([`crate::api::metrics`]) as OpenMetrics or the
//! Prometheus text format 0.0.4, by content negotiation.
//!
//! Counters and the poll-time histogram move as the hub works. The fleet's gauges are
//! computed at each scrape from the store, so they are never stale and survive restarts:
//!
//! | family | labels | meaning |
//! |---|---|---|
//! | `bosun_hub_hosts` | `status` | enrolled hosts by status |
//! | `bosun_hub_hosts_overdue` | | active hosts silent past their grace window |
//! | `bosun_hub_host_info` | `host`, `hostname`, `agent_version` | always 1: names for the host ids |
//! | `bosun_hub_host_last_seen_age_seconds` | `host` | time since the host's last poll |
//! | `bosun_hub_host_overdue` | `host` | 1 while the dead-man's switch holds the host overdue |
//! | `bosun_hub_host_generation_lag` | `host` | desired generation minus the one the host applied |
//! | `bosun_hub_backup_age_seconds` | `host`, `target` | age of the oldest of the guests' newest good backups on the target |
//! | `bosun_hub_backups_failing` | `host`, `target` | guests whose newest backup on the target failed |
//! | `bosun_hub_restore_tests_failing` | `host` | guests whose newest restore test (on any tier) failed |
//! | `bosun_hub_escrow_missing` | `host` | 1 when the host uses PBS and the hub holds no blob of its key |
//! | `bosun_hub_host_usage_ratio` | `host`, `resource` | the host's last CPU, memory or root-disk reading (`cpu`, `memory`, `disk`), a share |
//! | `bosun_hub_host_usage_raised` | `host`, `resource` | 1 while the agent holds that gauge raised (its thresholds and hysteresis) |
//! | `bosun_hub_smart_failing` | `host` | watched disks whose SMART reading is failing or missing (hosts that report health) |
//! | `bosun_hub_tunnel_up` | `host` | 1 while the host's tunnel is ready, 0 while not (hosts that watch one) |
//! | `bosun_hub_guests` | `host`, `kind`, `status` | the guests of the host's last report of each kind (`lxc`, `qemu`) and status (`running`, `stopped`, `lost`, …) |
//! | `bosun_hub_host_health` | `host` | the hub's health roll-up of the host ([`crate::health`]): 0 ok, 1 warning, 2 critical — the level `bosunctl status --check` exits with |
//!
//! Per-host series exist for active hosts only, so their number is bounded by the enrolled
//! hosts (and, for `target`, by the targets each reports; for `kind` and `status`, by the two
//! kinds and the report's statuses). The `process_*` families and
//! `bosun_hub_build_info` come from [`bosun_metrics`].

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use bosun_metrics::{Format, ProcessCollector};
use bosun_proto::admin::{AlertKind, EscrowState, HostDetail, HostStatus, Liveness};
use bosun_proto::desired::GuestKind;
use jiff::Timestamp;
use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::hub::conn_cap::ConnectionMetrics;
use crate::report_alerts::escrow::{pbs_in_use, verified};
use crate::store::HostCounts;

type Labels = Vec<(String, String)>;

/// The alert kinds whose counters exist from the start.
const ALERT_KINDS: [AlertKind; 60] = [
    AlertKind::HostOverdue,
    AlertKind::HostRecovered,
    AlertKind::HubConnectivitySuspected,
    AlertKind::HubConnectivityRestored,
    AlertKind::GuestLost,
    AlertKind::GuestBroken,
    AlertKind::GuestOrphaned,
    AlertKind::GuestMigrated,
    AlertKind::GuestRecovered,
    AlertKind::DestructiveOperation,
    AlertKind::GoldenRefused,
    AlertKind::GoldenVerifyFailed,
    AlertKind::StorageRefused,
    AlertKind::PlacementRefused,
    AlertKind::JobRefused,
    AlertKind::ArchiveRejected,
    AlertKind::StorageLost,
    AlertKind::StorageRecovered,
    AlertKind::BackupFailed,
    AlertKind::BackupRecovered,
    AlertKind::BackupOverdue,
    AlertKind::RestoreTestFailed,
    AlertKind::RestoreTestOverdue,
    AlertKind::RestoreTestRecovered,
    AlertKind::GuestRestored,
    AlertKind::EscrowMissing,
    AlertKind::EscrowVerified,
    AlertKind::ControllerRolledBack,
    AlertKind::ControllerBroken,
    AlertKind::ControllerMismatch,
    AlertKind::ControllerMatched,
    AlertKind::HostCpuHigh,
    AlertKind::HostMemoryHigh,
    AlertKind::HostDiskHigh,
    AlertKind::HostUsageRecovered,
    AlertKind::SmartFailing,
    AlertKind::SmartRecovered,
    AlertKind::TunnelDown,
    AlertKind::TunnelRecovered,
    AlertKind::BreakGlassOpen,
    AlertKind::BreakGlassClosed,
    AlertKind::AgentUpdateFailed,
    AlertKind::GuestCpuHigh,
    AlertKind::GuestMemoryHigh,
    AlertKind::GuestDiskHigh,
    AlertKind::GuestUsageRecovered,
    AlertKind::DiskFailing,
    AlertKind::DiskWorn,
    AlertKind::DiskRecovered,
    AlertKind::PoolFillHigh,
    AlertKind::PoolFillRecovered,
    AlertKind::TemperatureHigh,
    AlertKind::TemperatureRecovered,
    AlertKind::VerifyFailed,
    AlertKind::VerifyOverdue,
    AlertKind::VerifyRecovered,
    AlertKind::BulkUnprotected,
    AlertKind::BulkProtected,
    AlertKind::BulkBackupFailed,
    AlertKind::BulkBackupRecovered,
];
type FloatGauge = Gauge<f64, AtomicU64>;

/// A per-host series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HostLabels {
    host: String,
}

/// A host's name and agent version, for joins.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HostInfoLabels {
    host: String,
    hostname: String,
    agent_version: String,
}

/// A per-host, per-backup-target series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TargetLabels {
    host: String,
    target: String,
}

/// A per-host, per-resource series (`cpu`, `memory`, `disk`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResourceLabels {
    host: String,
    resource: String,
}

/// A per-host count of guests of one kind in one status.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GuestLabels {
    host: String,
    kind: String,
    status: String,
}

/// The per-host gauges, cleared and refilled at each scrape.
#[derive(Debug, Default)]
struct FleetGauges {
    info: Family<HostInfoLabels, Gauge>,
    last_seen_age: Family<HostLabels, FloatGauge>,
    overdue: Family<HostLabels, Gauge>,
    generation_lag: Family<HostLabels, Gauge>,
    backup_age: Family<TargetLabels, FloatGauge>,
    backups_failing: Family<TargetLabels, Gauge>,
    restore_tests_failing: Family<HostLabels, Gauge>,
    escrow_missing: Family<HostLabels, Gauge>,
    usage_ratio: Family<ResourceLabels, FloatGauge>,
    usage_raised: Family<ResourceLabels, Gauge>,
    smart_failing: Family<HostLabels, Gauge>,
    tunnel_up: Family<HostLabels, Gauge>,
    health: Family<HostLabels, Gauge>,
    guests: Family<GuestLabels, Gauge>,
}

impl FleetGauges {
    /// Registers the per-host families in `registry`.
    fn register(registry: &mut Registry) -> Self {
        let fleet = Self::default();
        registry.register(
            "host_info",
            "Active hosts: always 1, with the host's name and agent version as labels",
            fleet.info.clone(),
        );
        registry.register(
            "host_last_seen_age_seconds",
            "Seconds since the host's last poll (hosts that polled at least once)",
            fleet.last_seen_age.clone(),
        );
        registry.register(
            "host_overdue",
            "1 while the host is silent past its grace window, else 0",
            fleet.overdue.clone(),
        );
        registry.register(
            "host_generation_lag",
            "The desired state's generation minus the generation the host last applied",
            fleet.generation_lag.clone(),
        );
        registry.register(
            "backup_age_seconds",
            "Age of the oldest of the guests' newest successful backups on the target",
            fleet.backup_age.clone(),
        );
        registry.register(
            "backups_failing",
            "Guests whose newest backup on the target failed",
            fleet.backups_failing.clone(),
        );
        registry.register(
            "restore_tests_failing",
            "Guests whose newest restore test failed",
            fleet.restore_tests_failing.clone(),
        );
        registry.register(
            "escrow_missing",
            "1 when the host backs up to PBS and the hub holds no escrow blob of the key it reports",
            fleet.escrow_missing.clone(),
        );
        registry.register(
            "host_usage_ratio",
            "The host's last CPU, memory or root-disk reading, a share of the whole",
            fleet.usage_ratio.clone(),
        );
        registry.register(
            "host_usage_raised",
            "1 while the agent holds the host's CPU, memory or root-disk gauge raised",
            fleet.usage_raised.clone(),
        );
        registry.register(
            "smart_failing",
            "Watched disks whose SMART reading is failing or missing",
            fleet.smart_failing.clone(),
        );
        registry.register(
            "tunnel_up",
            "1 while the host's tunnel is ready, 0 while it is not (hosts that watch a tunnel)",
            fleet.tunnel_up.clone(),
        );
        registry.register(
            "guests",
            "The guests of the host's last report, by kind (lxc, qemu) and status",
            fleet.guests.clone(),
        );
        registry.register(
            "host_health",
            "The hub's health roll-up of the host: 0 ok, 1 warning, 2 critical (acknowledged alerts count as warnings at most, silenced ones not at all)",
            fleet.health.clone(),
        );
        fleet
    }
}

/// The hub's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    hosts: Family<Labels, Gauge>,
    overdue: Gauge,
    alerts: Family<Labels, Counter>,
    poll_seconds: Histogram,
    webhook_failures: Counter,
    full_reports_requested: Counter,
    connections: ConnectionMetrics,
    fleet: FleetGauges,
    /// One scrape at a time: a scrape clears and refills the fleet's gauges.
    scrape: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut root = Registry::default();
        root.register_collector(Box::new(ProcessCollector));
        let registry = root.sub_registry_with_prefix("bosun_hub");
        bosun_metrics::register_build_info(registry, env!("CARGO_PKG_VERSION"));
        let hosts = Family::<Labels, Gauge>::default();
        registry.register("hosts", "Enrolled hosts by status", hosts.clone());
        let overdue = Gauge::default();
        registry.register(
            "hosts_overdue",
            "Active hosts silent past their grace window",
            overdue.clone(),
        );
        let alerts = Family::<Labels, Counter>::default();
        registry.register("alerts", "Alerts raised by kind", alerts.clone());
        // Every kind starts at 0, so `increase()` sees the first alert of a kind.
        for kind in ALERT_KINDS {
            let _ = alerts.get_or_create(&vec![("kind".to_owned(), kind.as_str().to_owned())]);
        }
        let poll_seconds = Histogram::new(exponential_buckets(0.000_25, 2.0, 14));
        registry.register(
            "poll_duration_seconds",
            "Time to process a poll, excluding the long-poll hold",
            poll_seconds.clone(),
        );
        let webhook_failures = Counter::default();
        registry.register(
            "webhook_failures",
            "Alerts whose webhook delivery gave up after all retries",
            webhook_failures.clone(),
        );
        let full_reports_requested = Counter::default();
        registry.register(
            "full_reports_requested",
            "Report deltas answered with a request for a full report (no base for them here, or the host's keys are wanted)",
            full_reports_requested.clone(),
        );
        let connections = ConnectionMetrics::register(registry);
        let fleet = FleetGauges::register(registry);
        Self {
            registry: root,
            hosts,
            overdue,
            alerts,
            poll_seconds,
            webhook_failures,
            full_reports_requested,
            connections,
            fleet,
            scrape: Mutex::new(()),
        }
    }

    /// Counts a raised alert.
    pub fn alert_raised(&self, kind: AlertKind) {
        self.alert_named(kind.as_str());
    }

    /// Counts a raised alert or resolution by its event name (storage, backup and restore-test
    /// alerts, whose `<kind>_cleared` is no alert kind).
    pub fn alert_named(&self, kind: &str) {
        self.alerts
            .get_or_create(&vec![("kind".to_owned(), kind.to_owned())])
            .inc();
    }

    /// Observes one poll's processing time.
    pub fn poll_processed(&self, seconds: f64) {
        self.poll_seconds.observe(seconds);
    }

    /// Counts a delta answered with a request for a full report.
    pub fn full_report_requested(&self) {
        self.full_reports_requested.inc();
    }

    /// Counts a webhook delivery that gave up.
    pub fn webhook_failed(&self) {
        self.webhook_failures.inc();
    }

    /// The listeners' connections.
    pub fn connections(&self) -> &ConnectionMetrics {
        &self.connections
    }

    /// Renders every family in `format`, with fresh host counts and the per-host gauges of
    /// `fleet` (the hosts' details as the store has them) at `now`.
    pub fn render(
        &self,
        counts: HostCounts,
        fleet: &[HostDetail],
        now: Timestamp,
        format: Format,
    ) -> Result<String, std::fmt::Error> {
        let _one_scrape = self.scrape.lock();
        for (status, count) in [
            ("pending_approval", counts.pending_approval),
            ("active", counts.active),
            ("revoked", counts.revoked),
        ] {
            self.hosts
                .get_or_create(&vec![("status".to_owned(), status.to_owned())])
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        self.overdue
            .set(i64::try_from(counts.overdue).unwrap_or(i64::MAX));
        self.connections.fill();
        self.fill_fleet(fleet, now);
        bosun_metrics::render(&self.registry, format)
    }

    fn fill_fleet(&self, fleet: &[HostDetail], now: Timestamp) {
        let gauges = &self.fleet;
        gauges.info.clear();
        gauges.last_seen_age.clear();
        gauges.overdue.clear();
        gauges.generation_lag.clear();
        gauges.backup_age.clear();
        gauges.backups_failing.clear();
        gauges.restore_tests_failing.clear();
        gauges.escrow_missing.clear();
        gauges.usage_ratio.clear();
        gauges.usage_raised.clear();
        gauges.smart_failing.clear();
        gauges.tunnel_up.clear();
        gauges.health.clear();
        gauges.guests.clear();
        for detail in fleet
            .iter()
            .filter(|d| d.summary.status == HostStatus::Active)
        {
            let figures = HostFigures::of(detail, now);
            let host = HostLabels {
                host: detail.summary.host_id.to_string(),
            };
            gauges
                .info
                .get_or_create(&HostInfoLabels {
                    host: host.host.clone(),
                    hostname: detail.summary.hostname.clone(),
                    agent_version: detail.summary.agent_version.clone().unwrap_or_default(),
                })
                .set(1);
            if let Some(age) = figures.last_seen_age_seconds {
                gauges.last_seen_age.get_or_create(&host).set(age);
            }
            gauges
                .overdue
                .get_or_create(&host)
                .set(i64::from(figures.overdue));
            gauges
                .generation_lag
                .get_or_create(&host)
                .set(i64::try_from(figures.generation_lag).unwrap_or(i64::MAX));
            gauges
                .restore_tests_failing
                .get_or_create(&host)
                .set(count(figures.restore_tests_failing));
            gauges
                .escrow_missing
                .get_or_create(&host)
                .set(i64::from(figures.escrow_missing));
            for (target, backups) in &figures.backups {
                let labels = TargetLabels {
                    host: host.host.clone(),
                    target: target.clone(),
                };
                if let Some(age) = backups.oldest_good_age_seconds {
                    gauges.backup_age.get_or_create(&labels).set(age);
                }
                gauges
                    .backups_failing
                    .get_or_create(&labels)
                    .set(count(backups.failing));
            }
            if let Some(health) = &detail.summary.health {
                gauges
                    .health
                    .get_or_create(&host)
                    .set(i64::from(health.level.plugin_exit()));
            }
            self.fill_health(&host, detail);
        }
    }

    /// The guest and host-health gauges of one host, from its last report.
    fn fill_health(&self, host: &HostLabels, detail: &HostDetail) {
        let gauges = &self.fleet;
        let Some(report) = &detail.last_report else {
            return;
        };
        let mut guests: BTreeMap<(GuestKind, &'static str), usize> = BTreeMap::new();
        for guest in &report.guests {
            *guests
                .entry((guest.kind, guest.status.as_str()))
                .or_default() += 1;
        }
        for ((kind, status), n) in guests {
            let labels = GuestLabels {
                host: host.host.clone(),
                kind: kind.as_str().to_owned(),
                status: status.to_owned(),
            };
            gauges.guests.get_or_create(&labels).set(count(n));
        }
        if let Some(health) = &report.host_health {
            for (resource, gauge) in [
                ("cpu", &health.cpu),
                ("memory", &health.memory),
                ("disk", &health.disk),
            ] {
                let Some(gauge) = gauge else { continue };
                let labels = ResourceLabels {
                    host: host.host.clone(),
                    resource: resource.to_owned(),
                };
                gauges.usage_ratio.get_or_create(&labels).set(gauge.usage);
                gauges
                    .usage_raised
                    .get_or_create(&labels)
                    .set(i64::from(gauge.raised));
            }
            let failing = health
                .smart
                .iter()
                .filter(|r| r.state != bosun_proto::health::SmartState::Passed)
                .count();
            gauges.smart_failing.get_or_create(host).set(count(failing));
        }
        if let Some(tunnel) = &report.tunnel {
            gauges
                .tunnel_up
                .get_or_create(host)
                .set(i64::from(tunnel.healthy));
        }
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What the per-host gauges say about one host.
#[derive(Debug, Clone, Default, PartialEq)]
struct HostFigures {
    last_seen_age_seconds: Option<f64>,
    overdue: bool,
    generation_lag: u64,
    /// By target (the durable id, or the storage id a backup was reported under).
    backups: BTreeMap<String, TargetBackups>,
    restore_tests_failing: usize,
    escrow_missing: bool,
}

/// The backups of one host's guests on one target.
#[derive(Debug, Clone, Default, PartialEq)]
struct TargetBackups {
    /// Age of the oldest newest-good backup among the guests that have one.
    oldest_good_age_seconds: Option<f64>,
    /// Guests whose newest backup failed.
    failing: usize,
}

impl HostFigures {
    fn of(detail: &HostDetail, now: Timestamp) -> Self {
        let summary = &detail.summary;
        let age = |at: Timestamp| now.duration_since(at).as_secs_f64().max(0.0);
        let mut figures = Self {
            last_seen_age_seconds: summary.last_seen.map(age),
            overdue: summary.liveness == Liveness::Overdue,
            generation_lag: summary
                .desired_generation
                .saturating_sub(summary.applied_generation),
            ..Self::default()
        };
        let Some(report) = &detail.last_report else {
            return figures;
        };
        for backup in &report.last_backups {
            let entry = figures.backups.entry(backup.target.clone()).or_default();
            if !backup.ok {
                entry.failing += 1;
            }
            let last_ok = backup
                .last_ok_at
                .or(backup.ok.then_some(backup.finished_at));
            if let Some(at) = last_ok {
                let guest_age = age(at);
                entry.oldest_good_age_seconds = Some(
                    entry
                        .oldest_good_age_seconds
                        .map_or(guest_age, |oldest| oldest.max(guest_age)),
                );
            }
        }
        figures.restore_tests_failing = crate::report_alerts::restore_results::results(report)
            .iter()
            .filter(|test| crate::report_alerts::restore_results::failing(test))
            .map(|test| test.guest_id)
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let stored = match &summary.escrow {
            EscrowState::None => None,
            EscrowState::Stored {
                key_fingerprint, ..
            }
            | EscrowState::Verified {
                key_fingerprint, ..
            } => Some(key_fingerprint.as_str()),
        };
        figures.escrow_missing = !pbs_in_use(report).is_empty()
            && !verified(stored, report.pbs_key_fingerprint.as_deref());
        figures
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::ALERT_KINDS;
    use crate::report_alerts::WatchKind;

    #[test]
    fn every_watched_alert_and_its_recovery_is_counted_from_the_start() {
        for kind in WatchKind::ALL {
            assert!(ALERT_KINDS.contains(&kind.alert_kind()), "{kind:?}");
            assert!(
                ALERT_KINDS.contains(&kind.recovered_alert_kind()),
                "{kind:?}"
            );
        }
        let names: BTreeSet<&str> = ALERT_KINDS.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), ALERT_KINDS.len(), "a kind is listed twice");
    }
}
