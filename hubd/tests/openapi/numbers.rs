//! Where the document says `integer`, the hub takes a whole number however JSON spells it
//! (`969`, `969.0`, `9.69e2`), as JSON Schema does; a fraction or a value out of range is
//! 400 `malformed_json` naming the value. Sent as raw bytes, the way a client whose numbers
//! are all doubles sends them.

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::common::TestHub;

async fn post_raw(hub: &TestHub, path: &str, body: &str) -> (StatusCode, Value) {
    let resp = hub
        .request(
            Method::POST,
            path,
            Some(&hub.admin.clone()),
            Some(body.as_bytes().to_vec()),
        )
        .await;
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_whole_float_is_taken_where_the_document_says_integer() {
    let hub = TestHub::start().await;
    let (host, _) = hub.enroll("doubles").await;
    let silence =
        format!(r#"{{"host_id": "{host}", "duration_seconds": 969.0, "reason": "maintenance"}}"#);
    let fractional =
        format!(r#"{{"host_id": "{host}", "duration_seconds": 1e300, "reason": "x"}}"#);
    let cases = [
        ("/v1/admin/enrollment-tokens", r#"{"ttl_seconds": 969.0}"#),
        ("/v1/admin/enrollment-tokens", r#"{"ttl_seconds": 9.69e2}"#),
        (
            "/v1/admin/tokens",
            r#"{"name": "doubles", "role": "viewer", "expires_in_seconds": 969.0}"#,
        ),
        ("/v1/admin/alerts/silences", silence.as_str()),
    ];
    for (path, body) in cases {
        let (status, answer) = post_raw(&hub, path, body).await;
        assert_eq!(status, StatusCode::CREATED, "{path} {body}: {answer}");
    }
    let tokens = hub
        .admin(Method::GET, "/v1/admin/enrollment-tokens", None)
        .await;
    let tokens: Value = tokens.json().await.unwrap();
    // Both lifetimes were read as 969 s (the enrollment above used a token of its own).
    let lifetimes: Vec<i64> = tokens
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["state"] == "unused")
        .map(|t| {
            let at = |field: &str| {
                t[field]
                    .as_str()
                    .unwrap()
                    .parse::<jiff::Timestamp>()
                    .unwrap()
                    .as_second()
            };
            at("expires_at") - at("created_at")
        })
        .collect();
    assert_eq!(lifetimes, [969, 969], "{tokens}");

    for (path, body, named) in [
        (
            "/v1/admin/enrollment-tokens",
            r#"{"ttl_seconds": 969.5}"#,
            "969.5",
        ),
        (
            "/v1/admin/enrollment-tokens",
            r#"{"ttl_seconds": 5000000000.0}"#,
            "5000000000",
        ),
        (
            "/v1/admin/enrollment-tokens",
            r#"{"ttl_seconds": -60.0}"#,
            "-60",
        ),
        (
            "/v1/admin/alerts/silences",
            fractional.as_str(),
            "floating point",
        ),
    ] {
        let (status, answer) = post_raw(&hub, path, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {body}: {answer}");
        assert_eq!(answer["code"], "malformed_json", "{answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(message.contains(named), "{body}: {message}");
    }
}
