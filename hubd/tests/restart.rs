//! State survives a restart: hosts, keys, desired state, queued jobs, alerts, certificate.

use crate::common;

use common::{TestHub, desired, signed_job};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use uuid::Uuid;

#[tokio::test]
async fn everything_persists_across_a_restart() {
    let hub = TestHub::start().await;
    let fingerprint = hub.hub.fingerprint().to_owned();
    let (host, key) = hub.enroll("pve-persist").await;
    let spare = hub.enroll_token(600, false).await;
    hub.admin(
        Method::PUT,
        &format!("/v1/admin/hosts/{host}/desired"),
        Some(desired()),
    )
    .await;
    let job = Uuid::new_v4();
    hub.admin(
        Method::POST,
        &format!("/v1/admin/hosts/{host}/jobs"),
        Some(signed_job(host, job)),
    )
    .await;
    hub.poll_json(host, &key, 0).await;
    let (dir, admin) = hub.stop().await;

    let config = common::config(&dir);
    let hub = TestHub::start_in(dir, admin, config).await;
    assert_eq!(
        hub.hub.fingerprint(),
        fingerprint,
        "the self-signed certificate is persisted"
    );
    let poll = hub.poll_json(host, &key, 0).await;
    assert_eq!(poll["generation"], 1);
    assert!(poll["desired"].is_object());
    assert_eq!(
        poll["jobs"].as_array().unwrap().len(),
        1,
        "unacked job still queued"
    );
    assert_eq!(
        hub.try_enroll(&spare, "pve-second").await.status(),
        StatusCode::CREATED
    );
    let hosts: Vec<Value> = hub
        .admin(Method::GET, "/v1/admin/hosts", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(hosts.len(), 2);
    let events: Vec<Value> = hub
        .admin(Method::GET, "/v1/admin/events", None)
        .await
        .json()
        .await
        .unwrap();
    assert!(events.iter().any(|e| e["kind"] == "job_queued"));

    // A second init on the same directory refuses instead of minting a new admin token.
    let err = common::init(&hub.dir, vec![], false).unwrap_err();
    assert!(
        format!("{:?}", err).contains("AlreadyInitialized"),
        "{err:?}"
    );
}
