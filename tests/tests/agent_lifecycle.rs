//! The agent's life at the hub beyond polling: a planned stop is not an outage, and a host
//! enrolled with a token that requires approval waits for it visibly and patiently.
//!
//! - SIGTERM: the agent process sends a last poll saying it is stopping, exits well inside
//!   systemd's `TimeoutStopSec`, and the hub shows the host `stopped`; it pages
//!   `host_overdue` only when the stop bound (30 minutes) passes without the host coming
//!   back, and a poll after the restart clears it. The hub runs on a manual clock, so the
//!   sweeps see the hour pass at once.
//! - A hub that does not answer cannot hold the stop up: the last poll gives up after
//!   `STOP_POLL_TIMEOUT`, and the agent says the hub was not told.
//! - Pending approval: the agent's status (`bosun-agentctl status`, the real binary) says the
//!   host waits for an operator, the agent asks the hub again at its slow pending interval,
//!   not on the failure backoff, and is polling normally soon after the approval.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_support::hostile_hub::HostileHub;
use agent_support::process::AgentProcess;
use agent_support::*;
use bosun_agentd::links::hub::link::{HubLink, LinkRecord};
use bosun_agentd::links::hub::poll_task::STOP_POLL_TIMEOUT;
use bosun_hubd::clock::ManualClock;
use bosun_pvesim::SimConfig;
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

/// `TimeoutStopSec=` of the agent's unit: systemd kills an agent still running after it.
fn unit_stop_timeout() -> Duration {
    let unit = include_str!("../../systemd/bosun-agentd.service");
    let secs = unit
        .lines()
        .find_map(|l| l.strip_prefix("TimeoutStopSec="))
        .and_then(|v| v.trim().strip_suffix('s'))
        .and_then(|v| v.parse().ok())
        .expect("the unit sets TimeoutStopSec in seconds");
    Duration::from_secs(secs)
}

async fn alerts(hub: &RealHub) -> Vec<Value> {
    let (status, body) = hub
        .admin(Method::GET, "/v1/admin/alerts?limit=1000", None)
        .await;
    assert_eq!(status, 200, "{body}");
    body.as_array().unwrap().clone()
}

/// The host's alert kinds, oldest first (the API lists newest first).
fn kinds(alerts: &[Value], host: Uuid) -> Vec<String> {
    alerts
        .iter()
        .rev()
        .filter(|a| a["host_id"] == host.to_string())
        .map(|a| a["kind"].as_str().unwrap().to_owned())
        .collect()
}

