//! Removing a revoked host on both stores: a live host is refused, an unknown one is unknown,
//! and a removal leaves no row about the host in any table but the event log and the alert
//! history, while another host keeps all of its rows.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use bosun_proto::admin::AlertKind;
use bosun_proto::alert_triage::{AckAlert, CreateSilence};
use rusqlite::Connection;
use uuid::Uuid;

use super::super::audit_trail::AuditQuery;
use super::super::sqlite::{DB_FILE, SqliteStore};
use super::super::{DesiredWrite, EventQuery, NewEnrollToken, NewJob, Store, StoreError};
use super::{NOW, enroll, pg, poll};
use crate::deadman::DeadManConfig;
use crate::secret::{self, SecretKind};

/// Tables that keep rows about a removed host on purpose (decision 0040).
const KEPT: &[&str] = &["events", "alerts"];

/// Table → rows about one host.
type Rows = BTreeMap<String, i64>;

/// The tables that have a `host_id` column (SQLite's schema; PostgreSQL's has the same).
fn host_tables(conn: &Connection) -> Vec<String> {
    conn.prepare(
        "SELECT m.name FROM sqlite_master m, pragma_table_info(m.name) p
             WHERE m.type = 'table' AND p.name = 'host_id' ORDER BY m.name",
    )
    .unwrap()
    .query_map([], |r| r.get(0))
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

fn count_sql(table: &str) -> String {
    format!("SELECT COUNT(*) FROM {table} WHERE host_id = $1")
}

fn sqlite_rows(dir: &std::path::Path, host: Uuid) -> Rows {
    let conn = Connection::open(dir.join(DB_FILE)).unwrap();
    let mut rows = Rows::new();
    for table in host_tables(&conn) {
        let n: i64 = conn
            .query_row(&count_sql(&table), [host.to_string()], |r| r.get(0))
            .unwrap();
        rows.insert(table, n);
    }
    rows
}

fn pg_rows(url: &str, tables: &[String], host: Uuid) -> Rows {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let mut rows = Rows::new();
        for table in tables {
            let row = client
                .query_one(&count_sql(table), &[&host.to_string()])
                .await
                .unwrap();
            rows.insert(table.clone(), row.get(0));
        }
        rows
    })
}

#[test]
fn a_revoked_host_is_removed_with_its_rows_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let (host, other) = removal(&store);
    let left = sqlite_rows(dir.path(), host);
    assert_only_kept(&left);
    let theirs = sqlite_rows(dir.path(), other);
    assert!(theirs["hosts"] == 1 && theirs["jobs"] == 1 && theirs["audit"] == 1);
}

#[test]
fn a_revoked_host_is_removed_with_its_rows_on_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    drop(SqliteStore::open(dir.path()).unwrap());
    let tables = host_tables(&Connection::open(dir.path().join(DB_FILE)).unwrap());
    let db = pg::Database::create();
    let (host, other) = removal(&db.open());
    assert_only_kept(&pg_rows(db.url(), &tables, host));
    let theirs = pg_rows(db.url(), &tables, other);
    assert!(theirs["hosts"] == 1 && theirs["jobs"] == 1 && theirs["audit"] == 1);
}

fn assert_only_kept(rows: &Rows) {
    for (table, n) in rows {
        if !KEPT.contains(&table.as_str()) {
            assert_eq!(
                *n, 0,
                "rows about the removed host left in {table}: {rows:?}"
            );
        }
    }
    assert!(rows["events"] > 0, "the event log keeps the host's events");
}

