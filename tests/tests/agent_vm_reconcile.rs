//! A VM guest in the reconcile loop like a container (decision 0117), run the way the agent
//! meets it: the real agent and hub, the simulator's QEMU guests, and the simulator's request
//! log counting what the agent's token sent. Power drifts back both ways through `qmstart`
//! and `qmshutdown`; cores, memory and the root disk grow to what desired state asks and
//! Proxmox stores it; a shrink is refused with nothing sent; a guard an operator turned off
//! is put back; a VM dropped from desired state is orphaned and untouched; a VM destroyed
//! behind the agent's back is lost and never provisioned again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::collections::BTreeMap;
use std::time::Duration;

use agent_support::vm::{VmStack, part, vm_restores};
use agent_support::*;
use bosun_agentd::clock::SystemClock;
use bosun_agentd::ops::journal::Store;
use bosun_proto::report::GuestStatus;
use bosun_pve::{Op, Pve, PveQemu, VmConfigUpdate, VmNet, VmOptions, Vmid};
use bosun_pvesim::{LoggedRequest, SimHandle};
use serde_json::json;

/// The requests the agent's token sent about VM `vmid` (its config, power, disks, firewall,
/// guest agent), from the simulator's log.
fn agent_vm_requests(sim: &SimHandle, vmid: u32) -> Vec<LoggedRequest> {
    let agent = sim.endpoint().tokens.agent.id.clone();
    let prefix = format!("/nodes/pve/qemu/{vmid}");
    sim.requests()
        .into_iter()
        .filter(|r| r.token_id.as_deref() == Some(agent.as_str()))
        .filter(|r| r.path == prefix || r.path.starts_with(&format!("{prefix}/")))
        .collect()
}

/// The agent's requests about VM `vmid` that change something (everything but a read).
fn agent_vm_mutations(sim: &SimHandle, vmid: u32) -> Vec<(String, String)> {
    agent_vm_requests(sim, vmid)
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| (r.method, r.path))
        .collect()
}

/// The agent's journal, opened beside it.
fn journal(stack: &VmStack) -> Store {
    Store::open(
        &stack.files.state_dir.join("journal.sqlite"),
        SystemClock::shared(),
    )
    .unwrap()
}

/// Whether the agent audited `event` for VM `vmid`.
fn audited(stack: &VmStack, event: &str, vmid: u32) -> bool {
    journal(stack)
        .audit_since(0, 10_000)
        .unwrap()
        .iter()
        .any(|e| e.event.event == event && e.event.vmid == Some(vmid))
}

/// Runs a task as root (an operator, behind the agent's back) and waits for it.
async fn as_root(sim: &SimHandle, op: Op, upid: bosun_pve::Upid) {
    let root = root_client(sim);
    root.wait_task(op, &upid).await.unwrap();
}