async fn liveness(hub: &RealHub, host: Uuid) -> String {
    hub.host(host).await["liveness"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The host id the agent stored at enrollment.
async fn enrolled_host(state_dir: &Path) -> Uuid {
    let mut found = None;
    eventually(Duration::from_secs(30), "the agent enrolled", || {
        found = bosun_agentd::links::hub_client::identity::HostIdentity::load(state_dir)
            .ok()
            .flatten()
            .map(|identity| identity.host_id);
        let done = found.is_some();
        async move { done }
    })
    .await;
    found.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_is_a_planned_stop_the_hub_shows_and_pages_only_if_the_host_stays_away() {
    let sim = start_sim(SimConfig::fast()).await;
    let clock = ManualClock::new(jiff::Timestamp::now());
    let hub = RealHub::start_with_clock(Arc::new(clock.clone())).await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
    let agent = AgentProcess::start(&files.config_path);
    let host = enrolled_host(&files.state_dir).await;
    eventually(
        Duration::from_secs(30),
        "the hub hears the agent",
        || async { liveness(&hub, host).await == "ok" },
    )
    .await;

    // systemd stops the agent: SIGTERM.
    let asked = Instant::now();
    let exit = agent.terminate(unit_stop_timeout()).await;
    assert!(exit.success(), "the agent exited with {exit}");
    assert!(
        asked.elapsed() < unit_stop_timeout(),
        "the stop took {:?}",
        asked.elapsed()
    );
    assert_eq!(liveness(&hub, host).await, "stopped");
    let record = LinkRecord::load(&files.state_dir).unwrap().unwrap();
    assert_eq!(
        (record.link, record.stop_announced),
        (HubLink::Stopped, true)
    );

    // Ten minutes of silence, far past the grace window (3 × the 30 s poll interval): a
    // silent host would be paged by now; a stopped one is not.
    for _ in 0..10 {
        clock.advance(Duration::from_secs(60));
        let raised = hub.hub.sweep_once().await.unwrap();
        assert!(raised.is_empty(), "paged during a planned stop: {raised:?}");
    }
    assert_eq!(liveness(&hub, host).await, "stopped");
    assert_eq!(kinds(&alerts(&hub).await, host), Vec::<String>::new());

    // Thirty minutes on, it has not come back: now it is paged, saying so.
    clock.advance(Duration::from_secs(21 * 60));
    let raised = hub.hub.sweep_once().await.unwrap();
    assert_eq!(raised.len(), 1, "{raised:?}");
    assert_eq!(raised[0].kind.as_str(), "host_overdue");
    assert!(
        raised[0].message.contains("stopped on purpose")
            && raised[0].message.contains("has not come back"),
        "{}",
        raised[0].message
    );
    assert_eq!(liveness(&hub, host).await, "overdue");

    // It starts again: its first poll clears the stop and the page.
    let agent = AgentProcess::start(&files.config_path);
    eventually(
        Duration::from_secs(30),
        "the hub hears the agent again",
        || async { liveness(&hub, host).await == "ok" },
    )
    .await;
    assert!(hub.host(host).await.get("stopped_at").is_none());
    assert_eq!(
        kinds(&alerts(&hub).await, host),
        ["host_overdue", "host_recovered"]
    );
    agent.stop();
    hub.stop().await;
}

#[test]
fn the_stop_poll_is_bounded_well_inside_the_units_stop_timeout() {
    // The rest of the shutdown (the local API's grace, in-flight operations) runs meanwhile,
    // but the last poll alone must never use up systemd's patience.
    assert!(
        STOP_POLL_TIMEOUT * 3 <= unit_stop_timeout(),
        "{STOP_POLL_TIMEOUT:?} vs {:?}",
        unit_stop_timeout()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_never_hangs_on_a_hub_that_does_not_answer() {
    let sim = start_sim(SimConfig::fast()).await;
    // A hub that takes the stop poll and never answers it (TLS and HTTP done, no response):
    // only the agent's own bound ends the wait.
    let hub = HostileHub::start().await;
    hub.script.lock().hang_on_stopping = true;
    let files = agent_files(
        &sim,
        &hub.url,
        &hub.fingerprint,
        Some("hostile-enroll-token"),
    );
    let agent = AgentProcess::start(&files.config_path);
    eventually(Duration::from_secs(30), "the agent polls", || {
        let polled = hub.answered(200) > 0;
        async move { polled }
    })
    .await;

    let asked = Instant::now();
    let exit = agent.terminate(unit_stop_timeout()).await;
    assert!(exit.success(), "the agent exited with {exit}");
    assert!(
        asked.elapsed() < STOP_POLL_TIMEOUT + Duration::from_secs(5),
        "the stop took {:?}",
        asked.elapsed()
    );
    // It did try: one last poll, saying so, asking for no long-poll.
    let script = hub.script.lock();
    let last = script.polls.last().unwrap();
    assert!(last.stopping);
    assert_eq!(script.waits.last(), Some(&0));
    assert_eq!(script.polls.iter().filter(|p| p.stopping).count(), 1);
    drop(script);
    let record = LinkRecord::load(&files.state_dir).unwrap().unwrap();
    assert_eq!(
        (record.link, record.stop_announced),
        (HubLink::Stopped, false)
    );
}

/// `target/<profile>/<name>`, where cargo puts the workspace's binaries.
fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the workspace's binaries first (`cargo build --workspace --bins`)",
        path.display()
    );
    path
}

/// What `bosun-agentctl status` prints for the agent of `config`.
async fn agent_status(config: &Path) -> String {
    let out = tokio::process::Command::new(binary("bosun-agentctl"))
        .arg("--config")
        .arg(config)
        .arg("status")
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_awaiting_approval_says_so_and_asks_slowly_until_approved() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = RealHub::start().await;
    let (status, body) = hub
        .admin(
            Method::POST,
            "/v1/admin/enrollment-tokens",
            Some(json!({ "ttl_seconds": 600, "require_approval": true })),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let files = agent_files(
        &sim,
        &hub.url,
        &hub.fingerprint,
        Some(body["token"].as_str().unwrap()),
    );
    // The harness's failure backoff is 50 ms to 500 ms; the pending interval is the shortest
    // the config allows.
    let pending = Duration::from_secs(1);
    let text = std::fs::read_to_string(&files.config_path).unwrap();
    std::fs::write(
        &files.config_path,
        text.replace(
            "report_min_interval_ms = 200\n",
            "report_min_interval_ms = 200\npending_interval_ms = 1000\n",
        ),
    )
    .unwrap();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let mut link = agent.handles.hub.clone();
    eventually(
        Duration::from_secs(30),
        "the agent sees it is pending",
        || {
            let pending = link.borrow().link == HubLink::PendingApproval;
            async move { pending }
        },
    )
    .await;
    assert_eq!(hub.host(host).await["status"], "pending_approval");

    // `bosun-agentctl status` says what the host waits for and who must act.
    let deadline = Instant::now() + Duration::from_secs(10);
    let printed = loop {
        let printed = agent_status(&files.config_path).await;
        if printed.contains("hub link: pending approval") {
            break printed;
        }
        assert!(
            Instant::now() < deadline,
            "status never said pending: {printed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(printed.contains(&format!("host: {host}")), "{printed}");
    assert!(
        printed.contains(&format!("bosunctl hosts approve {host}")),
        "{printed}"
    );
    assert!(printed.contains("agent: running"), "{printed}");
    // And the sealing recipient the operator pins at approval (`bosunctl hosts approve
    // --recipient`), read from the node, not from the hub.
    let recipient = bosun_agentd::trust::keys::sealing::StorageIdentity::load(&files.state_dir)
        .unwrap()
        .expect("made at the first start")
        .recipient();
    assert!(
        printed.contains(&format!("sealing recipient: {recipient}")),
        "{printed}"
    );

    // It asks again at the pending interval (3/4 to 1 × it), not on the failure backoff.
    let mut asked = Vec::new();
    let mut failures = link.borrow_and_update().failures;
    while asked.len() < 3 {
        tokio::time::timeout(Duration::from_secs(10), link.changed())
            .await
            .expect("the agent keeps asking")
            .unwrap();
        let now = link.borrow_and_update().failures;
        if now != failures {
            failures = now;
            asked.push(Instant::now());
        }
    }
    for pair in asked.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= pending * 3 / 4 - Duration::from_millis(50),
            "asked again after {gap:?}"
        );
    }

    // Approved: the agent polls normally within one pending interval or so.
    let (status, body) = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/approve"),
            None,
        )
        .await;
    assert_eq!(status, 204, "{body}");
    eventually(Duration::from_secs(10), "the agent polls normally", || {
        let connected = link.borrow().link == HubLink::Connected && link.borrow().polls > 0;
        async move { connected }
    })
    .await;
    assert_eq!(hub.host(host).await["liveness"], "ok");
    eventually(Duration::from_secs(10), "status shows connected", || {
        let config = files.config_path.clone();
        async move { agent_status(&config).await.contains("hub link: connected") }
    })
    .await;
    agent.stop().await;
    hub.stop().await;
}
