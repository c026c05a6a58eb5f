//! Host loss: a restore-mode enrollment token hands a revoked host's identity to a new box.
//! The token is refused for an unknown or a non-revoked host; enrolling with it keeps the
//! host id, mints a new key (the old one gets 401), serves the new box the desired state,
//! queued jobs and escrow blob, starts its reports, audit numbering and dead-man's switch
//! afresh, records the replacement, and marks sealed credentials to be resealed until a
//! desired state is put after the new box named its recipient.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::time::Duration;

use bosun_proto::report::{AuditEntry, StateReport};
use common::{TestHub, desired, error_code, full, host_events, poll_with, report, signed_job};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

const KEY: &str = "3b:8f:0c:1d:2e:4a:5b:6c:7d:8e:9f:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33:44";
const OLD_RECIPIENT: &str = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p";
const NEW_RECIPIENT: &str = "age1zvkyg2lqzraa2lnjvqej32nkuu0ues2s82hzrye869xeexvn73equnujwj";
const SEALED: &str = "-----BEGIN AGE ENCRYPTED FILE-----\nYWdlLWVuY3J5cHRpb24ub3JnL3YxCg==\n-----END AGE ENCRYPTED FILE-----\n";

async fn restore_token(hub: &TestHub, host: Uuid, require_approval: bool) -> reqwest::Response {
    hub.admin(
        Method::POST,
        "/v1/admin/enrollment-tokens",
        Some(json!({ "ttl_seconds": 600, "require_approval": require_approval, "restore_host": host })),
    )
    .await
}

async fn created_restore_token(hub: &TestHub, host: Uuid) -> String {
    let resp = restore_token(hub, host, false).await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["restore_host"], host.to_string());
    body["token"].as_str().unwrap().to_owned()
}

async fn revoke(hub: &TestHub, host: Uuid) {
    let resp = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/revoke"),
            None,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
}

async fn detail(hub: &TestHub, host: Uuid) -> Value {
    let resp = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    resp.json().await.unwrap()
}

