//! `bosunctl hosts remove HOST` against a real hub on loopback: a live host is refused, a
//! revoked one is removed by name, then unknown; `--json` says what was done.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use serde_json::Value;

use crate::common;

use common::hub::start_hub;
use common::text;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_remove_takes_only_a_revoked_host() {
    let hub = start_hub().await;
    let gone = hub.enroll_agent("pve-old").await;
    let kept = hub.enroll_agent("pve-new").await;

    // Live: refused with the hub's reason, exit 6 (refused).
    let out = hub.run(&["hosts", "remove", "pve-old"]).await;
    assert_eq!(out.status.code(), Some(6), "{}", text(&out));
    assert!(
        text(&out).contains("host_not_revoked") && text(&out).contains("revoke it"),
        "{}",
        text(&out)
    );

    let out = hub.run(&["hosts", "revoke", "pve-old"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let out = hub
        .run(&["hosts", "remove", "--host", "pve-old", "--json"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"host_id": gone, "result": "removed"})
    );

    // Gone: by name it is an unknown name, by id an unknown host (exit 8, not found).
    let out = hub.run(&["hosts", "remove", "pve-old"]).await;
    assert_eq!(out.status.code(), Some(8), "{}", text(&out));
    let out = hub.run(&["hosts", "remove", &gone.to_string()]).await;
    assert_eq!(out.status.code(), Some(8), "{}", text(&out));
    assert!(text(&out).contains("unknown_host"), "{}", text(&out));

    let out = hub.run(&["hosts", "list", "--json"]).await;
    let hosts: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hosts.len(), 1);
    assert_eq!(hosts[0]["host_id"], kept.to_string());
    let out = hub.run(&["events", "--host", &gone.to_string()]).await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("host_removed"),
        "{}",
        text(&out)
    );
}
