//! The retention prune on both stores: exactly the rows past their bound that are finished
//! go, at most [`PRUNE_BATCH`] per statement, and the per-host caps keep each host's newest.

use std::time::Duration;

use uuid::Uuid;

use super::super::postgres::PgStore;
use super::super::retention::{PRUNE_BATCH, PruneCursor, Pruned, RetentionConfig};
use super::super::sqlite::{DB_FILE, SqliteStore};
use super::super::{DesiredWrite, Enrollment, NewEnrollToken, NewJob, Store};
use super::pg::Database;
use super::{NOW, enroll};
use crate::secret::{self, SecretHash, SecretKind};

const DAY: i64 = 86_400_000;
/// Past every default bound.
const OLD: i64 = NOW - 400 * DAY;
/// Within every default bound.
const RECENT: i64 = NOW - DAY;

/// Raw SQL on the store's database: run a statement, count rows.
struct Sql {
    exec: Box<dyn Fn(&str)>,
    count: Box<dyn Fn(&str) -> i64>,
}

fn sqlite_sql(dir: &std::path::Path) -> Sql {
    let path = dir.join(DB_FILE);
    let count_path = path.clone();
    Sql {
        exec: Box::new(move |text| {
            rusqlite::Connection::open(&path)
                .unwrap()
                .execute_batch(text)
                .unwrap();
        }),
        count: Box::new(move |text| {
            rusqlite::Connection::open(&count_path)
                .unwrap()
                .query_row(text, [], |r| r.get(0))
                .unwrap()
        }),
    }
}

fn pg_sql(url: &str) -> Sql {
    let exec_url = url.to_owned();
    let count_url = url.to_owned();
    // The blocking client runs its own runtime: keep it off the test's thread-locals.
    let run = |url: String, text: String, count: bool| {
        std::thread::spawn(move || {
            let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            if count {
                client
                    .query_one(text.as_str(), &[])
                    .unwrap()
                    .get::<_, i64>(0)
            } else {
                client.batch_execute(&text).unwrap();
                0
            }
        })
        .join()
        .unwrap()
    };
    Sql {
        exec: Box::new(move |text| {
            run(exec_url.clone(), text.to_owned(), false);
        }),
        count: Box::new(move |text| run(count_url.clone(), text.to_owned(), true)),
    }
}

fn token(store: &dyn Store, created_ms: i64, expires_ms: i64) -> SecretHash {
    let (token, hash) = secret::mint(SecretKind::Enrollment);
    store
        .create_enroll_token(NewEnrollToken {
            hash,
            created_ms,
            expires_ms,
            require_approval: false,
            note: None,
            restore_host: None,
        })
        .unwrap();
    SecretHash::of(token.expose())
}

fn use_token(store: &dyn Store, token_hash: SecretHash, now_ms: i64) {
    let (_, key_hash) = secret::mint(SecretKind::HostKey);
    store
        .enroll(Enrollment {
            token_hash,
            host_id: Uuid::new_v4(),
            key_hash,
            hostname: "pve-old".into(),
            agent_version: "0.1.0".into(),
            pve_version: None,
            poll_interval_s: 30,
            now_ms,
        })
        .unwrap();
}

fn job(store: &dyn Store, sql: &Sql, host: Uuid, state: &str, finished_ms: Option<i64>) -> Uuid {
    let job_id = Uuid::new_v4();
    store
        .submit_job(NewJob {
            job_id,
            host_id: host,
            kind: "restore_now",
            document: job_id.as_bytes().to_vec(),
            signature: "sig".into(),
            priority: 0,
            now_ms: OLD,
        })
        .unwrap();
    let finished = finished_ms.map_or("NULL".to_owned(), |ms| ms.to_string());
    (sql.exec)(&format!(
        "UPDATE jobs SET state = '{state}', finished_ms = {finished} WHERE job_id = '{job_id}'"
    ));
    job_id
}

