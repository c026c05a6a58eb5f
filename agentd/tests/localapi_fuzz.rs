//! Fuzzed headers, paths, queries and bodies against the running local API: whatever comes
//! in, the answer is never a 5xx, always the JSON error format on failure, and the server
//! keeps serving.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;

use std::time::Duration;

use localapi_support::Harness;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

#[derive(Debug, Clone)]
struct FuzzRequest {
    method: &'static str,
    path: String,
    auth: Option<Vec<u8>>,
    valid_token: bool,
    content_type: Option<String>,
    body: Vec<u8>,
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(serde_json::Value::from),
        ".{0,40}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("vmid".to_owned()),
                    Just("guest_id".to_owned()),
                    Just("quiesced".to_owned()),
                    Just("max_quiesce_s".to_owned()),
                    Just("description".to_owned()),
                    Just("snapshot".to_owned()),
                    "[a-z_]{1,10}",
                ],
                inner,
                0..5,
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn request() -> impl Strategy<Value = FuzzRequest> {
    let method = prop_oneof![
        Just("GET"),
        Just("POST"),
        Just("PUT"),
        Just("DELETE"),
        Just("PATCH")
    ];
    let path = prop_oneof![
        Just("/v1/health".to_owned()),
        Just("/v1/storage".to_owned()),
        Just("/v1/snapshot".to_owned()),
        Just("/v1/rollback".to_owned()),
        Just("/v1/backup".to_owned()),
        Just("/v1/backup/due".to_owned()),
        Just("/v1/backup/status".to_owned()),
        Just("/v1/restore-test/status".to_owned()),
        "/[a-z0-9/._-]{0,30}",
    ];
    let query = prop_oneof![
        Just(String::new()),
        "\\?(vmid|guest_id|x)=[a-zA-Z0-9%&=+._-]{0,20}",
        "\\?[ -~]{0,20}".prop_map(|q| q.replace(['#', ' '], "")),
    ];
    let auth = prop_oneof![
        Just(None),
        prop::collection::vec(any::<u8>(), 0..80).prop_map(Some),
        "Bearer [ -~]{0,60}".prop_map(|s| Some(s.into_bytes())),
        "Bearer blt_[A-Za-z0-9_-]{43}".prop_map(|s| Some(s.into_bytes())),
    ];
    let content_type = prop_oneof![
        Just(None),
        Just(Some("application/json".to_owned())),
        Just(Some("application/json; charset=utf-8".to_owned())),
        "[ -~]{0,30}".prop_map(Some),
    ];
    let body = prop_oneof![
        Just(Vec::new()),
        prop::collection::vec(any::<u8>(), 0..300),
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
    ];
    (method, path, query, auth, any::<bool>(), content_type, body).prop_map(
        |(method, path, query, auth, valid_token, content_type, body)| FuzzRequest {
            method,
            path: format!("{path}{query}"),
            auth,
            valid_token,
            content_type,
            body,
        },
    )
}

async fn send(h: &Harness, req: &FuzzRequest) -> Result<(u16, String), String> {
    let method = reqwest::Method::from_bytes(req.method.as_bytes()).unwrap();
    let mut builder = h.client.request(method, h.url(&req.path));
    if req.valid_token {
        builder = builder.bearer_auth(&h.guest(0).token);
    } else if let Some(auth) = &req.auth {
        match reqwest::header::HeaderValue::from_bytes(auth) {
            Ok(v) => builder = builder.header("authorization", v),
            Err(_) => return Ok((0, String::new())),
        }
    }
    if let Some(ct) = &req.content_type {
        match reqwest::header::HeaderValue::from_str(ct) {
            Ok(v) => builder = builder.header("content-type", v),
            Err(_) => return Ok((0, String::new())),
        }
    }
    let resp = builder
        .body(req.body.clone())
        .send()
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    let status = resp.status().as_u16();
    let text = resp.text().await.map_err(|e| format!("body failed: {e}"))?;
    Ok((status, text))
}

#[test]
fn fuzzed_requests_never_get_a_server_error() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let h = rt.block_on(Harness::start());
    let mut runner = TestRunner::new(Config {
        cases: 300,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&request(), |req| {
            let outcome = rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(20), send(&h, &req)).await
            });
            let (status, text) = match outcome {
                Ok(Ok(answer)) => answer,
                Ok(Err(e)) => return Err(TestCaseError::fail(e)),
                Err(_) => return Err(TestCaseError::fail("request timed out")),
            };
            if status == 0 {
                // The client itself refused to send such a header.
                return Ok(());
            }
            prop_assert!(status < 500, "{req:?} got {status}: {text}");
            if status >= 400 {
                let body: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| TestCaseError::fail(format!("{req:?}: not json: {e}: {text}")))?;
                prop_assert!(
                    body["code"].is_string() && body["message"].is_string(),
                    "{text}"
                );
            }
            Ok(())
        })
        .unwrap();
    // Still serving afterwards.
    let status = rt.block_on(async {
        h.client
            .get(h.url("/v1/health"))
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(status, 200);
    rt.block_on(h.shutdown());
}
