//! A QEMU guest provisioned end to end on the production path (decision 0114), run the way
//! the agent meets it: the real agent and hub, the simulator's QEMU guests, and the
//! simulator's request log counting what reached Proxmox. A VM comes only from a golden
//! archive an operator signed **for a VM**; it is restored into Bosun's pool with its own
//! identity through cloud-init (never the archive's), its firewall and `ipfilter` on, and its
//! `bootstrap.json` written through the guest agent into that VM alone; the operator sees it
//! running as `qemu` in `bosunctl status`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::signing::{signed_golden, signed_golden_document};
use agent_support::vm::{
    BOOTSTRAP, POOL, append_config, calls, desired_of, part, vm_golden, vm_restores,
};
use agent_support::*;
use bosun_proto::desired::GuestKind;
use bosun_proto::golden::GoldenDocument;
use bosun_pvesim::SimHandle;
use serde_json::{Value, json};
use uuid::Uuid;

/// The VM golden archive's own identity (the simulator's `golden_vm_conf`).
const ARCHIVE_UUID: &str = "5d0c7c6e-2b1f-4f0e-8a51-90a1c3e2b9d4";
const ARCHIVE_MAC: &str = "BC:24:11:5E:A1:08";

/// The container restores (`POST /nodes/pve/lxc`) that reached Proxmox, by archive.
fn ct_restores(sim: &SimHandle) -> Vec<String> {
    sim.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/nodes/pve/lxc")
        .filter_map(|r| {
            r.params
                .iter()
                .find(|(k, _)| k == "ostemplate")
                .map(|(_, v)| v.clone())
        })
        .collect()
}

/// How many `agent/file-write` requests reached VM `vmid`.
fn file_writes(sim: &SimHandle, vmid: u32) -> usize {
    let path = format!("/nodes/pve/qemu/{vmid}/agent/file-write");
    calls(sim)
        .iter()
        .filter(|(m, p)| m == "POST" && *p == path)
        .count()
}

/// Every guest-agent request that reached VM `vmid`.
fn agent_calls(sim: &SimHandle, vmid: u32) -> Vec<String> {
    let prefix = format!("/nodes/pve/qemu/{vmid}/agent/");
    calls(sim)
        .into_iter()
        .filter(|(_, p)| p.starts_with(&prefix))
        .map(|(_, p)| p)
        .collect()
}

