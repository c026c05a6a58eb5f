//! Guest-loss DR of a VM (decision 0121) through the real agent, hub and TLS and the
//! simulator, as `agent_dr` holds a container's: a VM destroyed behind the agent's back comes
//! back by itself (DR policy `auto`) from its newest archive, proven as a VM's, restored by
//! `qmrestore` into Bosun's pool with the operation's tag, running, its firewall guard on,
//! with its data, its MAC (the one the journal recorded), its SMBIOS uuid and the same
//! cloud-init instance (so its machine-id and SSH host keys are the ones its customer knows);
//! the hub raises `guest_restored` with RPO and RTO.
//!
//! When the source may still run (the VM's vmid holds a VM without the agent's identity, still
//! running), the guest comes back at another vmid with a fresh MAC and SMBIOS uuid: a new
//! cloud-init instance, whose first boot makes a new machine-id and SSH host keys; the VM at
//! the old vmid is never touched.
//!
//! A hub that relabels a lost guest's kind changes nothing: each comes back as the kind the
//! journal recorded when it was made (decision 0123), from an archive of that kind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::{Duration, Instant};

use agent_support::storage::alerts;
use agent_support::vm::*;
use agent_support::*;
use bosun_proto::desired::GuestKind;
use bosun_proto::report::GuestStatus;
use bosun_pve::{PveQemu, VmConfigUpdate, Vmid};
use reqwest::Method;
use uuid::Uuid;

/// The `vzdump-lxc` archives of `vmid` on `local`, oldest first.
fn ct_archives(sim: &bosun_pvesim::SimHandle, vmid: u32) -> Vec<String> {
    let prefix = format!("local:backup/vzdump-lxc-{vmid}-");
    let mut found: Vec<String> = sim
        .storage_volumes("local")
        .into_iter()
        .filter(|v| v.starts_with(&prefix))
        .collect();
    found.sort();
    found
}

