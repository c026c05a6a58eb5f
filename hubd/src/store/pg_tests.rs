//! The PostgreSQL store against a real server: the schema matches SQLite's, a one-time token
//! is used once when two stores (two replicas) race for it, a write on one store wakes the
//! other's listeners, only one store at a time holds the sweeper lock, a sweep racing a
//! poll leaves the polled host as the poll wrote it, and the monitored-host count the writes
//! keep stays a full count.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bosun_testkit::pg_cluster::{self, PgCluster};
use uuid::Uuid;

use super::super::postgres::PgStore;
use super::super::sqlite::{DB_FILE, SqliteStore};
use super::super::{Enrollment, NewEnrollToken, StoreError};
use super::{NOW, enroll, poll, sample_desired};
use crate::secret::{self, SecretHash, SecretKind};
use crate::store::{AccessStore as _, HostStore as _, JobStore as _, PollStore as _};

/// A database of its own: on `scripts/with-postgres`'s cluster, or a throwaway one.
pub(super) struct Database {
    url: String,
    _cluster: Option<PgCluster>,
}

impl Database {
    pub(super) fn create() -> Self {
        let name = format!("u_{}", Uuid::new_v4().simple());
        match std::env::var_os("BOSUN_TEST_PG_SOCKET") {
            Some(socket) => Self {
                url: pg_cluster::create_database_on(std::path::Path::new(&socket), &name).unwrap(),
                _cluster: None,
            },
            None => {
                let cluster = PgCluster::start().unwrap();
                Self {
                    url: cluster.create_database(&name).unwrap(),
                    _cluster: Some(cluster),
                }
            }
        }
    }

    pub(super) fn url(&self) -> &str {
        &self.url
    }

    pub(super) fn open(&self) -> PgStore {
        PgStore::open(&self.url).unwrap()
    }
}

/// Table → sorted column names.
type Shape = BTreeMap<String, Vec<String>>;

#[test]
fn the_postgresql_schema_has_the_tables_and_columns_of_sqlites() {
    let dir = tempfile::tempdir().unwrap();
    drop(SqliteStore::open(dir.path()).unwrap());
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
    let mut sqlite = Shape::new();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for table in tables {
        let mut columns: Vec<String> = conn
            .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        columns.sort();
        sqlite.insert(table, columns);
    }
    assert_eq!(
        conn.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0))
            .unwrap(),
        i64::try_from(super::super::postgres::schema::MATCHES_SQLITE_VERSION).unwrap(),
        "a new SQLite migration needs its PostgreSQL counterpart (postgres/schema.rs)"
    );

    let db = Database::create();
    drop(db.open());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let postgres = rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let rows = client
            .query(
                "SELECT table_name::TEXT, column_name::TEXT FROM information_schema.columns
                 WHERE table_schema = 'public' AND table_name <> 'bosun_schema'
                 ORDER BY 1, 2",
                &[],
            )
            .await
            .unwrap();
        let mut shape = Shape::new();
        for row in rows {
            shape.entry(row.get(0)).or_default().push(row.get(1));
        }
        for table in super::super::postgres::schema::PG_ONLY_TABLES {
            assert!(shape.remove(*table).is_some(), "{table} is in the schema");
        }
        shape
    });
    assert_eq!(postgres, sqlite);
}

