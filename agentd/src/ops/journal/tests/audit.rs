//! The audit log: append-only triggers and the hash chain under tampering.

use serde_json::json;

use super::super::audit;
use super::{claim, open};
use crate::ops::journal::*;
use crate::ops::operation::OpKind;

fn audit_some(store: &mut Store, n: usize) {
    for i in 0..n {
        let mut event = AuditEvent::new("gate.denied");
        event.vmid = Some(100 + u32::try_from(i).unwrap());
        event.detail = json!({ "reason": format!("row {i}") });
        store.append_audit(&event).unwrap();
    }
}

#[test]
fn audit_chain_is_intact_after_normal_writes_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    assert_eq!(
        store.verify_audit_chain().unwrap(),
        ChainVerdict::Intact {
            rows: 0,
            head: GENESIS_HASH
        }
    );
    assert_eq!(store.audit_head().unwrap(), (0, GENESIS_HASH));
    audit_some(&mut store, 5);
    store.claim_job(&claim("job-1", "n-1")).unwrap();
    drop(store);
    let (store, _) = open(&dir);
    let ChainVerdict::Intact { rows, head } = store.verify_audit_chain().unwrap() else {
        panic!("chain broken")
    };
    assert_eq!(rows, 6);
    assert_eq!(store.audit_head().unwrap(), (6, head));
    let entries = store.audit_since(0, 100).unwrap();
    assert_eq!(entries.len(), 6);
    assert_eq!(entries[5].hash, head);
    assert_eq!(entries[5].event.event, "job.claimed");
    assert_eq!(entries[1].prev_hash, entries[0].hash);
    assert_eq!(store.audit_since(4, 100).unwrap().len(), 2);
    assert_eq!(store.audit_since(0, 2).unwrap().len(), 2);
}

#[test]
fn audit_log_refuses_update_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    audit_some(&mut store, 2);
    let err = store
        .conn
        .execute("UPDATE audit_log SET event = 'x' WHERE seq = 1", [])
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
    let err = store
        .conn
        .execute("DELETE FROM audit_log WHERE seq = 1", [])
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
}

/// Tampers through a second connection, as someone editing the file would.
fn tamper(dir: &tempfile::TempDir, sql: &str) {
    let conn = rusqlite::Connection::open(dir.path().join("journal.db")).unwrap();
    conn.execute_batch("DROP TRIGGER audit_log_no_update; DROP TRIGGER audit_log_no_delete;")
        .unwrap();
    conn.execute_batch(sql).unwrap();
}

#[test]
fn audit_chain_names_the_first_tampered_row() {
    let cases: &[(&str, u64, BrokenLink)] = &[
        (
            "UPDATE audit_log SET detail = '{\"reason\":\"nothing\"}' WHERE seq = 3",
            3,
            BrokenLink::ContentMismatch,
        ),
        (
            "UPDATE audit_log SET vmid = 999 WHERE seq = 2",
            2,
            BrokenLink::ContentMismatch,
        ),
        (
            "UPDATE audit_log SET at_ms = at_ms + 1 WHERE seq = 4",
            4,
            BrokenLink::ContentMismatch,
        ),
        (
            "DELETE FROM audit_log WHERE seq = 2",
            3,
            BrokenLink::Gap { expected: 2 },
        ),
        (
            "UPDATE audit_log SET prev_hash = zeroblob(32) WHERE seq = 5",
            5,
            BrokenLink::PrevHashMismatch,
        ),
        (
            "UPDATE audit_log SET hash = zeroblob(32) WHERE seq = 5",
            5,
            BrokenLink::ContentMismatch,
        ),
        (
            "UPDATE audit_log SET event = 'guest.created' WHERE seq = 1",
            1,
            BrokenLink::ContentMismatch,
        ),
        (
            "UPDATE audit_log SET op_id = 'x' WHERE seq = 1",
            1,
            BrokenLink::ContentMismatch,
        ),
    ];
    for (sql, seq, reason) in cases {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = open(&dir);
        audit_some(&mut store, 5);
        assert!(matches!(
            store.verify_audit_chain().unwrap(),
            ChainVerdict::Intact { rows: 5, .. }
        ));
        drop(store);
        tamper(&dir, sql);
        let (store, _) = open(&dir);
        assert_eq!(
            store.verify_audit_chain().unwrap(),
            ChainVerdict::Broken {
                seq: *seq,
                reason: *reason
            },
            "after {sql}"
        );
    }
}