fn desired(store: &dyn Store, host: Uuid, key: &str, now_ms: i64) {
    store
        .put_desired(DesiredWrite {
            host_id: host,
            document: format!(r#"{{"key":"{key}"}}"#),
            idempotency: Some((key.to_owned(), [7; 32])),
            correlation_id: None,
            set_by: None,
            now_ms,
        })
        .unwrap();
}

/// A whole prune pass at `NOW`, step after step (bounded).
fn prune_pass(store: &dyn Store, config: &RetentionConfig) -> Pruned {
    let mut pruned = Pruned::default();
    let mut from = PruneCursor::default();
    for _ in 0..1_000 {
        let step = store
            .prune(NOW, config, from, Duration::from_millis(50))
            .unwrap();
        pruned.absorb(step.pruned);
        match step.next {
            Some(next) => from = next,
            None => return pruned,
        }
    }
    panic!("the prune pass does not end");
}

/// Rows of every pruned table, old and recent, finished and not: the prune takes exactly
/// those past their bound that are finished, and a second pass finds nothing.
fn prunes_exactly_the_old_finished_rows(store: &dyn Store, sql: &Sql) {
    let (host, _) = enroll(store, None);
    // Enrollment tokens: used long ago (and its host, enrolled then); unused and expired long
    // ago; unused and expired lately; unused and valid though created long ago.
    let used_old = token(store, OLD, OLD + 60_000);
    use_token(store, used_old, OLD);
    token(store, OLD, OLD + 60_000);
    token(store, OLD, RECENT);
    token(store, OLD, NOW + DAY);
    // Jobs: finished long ago (gone), finished lately, and never finished though old.
    job(store, sql, host, "succeeded", Some(OLD));
    job(store, sql, host, "rejected", Some(OLD));
    let recent_job = job(store, sql, host, "failed", Some(RECENT));
    let queued = job(store, sql, host, "queued", None);
    let acked = job(store, sql, host, "acked", None);
    // Idempotency keys, and the events their writes recorded.
    desired(store, host, "old-key", OLD);
    desired(store, host, "new-key", RECENT);
    (sql.exec)(&format!(
        "INSERT INTO audit (host_id, seq, at_ms, action, detail) VALUES
             ('{host}', 1, {OLD}, 'guest.created', '{{}}'), ('{host}', 2, {RECENT}, 'guest.created', '{{}}');
         INSERT INTO replaced_audit (host_id, replaced_ms, seq, at_ms, action, detail) VALUES
             ('{host}', {OLD}, 1, {OLD}, 'guest.created', '{{}}'),
             ('{host}', {RECENT}, 1, {OLD}, 'guest.created', '{{}}');
         INSERT INTO events (at_ms, host_id, kind, detail) VALUES
             ({OLD}, '{host}', 'marker', '{{}}'), ({RECENT}, '{host}', 'marker', '{{}}'),
             ({OLD}, NULL, 'marker', '{{}}');
         INSERT INTO alerts (at_ms, kind, host_id, hostname, message) VALUES
             ({OLD}, 'host_overdue', '{host}', 'pve1', 'old'), ({RECENT}, 'host_overdue', '{host}', 'pve1', 'new');
         INSERT INTO watch_alerts (host_id, kind, subject, opened_ms, message) VALUES
             ('{host}', 'storage_missing', 't1', {OLD}, 'open since long ago');"
    ));
    let config = RetentionConfig::default();
    let cutoff = |days: u32| NOW - i64::from(days) * DAY;
    let old_events = (sql.count)(&format!(
        "SELECT COUNT(*) FROM events WHERE at_ms < {}",
        cutoff(config.events_days)
    ));
    // The two old markers and what the old writes recorded: four tokens, one enrollment,
    // five jobs queued, one desired state.
    assert_eq!(old_events, 13);
    let count = |table: &str| (sql.count)(&format!("SELECT COUNT(*) FROM {table}"));
    let before: Vec<i64> = TABLES.iter().map(|t| count(t)).collect();

    let pruned = prune_pass(store, &config);
    assert_eq!(
        pruned,
        Pruned {
            audit: 1,
            replaced_audit: 1,
            events: 13,
            alerts: 1,
            jobs: 2,
            idempotency: 1,
            enroll_tokens: 2,
            history: 0,
        }
    );
    let after: Vec<i64> = TABLES.iter().map(|t| count(t)).collect();
    let gone: Vec<i64> = before.iter().zip(&after).map(|(b, a)| b - a).collect();
    assert_eq!(gone, [1, 1, 13, 1, 2, 1, 2, 0]);
    // What stayed is what must.
    let one = |query: String| assert_eq!((sql.count)(&query), 1, "{query}");
    one(format!(
        "SELECT COUNT(*) FROM audit WHERE seq = 2 AND host_id = '{host}'"
    ));
    one(format!(
        "SELECT COUNT(*) FROM replaced_audit WHERE replaced_ms = {RECENT}"
    ));
    one(format!(
        "SELECT COUNT(*) FROM events WHERE kind = 'marker' AND at_ms = {RECENT}"
    ));
    one("SELECT COUNT(*) FROM alerts WHERE message = 'new'".to_owned());
    for kept in [recent_job, queued, acked] {
        one(format!("SELECT COUNT(*) FROM jobs WHERE job_id = '{kept}'"));
    }
    one("SELECT COUNT(*) FROM idempotency WHERE key = 'new-key'".to_owned());
    assert_eq!(
        (sql.count)("SELECT COUNT(*) FROM enroll_tokens WHERE used_ms IS NULL"),
        2,
        "unused tokens still valid or expired lately stay"
    );
    one("SELECT COUNT(*) FROM watch_alerts".to_owned());
    // Nothing left to prune.
    assert_eq!(prune_pass(store, &config), Pruned::default());
}

/// The tables the prune touches, and one it never does.
const TABLES: [&str; 8] = [
    "audit",
    "replaced_audit",
    "events",
    "alerts",
    "jobs",
    "idempotency",
    "enroll_tokens",
    "watch_alerts",
];

/// The per-host caps keep each host's newest audit entries (by its numbering) and events.
fn per_host_caps_keep_the_newest(store: &dyn Store, sql: &Sql) {
    let (busy, _) = enroll(store, None);
    let (quiet, _) = enroll(store, None);
    (sql.exec)(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50)
         INSERT INTO audit (host_id, seq, at_ms, action, detail)
             SELECT '{busy}', i, {NOW}, 'guest.created', '{{}}' FROM n;
         UPDATE hosts SET audit_seq = 50 WHERE host_id = '{busy}';
         INSERT INTO audit (host_id, seq, at_ms, action, detail) VALUES
             ('{quiet}', 1, {NOW}, 'guest.created', '{{}}');
         UPDATE hosts SET audit_seq = 1 WHERE host_id = '{quiet}';
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30)
         INSERT INTO events (at_ms, host_id, kind, detail)
             SELECT {NOW}, '{busy}', 'marker', '{{}}' FROM n;"
    ));
    let config = RetentionConfig {
        audit_per_host: 10,
        events_per_host: 5,
        ..RetentionConfig::default()
    };
    let pruned = prune_pass(store, &config);
    // 40 audit entries; the busy host's 31 events (its enrollment and 30 markers) less 5.
    assert_eq!((pruned.audit, pruned.events), (40, 26));
    assert_eq!(
        (sql.count)(&format!(
            "SELECT COUNT(*) FROM audit WHERE host_id = '{busy}' AND seq BETWEEN 41 AND 50"
        )),
        10
    );
    assert_eq!(
        (sql.count)(&format!(
            "SELECT COUNT(*) FROM events WHERE host_id = '{busy}' AND kind = 'marker'"
        )),
        5
    );
    assert_eq!(
        (sql.count)(&format!(
            "SELECT COUNT(*) FROM audit WHERE host_id = '{quiet}'"
        )),
        1
    );
    assert_eq!(
        (sql.count)(&format!(
            "SELECT COUNT(*) FROM events WHERE host_id = '{quiet}'"
        )),
        1,
        "the quiet host keeps its enrollment event"
    );
}