/// The agent reports `guest` running at a vmid other than `not` (any, if `None`) that holds a
/// running VM; gives it.
async fn vm_back(stack: &VmStack, not: Option<u32>) -> u32 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let at = stack
            .report()
            .filter(|g| g.status == GuestStatus::Running && Some(g.vmid) != not)
            .map(|g| g.vmid)
            .filter(|v| stack.sim.vm_running(*v) == Some(true));
        if let Some(vmid) = at {
            return vmid;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the vm does not run again: {:?}",
            stack.report()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The hub's `guest_restored` alerts for the host.
async fn restored_alerts(stack: &VmStack) -> Vec<String> {
    let (_, alerts) = stack
        .hub
        .admin(Method::GET, "/v1/admin/alerts?limit=1000", None)
        .await;
    alerts
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["kind"] == "guest_restored" && a["host_id"] == stack.host.to_string())
        .map(|a| a["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destroyed_vm_comes_back_from_its_newest_archive_as_the_same_instance() {
    let mut stack = VmStack::running_with(LOCAL_BACKUPS).await;
    let vmid = stack.vmid;
    let mut desired = stack.desired.clone();
    let archives = backed_up(
        &stack.hub,
        stack.host,
        &mut desired,
        (&stack.sim, &[vmid], 2),
        vm_archives,
    )
    .await;
    stack.desired = desired;
    let newest = archives[0].last().unwrap().clone();
    let mac = vm_mac(&stack.sim, vmid).unwrap();
    let uuid = vm_uuid(&stack.sim, vmid).unwrap();
    let instance = stack.sim.vm_instance_id(vmid).unwrap();
    let bootstrap = stack.sim.vm_file(vmid, BOOTSTRAP).unwrap().content;
    stack.sim.clear_requests();

    let lost_at = Instant::now();
    destroy_vm_behind_its_back(&stack.sim, vmid).await;
    let back = vm_back(&stack, None).await;
    let took = lost_at.elapsed();
    eprintln!("VM DR on the simulator: destroyed → running again after {took:?}");

    assert_eq!(back, vmid, "the lost vmid was free");
    assert_eq!(
        agent_restores_of_any_kind(&stack.sim),
        vec![(
            "/nodes/pve/qemu".to_owned(),
            vmid.to_string(),
            newest.clone()
        )],
        "one restore, of the newest archive, as a VM"
    );
    let restore = stack
        .sim
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path == "/nodes/pve/qemu")
        .unwrap();
    let param = |k: &str| {
        restore
            .params
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(param("pool").as_deref(), Some("bosun"), "{restore:?}");
    assert_ne!(param("unique").as_deref(), Some("1"), "{restore:?}");
    assert!(param("net0").is_none(), "the archive's net0 is kept");
    assert!(stack.sim.pool_members("bosun").contains(&vmid));
    let config = stack.sim.vm_config(vmid).unwrap();
    let tags = config.get("tags").cloned().unwrap_or_default();
    assert!(tags.starts_with("bosun-"), "tagged: {config:?}");
    assert!(!config.contains_key("lock"), "{config:?}");
    assert_eq!(config.get("ciuser").map(String::as_str), Some("bosun"));
    assert_eq!(config.get("name").map(String::as_str), Some("vm-shop"));
    assert_eq!(
        part(&config["ipconfig0"], "ip"),
        Some("192.0.2.20/24"),
        "{config:?}"
    );
    assert_eq!(part(&config["net0"], "firewall"), Some("1"));
    let firewall = stack.sim.vm_firewall(vmid).unwrap();
    assert_eq!(firewall.get("enable").map(String::as_str), Some("1"));
    assert_eq!(firewall.get("ipfilter").map(String::as_str), Some("1"));
    // The MAC the journal recorded, the same SMBIOS uuid, the same cloud-init instance: the
    // guest keeps the machine-id and SSH host keys its customer knows, as a container does.
    assert_eq!(vm_mac(&stack.sim, vmid).as_deref(), Some(mac.as_str()));
    assert_eq!(vm_uuid(&stack.sim, vmid).as_deref(), Some(uuid.as_str()));
    assert_eq!(stack.sim.vm_instance_id(vmid), Some(instance));
    // Its data: the bootstrap its backup held.
    assert_eq!(
        stack.sim.vm_file(vmid, BOOTSTRAP).unwrap().content,
        bootstrap
    );
    eventually(
        Duration::from_secs(20),
        "guest_restored at the hub",
        || async { !restored_alerts(&stack).await.is_empty() },
    )
    .await;
    let alerts = restored_alerts(&stack).await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    for part in ["RPO", "RTO", newest.as_str()] {
        assert!(alerts[0].contains(part), "{part} missing: {}", alerts[0]);
    }
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_whose_source_may_still_run_comes_back_elsewhere_as_a_fresh_instance() {
    let mut stack = VmStack::running_with(LOCAL_BACKUPS).await;
    let vmid = stack.vmid;
    let mut desired = stack.desired.clone();
    let archives = backed_up(
        &stack.hub,
        stack.host,
        &mut desired,
        (&stack.sim, &[vmid], 1),
        vm_archives,
    )
    .await;
    stack.desired = desired;
    let newest = archives[0].last().unwrap().clone();
    let mac = vm_mac(&stack.sim, vmid).unwrap();
    let uuid = vm_uuid(&stack.sim, vmid).unwrap();
    let instance = stack.sim.vm_instance_id(vmid).unwrap();
    stack.sim.clear_requests();

    // Root takes the agent's identity off the VM (or a copy restored there by hand): it keeps
    // running with the guest's MAC and identity, and to the agent the guest is lost.
    let update = VmConfigUpdate {
        delete: vec!["tags".to_owned()],
        ..VmConfigUpdate::default()
    };
    root_client(&stack.sim)
        .update_vm_config(Vmid::new(vmid).unwrap(), &update)
        .await
        .unwrap();
    let back = vm_back(&stack, Some(vmid)).await;
    assert_ne!(back, vmid);
    assert_eq!(
        agent_restores_of_any_kind(&stack.sim),
        vec![("/nodes/pve/qemu".to_owned(), back.to_string(), newest)]
    );
    let restore = stack
        .sim
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path == "/nodes/pve/qemu")
        .unwrap();
    assert!(
        restore
            .params
            .contains(&("unique".to_owned(), "1".to_owned())),
        "{:?}",
        restore.params
    );
    // Nothing it shares with the source is kept: a new cloud-init instance, whose first boot
    // makes its own machine-id and host keys.
    assert_ne!(vm_mac(&stack.sim, back).unwrap(), mac);
    assert_ne!(vm_uuid(&stack.sim, back).unwrap(), uuid);
    assert_ne!(stack.sim.vm_instance_id(back).unwrap(), instance);
    assert!(stack.sim.pool_members("bosun").contains(&back));
    // The VM at the old vmid is never touched.
    assert_eq!(stack.sim.vm_running(vmid), Some(true));
    assert_eq!(vm_mac(&stack.sim, vmid), Some(mac));
    assert_eq!(vm_uuid(&stack.sim, vmid), Some(uuid));
    let old = format!("/nodes/pve/qemu/{vmid}");
    let agent = stack.sim.endpoint().tokens.agent.id.clone();
    let touched: Vec<_> = stack
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.token_id.as_deref() == Some(agent.as_str()))
        .filter(|r| r.method != "GET" && r.path.starts_with(&old))
        .map(|r| (r.method, r.path))
        .collect();
    assert!(touched.is_empty(), "{touched:?}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_that_relabels_a_lost_guests_kind_changes_nothing_it_comes_back_as_recorded() {
    let (sim, hub, files) = enrolled_stack().await;
    append_config(&files, POOL);
    files.use_local_api(0, LOCAL_BACKUPS);
    let (_, _, vm_golden_entry) = vm_golden(&sim, &files);
    let ct_golden = agent_support::signing::signed_golden(
        &sim.endpoint().golden_volid,
        &sim.endpoint().golden_sha256,
    );
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let (ct, vm) = (Uuid::new_v4(), Uuid::new_v4());
    let guests = |ct_kind: GuestKind, vm_kind: GuestKind| {
        desired_of(&[
            (ct, "ct-shop", ct_kind, ct_golden.clone()),
            (vm, "vm-shop", vm_kind, vm_golden_entry.clone()),
        ])
    };
    let mut desired = guests(GuestKind::Lxc, GuestKind::Qemu);
    hub.put_desired(host, &desired).await;
    let ct_vmid = running_vmid(&agent.handles.reconcile, ct).await;
    let vm_vmid = running_vmid(&agent.handles.reconcile, vm).await;
    let archives = backed_up(
        &hub,
        host,
        &mut desired,
        (&sim, &[ct_vmid, vm_vmid], 1),
        |sim, v| {
            if v == ct_vmid {
                ct_archives(sim, v)
            } else {
                vm_archives(sim, v)
            }
        },
    )
    .await;

    // The hub says the container is a VM and the VM a container, and both are lost.
    let mut lying = guests(GuestKind::Qemu, GuestKind::Lxc);
    lying["data_plan"] = desired["data_plan"].clone();
    lying["backup_policy"] = desired["backup_policy"].clone();
    hub.put_desired(host, &lying).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    sim.clear_requests();
    destroy_behind_its_back(&sim, ct_vmid).await;
    destroy_vm_behind_its_back(&sim, vm_vmid).await;
    // Each comes back as the kind the journal recorded when it was made, from its own kind's
    // archive: exactly one restore each, and no archive refused.
    eventually(
        Duration::from_secs(60),
        "both back as the kinds the journal recorded",
        || async { sim.vm_ids().len() == 1 && sim.guest_ids().len() == 1 },
    )
    .await;
    let restores = agent_restores_of_any_kind(&sim);
    assert_eq!(restores.len(), 2, "{restores:?}");
    let of = |path: &str| {
        restores
            .iter()
            .find(|(p, _, _)| p == path)
            .map(|(_, _, archive)| archive.clone())
            .unwrap_or_else(|| panic!("no restore at {path}: {restores:?}"))
    };
    assert!(
        of("/nodes/pve/lxc").contains(&format!("vzdump-lxc-{ct_vmid}-")),
        "{restores:?}"
    );
    assert!(
        of("/nodes/pve/qemu").contains(&format!("vzdump-qemu-{vm_vmid}-")),
        "{restores:?}"
    );
    assert!(
        alerts(&hub, host, "archive_rejected").await.is_empty(),
        "an archive was refused"
    );
    drop(archives);
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
