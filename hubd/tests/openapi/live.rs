//! Live answers of a real hub against the document.

use bosun_hubd::api::admin;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use super::common::{self, TestHub};
use super::schema::Schemas;
use super::{concrete, doc_example, document, documented};

/// Checks a live answer against the document: its status is documented for the route, and
/// its body fits the schema documented for that status (or is empty where none is). Gives
/// the status and the JSON body.
async fn conforms(
    doc: &Value,
    method: &str,
    template: &str,
    resp: reqwest::Response,
) -> (StatusCode, Value) {
    let status = resp.status();
    let at = format!("{method} {template} → {}", status.as_u16());
    let documented = &doc["paths"][template][method]["responses"][status.as_str()];
    assert!(documented.is_object(), "{at} is not documented");
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = resp.text().await.unwrap();
    let Some(content) = documented["content"].as_object() else {
        assert!(
            text.is_empty(),
            "{at}: documented without a body, got {text}"
        );
        return (status, Value::Null);
    };
    let content_type = content_type.unwrap_or_default();
    if let Some(media) = content.get("application/json") {
        assert!(
            content_type.starts_with("application/json"),
            "{at}: {content_type}"
        );
        let body: Value = serde_json::from_str(&text).unwrap();
        Schemas::of(doc)
            .check(&media["schema"], &body, &at)
            .unwrap_or_else(|e| panic!("{e}\n{body}"));
        (status, body)
    } else {
        assert!(
            content.contains_key(&content_type),
            "{at}: {content_type} not documented"
        );
        (status, Value::Null)
    }
}

