//! Hosts describe themselves and operators group them (decision 0077), against a real hub: a
//! poll's `capabilities` are stored and shown, later polls without them keep them, a hostile
//! description (control characters, oversized lists, markup where names go) is refused 422
//! with the field named and stores nothing; `PUT /v1/admin/hosts/{id}/labels` sets and removes
//! labels (audited with the token's name, bounded, viewers refused); `GET /v1/admin/hosts`
//! filters by `label` and `capability` on the server.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use common::{TestHub, error_code, full, host_events, poll_with, report};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

fn capabilities(bridge: &str, tunnel: bool) -> Value {
    json!({
        "arch": "x86_64",
        "cpu_model": "<script>alert(1)</script> EPYC",
        "cpu_count": 16,
        "pve_version": "pve-manager/9.1.1/abcdef",
        "storage_kinds": ["dir", "lvmthin"],
        "interfaces": [
            { "name": bridge, "kind": "bridge", "state": "up" },
            { "name": "eno1", "kind": "nic", "mac": "0c:c4:7a:12:34:56", "state": "up", "speed_mbps": 1000 }
        ],
        "helper": true,
        "tunnel": tunnel,
        "smart": false
    })
}

async fn poll_capabilities(
    hub: &TestHub,
    host: Uuid,
    key: &str,
    caps: Value,
) -> (StatusCode, Value) {
    let mut body = full(&report());
    body["capabilities"] = caps;
    poll_with(hub, host, key, &body).await
}

async fn hosts(hub: &TestHub, query: &str) -> (StatusCode, Value) {
    let resp = hub
        .admin(Method::GET, &format!("/v1/admin/hosts{query}"), None)
        .await;
    let status = resp.status();
    (status, resp.json().await.unwrap())
}

fn ids(list: &Value) -> Vec<String> {
    let mut ids: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["host_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

async fn label(hub: &TestHub, host: Uuid, body: Value) -> reqwest::Response {
    hub.admin(
        Method::PUT,
        &format!("/v1/admin/hosts/{host}/labels"),
        Some(body),
    )
    .await
}

#[tokio::test]
async fn capabilities_are_kept_and_shown_and_a_hostile_description_is_refused() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-caps").await;
    let (status, answer) = poll_capabilities(&hub, host, &key, capabilities("vmbr0", false)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    // A poll without them keeps what the hub has.
    let (status, _) = poll_with(&hub, host, &key, &full(&report())).await;
    assert_eq!(status, StatusCode::OK);
    let shown: Value = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        shown["capabilities"],
        capabilities("vmbr0", false),
        "{shown}"
    );
    assert!(shown["capabilities_at"].is_string());

    let hostile = [
        (
            "cpu_model",
            json!("x\u{1b}]0;owned\u{7}"),
            "capabilities.cpu_model",
        ),
        (
            "pve_version",
            json!("9\u{9b}2J"),
            "capabilities.pve_version",
        ),
        (
            "cpu_model",
            json!("x".repeat(129)),
            "capabilities.cpu_model",
        ),
        ("arch", json!("<img src=x>"), "capabilities.arch"),
        (
            "storage_kinds",
            json!(vec!["dir"; 33]),
            "capabilities.storage_kinds",
        ),
        (
            "interfaces",
            json!(
                (0..65)
                    .map(|i| json!({ "name": format!("eth{i}"), "kind": "nic", "state": "up" }))
                    .collect::<Vec<_>>()
            ),
            "capabilities.interfaces",
        ),
        (
            "interfaces",
            json!([{ "name": "vmbr0\"><script>", "kind": "bridge", "state": "up" }]),
            "capabilities.interfaces[0].name",
        ),
    ];
    for (field, value, named) in hostile {
        let mut caps = capabilities("vmbr1", true);
        caps[field] = value;
        let (status, answer) = poll_capabilities(&hub, host, &key, caps).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert!(
            answer["message"].as_str().unwrap().contains(named),
            "{named}: {answer}"
        );
    }
    let shown: Value = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        shown["capabilities"],
        capabilities("vmbr0", false),
        "a refused poll stores nothing"
    );
}

