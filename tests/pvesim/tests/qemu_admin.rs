//! A VM's files and backup freezes over the admin endpoint (`/_sim/qemu/{vmid}/…`), for tests
//! and the demo outside the simulator's process: a file written as a program in the guest
//! would, and the freeze windows vzdump held through the guest agent.

use crate::common;

use std::time::Duration;

use bosun_pvesim::{SimConfig, TaskDurations};
use common::{Sim, start_with};

fn quick() -> SimConfig {
    SimConfig {
        time_scale: 0.01,
        auth_failure_delay: Duration::ZERO,
        durations: TaskDurations {
            vzdump: Duration::from_secs(10),
            ..TaskDurations::default()
        },
        ..SimConfig::default()
    }
}

async fn running_vm(sim: &Sim, vmid: u32) {
    let archive = sim.handle.add_vm_golden();
    let id = vmid.to_string();
    let params = [
        ("vmid", id.as_str()),
        ("archive", archive.as_str()),
        ("storage", "local-lvm"),
        ("unique", "1"),
        ("pool", "bosun"),
    ];
    let r = sim
        .call_as(&sim.agent(), "POST", "/nodes/pve/qemu", &params)
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    let r = sim
        .call("POST", &format!("/nodes/pve/qemu/{vmid}/status/start"), &[])
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
}

#[tokio::test]
async fn a_file_is_written_inside_a_vm_and_its_backup_freezes_are_shown() {
    let sim = start_with(quick()).await;
    running_vm(&sim, 370).await;
    let ep = sim.handle.endpoint().clone();
    let put = |vmid: u32, path: &str, mode: Option<&str>, token: Option<&str>| {
        let mut query = vec![("path", path.to_owned())];
        if let Some(mode) = mode {
            query.push(("mode", mode.to_owned()));
        }
        let mut request = sim
            .client
            .put(format!("{}/qemu/{vmid}/file", ep.admin_url))
            .query(&query)
            .body(b"#!/bin/sh\nexit 0\n".to_vec());
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    let token = Some(ep.admin_token.as_str());
    assert_eq!(
        put(370, "/etc/bosun/restore-check", Some("755"), None)
            .await
            .unwrap()
            .status()
            .as_u16(),
        401
    );
    assert!(
        sim.handle
            .vm_file(370, "/etc/bosun/restore-check")
            .is_none()
    );
    let written = put(370, "/etc/bosun/restore-check", Some("755"), token)
        .await
        .unwrap();
    assert_eq!(written.status().as_u16(), 204);
    let file = sim
        .handle
        .vm_file(370, "/etc/bosun/restore-check")
        .expect("written, its parent made");
    assert_eq!(file.mode, 0o755);
    assert_eq!(file.content, b"#!/bin/sh\nexit 0\n");
    for (vmid, path, mode, status) in [
        (371, "/etc/x", None, 404),
        (370, "relative", None, 400),
        (370, "/etc/y", Some("9"), 400),
        (370, "/etc/y", Some("17777"), 400),
    ] {
        let r = put(vmid, path, mode, token).await.unwrap();
        assert_eq!(r.status().as_u16(), status, "{vmid} {path} {mode:?}");
    }
    assert!(sim.handle.vm_file(370, "/etc/y").is_none());

    let freezes = |vmid: u32| {
        sim.client
            .get(format!("{}/qemu/{vmid}/freezes", ep.admin_url))
            .bearer_auth(&ep.admin_token)
            .send()
    };
    let none: serde_json::Value = freezes(370).await.unwrap().json().await.unwrap();
    assert_eq!(none, serde_json::json!({ "freezes_us": [] }));
    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[
                ("vmid", "370"),
                ("storage", "local"),
                ("mode", "snapshot"),
                ("compress", "zstd"),
            ],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    let one: serde_json::Value = freezes(370).await.unwrap().json().await.unwrap();
    let shown: Vec<u64> = one["freezes_us"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let held: Vec<u64> = sim
        .handle
        .vm_backup_freezes(370)
        .iter()
        .map(|d| u64::try_from(d.as_micros()).unwrap())
        .collect();
    assert_eq!(shown.len(), 1, "{one}");
    assert_eq!(shown, held);
    assert_eq!(freezes(371).await.unwrap().status().as_u16(), 404);
}