async fn send(
    hub: &TestHub,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> reqwest::Response {
    hub.request(
        method,
        path,
        token,
        body.map(|b| b.to_string().into_bytes()),
    )
    .await
}

#[tokio::test]
async fn live_answers_fit_the_documented_schemas() {
    let doc = document();
    let hub = TestHub::start().await;
    let admin = Some(hub.admin.as_str());

    let resp = send(&hub, Method::GET, "/v1/health", None, None).await;
    conforms(&doc, "get", "/v1/health", resp).await;
    let resp = send(&hub, Method::GET, "/metrics", None, None).await;
    conforms(&doc, "get", "/metrics", resp).await;

    let request = json!({ "ttl_seconds": 600 });
    let resp = send(
        &hub,
        Method::POST,
        "/v1/admin/enrollment-tokens",
        admin,
        Some(&request),
    )
    .await;
    let (_, created) = conforms(&doc, "post", "/v1/admin/enrollment-tokens", resp).await;
    let mut enroll = doc_example("enroll-request.json");
    enroll["token"] = created["token"].clone();
    let resp = send(&hub, Method::POST, "/v1/enroll", None, Some(&enroll)).await;
    let (status, enrolled) = conforms(&doc, "post", "/v1/enroll", resp).await;
    assert_eq!(status, StatusCode::CREATED);
    let host: Uuid = enrolled["host_id"].as_str().unwrap().parse().unwrap();
    let key = enrolled["host_key"].as_str().unwrap().to_owned();
    let resp = send(&hub, Method::POST, "/v1/enroll", None, Some(&enroll)).await;
    let (status, _) = conforms(&doc, "post", "/v1/enroll", resp).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a used token");

    let poll_path = format!("/v1/hosts/{host}/poll?wait=0");
    let resp = send(
        &hub,
        Method::POST,
        &poll_path,
        Some(&key),
        Some(&doc_example("poll-request.json")),
    )
    .await;
    let (status, _) = conforms(&doc, "post", "/v1/hosts/{host_id}/poll", resp).await;
    assert_eq!(status, StatusCode::OK);

    let desired = doc_example("desired.json");
    let resp = send(
        &hub,
        Method::PUT,
        &format!("/v1/admin/hosts/{host}/desired"),
        admin,
        Some(&desired),
    )
    .await;
    let (status, _) = conforms(&doc, "put", "/v1/admin/hosts/{host_id}/desired", resp).await;
    assert_eq!(status, StatusCode::OK);
    let resp = send(
        &hub,
        Method::POST,
        &poll_path,
        Some(&key),
        Some(&common::poll_body(0, &[])),
    )
    .await;
    let (_, answer) = conforms(&doc, "post", "/v1/hosts/{host_id}/poll", resp).await;
    assert!(answer["desired"].is_object(), "{answer}");

    let job_id = Uuid::new_v4();
    let jobs = format!("/v1/admin/hosts/{host}/jobs");
    for expected in [StatusCode::CREATED, StatusCode::OK] {
        let resp = send(
            &hub,
            Method::POST,
            &jobs,
            admin,
            Some(&common::signed_job(host, job_id)),
        )
        .await;
        let (status, _) = conforms(&doc, "post", "/v1/admin/hosts/{host_id}/jobs", resp).await;
        assert_eq!(status, expected);
    }
    let mut result = doc_example("job-result.json");
    result["job_id"] = json!(job_id);
    let resp = send(
        &hub,
        Method::POST,
        &format!("/v1/hosts/{host}/jobs/{job_id}/result"),
        Some(&key),
        Some(&result),
    )
    .await;
    let (status, _) = conforms(
        &doc,
        "post",
        "/v1/hosts/{host_id}/jobs/{job_id}/result",
        resp,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    let escrow = format!("/v1/hosts/{host}/escrow");
    let resp = send(&hub, Method::GET, &escrow, Some(&key), None).await;
    let (status, _) = conforms(&doc, "get", "/v1/hosts/{host_id}/escrow", resp).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "no blob yet");
    let resp = send(
        &hub,
        Method::PUT,
        &escrow,
        Some(&key),
        Some(&doc_example("escrow.json")),
    )
    .await;
    conforms(&doc, "put", "/v1/hosts/{host_id}/escrow", resp).await;
    let resp = send(&hub, Method::GET, &escrow, Some(&key), None).await;
    let (status, _) = conforms(&doc, "get", "/v1/hosts/{host_id}/escrow", resp).await;
    assert_eq!(status, StatusCode::OK);

    // Every admin read, for this host and for one the hub does not know.
    let stranger = Uuid::new_v4();
    for (method, template) in documented(&doc) {
        if method != "get" || !template.starts_with(admin::PREFIX) {
            continue;
        }
        for id in [host, stranger] {
            let path = template.replace("{host_id}", &id.to_string());
            let resp = send(&hub, Method::GET, &path, admin, None).await;
            let (status, body) = conforms(&doc, "get", &template, resp).await;
            assert!(
                status.is_success() || id == stranger,
                "{template}: {status} {body}"
            );
        }
        let resp = send(&hub, Method::GET, &concrete(&template), None, None).await;
        let (status, _) = conforms(&doc, "get", &template, resp).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{template} without the admin token"
        );
    }

    // Refusals.
    let resp = send(&hub, Method::GET, "/v1/admin/hosts/not-a-uuid", admin, None).await;
    conforms(&doc, "get", "/v1/admin/hosts/{host_id}", resp).await;
    let resp = send(
        &hub,
        Method::POST,
        &format!("/v1/hosts/{host}/poll?wait=61"),
        Some(&key),
        None,
    )
    .await;
    conforms(&doc, "post", "/v1/hosts/{host_id}/poll", resp).await;
    let resp = send(
        &hub,
        Method::POST,
        &poll_path,
        Some("wrong"),
        Some(&common::poll_body(0, &[])),
    )
    .await;
    conforms(&doc, "post", "/v1/hosts/{host_id}/poll", resp).await;
    let resp = send(
        &hub,
        Method::POST,
        "/v1/enroll",
        None,
        Some(&json!({ "schema": 1 })),
    )
    .await;
    conforms(&doc, "post", "/v1/enroll", resp).await;
    let resp = send(
        &hub,
        Method::POST,
        &format!("/v1/admin/hosts/{host}/approve"),
        admin,
        None,
    )
    .await;
    conforms(&doc, "post", "/v1/admin/hosts/{host_id}/approve", resp).await;
    let resp = send(
        &hub,
        Method::POST,
        &format!("/v1/admin/hosts/{host}/revoke"),
        admin,
        None,
    )
    .await;
    let (status, _) = conforms(&doc, "post", "/v1/admin/hosts/{host_id}/revoke", resp).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let resp = send(
        &hub,
        Method::POST,
        &poll_path,
        Some(&key),
        Some(&common::poll_body(0, &[])),
    )
    .await;
    let (status, _) = conforms(&doc, "post", "/v1/hosts/{host_id}/poll", resp).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a revoked host");
}