/// The hub's `golden_refused` alerts.
/// `bosunctl status` as it prints, each line's words joined by one space.
async fn status_lines(hub: &RealHub) -> Vec<String> {
    let client = bosunctl::client::HubClient::new(bosunctl::config::Settings {
        url: hub.url.parse().unwrap(),
        fingerprint: hub.fingerprint.clone(),
        token: secrecy::SecretString::from(hub.admin.clone()),
        allowed_signers: None,
    })
    .unwrap();
    let fleet = bosunctl::status::FleetStatus::fetch(&client, 10)
        .await
        .unwrap();
    bosunctl::status::render(&fleet)
        .iter()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

async fn golden_alerts(hub: &RealHub) -> Vec<Value> {
    let (_, alerts) = hub
        .admin(reqwest::Method::GET, "/v1/admin/alerts", None)
        .await;
    alerts
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["kind"] == "golden_refused")
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_is_provisioned_from_its_signed_base_with_its_own_identity_and_bootstrap() {
    let (sim, hub, files) = enrolled_stack().await;
    sim.set_datacenter_firewall(true);
    append_config(&files, POOL);
    files.use_local_api(0, "");
    let (volid, _sha, golden) = vm_golden(&sim, &files);
    // A VM in Bosun's pool that Bosun did not create (an operator's, put there by hand): it
    // must never be written into.
    let stranger = bosun_pve::Vmid::new(4321).unwrap();
    let mut request = bosun_pve::VmRestoreRequest::new(
        stranger,
        bosun_pve::VolumeId::new(volid.clone()).unwrap(),
        bosun_pve::StorageId::new("local-lvm".to_owned()).unwrap(),
    );
    request.pool = Some(bosun_pve::PoolId::new("bosun").unwrap());
    request.start = true;
    let root = root_client(&sim);
    let upid = bosun_pve::PveQemu::restore_vm(&root, &request)
        .await
        .unwrap();
    bosun_pve::Pve::wait_task(&root, bosun_pve::Op::RestoreVm, &upid)
        .await
        .unwrap();
    let stranger_before = sim.vm_config(stranger.get()).unwrap();
    // From here on the log holds the agent's requests alone.
    sim.clear_requests();

    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let vm = Uuid::new_v4();
    hub.put_desired(
        host,
        &desired_of(&[(vm, "vm-shop", GuestKind::Qemu, golden.clone())]),
    )
    .await;
    let vmid = running_vmid(&agent.handles.reconcile, vm).await;
    assert_ne!(vmid, stranger.get());
    assert_eq!(
        vm_restores(&sim),
        vec![volid.clone()],
        "one VM restore, of the signed base"
    );
    assert!(ct_restores(&sim).is_empty(), "no container was restored");
    // Restored at its desired size (the archive's is another), so no pass resizes it after.
    let restore = sim
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path == "/nodes/pve/qemu")
        .expect("the restore");
    let param = |key: &str| {
        restore
            .params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(param("cores").as_deref(), Some("2"), "{restore:?}");
    assert_eq!(param("memory").as_deref(), Some("1024"), "{restore:?}");

    // The identity cloud-init gives it, and what the restore made fresh.
    let config = sim.vm_config(vmid).expect("the vm exists");
    assert_eq!(config.get("memory").map(String::as_str), Some("1024"));
    assert_eq!(config.get("cores").map(String::as_str), Some("2"));
    let resized = |r: &&bosun_pvesim::LoggedRequest| {
        r.method == "PUT"
            && r.path == format!("/nodes/pve/qemu/{vmid}/config")
            && r.params.iter().any(|(k, _)| k == "memory" || k == "cores")
    };
    assert!(
        !sim.requests().iter().any(|r| resized(&r)),
        "a pass resized the new VM"
    );
    assert_eq!(
        config.get("ciuser").map(String::as_str),
        Some("bosun"),
        "{config:?}"
    );
    assert_eq!(
        config.get("ipconfig0").map(String::as_str),
        Some("ip=192.0.2.20/24,gw=192.0.2.1"),
        "{config:?}"
    );
    assert_eq!(config.get("name").map(String::as_str), Some("vm-shop"));
    let smbios = config.get("smbios1").expect("an smbios uuid");
    let uuid = part(smbios, "uuid").expect("uuid=");
    assert!(Uuid::parse_str(uuid).is_ok(), "{smbios}");
    assert_ne!(uuid, ARCHIVE_UUID, "the archive's SMBIOS uuid was kept");
    assert_ne!(
        part(stranger_before.get("smbios1").unwrap(), "uuid"),
        Some(uuid),
        "two VMs share an SMBIOS uuid"
    );
    let net0 = config.get("net0").expect("net0");
    assert_eq!(part(net0, "firewall"), Some("1"), "{net0}");
    assert_eq!(part(net0, "bridge"), Some("vmbr0"), "{net0}");
    assert!(
        !net0.contains(ARCHIVE_MAC),
        "the archive's MAC was kept: {net0}"
    );
    assert!(config.contains_key("vmgenid"), "{config:?}");
    assert!(
        config
            .get("tags")
            .is_some_and(|t| t.split(';').any(|t| t.starts_with("bosun-"))),
        "the agent's identity tag: {config:?}"
    );
    // Its pool, and its guard.
    assert!(
        sim.pool_members("bosun").contains(&vmid),
        "the vm joined pool bosun"
    );
    let firewall = sim.vm_firewall(vmid).unwrap();
    assert_eq!(
        firewall.get("enable").map(String::as_str),
        Some("1"),
        "{firewall:?}"
    );
    assert_eq!(
        firewall.get("ipfilter").map(String::as_str),
        Some("1"),
        "{firewall:?}"
    );

    // Its bootstrap, through the guest agent, at the fixed path, 0600, for this guest.
    eventually(
        Duration::from_secs(30),
        "the vm's bootstrap is written",
        || {
            let sim = &sim;
            async move { sim.vm_file(vmid, BOOTSTRAP).is_some() }
        },
    )
    .await;
    let file = sim.vm_file(vmid, BOOTSTRAP).unwrap();
    assert_eq!(file.mode, 0o600);
    let bootstrap: Value = serde_json::from_slice(&file.content).unwrap();
    assert_eq!(bootstrap["schema"], "bosun.bootstrap/v1");
    assert_eq!(bootstrap["guest_id"], vm.to_string());
    assert!(
        bootstrap["local_api"]["token"]
            .as_str()
            .is_some_and(|t| t.len() >= 32)
    );
    assert_eq!(file_writes(&sim, vmid), 1, "one write, into the new vm");
    // The operator sees it as a running VM: the report says its kind and `bosunctl status`
    // shows it, read from the real hub.
    let line = format!("guest vm-shop vmid {vmid} qemu desired running");
    eventually(
        Duration::from_secs(30),
        "bosunctl status shows the vm running as qemu",
        || {
            let (hub, line) = (&hub, &line);
            // The line goes on with what else the host reports of it (its address).
            async move { status_lines(hub).await.iter().any(|l| l.starts_with(line)) }
        },
    )
    .await;
    let detail = hub.host(host).await;
    let reported: Vec<&Value> = detail["last_report"]["guests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["vmid"] == vmid)
        .collect();
    assert_eq!(reported.len(), 1, "{detail}");
    assert_eq!(reported[0]["kind"], "qemu", "{detail}");
    assert_eq!(reported[0]["guest_id"], vm.to_string(), "{detail}");
    // The journal knows the token, so later passes write nothing more.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(file_writes(&sim, vmid), 1, "the bootstrap is written once");
    assert!(
        agent_calls(&sim, stranger.get()).is_empty(),
        "the agent reached into a vm it did not create: {:?}",
        agent_calls(&sim, stranger.get())
    );

    // A hub pins the stranger's vmid for a new VM guest: it is neither taken over nor
    // destroyed, and nothing is written into it.
    let pinned = Uuid::new_v4();
    let mut document = desired_of(&[
        (vm, "vm-shop", GuestKind::Qemu, golden.clone()),
        (pinned, "vm-taker", GuestKind::Qemu, golden.clone()),
    ]);
    document["guests"][1]["vmid"] = json!(stranger.get());
    hub.put_desired(host, &document).await;
    eventually(
        Duration::from_secs(30),
        "the pinned restore is tried and refused",
        || {
            let sim = &sim;
            async move { vm_restores(sim).len() >= 2 }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        sim.vm_config(stranger.get()).as_ref(),
        Some(&stranger_before),
        "the stranger's vm changed"
    );
    assert!(
        agent_calls(&sim, stranger.get()).is_empty(),
        "the agent reached into a vm it did not create: {:?}",
        agent_calls(&sim, stranger.get())
    );
    let destroyed: Vec<_> = calls(&sim)
        .into_iter()
        .filter(|(m, p)| m == "DELETE" && p.starts_with("/nodes/pve/qemu/"))
        .collect();
    assert!(destroyed.is_empty(), "a vm was destroyed: {destroyed:?}");
    let mut vms = sim.vm_ids();
    vms.sort_unstable();
    let mut want = vec![vmid, stranger.get()];
    want.sort_unstable();
    assert_eq!(vms, want);
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_of_the_other_kind_or_unsigned_seeds_no_guest() {
    let (sim, hub, files) = enrolled_stack().await;
    append_config(&files, POOL);
    let (vm_volid, vm_sha, _) = vm_golden(&sim, &files);
    let ct_volid = sim.endpoint().golden_volid.clone();
    let ct_sha = sim.endpoint().golden_sha256.clone();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;

    // A second VM archive, never signed.
    let other_volid = sim.add_vm_archive_without_agent();
    let other_sha = "6f".repeat(32);
    files.helper.set_archive(&other_volid, &other_sha);

    let attacks: Vec<(GuestKind, Value, &str)> = vec![
        // The container base, signed for containers, named for a VM.
        (
            GuestKind::Qemu,
            signed_golden(&ct_volid, &ct_sha),
            "wrong_kind",
        ),
        // The VM base, signed for a VM, named for a container.
        (
            GuestKind::Lxc,
            signed_golden_document(
                &GoldenDocument::new(&vm_volid, &vm_sha).for_kind(GuestKind::Qemu),
            ),
            "wrong_kind",
        ),
        // A VM archive nobody signed.
        (
            GuestKind::Qemu,
            json!({ "volid": other_volid, "sha256": other_sha }),
            "unknown_provenance",
        ),
        // That archive signed without a kind (a container document), named for a VM.
        (
            GuestKind::Qemu,
            signed_golden(&other_volid, &other_sha),
            "wrong_kind",
        ),
    ];
    let mut guests: Vec<(Uuid, String, GuestKind, Value)> = Vec::new();
    for (i, (kind, golden, reason)) in attacks.into_iter().enumerate() {
        let volid = golden["volid"].as_str().unwrap().to_owned();
        guests.push((Uuid::new_v4(), format!("mallory{i}"), kind, golden));
        let list: Vec<(Uuid, &str, GuestKind, Value)> = guests
            .iter()
            .map(|(g, n, k, v)| (*g, n.as_str(), *k, v.clone()))
            .collect();
        hub.put_desired(host, &desired_of(&list)).await;
        eventually(
            Duration::from_secs(30),
            "the hub raises golden_refused",
            || {
                let hub = &hub;
                async move { golden_alerts(hub).await.len() > i }
            },
        )
        .await;
        let alerts = golden_alerts(&hub).await;
        assert!(
            alerts.iter().any(|a| a["message"]
                .as_str()
                .is_some_and(|m| m.contains(reason) && m.contains(&volid))),
            "attack {i} ({reason}): {alerts:?}"
        );
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(vm_restores(&sim).is_empty(), "{:?}", vm_restores(&sim));
    assert!(ct_restores(&sim).is_empty(), "{:?}", ct_restores(&sim));
    assert!(sim.vm_ids().is_empty());
    assert!(sim.guest_ids().is_empty());
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
