//! Hosts describe themselves (decision 0077), end to end: the agent process (the real
//! `bosun-agentd` when `BOSUN_AGENTD_BIN` names it, else this suite re-executed as one) reads
//! its node from the simulator (status, storage, network configuration) and the hub keeps the
//! description; polls that change nothing do not carry it again, and an agent that starts
//! again sends it with its first full report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::process::AgentProcess;
use agent_support::*;
use reqwest::Method;
use serde_json::Value;
use uuid::Uuid;

async fn host_id(hub: &RealHub) -> Uuid {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = hub.admin(Method::GET, "/v1/admin/hosts", None).await;
        if let Some(id) = body
            .as_array()
            .and_then(|a| a.first())
            .and_then(|h| h["host_id"].as_str())
            .and_then(|s| Uuid::parse_str(s).ok())
        {
            return id;
        }
        assert!(tokio::time::Instant::now() < deadline, "the host enrolled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn interface<'a>(caps: &'a Value, name: &str) -> &'a Value {
    caps["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {caps}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_keeps_what_the_node_is_and_polls_that_change_nothing_do_not_repeat_it() {
    let (_sim, hub, files) = enrolled_stack().await;
    let agent = AgentProcess::start(&files.config_path);
    let host = host_id(&hub).await;
    eventually(Duration::from_secs(30), "capabilities at the hub", || {
        let hub = &hub;
        async move { hub.host(host).await["capabilities"].is_object() }
    })
    .await;
    let detail = hub.host(host).await;
    let caps = &detail["capabilities"];
    assert_eq!(caps["cpu_model"], "Simulated CPU", "{caps}");
    assert_eq!(caps["cpu_count"], 16);
    assert_eq!(caps["cpu_sockets"], 1);
    assert_eq!(caps["arch"], "x86_64");
    assert!(
        caps["pve_version"]
            .as_str()
            .is_some_and(|v| v.starts_with("pve-manager/")),
        "{caps}"
    );
    assert!(
        caps["storage_kinds"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "dir")),
        "{caps}"
    );
    assert_eq!(interface(caps, "vmbr0")["kind"], "bridge");
    assert_eq!(interface(caps, "vmbr0")["state"], "up");
    assert_eq!(interface(caps, "eno1")["kind"], "nic");
    assert_eq!(interface(caps, "eno2")["state"], "down");
    assert_eq!(caps["helper"], true, "the harness configures a helper");
    assert_eq!(caps["tunnel"], false, "and no tunnel");
    // Its agent.toml has no [addresses]: the host says so, and every view warns of it.
    assert_eq!(caps["address_pool"], false, "{caps}");

    // The fleet filter finds the host by what it said.
    let (status, listed) = hub
        .admin(
            Method::GET,
            "/v1/admin/hosts?capability=bridge%3Dvmbr0&capability=arch=x86_64",
            None,
        )
        .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    let (_, none) = hub
        .admin(Method::GET, "/v1/admin/hosts?capability=tunnel", None)
        .await;
    assert_eq!(none.as_array().unwrap().len(), 0, "{none}");

    // Settled: more polls arrive, none carries the description again (the hub stamps each
    // description it stores).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = hub.host(host).await;
    let stamped = settled["capabilities_at"].clone();
    let seen = settled["last_seen"].clone();
    eventually(Duration::from_secs(30), "more polls", || {
        let hub = &hub;
        let seen = seen.clone();
        async move { hub.host(host).await["last_seen"] != seen }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = hub.host(host).await;
    assert_ne!(later["last_seen"], seen);
    assert_eq!(
        later["capabilities_at"], stamped,
        "polls that change nothing do not carry the description"
    );

    // A restarted agent sends it with its first (full) report.
    agent.stop();
    let _agent = AgentProcess::start(&files.config_path);
    eventually(Duration::from_secs(30), "the description again", || {
        let hub = &hub;
        let stamped = stamped.clone();
        async move { hub.host(host).await["capabilities_at"] != stamped }
    })
    .await;
}