async fn put_desired(hub: &TestHub, host: Uuid, document: &Value) -> u64 {
    let resp = hub
        .admin(
            Method::PUT,
            &format!("/v1/admin/hosts/{host}/desired"),
            Some(document.clone()),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    resp.json::<Value>().await.unwrap()["generation"]
        .as_u64()
        .unwrap()
}

/// The example desired state with the PBS target's password sealed (to the old box).
fn sealed_desired() -> Value {
    let mut document = desired();
    let pbs = document["storage"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|t| t["type"] == "pbs")
        .unwrap();
    pbs["credentials"] = json!(SEALED);
    document
}

fn box_report(seq: u64, recipient: &str, audit: Vec<AuditEntry>) -> StateReport {
    StateReport {
        seq,
        storage_recipient: Some(recipient.to_owned()),
        pbs_key_fingerprint: Some(KEY.to_owned()),
        audit,
        ..report()
    }
}

fn audit(seq: u64) -> AuditEntry {
    AuditEntry {
        seq,
        at: "2026-11-20T00:00:00Z".parse().unwrap(),
        action: "agent.started".into(),
        detail: json!({}),
    }
}

fn poll(known_generation: u64, report: &StateReport) -> Value {
    json!({
        "schema": "bosun.poll/v1",
        "known_generation": known_generation,
        "applied_generation": known_generation,
        "report": report,
    })
}

async fn escrow_get(hub: &TestHub, host: Uuid, key: &str) -> reqwest::Response {
    hub.request(
        Method::GET,
        &format!("/v1/hosts/{host}/escrow"),
        Some(key),
        None,
    )
    .await
}

#[tokio::test]
async fn a_restore_token_needs_a_known_revoked_host() {
    let hub = TestHub::start().await;
    let (status, code) = error_code(restore_token(&hub, Uuid::new_v4(), false).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::NOT_FOUND, "unknown_host")
    );

    let (active, _) = hub.enroll("pve-active").await;
    let (status, code) = error_code(restore_token(&hub, active, false).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::CONFLICT, "host_not_revoked")
    );

    let pending_token = hub.enroll_token(600, true).await;
    let resp = hub.try_enroll(&pending_token, "pve-pending").await;
    let pending: Uuid = resp.json::<Value>().await.unwrap()["host_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let (status, code) = error_code(restore_token(&hub, pending, false).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::CONFLICT, "host_not_revoked")
    );

    // Not a host id at all, or the nil id: refused before the store.
    let resp = hub
        .admin(
            Method::POST,
            "/v1/admin/enrollment-tokens",
            Some(json!({ "ttl_seconds": 600, "restore_host": "pve-active" })),
        )
        .await;
    assert_eq!(error_code(resp).await.1, "malformed_json");
    let resp = hub
        .admin(
            Method::POST,
            "/v1/admin/enrollment-tokens",
            Some(json!({ "ttl_seconds": 600, "restore_host": Uuid::nil() })),
        )
        .await;
    assert_eq!(error_code(resp).await.1, "invalid_field");

    revoke(&hub, active).await;
    assert_eq!(
        restore_token(&hub, active, false).await.status(),
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn a_new_box_takes_over_a_revoked_host() {
    let hub = TestHub::start().await;
    let (host, old_key) = hub.enroll("pve-old").await;
    let generation = put_desired(&hub, host, &sealed_desired()).await;
    // The old box reports (with audit entries up to 3), escrows K, and a job waits for it.
    let (status, _) = poll_with(
        &hub,
        host,
        &old_key,
        &poll(
            generation,
            &box_report(500, OLD_RECIPIENT, vec![audit(1), audit(2), audit(3)]),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let mut escrow: Value =
        serde_json::from_str(include_str!("../../docs/proto/escrow.json")).unwrap();
    escrow["key_fingerprint"] = json!(KEY);
    escrow["host_id"] = json!(host);
    let resp = hub
        .request(
            Method::PUT,
            &format!("/v1/hosts/{host}/escrow"),
            Some(&old_key),
            Some(escrow.to_string().into_bytes()),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    let job = Uuid::new_v4();
    let resp = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/jobs"),
            Some(signed_job(host, job)),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let before = detail(&hub, host).await;
    assert_eq!(before["escrow"]["state"], "verified");
    assert_eq!(before["replaced_at"], Value::Null);
    assert_eq!(before["reseal_required_since"], Value::Null);

    // The box dies; the operator revokes it and hands its identity to a new box.
    hub.clock.advance(Duration::from_secs(3600));
    revoke(&hub, host).await;
    let token = created_restore_token(&hub, host).await;
    let resp = hub.try_enroll(&token, "pve-new").await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let enrolled: Value = resp.json().await.unwrap();
    assert_eq!(enrolled["host_id"], host.to_string(), "the same host id");
    assert_eq!(enrolled["status"], "active");
    let new_key = enrolled["host_key"].as_str().unwrap().to_owned();
    assert_ne!(new_key, old_key);
    assert_eq!(enrolled["replaces"]["hostname"], "pve-old");
    assert_eq!(enrolled["replaces"]["enrolled_at"], before["enrolled_at"]);
    // Single use.
    let (status, code) = error_code(hub.try_enroll(&token, "pve-third").await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::UNAUTHORIZED, "enrollment_token_used")
    );

    // The old key is dead everywhere; the new one works.
    let (status, _) = poll_with(&hub, host, &old_key, &poll(0, &report())).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        escrow_get(&hub, host, &old_key).await.status(),
        StatusCode::UNAUTHORIZED
    );
    let after = detail(&hub, host).await;
    assert_eq!(after["hostname"], "pve-new");
    assert_eq!(after["status"], "active");
    assert_eq!(
        after["liveness"], "never",
        "the dead-man's switch starts afresh"
    );
    assert_eq!(after["last_report"], Value::Null);
    assert_eq!(after["enrolled_at"], before["enrolled_at"]);
    assert!(after["replaced_at"].is_string(), "{after}");
    assert_eq!(after["reseal_required_since"], after["replaced_at"]);
    assert_eq!(after["desired_generation"], generation);
    assert_eq!(after["known_generation"], 0);

    // The escrow blob is the new box's to fetch, exactly as the old box stored it.
    let resp = escrow_get(&hub, host, &new_key).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.text().await.unwrap(), escrow.to_string());

    // Its first full report is taken though numbered below the old box's, its audit log
    // starts at 1 again, and it gets the desired state and the queued job.
    let (status, answer) = poll_with(
        &hub,
        host,
        &new_key,
        &poll(0, &box_report(7, NEW_RECIPIENT, vec![audit(1)])),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["report_seq"], 7);
    assert_eq!(answer["full_report"], false);
    assert_eq!(answer["audit_acked_seq"], 1);
    assert_eq!(answer["generation"], generation);
    assert_eq!(answer["desired"]["storage"][1]["credentials"], SEALED);
    assert_eq!(answer["jobs"].as_array().unwrap().len(), 1);
    let after = detail(&hub, host).await;
    assert_eq!(after["liveness"], "ok");
    assert_eq!(after["last_report"]["storage_recipient"], NEW_RECIPIENT);
    assert_eq!(
        after["escrow"]["state"], "verified",
        "the recovered K matches"
    );

    // The operator reseals to the new box and puts the desired state: the mark goes.
    let resealed = put_desired(&hub, host, &sealed_desired()).await;
    assert_eq!(resealed, generation + 1);
    assert_eq!(
        detail(&hub, host).await["reseal_required_since"],
        Value::Null
    );

    let events = host_events(&hub, host).await;
    let (_, replaced) = events.iter().find(|(kind, _)| kind == "replaced").unwrap();
    assert_eq!(replaced["old_hostname"], "pve-old");
    assert_eq!(replaced["new_hostname"], "pve-new");
    assert_eq!(replaced["queued_jobs"], 1);
    assert_eq!(replaced["archived_audit_entries"], 3);
    assert!(
        events.iter().any(
            |(kind, detail)| kind == "resealed" && detail["storage_recipient"] == NEW_RECIPIENT
        )
    );

    // The host is active again: no second restore token for it.
    let (status, code) = error_code(restore_token(&hub, host, false).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::CONFLICT, "host_not_revoked")
    );
}

