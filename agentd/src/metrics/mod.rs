//! The agent's metrics, served at `/metrics` on a local-only listener ([`metrics_task`]),
//! never on the local API's bridge address.
//!
//! Two kinds of families:
//!
//! - **Counted where the work happens**, through [`agent()`]: Proxmox requests (the daemon's
//!   client tells a [`PveRequestCounter`] of each), reconcile passes
//!   (reconcile/reconcile_task.rs) and local-API responses ([`count_local_api`], a layer of
//!   the local API's router).
//! - **Read at each scrape** ([`snapshot`]): backups and restore tests from the journal (so
//!   they survive restarts), the queue's depth, the journal's size, the reconcile and hub
//!   status, and the `process_*` families from `/proc/self`.
//!
//! | family | labels | kind |
//! |---|---|---|
//! | `bosun_agent_build_info` | `version` | gauge, always 1 |
//! | `bosun_agent_pve_requests_total` | `method`, `endpoint`, `status` | counter |
//! | `bosun_agent_pve_request_duration_seconds` | `method`, `endpoint` | histogram |
//! | `bosun_agent_reconcile_passes_total` | `outcome` | counter |
//! | `bosun_agent_reconcile_duration_seconds` | | histogram |
//! | `bosun_agent_local_api_requests_total` | `route`, `status` | counter |
//! | `bosun_agent_local_api_connections_refused_total` | `cap` (`per_peer`, `per_guest`, `unattributed`, `total`) | counter |
//! | `bosun_agent_local_api_connections_timed_out_total` | `timeout` (`idle`, `header_read`, `write_stall`) | counter |
//! | `bosun_agent_queue_operations` | | gauge: queued or running |
//! | `bosun_agent_queue_busy_guests` | | gauge |
//! | `bosun_agent_journal_size_bytes` | `file` (`database`, `wal`) | gauge |
//! | `bosun_agent_desired_generation`, `bosun_agent_applied_generation` | | gauge |
//! | `bosun_agent_reconcile_last_pass_failed` | | gauge, 0 or 1 |
//! | `bosun_agent_guests` | `status`, `kind` (`lxc`, `qemu`: the journal's record) | gauge |
//! | `bosun_agent_hub_connected` | | gauge, 0 or 1 |
//! | `bosun_agent_hub_poll_failures` | | gauge: failed polls in a row |
//! | `bosun_agent_backup_last_success_timestamp_seconds` | `guest`, `target` | gauge |
//! | `bosun_agent_backup_last_run_succeeded` | `guest`, `target` | gauge, 0 or 1 |
//! | `bosun_agent_restore_test_last_timestamp_seconds` | `guest`, `target` | gauge |
//! | `bosun_agent_restore_test_last_passed` | `guest`, `target` | gauge, 0 or 1 |
//! | `bosun_agent_restore_test_last_pass_timestamp_seconds` | `guest`, `target` | gauge |
//!
//! Every label value comes from a closed set (the Proxmox client's endpoint catalogue, its
//! HTTP methods, status codes, the local API's route templates) or names a guest of this
//! host and one of its backup targets: no vmid, path or free text, so the number of series
//! is bounded by the host's guests and targets.
//!
//! The counted families live in one process-wide registry: the counting sites (the Proxmox
//! client's observer, the reconcile loop, the local API) need no handle threaded through
//! them, and a process runs one agent. This module depends on nothing else in the crate: a
//! scrape's figures come in as plain numbers through [`snapshot::ReadSnapshot`], which the
//! daemon's wiring implements over the journal, the queue and the status channels.

pub mod metrics_task;
pub mod snapshot;

use std::sync::LazyLock;
use std::time::Duration;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use bosun_metrics::{Format, ProcessCollector};
use bosun_pve::{Endpoint, RequestObserver, RequestOutcome};
use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use self::snapshot::{Snapshot, SnapshotCollector};

/// One Proxmox request's series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PveLabels {
    method: &'static str,
    endpoint: &'static str,
    status: String,
}

/// One Proxmox endpoint's latency series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EndpointLabels {
    method: &'static str,
    endpoint: &'static str,
}

/// One reconcile outcome's series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// The local API's connection cap that refused a connection.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CapLabels {
    cap: &'static str,
}

