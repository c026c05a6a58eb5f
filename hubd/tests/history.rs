//! A host's history through a real hub: polls of one five-minute bucket make one point (the
//! figures a delta leaves out count as the last ones seen), a bucket that is over is written
//! to the store by the flush task (a fleet's in chunks, every one of them), a backup counts
//! once, the window is bounded and checked, and what the hub held unwritten is on disk after it
//! stops. Runs on PostgreSQL too under `scripts/with-postgres`.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::time::Duration;

use bosun_proto::report::{BackupReport, StateReport};
use common::{TestHub, error_code, full, send, send_delta, store_integers};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use uuid::Uuid;

async fn history(hub: &TestHub, host: &str, query: &str) -> Value {
    let resp = hub
        .admin(
            Method::GET,
            &format!("/v1/admin/hosts/{host}/history{query}"),
            None,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    resp.json().await.unwrap()
}

fn with_cpu(base: &StateReport, seq: u64, cpu: f64) -> StateReport {
    let mut next = base.clone();
    next.seq = seq;
    next.host.as_mut().unwrap().cpu_usage = cpu;
    next
}

fn close(value: &Value, expected: f64) {
    let got = value
        .as_f64()
        .unwrap_or_else(|| panic!("{value} is no number"));
    assert!((got - expected).abs() < 1e-6, "{got} is not {expected}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_make_five_minute_points_that_reach_the_store_and_survive_a_restart() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-history").await;
    // Start at a bucket's beginning, so the polls below share one.
    let now_ms = hub.hub.clock().now_ms();
    hub.clock.advance(Duration::from_millis(
        u64::try_from(300_000 - now_ms % 300_000).unwrap() + 1_000,
    ));

    let first = common::report();
    send(&hub, host, &key, &full(&first)).await;
    let second = with_cpu(&first, 2, 0.5);
    send_delta(&hub, host, &key, &first, &second).await;
    // A delta with nothing of the host's figures: the last ones count again.
    let mut third = second.clone();
    third.seq = 3;
    third.last_backups.push(BackupReport {
        guest_id: Uuid::new_v4(),
        target: "pbs-main".into(),
        finished_at: hub.hub.clock().now(),
        ok: true,
        size_bytes: Some(3 << 30),
        tier: None,
        archive: None,
        duration_seconds: Some(95),
        warnings: 0,
        encrypted: true,
        error: None,
        last_ok_at: None,
    });
    send_delta(&hub, host, &key, &second, &third).await;
    // The same backup in a full report is not counted again.
    send(&hub, host, &key, &full(&third)).await;

    let answer = history(&hub, &host.to_string(), "").await;
    assert_eq!(answer["bucket_seconds"], 300);
    let points = answer["points"].as_array().unwrap();
    assert_eq!(points.len(), 1, "{answer}");
    let p = &points[0];
    assert_eq!(p["polls"], 4);
    close(&p["cpu"], (0.1 + 0.5 + 0.5 + 0.5) / 4.0);
    close(&p["cpu_max"], 0.5);
    close(&p["memory"], 2_048.0 / 16_384.0);
    close(&p["disk"], 0.1);
    assert_eq!(p["pool_max"], Value::Null);
    assert_eq!(
        (p["backups"].as_u64(), p["backup_bytes"].as_u64()),
        (Some(1), Some(3 << 30))
    );
    assert_eq!(p["backup_seconds"], 95);
    assert!(p["poll_ms"].as_f64().unwrap() > 0.0);
    assert!(p["poll_ms_max"].as_f64().unwrap() >= p["poll_ms"].as_f64().unwrap());
    // Nothing is written while the bucket runs.
    let sql = "SELECT COUNT(*) FROM host_history WHERE host_id = ?1";
    assert_eq!(store_integers(&hub.dir, sql, host.to_string()).await, [0]);

    // The next bucket: the flush task writes the one that is over.
    hub.clock.advance(Duration::from_secs(300));
    let fourth = with_cpu(&third, 4, 0.9);
    send_delta(&hub, host, &key, &third, &fourth).await;
    let mut written = Vec::new();
    for _ in 0..100 {
        written = store_integers(&hub.dir, sql, host.to_string()).await;
        if written == [1] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(written, [1], "the finished bucket is written within 10 s");
    let answer = history(&hub, &host.to_string()[..8], "?hours=1").await;
    let points = answer["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{answer}");
    assert_eq!(points[0]["polls"], 1, "newest first");
    close(&points[0]["cpu"], 0.9);
    assert_eq!(points[1]["polls"], 4);

    // Bounds: hours 1 to 336, a number; an unknown host is 404.
    for bad in ["?hours=0", "?hours=337", "?hours=day", "?hours=-1"] {
        let resp = hub
            .admin(
                Method::GET,
                &format!("/v1/admin/hosts/{host}/history{bad}"),
                None,
            )
            .await;
        assert_eq!(
            error_code(resp).await,
            (StatusCode::BAD_REQUEST, "bad_query".into()),
            "{bad}"
        );
    }
    let resp = hub
        .admin(
            Method::GET,
            &format!("/v1/admin/hosts/{}/history", Uuid::new_v4()),
            None,
        )
        .await;
    assert_eq!(error_code(resp).await.0, StatusCode::NOT_FOUND);

    // Stopping writes the open bucket; a restarted hub reads both points from the store.
    let at = hub.hub.clock().now();
    let (dir, admin) = hub.stop().await;
    let config = common::config(&dir);
    let hub = TestHub::start_in(dir, admin, config).await;
    hub.clock.advance(Duration::from_millis(
        u64::try_from(at.as_millisecond() - hub.hub.clock().now_ms()).unwrap_or(0) + 1_000,
    ));
    assert_eq!(store_integers(&hub.dir, sql, host.to_string()).await, [2]);
    let again = history(&hub, &host.to_string(), "?hours=1").await;
    assert_eq!(again["points"], answer["points"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleets_buckets_reach_the_store_in_chunks_every_one_of_them() {
    let hub = TestHub::start().await;
    let hosts = bosun_hubd::flush_task::HISTORY_CHUNK + 1;
    let now_ms = hub.hub.clock().now_ms();
    for n in 0..hosts {
        let (host, _) = hub.enroll(&format!("pve-{n:03}")).await;
        hub.hub
            .history()
            .observe(host, bosun_hubd::history::Sample::default(), now_ms, 900);
    }

    let written = bosun_hubd::flush_task::write_history(&hub.hub, true).await;
    assert_eq!(
        (written.buckets, written.chunks, written.kept),
        (hosts, 2, 0),
        "{written:?}"
    );
    let sql = "SELECT COUNT(*) FROM host_history WHERE host_id <> ?1";
    let rows = store_integers(&hub.dir, sql, String::new()).await;
    assert_eq!(rows, [i64::try_from(hosts).unwrap()], "one row a host");
    // Taken once: a second write has nothing to add.
    let again = bosun_hubd::flush_task::write_history(&hub.hub, true).await;
    assert_eq!(again.buckets, 0, "{again:?}");
}