#[test]
fn a_one_time_token_is_used_once_by_racing_replicas() {
    let db = Database::create();
    let stores: Vec<Arc<PgStore>> = (0..3).map(|_| Arc::new(db.open())).collect();
    for round in 0..10 {
        let (token, hash) = secret::mint(SecretKind::Enrollment);
        stores[0]
            .create_enroll_token(NewEnrollToken {
                hash,
                created_ms: NOW,
                expires_ms: NOW + 60_000,
                require_approval: false,
                note: None,
                restore_host: None,
            })
            .unwrap();
        let barrier = Arc::new(std::sync::Barrier::new(stores.len()));
        let racers: Vec<_> = stores
            .iter()
            .map(|store| {
                let store = store.clone();
                let barrier = barrier.clone();
                let token_hash = SecretHash::of(token.expose());
                std::thread::spawn(move || {
                    barrier.wait();
                    store.enroll(Enrollment {
                        token_hash,
                        host_id: Uuid::new_v4(),
                        key_hash: secret::mint(SecretKind::HostKey).1,
                        hostname: format!("race{round}"),
                        agent_version: "0.1.0".into(),
                        pve_version: None,
                        poll_interval_s: 30,
                        now_ms: NOW,
                    })
                })
            })
            .collect();
        let outcomes: Vec<_> = racers.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(
            outcomes.iter().filter(|o| o.is_ok()).count(),
            1,
            "round {round}: {outcomes:?}"
        );
        assert!(
            outcomes
                .iter()
                .all(|o| o.is_ok() || matches!(o, Err(StoreError::TokenUsed))),
            "{outcomes:?}"
        );
    }
    assert_eq!(stores[0].list_hosts().unwrap().len(), 10);
}

#[test]
fn a_write_through_one_store_wakes_the_listeners_of_another() {
    let db = Database::create();
    let writer = db.open();
    let listener = db.open();
    let (host, key) = enroll(&writer, None);
    let (woken, wakeups) = std::sync::mpsc::channel();
    listener.watch_wakeups(Arc::new(move |host| {
        let _ = woken.send(host);
    }));
    // On (re)connecting it wakes every held poll: a notification may have been missed.
    assert_eq!(wakeups.recv_timeout(Duration::from_secs(10)).unwrap(), None);
    writer.put_desired(sample_desired(host, NOW)).unwrap();
    assert_eq!(
        wakeups.recv_timeout(Duration::from_secs(10)).unwrap(),
        Some(host)
    );
    // A poll wakes nobody.
    writer.record_polls(vec![poll(host, key)]).unwrap();
    writer.revoke_host(host, NOW).unwrap();
    assert_eq!(
        wakeups.recv_timeout(Duration::from_secs(10)).unwrap(),
        Some(host),
        "the revocation is the next wake-up"
    );
    assert!(wakeups.try_recv().is_err());
}

#[test]
fn one_store_at_a_time_holds_the_sweeper_lock() {
    let db = Database::create();
    let first = db.open();
    let second = db.open();
    let config = crate::deadman::DeadManConfig::default();
    let (host, key) = enroll(&first, None);
    first.record_polls(vec![poll(host, key)]).unwrap();
    let silent = NOW + 3_600_000;
    assert_eq!(first.sweep(silent, &config).unwrap().len(), 1);
    assert!(first.is_sweeper());
    assert!(second.sweep(silent, &config).unwrap().is_empty());
    assert!(!second.is_sweeper());
    assert!(second.sweep_backups(silent).unwrap().is_empty());
    // The holder lets go (as a dead replica's session ends): the other takes over.
    first.release_sweeper();
    let mut later = poll(host, key);
    later.now_ms = silent;
    second.record_polls(vec![later]).unwrap();
    assert_eq!(second.sweep(silent + 3_600_000, &config).unwrap().len(), 1);
    assert!(second.is_sweeper());
    assert!(first.sweep(silent + 7_200_000, &config).unwrap().is_empty());
    assert!(!first.is_sweeper());
}