/// The timeout that closed a local-API connection.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TimeoutLabels {
    timeout: &'static str,
}

/// One local-API route and status.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LocalApiLabels {
    route: String,
    status: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// A Proxmox request's `status` label: its HTTP status, `not_sent` or `no_answer`.
fn outcome_label(outcome: RequestOutcome) -> String {
    match outcome {
        RequestOutcome::Answered(code) => code.to_string(),
        RequestOutcome::NotSent => "not_sent".to_owned(),
        RequestOutcome::NoAnswer => "no_answer".to_owned(),
    }
}

/// The agent's registry and counted families.
#[derive(Debug)]
pub struct AgentMetrics {
    registry: Registry,
    pve_requests: Family<PveLabels, Counter>,
    pve_seconds: HistogramFamily<EndpointLabels>,
    reconcile_passes: Family<OutcomeLabels, Counter>,
    reconcile_seconds: Histogram,
    local_api_requests: Family<LocalApiLabels, Counter>,
    local_api_refused: Family<CapLabels, Counter>,
    local_api_timed_out: Family<TimeoutLabels, Counter>,
    /// What the last scrape read; `SnapshotCollector` encodes it.
    snapshot: std::sync::Arc<Mutex<Snapshot>>,
    /// One scrape at a time: a scrape replaces the snapshot, then encodes it.
    scrape: tokio::sync::Mutex<()>,
}

fn pve_histogram() -> Histogram {
    // 5 ms … 10 s.
    Histogram::new(doubling_buckets(0.005, 12))
}

/// `count` bucket bounds from `start`, each twice the one before: the values of
/// `exponential_buckets(start, 2.0, count)`, made by doubling (exact in binary floating point)
/// rather than by `powf`, whose call maps libm's `pow` code and tables into the agent for its
/// whole life (docs/benchmarks.md, "Agent core").
fn doubling_buckets(start: f64, count: usize) -> impl Iterator<Item = f64> {
    std::iter::successors(Some(start), |bound| Some(bound * 2.0)).take(count)
}

