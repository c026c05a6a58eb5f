//! The in-memory bucketing: one bucket per host and five minutes, figures kept across deltas
//! that leave them out, backups counted once, buckets taken once they are over.
#![allow(clippy::unwrap_used, clippy::float_cmp)]

use bosun_proto::poll::PollRequest;
use uuid::Uuid;

use super::{BUCKET_MS, History, Sample, bucket_of, merged};

/// A bucket's start.
const T0: i64 = 1_790_000_100_000 - 1_790_000_100_000 % BUCKET_MS;

fn request(body: serde_json::Value) -> PollRequest {
    serde_json::from_value(body).unwrap()
}

fn full(cpu: f64, backups: serde_json::Value) -> Sample {
    Sample::of(&request(serde_json::json!({
        "schema": "bosun.poll/v1", "known_generation": 0, "applied_generation": 0,
        "report": {
            "schema": "bosun.report/v1", "seq": 1, "versions": { "agent": "0.1.0" },
            "host": { "cpu_count": 4, "cpu_usage": cpu, "memory_total_mib": 1000,
                      "memory_used_mib": 250, "disk_total_gib": 100, "disk_used_gib": 50 },
            "last_backups": backups
        }
    })))
}

fn delta(host: Option<f64>) -> Sample {
    let mut d = serde_json::json!({ "schema": "bosun.report-delta/v1", "seq": 2, "base_seq": 1 });
    if let Some(cpu) = host {
        d["host"] = serde_json::json!({ "cpu_count": 4, "cpu_usage": cpu,
            "memory_total_mib": 1000, "memory_used_mib": 500,
            "disk_total_gib": 100, "disk_used_gib": 50 });
    }
    Sample::of(&request(serde_json::json!({
        "schema": "bosun.poll/v1", "known_generation": 0, "applied_generation": 0, "delta": d
    })))
}

fn backup(guest: Uuid, finished_ms: i64, size: u64) -> serde_json::Value {
    serde_json::json!({
        "guest_id": guest, "target": "pbs-main",
        "finished_at": jiff::Timestamp::from_millisecond(finished_ms).unwrap().to_string(),
        "ok": true, "size_bytes": size, "duration_seconds": 60
    })
}

#[test]
fn polls_of_one_bucket_make_one_point_and_deltas_keep_the_last_figures() {
    let history = History::new(T0);
    let host = Uuid::new_v4();
    history.observe(host, full(0.2, serde_json::json!([])), T0 + 1_000, 2_000);
    history.observe(host, delta(None), T0 + 31_000, 4_000);
    history.observe(host, delta(Some(0.8)), T0 + 61_000, 1_000);
    // Nothing is taken while the bucket runs; it is held unwritten.
    assert!(history.take(T0 + 100_000, false).is_empty());
    let open = history.unwritten(host);
    assert_eq!(open.len(), 1);
    let b = open[0];
    assert_eq!((b.bucket_ms, b.polls, b.samples), (T0, 3, 3));
    // The delta without figures counts the last ones (0.2) again.
    assert!((b.cpu_sum - 1.2).abs() < 1e-9, "{b:?}");
    assert_eq!(b.cpu_max, 0.8);
    assert!((b.memory_sum - (0.25 + 0.25 + 0.5)).abs() < 1e-9);
    assert_eq!((b.poll_us_sum, b.poll_us_max), (7_000, 4_000));
    let point = b.point().unwrap();
    assert!((point.cpu.unwrap() - 0.4).abs() < 1e-9);
    assert!((point.poll_ms - 7.0 / 3.0).abs() < 1e-9);
    assert_eq!(point.pool_max, None);

    // The next bucket's first poll closes it; the flush takes it once.
    history.observe(host, delta(None), T0 + BUCKET_MS + 1_000, 1_000);
    let taken = history.take(T0 + BUCKET_MS + 2_000, false);
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].bucket_ms, T0);
    assert!(history.take(T0 + BUCKET_MS + 3_000, false).is_empty());
    // A silent host's bucket is taken once the next one starts.
    let taken = history.take(T0 + 2 * BUCKET_MS, false);
    assert_eq!(taken.len(), 1);
    assert_eq!((taken[0].bucket_ms, taken[0].polls), (T0 + BUCKET_MS, 1));
    assert!(history.unwritten(host).is_empty());
}

