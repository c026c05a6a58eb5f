//! The admin token guards the whole `/v1/admin` tree: every route the admin router serves
//! (walked from `api::admin::paths()`, the list the router is built from), every method on
//! it, and paths under the prefix that do not exist, refuse a request without the admin
//! token before any handler runs.
#![allow(clippy::unwrap_used)]

use crate::common;

use bosun_hubd::api::admin;
use common::{TestHub, error_code};
use reqwest::{Method, StatusCode};
use uuid::Uuid;

const METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
];

/// The served paths with a host id filled in, then paths under the prefix that no route
/// serves.
fn targets(host: Uuid) -> (Vec<String>, Vec<String>) {
    let served: Vec<String> = admin::paths()
        .into_iter()
        .map(|p| {
            format!(
                "{}{}",
                admin::PREFIX,
                p.replace("{host_id}", &host.to_string())
            )
        })
        .collect();
    // (`/v1/admin/` itself is not under the nest in axum: the outer router answers it 404
    // for everyone.)
    let unserved = ["", "/no-such-endpoint", "/hosts/not-a-uuid/jobs/extra"]
        .iter()
        .map(|p| format!("{}{p}", admin::PREFIX))
        .collect();
    (served, unserved)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_route_refuses_a_missing_or_wrong_admin_token() {
    let hub = TestHub::start().await;
    let (host, host_key) = hub.enroll("pve-auth").await;
    let enrollment = hub.enroll_token(600, false).await;
    let (served, unserved) = targets(host);
    assert!(
        served.len() >= 10,
        "the admin router serves {served:?}; the list is the router"
    );

    let near_miss = format!("{}x", hub.admin);
    let truncated = hub.admin[..hub.admin.len() - 1].to_owned();
    let wrong: Vec<Option<&str>> = vec![
        None,
        Some(""),
        Some("wrong"),
        Some(&near_miss),
        Some(&truncated),
        // Real secrets of other kinds are not the admin token.
        Some(&host_key),
        Some(&enrollment),
    ];
    let mut refused = 0;
    // Each route and method from an address of its own: a wrong token takes from its source's
    // allowance (ten at once, decision 0055), and this walk sends hundreds.
    let mut sources = (1u32..).map(|n| std::net::Ipv4Addr::from(0x7f01_0000 + n));
    for path in served.iter().chain(&unserved) {
        for method in METHODS {
            let client = hub.client_from(sources.next().unwrap());
            for token in &wrong {
                let body = (method != Method::GET).then(|| b"{}".to_vec());
                let resp = hub
                    .request_from(&client, method.clone(), path, *token, body)
                    .await;
                assert_eq!(
                    error_code(resp).await,
                    (StatusCode::UNAUTHORIZED, "unauthorized".into()),
                    "{method} {path} with {token:?}"
                );
                refused += 1;
            }
            // The admin token under another scheme is no bearer token.
            let resp = client
                .request(method.clone(), format!("{}{path}", hub.url))
                .header("authorization", format!("Basic {}", hub.admin))
                .send()
                .await
                .unwrap();
            assert_eq!(
                error_code(resp).await,
                (StatusCode::UNAUTHORIZED, "unauthorized".into()),
                "{method} {path} with Basic"
            );
        }
    }
    assert_eq!(
        refused,
        (served.len() + unserved.len()) * METHODS.len() * wrong.len()
    );

    // With the admin token every served path reaches a route (whatever its handler then
    // says), and an unserved one is an unknown endpoint: the list names the real routes.
    for path in &served {
        let mut routed = false;
        for method in METHODS {
            let resp = hub.admin(method.clone(), path, None).await;
            let (status, code) = error_code_or_ok(resp).await;
            assert_ne!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
            routed |= code != "no_such_endpoint" && code != "method_not_allowed";
        }
        assert!(routed, "{path} reaches no handler with the admin token");
    }
    for path in &unserved[1..] {
        let resp = hub.admin(Method::GET, path, None).await;
        assert_eq!(
            error_code(resp).await,
            (StatusCode::NOT_FOUND, "no_such_endpoint".into()),
            "{path}"
        );
    }
    hub.stop().await;
}

/// The status and, for an error body, its code (empty for a success body).
async fn error_code_or_ok(resp: reqwest::Response) -> (StatusCode, String) {
    let status = resp.status();
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    let code = if status.is_success() {
        String::new()
    } else {
        body["code"].as_str().unwrap_or_default().to_owned()
    };
    (status, code)
}
