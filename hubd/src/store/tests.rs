//! Store-level checks the HTTP tests cannot reach: the key check inside the poll's
//! transaction (on both stores), the escrow migration of a database written before it, and
//! what the PostgreSQL store must keep when several hubs share it ([`pg`]).
#![allow(clippy::unwrap_used)]

use crate::store::{ArtifactStore as _, HostStore as _, JobStore as _, PollStore as _};
use bosun_proto::admin::EscrowState;
use rusqlite::{Connection, params};
use uuid::Uuid;

use super::sqlite::{DB_FILE, SqliteStore, schema};
use super::{Enrollment, NewEnrollToken, PollRecord, PollView, ReportUpdate, Store, StoreError};
use crate::secret::{self, SecretHash, SecretKind};

pub(super) const NOW: i64 = 1_790_000_000_000;

/// Enrolls a host straight through the store: (host id, key hash).
pub(super) fn enroll(store: &dyn Store, restore_host: Option<Uuid>) -> (Uuid, SecretHash) {
    let (token, token_hash) = secret::mint(SecretKind::Enrollment);
    store
        .create_enroll_token(NewEnrollToken {
            hash: token_hash,
            created_ms: NOW,
            expires_ms: NOW + 60_000,
            require_approval: false,
            note: None,
            restore_host,
        })
        .unwrap();
    let (_, key_hash) = secret::mint(SecretKind::HostKey);
    let enrolled = store
        .enroll(Enrollment {
            token_hash: SecretHash::of(token.expose()),
            host_id: Uuid::new_v4(),
            key_hash,
            hostname: "pve1".into(),
            agent_version: "0.1.0".into(),
            pve_version: None,
            poll_interval_s: 30,
            now_ms: NOW,
        })
        .unwrap();
    (enrolled.host_id, key_hash)
}

pub(super) fn poll(host_id: Uuid, key_hash: SecretHash) -> PollRecord {
    PollRecord {
        host_id,
        key_hash,
        now_ms: NOW,
        known_generation: 0,
        applied_generation: 0,
        acked_jobs: Vec::new(),
        report: ReportUpdate::full(
            serde_json::from_value(serde_json::json!({
                "schema": "bosun.report/v1", "seq": 1, "host": {}, "versions": { "agent": "0.1.0" }
            }))
            .unwrap(),
        )
        .unwrap(),
        versions: None,
        audit: Vec::new(),
        operations: Vec::new(),
        stopping: false,
        hub_pins: None,
        capabilities: None,
    }
}

/// The sample desired state (`docs/proto/desired.json`) for `host_id`, set at `now_ms`.
pub(super) fn sample_desired(host_id: Uuid, now_ms: i64) -> super::DesiredWrite {
    super::DesiredWrite {
        host_id,
        document: include_str!("../../../docs/proto/desired.json").to_owned(),
        idempotency: None,
        correlation_id: None,
        set_by: None,
        now_ms,
    }
}

/// The full report `poll` carries (the test's own polls carry one).
fn sent_report(poll: &PollRecord) -> bosun_proto::report::StateReport {
    match &poll.report {
        ReportUpdate::Full { report, .. } => (**report).clone(),
        ReportUpdate::Delta(_) => panic!("the poll carries a delta"),
    }
}

#[test]
fn a_heartbeat_is_recorded_at_once_while_the_writer_is_free() {
    use bosun_proto::delta::ReportDelta;

    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let (host, key) = enroll(&store, None);
    let first = poll(host, key);
    let report = sent_report(&first);
    // A full report may not wait: never recorded at once.
    assert!(store.record_poll_now(&first).is_none());
    store.record_polls(vec![first]).unwrap()[0]
        .as_ref()
        .unwrap();
    store.flush().unwrap();
    let delta = |seq: u64| {
        let mut record = poll(host, key);
        record.report = ReportUpdate::Delta(Box::new(ReportDelta::between(
            &report,
            seq,
            &report,
            seq + 1,
        )));
        record
    };
    // A heartbeat, the writer free: recorded here and now; the store owes a sync.
    let (recorded, view) = store.record_poll_now(&delta(1)).unwrap().unwrap();
    assert!(!recorded.durable);
    assert_eq!(view.report_seq, Some(2));
    assert!(store.syncs().0);
    store.sync().unwrap();
    assert!(!store.syncs().0);
    // With a batch being recorded (the writer held), it goes to the poll writer.
    let writer = store.hold_writer();
    assert!(store.record_poll_now(&delta(2)).is_none());
    drop(writer);
    // Audit entries must be durable before the answer: never recorded at once.
    let mut audited = delta(2);
    audited.audit = vec![bosun_proto::report::AuditEntry {
        seq: 1,
        at: jiff::Timestamp::from_millisecond(NOW).unwrap(),
        action: "agent.started".into(),
        detail: serde_json::json!({}),
    }];
    assert!(store.record_poll_now(&audited).is_none());
    // A heartbeat that turns out to matter (the first since the host was stopped) says so.
    let mut stopping = delta(2);
    stopping.stopping = true;
    store.record_polls(vec![stopping]).unwrap()[0]
        .as_ref()
        .unwrap();
    let (recorded, _) = store.record_poll_now(&delta(3)).unwrap().unwrap();
    assert!(
        recorded.durable,
        "the start after a planned stop is durable before its answer"
    );
}