#[test]
fn a_backup_counts_once_and_none_finished_before_the_hub_started() {
    let history = History::new(T0);
    let host = Uuid::new_v4();
    let (old, new) = (Uuid::new_v4(), Uuid::new_v4());
    let list = serde_json::json!([backup(old, T0 - 60_000, 5), backup(new, T0 + 10_000, 1_000)]);
    history.observe(host, full(0.1, list.clone()), T0 + 20_000, 1);
    // The same report again (a full report the hub asked for) counts nothing more.
    history.observe(host, full(0.1, list), T0 + 40_000, 1);
    let b = history.unwritten(host)[0];
    assert_eq!(
        (b.backups, b.backup_bytes, b.backup_seconds),
        (1, 1_000, 60)
    );
    // The guest's next backup counts.
    let next = serde_json::json!([backup(new, T0 + 50_000, 3_000)]);
    history.observe(host, full(0.1, next), T0 + 60_000, 1);
    let b = history.unwritten(host)[0];
    assert_eq!((b.backups, b.backup_bytes), (2, 4_000));
}

#[test]
fn a_host_naming_new_backups_every_poll_holds_a_bounded_memory() {
    let history = History::new(T0);
    let host = Uuid::new_v4();
    let many = super::MAX_COUNTED + 500;
    for i in 0..many {
        let at = T0 + 1_000 + i64::try_from(i).unwrap();
        let list = serde_json::json!([backup(Uuid::new_v4(), at, 1)]);
        history.observe(host, full(0.1, list), at, 1);
    }
    let state = history.state.lock();
    let counted = &state.hosts[&host].counted;
    assert_eq!(counted.len(), super::MAX_COUNTED);
    // The pairs forgotten are the ones counted longest ago.
    let oldest_kept = counted.values().min().copied().unwrap();
    assert_eq!(oldest_kept, T0 + 1_000 + 500);
    // Every backup still counted once.
    assert_eq!(
        state.hosts[&host].open.backups,
        u32::try_from(many).unwrap()
    );
}

#[test]
fn stopping_takes_open_buckets_and_later_parts_add_up() {
    let history = History::new(T0);
    let host = Uuid::new_v4();
    history.observe(host, full(0.5, serde_json::json!([])), T0 + 1_000, 10);
    let first = history.take(T0 + 2_000, true);
    assert_eq!(first.len(), 1);
    history.observe(host, delta(None), T0 + 3_000, 30);
    let second = history.unwritten(host);
    let all = merged(first, second, T0, T0 + BUCKET_MS);
    assert_eq!(all.len(), 1);
    assert_eq!(
        (all[0].polls, all[0].poll_us_sum, all[0].poll_us_max),
        (2, 40, 30)
    );
    assert!((all[0].cpu_sum - 1.0).abs() < 1e-9);
    // Outside the window: dropped.
    assert!(merged(Vec::new(), all, T0 + BUCKET_MS, T0 + 2 * BUCKET_MS).is_empty());
    assert_eq!(bucket_of(T0 + BUCKET_MS - 1), T0);
    history.forget(host);
    assert!(history.unwritten(host).is_empty());
}

/// What a poll adds: reading its figures and adding them to its host's bucket, over 10,000
/// hosts. `cargo nextest run -p bosun-hubd --lib --run-ignored only -E 'test(what_a_poll_adds)' --no-capture`
#[test]
#[ignore = "a measurement: prints the time per poll"]
fn what_a_poll_adds() {
    let history = History::new(T0);
    let hosts: Vec<Uuid> = (0..10_000).map(|_| Uuid::new_v4()).collect();
    let request = request(serde_json::json!({
        "schema": "bosun.poll/v1", "known_generation": 0, "applied_generation": 0,
        "delta": { "schema": "bosun.report-delta/v1", "seq": 2, "base_seq": 1,
            "host": { "cpu_count": 4, "cpu_usage": 0.3, "memory_total_mib": 1000,
                      "memory_used_mib": 500, "disk_total_gib": 100, "disk_used_gib": 50 } }
    }));
    let rounds = 100u32;
    let started = std::time::Instant::now();
    for round in 0..rounds {
        for host in &hosts {
            let sample = Sample::of(&request);
            history.observe(*host, sample, T0 + i64::from(round) * 10_000, 1_000);
        }
    }
    let polls = f64::from(rounds) * 10_000.0;
    let per_poll_ns = started.elapsed().as_secs_f64() * 1e9 / polls;
    let taken = history.take(T0 + 3 * BUCKET_MS, false);
    println!(
        "what a poll adds: {per_poll_ns:.0} ns per poll; {} buckets taken",
        taken.len()
    );
    assert!(!taken.is_empty());
}
