//! Acknowledging and silencing alerts through the admin API: refusals with clear codes, the
//! marks on open alerts, the events, and a silenced alert that never reaches the webhook while
//! an unsilenced one does.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::time::Duration;

use common::{Hook, TestHub, error_code};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

async fn open_alerts(hub: &TestHub) -> Vec<Value> {
    hub.admin(Method::GET, "/v1/admin/alerts/open", None)
        .await
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn bad_acknowledgements_and_silences_are_refused_with_their_codes() {
    let hub = TestHub::start().await;
    let (host, _) = hub.enroll("pve-triage").await;
    let cases = [
        (
            "/v1/admin/alerts/ack",
            json!({"host_id": host, "kind": "host_overdue", "subject": host, "note": "on it"}),
            StatusCode::NOT_FOUND,
            "unknown_alert",
        ),
        (
            "/v1/admin/alerts/ack",
            json!({"host_id": host, "kind": "host_overdue", "subject": host, "note": " "}),
            StatusCode::BAD_REQUEST,
            "bad_note",
        ),
        (
            "/v1/admin/alerts/ack",
            json!({"host_id": host, "kind": "no_such_kind", "subject": "x", "note": "n"}),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        (
            "/v1/admin/alerts/silences",
            json!({"host_id": host, "duration_seconds": 30 * 86_400 + 1, "reason": "r"}),
            StatusCode::BAD_REQUEST,
            "bad_duration",
        ),
        (
            "/v1/admin/alerts/silences",
            json!({"host_id": host, "duration_seconds": 59, "reason": "r"}),
            StatusCode::BAD_REQUEST,
            "bad_duration",
        ),
        (
            "/v1/admin/alerts/silences",
            json!({"host_id": host, "duration_seconds": 600, "reason": "r".repeat(501)}),
            StatusCode::BAD_REQUEST,
            "bad_reason",
        ),
        (
            "/v1/admin/alerts/silences",
            json!({"host_id": Uuid::new_v4(), "duration_seconds": 600, "reason": "r"}),
            StatusCode::NOT_FOUND,
            "unknown_host",
        ),
    ];
    for (path, body, status, code) in cases {
        let resp = hub.admin(Method::POST, path, Some(body.clone())).await;
        assert_eq!(error_code(resp).await, (status, code.to_owned()), "{body}");
    }
    for (id, status, code) in [
        ("12", StatusCode::NOT_FOUND, "unknown_silence"),
        ("twelve", StatusCode::BAD_REQUEST, "bad_silence_id"),
    ] {
        let resp = hub
            .admin(
                Method::DELETE,
                &format!("/v1/admin/alerts/silences/{id}"),
                None,
            )
            .await;
        assert_eq!(error_code(resp).await, (status, code.to_owned()));
    }
    let events = common::host_events(&hub, host).await;
    assert!(
        events.iter().all(|(kind, _)| !kind.starts_with("alert_")),
        "refusals leave no event: {events:?}"
    );
}

#[tokio::test]
async fn a_silenced_alert_is_stored_and_counted_but_never_reaches_the_webhook() {
    let (hook, url) = Hook::start().await;
    let hub = TestHub::start_with(|config| {
        config.webhook = Some(bosun_hubd::alerts::WebhookConfig::new(url));
        config.dead_man.silence_window = Duration::ZERO;
    })
    .await;
    let (kept, kept_key) = hub.enroll("pve-kept").await;
    let (paged, paged_key) = hub.enroll("pve-paged").await;
    hub.poll_json(kept, &kept_key, 0).await;
    hub.poll_json(paged, &paged_key, 0).await;

    let resp = hub
        .admin(
            Method::POST,
            "/v1/admin/alerts/silences",
            Some(json!({
                "host_id": kept, "kind": "host_overdue", "duration_seconds": 3600,
                "reason": "moving the rack"
            })),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let silence: Value = resp.json().await.unwrap();
    let listed: Vec<Value> = hub
        .admin(Method::GET, "/v1/admin/alerts/silences", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0], silence);

    hub.clock.advance(Duration::from_secs(91));
    assert_eq!(hub.hub.sweep_once().await.unwrap().len(), 2);
    let bodies = hook.received(1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let bodies_after = hook.received(1).await;
    assert_eq!(bodies, bodies_after, "nothing more arrives");
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    assert_eq!(bodies[0]["host_id"], paged.to_string());
    assert!(bodies[0].get("silenced_by").is_none());

    // Both are stored, listed open, and counted; the silenced one is marked.
    let open = open_alerts(&hub).await;
    assert_eq!(open.len(), 2);
    let kept_alert = open
        .iter()
        .find(|a| a["host_id"] == kept.to_string())
        .unwrap();
    assert_eq!(kept_alert["silenced_by"], silence["id"]);
    let history: Vec<Value> = hub
        .admin(Method::GET, "/v1/admin/alerts", None)
        .await
        .json()
        .await
        .unwrap();
    let silenced: Vec<&Value> = history
        .iter()
        .filter(|a| a.get("silenced_by").is_some())
        .collect();
    assert_eq!(silenced.len(), 1);
    assert_eq!(silenced[0]["host_id"], kept.to_string());
    let metrics = hub.metrics().await;
    assert!(
        metrics.contains("bosun_hub_alerts_total{kind=\"host_overdue\"} 2"),
        "{metrics}"
    );

    // Acknowledged, it stays open with the note; ending the silence unmarks it.
    let resp = hub
        .admin(
            Method::POST,
            "/v1/admin/alerts/ack",
            Some(json!({
                "host_id": kept, "kind": "host_overdue", "subject": kept, "note": "known: rack move"
            })),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let acked: Value = resp.json().await.unwrap();
    assert_eq!(acked["acknowledged"]["note"], "known: rack move");
    let resp = hub
        .admin(
            Method::DELETE,
            &format!("/v1/admin/alerts/silences/{}", silence["id"]),
            None,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let open = open_alerts(&hub).await;
    let kept_alert = open
        .iter()
        .find(|a| a["host_id"] == kept.to_string())
        .unwrap();
    assert!(kept_alert.get("silenced_by").is_none());
    assert_eq!(kept_alert["acknowledged"]["note"], "known: rack move");

    let kinds: Vec<String> = common::host_events(&hub, kept)
        .await
        .into_iter()
        .map(|(kind, _)| kind)
        .filter(|kind| kind.starts_with("alert_"))
        .collect();
    assert_eq!(
        kinds,
        ["alert_silenced", "alert_acknowledged", "alert_unsilenced"]
    );
}