#[tokio::test]
async fn operators_label_hosts_and_the_fleet_filters_by_label_and_capability() {
    let hub = TestHub::start().await;
    let (a, a_key) = hub.enroll("pve-a").await;
    let (b, b_key) = hub.enroll("pve-b").await;
    let (c, _) = hub.enroll("pve-c").await;
    assert_eq!(
        poll_capabilities(&hub, a, &a_key, capabilities("vmbr0", true))
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        poll_capabilities(&hub, b, &b_key, capabilities("vmbr9", false))
            .await
            .0,
        StatusCode::OK
    );

    for host in [a, b] {
        let resp = label(
            &hub,
            host,
            json!({ "set": { "site": "fra-1", "tier": "gold" } }),
        )
        .await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let resp = label(
        &hub,
        b,
        json!({ "set": { "tier": "silver" }, "remove": ["site"] }),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["labels"], json!({ "tier": "silver" }));
    let events = host_events(&hub, b).await;
    let labeled: Vec<&Value> = events
        .iter()
        .filter(|(kind, _)| kind == "host_labeled")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(labeled.len(), 2, "{events:?}");
    assert_eq!(labeled[1]["removed"], json!(["site"]));
    assert!(
        labeled[1]["by"].is_string(),
        "the token's name: {labeled:?}"
    );

    let all = ids(&hosts(&hub, "").await.1);
    assert_eq!(all.len(), 3);
    let mut want = vec![a.to_string(), b.to_string()];
    want.sort();
    assert_eq!(ids(&hosts(&hub, "?capability=helper").await.1), want);
    assert_eq!(
        ids(&hosts(&hub, "?label=tier%3Dgold").await.1),
        vec![a.to_string()]
    );
    assert_eq!(
        ids(&hosts(&hub, "?capability=bridge%3Dvmbr9&label=tier=silver")
            .await
            .1),
        vec![b.to_string()]
    );
    assert_eq!(
        ids(&hosts(&hub, "?capability=tunnel&label=tier=silver").await.1),
        Vec::<String>::new()
    );
    let (_, listed) = hosts(&hub, "?label=site=fra-1").await;
    assert_eq!(
        listed[0]["labels"],
        json!({ "site": "fra-1", "tier": "gold" })
    );
    let _ = c;

    // Eight terms of each kind is the most a filter names.
    let terms = |name: &str, n: usize| -> String {
        let term = |i| match name {
            "label" => format!("k{i}=v"),
            _ => format!("bridge=br{i}"),
        };
        (0..n).map(|i| format!("&{name}={}", term(i))).collect()
    };
    let most = format!("?{}{}", terms("label", 8), terms("capability", 8));
    assert_eq!(hosts(&hub, &most).await.0, StatusCode::OK);
    let nine_labels = format!("?{}", terms("label", 9));
    let nine_words = format!("?{}", terms("capability", 9));
    // Bad filters and bad labels are clear errors; nothing changes.
    for query in [
        "?label=site",
        "?label=Site%3Dx",
        "?capability=%1b%5b2J",
        "?colour=red",
        &nine_labels,
        &nine_words,
    ] {
        let resp = hub
            .admin(Method::GET, &format!("/v1/admin/hosts{query}"), None)
            .await;
        let (status, code) = error_code(resp).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::BAD_REQUEST, "bad_query"),
            "{query}"
        );
    }
    let long = "v".repeat(64);
    for body in [
        json!({ "set": { "site": long } }),
        json!({ "set": { "bad key": "x" } }),
        json!({ "set": {} }),
        json!({ "set": { "a": "b" }, "remove": ["a"] }),
    ] {
        let (status, code) = error_code(label(&hub, a, body.clone()).await).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field"),
            "{body}"
        );
    }
    let many: serde_json::Map<String, Value> =
        (0..31).map(|i| (format!("k{i}"), json!("v"))).collect();
    let (status, code) = error_code(label(&hub, a, json!({ "set": many })).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::CONFLICT, "too_many_labels")
    );
    let (_, listed) = hosts(&hub, "?label=site=fra-1").await;
    assert_eq!(
        listed[0]["labels"],
        json!({ "site": "fra-1", "tier": "gold" })
    );

    // A viewer may look but not label.
    let resp = hub
        .admin(
            Method::POST,
            "/v1/admin/tokens",
            Some(json!({ "name": "watcher", "role": "viewer" })),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let created: Value = resp.json().await.unwrap();
    let viewer = created["token"].as_str().unwrap().to_owned();
    let resp = hub
        .request(
            Method::PUT,
            &format!("/v1/admin/hosts/{a}/labels"),
            Some(&viewer),
            Some(json!({ "set": { "x": "y" } }).to_string().into_bytes()),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
}

/// Logs in to the dashboard with the admin token; gives a client and the session cookie.
async fn dashboard(hub: &TestHub) -> (reqwest::Client, String) {
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(
            bosun_hubd::tls::pinned_client_config(&hub.hub.fingerprint()).unwrap(),
        )
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let resp = client
        .post(format!("{}/ui/login", hub.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", &hub.url)
        .body(format!("token={}", hub.admin.replace('+', "%2B")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap();
    let session = cookie.split(';').next().unwrap().to_owned();
    (client, session)
}

async fn page(
    hub: &TestHub,
    client: &reqwest::Client,
    session: &str,
    path: &str,
) -> (StatusCode, String) {
    let resp = client
        .get(format!("{}{path}", hub.url))
        .header("cookie", session)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.text().await.unwrap())
}

#[tokio::test]
async fn the_dashboard_shows_labels_and_capabilities_as_text_and_filters_the_fleet_by_label() {
    let hub = TestHub::start().await;
    let (a, a_key) = hub.enroll("pve-a").await;
    let (_b, _) = hub.enroll("pve-b").await;
    assert_eq!(
        poll_capabilities(&hub, a, &a_key, capabilities("vmbr0", true))
            .await
            .0,
        StatusCode::OK
    );
    let resp = label(&hub, a, json!({ "set": { "site": "fra-1" } })).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let (client, session) = dashboard(&hub).await;

    let (status, host_page) = page(&hub, &client, &session, &format!("/ui/hosts/{a}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!host_page.contains("<script>alert"), "markup from a host");
    assert!(
        host_page.contains("&lt;script&gt;alert(1)&lt;/script&gt; EPYC"),
        "{host_page}"
    );
    assert!(host_page.contains("vmbr0 bridge up"), "{host_page}");
    assert!(host_page.contains("site=fra-1"), "{host_page}");

    let (_, fleet) = page(&hub, &client, &session, "/ui/").await;
    assert!(fleet.contains("pve-a") && fleet.contains("pve-b"));
    assert!(fleet.contains("id=\"host-filter\""));
    let (status, filtered) = page(&hub, &client, &session, "/ui/?label=site%3Dfra-1").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        filtered.contains("pve-a") && !filtered.contains("pve-b"),
        "{filtered}"
    );
    let (status, _) = page(&hub, &client, &session, "/ui/?label=").await;
    assert_eq!(status, StatusCode::OK, "an empty box is no filter");
    let (status, _) = page(&hub, &client, &session, "/ui/?label=%3Cb%3E").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}
