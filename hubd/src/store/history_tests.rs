//! A host's history on both stores: parts of one bucket add up, a read is bounded by its
//! window and by [`MAX_POINTS`] and comes newest first, a removed host's buckets are dropped,
//! and the retention prune removes buckets past `history_days`.

use std::time::Duration;

use uuid::Uuid;

use super::super::history::{HistoryBucket, MAX_POINTS};
use super::super::retention::{PruneCursor, RetentionConfig};
use super::super::sqlite::{DB_FILE, SqliteStore};
use super::super::{HostStore as _, Store};
use super::pg::Database;
use super::{NOW, enroll};

const BUCKET: i64 = 300_000;
const DAY: i64 = 86_400_000;
/// A bucket's start, a little before now.
const T0: i64 = NOW - NOW % BUCKET - 10 * BUCKET;

fn bucket(host: Uuid, at: i64, cpu: f64, polls: u32) -> HistoryBucket {
    HistoryBucket {
        polls,
        samples: polls,
        cpu_sum: cpu * f64::from(polls),
        cpu_max: cpu,
        memory_sum: 0.5 * f64::from(polls),
        disk_sum: 0.25 * f64::from(polls),
        pool_samples: 1,
        pool_max: cpu / 2.0,
        backups: 1,
        backup_bytes: 1 << 40,
        backup_seconds: 90,
        poll_us_sum: 1_500 * u64::from(polls),
        poll_us_max: 2_500,
        ..HistoryBucket::new(host, at)
    }
}

#[test]
fn history_buckets_add_up_and_read_within_bounds_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    buckets_add_up(&SqliteStore::open(dir.path()).unwrap());
}

#[test]
fn history_buckets_add_up_and_read_within_bounds_on_postgresql() {
    let db = Database::create();
    buckets_add_up(&db.open());
}

fn buckets_add_up(store: &dyn Store) {
    let (host, _) = enroll(store, None);
    let (other, _) = enroll(store, None);
    // Two parts of one bucket (two replicas, or before and after a restart), and the next.
    let written = store
        .record_history(&[
            bucket(host, T0, 0.2, 3),
            bucket(host, T0 + BUCKET, 0.4, 10),
            bucket(other, T0, 0.9, 1),
        ])
        .unwrap();
    assert_eq!(written, 3);
    assert_eq!(
        store.record_history(&[bucket(host, T0, 0.6, 1)]).unwrap(),
        1
    );
    let read = store.host_history(host, T0, T0 + 2 * BUCKET).unwrap();
    assert_eq!(
        read.iter().map(|b| b.bucket_ms).collect::<Vec<_>>(),
        [T0 + BUCKET, T0],
        "newest first"
    );
    let merged = read[1];
    assert_eq!((merged.polls, merged.samples, merged.backups), (4, 4, 2));
    assert!((merged.cpu_sum - 1.2).abs() < 1e-9, "{merged:?}");
    assert!((merged.cpu_max - 0.6).abs() < 1e-9);
    assert!((merged.pool_max - 0.3).abs() < 1e-9);
    assert_eq!(merged.backup_bytes, 2 << 40);
    assert_eq!((merged.poll_us_sum, merged.poll_us_max), (6_000, 2_500));
    let point = merged.point().unwrap();
    assert!((point.cpu.unwrap() - 0.3).abs() < 1e-9);
    assert!((point.poll_ms - 1.5).abs() < 1e-9);
    assert_eq!(point.at.as_millisecond(), T0);

    // The window is half-open and per host.
    let later = store
        .host_history(host, T0 + BUCKET, T0 + 2 * BUCKET)
        .unwrap();
    assert_eq!(later.len(), 1);
    assert!(store.host_history(host, T0, T0).unwrap().is_empty());
    assert_eq!(store.host_history(other, 0, i64::MAX).unwrap().len(), 1);
    // A host that is not there (removed, or never) gets no rows.
    assert_eq!(
        store
            .record_history(&[bucket(Uuid::new_v4(), T0, 0.1, 1)])
            .unwrap(),
        0
    );

    // A host that reports absurd sizes cannot overflow a row's sums: each part is capped,
    // so parts from restarts and replicas still add up and the row still reads.
    let (third, _) = enroll(store, None);
    let huge = HistoryBucket {
        backup_bytes: u64::MAX,
        backup_seconds: u64::MAX,
        poll_us_sum: u64::MAX,
        ..bucket(third, T0, 0.1, 1)
    };
    for _ in 0..4 {
        assert_eq!(store.record_history(&[huge]).unwrap(), 1);
    }
    let read = store.host_history(third, 0, i64::MAX).unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].backup_bytes, 4 << 53);
    assert_eq!(read[0].polls, 4);

    // A read returns at most MAX_POINTS, the newest.
    let many: Vec<HistoryBucket> = (0..MAX_POINTS + 20)
        .map(|i| bucket(other, T0 - i * BUCKET, 0.1, 1))
        .collect();
    store.record_history(&many).unwrap();
    let read = store.host_history(other, 0, i64::MAX).unwrap();
    assert_eq!(i64::try_from(read.len()).unwrap(), MAX_POINTS);
    assert_eq!(read[0].bucket_ms, T0);
}