/// Inserts 2,500 old events.
fn seed_old_events(sql: &Sql) {
    (sql.exec)(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2500)
         INSERT INTO events (at_ms, host_id, kind, detail)
             SELECT {OLD}, NULL, 'marker', '{{}}' FROM n;"
    ));
}

#[test]
fn sqlite_prunes_exactly_the_old_finished_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    prunes_exactly_the_old_finished_rows(&store, &sqlite_sql(dir.path()));
}

#[test]
fn postgres_prunes_exactly_the_old_finished_rows() {
    let db = Database::create();
    prunes_exactly_the_old_finished_rows(&db.open(), &pg_sql(db.url()));
}

#[test]
fn sqlite_per_host_caps_keep_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    per_host_caps_keep_the_newest(&store, &sqlite_sql(dir.path()));
}

#[test]
fn postgres_per_host_caps_keep_the_newest() {
    let db = Database::create();
    per_host_caps_keep_the_newest(&db.open(), &pg_sql(db.url()));
}

#[test]
fn sqlite_prunes_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let sql = sqlite_sql(dir.path());
    seed_old_events(&sql);
    let config = RetentionConfig::default();
    let mut cursor = PruneCursor::default();
    let mut deleted = Vec::new();
    loop {
        // A spent budget: each slice runs one statement.
        let mut pruned = Pruned::default();
        let done = store
            .prune_slice(NOW, &config, &mut cursor, Duration::ZERO, &mut pruned)
            .unwrap();
        deleted.push(pruned.events);
        if done || deleted.len() > 100 {
            break;
        }
    }
    assert_batches(&deleted);
    assert_eq!((sql.count)("SELECT COUNT(*) FROM events"), 0);
}

