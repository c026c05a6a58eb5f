//! Named operator tokens with roles, against a real hub (on either store): every admin route
//! answers each role as the route table says; tokens are created, listed (never a secret),
//! rotated and revoked, and a revoked or rotated-away secret stops working at once; the hub
//! keeps its last unexpired admin token; writes are recorded with the token's name (`by` in
//! events, `set_by` on desired-state generations).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use bosun_hubd::api::admin;
use bosun_proto::operator_token::Role;
use common::{TestHub, desired, error_code};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

/// Creates a token with the init admin token: its secret.
async fn create(hub: &TestHub, name: &str, role: &str, expires_in: Option<u32>) -> String {
    let mut body = json!({ "name": name, "role": role });
    if let Some(seconds) = expires_in {
        body["expires_in_seconds"] = json!(seconds);
    }
    let resp = hub
        .admin(Method::POST, "/v1/admin/tokens", Some(body))
        .await;
    assert_eq!(resp.status(), StatusCode::CREATED, "create {name}");
    let created: Value = resp.json().await.unwrap();
    assert_eq!(created["name"], name);
    assert_eq!(created["role"], role);
    created["token"].as_str().unwrap().to_owned()
}

async fn call(
    hub: &TestHub,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> reqwest::Response {
    hub.request(
        method,
        path,
        Some(token),
        body.map(|b| b.to_string().into_bytes()),
    )
    .await
}

async fn events(hub: &TestHub) -> Vec<Value> {
    let resp = hub
        .admin(Method::GET, "/v1/admin/events?limit=10000", None)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    // The API lists newest first; the tests here read the story in the order it happened.
    let mut events: Vec<Value> = resp.json().await.unwrap();
    events.reverse();
    events
}

/// The status and, for an error body, its code (empty for any other answer).
async fn status_and_code(resp: reqwest::Response) -> (StatusCode, String) {
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or_default();
    (status, body["code"].as_str().unwrap_or_default().to_owned())
}

/// A concrete URL for a table path: the enrolled host, ids that name nothing.
fn concrete(path: &str, host: Uuid) -> String {
    let filled = path
        .replace("{host_id}", &host.to_string())
        .replace("{job_id}", &Uuid::new_v4().to_string())
        .replace("{token_id}", "00000000000000ff")
        .replace("{id}", "987654")
        .replace("{sha256}", &"0".repeat(64))
        .replace("{name}", "nobody");
    assert!(!filled.contains('{'), "{path}: a parameter left unfilled");
    format!("{}{filled}", admin::PREFIX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_route_answers_each_role_as_the_table_says() {
    let hub = TestHub::start().await;
    let (host, _) = hub.enroll("pve-roles").await;
    let viewer = create(&hub, "ro", "viewer", None).await;
    let operator = create(&hub, "ops", "operator", None).await;
    let second_admin = create(&hub, "root2", "admin", None).await;
    let expiring = create(&hub, "brief", "admin", Some(60)).await;
    let revoked = create(&hub, "gone", "admin", None).await;
    let resp = hub
        .admin(Method::POST, "/v1/admin/tokens/gone/revoke", None)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    // `brief` worked a moment ago and has expired now.
    assert_eq!(
        call(&hub, Method::GET, "/v1/admin/hosts", &expiring, None)
            .await
            .status(),
        StatusCode::OK
    );
    hub.clock.advance(Duration::from_secs(61));

    let holders: [(Option<&str>, Option<Role>, &str); 7] = [
        (None, None, "no token"),
        (Some(&expiring), None, "expired"),
        (Some(&revoked), None, "revoked"),
        (Some(&viewer), Some(Role::Viewer), "viewer"),
        (Some(&operator), Some(Role::Operator), "operator"),
        (Some(&second_admin), Some(Role::Admin), "admin"),
        (Some(&hub.admin), Some(Role::Admin), "init admin"),
    ];
    let table = admin::operations();
    assert!(table.len() >= 30, "{table:?}");
    let mut checked = 0;
    // Each operation from an address of its own: the expired and revoked tokens take from
    // their source's allowance of failures (ten at once, decision 0055).
    let mut sources = (1u32..).map(|n| std::net::Ipv4Addr::from(0x7f02_0000 + n));
    for (method, path, needed) in &table {
        let url = concrete(path, host);
        let client = hub.client_from(sources.next().unwrap());
        for (token, role, who) in &holders {
            let body = (*method != Method::GET).then(|| b"{}".to_vec());
            let resp = hub
                .request_from(&client, method.clone(), &url, *token, body)
                .await;
            let (status, code) = status_and_code(resp).await;
            let at = format!("{method} {url} as {who} (needs {needed})");
            match role {
                None => assert_eq!(
                    (status, code.as_str()),
                    (StatusCode::UNAUTHORIZED, "unauthorized"),
                    "{at}"
                ),
                Some(role) if !role.allows(*needed) => assert_eq!(
                    (status, code.as_str()),
                    (StatusCode::FORBIDDEN, "forbidden"),
                    "{at}"
                ),
                Some(_) => assert!(
                    status != StatusCode::UNAUTHORIZED
                        && status != StatusCode::FORBIDDEN
                        && code != "no_such_endpoint"
                        && code != "method_not_allowed",
                    "{at}: {status} {code}"
                ),
            }
            checked += 1;
        }
    }
    assert_eq!(checked, table.len() * holders.len());

    // The 403 says which role the call needs.
    let resp = call(
        &hub,
        Method::POST,
        "/v1/admin/tokens",
        &operator,
        Some(json!({})),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let body: Value = resp.json().await.unwrap();
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("`admin`") && message.contains("`ops`"),
        "{message}"
    );

    // Unknown paths under the prefix: 401 without a valid token, 404 with any valid one.
    for (token, status) in [
        (None, StatusCode::UNAUTHORIZED),
        (Some(revoked.as_str()), StatusCode::UNAUTHORIZED),
        (Some(viewer.as_str()), StatusCode::NOT_FOUND),
    ] {
        let resp = hub
            .request(Method::GET, "/v1/admin/no-such-thing", token, None)
            .await;
        assert_eq!(resp.status(), status, "{token:?}");
    }
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_created_listed_rotated_and_revoked() {
    let hub = TestHub::start().await;
    let secret = create(&hub, "alice", "operator", Some(86_400)).await;
    assert!(secret.starts_with("bsa_"), "{secret}");

    // The list names every token and never a secret.
    let resp = hub.admin(Method::GET, "/v1/admin/tokens", None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let text = resp.text().await.unwrap();
    assert!(
        !text.contains(&secret) && !text.contains(&hub.admin),
        "{text}"
    );
    let listed: Vec<Value> = serde_json::from_str(&text).unwrap();
    let names: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["admin", "alice"]);
    assert_eq!(listed[0]["role"], "admin");
    assert_eq!(listed[1]["created_by"], "admin");
    assert!(listed[1]["expires_at"].is_string());
    assert!(listed.iter().all(|t| t.get("token").is_none()));

    // Bad names and duplicates are refused.
    for (body, status, code) in [
        (
            json!({"name": "Alice", "role": "viewer"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
        ),
        (
            json!({"name": "bob", "role": "root"}),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        (
            json!({"name": "bob", "role": "viewer", "expires_in_seconds": 5}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
        ),
        (
            json!({"name": "alice", "role": "viewer"}),
            StatusCode::CONFLICT,
            "token_name_taken",
        ),
    ] {
        let resp = hub
            .admin(Method::POST, "/v1/admin/tokens", Some(body.clone()))
            .await;
        assert_eq!(error_code(resp).await, (status, code.to_owned()), "{body}");
    }
    let resp = hub
        .admin(Method::POST, "/v1/admin/tokens/No%20Such/revoke", None)
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::BAD_REQUEST, "bad_token_name".to_owned())
    );

    // The token works, and its use is noted.
    let resp = call(&hub, Method::GET, "/v1/admin/hosts", &secret, None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let listed: Vec<Value> = hub
        .admin(Method::GET, "/v1/admin/tokens", None)
        .await
        .json()
        .await
        .unwrap();
    assert!(listed[1]["last_used_at"].is_string(), "{listed:?}");

    // Rotating: a new secret, the old one refused at once.
    let resp = hub
        .admin(Method::POST, "/v1/admin/tokens/alice/rotate", None)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let rotated: Value = resp.json().await.unwrap();
    let new_secret = rotated["token"].as_str().unwrap().to_owned();
    assert_ne!(new_secret, secret);
    assert_eq!(
        (rotated["name"].as_str(), rotated["role"].as_str()),
        (Some("alice"), Some("operator"))
    );
    assert_eq!(
        call(&hub, Method::GET, "/v1/admin/hosts", &secret, None)
            .await
            .status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(&hub, Method::GET, "/v1/admin/hosts", &new_secret, None)
            .await
            .status(),
        StatusCode::OK
    );

    // Revoking: refused at once.
    let resp = hub
        .admin(Method::POST, "/v1/admin/tokens/alice/revoke", None)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        call(&hub, Method::GET, "/v1/admin/hosts", &new_secret, None)
            .await
            .status(),
        StatusCode::UNAUTHORIZED
    );
    let resp = hub
        .admin(Method::POST, "/v1/admin/tokens/alice/revoke", None)
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::NOT_FOUND, "unknown_token".to_owned())
    );

    // Each step is an event naming the token that took it.
    let kinds: Vec<(String, Value)> = events(&hub)
        .await
        .into_iter()
        .filter(|e| e["kind"].as_str().unwrap().starts_with("operator_token_"))
        .map(|e| (e["kind"].as_str().unwrap().to_owned(), e["detail"].clone()))
        .collect();
    let seen: Vec<&str> = kinds.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        seen,
        [
            "operator_token_created",
            "operator_token_rotated",
            "operator_token_revoked"
        ]
    );
    for (kind, detail) in &kinds {
        assert_eq!(detail["by"], "admin", "{kind}");
        assert_eq!(detail["name"], "alice", "{kind}");
        assert!(!detail.to_string().contains("bsa_"), "{kind}: {detail}");
    }
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_unexpired_admin_token_stays() {
    let hub = TestHub::start().await;
    let resp = hub
        .admin(Method::POST, "/v1/admin/tokens/admin/revoke", None)
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::CONFLICT, "last_admin_token".to_owned())
    );
    // An admin token that expires does not stand in for it once it has expired.
    let brief = create(&hub, "brief", "admin", Some(60)).await;
    hub.clock.advance(Duration::from_secs(61));
    let resp = hub
        .admin(Method::POST, "/v1/admin/tokens/admin/revoke", None)
        .await;
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    assert_eq!(
        call(&hub, Method::GET, "/v1/admin/tokens", &brief, None)
            .await
            .status(),
        StatusCode::UNAUTHORIZED
    );
    // With another admin token, the first may go, even by its own hand.
    let keeper = create(&hub, "keeper", "admin", None).await;
    let resp = hub
        .admin(Method::POST, "/v1/admin/tokens/admin/revoke", None)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        hub.admin(Method::GET, "/v1/admin/hosts", None)
            .await
            .status(),
        StatusCode::UNAUTHORIZED
    );
    let resp = call(
        &hub,
        Method::POST,
        "/v1/admin/tokens/keeper/revoke",
        &keeper,
        None,
    )
    .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::CONFLICT, "last_admin_token".to_owned())
    );
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_recorded_with_the_tokens_name() {
    let hub = TestHub::start().await;
    let (host, _) = hub.enroll("pve-audit").await;
    let alice = create(&hub, "alice", "operator", None).await;
    let bob = create(&hub, "bob", "operator", None).await;
    for (token, memory) in [(&alice, 1024), (&bob, 2048)] {
        let mut doc = desired();
        doc["guests"][0]["resources"]["memory_mib"] = json!(memory);
        let resp = call(
            &hub,
            Method::PUT,
            &format!("/v1/admin/hosts/{host}/desired"),
            token,
            Some(doc),
        )
        .await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let resp = call(
        &hub,
        Method::GET,
        &format!("/v1/admin/hosts/{host}/desired/status"),
        &alice,
        None,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let status: Value = resp.json().await.unwrap();
    assert_eq!(status["desired"]["generation"], 2);
    assert_eq!(status["desired"]["set_by"], "bob");
    let resp = call(
        &hub,
        Method::GET,
        &format!("/v1/admin/hosts/{host}/desired"),
        &alice,
        None,
    )
    .await;
    let view: Value = resp.json().await.unwrap();
    assert_eq!(view["set_by"], "bob");

    let changes: Vec<Value> = events(&hub)
        .await
        .into_iter()
        .filter(|e| e["kind"] == "desired_changed")
        .map(|e| e["detail"].clone())
        .collect();
    let by: Vec<&str> = changes.iter().map(|d| d["by"].as_str().unwrap()).collect();
    assert_eq!(by, ["alice", "bob"]);

    // Events no operator caused (the enrollment's host joining) name nobody.
    let enrolled: Vec<Value> = events(&hub)
        .await
        .into_iter()
        .filter(|e| e["kind"] == "enrolled")
        .collect();
    assert!(!enrolled.is_empty());
    assert!(
        enrolled.iter().all(|e| e["detail"].get("by").is_none()),
        "{enrolled:?}"
    );
    hub.stop().await;
}
