//! Enrollment: one-time tokens, expiry, approval, revocation, and secrets at rest.

use crate::common;

use std::time::Duration;

use common::{TestHub, error_code};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

#[tokio::test]
async fn a_token_enrolls_exactly_one_host() {
    let hub = TestHub::start().await;
    let token = hub.enroll_token(600, false).await;
    let first = hub.try_enroll(&token, "pve-a").await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let body: Value = first.json().await.unwrap();
    assert_eq!(body["schema"], "bosun.enrolled/v1");
    assert_eq!(body["status"], "active");
    assert!(body["host_key"].as_str().unwrap().starts_with("bsh_"));

    let again = hub.try_enroll(&token, "pve-b").await;
    assert_eq!(
        error_code(again).await,
        (StatusCode::UNAUTHORIZED, "enrollment_token_used".into())
    );
    let hosts: Vec<Value> = hub
        .admin(Method::GET, "/v1/admin/hosts", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(hosts.len(), 1, "the refused enrollment created nothing");
}

#[tokio::test]
async fn tokens_expire_on_the_hub_clock() {
    let hub = TestHub::start().await;
    let token = hub.enroll_token(60, false).await;
    hub.clock.advance(Duration::from_secs(61));
    let resp = hub.try_enroll(&token, "pve-late").await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::UNAUTHORIZED, "enrollment_token_expired".into())
    );
    let fresh = hub.enroll_token(60, false).await;
    hub.clock.advance(Duration::from_secs(59));
    assert_eq!(
        hub.try_enroll(&fresh, "pve-in-time").await.status(),
        StatusCode::CREATED
    );
}

/// The tokens the hub keeps are listed by id and state, never the token itself; an unused
/// one can be revoked (no box enrolls with it, and revoking again changes nothing); a used
/// one cannot (revoke its host), and the list says which host it enrolled.
#[tokio::test]
async fn tokens_are_listed_without_the_secret_and_an_unused_one_can_be_revoked() {
    let hub = TestHub::start().await;
    let create =
        |note: &str| json!({ "ttl_seconds": 600, "require_approval": false, "note": note });
    let mut made = Vec::new();
    for note in ["box-a", "box-b"] {
        let resp = hub
            .admin(
                Method::POST,
                "/v1/admin/enrollment-tokens",
                Some(create(note)),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::CREATED);
        let body: Value = resp.json().await.unwrap();
        let id = body["token_id"].as_str().unwrap().to_owned();
        assert_eq!(id.len(), 16, "{body}");
        made.push((body["token"].as_str().unwrap().to_owned(), id));
    }
    let list = || async {
        let resp = hub
            .admin(Method::GET, "/v1/admin/enrollment-tokens", None)
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
        resp.text().await.unwrap()
    };
    let text = list().await;
    for (token, id) in &made {
        assert!(
            !text.contains(token.as_str()),
            "a token is never listed: {text}"
        );
        assert!(text.contains(id.as_str()), "{text}");
    }
    let listed: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert!(listed.iter().all(|t| t["state"] == "unused"), "{listed:?}");

    let revoke = |id: &str| format!("/v1/admin/enrollment-tokens/{id}/revoke");
    let (revoked_token, revoked_id) = &made[0];
    let (used_token, used_id) = &made[1];
    assert_eq!(
        hub.admin(Method::POST, &revoke(revoked_id), None)
            .await
            .status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        hub.admin(Method::POST, &revoke(revoked_id), None)
            .await
            .status(),
        StatusCode::NO_CONTENT,
        "revoking again changes nothing"
    );
    assert_eq!(
        error_code(hub.try_enroll(revoked_token, "pve-revoked").await).await,
        (StatusCode::UNAUTHORIZED, "enrollment_token_revoked".into())
    );
    let enrolled = hub.try_enroll(used_token, "pve-b").await;
    assert_eq!(enrolled.status(), StatusCode::CREATED);
    let host = enrolled.json::<Value>().await.unwrap()["host_id"].clone();
    assert_eq!(
        error_code(hub.admin(Method::POST, &revoke(used_id), None).await).await,
        (StatusCode::CONFLICT, "enrollment_token_used".into())
    );
    for unknown in ["0000000000000000", "not-an-id", "../../hosts"] {
        let resp = hub.admin(Method::POST, &revoke(unknown), None).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{unknown}");
    }
    let listed: Vec<Value> = serde_json::from_str(&list().await).unwrap();
    let state = |id: &str| {
        listed
            .iter()
            .find(|t| t["token_id"] == id)
            .map(|t| (t["state"].clone(), t["used_by"].clone()))
            .unwrap()
    };
    assert_eq!(state(revoked_id), (json!("revoked"), Value::Null));
    assert_eq!(state(used_id), (json!("used"), host));
}

