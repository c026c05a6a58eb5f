//! Hub replicas over one PostgreSQL database: a write on one wakes the polls another holds
//! (LISTEN/NOTIFY), a one-time enrollment token is used once whichever replicas race for it, a
//! job's result is recorded once, one replica at a time runs the dead-man's switch, and operator
//! tokens are shared: a revocation holds on every replica at once, and racing replicas never
//! revoke the last admin token.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::time::{Duration, Instant};

use common::{PgDatabase, TestHub, desired, error_code, signed_job};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

/// Sends a poll that the hub holds up to `wait` seconds: (seconds it took, answer).
fn held_poll(
    hub: &TestHub,
    host: Uuid,
    key: &str,
    known_generation: u64,
    wait: u32,
) -> tokio::task::JoinHandle<(Duration, Value)> {
    let client = hub.client.clone();
    let url = format!("{}/v1/hosts/{host}/poll?wait={wait}", hub.url);
    let body = common::poll_body(known_generation, &[]).to_string();
    let key = key.to_owned();
    tokio::spawn(async move {
        let started = Instant::now();
        let resp = client
            .post(url)
            .bearer_auth(key)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        (started.elapsed(), resp.json::<Value>().await.unwrap())
    })
}

#[tokio::test]
async fn a_write_on_one_replica_wakes_the_poll_another_holds() {
    let db = PgDatabase::create();
    let a = TestHub::start_on(db.location()).await;
    let b = a.start_replica().await;
    let (host, key) = a.enroll("pve-replicas").await;
    // The host's key is checked by either replica.
    assert_eq!(b.poll_json(host, &key, 0).await["generation"], 0);

    // Held on B; the desired state is written through A.
    let held = held_poll(&b, host, &key, 0, 20);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !held.is_finished(),
        "B holds the poll while nothing changes"
    );
    let put = format!("/v1/admin/hosts/{host}/desired");
    assert_eq!(
        a.admin(Method::PUT, &put, Some(desired())).await.status(),
        StatusCode::OK
    );
    let (took, answer) = held.await.unwrap();
    assert_eq!(answer["generation"], 1, "{answer}");
    assert!(
        took < Duration::from_secs(5),
        "woken by A's write, not by the 20 s timeout: {took:?}"
    );

    // A job queued through B wakes the poll A holds.
    let held = held_poll(&a, host, &key, 1, 20);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!held.is_finished());
    let job = Uuid::new_v4();
    let resp = b
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/jobs"),
            Some(signed_job(host, job)),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let (took, answer) = held.await.unwrap();
    assert_eq!(answer["jobs"].as_array().unwrap().len(), 1, "{answer}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[tokio::test]
async fn a_one_time_token_enrolls_once_whichever_replicas_race_for_it() {
    let db = PgDatabase::create();
    let a = TestHub::start_on(db.location()).await;
    let b = a.start_replica().await;
    let c = b.start_replica().await;
    for round in 0..8 {
        let token = a.enroll_token(600, false).await;
        let names = [
            format!("a{round}"),
            format!("b{round}"),
            format!("c{round}"),
        ];
        let (ra, rb, rc) = tokio::join!(
            a.try_enroll(&token, &names[0]),
            b.try_enroll(&token, &names[1]),
            c.try_enroll(&token, &names[2]),
        );
        let mut created = 0;
        for resp in [ra, rb, rc] {
            if resp.status() == StatusCode::CREATED {
                created += 1;
            } else {
                assert_eq!(
                    error_code(resp).await.1,
                    "enrollment_token_used",
                    "the losers are told the token was used"
                );
            }
        }
        assert_eq!(created, 1, "round {round}: exactly one enrollment");
    }
    let hosts: Vec<Value> = a
        .admin(Method::GET, "/v1/admin/hosts", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(hosts.len(), 8);
}

#[tokio::test]
async fn a_job_result_is_recorded_once_when_replicas_race() {
    let db = PgDatabase::create();
    let a = TestHub::start_on(db.location()).await;
    let b = a.start_replica().await;
    let (host, key) = a.enroll("pve-results").await;
    for round in 0..6 {
        let job = Uuid::new_v4();
        let resp = a
            .admin(
                Method::POST,
                &format!("/v1/admin/hosts/{host}/jobs"),
                Some(signed_job(host, job)),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::CREATED);
        let path = format!("/v1/hosts/{host}/jobs/{job}/result");
        let result = |outcome: &str| {
            Some(
                json!({
                    "schema": "bosun.job-result/v1", "job_id": job, "outcome": outcome,
                    "finished_at": "2026-11-21T00:00:00Z", "detail": outcome,
                })
                .to_string()
                .into_bytes(),
            )
        };
        // Two different results at once: one wins, the other is refused.
        let (ra, rb) = tokio::join!(
            a.request(Method::POST, &path, Some(&key), result("succeeded")),
            b.request(Method::POST, &path, Some(&key), result("failed")),
        );
        let statuses = [ra.status(), rb.status()];
        assert!(
            statuses.contains(&StatusCode::NO_CONTENT) && statuses.contains(&StatusCode::CONFLICT),
            "round {round}: {statuses:?}"
        );
        // The same result twice at once (a retry through the other replica): both fine.
        let winner = if ra.status() == StatusCode::NO_CONTENT {
            "succeeded"
        } else {
            "failed"
        };
        let (ra, rb) = tokio::join!(
            a.request(Method::POST, &path, Some(&key), result(winner)),
            b.request(Method::POST, &path, Some(&key), result(winner)),
        );
        assert_eq!([ra.status(), rb.status()], [StatusCode::NO_CONTENT; 2]);
    }
    let finished = common::host_events(&a, host)
        .await
        .into_iter()
        .filter(|(kind, _)| kind == "job_finished")
        .count();
    assert_eq!(finished, 6, "one job_finished event per job");
}

#[tokio::test]
async fn one_replica_sweeps_and_another_takes_over_when_it_dies() {
    let db = PgDatabase::create();
    let a = TestHub::start_on(db.location()).await;
    let b = a.start_replica().await;
    let (host, key) = a.enroll("pve-sweep").await;
    a.poll_json(host, &key, 0).await;
    // A sweeps first: it takes the lock and sees the host overdue (a lone host alerts at
    // once).
    let later = Duration::from_secs(3600);
    a.clock.advance(later);
    b.clock.advance(later);
    let raised = a.hub.sweep_once().await.unwrap();
    assert_eq!(raised.len(), 1, "{raised:?}");
    // B is not the sweeper while A lives: its sweep does nothing, even with the host
    // recovered and silent again.
    a.poll_json(host, &key, 0).await;
    a.clock.advance(later);
    b.clock.advance(later);
    assert!(b.hub.sweep_once().await.unwrap().is_empty());
    let overdue = |hub: &TestHub| {
        let client = hub.client.clone();
        let url = format!("{}/v1/admin/hosts/{host}", hub.url);
        let admin = hub.admin.clone();
        async move {
            let detail: Value = client
                .get(url)
                .bearer_auth(admin)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            detail["liveness"].as_str().unwrap().to_owned()
        }
    };
    assert_eq!(overdue(&b).await, "ok", "B swept nothing");
    // A goes away (its sessions end): B's next sweep takes the lock and does A's work.
    drop(a.stop().await);
    let deadline = Instant::now() + Duration::from_secs(10);
    let raised = loop {
        let raised = b.hub.sweep_once().await.unwrap();
        if !raised.is_empty() || Instant::now() > deadline {
            break raised;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(raised.len(), 1, "{raised:?}");
    assert_eq!(overdue(&b).await, "overdue");
}

/// Operator tokens live in the shared database: one made through A works on B, and once
/// revoked through B it is refused by A at once (no replica caches it). Two replicas revoking
/// the last two admin tokens at once leave one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_tokens_are_shared_and_a_revocation_holds_on_every_replica() {
    let db = PgDatabase::create();
    let a = TestHub::start_on(db.location()).await;
    let b = a.start_replica().await;
    let resp = a
        .admin(
            Method::POST,
            "/v1/admin/tokens",
            Some(json!({ "name": "shared", "role": "viewer" })),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let token = resp.json::<Value>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    for hub in [&a, &b] {
        let resp = hub
            .request(Method::GET, "/v1/admin/hosts", Some(&token), None)
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let resp = b
        .admin(Method::POST, "/v1/admin/tokens/shared/revoke", None)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let resp = a
        .request(Method::GET, "/v1/admin/hosts", Some(&token), None)
        .await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::UNAUTHORIZED, "unauthorized".to_owned())
    );

    // Two admin tokens, each revoking the other through another replica at the same moment:
    // one revocation wins, the other is refused (409, or 401 once its own token is gone), and
    // an admin token is left.
    let resp = a
        .admin(
            Method::POST,
            "/v1/admin/tokens",
            Some(json!({ "name": "second", "role": "admin" })),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let second = resp.json::<Value>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let (first, other) = tokio::join!(
        a.request(
            Method::POST,
            "/v1/admin/tokens/admin/revoke",
            Some(&second),
            None
        ),
        b.request(
            Method::POST,
            "/v1/admin/tokens/second/revoke",
            Some(&a.admin),
            None
        ),
    );
    let statuses = [first.status(), other.status()];
    assert_eq!(
        statuses.iter().filter(|s| **s == StatusCode::OK).count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| [
            StatusCode::OK,
            StatusCode::CONFLICT,
            StatusCode::UNAUTHORIZED
        ]
        .contains(s)),
        "{statuses:?}"
    );
    let survivor = if statuses[0] == StatusCode::OK {
        &second
    } else {
        &a.admin
    };
    let resp = b
        .request(Method::GET, "/v1/admin/tokens", Some(survivor), None)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let listed: Vec<Value> = resp.json().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["role"], "admin");
}
