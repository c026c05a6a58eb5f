//! Escrow of the PBS key: a blob naming another host is refused; the host views tell a
//! verified escrow (the blob wraps the key the host reports) from a stored one and from none;
//! `escrow_missing` opens once for a host backing up to PBS without a verified escrow, from a
//! full report or a delta, and a `PUT` of the matching blob resolves it at once as
//! `escrow_verified`, on the alert list and the webhook alike.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::time::Duration;

use bosun_proto::desired::Retention;
use bosun_proto::report::{StateReport, TierReport};
use common::{Hook, TestHub, error_code, full, host_alerts, host_events, report, send, send_delta};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

const KEY: &str = "3b:8f:0c:1d:2e:4a:5b:6c:7d:8e:9f:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33:44";
const OTHER: &str = "00:8f:0c:1d:2e:4a:5b:6c:7d:8e:9f:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33:44";

/// An escrow blob wrapping `fingerprint`, naming `host` when given.
fn blob(fingerprint: &str, host: Option<Uuid>) -> Value {
    let mut blob: Value =
        serde_json::from_str(include_str!("../../docs/proto/escrow.json")).unwrap();
    blob["key_fingerprint"] = json!(fingerprint);
    if let Some(host) = host {
        blob["host_id"] = json!(host);
    }
    blob
}

async fn put_escrow(hub: &TestHub, host: Uuid, key: &str, blob: &Value) -> reqwest::Response {
    hub.request(
        Method::PUT,
        &format!("/v1/hosts/{host}/escrow"),
        Some(key),
        Some(blob.to_string().into_bytes()),
    )
    .await
}

fn pbs_tier() -> TierReport {
    TierReport {
        tier: 1,
        target: "backup@pbs@pbs.example.net:store1".into(),
        storage_id: "bosun-pbs-1a2b3c4d".into(),
        schedule: "daily".into(),
        extra_schedule: None,
        desired: Retention::default(),
        applied: Retention::default(),
        held: None,
    }
}

fn local_tier() -> TierReport {
    TierReport {
        tier: 0,
        target: "local".into(),
        storage_id: "local".into(),
        ..pbs_tier()
    }
}

/// A report numbered `seq` with the host's key and `tiers`.
fn keyed(seq: u64, tiers: Vec<TierReport>) -> StateReport {
    StateReport {
        seq,
        pbs_key_fingerprint: Some(KEY.to_owned()),
        tiers,
        ..report()
    }
}

/// The host's escrow state from the list and from the detail (they must agree).
async fn escrow_state(hub: &TestHub, host: Uuid) -> Value {
    let list: Vec<Value> = hub
        .admin(Method::GET, "/v1/admin/hosts", None)
        .await
        .json()
        .await
        .unwrap();
    let row = list
        .into_iter()
        .find(|h| h["host_id"] == host.to_string())
        .unwrap();
    let detail: Value = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(row["escrow"], detail["escrow"]);
    detail["escrow"].clone()
}

async fn alert_kinds(hub: &TestHub, host: Uuid) -> Vec<String> {
    host_alerts(hub, host)
        .await
        .into_iter()
        .map(|(kind, _)| kind)
        .filter(|k| k.starts_with("escrow"))
        .collect()
}

async fn escrow_events(hub: &TestHub, host: Uuid) -> Vec<String> {
    host_events(hub, host)
        .await
        .into_iter()
        .map(|(kind, _)| kind)
        .filter(|k| k.starts_with("escrow_missing") || k == "escrow_verified")
        .collect()
}

