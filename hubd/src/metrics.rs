//! `/metrics` in the Prometheus text format.

use bosun_proto::admin::AlertKind;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::store::HostCounts;

type Labels = Vec<(String, String)>;

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
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("bosun_hub");
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
        Self {
            registry,
            hosts,
            overdue,
            alerts,
            poll_seconds,
            webhook_failures,
            full_reports_requested,
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

    /// Renders the text format with fresh host counts.
    pub fn render(&self, counts: HostCounts) -> Result<String, std::fmt::Error> {
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
        let mut out = String::new();
        encode(&mut out, &self.registry)?;
        Ok(out)
    }
}
