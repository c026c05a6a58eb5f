//! The controller endpoints over real TLS: `GET /v1/controller` serves what the journal
//! announced for the caller's own guest only, and `POST /v1/controller/health` takes a bounded,
//! well-formed report from the caller's own controller and nothing else.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;

use bosun_agentd::guests::controller::Announced;
use bosun_agentd::ops::journal::ControllerState;
use localapi_support::Harness;
use serde_json::json;

fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_sees_only_its_own_digest_and_reports_only_for_itself() {
    let h = Harness::start().await;
    let (own, other) = (h.guest(0).clone(), h.guest(1).clone());

    let (status, body) = h.get(0, "/v1/controller").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "unmanaged");
    assert_eq!(body["digest"], serde_json::Value::Null);
    assert!(body["report_interval_s"].as_u64().unwrap() >= 1);

    h.controllers.announce(
        &own.guest_id,
        own.vmid,
        Announced {
            digest: Some(digest('a')),
            state: ControllerState::RollingOut,
            op_id: None,
        },
    );
    let (_, body) = h.get(0, "/v1/controller").await;
    assert_eq!(
        (body["digest"].as_str(), body["status"].as_str()),
        (Some(digest('a').as_str()), Some("rolling_out"))
    );
    let (_, body) = h.get(1, "/v1/controller").await;
    assert_eq!(
        body["status"], "unmanaged",
        "another guest's digest is not served"
    );
    let path = format!("/v1/controller?vmid={}", other.vmid);
    let (status, body) = h.get(0, &path).await;
    assert_eq!(status, 403, "{body}");

    let after = h.controllers.seq();
    let (status, body) = h
        .post(
            0,
            "/v1/controller/health",
            json!({ "digest": digest('a'), "healthy": true, "detail": "up" }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["matches"], true);
    let report = h.controllers.last_report(&own.guest_id).unwrap();
    assert!(report.healthy && report.seq > after);
    let (_, body) = h
        .post(
            1,
            "/v1/controller/health",
            json!({ "digest": digest('b'), "healthy": true }),
        )
        .await;
    assert_eq!(
        (body["matches"].as_bool(), body["desired_digest"].as_str()),
        (Some(false), None)
    );
    assert_eq!(
        h.controllers.last_report(&own.guest_id).unwrap().digest,
        digest('a'),
        "a report lands on the caller's own guest"
    );

    // Garbage is refused before it reaches the board.
    for (body, code) in [
        (json!({ "digest": "latest", "healthy": true }), 400),
        (json!({ "digest": digest('A'), "healthy": true }), 400),
        (json!({ "healthy": true }), 400),
        (
            json!({ "digest": digest('a'), "healthy": true, "detail": "x".repeat(201) }),
            400,
        ),
        (
            json!({ "digest": digest('a'), "healthy": true, "detail": "a\nb" }),
            400,
        ),
        (json!({ "digest": digest('a'), "healthy": "yes" }), 400),
        (
            json!({ "digest": digest('a'), "healthy": true, "vmid": other.vmid }),
            403,
        ),
        (
            json!({ "digest": digest('a'), "healthy": true, "guest_id": other.guest_id }),
            403,
        ),
    ] {
        let before = h.controllers.seq();
        let (status, answer) = h.post(0, "/v1/controller/health", body.clone()).await;
        assert_eq!(status, code, "{body}: {answer}");
        assert_eq!(h.controllers.seq(), before, "{body}: recorded anyway");
    }
    let resp = h
        .client
        .post(h.url("/v1/controller/health"))
        .json(&json!({ "digest": digest('a'), "healthy": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    h.shutdown().await;
}
