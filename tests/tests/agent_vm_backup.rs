//! A VM backed up by its tier as a container is (decision 0118), run the way the agent meets
//! it: the real agent and hub, a VM provisioned from a base signed for VMs, a signed plan
//! that backs it up every five seconds. vzdump freezes the guest's filesystems through its
//! agent for the start of the backup job and thaws them after; the VM's config names its
//! guest before the vzdump; the archive is a `vzdump-qemu-…` one and the hub shows it `ok`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use agent_support::vm::{POOL, append_config, desired_of, vm_golden};

use std::time::{Duration, Instant};

use agent_support::*;
use bosun_proto::desired::GuestKind;
use bosun_proto::report::StateReport;
use serde_json::json;
use uuid::Uuid;

/// The vzdumps of `vmid` that reached Proxmox.
fn vzdumps_of(sim: &bosun_pvesim::SimHandle, vmid: u32) -> usize {
    let id = vmid.to_string();
    sim.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/nodes/pve/vzdump")
        .filter(|r| r.params.iter().any(|(k, v)| k == "vmid" && *v == id))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_is_backed_up_by_its_tier_frozen_through_its_agent_and_tagged_as_its_guest() {
    let (sim, hub, files) = enrolled_stack().await;
    append_config(&files, POOL);
    files.use_local_api(0, "[backup]\nstorage = \"local\"\n");
    let (_volid, _sha, golden) = vm_golden(&sim, &files);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let vm = Uuid::new_v4();
    let mut desired = desired_of(&[(vm, "vm-db", GuestKind::Qemu, golden)]);
    hub.put_desired(host, &desired).await;
    let vmid = running_vmid(&agent.handles.reconcile, vm).await;

    // The operator's plan backs it up to `local` every 5 s.
    desired["backup_policy"]["schedule"] = json!("*:*:0/5");
    desired["data_plan"] =
        agent_support::signing::signed_plan(&agent_support::signing::plan_of(&desired, host));
    let started = Instant::now();
    hub.put_desired(host, &desired).await;
    let prefix = format!("local:backup/vzdump-qemu-{vmid}-");
    eventually(
        Duration::from_secs(30),
        "a vzdump-qemu archive of the VM",
        || {
            let found = sim
                .storage_volumes("local")
                .iter()
                .any(|v| v.starts_with(&prefix));
            async move { found }
        },
    )
    .await;
    let archived = started.elapsed();

    // The hub shows the backup ok, from the agent's journal (its proof recorded).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let backup = loop {
        let detail = hub.host(host).await;
        let report: Option<StateReport> =
            serde_json::from_value(detail["last_report"].clone()).ok();
        let found = report.and_then(|r| r.last_backups.into_iter().find(|b| b.guest_id == vm));
        if let Some(b) = found.filter(|b| b.ok) {
            break b;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the hub shows no ok backup of the VM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(backup.target, "local");

    // vzdump froze the guest through its agent and thawed it; the config names the guest.
    let freezes = sim.vm_backup_freezes(vmid);
    assert!(!freezes.is_empty(), "no freeze recorded");
    assert_eq!(sim.vm_frozen(vmid), Some(false), "left frozen");
    let config = sim.vm_config(vmid).unwrap();
    let tag = format!("bosun-guest-{}", vm.simple());
    assert!(
        config
            .get("tags")
            .is_some_and(|t| t.split(';').any(|x| x == tag)),
        "{config:?}"
    );
    assert!(!config.contains_key("lock"), "{config:?}");
    assert!(vzdumps_of(&sim, vmid) >= 1);
    eprintln!(
        "VM backup on the simulator: freeze window {:?}, first archive {:?} after the plan",
        freezes[0], archived
    );
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// The entries of the hub's audit trail for `host` with `action`.
async fn hub_audit(hub: &RealHub, host: Uuid, action: &str) -> Vec<serde_json::Value> {
    let path = format!("/v1/admin/audit?host={host}&limit=500");
    let (_, page) = hub.admin(reqwest::Method::GET, &path, None).await;
    page["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["action"] == action)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_calling_a_vm_a_container_is_refused_and_the_vm_keeps_being_backed_up() {
    let (sim, hub, files) = enrolled_stack().await;
    append_config(&files, POOL);
    files.use_local_api(0, "[backup]\nstorage = \"local\"\n");
    let (_volid, _sha, golden) = vm_golden(&sim, &files);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let vm = Uuid::new_v4();
    let mut desired = desired_of(&[(vm, "vm-db", GuestKind::Qemu, golden)]);
    hub.put_desired(host, &desired).await;
    let vmid = running_vmid(&agent.handles.reconcile, vm).await;
    desired["backup_policy"]["schedule"] = json!("*:*:0/5");
    desired["data_plan"] =
        agent_support::signing::signed_plan(&agent_support::signing::plan_of(&desired, host));
    hub.put_desired(host, &desired).await;
    eventually(Duration::from_secs(30), "a first VM backup", || {
        let found = vzdumps_of(&sim, vmid) >= 1;
        async move { found }
    })
    .await;

    // The hub now says the guest is a container (unsigned desired state).
    desired["guests"][0]["kind"] = json!("lxc");
    hub.put_desired(host, &desired).await;
    eventually(
        Duration::from_secs(30),
        "the hub's audit holds the refused kind",
        || {
            let hub = &hub;
            async move {
                hub_audit(hub, host, "guest.kind_refused")
                    .await
                    .iter()
                    .any(|e| e.to_string().contains(&vm.to_string()))
            }
        },
    )
    .await;
    // Backups of the VM go on, as a VM's: the next vzdumps reach Proxmox.
    let after_flip = vzdumps_of(&sim, vmid);
    let prefix = format!("local:backup/vzdump-qemu-{vmid}-");
    let archives_then = sim
        .storage_volumes("local")
        .iter()
        .filter(|v| v.starts_with(&prefix))
        .count();
    eventually(
        Duration::from_secs(30),
        "two more VM backups after the flip",
        || {
            let more = vzdumps_of(&sim, vmid) >= after_flip + 2;
            async move { more }
        },
    )
    .await;
    eventually(Duration::from_secs(20), "a new VM archive", || {
        let archives = sim
            .storage_volumes("local")
            .iter()
            .filter(|v| v.starts_with(&prefix))
            .count();
        async move { archives > archives_then }
    })
    .await;
    // Nothing was restored or destroyed for it, and it runs on as a VM.
    assert!(destructive(&sim).is_empty(), "{:?}", destructive(&sim));
    assert_eq!(sim.vm_running(vmid), Some(true));
    // One refusal per change, not one per pass.
    assert_eq!(hub_audit(&hub, host, "guest.kind_refused").await.len(), 1);
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vms_controller_backs_it_up_through_the_local_api_as_a_vm() {
    let stack = agent_support::vm::VmStack::running().await;
    let (sim, vmid) = (&stack.sim, stack.vmid);
    let file = sim
        .vm_file(vmid, agent_support::vm::BOOTSTRAP)
        .expect("the bootstrap");
    let bootstrap: serde_json::Value = serde_json::from_slice(&file.content).unwrap();
    let url = bootstrap["local_api"]["url"].as_str().unwrap().to_owned();
    let token = bootstrap["local_api"]["token"].as_str().unwrap().to_owned();
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    sim.clear_requests();
    let run = local_backup(&client, &url, &token).await;
    assert_eq!(run["phase"], "done", "{run}");
    let archive = run["archive"].as_str().unwrap_or_default();
    assert!(archive.contains(&format!("vzdump-qemu-{vmid}-")), "{run}");
    assert_eq!(vzdumps_of(sim, vmid), 1);
    assert!(
        !sim.vm_backup_freezes(vmid).is_empty(),
        "no freeze recorded"
    );
    assert_eq!(sim.vm_frozen(vmid), Some(false), "left frozen");
    let tag = format!("bosun-guest-{}", stack.guest.simple());
    let config = sim.vm_config(vmid).unwrap();
    assert!(
        config
            .get("tags")
            .is_some_and(|t| t.split(';').any(|x| x == tag)),
        "{config:?}"
    );
    // The journal proved it as the VM's: the hub shows it ok.
    let host = stack.host;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let detail = stack.hub.host(host).await;
        let report: Option<StateReport> =
            serde_json::from_value(detail["last_report"].clone()).ok();
        if report.is_some_and(|r| {
            r.last_backups
                .iter()
                .any(|b| b.guest_id == stack.guest && b.ok)
        }) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the hub shows no ok backup of the VM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stack.stop().await;
}
