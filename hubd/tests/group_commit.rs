//! Polls from many hosts at once share transactions; one refused poll does not undo the others.

use crate::common;

use common::{TestHub, error_code};
use reqwest::{Method, StatusCode};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_polls_are_recorded_independently() {
    let hub = TestHub::start().await;
    let mut hosts = Vec::new();
    for n in 0..40 {
        hosts.push(hub.enroll(&format!("pve-{n:02}")).await);
    }
    let (revoked, revoked_key) = hosts[0].clone();
    hub.admin(
        Method::POST,
        &format!("/v1/admin/hosts/{revoked}/revoke"),
        None,
    )
    .await;

    let mut polls = tokio::task::JoinSet::new();
    for (n, (host, key)) in hosts.iter().cloned().enumerate() {
        let client = hub.client.clone();
        let url = format!("{}/v1/hosts/{host}/poll", hub.url);
        let body = common::poll_body(0, &[]).to_string();
        polls.spawn(async move {
            (
                n,
                client
                    .post(url)
                    .bearer_auth(key)
                    .body(body)
                    .send()
                    .await
                    .unwrap(),
            )
        });
    }
    let mut ok = 0;
    while let Some(joined) = polls.join_next().await {
        let (n, resp) = joined.unwrap();
        if n == 0 {
            assert_eq!(
                error_code(resp).await,
                (StatusCode::UNAUTHORIZED, "unauthorized".into())
            );
        } else {
            assert_eq!(resp.status(), StatusCode::OK, "host {n}");
            ok += 1;
        }
    }
    assert_eq!(ok, 39);
    let listed: Vec<Value> = hub
        .admin(Method::GET, "/v1/admin/hosts", None)
        .await
        .json()
        .await
        .unwrap();
    for host in &listed {
        let expected = if host["host_id"] == revoked.to_string() {
            "never"
        } else {
            "ok"
        };
        assert_eq!(host["liveness"], expected, "{host}");
    }
    // The revoked host stays locked out on later polls too.
    let resp = hub.poll(revoked, &revoked_key, 0, &[], 0).await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
}
