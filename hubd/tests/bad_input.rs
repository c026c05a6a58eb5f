//! Every bad-input case gets the right status and a JSON error; request ids are echoed.

use crate::common;

use common::{TestHub, error_code};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use uuid::Uuid;

#[tokio::test]
async fn malformed_json_is_a_400_with_a_clear_message() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-bad").await;
    let cases: &[(&str, &[u8])] = &[
        ("truncated", b"{\"schema\": \"bosun.poll/v1\", "),
        ("not json", b"hello"),
        ("wrong type", b"[1, 2, 3]"),
        ("empty", b""),
    ];
    for (name, body) in cases {
        let resp = hub
            .request(
                Method::POST,
                &format!("/v1/hosts/{host}/poll"),
                Some(&key),
                Some(body.to_vec()),
            )
            .await;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}");
        assert_eq!(body["code"], "malformed_json", "{name}");
        assert!(
            body["message"].as_str().unwrap().contains("bosun.poll/v1"),
            "{name}: {body}"
        );
    }
    let resp = hub
        .request(
            Method::POST,
            "/v1/admin/enrollment-tokens",
            Some(&hub.admin.clone()),
            Some(b"{".to_vec()),
        )
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::BAD_REQUEST, "malformed_json".into())
    );
}

#[tokio::test]
async fn oversized_bodies_are_a_413() {
    let hub = TestHub::start_with(|config| config.max_body_bytes = 16 * 1024).await;
    let (host, key) = hub.enroll("pve-big").await;
    let mut body = common::poll_body(0, &[]);
    body["report"]["padding"] = "x".repeat(32 * 1024).into();
    let resp = hub
        .request(
            Method::POST,
            &format!("/v1/hosts/{host}/poll"),
            Some(&key),
            Some(body.to_string().into_bytes()),
        )
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large".into())
    );
    let resp = hub
        .request(
            Method::PUT,
            &format!("/v1/admin/hosts/{host}/desired"),
            Some(&hub.admin.clone()),
            Some(vec![b' '; 20_000]),
        )
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large".into())
    );
    // The host was not touched by the refused poll.
    let detail: Value = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(detail["liveness"], "never");
}

#[tokio::test]
async fn unknown_hosts_are_404_and_bad_keys_401() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-auth").await;
    let stranger = Uuid::new_v4();
    let body = Some(common::poll_body(0, &[]).to_string().into_bytes());

    let resp = hub
        .request(
            Method::POST,
            &format!("/v1/hosts/{stranger}/poll"),
            Some(&key),
            body.clone(),
        )
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::NOT_FOUND, "unknown_host".into())
    );
    let resp = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{stranger}"), None)
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::NOT_FOUND, "unknown_host".into())
    );
    let resp = hub
        .admin(
            Method::PUT,
            &format!("/v1/admin/hosts/{stranger}/desired"),
            Some(common::desired()),
        )
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::NOT_FOUND, "unknown_host".into())
    );
    let resp = hub
        .admin(Method::GET, "/v1/admin/hosts/not-a-uuid", None)
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::BAD_REQUEST, "bad_host_id".into())
    );

    for token in [None, Some("bsh_wrong"), Some(hub.admin.as_str())] {
        let resp = hub
            .request(
                Method::POST,
                &format!("/v1/hosts/{host}/poll"),
                token,
                body.clone(),
            )
            .await;
        assert_eq!(
            error_code(resp).await,
            (StatusCode::UNAUTHORIZED, "unauthorized".into()),
            "{token:?}"
        );
    }
    // A host key is not an admin token.
    for token in [None, Some(key.as_str())] {
        let resp = hub
            .request(Method::GET, "/v1/admin/hosts", token, None)
            .await;
        assert_eq!(
            error_code(resp).await,
            (StatusCode::UNAUTHORIZED, "unauthorized".into())
        );
    }
    // Another host's key does not work for this host.
    let (_, other_key) = hub.enroll("pve-other").await;
    let resp = hub
        .request(
            Method::POST,
            &format!("/v1/hosts/{host}/poll"),
            Some(&other_key),
            body,
        )
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::UNAUTHORIZED, "unauthorized".into())
    );

    let resp = hub
        .request(Method::POST, &format!("/v1/hosts/{host}/jobs/{}/result", Uuid::new_v4()), Some(&key), Some(
            serde_json::json!({"schema":"bosun.job-result/v1","job_id":Uuid::nil(),"outcome":"failed","finished_at":"2026-01-01T00:00:00Z"})
                .to_string().into_bytes()))
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::BAD_REQUEST, "job_id_mismatch".into())
    );
    let job = Uuid::new_v4();
    let resp = hub
        .request(Method::POST, &format!("/v1/hosts/{host}/jobs/{job}/result"), Some(&key), Some(
            serde_json::json!({"schema":"bosun.job-result/v1","job_id":job,"outcome":"failed","finished_at":"2026-01-01T00:00:00Z"})
                .to_string().into_bytes()))
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::NOT_FOUND, "unknown_job".into())
    );

    let resp = hub
        .request(Method::GET, "/v1/nothing-here", None, None)
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::NOT_FOUND, "no_such_endpoint".into())
    );
}

#[tokio::test]
async fn request_ids_are_echoed_or_generated() {
    let hub = TestHub::start().await;
    let resp = hub
        .client
        .get(format!("{}/v1/admin/hosts", hub.url))
        .header("x-request-id", "req-123")
        .header("x-correlation-id", "flow-9")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-request-id"], "req-123");
    assert_eq!(resp.headers()["x-correlation-id"], "flow-9");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["request_id"], "req-123",
        "error bodies carry the request id"
    );

    let resp = hub.request(Method::GET, "/v1/health", None, None).await;
    let generated = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(Uuid::parse_str(&generated).is_ok(), "{generated}");
    assert_eq!(
        resp.headers()["x-correlation-id"].to_str().unwrap(),
        generated
    );

    // A garbage id is replaced, not echoed.
    let resp = hub
        .client
        .get(format!("{}/v1/health", hub.url))
        .header("x-request-id", "x".repeat(500))
        .send()
        .await
        .unwrap();
    assert!(Uuid::parse_str(resp.headers()["x-request-id"].to_str().unwrap()).is_ok());
}

#[tokio::test]
async fn a_wrong_pin_is_refused_by_the_client() {
    let hub = TestHub::start().await;
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(
            bosun_hubd::tls::pinned_client_config(&"0".repeat(64)).expect("a valid fingerprint"),
        )
        .build()
        .unwrap();
    assert!(
        client
            .get(format!("{}/v1/health", hub.url))
            .send()
            .await
            .is_err()
    );
}