#[test]
fn postgres_prunes_in_batches() {
    let db = Database::create();
    let store: PgStore = db.open();
    let sql = pg_sql(db.url());
    seed_old_events(&sql);
    let config = RetentionConfig::default();
    let mut cursor = PruneCursor::default();
    let mut deleted = Vec::new();
    loop {
        let mut pruned = Pruned::default();
        let done = store
            .prune_slice(NOW, &config, &mut cursor, Duration::ZERO, &mut pruned)
            .unwrap()
            .expect("the only replica holds the sweeper lock");
        deleted.push(pruned.events);
        if done || deleted.len() > 100 {
            break;
        }
    }
    assert_batches(&deleted);
    assert_eq!((sql.count)("SELECT COUNT(*) FROM events"), 0);
}

/// 2,500 old events go 1,000, 1,000, 500 (no statement deletes more), and nothing else.
fn assert_batches(deleted: &[u64]) {
    let batch = u64::try_from(PRUNE_BATCH).unwrap();
    assert!(deleted.iter().all(|&n| n <= batch), "{deleted:?}");
    let events: Vec<u64> = deleted.iter().copied().filter(|&n| n > 0).collect();
    assert_eq!(events, [batch, batch, 500], "{deleted:?}");
}

#[test]
fn only_the_replica_holding_the_sweeper_lock_prunes() {
    let db = Database::create();
    let first = db.open();
    let second = db.open();
    let sql = pg_sql(db.url());
    seed_old_events(&sql);
    let config = RetentionConfig::default();
    let mut cursor = PruneCursor::default();
    let mut pruned = Pruned::default();
    // One statement per slice: the audit tables' first, then a batch of events.
    while pruned.events == 0 {
        assert_eq!(
            first
                .prune_slice(NOW, &config, &mut cursor, Duration::ZERO, &mut pruned)
                .unwrap(),
            Some(false)
        );
    }
    assert_eq!(prune_pass(&second, &config), Pruned::default());
    assert_eq!((sql.count)("SELECT COUNT(*) FROM events"), 1_500);
    assert_eq!(prune_pass(&first, &config).events, 1_500);
}
