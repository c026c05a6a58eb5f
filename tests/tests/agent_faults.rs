//! Faults: the simulator fails 10 % of all calls (reads, mutations and task
//! polls) and drops 5 % of connections, fails restores and starts at random and
//! holds a stale lock; the agent still converges.
//! Then the hub goes away: the agent, restarted with only its cached desired
//! state, keeps reconciling (a guest stopped behind its back is started again).
//!
//! A failed provisioning step is rolled back by destroying the half-built guest
//! and provisioned again on a later pass; failed `vzstart` tasks exercise the
//! bounded restart retries.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::*;
use bosun_pve::{Pve, Vmid};
use bosun_pvesim::{EndpointFault, FaultConfig, SimConfig};
use uuid::Uuid;

async fn all_running(sim: &bosun_pvesim::SimHandle, count: usize) -> bool {
    let ids = sim.guest_ids();
    ids.len() == count
        && ids.iter().all(|v| sim.guest_running(*v) == Some(true))
        && ids.iter().all(|v| {
            sim.guest_config(*v)
                .is_some_and(|c| !c.contains_key("lock"))
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converges_under_faults_and_keeps_reconciling_without_the_hub() {
    let sim = start_sim(SimConfig::fast()).await;
    sim.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            method: None,
            path: "*".into(),
            error_rate: 0.10,
            drop_rate: 0.05,
            ..EndpointFault::default()
        }],
        failed_task_rate: 0.3,
        failed_task_types: vec!["vzstart".into(), "vzrestore".into()],
        stale_locks: Vec::new(),
    });
    let hub = RealHub::start().await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guests: Vec<(Uuid, String)> = (0..4).map(|i| (Uuid::new_v4(), format!("g{i}"))).collect();
    let list: Vec<(Uuid, &str)> = guests.iter().map(|(g, n)| (*g, n.as_str())).collect();
    hub.put_desired(host, &desired(&sim, &list, "running"))
        .await;
    // Random faults make some provisions fail and start over: a failed restore rolls back, a
    // hiccup after it runs the steps again in place. It converges in 6–17 s (six runs at load
    // 7); before a failed read was asked again and the later steps ran again in place, it
    // took 5–300 s, as one guest's failing passes backed off towards two minutes. The bound
    // is 300 s, under this binary's own limit in `.config/nextest.toml` (360 s).
    eventually(
        Duration::from_secs(300),
        "four guests running under faults",
        || {
            let sim = sim.clone();
            async move { all_running(&sim, 4).await }
        },
    )
    .await;
    let faulted = sim
        .requests()
        .iter()
        .filter(|r| r.status == 500 || r.status == 0)
        .count();
    assert!(
        faulted > 0,
        "no fault was injected; the test proves nothing"
    );

    // The hub goes away for good; the agent restarts from its cache alone.
    agent.stop().await;
    hub.stop().await;
    sim.set_faults(FaultConfig::default());
    let agent = InProcessAgent::start(&files.config_path).await;
    let victim = Vmid::new(sim.guest_ids()[0]).unwrap();
    let root = root_client(&sim);
    let upid = root.stop_ct(victim).await.unwrap();
    root.wait_task(bosun_pve::Op::StopCt, &upid).await.unwrap();
    assert_eq!(sim.guest_running(victim.get()), Some(false));
    eventually(
        Duration::from_secs(60),
        "stopped guest started again offline",
        || {
            let sim = sim.clone();
            async move { sim.guest_running(victim.get()) == Some(true) }
        },
    )
    .await;
    assert!(!agent.handles.hub.borrow().connected, "the hub is gone");
    assert!(all_running(&sim, 4).await);
    agent.stop().await;
    sim.shutdown().await;
}

/// A guest whose start keeps failing is reported `broken` after the bounded
/// retries (5), at the hub too; it is not started again until desired state
/// changes, and a later successful start clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_never_starts_is_reported_broken_until_a_start_succeeds() {
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    hub.put_desired(host, &desired(&sim, &[(guest, "fragile")], "stopped"))
        .await;
    eventually(
        Duration::from_secs(60),
        "guest provisioned, stopped",
        || {
            let sim = sim.clone();
            async move {
                let ids = sim.guest_ids();
                ids.len() == 1 && sim.guest_running(ids[0]) == Some(false)
            }
        },
    )
    .await;
    let vmid = sim.guest_ids()[0];
    sim.set_faults(FaultConfig {
        failed_task_rate: 1.0,
        failed_task_types: vec!["vzstart".into()],
        ..FaultConfig::default()
    });
    sim.clear_requests();
    hub.put_desired(host, &desired(&sim, &[(guest, "fragile")], "running"))
        .await;
    eventually(
        Duration::from_secs(60),
        "hub shows the guest broken",
        || {
            let hub = &hub;
            async move { guest_status_at_hub(hub, host, vmid).await.as_deref() == Some("broken") }
        },
    )
    .await;
    let starts = sim
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/status/start"))
        .count();
    assert_eq!(starts, 5, "five start attempts, then no more");
    // Still broken and not started again while desired state stays the same.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = sim
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/status/start"))
        .count();
    assert_eq!(again, 5, "a broken guest is not retried");
    let audit = agent.handles.journal.audit_since(0, 10_000).await.unwrap();
    assert_eq!(
        audit
            .iter()
            .filter(|e| e.event.event == "guest.broken")
            .count(),
        1,
        "audited once"
    );

    // The fault is fixed and desired state is set again: the start succeeds.
    sim.set_faults(FaultConfig::default());
    let mut renewed = desired(&sim, &[(guest, "fragile")], "running");
    renewed["guests"][0]["resources"]["cores"] = 3.into();
    hub.put_desired(host, &renewed).await;
    eventually(
        Duration::from_secs(60),
        "hub shows the guest running",
        || {
            let hub = &hub;
            async move { guest_status_at_hub(hub, host, vmid).await.as_deref() == Some("running") }
        },
    )
    .await;
    assert_eq!(sim.guest_running(vmid), Some(true));
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

async fn guest_status_at_hub(hub: &RealHub, host: Uuid, vmid: u32) -> Option<String> {
    let detail = hub.host(host).await;
    detail["last_report"]["guests"]
        .as_array()?
        .iter()
        .find(|g| g["vmid"] == vmid)?["status"]
        .as_str()
        .map(str::to_owned)
}

/// When Proxmox's node list cannot be read, the report carries no host metrics (`null`), not
/// zeros the hub would show as an idle, empty machine; a later reading replaces the absence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_host_metrics_reach_the_hub_as_absent_not_as_zeros() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = RealHub::start().await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    eventually(Duration::from_secs(30), "metrics read", || async {
        hub.host(host).await["last_report"]["host"]["cpu_count"]
            .as_u64()
            .is_some_and(|n| n > 0)
    })
    .await;
    sim.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            method: Some("GET".into()),
            path: "/nodes".into(),
            error_rate: 1.0,
            ..EndpointFault::default()
        }],
        ..FaultConfig::default()
    });
    eventually(Duration::from_secs(30), "metrics absent", || async {
        hub.host(host).await["last_report"]["host"].is_null()
    })
    .await;
    let report = hub.host(host).await["last_report"].clone();
    assert!(
        report["guests"].is_array(),
        "the rest of the report still arrives: {report}"
    );
    sim.set_faults(FaultConfig::default());
    eventually(Duration::from_secs(30), "metrics read again", || async {
        hub.host(host).await["last_report"]["host"]["cpu_count"]
            .as_u64()
            .is_some_and(|n| n > 0)
    })
    .await;
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
