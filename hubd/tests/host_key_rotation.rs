//! A host's key rotates over the authenticated channel (decision 0044), on either store: the
//! hub asks, the agent sends only the new key's hash with the old key, both keys are accepted
//! until the new one is presented, and then the old one is refused everywhere. Every message of
//! the exchange can be repeated (a lost answer) without locking the host out; an operator's
//! request drops a next key staged before it; a key past its lifetime is refused.

use crate::common;

use std::time::Duration;

use common::{TestHub, error_code, host_events, poll_body, poll_with};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

const DAY: Duration = Duration::from_secs(86_400);

fn hash(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A poll presenting `key`, sending `next`'s hash when given.
async fn poll(hub: &TestHub, host: Uuid, key: &str, next: Option<&str>) -> (StatusCode, Value) {
    let mut body = poll_body(0, &[]);
    if let Some(next) = next {
        body["next_host_key_sha256"] = json!(hash(next));
    }
    poll_with(hub, host, key, &body).await
}

/// The escrow endpoint, which authenticates hosts the other way (status checked there).
async fn escrow_status(hub: &TestHub, host: Uuid, key: &str) -> StatusCode {
    hub.request(
        Method::GET,
        &format!("/v1/hosts/{host}/escrow"),
        Some(key),
        None,
    )
    .await
    .status()
}

async fn rotate_key(hub: &TestHub, host: Uuid) -> StatusCode {
    hub.admin(
        Method::POST,
        &format!("/v1/admin/hosts/{host}/rotate-key"),
        None,
    )
    .await
    .status()
}

fn kinds(events: &[(String, Value)]) -> Vec<&str> {
    events
        .iter()
        .map(|(kind, _)| kind.as_str())
        .filter(|kind| kind.starts_with("host.key"))
        .collect()
}

#[tokio::test]
async fn an_operator_rotates_a_host_key_and_every_step_can_be_repeated() {
    let hub = TestHub::start().await;
    let (host, old) = hub.enroll("pve1").await;
    let (status, answer) = poll(&hub, host, &old, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        answer.get("rotate_host_key").is_none(),
        "a new key: {answer}"
    );

    assert_eq!(rotate_key(&hub, host).await, StatusCode::ACCEPTED);
    // Asked, and asked again while the agent has not answered (its answer was lost).
    for _ in 0..2 {
        let (status, answer) = poll(&hub, host, &old, None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(answer["rotate_host_key"], json!(true), "{answer}");
        assert!(answer.get("next_host_key_sha256").is_none());
    }

    // The next key's hash, sent with the old key; sent twice (the first answer was lost).
    let new = "bsh_the-next-key-the-agent-made";
    for _ in 0..2 {
        let (status, answer) = poll(&hub, host, &old, Some(new)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["next_host_key_sha256"], json!(hash(new)));
        assert!(answer.get("rotate_host_key").is_none());
    }
    // Both keys work until the new one is presented: the old one here, on both endpoints.
    assert_eq!(poll(&hub, host, &old, None).await.0, StatusCode::OK);
    assert_eq!(escrow_status(&hub, host, &old).await, StatusCode::NOT_FOUND);

    // The new key presented (on the escrow endpoint first): it is the key now, the old one
    // refused everywhere, and the new one again after a lost answer.
    assert_eq!(escrow_status(&hub, host, new).await, StatusCode::NOT_FOUND);
    for _ in 0..2 {
        let (status, answer) = poll(&hub, host, new, None).await;
        assert_eq!(status, StatusCode::OK);
        assert!(answer.get("rotate_host_key").is_none(), "{answer}");
        assert!(answer.get("next_host_key_sha256").is_none(), "{answer}");
    }
    let (status, code) = error_code(hub.poll(host, &old, 0, &[], 0).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    assert_eq!(
        escrow_status(&hub, host, &old).await,
        StatusCode::UNAUTHORIZED
    );

    let events = host_events(&hub, host).await;
    assert_eq!(
        kinds(&events),
        [
            "host.key_rotation_requested",
            "host.key_staged",
            "host.key_rotated"
        ]
    );
    let requested = &events
        .iter()
        .find(|(kind, _)| kind == "host.key_rotation_requested")
        .unwrap()
        .1;
    assert_eq!(
        requested["by"],
        json!("admin"),
        "audited with the token's name"
    );
}

#[tokio::test]
async fn an_operators_request_drops_a_staged_key_and_the_agent_sends_another() {
    let hub = TestHub::start().await;
    let (host, old) = hub.enroll("pve1").await;
    // A key staged by whoever holds the old key (a leak)...
    let leaked = "bsh_staged-by-the-thief";
    assert_eq!(poll(&hub, host, &old, Some(leaked)).await.0, StatusCode::OK);
    // ...is dropped by the operator's request: it never becomes the host's key.
    assert_eq!(rotate_key(&hub, host).await, StatusCode::ACCEPTED);
    assert_eq!(
        poll(&hub, host, leaked, None).await.0,
        StatusCode::UNAUTHORIZED
    );
    let (status, answer) = poll(&hub, host, &old, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["rotate_host_key"], json!(true));
    let new = "bsh_the-agents-own-next-key";
    assert_eq!(poll(&hub, host, &old, Some(new)).await.0, StatusCode::OK);
    assert_eq!(poll(&hub, host, new, None).await.0, StatusCode::OK);
    assert_eq!(
        poll(&hub, host, &old, None).await.0,
        StatusCode::UNAUTHORIZED
    );

    // A revoked host's key is not rotated; an unknown host is not found.
    hub.admin(
        Method::POST,
        &format!("/v1/admin/hosts/{host}/revoke"),
        None,
    )
    .await;
    assert_eq!(rotate_key(&hub, host).await, StatusCode::CONFLICT);
    assert_eq!(
        rotate_key(&hub, Uuid::new_v4()).await,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn a_key_is_rotated_when_old_and_refused_past_its_lifetime() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve1").await;
    let (quiet, quiet_key) = hub.enroll("pve-quiet").await;

    hub.clock.advance(29 * DAY);
    let (_, answer) = poll(&hub, host, &key, None).await;
    assert!(answer.get("rotate_host_key").is_none(), "not yet: {answer}");
    hub.clock.advance(DAY);
    let (_, answer) = poll(&hub, host, &key, None).await;
    assert_eq!(
        answer["rotate_host_key"],
        json!(true),
        "30 days old: {answer}"
    );
    let new = "bsh_rotated-on-time";
    poll(&hub, host, &key, Some(new)).await;
    assert_eq!(poll(&hub, host, new, None).await.0, StatusCode::OK);

    // A year on, the host that rotated polls on; the one that never did is refused.
    hub.clock.advance(336 * DAY);
    let (status, answer) = poll(&hub, host, new, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["rotate_host_key"], json!(true));
    assert_eq!(
        poll(&hub, quiet, &quiet_key, None).await.0,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn a_malformed_next_key_hash_is_refused_and_changes_nothing() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve1").await;
    for bad in [
        json!("not-hex"),
        json!("A".repeat(64)),
        json!(7),
        json!("ab".repeat(33)),
    ] {
        let mut body = poll_body(0, &[]);
        body["next_host_key_sha256"] = bad.clone();
        let (status, answer) = poll_with(&hub, host, &key, &body).await;
        assert!(
            status == StatusCode::UNPROCESSABLE_ENTITY || status == StatusCode::BAD_REQUEST,
            "{bad}: {status} {answer}"
        );
    }
    // The current key as its own successor is no rotation at all.
    let (status, answer) = poll(&hub, host, &key, Some(&key)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(answer.get("next_host_key_sha256").is_none(), "{answer}");
    assert!(kinds(&host_events(&hub, host).await).is_empty());
}
