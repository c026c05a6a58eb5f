//! NFS and CIFS servers that hang: a hard mount blocks what touches its storage (status,
//! content, a vzdump's write, which keeps the guest's `backup` lock) until the server answers
//! again; a soft mount fails after its timeout (scaled), the storage is inactive and a vzdump
//! to it fails with an I/O error.

use crate::common;

use std::time::{Duration, Instant};

use bosun_pvesim::SimConfig;
use common::{Sim, start_with};
use serde_json::Value;

const SERVER: &str = "nas.lan";

/// A simulator whose times are a hundredth of real ones (a soft mount's 18 s is 180 ms).
async fn sim() -> Sim {
    let sim = start_with(SimConfig {
        time_scale: 0.01,
        auth_failure_delay: Duration::ZERO,
        ..SimConfig::default()
    })
    .await;
    sim.handle.add_nfs_remote(SERVER, "/srv/backup");
    sim.restore_golden(101).await;
    sim
}

async fn add_nfs(sim: &Sim, sid: &str, options: Option<&str>) {
    let mut params = vec![
        ("storage", sid),
        ("type", "nfs"),
        ("server", SERVER),
        ("export", "/srv/backup"),
        ("content", "backup"),
    ];
    if let Some(o) = options {
        params.push(("options", o));
    }
    let r = sim.call("POST", "/storage", &params).await;
    assert_eq!(r.status, 200, "{r:?}");
}

/// A GET with the agent token that gives up after `within`: `None` if it did not answer.
async fn get_within(sim: &Sim, path: &str, within: Duration) -> Option<(u16, Value)> {
    let req = sim
        .client
        .get(sim.url(path))
        .header("Authorization", sim.agent().header_value())
        .timeout(within);
    match req.send().await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let body = resp.json().await.unwrap_or(Value::Null);
            Some((status, body))
        }
        Err(e) if e.is_timeout() => None,
        Err(e) => panic!("{path}: {e}"),
    }
}

fn active_in_list(list: &Value, sid: &str) -> Value {
    list["data"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["storage"] == sid))
        .map(|s| s["active"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_hard_mount_blocks_status_content_and_vzdump_until_the_server_answers() {
    let sim = sim().await;
    add_nfs(&sim, "hard", None).await;
    sim.handle.set_remote_hanging(SERVER, true);
    assert!(sim.handle.remotes().iter().any(|r| r.hanging));

    let short = Duration::from_millis(400);
    for path in [
        "/nodes/pve/storage/hard/status",
        "/nodes/pve/storage/hard/content",
        "/nodes/pve/storage",
    ] {
        assert!(
            get_within(&sim, path, short).await.is_none(),
            "{path} answered while the hard mount hangs"
        );
    }
    // Storages on other servers still answer by themselves.
    let (code, local) = get_within(&sim, "/nodes/pve/storage/local/status", short)
        .await
        .expect("local answers");
    assert_eq!((code, &local["data"]["active"]), (200, &Value::from(1)));

    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", "101"), ("storage", "hard")],
        )
        .await;
    let upid = r.upid();
    assert_eq!(
        sim.handle
            .wait_task(&upid, Duration::from_millis(600))
            .await,
        None,
        "the vzdump finished while its storage hangs: {:?}",
        sim.handle.task_log(&upid)
    );
    assert_eq!(
        sim.handle
            .guest_config(101)
            .and_then(|c| c.get("lock").cloned())
            .as_deref(),
        Some("backup")
    );

    sim.handle.set_remote_hanging(SERVER, false);
    assert_eq!(sim.wait(&upid).await, "OK");
    assert!(
        sim.handle
            .guest_config(101)
            .is_some_and(|c| !c.contains_key("lock"))
    );
    let (code, status) = get_within(&sim, "/nodes/pve/storage/hard/status", short)
        .await
        .expect("answers again");
    assert_eq!((code, &status["data"]["active"]), (200, &Value::from(1)));
    assert_eq!(sim.handle.storage_volumes("hard").len(), 1);
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn a_soft_mount_fails_after_its_timeout_and_the_vzdump_with_an_io_error() {
    let sim = sim().await;
    // 3 s + 6 s + 9 s = 18 s, scaled to 180 ms.
    add_nfs(&sim, "soft", Some("soft,timeo=30,retrans=2")).await;
    sim.handle.set_remote_hanging(SERVER, true);
    let bound = Duration::from_secs(3);

    let started = Instant::now();
    let (code, status) = get_within(&sim, "/nodes/pve/storage/soft/status", bound)
        .await
        .expect("a soft mount answers");
    let took = started.elapsed();
    assert_eq!(code, 200);
    assert_eq!(status["data"]["active"], 0, "{status}");
    assert!(
        took >= Duration::from_millis(150),
        "failed before the mount's timeout: {took:?}"
    );

    let (code, list) = get_within(&sim, "/nodes/pve/storage", bound)
        .await
        .expect("the list answers");
    assert_eq!(code, 200);
    assert_eq!(active_in_list(&list, "soft"), 0);
    assert_eq!(active_in_list(&list, "local"), 1);

    let (code, content) = get_within(&sim, "/nodes/pve/storage/soft/content", bound)
        .await
        .expect("content answers");
    assert_eq!(code, 500);
    assert_eq!(
        content["message"],
        "unable to read '/mnt/pve/soft/dump' - Input/output error\n"
    );

    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", "101"), ("storage", "soft")],
        )
        .await;
    let upid = r.upid();
    assert_eq!(sim.wait(&upid).await, "job errors");
    let log = sim.handle.task_log(&upid).expect("log");
    assert!(
        log.iter().any(
            |l| l.starts_with("INFO: tar: /mnt/pve/soft/dump/vzdump-lxc-101-")
                && l.ends_with("Cannot write: Input/output error")
        ),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|l| l.starts_with("ERROR: Backup of VM 101 failed - command 'tar")),
        "{log:#?}"
    );
    assert!(
        sim.handle
            .guest_config(101)
            .is_some_and(|c| !c.contains_key("lock"))
    );
    assert!(sim.handle.storage_volumes("soft").is_empty());

    sim.handle.set_remote_hanging(SERVER, false);
    let (_, status) = get_within(&sim, "/nodes/pve/storage/soft/status", bound)
        .await
        .expect("answers");
    assert_eq!(status["data"]["active"], 1);
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn the_admin_endpoint_makes_a_server_hang_and_answer_again() {
    let sim = sim().await;
    add_nfs(&sim, "soft", Some("soft,timeo=10,retrans=0")).await;
    let ep = sim.handle.endpoint().clone();
    let hang = |hanging: bool| {
        sim.client
            .post(format!("{}/remotes/{SERVER}/hanging", ep.admin_url))
            .bearer_auth(&ep.admin_token)
            .json(&serde_json::json!({ "hanging": hanging }))
            .send()
    };
    let r = hang(true).await.expect("answered");
    assert_eq!(r.status(), 200);
    let listed: Value = r.json().await.expect("json");
    assert_eq!(listed[0]["server"], SERVER);
    assert_eq!(listed[0]["hanging"], true);
    let (_, status) = get_within(
        &sim,
        "/nodes/pve/storage/soft/status",
        Duration::from_secs(3),
    )
    .await
    .expect("answers");
    assert_eq!(status["data"]["active"], 0);
    let r = hang(false).await.expect("answered");
    assert_eq!(r.status(), 200);
    let (_, status) = get_within(
        &sim,
        "/nodes/pve/storage/soft/status",
        Duration::from_secs(3),
    )
    .await
    .expect("answers");
    assert_eq!(status["data"]["active"], 1);
    sim.handle.shutdown().await;
}