#[tokio::test]
async fn a_blob_naming_another_host_is_refused() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-a").await;
    let (other, _) = hub.enroll("pve-b").await;

    let (status, code) =
        error_code(put_escrow(&hub, host, &key, &blob(KEY, Some(other))).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "escrow_host_mismatch")
    );
    let stored = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}/escrow"), None)
        .await;
    assert_eq!(stored.status(), StatusCode::NOT_FOUND, "nothing was stored");

    // Its own id, or none at all, is taken, and kept byte for byte.
    for named in [Some(host), None] {
        let sent = blob(KEY, named);
        let resp = put_escrow(&hub, host, &key, &sent).await;
        assert_eq!(resp.status(), StatusCode::NO_CONTENT);
        let stored = hub
            .admin(Method::GET, &format!("/v1/admin/hosts/{host}/escrow"), None)
            .await;
        assert_eq!(stored.text().await.unwrap(), sent.to_string());
    }
    // Not a blob at all, or the wrong key: refused as before.
    let (status, code) =
        error_code(put_escrow(&hub, host, &key, &json!({ "schema": "x" })).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "malformed_json")
    );
    let (status, _) =
        error_code(put_escrow(&hub, other, &key, &blob(KEY, Some(other))).await).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn host_views_tell_verified_from_stored_from_none() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-escrow").await;
    send(&hub, host, &key, &full(&keyed(10, Vec::new()))).await;
    assert_eq!(escrow_state(&hub, host).await, json!({ "state": "none" }));

    // A blob of another key: stored, not verified.
    put_escrow(&hub, host, &key, &blob(OTHER, Some(host))).await;
    let stored = escrow_state(&hub, host).await;
    assert_eq!(stored["state"], "stored", "{stored}");
    assert_eq!(stored["key_fingerprint"], OTHER);
    assert!(stored["updated_at"].is_string(), "{stored}");

    // The host's own key: verified.
    put_escrow(&hub, host, &key, &blob(KEY, Some(host))).await;
    let verified = escrow_state(&hub, host).await;
    assert_eq!(verified["state"], "verified", "{verified}");
    assert_eq!(verified["key_fingerprint"], KEY);

    // The host reports another key (K rotated): the blob no longer verifies it.
    let rotated = StateReport {
        pbs_key_fingerprint: Some(OTHER.to_owned()),
        ..keyed(11, Vec::new())
    };
    send(&hub, host, &key, &full(&rotated)).await;
    assert_eq!(escrow_state(&hub, host).await["state"], "stored");
    // A report without a key fingerprint cannot verify anything either.
    let unkeyed = StateReport {
        pbs_key_fingerprint: None,
        ..keyed(12, Vec::new())
    };
    send(&hub, host, &key, &full(&unkeyed)).await;
    assert_eq!(escrow_state(&hub, host).await["state"], "stored");
}

#[tokio::test]
async fn escrow_missing_opens_once_and_a_put_resolves_it_at_once() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-pbs").await;
    let first = keyed(20, vec![local_tier(), pbs_tier()]);
    send(&hub, host, &key, &full(&first)).await;
    let alerts = host_alerts(&hub, host).await;
    assert_eq!(alert_kinds(&hub, host).await, ["escrow_missing"]);
    common::names(
        &alerts.last().unwrap().1,
        &[
            "pve-pbs",
            "tier 1",
            "backup@pbs@pbs.example.net:store1",
            "no escrow",
        ],
    );

    // Again whole, again as a delta with a change, and on the sweep: still one.
    send(
        &hub,
        host,
        &key,
        &full(&keyed(21, vec![local_tier(), pbs_tier()])),
    )
    .await;
    let mut next = keyed(22, vec![local_tier(), pbs_tier()]);
    next.host.as_mut().unwrap().cpu_usage = 0.5;
    send_delta(
        &hub,
        host,
        &key,
        &keyed(21, vec![local_tier(), pbs_tier()]),
        &next,
    )
    .await;
    hub.hub.sweep_backups_once().await.unwrap();
    assert_eq!(alert_kinds(&hub, host).await, ["escrow_missing"]);

    // A blob of another key does not resolve it.
    put_escrow(&hub, host, &key, &blob(OTHER, None)).await;
    assert_eq!(alert_kinds(&hub, host).await, ["escrow_missing"]);

    // The matching blob does, without another report.
    let resp = put_escrow(&hub, host, &key, &blob(KEY, Some(host))).await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        alert_kinds(&hub, host).await,
        ["escrow_missing", "escrow_verified"]
    );
    assert_eq!(
        escrow_events(&hub, host).await,
        ["escrow_missing", "escrow_verified"]
    );
    // Verified: later reports and sweeps raise nothing.
    send(
        &hub,
        host,
        &key,
        &full(&keyed(23, vec![local_tier(), pbs_tier()])),
    )
    .await;
    hub.hub.sweep_backups_once().await.unwrap();
    assert_eq!(alert_kinds(&hub, host).await.len(), 2);
}