#[test]
fn a_poll_that_fails_after_writing_leaves_the_rest_of_its_batch_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let (broken, broken_key) = enroll(&store, None);
    let (fine, fine_key) = enroll(&store, None);
    let (gone, gone_key) = (Uuid::new_v4(), fine_key);
    store.put_desired(sample_desired(broken, NOW)).unwrap();
    // A stored document the hub cannot read: judging the first host's report fails after its
    // host row was written.
    let sql = Connection::open(dir.path().join(DB_FILE)).unwrap();
    sql.execute(
        "UPDATE desired SET document = 'not json' WHERE host_id = ?1",
        params![broken.to_string()],
    )
    .unwrap();
    let at = |mut record: PollRecord| {
        record.now_ms = NOW + 1_000;
        record
    };
    let outcome = store
        .record_polls(vec![
            at(poll(gone, gone_key)),
            at(poll(broken, broken_key)),
            at(poll(fine, fine_key)),
        ])
        .unwrap();
    assert!(
        matches!(outcome[0], Err(StoreError::UnknownHost { .. })),
        "{:?}",
        outcome[0]
    );
    assert!(
        matches!(outcome[1], Err(StoreError::Corrupt { .. })),
        "{:?}",
        outcome[1]
    );
    assert!(outcome[2].is_ok(), "{:?}", outcome[2]);
    let seen = |host: Uuid| -> Option<i64> {
        sql.query_row(
            "SELECT last_seen_ms FROM hosts WHERE host_id = ?1",
            params![host.to_string()],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(seen(fine), Some(NOW + 1_000), "the good poll is kept");
    assert_eq!(seen(broken), None, "nothing of the failed poll is kept");
}

#[test]
fn a_heartbeat_waits_for_the_flush_and_what_the_agent_forgets_does_not() {
    use bosun_proto::delta::ReportDelta;

    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let (host, key) = enroll(&store, None);
    let first = poll(host, key);
    let report = sent_report(&first);
    // (whether a flush is owed, how often the log was synced) since `before`.
    let since = |before: (bool, u64)| {
        let now = store.syncs();
        (now.0, now.1 - before.1)
    };
    let mut seq = 1;
    let mut record = |change: &dyn Fn(&mut PollRecord)| {
        let before = store.syncs();
        let mut record = poll(host, key);
        let mut now = report.clone();
        if let Some(host) = now.host.as_mut() {
            host.cpu_usage = f64::from(u32::try_from(seq % 7).unwrap()) / 10.0;
        }
        record.report =
            ReportUpdate::Delta(Box::new(ReportDelta::between(&report, seq, &now, seq + 1)));
        change(&mut record);
        let (recorded, view) = store.record_polls(vec![record]).unwrap().remove(0).unwrap();
        if view.report_seq == Some(seq + 1) {
            seq += 1;
        }
        (recorded.durable, since(before))
    };
    // A full report is durable before its answer: the log is synced.
    let before = store.syncs();
    let (recorded, _) = store.record_polls(vec![first]).unwrap().remove(0).unwrap();
    assert!(recorded.durable);
    assert_eq!(since(before), (false, 1));
    // A delta of the host's figures may wait: the log is not synced, the store owes it, and a
    // flush pays it (once), moving the log into the database file beside the writer.
    let in_the_file = || -> i64 {
        let uri = format!("file:{}?immutable=1", dir.path().join(DB_FILE).display());
        Connection::open_with_flags(
            uri,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
        )
        .unwrap()
        .query_row(
            "SELECT report_seq FROM hosts WHERE host_id = ?1",
            params![host.to_string()],
            |r| r.get::<_, Option<i64>>(0),
        )
        .unwrap()
        .unwrap_or(0)
    };
    store.flush().unwrap();
    assert_eq!(in_the_file(), 1);
    assert_eq!(record(&|_| {}), (false, (true, 0)));
    assert_eq!(
        in_the_file(),
        1,
        "the database file holds report 2 only in its log"
    );
    let before = store.syncs();
    store.flush().unwrap();
    store.flush().unwrap();
    assert_eq!(since(before), (false, 1));
    assert_eq!(in_the_file(), 2);
    // Audit entries the agent forgets once they are acknowledged are durable first, and so
    // are acknowledged jobs, a new applied generation and a planned stop.
    let synced = (true, (false, 1));
    assert_eq!(
        record(&|r| {
            r.audit = vec![bosun_proto::report::AuditEntry {
                seq: 1,
                at: jiff::Timestamp::from_millisecond(NOW).unwrap(),
                action: "agent.started".into(),
                detail: serde_json::json!({}),
            }];
        }),
        synced
    );
    assert_eq!(record(&|r| r.acked_jobs = vec![Uuid::new_v4()]), synced);
    assert_eq!(record(&|r| r.applied_generation = 1), synced);
    assert_eq!(
        record(&|r| {
            r.applied_generation = 1;
            r.stopping = true;
        }),
        synced
    );
    // The first poll after the stop records its start: durable as well; the next waits.
    assert_eq!(record(&|r| r.applied_generation = 1), synced);
    assert_eq!(record(&|r| r.applied_generation = 1), (false, (true, 0)));
    // Every other write is on disk when it returns, and leaves what polls owe owed.
    let before = store.syncs();
    store.put_desired(sample_desired(host, NOW)).unwrap();
    assert_eq!(since(before), (true, 1));
}

#[test]
fn a_poll_with_a_replaced_key_is_refused_in_its_transaction() {
    let dir = tempfile::tempdir().unwrap();
    replaced_key_refused(&SqliteStore::open(dir.path()).unwrap());
    let db = pg::Database::create();
    replaced_key_refused(&db.open());
}

fn replaced_key_refused(store: &dyn Store) {
    let (host, old_key) = enroll(store, None);
    let outcome = store.record_polls(vec![poll(host, old_key)]).unwrap();
    assert!(outcome[0].is_ok(), "{:?}", outcome[0]);
    store.revoke_host(host, NOW).unwrap();
    let (same, new_key) = enroll(store, Some(host));
    assert_eq!(same, host);
    // A handler that checked the old key against a stale cache: the transaction refuses it.
    let outcome = store
        .record_polls(vec![poll(host, old_key), poll(host, new_key)])
        .unwrap();
    assert!(
        matches!(outcome[0], Err(StoreError::WrongHostKey { host_id }) if host_id == host),
        "{:?}",
        outcome[0]
    );
    assert!(outcome[1].is_ok(), "{:?}", outcome[1]);
}

#[test]
fn a_polls_answer_says_what_a_fresh_read_says() {
    let dir = tempfile::tempdir().unwrap();
    answer_matches_a_fresh_read(&SqliteStore::open(dir.path()).unwrap());
    let db = pg::Database::create();
    answer_matches_a_fresh_read(&db.open());
}

/// The view a poll is answered with is built from the row the poll wrote; it must say what
/// `poll_view` reads afterwards, with the desired document left out only when the agent
/// already knows its generation.
fn answer_matches_a_fresh_read(store: &dyn Store) {
    let (host, key) = enroll(store, None);
    let (_, first) = store
        .record_polls(vec![poll(host, key)])
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!(first, store.poll_view(host).unwrap());
    let accepted = store
        .put_desired(super::DesiredWrite {
            host_id: host,
            document: include_str!("../../../docs/proto/desired.json").to_owned(),
            idempotency: None,
            correlation_id: Some("change-42".into()),
            set_by: None,
            now_ms: NOW,
        })
        .unwrap();
    let mut later = poll(host, key);
    later.report = match later.report {
        ReportUpdate::Full { report, .. } => {
            ReportUpdate::full(bosun_proto::report::StateReport { seq: 2, ..*report }).unwrap()
        }
        ReportUpdate::Delta(_) => unreachable!(),
    };
    // Above i32: PostgreSQL must not type the number's parameter as an `integer`.
    later.audit = vec![bosun_proto::report::AuditEntry {
        seq: 5_000_000_007,
        at: "2026-11-23T10:00:00Z".parse().unwrap(),
        action: "noop".into(),
        detail: serde_json::json!({}),
    }];
    let (_, unknown) = store
        .record_polls(vec![later.clone()])
        .unwrap()
        .remove(0)
        .unwrap();
    let fresh = store.poll_view(host).unwrap();
    assert_eq!(unknown, fresh);
    assert_eq!(fresh.generation, accepted.generation);
    assert_eq!(fresh.correlation_id.as_deref(), Some("change-42"));
    assert_eq!(
        (fresh.audit_acked_seq, fresh.report_seq),
        (Some(5_000_000_007), Some(2))
    );
    // The agent now knows the generation: the same view without the document.
    later.known_generation = accepted.generation;
    later.audit.clear();
    let (_, known) = store.record_polls(vec![later]).unwrap().remove(0).unwrap();
    assert_eq!(known.desired_json, None);
    assert_eq!(
        known,
        PollView {
            desired_json: None,
            ..store.poll_view(host).unwrap()
        }
    );
}

#[test]
fn a_planned_stop_is_kept_until_the_next_poll() {
    let dir = tempfile::tempdir().unwrap();
    planned_stop_kept(&SqliteStore::open(dir.path()).unwrap());
    let db = pg::Database::create();
    planned_stop_kept(&db.open());
}

/// A stop poll marks the host stopped; the sweep leaves it alone within its stop bound and
/// pages it once past it; the next poll clears the stop.
fn planned_stop_kept(store: &dyn Store) {
    use bosun_proto::admin::{AlertKind, Liveness};
    let config = crate::deadman::DeadManConfig::default();
    let bound_ms = i64::try_from(config.stopped_grace.as_millis()).unwrap();
    let (host, key) = enroll(store, None);
    let liveness = || store.list_hosts().unwrap()[0].clone();
    store.record_polls(vec![poll(host, key)]).unwrap()[0]
        .as_ref()
        .unwrap();
    assert_eq!(liveness().liveness, Liveness::Ok);
    let mut last = poll(host, key);
    last.now_ms = NOW + 1_000;
    last.stopping = true;
    store.record_polls(vec![last]).unwrap()[0].as_ref().unwrap();
    let stopped = liveness();
    assert_eq!(stopped.liveness, Liveness::Stopped);
    assert_eq!(
        stopped.stopped_at,
        Some(jiff::Timestamp::from_millisecond(NOW + 1_000).unwrap())
    );
    // Silent for an hour's worth of grace windows, within the bound: nothing.
    assert!(
        store
            .sweep(NOW + 1_000 + bound_ms, &config)
            .unwrap()
            .is_empty()
    );
    assert_eq!(liveness().liveness, Liveness::Stopped);
    // Past it: one page that says what happened.
    let raised = store.sweep(NOW + 2_000 + bound_ms, &config).unwrap();
    assert_eq!(raised.len(), 1, "{raised:?}");
    assert_eq!(raised[0].kind, AlertKind::HostOverdue);
    assert!(
        raised[0].message.contains("stopped on purpose"),
        "{}",
        raised[0].message
    );
    assert_eq!(liveness().liveness, Liveness::Overdue);
    // Back: the stop and the overdue state are gone, the recovery is alerted.
    let mut back = poll(host, key);
    back.now_ms = NOW + 3_000 + bound_ms;
    let (recorded, _) = store.record_polls(vec![back]).unwrap().remove(0).unwrap();
    assert!(recorded.recovered);
    assert_eq!(
        recorded.alert.map(|a| a.kind),
        Some(AlertKind::HostRecovered)
    );
    let summary = liveness();
    assert_eq!((summary.liveness, summary.stopped_at), (Liveness::Ok, None));
}

#[test]
fn blobs_stored_before_fingerprints_were_kept_get_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let host = Uuid::new_v4();
    {
        // A database at schema 4 with a host and its escrow blob.
        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        for migration in &schema::MIGRATIONS[..4] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", 4).unwrap();
        conn.execute(
            "INSERT INTO hosts (host_id, hostname, key_hash, status, enrolled_ms, poll_interval_s)
             VALUES (?1, 'pve1', ?2, 'active', ?3, 30)",
            params![host.to_string(), [0u8; 32].as_slice(), NOW],
        )
        .unwrap();
        let blob = include_str!("../../../docs/proto/escrow.json");
        conn.execute(
            "INSERT INTO escrow (host_id, blob, updated_ms) VALUES (?1, ?2, ?3)",
            params![host.to_string(), blob, NOW],
        )
        .unwrap();
    }
    let store = SqliteStore::open(dir.path()).unwrap();
    let hosts = store.list_hosts().unwrap();
    assert_eq!(
        hosts[0].escrow,
        EscrowState::Stored {
            key_fingerprint: "a1:b2:c3:d4:e5:f6:07:18:29:3a:4b:5c:6d:7e:8f:90".into(),
            updated_at: jiff::Timestamp::from_millisecond(NOW).unwrap(),
        }
    );
}