#[tokio::test]
async fn a_desired_state_before_the_new_box_reports_keeps_the_reseal_mark() {
    let hub = TestHub::start().await;
    let (host, _) = hub.enroll("pve-old").await;
    put_desired(&hub, host, &sealed_desired()).await;
    revoke(&hub, host).await;
    let token = created_restore_token(&hub, host).await;
    let enrolled: Value = hub
        .try_enroll(&token, "pve-new")
        .await
        .json()
        .await
        .unwrap();
    let new_key = enrolled["host_key"].as_str().unwrap().to_owned();
    // Put before the new box named its recipient: nothing can have been sealed to it.
    put_desired(&hub, host, &sealed_desired()).await;
    assert!(detail(&hub, host).await["reseal_required_since"].is_string());
    // A report without a recipient does not count either.
    common::send(&hub, host, &new_key, &full(&report())).await;
    put_desired(&hub, host, &sealed_desired()).await;
    assert!(detail(&hub, host).await["reseal_required_since"].is_string());
    common::send(
        &hub,
        host,
        &new_key,
        &full(&box_report(2, NEW_RECIPIENT, Vec::new())),
    )
    .await;
    put_desired(&hub, host, &sealed_desired()).await;
    assert_eq!(
        detail(&hub, host).await["reseal_required_since"],
        Value::Null
    );
}

#[tokio::test]
async fn a_host_without_sealed_credentials_needs_no_reseal() {
    let hub = TestHub::start().await;
    let (host, _) = hub.enroll("pve-old").await;
    put_desired(&hub, host, &desired()).await;
    revoke(&hub, host).await;
    let token = created_restore_token(&hub, host).await;
    assert_eq!(
        hub.try_enroll(&token, "pve-new").await.status(),
        StatusCode::CREATED
    );
    let after = detail(&hub, host).await;
    assert!(after["replaced_at"].is_string());
    assert_eq!(after["reseal_required_since"], Value::Null);
}

#[tokio::test]
async fn a_refused_replacement_leaves_its_token_unused() {
    let hub = TestHub::start().await;
    let (host, _) = hub.enroll("pve-old").await;
    revoke(&hub, host).await;
    let first = created_restore_token(&hub, host).await;
    let second = created_restore_token(&hub, host).await;
    assert_eq!(
        hub.try_enroll(&first, "pve-new").await.status(),
        StatusCode::CREATED
    );
    // The host is active again: the second token is refused and stays unused.
    let (status, code) = error_code(hub.try_enroll(&second, "pve-newer").await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::CONFLICT, "host_not_revoked")
    );
    revoke(&hub, host).await;
    let resp = hub.try_enroll(&second, "pve-newer").await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let enrolled: Value = resp.json().await.unwrap();
    assert_eq!(enrolled["host_id"], host.to_string());
    assert_eq!(enrolled["replaces"]["hostname"], "pve-new");
    let replaced: Vec<Value> = host_events(&hub, host)
        .await
        .into_iter()
        .filter(|(kind, _)| kind == "replaced")
        .map(|(_, detail)| detail)
        .collect();
    assert_eq!(replaced.len(), 2);
    assert_eq!(replaced[1]["old_hostname"], "pve-new");
    assert_eq!(replaced[1]["new_hostname"], "pve-newer");
}

#[tokio::test]
async fn an_overdue_host_is_replaced_without_a_recovery_and_may_need_approval() {
    let hub = TestHub::start().await;
    let (host, old_key) = hub.enroll("pve-old").await;
    common::send(&hub, host, &old_key, &full(&report())).await;
    // Silent past its grace window: overdue (the sweep holds it once before alerting).
    hub.clock.advance(Duration::from_secs(3600));
    hub.hub.sweep_once().await.unwrap();
    hub.clock.advance(Duration::from_secs(60));
    hub.hub.sweep_once().await.unwrap();
    assert_eq!(detail(&hub, host).await["liveness"], "overdue");
    revoke(&hub, host).await;
    let resp = restore_token(&hub, host, true).await;
    let token = resp.json::<Value>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let enrolled: Value = hub
        .try_enroll(&token, "pve-new")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(enrolled["status"], "pending_approval");
    let new_key = enrolled["host_key"].as_str().unwrap().to_owned();
    let (status, code) = error_code(escrow_get(&hub, host, &new_key).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::FORBIDDEN, "host_pending_approval")
    );
    let resp = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/approve"),
            None,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    // No blob was ever stored for this host.
    let (status, code) = error_code(escrow_get(&hub, host, &new_key).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::NOT_FOUND, "no_escrow")
    );

    common::send(&hub, host, &new_key, &full(&report())).await;
    assert_eq!(detail(&hub, host).await["liveness"], "ok");
    let recovered = host_events(&hub, host)
        .await
        .into_iter()
        .filter(|(kind, _)| kind == "recovered")
        .count();
    assert_eq!(
        recovered, 0,
        "the new box does not recover the old box's silence"
    );
}