/// Fills in everything the hub keeps about a host and about a second one, removes the first;
/// returns (removed, other).
fn removal(store: &dyn Store) -> (Uuid, Uuid) {
    let (host, key) = enroll(store, None);
    let (other, other_key) = enroll(store, None);
    for (id, key) in [(host, key), (other, other_key)] {
        let mut first = poll(id, key);
        first.capabilities = Some(super::host_profile::sample_capabilities());
        first.audit = vec![bosun_proto::report::AuditEntry {
            seq: 1,
            at: "2026-11-23T10:00:00Z".parse().unwrap(),
            action: "noop".into(),
            detail: serde_json::json!({}),
        }];
        assert!(store.record_polls(vec![first]).unwrap()[0].is_ok());
        store
            .put_desired(DesiredWrite {
                host_id: id,
                document: include_str!("../../../docs/proto/desired.json").to_owned(),
                idempotency: Some(("k1".into(), [7; 32])),
                correlation_id: None,
                set_by: None,
                now_ms: NOW,
            })
            .unwrap();
        store
            .submit_job(NewJob {
                job_id: Uuid::new_v4(),
                host_id: id,
                kind: "break-glass-disable",
                document: b"{}".to_vec(),
                signature: "sig".into(),
                priority: 0,
                now_ms: NOW,
            })
            .unwrap();
        store.put_escrow(id, "{}", "aa:bb", NOW).unwrap();
        store
            .change_host_labels(id, &super::host_profile::labels(&[("site", "fra")]), NOW)
            .unwrap();
    }
    let silence = CreateSilence {
        host_id: host,
        kind: None,
        subject: None,
        duration_seconds: 3600,
        reason: "retiring the box".into(),
    };
    store.create_silence(&silence, NOW).unwrap();
    let overdue_at = NOW + 600_000;
    assert_eq!(
        store
            .sweep(overdue_at, &DeadManConfig::default())
            .unwrap()
            .len(),
        2
    );
    let ack = AckAlert {
        host_id: host,
        kind: AlertKind::HostOverdue,
        subject: host.to_string(),
        note: "retiring".into(),
    };
    store.ack_alert(&ack, overdue_at).unwrap();

    // Only a revoked host goes; an unknown one is unknown.
    assert!(matches!(
        store.remove_host(host, true, overdue_at),
        Err(StoreError::HostNotRemovable { host_id, .. }) if host_id == host
    ));
    assert!(matches!(
        store.remove_host(Uuid::new_v4(), true, overdue_at),
        Err(StoreError::UnknownHost { .. })
    ));

    // A new box took the host over once (the lost box's trail went to the archive), was
    // revoked again, and a restore-mode token for it waits unused.
    store.revoke_host(host, overdue_at).unwrap();
    assert_eq!(enroll(store, Some(host)).0, host);
    store.revoke_host(host, overdue_at).unwrap();
    let (_, token_hash) = secret::mint(SecretKind::Enrollment);
    store
        .create_enroll_token(NewEnrollToken {
            hash: token_hash,
            created_ms: overdue_at,
            expires_ms: overdue_at + 60_000,
            require_approval: false,
            note: None,
            restore_host: Some(host),
        })
        .unwrap();

    // The hub holds the host's escrow blob: forgetting it is said, or the removal is refused
    // and nothing goes.
    assert!(matches!(
        store.remove_host(host, false, overdue_at + 1),
        Err(StoreError::EscrowHeld { host_id }) if host_id == host
    ));
    assert!(store.host_detail(host).is_ok());
    let removed = store.remove_host(host, true, overdue_at + 1).unwrap();
    assert_eq!((removed.host_id, removed.hostname.as_str()), (host, "pve1"));
    let deleted = |table| removed.rows.iter().find(|(t, _)| *t == table).unwrap().1;
    assert_eq!(deleted("replaced_audit"), 1);
    assert_eq!(deleted("enroll_tokens"), 1);
    assert!(matches!(
        store.remove_host(host, true, overdue_at + 2),
        Err(StoreError::UnknownHost { .. })
    ));
    assert!(matches!(
        store.host_detail(host),
        Err(StoreError::UnknownHost { .. })
    ));
    let events = store
        .list_events(EventQuery {
            host_id: Some(host),
            after: None,
            limit: 100,
        })
        .unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.kind, "host_removed");
    assert_eq!(last.detail["hostname"], "pve1");
    assert!(
        store
            .list_silences(overdue_at + 2, 10_000)
            .unwrap()
            .is_empty()
    );
    let trail = store
        .audit(&AuditQuery {
            host_id: None,
            guest_id: None,
            since_ms: None,
            before: None,
            limit: 100,
        })
        .unwrap();
    assert!(
        trail.iter().all(|entry| entry.host_id == other),
        "{trail:?}"
    );
    assert_eq!(store.list_hosts().unwrap().len(), 1);
    (host, other)
}
