//! `bosunctl hosts label`, `hosts list --label/--capability` and `hosts show` against a real hub
//! (decision 0077): labels set and removed in one change, the fleet filtered on the server, a
//! bad label a usage error before anything is sent, and a host's description printed as data:
//! markup as it is, and control characters the hub's store was made to hold (a hub that lies)
//! written as visible text.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use reqwest::StatusCode;
use serde_json::json;
use uuid::Uuid;

use crate::common;

use common::hub::{Fixture, start_hub};
use common::text;

async fn describe(hub: &Fixture, host: Uuid, key: &str, bridge: &str) {
    let mut body: serde_json::Value =
        serde_json::from_str(include_str!("../../docs/proto/poll-request.json")).unwrap();
    body["report"]["seq"] = json!(jiff::Timestamp::now().as_millisecond());
    body["capabilities"] = json!({
        "arch": "x86_64",
        "cpu_model": "<b>EPYC</b> & co",
        "cpu_count": 32,
        "pve_version": "pve-manager/9.1.1/abc",
        "storage_kinds": ["dir", "pbs"],
        "interfaces": [{ "name": bridge, "kind": "bridge", "state": "up", "mac": "aa:bb:cc:dd:ee:ff" }],
        "helper": true
    });
    let resp = hub
        .pinned_client()
        .post(format!("{}/v1/hosts/{host}/poll?wait=0", hub.url))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        StatusCode::OK,
        "{}",
        resp.text().await.unwrap()
    );
}

#[tokio::test]
async fn operators_label_hosts_filter_the_fleet_and_see_what_hosts_say() {
    let hub = start_hub().await;
    let (a, a_key) = hub.enroll("pve-a").await;
    let (b, b_key) = hub.enroll("pve-b").await;
    describe(&hub, a, &a_key, "vmbr0").await;
    describe(&hub, b, &b_key, "vmbr7").await;

    let out = hub
        .run(&["hosts", "label", "pve-a", "site=fra-1", "tier=gold"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("site=fra-1, tier=gold"),
        "{}",
        text(&out)
    );
    let out = hub
        .run(&["hosts", "label", "pve-b", "site=fra-1", "--remove", "tier"])
        .await;
    assert!(out.status.success(), "{}", text(&out));

    let out = hub.run(&["hosts", "list", "--label", "tier=gold"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let listed = text(&out);
    assert!(
        listed.contains("pve-a") && !listed.contains("pve-b"),
        "{listed}"
    );
    let out = hub
        .run(&[
            "hosts",
            "list",
            "--label",
            "site=fra-1",
            "--capability",
            "bridge=vmbr7",
            "--json",
        ])
        .await;
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["host_id"], b.to_string());

    // A bad label is refused before anything is sent (exit 4, input).
    for args in [
        vec!["hosts", "label", "pve-a", "Site=x"],
        vec!["hosts", "label", "pve-a"],
        vec!["hosts", "list", "--label", "site"],
        vec!["hosts", "list", "--capability", "x=<b>"],
    ] {
        let out = hub.run(&args).await;
        assert_eq!(out.status.code(), Some(4), "{args:?}: {}", text(&out));
    }

    let out = hub.run(&["hosts", "show", "pve-a"]).await;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    for part in [
        "site=fra-1, tier=gold",
        "x86_64, 32 CPUs (<b>EPYC</b> & co), Proxmox pve-manager/9.1.1/abc",
        "helper",
        "dir, pbs",
        "vmbr0 bridge up aa:bb:cc:dd:ee:ff",
    ] {
        assert!(shown.contains(part), "{part}: {shown}");
    }

    // The store made to hold raw control characters: printed as visible text.
    let db = hub.dir.path().join("hub/hub.sqlite");
    let sql = "UPDATE host_capabilities SET document = json_set(document, '$.cpu_model',
               'x' || char(27) || ']0;pwned' || char(7) || char(155) || '2J');";
    let out = std::process::Command::new("sqlite3")
        .arg(&db)
        .arg(sql)
        .output()
        .expect("sqlite3 runs (scripts/install-deps installs it)");
    assert!(out.status.success(), "{}", text(&out));
    let out = hub.run(&["hosts", "show", a.to_string().as_str()]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        !out.stdout.iter().any(|b| matches!(b, 0x1b | 0x07)),
        "a raw control byte reached the terminal"
    );
    let shown = text(&out);
    assert!(shown.contains("x\\x1b]0;pwned\\x07\\u{9b}2J"), "{shown}");
}