#[test]
fn artifacts_a_database_held_move_out_to_files_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = b"an agent binary stored before".repeat(100);
    let sha = super::artifacts::sha256_of(bytes.as_slice()).unwrap();
    {
        // A database at schema 12 whose artifacts table holds the bytes.
        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        for migration in &schema::MIGRATIONS[..12] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", 12).unwrap();
        conn.execute(
            "INSERT INTO artifacts (sha256, size, data, stored_ms) VALUES (?1, ?2, ?3, ?4)",
            params![sha, i64::try_from(bytes.len()).unwrap(), bytes, NOW],
        )
        .unwrap();
    }
    let files = dir.path().join(super::ARTIFACTS_DIR);
    // A temporary file an upload left behind when the hub stopped.
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join(".upload-left"), b"partial").unwrap();
    for _ in 0..2 {
        // Opening twice: the move is done once and changes nothing the second time.
        let store = SqliteStore::open(dir.path()).unwrap();
        match store.artifact(&sha).unwrap().unwrap() {
            super::ArtifactBytes::File { size, .. } => assert_eq!(size, bytes.len() as u64),
            super::ArtifactBytes::Inline(_) => panic!("read from the database"),
        }
        assert_eq!(std::fs::read(files.join(&sha)).unwrap(), bytes);
        let names: Vec<_> = std::fs::read_dir(&files).unwrap().collect();
        assert_eq!(names.len(), 1, "{names:?}");
        drop(store);
        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        let held: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM artifacts WHERE data IS NOT NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(held, 0);
    }
}

