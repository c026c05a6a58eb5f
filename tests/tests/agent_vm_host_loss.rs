//! A whole host with a VM and a container lost (decision 0121), through the real agents, hub
//! and TLS, on two simulator nodes, as `agent_host_loss` walks a host of containers: the old
//! box backs both guests up to PBS under its signed plan (encrypted with K) and makes its
//! escrow; its node is stopped for good. A new box enrolled in restore mode waits until its
//! PBS credentials are resealed and the customer's words bring K back, then brings both guests
//! back from PBS: the container through `pct restore`, the VM through `qmrestore` into Bosun's
//! pool, each from the archive its notes' binding under K names for it and proven as its
//! kind's, with its data. The new box's journal recorded no MAC for either: both get fresh
//! MACs (the containers' rule), the VM with a fresh SMBIOS uuid, so a new cloud-init instance.
//! A hub that relabels both guests on the new box (the container a VM, the VM a container)
//! gets each back as the kind its archive is, each restored once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::escrow_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agent_support::vm::{POOL, agent_restores_of_any_kind, append_config, vm_mac, vm_uuid};
use agent_support::*;
use bosun_agentctl::escrow::command;
use bosun_agentctl::escrow::command::WordSource;
use bosun_agentd::config::AgentConfig;
use bosun_proto::desired::GuestKind;
use bosun_pve::{AgentFileWrite, ContentFilter, ContentType, Pve as _, PveQemu as _, Vmid};
use bosun_pvesim::SimConfig;
use escrow_support::pbs::{PBS, PbsHost, sheet_options, with_pbs};
use escrow_support::words_on_sheet;
use reqwest::Method;
use serde_json::json;

const MARKER: &str = "/root/bosun-host-loss-marker";