#[test]
fn rewriting_a_row_with_a_recomputed_hash_still_breaks_the_next_link() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    audit_some(&mut store, 3);
    drop(store);
    // Someone rewrites row 2 and recomputes its hash correctly…
    let conn = rusqlite::Connection::open(dir.path().join("journal.db")).unwrap();
    conn.execute_batch("DROP TRIGGER audit_log_no_update;")
        .unwrap();
    let (prev, at_ms): (Vec<u8>, i64) = conn
        .query_row(
            "SELECT prev_hash, at_ms FROM audit_log WHERE seq = 2",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let forged_detail = r#"{"reason":"forged"}"#;
    let content = audit::tests_support::content_hash(
        &prev.try_into().unwrap(),
        2,
        at_ms,
        "gate.denied",
        Some(101),
        forged_detail,
    );
    conn.execute(
        "UPDATE audit_log SET detail = ?1, hash = ?2 WHERE seq = 2",
        rusqlite::params![forged_detail, content.as_slice()],
    )
    .unwrap();
    drop(conn);
    // …row 2 now verifies, but row 3 no longer follows it.
    let (store, _) = open(&dir);
    assert_eq!(
        store.verify_audit_chain().unwrap(),
        ChainVerdict::Broken {
            seq: 3,
            reason: BrokenLink::PrevHashMismatch
        }
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    #[test]
    fn any_single_field_edit_is_caught_at_its_row(
        rows in 1usize..8,
        pick in 0usize..8,
        column in 0usize..4,
    ) {
        let target = u64::try_from(pick % rows).unwrap() + 1;
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = open(&dir);
        audit_some(&mut store, rows);
        drop(store);
        let sql = match column {
            0 => format!("UPDATE audit_log SET detail = '{{\"reason\":\"edited\"}}' WHERE seq = {target}"),
            1 => format!("UPDATE audit_log SET event = 'gate.allowed' WHERE seq = {target}"),
            2 => format!("UPDATE audit_log SET vmid = NULL WHERE seq = {target}"),
            _ => format!("UPDATE audit_log SET at_ms = at_ms - 60000 WHERE seq = {target}"),
        };
        tamper(&dir, &sql);
        let (store, _) = open(&dir);
        proptest::prop_assert_eq!(
            store.verify_audit_chain().unwrap(),
            ChainVerdict::Broken { seq: target, reason: BrokenLink::ContentMismatch }
        );
    }
}

/// An operation done to a guest writes its `operation.finished` row in the transaction that
/// ends it; Bosun's own upkeep and operations of no guest write none. A guest reads only its
/// own rows and the host's break-glass rows (without the operator's key), newest first.
#[test]
fn finished_guest_operations_are_the_guests_to_read_and_only_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let op = |kind: OpKind, guest: Option<&str>| NewOperation {
        kind,
        guest_id: guest.map(str::to_owned),
        vmid: Some(101),
        job_id: None,
        request_id: None,
    };
    let finish = |store: &mut Store, new: NewOperation, status: OpStatus, error: Option<&str>| {
        let id = store.begin_operation(&new).unwrap();
        store.finish_operation(id, status, error).unwrap();
        id
    };
    let snapshot = finish(
        &mut store,
        op(OpKind::Snapshot, Some("g-1")),
        OpStatus::Done,
        None,
    );
    finish(
        &mut store,
        op(OpKind::DeliverBootstrap, Some("g-1")),
        OpStatus::Done,
        None,
    );
    finish(&mut store, op(OpKind::Backup, None), OpStatus::Done, None);
    let long = "x".repeat(1_000);
    finish(
        &mut store,
        op(OpKind::Backup, Some("g-2")),
        OpStatus::Failed,
        Some(&long),
    );
    let mut door = AuditEvent::new(BREAK_GLASS_OPENED);
    door.detail = json!({ "reason": "wedged", "fingerprint": "SHA256:key", "signer": "SHA256:s" });
    store.append_audit(&door).unwrap();
    assert_eq!(
        store.audit_since(0, 100).unwrap().len(),
        3,
        "two finished rows and the door"
    );

    let mine = store.guest_audit("g-1", None, 100).unwrap();
    assert_eq!(mine.len(), 2, "{mine:?}");
    assert_eq!(
        (mine[0].event.as_str(), mine[0].host_wide),
        (BREAK_GLASS_OPENED, true)
    );
    assert_eq!(mine[0].detail, json!({ "reason": "wedged" }));
    assert_eq!(mine[1].event, OPERATION_FINISHED);
    assert_eq!(
        mine[1].detail,
        json!({ "kind": "localapi.snapshot", "status": "done" })
    );
    let row = &store.audit_since(0, 1).unwrap()[0];
    assert_eq!(row.event.op_id, Some(snapshot));
    let theirs = store.guest_audit("g-2", None, 100).unwrap();
    assert_eq!(theirs.len(), 2);
    assert_eq!(theirs[1].detail["status"], "failed");
    assert_eq!(
        theirs[1].detail["error"].as_str().unwrap().chars().count(),
        300,
        "an error is cut for the guest"
    );
    // Pages: bounded, and `before` leads to the older rows.
    let first = store.guest_audit("g-1", None, 1).unwrap();
    let older = store.guest_audit("g-1", Some(first[0].seq), 1).unwrap();
    assert_eq!(older[0].seq, mine[1].seq);
    assert!(
        store
            .guest_audit("g-1", Some(mine[1].seq), 100)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.guest_audit("g-3", None, 100).unwrap().len(),
        1,
        "the door only"
    );
    assert_eq!(store.verify_audit_chain().unwrap(), store_intact(&store));
}

fn store_intact(store: &Store) -> ChainVerdict {
    let (rows, head) = store.audit_head().unwrap();
    ChainVerdict::Intact { rows, head }
}

/// A guest's page reads through an index, never by walking every guest's rows: each of its
/// two reads searches `audit_log` by an index (`SEARCH … USING INDEX`), none scans it.
#[test]
fn a_guests_page_searches_by_index_and_never_scans_the_log() {
    use crate::ops::journal::guest_audit::{GUEST_ROWS, HOST_WIDE_ROWS};

    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    audit_some(&mut store, 50);
    for (tail, index) in [
        (GUEST_ROWS, "audit_log_by_guest"),
        (HOST_WIDE_ROWS, "audit_log_by_event"),
    ] {
        let sql = format!("EXPLAIN QUERY PLAN SELECT seq FROM audit_log {tail}");
        let mut stmt = store.conn.prepare(&sql).unwrap();
        let params = (1..=stmt.parameter_count())
            .map(|_| rusqlite::types::Value::Null)
            .collect::<Vec<_>>();
        let plan: Vec<String> = stmt
            .query_map(rusqlite::params_from_iter(params), |r| {
                r.get::<_, String>(3)
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(
            plan.iter()
                .any(|l| l.starts_with("SEARCH audit_log USING") && l.contains(index)),
            "{tail}: {plan:?}"
        );
        assert!(
            !plan.iter().any(|l| l.starts_with("SCAN audit_log")),
            "{tail}: {plan:?}"
        );
    }
}
