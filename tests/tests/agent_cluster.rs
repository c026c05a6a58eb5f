//! A node that is part of a Proxmox cluster, through the real agent, hub and TLS: a guest the
//! agent created that migrates to another node of the cluster is reported `migrated`, not
//! lost; the hub raises `guest_migrated` once, never `guest_lost`; nothing is restored or
//! created for it here (a DR restore would run a second copy beside the first), and its vmid
//! stays taken cluster-wide. When it comes back, it is the agent's guest again and the alert
//! resolves as recovered.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::*;
use bosun_proto::report::GuestStatus;
use reqwest::Method;
use serde_json::Value;
use uuid::Uuid;

/// The hub's alerts of `kind` for `host`.
async fn alerts(hub: &RealHub, host: Uuid, kind: &str) -> Vec<Value> {
    let (_, alerts) = hub
        .admin(Method::GET, "/v1/admin/alerts?limit=1000", None)
        .await;
    alerts
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["kind"] == kind && a["host_id"] == host.to_string())
        .cloned()
        .collect()
}

/// What the agent reports of `guest`, once it reports `status`.
async fn reported(agent: &InProcessAgent, guest: Uuid, status: GuestStatus) {
    let mut rx = agent.handles.reconcile.clone();
    tokio::time::timeout(
        Duration::from_secs(60),
        rx.wait_for(|s| {
            s.guests
                .iter()
                .any(|g| g.guest_id == Some(guest) && g.status == status)
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("guest {guest} is not reported {status:?} after 60 s"))
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_migrated_to_another_node_is_reported_and_never_restored_here() {
    let (sim, hub, files) = enrolled_stack().await;
    sim.join_cluster("lab", &["pve2", "pve3"]);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    // The default DR policy is `auto`: a guest judged lost would be restored at once.
    hub.put_desired(host, &desired(&sim, &[(guest, "shop")], "running"))
        .await;
    let vmid = running_vmid(&agent.handles.reconcile, guest).await;

    sim.migrate_guest(vmid, "pve2").unwrap();
    sim.clear_requests();
    reported(&agent, guest, GuestStatus::Migrated).await;
    eventually(
        Duration::from_secs(30),
        "the hub raises guest_migrated",
        || async { !alerts(&hub, host, "guest_migrated").await.is_empty() },
    )
    .await;
    let raised = alerts(&hub, host, "guest_migrated").await;
    let message = raised[0]["message"].as_str().unwrap();
    assert!(
        message.contains(&guest.to_string()) && message.contains("another node"),
        "{message}"
    );

    // Several more passes: still one alert, never lost, nothing created or restored.
    let passes = agent.handles.reconcile.borrow().passes;
    let mut rx = agent.handles.reconcile.clone();
    tokio::time::timeout(
        Duration::from_secs(30),
        rx.wait_for(|s| s.passes >= passes + 3),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(alerts(&hub, host, "guest_migrated").await.len(), 1);
    assert!(alerts(&hub, host, "guest_lost").await.is_empty());
    let created: Vec<String> = sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == "/nodes/pve/lxc")
        .map(|r| format!("{r:?}"))
        .collect();
    assert!(
        created.is_empty(),
        "nothing is created for a migrated guest: {created:?}"
    );
    assert!(!sim.guest_ids().contains(&vmid));
    // The migrated guest's vmid is taken cluster-wide: nextid never offers it.
    use bosun_pve::Pve as _;
    assert_ne!(root_client(&sim).next_id().await.unwrap().get(), vmid);

    // It comes back: the agent's own guest again, and the alert resolves as recovered.
    sim.migrate_guest_back(vmid).unwrap();
    reported(&agent, guest, GuestStatus::Running).await;
    eventually(
        Duration::from_secs(30),
        "guest_migrated resolves as guest_recovered",
        || async { !alerts(&hub, host, "guest_recovered").await.is_empty() },
    )
    .await;
    agent.stop().await;
}
