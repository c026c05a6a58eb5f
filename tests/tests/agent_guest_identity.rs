//! Who a destructive operation may touch, and a lost guest never replaced by a blank
//! one (DESIGN §5), run the way a hostile hub would: a real agent, a real hub, signed
//! jobs through `bosunctl`, a stranger container made behind the agent's back, and the
//! simulator's request log counting what the agent's token asked of Proxmox.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::jobs::{job_result, submit};
use agent_support::signing::OperatorKey;
use agent_support::*;
use bosun_pve::{Pve, RestoreRequest, StorageId, Vmid, VolumeId};
use bosun_pvesim::SimHandle;
use serde_json::Value;
use uuid::Uuid;

/// Creates an unrelated container at `vmid` (not through the agent), stopped.
async fn create_stranger(sim: &SimHandle, vmid: u32) {
    let root = root_client(sim);
    let mut request = RestoreRequest::new(
        Vmid::new(vmid).unwrap(),
        VolumeId::new(sim.endpoint().golden_volid.clone()).unwrap(),
        StorageId::new("local-lvm".to_owned()).unwrap(),
    );
    request.options.hostname = Some("stranger".to_owned());
    request.options.memory = Some(512);
    let upid = root.restore_ct(&request).await.unwrap();
    sim.wait_task(&upid.to_string(), Duration::from_secs(30))
        .await
        .expect("the stranger's restore ends");
    assert!(sim.guest_ids().contains(&vmid), "the stranger exists");
}

/// What the agent's own token asked of Proxmox, other than reads.
fn agent_mutations(sim: &SimHandle) -> Vec<bosun_pvesim::LoggedRequest> {
    let agent = sim.endpoint().tokens.agent.id.clone();
    mutations(sim)
        .into_iter()
        .filter(|r| r.token_id.as_deref() == Some(agent.as_str()))
        .collect()
}