#[test]
fn a_poll_that_fails_after_writing_leaves_the_rest_of_its_batch() {
    let db = Database::create();
    let store = db.open();
    let (broken, broken_key) = enroll(&store, None);
    let (fine, fine_key) = enroll(&store, None);
    store.put_desired(sample_desired(broken, NOW)).unwrap();
    // A stored document the hub cannot read: judging the first host's report fails after its
    // host row was written.
    let mut sql = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    sql.execute(
        "UPDATE desired SET document = 'not json' WHERE host_id = $1",
        &[&broken.to_string()],
    )
    .unwrap();
    let mut later = poll(broken, broken_key);
    later.now_ms = NOW + 1_000;
    let mut other = poll(fine, fine_key);
    other.now_ms = NOW + 1_000;
    let outcome = store.record_polls(vec![later, other]).unwrap();
    assert!(
        matches!(outcome[0], Err(StoreError::Corrupt { .. })),
        "{:?}",
        outcome[0]
    );
    assert!(outcome[1].is_ok(), "{:?}", outcome[1]);
    let mut seen = |host: Uuid| -> Option<i64> {
        sql.query_one(
            "SELECT last_seen_ms FROM hosts WHERE host_id = $1",
            &[&host.to_string()],
        )
        .unwrap()
        .get(0)
    };
    assert_eq!(seen(fine), Some(NOW + 1_000), "the good poll is kept");
    assert_eq!(seen(broken), None, "nothing of the failed poll is kept");
}