#[test]
fn the_prune_removes_history_past_its_days_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let count = |host: Uuid| -> i64 {
        rusqlite::Connection::open(dir.path().join(DB_FILE))
            .unwrap()
            .query_row(
                "SELECT COUNT(*) FROM host_history WHERE host_id = ?1",
                [host.to_string()],
                |r| r.get(0),
            )
            .unwrap()
    };
    prunes_old_history(&store, &count);
}

#[test]
fn the_prune_removes_history_past_its_days_on_postgresql() {
    let db = Database::create();
    let store = db.open();
    prunes_old_history(&store, &|host| {
        store
            .host_history(host, 0, i64::MAX)
            .unwrap()
            .len()
            .try_into()
            .unwrap()
    });
}

fn prunes_old_history(store: &dyn Store, count: &dyn Fn(Uuid) -> i64) {
    let (host, _) = enroll(store, None);
    // One point an hour for 20 days, up to now.
    let points: Vec<HistoryBucket> = (0..20 * 24)
        .map(|h| bucket(host, T0 - h * 12 * BUCKET, 0.5, 1))
        .collect();
    store.record_history(&points).unwrap();
    assert_eq!(count(host), 480);
    let config = RetentionConfig {
        history_days: 14,
        ..RetentionConfig::default()
    };
    let mut from = PruneCursor::default();
    let mut removed = 0;
    loop {
        let step = store
            .prune(NOW, &config, from, Duration::from_secs(5))
            .unwrap();
        removed += step.pruned.history;
        match step.next {
            Some(next) => from = next,
            None => break,
        }
    }
    let kept = store.host_history(host, 0, i64::MAX).unwrap();
    assert_eq!(u64::try_from(480 - kept.len()).unwrap(), removed);
    assert!(kept.iter().all(|b| b.bucket_ms >= NOW - 14 * DAY));
    // Everything younger than the bound stays: the points of the last 14 days.
    let young = points
        .iter()
        .filter(|b| b.bucket_ms >= NOW - 14 * DAY)
        .count();
    assert_eq!(kept.len(), young);
    assert!(young > 300 && young < 480);
    // Removing the host takes its history with it.
    store.revoke_host(host, NOW).unwrap();
    store.remove_host(host, false, NOW).unwrap();
    assert_eq!(count(host), 0);
}

/// The history's size per host and day (288 buckets) and the time to write a bucket, on both
/// stores. `cargo nextest run -p bosun-hubd --lib --run-ignored only -E 'test(history_size)' --no-capture`
#[test]
#[ignore = "a measurement: prints bytes per host and day"]
fn history_size_per_host_and_day() {
    const HOSTS: usize = 100;
    let day: Vec<i64> = (0..288).map(|i| T0 - i * BUCKET).collect();
    let fill = |store: &dyn Store| -> f64 {
        let hosts: Vec<Uuid> = (0..HOSTS).map(|_| enroll(store, None).0).collect();
        let started = std::time::Instant::now();
        for at in &day {
            let buckets: Vec<HistoryBucket> =
                hosts.iter().map(|h| bucket(*h, *at, 0.37, 10)).collect();
            store.record_history(&buckets).unwrap();
        }
        #[allow(clippy::cast_precision_loss)]
        let per = started.elapsed().as_secs_f64() * 1e6 / (HOSTS * day.len()) as f64;
        per
    };
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path()).unwrap();
    let pages = || -> i64 {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        let count: i64 = conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap();
        let size: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        let free: i64 = conn
            .query_row("PRAGMA freelist_count", [], |r| r.get(0))
            .unwrap();
        (count - free) * size
    };
    let before = pages();
    let us = fill(&sqlite);
    let after = pages();
    #[allow(clippy::cast_possible_wrap)]
    let per_host = (after - before) / HOSTS as i64;
    println!(
        "sqlite: {per_host} bytes per host and day (table and key; enrollments included), {us:.1} µs per bucket written"
    );

    let db = Database::create();
    let pg = db.open();
    let us = fill(&pg);
    let url = db.url().to_owned();
    let bytes: i64 = std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        client.batch_execute("VACUUM ANALYZE host_history").unwrap();
        client
            .query_one("SELECT pg_total_relation_size('host_history')", &[])
            .unwrap()
            .get(0)
    })
    .join()
    .unwrap();
    #[allow(clippy::cast_possible_wrap)]
    let per_host = bytes / HOSTS as i64;
    println!(
        "postgresql: {per_host} bytes per host and day (table and key), {us:.1} µs per bucket written"
    );
}