impl AgentMetrics {
    fn new() -> Self {
        let mut root = Registry::default();
        root.register_collector(Box::new(ProcessCollector));
        let snapshot = std::sync::Arc::new(Mutex::new(Snapshot::default()));
        let registry = root.sub_registry_with_prefix("bosun_agent");
        bosun_metrics::register_build_info(registry, env!("CARGO_PKG_VERSION"));
        let pve_requests = Family::<PveLabels, Counter>::default();
        registry.register(
            "pve_requests",
            "Proxmox API requests by endpoint template and outcome (HTTP status, not_sent or no_answer); retries count again",
            pve_requests.clone(),
        );
        let pve_seconds: HistogramFamily<EndpointLabels> =
            Family::new_with_constructor(pve_histogram);
        registry.register(
            "pve_request_duration_seconds",
            "Time from sending a Proxmox API request to its answer's status",
            pve_seconds.clone(),
        );
        let reconcile_passes = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "reconcile_passes",
            "Reconcile passes by outcome: settled, progressed, partly_failed or failed",
            reconcile_passes.clone(),
        );
        // 10 ms … 82 s.
        let reconcile_seconds = Histogram::new(doubling_buckets(0.01, 14));
        registry.register(
            "reconcile_duration_seconds",
            "Time one reconcile pass took (observe, plan, apply)",
            reconcile_seconds.clone(),
        );
        let local_api_requests = Family::<LocalApiLabels, Counter>::default();
        registry.register(
            "local_api_requests",
            "Local API responses by route template and HTTP status",
            local_api_requests.clone(),
        );
        let local_api_refused = Family::<CapLabels, Counter>::default();
        registry.register(
            "local_api_connections_refused",
            "Local API connections closed before their TLS handshake, by the cap that was full",
            local_api_refused.clone(),
        );
        let local_api_timed_out = Family::<TimeoutLabels, Counter>::default();
        for timeout in bosun_httpkit::conn::Timeout::ALL {
            // Made at 0, so a rate sees the first.
            let _ = local_api_timed_out.get_or_create(&TimeoutLabels {
                timeout: timeout.name(),
            });
        }
        registry.register(
            "local_api_connections_timed_out",
            "Local API connections closed because they held their place without a request (idle, header_read) or did not read an answer (write_stall)",
            local_api_timed_out.clone(),
        );
        registry.register_collector(Box::new(SnapshotCollector::new(std::sync::Arc::clone(
            &snapshot,
        ))));
        Self {
            registry: root,
            pve_requests,
            pve_seconds,
            reconcile_passes,
            reconcile_seconds,
            local_api_requests,
            local_api_refused,
            local_api_timed_out,
            snapshot,
            scrape: tokio::sync::Mutex::new(()),
        }
    }

    /// Counts one Proxmox request to `endpoint` (the catalogue's path template, never a
    /// filled-in path) and, when an answer came, the time it took.
    pub fn pve_request(&self, endpoint: Endpoint, outcome: RequestOutcome, elapsed: Duration) {
        let method = endpoint.method.as_str();
        let endpoint = endpoint.path;
        self.pve_requests
            .get_or_create(&PveLabels {
                method,
                endpoint,
                status: outcome_label(outcome),
            })
            .inc();
        if matches!(outcome, RequestOutcome::Answered(_)) {
            self.pve_seconds
                .get_or_create(&EndpointLabels { method, endpoint })
                .observe(elapsed.as_secs_f64());
        }
    }

    /// Counts one reconcile pass and its duration.
    pub fn reconcile_pass(&self, outcome: &'static str, elapsed: Duration) {
        self.reconcile_passes
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        self.reconcile_seconds.observe(elapsed.as_secs_f64());
    }

    /// Counts one local-API response.
    pub fn local_api_response(&self, route: &str, status: u16) {
        self.local_api_requests
            .get_or_create(&LocalApiLabels {
                route: route.to_owned(),
                status: status.to_string(),
            })
            .inc();
    }

    /// Counts a local-API connection refused by the cap named `cap`.
    pub fn local_api_refused(&self, cap: &'static str) {
        self.local_api_refused
            .get_or_create(&CapLabels { cap })
            .inc();
    }

    /// Counts a local-API connection closed on `timeout`.
    pub fn local_api_timed_out(&self, timeout: bosun_httpkit::conn::Timeout) {
        self.local_api_timed_out
            .get_or_create(&TimeoutLabels {
                timeout: timeout.name(),
            })
            .inc();
    }

    /// Encodes every family in `format`, the scrape-time ones from `snapshot`.
    pub async fn render(
        &self,
        snapshot: Snapshot,
        format: Format,
    ) -> Result<String, std::fmt::Error> {
        let _one_scrape = self.scrape.lock().await;
        *self.snapshot.lock() = snapshot;
        bosun_metrics::render(&self.registry, format)
    }
}

static AGENT: LazyLock<AgentMetrics> = LazyLock::new(AgentMetrics::new);

/// The process's agent metrics.
pub fn agent() -> &'static AgentMetrics {
    &AGENT
}

/// Counts a Proxmox client's requests into [`agent()`]: the daemon's client is
/// [`observed_by`](bosun_pve::PveClient::observed_by) one.
#[derive(Debug, Clone, Copy, Default)]
pub struct PveRequestCounter;

impl RequestObserver for PveRequestCounter {
    fn request(&self, endpoint: Endpoint, outcome: RequestOutcome, elapsed: Duration) {
        agent().pve_request(endpoint, outcome, elapsed);
    }
}

/// A layer of the local API's router: counts each response by route template (`unmatched`
/// for requests no route took) and status.
pub async fn count_local_api(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    agent().local_api_response(&route, response.status().as_u16());
    response
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::histogram::exponential_buckets;

    #[test]
    fn doubled_bounds_are_the_exponential_ones_bit_for_bit() {
        for (start, count) in [(0.005, 12u16), (0.01, 14)] {
            let doubled: Vec<u64> = super::doubling_buckets(start, usize::from(count))
                .map(f64::to_bits)
                .collect();
            let powered: Vec<u64> = exponential_buckets(start, 2.0, count)
                .map(f64::to_bits)
                .collect();
            assert_eq!(doubled, powered, "from {start}");
        }
    }
}
