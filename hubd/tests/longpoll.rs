//! Long-poll: answer at once when stale or a job is pending, otherwise hold and wake fast.

use crate::common;

use std::time::{Duration, Instant};

use common::{TestHub, desired, error_code, signed_job};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use uuid::Uuid;

#[tokio::test]
async fn a_held_poll_wakes_within_100ms_of_a_desired_change() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-wait").await;
    let put = format!("/v1/admin/hosts/{host}/desired");
    assert_eq!(
        hub.admin(Method::PUT, &put, Some(desired())).await.status(),
        StatusCode::OK
    );
    let first = hub.poll_json(host, &key, 0).await;
    assert_eq!(first["generation"], 1);
    assert!(
        first["desired"].is_object(),
        "a stale agent gets the document"
    );

    // Up to date: the hub holds the poll.
    let started = Instant::now();
    let held = {
        let client = hub.client.clone();
        let url = format!("{}/v1/hosts/{host}/poll?wait=30", hub.url);
        let body = common::poll_body(1, &[]).to_string();
        let key = key.clone();
        tokio::spawn(async move {
            let resp = client
                .post(url)
                .bearer_auth(key)
                .body(body)
                .send()
                .await
                .unwrap();
            (
                Instant::now(),
                resp.status(),
                resp.json::<Value>().await.unwrap(),
            )
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !held.is_finished(),
        "the poll is held while nothing changes"
    );
    let mut changed = desired();
    changed["dr_policy"] = "manual".into();
    assert_eq!(
        hub.admin(Method::PUT, &put, Some(changed)).await.status(),
        StatusCode::OK
    );
    let changed_at = Instant::now();
    let (answered_at, status, body) = held.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["generation"], 2);
    assert_eq!(body["desired"]["dr_policy"], "manual");
    let lag = answered_at.saturating_duration_since(changed_at);
    assert!(
        lag < Duration::from_millis(100),
        "woke {lag:?} after the change"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_queued_job_wakes_a_held_poll_and_an_idle_poll_times_out() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-job").await;

    let started = Instant::now();
    let resp = hub.poll(host, &key, 0, &[], 1).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(950),
        "held for the whole wait, got {waited:?}"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["generation"], 0);
    assert!(body["desired"].is_null());

    let held = {
        let client = hub.client.clone();
        let url = format!("{}/v1/hosts/{host}/poll?wait=20", hub.url);
        let body = common::poll_body(0, &[]).to_string();
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(key)
                .body(body)
                .send()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let job = Uuid::new_v4();
    let resp = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/jobs"),
            Some(signed_job(host, job)),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let submitted = Instant::now();
    let resp = held.await.unwrap();
    assert!(
        submitted.elapsed() < Duration::from_millis(100),
        "woke after {:?}",
        submitted.elapsed()
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["jobs"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn pending_jobs_and_stale_generations_answer_at_once() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-now").await;
    hub.admin(
        Method::POST,
        &format!("/v1/admin/hosts/{host}/jobs"),
        Some(signed_job(host, Uuid::new_v4())),
    )
    .await;
    let started = Instant::now();
    let resp = hub.poll(host, &key, 0, &[], 30).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(started.elapsed() < Duration::from_secs(2));

    // The agent claims a generation the hub never issued: stale, answer at once.
    let started = Instant::now();
    let resp = hub.poll(host, &key, 7, &[], 30).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn wait_is_capped_at_60_seconds() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-cap").await;
    let resp = hub.poll(host, &key, 0, &[], 61).await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::BAD_REQUEST, "wait_too_long".into())
    );
    let resp = hub
        .request(
            Method::POST,
            &format!("/v1/hosts/{host}/poll?wait=soon"),
            Some(&key),
            Some(b"{}".to_vec()),
        )
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::BAD_REQUEST, "bad_query".into())
    );
}

#[tokio::test]
async fn shutdown_releases_held_polls() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-stop").await;
    let held = {
        let client = hub.client.clone();
        let url = format!("{}/v1/hosts/{host}/poll?wait=60", hub.url);
        let body = common::poll_body(0, &[]).to_string();
        tokio::spawn(async move { client.post(url).bearer_auth(key).body(body).send().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    hub.stop().await;
    let resp = held.await.unwrap().unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn revoking_a_host_ends_its_held_poll_with_401() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-revoked").await;
    let held = {
        let client = hub.client.clone();
        let url = format!("{}/v1/hosts/{host}/poll?wait=30", hub.url);
        let body = common::poll_body(0, &[]).to_string();
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(key)
                .body(body)
                .send()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let revoke = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/revoke"),
            None,
        )
        .await;
    assert_eq!(revoke.status(), StatusCode::NO_CONTENT);
    let revoked_at = Instant::now();
    let resp = held.await.unwrap();
    assert!(revoked_at.elapsed() < Duration::from_millis(500));
    assert_eq!(
        error_code(resp).await,
        (StatusCode::UNAUTHORIZED, "unauthorized".into())
    );
}