#[tokio::test]
async fn escrow_missing_follows_deltas_and_clears_when_pbs_goes() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-delta").await;
    let local = keyed(30, vec![local_tier()]);
    send(&hub, host, &key, &full(&local)).await;
    assert!(alert_kinds(&hub, host).await.is_empty(), "no PBS, no alert");

    // A delta adds the PBS tier.
    let with_pbs = keyed(31, vec![local_tier(), pbs_tier()]);
    send_delta(&hub, host, &key, &local, &with_pbs).await;
    assert_eq!(alert_kinds(&hub, host).await, ["escrow_missing"]);
    // A delta drops it: cleared, an event but no alert.
    let without = keyed(32, vec![local_tier()]);
    send_delta(&hub, host, &key, &with_pbs, &without).await;
    assert_eq!(alert_kinds(&hub, host).await, ["escrow_missing"]);
    assert_eq!(
        escrow_events(&hub, host).await,
        ["escrow_missing", "escrow_missing_cleared"]
    );
}

#[tokio::test]
async fn a_host_without_pbs_is_never_alerted() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-local").await;
    send(&hub, host, &key, &full(&keyed(40, vec![local_tier()]))).await;
    send(&hub, host, &key, &full(&report())).await;
    hub.clock.advance(Duration::from_secs(7 * 86_400));
    hub.hub.sweep_backups_once().await.unwrap();
    assert!(alert_kinds(&hub, host).await.is_empty());
    assert_eq!(escrow_state(&hub, host).await, json!({ "state": "none" }));
}

#[tokio::test]
async fn escrow_alerts_reach_the_webhook() {
    let (hook, url) = Hook::start().await;
    let hub = TestHub::start_with(|config| {
        config.webhook = Some(bosun_hubd::alerts::WebhookConfig::new(url));
    })
    .await;
    let (host, key) = hub.enroll("pve-hooked").await;
    send(&hub, host, &key, &full(&keyed(50, vec![pbs_tier()]))).await;
    put_escrow(&hub, host, &key, &blob(KEY, Some(host))).await;
    let bodies = hook.received(2).await;
    let kinds: Vec<&str> = bodies.iter().map(|b| b["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["escrow_missing", "escrow_verified"], "{bodies:?}");
    assert!(bodies.iter().all(|b| b["host_id"] == host.to_string()));
}

#[tokio::test]
async fn a_blob_for_a_key_the_report_does_not_show_yet_asks_for_a_full_report() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-new-key").await;
    // K is made after the host's full report: the stored report shows no fingerprint.
    let before = StateReport {
        pbs_key_fingerprint: None,
        ..keyed(60, vec![pbs_tier()])
    };
    send(&hub, host, &key, &full(&before)).await;
    assert_eq!(alert_kinds(&hub, host).await, ["escrow_missing"]);
    put_escrow(&hub, host, &key, &blob(KEY, Some(host))).await;
    assert_eq!(escrow_state(&hub, host).await["state"], "stored");

    // The next delta is taken, and answered with a request for a full report.
    let mut next = before.clone();
    next.seq = 61;
    next.host.as_mut().unwrap().cpu_usage = 0.7;
    let delta = bosun_proto::delta::ReportDelta::between(&before, 60, &next, 61);
    let (status, answer) = common::poll_with(
        &hub,
        host,
        &key,
        &json!({ "schema": "bosun.poll/v1", "delta": delta }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["report_seq"], 61, "{answer}");
    assert_eq!(answer["full_report"], true, "{answer}");
    // The full report shows K: verified, and deltas are plain again.
    let after = keyed(62, vec![pbs_tier()]);
    send(&hub, host, &key, &full(&after)).await;
    assert_eq!(escrow_state(&hub, host).await["state"], "verified");
    assert_eq!(
        alert_kinds(&hub, host).await,
        ["escrow_missing", "escrow_verified"]
    );
    let mut later = after.clone();
    later.seq = 63;
    later.host.as_mut().unwrap().cpu_usage = 0.2;
    send_delta(&hub, host, &key, &after, &later).await;
}
