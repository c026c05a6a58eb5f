//! A VM's controller on the local API, as it runs inside the VM: its token from the
//! `bootstrap.json` the guest agent wrote, its calls over real TLS. It sees its own disks,
//! snapshots its VM and rolls it back through Proxmox's QEMU endpoints (the kind the journal
//! recorded, never a container's call at its vmid), and reaches no other guest.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::vm::{BOOTSTRAP, VmStack};
use agent_support::*;
use serde_json::{Value, json};

/// A marker inside the VM whose content tells which disk state it runs on.
const MARKER: &str = "/srv/app/release";

async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = client.request(method, url).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vms_controller_snapshots_and_rolls_back_its_own_vm_and_nothing_else() {
    let stack = VmStack::running().await;
    let (sim, vmid) = (&stack.sim, stack.vmid);
    let bootstrap: Value =
        serde_json::from_slice(&sim.vm_file(vmid, BOOTSTRAP).unwrap().content).unwrap();
    let url = bootstrap["local_api"]["url"].as_str().unwrap().to_owned();
    let token = bootstrap["local_api"]["token"].as_str().unwrap().to_owned();
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    use reqwest::Method;

    // Its disks: the root disk at `/`, in its backups; the cloud-init drive is no disk.
    let (status, storage) = call(
        &client,
        Method::GET,
        format!("{url}/v1/storage"),
        &token,
        None,
    )
    .await;
    assert_eq!(status, 200, "{storage}");
    let mounts = storage["mounts"].as_array().unwrap();
    assert_eq!(mounts.len(), 1, "{storage}");
    assert_eq!(mounts[0]["path"], "/", "{storage}");
    assert_eq!(mounts[0]["backup"], true, "{storage}");
    assert_eq!(mounts[0]["storage"], "local-lvm", "{storage}");

    assert!(sim.write_vm_file(vmid, MARKER, b"1\n", 0o644));
    sim.clear_requests();
    let (status, taken) = call(
        &client,
        Method::POST,
        format!("{url}/v1/snapshot"),
        &token,
        Some(json!({ "description": "before release 2" })),
    )
    .await;
    assert_eq!(status, 201, "{taken}");
    let name = taken["name"].as_str().unwrap().to_owned();
    assert!(name.starts_with("bosun-"), "{taken}");
    let (status, list) = call(
        &client,
        Method::GET,
        format!("{url}/v1/snapshot"),
        &token,
        None,
    )
    .await;
    assert_eq!(status, 200, "{list}");
    assert!(
        list["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == name.as_str() && s["taken_through_api"] == true),
        "{list}"
    );

    // Another guest's vmid, in the body or the query: refused before Proxmox is asked.
    let other = vmid + 1;
    let (status, refused) = call(
        &client,
        Method::POST,
        format!("{url}/v1/snapshot"),
        &token,
        Some(json!({ "vmid": other })),
    )
    .await;
    assert_eq!(status, 403, "{refused}");
    let (status, refused) = call(
        &client,
        Method::POST,
        format!("{url}/v1/rollback?vmid={other}"),
        &token,
        Some(json!({ "snapshot": name })),
    )
    .await;
    assert_eq!(status, 403, "{refused}");

    // The release goes wrong; the controller rolls back to its snapshot.
    assert!(sim.write_vm_file(vmid, MARKER, b"2\n", 0o644));
    let (status, accepted) = call(
        &client,
        Method::POST,
        format!("{url}/v1/rollback"),
        &token,
        Some(json!({ "snapshot": name })),
    )
    .await;
    assert_eq!(status, 202, "{accepted}");
    eventually(Duration::from_secs(30), "the rollback's restart", || {
        let sim = &sim;
        async move {
            sim.vm_running(vmid) == Some(true)
                && sim
                    .vm_file(vmid, MARKER)
                    .is_some_and(|f| f.content == b"1\n")
        }
    })
    .await;

    let requests = sim.requests();
    let count = |method: &str, path: &str| {
        requests
            .iter()
            .filter(|r| r.method == method && r.path == path)
            .count()
    };
    let at = |tail: &str| format!("/nodes/pve/qemu/{vmid}/{tail}");
    assert_eq!(count("POST", &at("snapshot")), 1, "one qmsnapshot");
    assert_eq!(
        count("POST", &at(&format!("snapshot/{name}/rollback"))),
        1,
        "one qmrollback"
    );
    let elsewhere: Vec<_> = requests
        .iter()
        .filter(|r| r.method != "GET")
        .filter(|r| r.path.contains("/lxc/") || r.path.contains(&format!("/qemu/{other}")))
        .collect();
    assert!(elsewhere.is_empty(), "calls beyond its VM: {elsewhere:?}");
    // After the rollback the controller reads its token from its bootstrap file again: the
    // one the snapshot held, or, when that token was minted in the snapshot's second (its
    // time has whole seconds), the one the agent wrote anew after revoking it.
    eventually(
        Duration::from_secs(30),
        "the bootstrap's token answers",
        || {
            let (client, url, sim) = (&client, &url, &sim);
            async move {
                let Some(file) = sim.vm_file(vmid, BOOTSTRAP) else {
                    return false;
                };
                let bootstrap: Value = serde_json::from_slice(&file.content).unwrap();
                let token = bootstrap["local_api"]["token"].as_str().unwrap_or_default();
                call(
                    client,
                    reqwest::Method::GET,
                    format!("{url}/v1/snapshot"),
                    token,
                    None,
                )
                .await
                .0 == 200
            }
        },
    )
    .await;
    stack.stop().await;
}