#[path = "pg_tests.rs"]
mod pg;

#[path = "pg_one_flight_tests.rs"]
mod pg_one_flight;

#[path = "alert_triage_tests.rs"]
mod alert_triage;

#[path = "id_lookup_tests.rs"]
mod id_lookup;

#[path = "retention_tests.rs"]
mod retention;

#[path = "history_tests.rs"]
mod history;

#[path = "host_removal_tests.rs"]
mod host_removal;

#[path = "operator_tokens_tests.rs"]
mod operator_tokens;

#[path = "stored_report_tests.rs"]
mod stored_report;

#[path = "host_profile_tests.rs"]
pub(super) mod host_profile;

#[test]
fn a_restored_store_numbers_generations_above_what_its_hosts_hold() {
    let dir = tempfile::tempdir().unwrap();
    numbering_after_restore(&SqliteStore::open(dir.path()).unwrap());
    let db = pg::Database::create();
    numbering_after_restore(&db.open());
}

fn numbering_after_restore(store: &dyn Store) {
    let (host, key) = enroll(store, None);
    let put = |now_ms| store.put_desired(sample_desired(host, now_ms));
    assert_eq!(put(NOW).unwrap().generation, 1);
    // Before any restore a host's report never steers the numbering.
    let mut ahead = poll(host, key);
    ahead.known_generation = 50;
    ahead.applied_generation = 50;
    assert!(store.record_polls(vec![ahead]).unwrap()[0].is_ok());
    assert_eq!(put(NOW).unwrap().generation, 2);
    assert_eq!(store.restored_ms().unwrap(), None);

    store
        .mark_restored(&super::RestoredHub {
            now_ms: NOW + 10,
            backup_taken_ms: Some(NOW - 1000),
            source: "hub.tar".into(),
        })
        .unwrap();
    assert_eq!(store.restored_ms().unwrap(), Some(NOW + 10));
    // The poll before the restore does not count: the agent may have moved on since.
    let err = put(NOW + 11).unwrap_err();
    assert!(
        matches!(err, StoreError::NotSeenSinceRestore { host_id, restored_ms } if host_id == host && restored_ms == NOW + 10),
        "{err:?}"
    );
    let mut after = poll(host, key);
    after.now_ms = NOW + 20;
    after.known_generation = 7;
    after.applied_generation = 6;
    assert!(store.record_polls(vec![after]).unwrap()[0].is_ok());
    assert_eq!(
        put(NOW + 21).unwrap().generation,
        8,
        "above the generation the agent holds"
    );
    assert_eq!(put(NOW + 22).unwrap().generation, 9);
}