#[tokio::test]
async fn unknown_tokens_and_short_ttls_are_refused() {
    let hub = TestHub::start().await;
    let resp = hub.try_enroll("bse_made_up", "pve").await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::UNAUTHORIZED, "enrollment_token_invalid".into())
    );
    let resp = hub
        .admin(
            Method::POST,
            "/v1/admin/enrollment-tokens",
            Some(serde_json::json!({ "ttl_seconds": 1 })),
        )
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field".into())
    );
}

#[tokio::test]
async fn approval_gates_polling_and_revocation_locks_out() {
    let hub = TestHub::start().await;
    let token = hub.enroll_token(600, true).await;
    let resp = hub.try_enroll(&token, "pve-pending").await;
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["status"], "pending_approval");
    let host: uuid::Uuid = body["host_id"].as_str().unwrap().parse().unwrap();
    let key = body["host_key"].as_str().unwrap().to_owned();

    let resp = hub.poll(host, &key, 0, &[], 0).await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::FORBIDDEN, "host_pending_approval".into())
    );

    let approve = format!("/v1/admin/hosts/{host}/approve");
    assert_eq!(
        hub.admin(Method::POST, &approve, None).await.status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        hub.poll(host, &key, 0, &[], 0).await.status(),
        StatusCode::OK
    );
    // Approving twice is a conflict, not a silent success.
    assert_eq!(
        error_code(hub.admin(Method::POST, &approve, None).await)
            .await
            .0,
        StatusCode::CONFLICT
    );

    let revoke = format!("/v1/admin/hosts/{host}/revoke");
    assert_eq!(
        hub.admin(Method::POST, &revoke, None).await.status(),
        StatusCode::NO_CONTENT
    );
    let resp = hub.poll(host, &key, 0, &[], 0).await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::UNAUTHORIZED, "unauthorized".into())
    );
    // Revoking again succeeds and changes nothing: one `revoked` event.
    assert_eq!(
        hub.admin(Method::POST, &revoke, None).await.status(),
        StatusCode::NO_CONTENT
    );

    let events: Vec<Value> = hub
        .admin(Method::GET, "/v1/admin/events", None)
        .await
        .json()
        .await
        .unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    for kind in ["enrolled", "approved", "revoked"] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    assert_eq!(
        kinds.iter().filter(|k| **k == "revoked").count(),
        1,
        "{kinds:?}"
    );
}

#[tokio::test]
async fn no_secret_is_stored_in_plaintext() {
    let hub = TestHub::start().await;
    let spare_token = hub.enroll_token(600, false).await;
    let used_token = hub.enroll_token(600, false).await;
    let resp = hub.try_enroll(&used_token, "pve-secret").await;
    let body: Value = resp.json().await.unwrap();
    let host_key = body["host_key"].as_str().unwrap().to_owned();
    let host: uuid::Uuid = body["host_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        hub.poll(host, &host_key, 0, &[], 0).await.status(),
        StatusCode::OK
    );
    let admin = hub.admin.clone();
    let (dir, _) = hub.stop().await;
    // The poll writer thread closes the database shortly after the hub is dropped; SQLite
    // then folds the WAL into the main file. Scan once that has happened.
    let wal = dir.path().join("hub.sqlite-wal");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while wal.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut scanned = 0;
    for (path, bytes) in common::store_contents(&dir) {
        scanned += bytes.len();
        for secret in [&admin, &spare_token, &used_token, &host_key] {
            // The random part alone must not appear either (no prefix-stripped copies).
            for needle in [secret.as_str(), &secret[4..]] {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                    "{path} contains a plaintext secret"
                );
            }
        }
    }
    assert!(
        scanned > 4096,
        "the database files were found and scanned ({scanned} bytes)"
    );
}