/// The agent's mutations of guest `vmid` (config PUT, resize, start, stop, DELETE…).
fn touches(sim: &SimHandle, vmid: u32) -> Vec<String> {
    let prefix = format!("/nodes/pve/lxc/{vmid}");
    agent_mutations(sim)
        .into_iter()
        .filter(|r| r.path == prefix || r.path.starts_with(&format!("{prefix}/")))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

/// Guest creations (restores) the agent asked for.
fn creates(sim: &SimHandle) -> usize {
    agent_mutations(sim)
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/nodes/pve/lxc")
        .count()
}

/// `desired` with guest `guest` pinned to `vmid`.
fn pin(mut desired: Value, guest: Uuid, vmid: u32) -> Value {
    for g in desired["guests"].as_array_mut().unwrap() {
        if g["guest_id"] == guest.to_string().as_str() {
            g["vmid"] = vmid.into();
        }
    }
    desired
}

fn decommission_args(host: Uuid, guest: Uuid, vmid: u32) -> [String; 8] {
    [
        "--kind".into(),
        "decommission".into(),
        "--host".into(),
        host.to_string(),
        "--guest".into(),
        guest.to_string(),
        "--vmid".into(),
        vmid.to_string(),
    ]
}

async fn decommission(
    hub: &RealHub,
    operator: &OperatorKey,
    files: &AgentFiles,
    host: Uuid,
    guest: Uuid,
    vmid: u32,
) -> Uuid {
    let args = decommission_args(host, guest, vmid);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    submit(hub, operator, files.dir.path(), &args).await
}

/// The agent's last report of guest `guest`.
fn reported(agent: &InProcessAgent, guest: Uuid) -> Option<bosun_proto::report::GuestReport> {
    agent
        .handles
        .reconcile
        .borrow()
        .guests
        .iter()
        .find(|g| g.guest_id == Some(guest))
        .cloned()
}

/// A1: a second signed decommission of a guest, delivered after Proxmox gave the
/// guest's vmid to a stranger and the hub pinned the guest to it, is refused
/// `already_gone`; the stranger is never touched. A pin naming another guest's vmid
/// does not redirect a job either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_decommission_after_the_vmid_was_reused_is_refused_already_gone() {
    let (sim, hub, files) = enrolled_stack().await;
    let operator = files.trusted_operator();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let (x, y) = (Uuid::new_v4(), Uuid::new_v4());
    let both = desired(&sim, &[(x, "customer-x"), (y, "customer-y")], "running");
    hub.put_desired(host, &both).await;
    let vmid_x = running_vmid(&agent.handles.reconcile, x).await;
    let vmid_y = running_vmid(&agent.handles.reconcile, y).await;

    // A pin naming Y's vmid does not make Y the target of a job for X.
    hub.put_desired(host, &pin(both.clone(), x, vmid_y)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let redirected = decommission(&hub, &operator, &files, host, x, vmid_y).await;
    let result = job_result(&hub, host, redirected).await;
    assert_eq!(result["outcome"], "rejected", "{result}");
    assert_eq!(result["output"]["code"], "target_mismatch", "{result}");
    assert!(destructive(&sim).is_empty(), "{:?}", destructive(&sim));

    // X is decommissioned for real.
    hub.put_desired(host, &desired(&sim, &[(y, "customer-y")], "running"))
        .await;
    let first = decommission(&hub, &operator, &files, host, x, vmid_x).await;
    let result = job_result(&hub, host, first).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert!(!sim.guest_ids().contains(&vmid_x));

    // Proxmox hands X's vmid to a guest the agent did not create; the hub pins X to it.
    create_stranger(&sim, vmid_x).await;
    sim.clear_requests();
    let pinned = pin(
        desired(&sim, &[(x, "customer-x"), (y, "customer-y")], "running"),
        x,
        vmid_x,
    );
    hub.put_desired(host, &pinned).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = decommission(&hub, &operator, &files, host, x, vmid_x).await;
    let result = job_result(&hub, host, second).await;
    assert_eq!(result["outcome"], "rejected", "{result}");
    assert_eq!(result["output"]["code"], "already_gone", "{result}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(destructive(&sim).is_empty(), "{:?}", destructive(&sim));
    assert_eq!(touches(&sim, vmid_x), Vec::<String>::new());
    assert!(sim.guest_ids().contains(&vmid_x), "the stranger survives");
    assert_eq!(
        sim.guest_config(vmid_x)
            .unwrap()
            .get("hostname")
            .map(String::as_str),
        Some("stranger")
    );
    assert_eq!(
        creates(&sim),
        0,
        "a decommissioned guest is not provisioned again"
    );
    assert_eq!(sim.guest_running(vmid_y), Some(true));
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// Waits until the agent reports `guest` lost under `vmid`.
async fn reported_lost(agent: &InProcessAgent, guest: Uuid, vmid: u32) {
    eventually(
        Duration::from_secs(30),
        "the guest is reported lost",
        || async {
            reported(agent, guest).is_some_and(|g| {
                g.status == bosun_proto::report::GuestStatus::Lost && g.vmid == vmid
            })
        },
    )
    .await;
}

/// Waits until the hub holds a `guest_lost` alert naming `guest`.
async fn hub_alerted_lost(hub: &RealHub, guest: Uuid) {
    eventually(
        Duration::from_secs(30),
        "the hub raises guest_lost",
        || async {
            let (_, alerts) = hub
                .admin(reqwest::Method::GET, "/v1/admin/alerts", None)
                .await;
            alerts.as_array().into_iter().flatten().any(|a| {
                a["kind"] == "guest_lost"
                    && a["message"]
                        .as_str()
                        .unwrap_or_default()
                        .contains(&guest.to_string())
            })
        },
    )
    .await;
}

/// B8: a guest the agent created, destroyed behind its back, is reported `lost`, the
/// hub raises `guest_lost`, and nothing is created or restored in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_destroyed_behind_the_agents_back_is_lost_not_replaced() {
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    hub.put_desired(host, &desired(&sim, &[(guest, "customer")], "running"))
        .await;
    let vmid = running_vmid(&agent.handles.reconcile, guest).await;
    sim.clear_requests();

    destroy_behind_its_back(&sim, vmid).await;
    // Several reconcile passes (one a second): nothing is provisioned in its place.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(creates(&sim), 0, "{:?}", agent_mutations(&sim));
    assert!(
        agent_mutations(&sim).is_empty(),
        "{:?}",
        agent_mutations(&sim)
    );
    assert!(sim.guest_ids().is_empty(), "{:?}", sim.guest_ids());
    reported_lost(&agent, guest, vmid).await;
    hub_alerted_lost(&hub, guest).await;
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// D13: a guest deleted outside Bosun and an unrelated container created at the freed
/// vmid: the stranger is never touched (no config PUT, resize or start), the guest is
/// reported lost, and a signed decommission of the guest fails `target_mismatch`
/// instead of destroying the stranger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_at_a_lost_guests_vmid_is_not_adopted() {
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    hub.put_desired(host, &desired(&sim, &[(guest, "customer")], "running"))
        .await;
    let vmid = running_vmid(&agent.handles.reconcile, guest).await;

    destroy_behind_its_back(&sim, vmid).await;
    create_stranger(&sim, vmid).await;
    sim.clear_requests();
    // Several reconcile passes (one a second): the stranger is never touched.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(touches(&sim, vmid), Vec::<String>::new());
    assert_eq!(creates(&sim), 0, "{:?}", agent_mutations(&sim));
    let config = sim.guest_config(vmid).unwrap();
    assert_eq!(config.get("hostname").map(String::as_str), Some("stranger"));
    assert_eq!(config.get("memory").map(String::as_str), Some("512"));
    assert_eq!(sim.guest_running(vmid), Some(false));
    reported_lost(&agent, guest, vmid).await;

    // A signed decommission of the lost guest does not destroy what now holds its vmid:
    // the agent looks for the identity it wrote before acting.
    let operator = files.trusted_operator();
    let job = decommission(&hub, &operator, &files, host, guest, vmid).await;
    let result = job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "failed", "{result}");
    assert!(
        result["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("target_mismatch"),
        "{result}"
    );
    assert!(destructive(&sim).is_empty(), "{:?}", destructive(&sim));
    assert_eq!(touches(&sim, vmid), Vec::<String>::new());
    assert!(sim.guest_ids().contains(&vmid), "the stranger survives");
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