async fn reported(
    stack: &VmStack,
    what: &str,
    check: impl Fn(&bosun_proto::report::GuestReport) -> bool,
) {
    eventually(Duration::from_secs(30), what, || {
        let ok = stack.report().is_some_and(|r| check(&r));
        async move { ok }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vms_power_drifts_back_both_ways_and_it_grows_but_never_shrinks() {
    let mut stack = VmStack::running().await;
    let vmid = stack.vmid;
    let sim = stack.sim.clone();
    let id = Vmid::new(vmid).unwrap();
    // The reconciler sized it to what desired state asks (the base has 2 GiB) and reports it.
    reported(
        &stack,
        "the vm is reported with its resources and address",
        |r| {
            r.resources
                .is_some_and(|g| g.cores == 2 && g.memory_mib == 1024 && g.rootfs_gib == 10)
                && r.addresses == ["192.0.2.20"]
        },
    )
    .await;
    assert_eq!(sim.vm_config(vmid).unwrap()["memory"], "1024");

    // Stopped behind its back: started again, by the agent, through `qmstart`.
    sim.clear_requests();
    let root = root_client(&sim);
    as_root(&sim, Op::StopVm, root.stop_vm(id).await.unwrap()).await;
    assert_eq!(sim.vm_running(vmid), Some(false));
    eventually(Duration::from_secs(30), "the vm is started again", || {
        let sim = &sim;
        async move { sim.vm_running(vmid) == Some(true) }
    })
    .await;
    assert!(
        agent_vm_mutations(&sim, vmid).contains(&(
            "POST".into(),
            format!("/nodes/pve/qemu/{vmid}/status/start")
        )),
        "{:?}",
        agent_vm_mutations(&sim, vmid)
    );

    // Desired stopped: shut down gracefully, forced after the containers' 60 s.
    sim.clear_requests();
    let mut stopped = stack.desired.clone();
    stopped["guests"][0]["power"] = json!("stopped");
    stack.put_desired(stopped).await;
    eventually(Duration::from_secs(30), "the vm is shut down", || {
        let sim = &sim;
        async move { sim.vm_running(vmid) == Some(false) }
    })
    .await;
    let shutdown: Vec<LoggedRequest> = agent_vm_requests(&sim, vmid)
        .into_iter()
        .filter(|r| r.path.ends_with("/status/shutdown"))
        .collect();
    assert_eq!(shutdown.len(), 1, "{shutdown:?}");
    for param in [("timeout", "60"), ("forceStop", "1")] {
        assert!(
            shutdown[0]
                .params
                .contains(&(param.0.to_owned(), param.1.to_owned())),
            "{:?}",
            shutdown[0].params
        );
    }
    assert!(
        !agent_vm_mutations(&sim, vmid)
            .iter()
            .any(|(_, p)| p.ends_with("/status/stop")),
        "killed instead of shut down"
    );
    reported(&stack, "the vm is reported stopped", |r| {
        r.status == GuestStatus::Stopped
    })
    .await;

    // Resize up while stopped, and running again: Proxmox stores what was asked.
    sim.clear_requests();
    let mut bigger = stack.desired.clone();
    bigger["guests"][0]["power"] = json!("running");
    bigger["guests"][0]["resources"] = json!({ "cores": 4, "memory_mib": 2048, "rootfs_gib": 16 });
    stack.put_desired(bigger).await;
    reported(&stack, "the vm runs at its new size", |r| {
        r.status == GuestStatus::Running
            && r.resources
                .is_some_and(|g| g.cores == 4 && g.memory_mib == 2048 && g.rootfs_gib == 16)
    })
    .await;
    let config = sim.vm_config(vmid).unwrap();
    assert_eq!(config["cores"], "4");
    assert_eq!(config["memory"], "2048");
    assert_eq!(part(&config["scsi0"], "size"), Some("16G"), "{config:?}");
    let resizes: Vec<LoggedRequest> = agent_vm_requests(&sim, vmid)
        .into_iter()
        .filter(|r| r.path.ends_with("/resize"))
        .collect();
    assert_eq!(resizes.len(), 1, "{resizes:?}");
    assert!(resizes[0].params.contains(&("disk".into(), "scsi0".into())));
    assert!(resizes[0].params.contains(&("size".into(), "16G".into())));

    // A shrink: refused and audited; nothing is sent to Proxmox, the disk keeps its size.
    sim.clear_requests();
    let mut smaller = stack.desired.clone();
    smaller["guests"][0]["resources"]["rootfs_gib"] = json!(8);
    stack.put_desired(smaller).await;
    eventually(Duration::from_secs(30), "the shrink is refused", || {
        let refused = audited(&stack, "guest.shrink_refused", vmid);
        async move { refused }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mutations = agent_vm_mutations(&sim, vmid);
    assert!(
        mutations.is_empty(),
        "a shrink reached proxmox: {mutations:?}"
    );
    assert_eq!(
        part(&sim.vm_config(vmid).unwrap()["scsi0"], "size"),
        Some("16G")
    );
    assert_eq!(sim.vm_running(vmid), Some(true));
    assert!(destructive(&sim).is_empty());
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vms_guard_is_put_back_and_a_vm_dropped_from_desired_state_is_left_alone() {
    let mut stack = VmStack::running().await;
    let vmid = stack.vmid;
    let sim = stack.sim.clone();
    let id = Vmid::new(vmid).unwrap();
    let net0 = sim.vm_config(vmid).unwrap()["net0"].clone();
    // The device's model and MAC (`virtio=<MAC>`), which the guard must keep.
    let device = net0.split(',').next().unwrap().to_owned();

    // An operator turns the VM's firewall and ipfilter off and takes firewall=1 off net0.
    assert!(sim.set_vm_firewall(vmid, BTreeMap::new()));
    let mut open = VmNet::parse(&net0).unwrap();
    open.firewall = Some(false);
    let root = root_client(&sim);
    root.update_vm_config(
        id,
        &VmConfigUpdate {
            set: VmOptions {
                net: [(0, open)].into_iter().collect(),
                ..VmOptions::default()
            },
            ..VmConfigUpdate::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        part(&sim.vm_config(vmid).unwrap()["net0"], "firewall"),
        Some("0")
    );
    eventually(Duration::from_secs(30), "the vm's guard is back", || {
        let sim = &sim;
        async move {
            let firewall = sim.vm_firewall(vmid).unwrap();
            let net0 = sim.vm_config(vmid).unwrap()["net0"].clone();
            firewall.get("enable").map(String::as_str) == Some("1")
                && firewall.get("ipfilter").map(String::as_str) == Some("1")
                && part(&net0, "firewall") == Some("1")
        }
    })
    .await;
    let net0 = sim.vm_config(vmid).unwrap()["net0"].clone();
    assert_eq!(
        net0.split(',').next(),
        Some(device.as_str()),
        "the model and MAC are kept: {net0}"
    );
    assert_eq!(part(&net0, "bridge"), Some("vmbr0"), "{net0}");
    assert_eq!(
        sim.vm_running(vmid),
        Some(true),
        "guarding never stops the vm"
    );

    // Dropped from desired state: orphaned, audited, and not one change sent to it.
    let mut empty = stack.desired.clone();
    empty["guests"] = json!([]);
    stack.put_desired(empty).await;
    reported(&stack, "the vm is reported orphaned", |r| {
        r.status == GuestStatus::Orphaned
    })
    .await;
    sim.clear_requests();
    // Drift the orphan every way the reconciler corrects a desired guest.
    as_root(&sim, Op::StopVm, root.stop_vm(id).await.unwrap()).await;
    assert!(sim.set_vm_firewall(vmid, BTreeMap::new()));
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(audited(&stack, "guest.orphaned", vmid));
    let mutations = agent_vm_mutations(&sim, vmid);
    assert!(
        mutations.is_empty(),
        "the orphan was touched: {mutations:?}"
    );
    assert_eq!(sim.vm_running(vmid), Some(false));
    assert!(sim.vm_firewall(vmid).unwrap().is_empty());
    assert_eq!(sim.vm_ids(), [vmid]);
    assert!(destructive(&sim).is_empty());
    assert_eq!(
        stack.report().map(|r| r.status),
        Some(GuestStatus::Orphaned)
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_destroyed_behind_the_agents_back_is_lost_and_never_provisioned_again() {
    let stack = VmStack::running().await;
    let vmid = stack.vmid;
    let sim = stack.sim.clone();
    let id = Vmid::new(vmid).unwrap();
    let restores = vm_restores(&sim).len();
    assert_eq!(restores, 1);
    let root = root_client(&sim);
    as_root(&sim, Op::StopVm, root.stop_vm(id).await.unwrap()).await;
    as_root(
        &sim,
        Op::DestroyVm,
        root.destroy_vm(id, true).await.unwrap(),
    )
    .await;
    assert!(sim.vm_ids().is_empty());
    reported(&stack, "the vm is reported lost", |r| {
        r.status == GuestStatus::Lost && r.vmid == vmid
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(audited(&stack, "guest.lost", vmid));
    assert_eq!(
        vm_restores(&sim).len(),
        restores,
        "a lost vm was provisioned again from its base"
    );
    assert!(sim.vm_ids().is_empty(), "{:?}", sim.vm_ids());
    assert!(sim.guest_ids().is_empty(), "{:?}", sim.guest_ids());
    assert_eq!(stack.report().map(|r| r.status), Some(GuestStatus::Lost));
    stack.stop().await;
}

/// The vmids the agent's journal watches for a late landing.
fn late_landing_rows(files: &AgentFiles) -> Vec<u32> {
    Store::open(
        &files.state_dir.join("journal.sqlite"),
        SystemClock::shared(),
    )
    .unwrap()
    .late_landings()
    .unwrap()
    .into_iter()
    .map(|l| l.vmid)
    .collect()
}

/// A VM restore whose answer was lost lands only after its landing window (20 s of latency
/// against a 5 s client timeout and a 10 s window): the provisioning closes, the vmid is
/// watched, and when the late VM lands the sweep destroys it through the gate as the sending
/// operation's own creation. Before, the sweep read the vmid as a container only, found
/// nothing, and the late VM stayed in Bosun's pool for ever, known to no pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_restore_that_lands_after_its_window_is_swept_up_through_the_gate() {
    use agent_support::vm::{POOL, append_config, desired_of, vm_golden};
    let (sim, hub, files) = enrolled_stack().await;
    append_config(&files, POOL);
    let (_, _, golden) = vm_golden(&sim, &files);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    sim.set_faults(bosun_pvesim::FaultConfig {
        endpoints: vec![bosun_pvesim::EndpointFault {
            method: Some("POST".to_owned()),
            path: "/nodes/{node}/qemu".to_owned(),
            latency: Duration::from_secs(20),
            ..bosun_pvesim::EndpointFault::default()
        }],
        ..bosun_pvesim::FaultConfig::default()
    });
    let guest = uuid::Uuid::new_v4();
    hub.put_desired(
        host,
        &desired_of(&[(
            guest,
            "vm-late",
            bosun_proto::desired::GuestKind::Qemu,
            golden,
        )]),
    )
    .await;
    eventually(
        Duration::from_secs(60),
        "the lost vm restore's vmid is watched",
        || {
            let files = &files;
            async move { !late_landing_rows(files).is_empty() }
        },
    )
    .await;
    hub.put_desired(host, &desired_of(&[])).await;
    let watched = late_landing_rows(&files);
    assert_eq!(watched.len(), 1, "{watched:?}");
    let late = watched[0];
    assert!(sim.vm_ids().is_empty(), "nothing has landed yet");
    eventually(
        Duration::from_secs(90),
        "the late vm landed and was swept",
        || {
            let (sim, files) = (&sim, &files);
            async move {
                late_landing_rows(files).is_empty()
                    && sim.requests().iter().any(|r| {
                        r.method == "DELETE" && r.path == format!("/nodes/pve/qemu/{late}")
                    })
            }
        },
    )
    .await;
    assert!(
        sim.vm_ids().is_empty(),
        "a late vm was left: {:?}",
        sim.vm_ids()
    );
    assert_eq!(vm_restores(&sim).len(), 1, "the one late restore");
    let destroyed: Vec<String> = destructive(&sim).into_iter().map(|r| r.path).collect();
    assert_eq!(
        destroyed,
        [format!("/nodes/pve/qemu/{late}")],
        "only the late vm"
    );
    agent.stop().await;
    hub.stop().await;
    let audit = Store::open(
        &files.state_dir.join("journal.sqlite"),
        SystemClock::shared(),
    )
    .unwrap()
    .audit_since(0, 10_000)
    .unwrap();
    assert!(
        audit.iter().any(|e| e.event.event == "gate.allowed"
            && e.event.vmid == Some(late)
            && e.event.detail["authority"] == "compensation"),
        "the destroy went through the gate as compensation"
    );
    assert!(
        audit
            .iter()
            .any(|e| e.event.event == "restore.late_landing_ended"
                && e.event.vmid == Some(late)
                && e.event.detail["outcome"] == "destroyed"),
        "the watch ended with the destroy"
    );
    sim.shutdown().await;
}
