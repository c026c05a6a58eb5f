//! Host health end to end: the simulator (whose node load a test sets), a real hub and the
//! agent. CPU and disk use past their high thresholds for enough samples open one alert each,
//! which stays open between the thresholds and recovers at the low one; a failing or unreadable
//! disk (SMART through the helper) opens `smart_failing` per disk until it passes; the tunnel's
//! readiness endpoint (a stand-in HTTP server on loopback) down for longer than its bound opens
//! `tunnel_down`, whatever the way it is down (503, refused connections, no answer), and its
//! return recovers it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use agent_support::*;
use bosun_pvesim::NodeLoad;
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

const GIB: u64 = 1 << 30;

/// Alerts of `kind` the hub raised for `host`.
async fn alerts(hub: &RealHub, host: Uuid, kind: &str) -> Vec<Value> {
    let (status, body) = hub
        .admin(Method::GET, "/v1/admin/alerts?limit=1000", None)
        .await;
    assert_eq!(status, 200, "{body}");
    body.as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a["kind"] == kind && a["host_id"] == json!(host))
        .collect()
}

/// The host's events of `kind`.
async fn events(hub: &RealHub, host: Uuid, kind: &str) -> Vec<Value> {
    let (status, body) = hub
        .admin(
            Method::GET,
            &format!("/v1/admin/events?host={host}&limit=10000"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body.as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

async fn last_report(hub: &RealHub, host: Uuid) -> Value {
    hub.host(host).await["last_report"].clone()
}

/// Waits until the hub has `count` alerts of `kind` for `host`.
async fn alerted(hub: &RealHub, host: Uuid, kind: &str, count: usize) {
    eventually(
        Duration::from_secs(30),
        &format!("{count} `{kind}` alert(s)"),
        || async { alerts(hub, host, kind).await.len() >= count },
    )
    .await;
    assert_eq!(alerts(hub, host, kind).await.len(), count, "{kind}");
}

fn append_config(files: &AgentFiles, text: &str) {
    let mut config = std::fs::read_to_string(&files.config_path).unwrap();
    config.push_str(text);
    std::fs::write(&files.config_path, config).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_past_a_threshold_opens_one_alert_that_holds_between_thresholds_and_recovers_at_the_low_one()
 {
    let (sim, hub, files) = enrolled_stack().await;
    sim.set_rootfs_size(100 * GIB);
    append_config(
        &files,
        "[health]\ninterval_ms = 100\nsamples = 3\ncpu_high_percent = 90\ncpu_low_percent = 70\ndisk_high_percent = 90\ndisk_low_percent = 80\n",
    );
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    eventually(
        Duration::from_secs(30),
        "the hub sees the gauges",
        || async {
            let r = last_report(&hub, host).await;
            r["host_health"]["cpu"]["raised"] == false
                && r["host_health"]["disk"]["usage"].is_number()
        },
    )
    .await;
    let health = last_report(&hub, host).await["host_health"].clone();
    assert_eq!(health["cpu"]["high"], 0.9, "{health}");
    assert_eq!(health["cpu"]["low"], 0.7, "{health}");
    assert!(health["load_avg"].is_array(), "{health}");

    // A single high sample is not enough: the agent wants three in a row. The simulator keeps
    // answering with the high value, so the alert comes once the streak is long enough.
    sim.set_node_load(NodeLoad {
        cpu: Some(0.95),
        rootfs_used: Some(96 * GIB),
        ..NodeLoad::default()
    })
    .unwrap();
    alerted(&hub, host, "host_cpu_high", 1).await;
    alerted(&hub, host, "host_disk_high", 1).await;
    let cpu_alert = &alerts(&hub, host, "host_cpu_high").await[0];
    assert!(
        cpu_alert["message"].as_str().unwrap().contains("95%"),
        "{cpu_alert}"
    );
    assert!(
        alerts(&hub, host, "host_memory_high").await.is_empty(),
        "memory stayed low"
    );

    // Many more high samples: still one alert per condition.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(alerts(&hub, host, "host_cpu_high").await.len(), 1);
    assert_eq!(alerts(&hub, host, "host_disk_high").await.len(), 1);

    // Between the thresholds: the alerts hold (hysteresis), nothing recovers.
    sim.set_node_load(NodeLoad {
        cpu: Some(0.8),
        rootfs_used: Some(85 * GIB),
        ..NodeLoad::default()
    })
    .unwrap();
    eventually(
        Duration::from_secs(30),
        "the hub sees the middle readings",
        || async {
            let r = last_report(&hub, host).await;
            r["host_health"]["cpu"]["usage"] == 0.8
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let r = last_report(&hub, host).await;
    assert_eq!(r["host_health"]["cpu"]["raised"], true, "{r}");
    assert_eq!(r["host_health"]["disk"]["raised"], true, "{r}");
    assert!(alerts(&hub, host, "host_usage_recovered").await.is_empty());

    // At or below the low threshold: each recovers once.
    sim.set_node_load(NodeLoad {
        cpu: Some(0.5),
        rootfs_used: Some(50 * GIB),
        ..NodeLoad::default()
    })
    .unwrap();
    alerted(&hub, host, "host_usage_recovered", 2).await;
    assert_eq!(events(&hub, host, "host_cpu_high").await.len(), 1);
    assert_eq!(events(&hub, host, "host_disk_high").await.len(), 1);

    // The hub's metrics show the readings.
    let metrics = hub_metrics(&hub).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("bosun_hub_host_usage_ratio{")
                && l.contains("resource=\"cpu\"")
                && l.contains(&host.to_string())),
        "{metrics}"
    );

    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

async fn hub_metrics(hub: &RealHub) -> String {
    hub.client
        .get(format!("{}/metrics", hub.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_or_unreadable_disk_is_alerted_once_per_disk_until_it_passes() {
    let (sim, hub, files) = enrolled_stack().await;
    let passed = json!({"model_name": "Simulated Disk", "smart_status": {"passed": true}});
    let failed = json!({"model_name": "Simulated Disk", "smart_status": {"passed": false}});
    files.helper.set_smart("/dev/sda", Ok((passed.clone(), 0)));
    files.helper.set_smart("/dev/sdb", Ok((passed.clone(), 0)));
    append_config(
        &files,
        "[health]\nsmart_devices = [\"/dev/sda\", \"/dev/sdb\"]\nsmart_interval_ms = 100\n",
    );
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    eventually(
        Duration::from_secs(30),
        "the hub sees both disks pass",
        || async {
            let r = last_report(&hub, host).await;
            r["host_health"]["smart"]
                .as_array()
                .is_some_and(|s| s.len() == 2 && s.iter().all(|d| d["state"] == "passed"))
        },
    )
    .await;
    assert!(files.helper.verbs().contains(&"smart_status"));
    assert!(alerts(&hub, host, "smart_failing").await.is_empty());

    // sda says it is failing (smartctl's DISK FAILING bit too); sdb cannot be read.
    files.helper.set_smart("/dev/sda", Ok((failed, 0b1000)));
    files.helper.set_smart(
        "/dev/sdb",
        Err("/usr/sbin/smartctl exited with exit status: 2".into()),
    );
    alerted(&hub, host, "smart_failing", 2).await;
    let messages: Vec<String> = alerts(&hub, host, "smart_failing")
        .await
        .iter()
        .map(|a| a["message"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("/dev/sda") && m.contains("fails its SMART check")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("/dev/sdb") && m.contains("has no SMART reading")),
        "{messages:?}"
    );
    // Read again and again: still one alert per disk.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(alerts(&hub, host, "smart_failing").await.len(), 2);

    files.helper.set_smart("/dev/sda", Ok((passed.clone(), 0)));
    files.helper.set_smart("/dev/sdb", Ok((passed, 0)));
    alerted(&hub, host, "smart_recovered", 2).await;

    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// How the stand-in readiness endpoint answers.
const READY: u16 = 200;
const NOT_READY: u16 = 503;
/// Answers 503 with a body far larger than the agent reads.
const HUGE: u16 = 1;
/// Never answers.
const HANG: u16 = 2;

/// A stand-in for cloudflared's metrics server: `GET /ready` answers as `mode` says.
struct StandIn {
    port: u16,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl StandIn {
    async fn start(mode: Arc<AtomicU16>, port: u16) -> Self {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::clone(&mode);
        let app = axum::Router::new().route(
            "/ready",
            axum::routing::get(move || {
                let state = Arc::clone(&state);
                async move {
                    use axum::http::StatusCode;
                    match state.load(Ordering::SeqCst) {
                        HUGE => (StatusCode::SERVICE_UNAVAILABLE, "x".repeat(4 << 20)),
                        HANG => {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                            (StatusCode::OK, String::new())
                        }
                        code => (
                            StatusCode::from_u16(code).unwrap(),
                            format!(
                                "{{\"status\":{code},\"readyConnections\":{}}}",
                                u16::from(code == READY) * 4
                            ),
                        ),
                    }
                }
            }),
        );
        let stop = tokio_util::sync::CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await;
        });
        Self { port, stop, task }
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.abort();
        let _ = self.task.await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_down_longer_than_its_bound_is_alerted_once_and_recovers() {
    let (sim, hub, files) = enrolled_stack().await;
    let mode = Arc::new(AtomicU16::new(READY));
    let stand_in = StandIn::start(Arc::clone(&mode), 0).await;
    let port = stand_in.port;
    append_config(
        &files,
        &format!(
            "[tunnel]\nreadiness_url = \"http://127.0.0.1:{port}/ready\"\ninterval_ms = 100\ntimeout_ms = 300\ndown_after_ms = 1500\n"
        ),
    );
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    eventually(
        Duration::from_secs(30),
        "the hub sees the tunnel ready",
        || async { last_report(&hub, host).await["tunnel"]["healthy"] == true },
    )
    .await;

    // Not ready: reported down at once, alerted only past the bound.
    mode.store(NOT_READY, Ordering::SeqCst);
    let down_at = Instant::now();
    eventually(
        Duration::from_secs(30),
        "the hub sees the tunnel down",
        || async { last_report(&hub, host).await["tunnel"]["healthy"] == false },
    )
    .await;
    let t = last_report(&hub, host).await["tunnel"].clone();
    assert!(
        t["detail"].as_str().unwrap().contains("503"),
        "the 503 is reported: {t}"
    );
    alerted(&hub, host, "tunnel_down", 1).await;
    assert!(
        down_at.elapsed() >= Duration::from_millis(1500),
        "alerted after {:?}, before its bound",
        down_at.elapsed()
    );

    // Down in every other way: a huge answer (read only in part), no answer at all, nobody
    // listening. Still the one alert.
    mode.store(HUGE, Ordering::SeqCst);
    eventually(
        Duration::from_secs(30),
        "a huge answer is reported cut",
        || async {
            let detail = last_report(&hub, host).await["tunnel"]["detail"].clone();
            detail
                .as_str()
                .is_some_and(|d| d.contains("xxxx") && d.len() <= 1024)
        },
    )
    .await;
    mode.store(HANG, Ordering::SeqCst);
    eventually(Duration::from_secs(30), "no answer is reported", || async {
        let detail = last_report(&hub, host).await["tunnel"]["detail"].clone();
        detail.as_str().is_some_and(|d| d.contains("no answer"))
    })
    .await;
    stand_in.stop().await;
    // Nobody listens, but the port stays this test's: a bound socket that never listens
    // refuses every connection, and no other test's ephemeral port can land on it meanwhile.
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.set_reuseaddr(true).unwrap();
    held.bind(("127.0.0.1".parse::<std::net::IpAddr>().unwrap(), port).into())
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "a refused probe is reported",
        || async {
            let t = last_report(&hub, host).await["tunnel"].clone();
            t["healthy"] == false
                && t["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("no answer") && !d.contains("timed out"))
        },
    )
    .await;
    assert_eq!(alerts(&hub, host, "tunnel_down").await.len(), 1);
    assert!(alerts(&hub, host, "tunnel_recovered").await.is_empty());

    // Back on the same port, ready: recovered.
    mode.store(READY, Ordering::SeqCst);
    drop(held);
    let stand_in = StandIn::start(Arc::clone(&mode), port).await;
    alerted(&hub, host, "tunnel_recovered", 1).await;
    assert_eq!(last_report(&hub, host).await["tunnel"]["raised"], false);
    assert_eq!(events(&hub, host, "tunnel_down").await.len(), 1);

    stand_in.stop().await;
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
