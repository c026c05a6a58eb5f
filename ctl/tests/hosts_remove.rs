//! `bosunctl hosts remove HOST` against a real hub on loopback: a live host is refused, a
//! revoked one is removed by name, then unknown; `--json` says what was done.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

mod common;

use common::hub::{Fixture, start_hub};

async fn run(hub: &Fixture, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_bosunctl"));
    command
        .env_clear()
        .env("HOME", hub.dir.path())
        .env("BOSUN_HUB_URL", &hub.url)
        .env("BOSUN_HUB_FINGERPRINT", &hub.fingerprint)
        .env("BOSUN_ADMIN_TOKEN", &hub.admin)
        .args(args);
    tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .expect("bosunctl finishes")
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

async fn enroll(hub: &Fixture, hostname: &str) -> Uuid {
    let out = run(hub, &["enroll-token", "create", "--ttl", "10m", "--json"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let token: Value = serde_json::from_slice(&out.stdout).unwrap();
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(bosun_hubd::tls::pinned_client_config(&hub.fingerprint).unwrap())
        .build()
        .unwrap();
    let resp: Value = client
        .post(format!("{}/v1/enroll", hub.url))
        .json(&serde_json::json!({
            "schema": "bosun.enroll/v1", "token": token["token"], "hostname": hostname, "agent_version": "0.1.0"
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    resp["host_id"].as_str().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_remove_takes_only_a_revoked_host() {
    let hub = start_hub().await;
    let gone = enroll(&hub, "pve-old").await;
    let kept = enroll(&hub, "pve-new").await;

    // Live: refused with the hub's reason, exit 6 (refused).
    let out = run(&hub, &["hosts", "remove", "pve-old"]).await;
    assert_eq!(out.status.code(), Some(6), "{}", text(&out));
    assert!(
        text(&out).contains("host_not_revoked") && text(&out).contains("revoke it"),
        "{}",
        text(&out)
    );

    let out = run(&hub, &["hosts", "revoke", "pve-old"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let out = run(&hub, &["hosts", "remove", "--host", "pve-old", "--json"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"host_id": gone, "result": "removed"})
    );

    // Gone: by name it is an unknown name, by id an unknown host (exit 8, not found).
    let out = run(&hub, &["hosts", "remove", "pve-old"]).await;
    assert_eq!(out.status.code(), Some(8), "{}", text(&out));
    let out = run(&hub, &["hosts", "remove", &gone.to_string()]).await;
    assert_eq!(out.status.code(), Some(8), "{}", text(&out));
    assert!(text(&out).contains("unknown_host"), "{}", text(&out));

    let out = run(&hub, &["hosts", "list", "--json"]).await;
    let hosts: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hosts.len(), 1);
    assert_eq!(hosts[0]["host_id"], kept.to_string());
    let out = run(&hub, &["events", "--host", &gone.to_string()]).await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("host_removed"),
        "{}",
        text(&out)
    );
}
