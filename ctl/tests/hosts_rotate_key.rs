//! `bosunctl hosts rotate-key HOST` against a real hub on loopback: the host's next poll answer
//! asks its agent for a new key, the request is in the event log with the token's name, and a
//! revoked host is refused.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use serde_json::{Value, json};

use crate::common;

use common::hub::start_hub;
use common::text;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_key_asks_the_hosts_agent_for_a_new_key() {
    let hub = start_hub().await;
    let (host, key) = hub.enroll("pve-leaky").await;
    let client = hub.pinned_client();
    let poll = || async {
        let answer: Value = client
            .post(format!("{}/v1/hosts/{host}/poll?wait=0", hub.url))
            .bearer_auth(&key)
            .body(include_str!("../../docs/proto/poll-request.json"))
            .header("content-type", "application/json")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer
    };
    assert!(poll().await.get("rotate_host_key").is_none());

    let out = hub.run(&["hosts", "rotate-key", "pve-leaky"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("asked to replace its key at its next poll"),
        "{}",
        text(&out)
    );
    assert_eq!(poll().await["rotate_host_key"], json!(true));

    let out = hub
        .run(&["hosts", "rotate-key", "--host", "pve-leaky", "--json"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        said,
        json!({"host_id": host, "result": "key_rotation_requested"})
    );
    let out = hub
        .run(&["events", "--host", &host.to_string(), "--json"])
        .await;
    let events: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let asked: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "host.key_rotation_requested")
        .collect();
    assert_eq!(asked.len(), 2, "{events:?}");
    assert!(asked.iter().all(|e| e["detail"]["by"].is_string()));

    // A revoked host's key is not rotated: refused (exit 6) with the hub's reason.
    let out = hub.run(&["hosts", "revoke", "pve-leaky"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let out = hub.run(&["hosts", "rotate-key", "pve-leaky"]).await;
    assert_eq!(out.status.code(), Some(6), "{}", text(&out));
    assert!(text(&out).contains("host_state"), "{}", text(&out));
}