#[test]
fn a_sweep_racing_a_poll_never_marks_the_just_polled_host_overdue() {
    let db = Database::create();
    let store = db.open();
    let config = crate::deadman::DeadManConfig::default();
    let (racing, racing_key) = enroll(&store, None);
    let (silent_host, silent_key) = enroll(&store, None);
    store
        .record_polls(vec![
            poll(racing, racing_key),
            poll(silent_host, silent_key),
        ])
        .unwrap();
    let silent = NOW + 3_600_000;
    // A poll of the first host is being written (its row locked, not committed yet) when the
    // sweep reads both hosts as silent past their grace.
    let mut poller = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    let mut polling = poller.transaction().unwrap();
    polling
        .execute(
            "UPDATE hosts SET last_seen_ms = $1, overdue_since_ms = NULL, alert_state = 'none'
             WHERE host_id = $2",
            &[&silent, &racing.to_string()],
        )
        .unwrap();
    let mut watcher = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    let alerts = std::thread::scope(|scope| {
        let sweep = scope.spawn(|| store.sweep(silent, &config));
        // The sweep planned from what was committed and now waits for the poll's row.
        let started = std::time::Instant::now();
        loop {
            let waiting: i64 = watcher
                .query_one(
                    "SELECT COUNT(*) FROM pg_stat_activity
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    &[],
                )
                .unwrap()
                .get(0);
            if waiting > 0 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the sweep never waited for the polled host's row"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        polling.commit().unwrap();
        sweep.join().unwrap().unwrap()
    });
    // Only the host that stayed silent is overdue, alerted and logged.
    let alerted: Vec<_> = alerts.iter().filter_map(|a| a.host_id).collect();
    assert_eq!(alerted, [silent_host], "{alerts:?}");
    let mut overdue = |host: Uuid| -> (Option<i64>, String, i64) {
        let row = watcher
            .query_one(
                "SELECT overdue_since_ms, alert_state,
                        (SELECT COUNT(*) FROM events WHERE host_id = $1 AND kind = 'overdue')
                 FROM hosts WHERE host_id = $1",
                &[&host.to_string()],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    assert_eq!(overdue(racing), (None, "none".to_owned(), 0));
    assert_eq!(overdue(silent_host), (Some(silent), "sent".to_owned(), 1));
    // Silent from then on, the host is marked overdue by a later sweep, once.
    let later = silent + 3_600_000;
    let alerts = store.sweep(later, &config).unwrap();
    let alerted: Vec<_> = alerts.iter().filter_map(|a| a.host_id).collect();
    assert_eq!(alerted, [racing], "{alerts:?}");
    assert_eq!(overdue(racing), (Some(later), "sent".to_owned(), 1));
    assert!(store.sweep(later + 1_000, &config).unwrap().is_empty());
}

/// The monitored-host count the writes keep (the sum of the steps), a full count of the same
/// hosts, and how many step rows there are, as committed.
fn monitored(sql: &mut postgres::Client) -> (i64, i64, i64) {
    let row = sql
        .query_one(
            "SELECT (SELECT COALESCE(SUM(n), 0)::BIGINT FROM monitored_hosts),
                    (SELECT COUNT(*) FROM hosts
                     WHERE status = 'active' AND last_seen_ms IS NOT NULL),
                    (SELECT COUNT(*) FROM monitored_hosts)",
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

#[test]
fn the_monitored_host_count_stays_a_full_count_through_every_write_and_fold() {
    let db = Database::create();
    let store = db.open();
    let other = db.open();
    let config = crate::deadman::DeadManConfig::default();
    let mut sql = connect(&db.url);
    let mut expect = |want: i64, step: &str| {
        let (kept, full, _) = monitored(&mut sql);
        assert_eq!((kept, full), (want, want), "after {step}");
    };
    expect(0, "opening an empty hub");
    let polled = |store: &PgStore, host: Uuid, key: SecretHash| {
        store.record_polls(vec![poll(host, key)]).unwrap()[0]
            .as_ref()
            .unwrap();
    };

    // Watched from the first poll on, once each, whichever replica records it.
    let (a, a_key) = enroll(&store, None);
    let (b, b_key) = enroll(&store, None);
    let (c, _) = enroll(&store, None);
    expect(0, "enrolling three hosts");
    polled(&store, a, a_key);
    polled(&other, b, b_key);
    expect(2, "two first polls on two replicas");
    polled(&other, a, a_key);
    polled(&store, b, b_key);
    store
        .record_polls(vec![poll(a, a_key), poll(a, a_key)])
        .unwrap();
    expect(2, "polls of watched hosts, two of one host in one batch");

    // A sweep folds the steps into one row and reads the same count.
    assert!(store.sweep(NOW + 1_000, &config).unwrap().is_empty());
    assert_eq!(monitored(&mut connect(&db.url)), (2, 2, 1));

    store.revoke_host(b, NOW + 1).unwrap();
    expect(1, "revoking a watched host");
    store.revoke_host(b, NOW + 1).unwrap();
    store.revoke_host(c, NOW + 1).unwrap();
    expect(1, "revoking it again, and a host that never polled");

    // A revoked host restored onto a new box is watched again from its first poll.
    let (restored, restored_key) = enroll(&store, Some(b));
    assert_eq!(restored, b);
    expect(1, "restoring a revoked host");
    polled(&other, b, restored_key);
    expect(2, "the restored host's first poll");
    store.remove_host(c, true, NOW + 2).unwrap();
    store.revoke_host(a, NOW + 3).unwrap();
    store.remove_host(a, true, NOW + 3).unwrap();
    expect(
        1,
        "removing a revoked host, and revoking and removing a watched one",
    );

    // A first poll still open while a sweep folds (its host row and its step written, not
    // committed): the sweep counts what was committed, and the open step is not lost.
    let (d, _) = enroll(&store, None);
    let mut racer = connect(&db.url);
    let mut open = racer.transaction().unwrap();
    open.execute(
        "UPDATE hosts SET last_seen_ms = $1 WHERE host_id = $2",
        &[&(NOW + 4_000), &d.to_string()],
    )
    .unwrap();
    open.execute("INSERT INTO monitored_hosts (n) VALUES (1)", &[])
        .unwrap();
    assert!(store.sweep(NOW + 4_000, &config).unwrap().is_empty());
    assert_eq!(monitored(&mut connect(&db.url)), (1, 1, 1));
    open.commit().unwrap();
    assert_eq!(monitored(&mut connect(&db.url)), (2, 2, 2));
    assert!(store.sweep(NOW + 5_000, &config).unwrap().is_empty());
    assert_eq!(monitored(&mut connect(&db.url)), (2, 2, 1));
}

fn connect(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).unwrap()
}