/// The archives PBS storage `storage` of `sim` lists, by vmid.
async fn pbs_archives(sim: &bosun_pvesim::SimHandle, storage: &str) -> BTreeMap<u32, Vec<String>> {
    let items = root_client(sim)
        .list_content(
            &bosun_pve::StorageId::new(storage).unwrap(),
            ContentFilter {
                content: Some(ContentType::Backup),
                vmid: None,
            },
        )
        .await
        .unwrap_or_default();
    let mut out: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for item in items {
        if let Some(vmid) = item.vmid.and_then(|v| u32::try_from(v).ok()) {
            out.entry(vmid).or_default().push(item.volid);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_host_with_a_vm_and_a_container_comes_back_on_a_new_box() {
    host_loss(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_relabelling_the_lost_guests_kinds_gets_each_back_as_its_archive() {
    host_loss(true).await;
}

/// The old box backs up a container and a VM to PBS and is lost; the new box brings both
/// back. `relabelled`: the hub's desired state on the new box calls the container a VM and the
/// VM a container, each with the other's golden entry.
async fn host_loss(relabelled: bool) {
    let hub = RealHub::start().await;
    let old = PbsHost::start_kinds(
        &hub,
        &hub.url,
        &[("ct-alpha", GuestKind::Lxc), ("vm-bravo", GuestKind::Qemu)],
    )
    .await;
    let host = old.host;
    let (ct, _, ct_vmid) = old.guests[0].clone();
    let (vm, _, vm_vmid) = old.guests[1].clone();
    old.storage_holds_current_key().await;
    // The guests' data.
    write_in_guest(&old.sim, ct_vmid, MARKER, "data of ct-alpha").await;
    root_client(&old.sim)
        .agent_file_write(
            Vmid::new(vm_vmid).unwrap(),
            &AgentFileWrite {
                path: MARKER.to_owned(),
                content: b"data of vm-bravo".to_vec(),
            },
        )
        .await
        .unwrap();
    let vm_uuid_before = vm_uuid(&old.sim, vm_vmid).unwrap();

    // The signed plan backs both up to PBS every 5 s until each has an archive there.
    let mut state = old.state.clone();
    state["storage"][0]["policy"]["schedule"] = json!("*:*:0/5");
    hub.put_desired(host, &state).await;
    let pbs = old.pbs.as_str().to_owned();
    eventually(
        Duration::from_secs(90),
        "both guests backed up to PBS",
        || async {
            let found = pbs_archives(&old.sim, &pbs).await;
            found.contains_key(&ct_vmid) && found.contains_key(&vm_vmid)
        },
    )
    .await;
    state["storage"][0]["policy"]["schedule"] = json!("03:00");
    hub.put_desired(host, &state).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let before = pbs_archives(&old.sim, &pbs).await;
    assert!(
        before[&vm_vmid].iter().all(|v| v.contains(":backup/vm/")),
        "{before:?}"
    );
    assert!(
        before[&ct_vmid].iter().all(|v| v.contains(":backup/ct/")),
        "{before:?}"
    );

    // The escrow, with the customer present.
    let old_config = old.config.clone();
    let sheet_dir = tempfile::tempdir().unwrap();
    let created = command::create(&old_config, &sheet_options(sheet_dir.path()), "pve-old")
        .await
        .unwrap();
    let words = words_on_sheet(&created.sheet);
    eventually(
        Duration::from_secs(30),
        "the hub shows a verified escrow",
        || async { hub.host(host).await["escrow"]["state"] == "verified" },
    )
    .await;

    // The host dies; PBS is offsite and survives.
    let old_recipient = old.recipient.clone();
    let password = old.password.clone();
    let PbsHost {
        sim: old_sim,
        agent: old_agent,
        files: _old_files,
        ..
    } = old;
    old_agent.stop().await;
    let offsite = old_sim.export_remote(PBS).unwrap();
    old_sim.shutdown().await;

    // A new box in restore mode.
    let (status, body) = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/revoke"),
            None,
        )
        .await;
    assert!((200..300).contains(&status), "{status} {body}");
    let (status, body) = hub
        .admin(
            Method::POST,
            "/v1/admin/enrollment-tokens",
            Some(json!({ "ttl_seconds": 3600, "restore_host": host })),
        )
        .await;
    assert!((200..300).contains(&status), "{status} {body}");
    let restore_token = body["token"].as_str().unwrap().to_owned();
    let new_sim = start_sim(SimConfig::fast()).await;
    new_sim.import_remote(PBS, offsite).unwrap();
    let new_files = agent_files(&new_sim, &hub.url, &hub.fingerprint, Some(&restore_token));
    let _ = new_files.trusted_operator();
    append_config(&new_files, POOL);
    let new_agent = InProcessAgent::start(&new_files.config_path).await;
    assert_eq!(new_agent.handles.host_id, host);
    let new_config = AgentConfig::load(&new_files.config_path).unwrap();

    // The operator reseals the PBS credentials to the new box.
    let deadline = Instant::now() + Duration::from_secs(30);
    let new_recipient = loop {
        let reported = hub.host(host).await["last_report"]["storage_recipient"]
            .as_str()
            .map(str::to_owned);
        if let Some(r) = reported.filter(|r| *r != old_recipient) {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "the new box reports its recipient"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    with_pbs(&mut state, host, &new_recipient, &password);
    if relabelled {
        let guests = state["guests"].as_array_mut().unwrap();
        assert_eq!(guests[0]["guest_id"], ct.to_string());
        assert_eq!(guests[1]["guest_id"], vm.to_string());
        let (was_ct, was_vm) = (guests[0].clone(), guests[1].clone());
        for (n, other) in [(0, &was_vm), (1, &was_ct)] {
            guests[n]["kind"] = other["kind"].clone();
            guests[n]["golden"] = other["golden"].clone();
        }
        assert_eq!(guests[0]["kind"], "qemu");
        assert_eq!(guests[1]["kind"], "lxc");
    }
    hub.put_desired(host, &state).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        agent_restores_of_any_kind(&new_sim).is_empty(),
        "nothing restored before K is back"
    );

    // The customer types the words.
    let lost_at = Instant::now();
    let mut typed = words.as_bytes();
    command::recover(&new_config, None, WordSource::Reader(&mut typed))
        .await
        .unwrap();
    let new_ct = running_vmid(&new_agent.handles.reconcile, ct).await;
    let new_vm = running_vmid(&new_agent.handles.reconcile, vm).await;
    eprintln!(
        "host loss with a VM and a container: words typed → both running again after {:?}",
        lost_at.elapsed()
    );
    assert_eq!(
        (new_ct, new_vm),
        (ct_vmid, vm_vmid),
        "the archives' vmids were free"
    );
    if relabelled {
        // Passes after both run restore nothing more, as either kind.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let restores = agent_restores_of_any_kind(&new_sim);
    assert_eq!(restores.len(), 2, "{restores:?}");
    // The new box's journal records each as its archive's kind, whatever the hub calls it.
    for (vmid, kind) in [(ct_vmid, GuestKind::Lxc), (vm_vmid, GuestKind::Qemu)] {
        let record = new_agent
            .handles
            .journal
            .provenance(vmid)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.kind(), kind, "{vmid}");
    }
    assert!(
        new_sim.vm_config(ct_vmid).is_none(),
        "the container came back as a VM"
    );
    assert!(
        new_sim.guest_config(vm_vmid).is_none(),
        "the VM came back as a container"
    );
    let newest = |vmid: u32| before[&vmid].iter().max().unwrap().clone();
    assert!(
        restores.contains(&(
            "/nodes/pve/lxc".to_owned(),
            ct_vmid.to_string(),
            newest(ct_vmid)
        )),
        "{restores:?}"
    );
    assert!(
        restores.contains(&(
            "/nodes/pve/qemu".to_owned(),
            vm_vmid.to_string(),
            newest(vm_vmid)
        )),
        "{restores:?}"
    );
    // Their data.
    assert_eq!(
        guest_text(&new_sim, ct_vmid, MARKER).as_deref(),
        Some("data of ct-alpha")
    );
    assert_eq!(
        new_sim.vm_file(vm_vmid, MARKER).map(|f| f.content),
        Some(b"data of vm-bravo".to_vec())
    );
    // The VM in Bosun's pool, tagged, running, guarded; a fresh MAC: the new box's journal
    // recorded none for it (as for the container).
    assert!(new_sim.pool_members("bosun").contains(&vm_vmid));
    let config = new_sim.vm_config(vm_vmid).unwrap();
    assert!(
        config
            .get("tags")
            .is_some_and(|t| t.starts_with("bosun-op-")),
        "{config:?}"
    );
    assert_eq!(new_sim.vm_running(vm_vmid), Some(true));
    // The agent wrote net0 back without a MAC (Proxmox makes one: the simulator's seeded one
    // may repeat the old node's) and a fresh SMBIOS uuid.
    let agent_token = new_sim.endpoint().tokens.agent.id.clone();
    let config_path = format!("/nodes/pve/qemu/{vm_vmid}/config");
    let reset: Vec<Vec<(String, String)>> = new_sim
        .requests()
        .into_iter()
        .filter(|r| r.token_id.as_deref() == Some(agent_token.as_str()))
        .filter(|r| r.method == "PUT" && r.path == config_path)
        .map(|r| r.params)
        .filter(|p| p.iter().any(|(k, _)| k == "net0"))
        .collect();
    assert_eq!(reset.len(), 1, "{reset:?}");
    let net0 = &reset[0].iter().find(|(k, _)| k == "net0").unwrap().1;
    assert!(net0.starts_with("virtio,"), "no MAC sent: {net0}");
    assert!(vm_mac(&new_sim, vm_vmid).is_some());
    assert_ne!(vm_uuid(&new_sim, vm_vmid).unwrap(), vm_uuid_before);
    let firewall = new_sim.vm_firewall(vm_vmid).unwrap();
    assert_eq!(firewall.get("ipfilter").map(String::as_str), Some("1"));

    new_agent.stop().await;
    hub.stop().await;
    new_sim.shutdown().await;
}
