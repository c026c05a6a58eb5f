//! Audit retention: only acknowledged rows beyond the bound are pruned, oldest first, and
//! the chain of what remains still verifies and grows from the anchor.

use std::time::Duration;

use serde_json::json;

use super::open;
use crate::ops::journal::*;

fn audit_some(store: &mut Store, n: usize) {
    for i in 0..n {
        let mut event = AuditEvent::new("gate.denied");
        event.detail = json!({ "row": i });
        store.append_audit(&event).unwrap();
    }
}

fn seqs(store: &Store) -> Vec<u64> {
    store
        .audit_since(0, 10_000)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect()
}

fn rows(max_rows: u64) -> AuditRetention {
    AuditRetention {
        max_rows,
        ..AuditRetention::default()
    }
}

#[test]
fn rows_the_hub_has_not_acknowledged_are_never_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, clock) = open(&dir);
    audit_some(&mut store, 50);
    clock.advance(Duration::from_secs(400 * 24 * 3600));
    let strict = AuditRetention {
        max_rows: 0,
        max_age: Duration::from_secs(1),
    };
    let pruned = store.ack_audit(0, strict).unwrap();
    assert_eq!(pruned.rows, 0);
    assert_eq!(
        seqs(&store).len(),
        50,
        "nothing acknowledged, nothing dropped"
    );

    // The hub holds rows 1..=30: only those may go, even though the bound asks for more.
    let (_, head) = store.audit_head().unwrap();
    let pruned = store.ack_audit(30, strict).unwrap();
    assert_eq!(
        (pruned.acked_seq, pruned.rows, pruned.through_seq),
        (30, 30, 30)
    );
    assert_eq!(seqs(&store), (31..=50).collect::<Vec<_>>());
    assert_eq!(store.audit_acked().unwrap(), 30);
    assert_eq!(
        store.verify_audit_chain().unwrap(),
        ChainVerdict::Intact { rows: 50, head },
        "the rest verifies from the anchor"
    );
    // An older acknowledgement does not move anything back.
    assert_eq!(store.ack_audit(10, strict).unwrap().acked_seq, 30);
}

#[test]
fn acknowledged_rows_beyond_the_count_or_age_bound_are_pruned_and_the_chain_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, clock) = open(&dir);
    audit_some(&mut store, 40);
    // Within the bound: acknowledged but kept.
    assert_eq!(store.ack_audit(40, rows(100)).unwrap().rows, 0);
    assert_eq!(seqs(&store).len(), 40);
    // Over the count bound: the oldest go, the newest 25 stay.
    let pruned = store.ack_audit(40, rows(25)).unwrap();
    assert_eq!((pruned.rows, pruned.through_seq), (15, 15));
    assert_eq!(seqs(&store), (16..=40).collect::<Vec<_>>());

    // Older than max_age: pruned under the count bound too.
    clock.advance(Duration::from_secs(48 * 3600));
    audit_some(&mut store, 5);
    let by_age = AuditRetention {
        max_rows: 1000,
        max_age: Duration::from_secs(24 * 3600),
    };
    let pruned = store.ack_audit(45, by_age).unwrap();
    assert_eq!(pruned.through_seq, 40);
    assert_eq!(seqs(&store), (41..=45).collect::<Vec<_>>());

    // Everything pruned: the chain still continues from the anchor, not from genesis.
    let (_, head45) = store.audit_head().unwrap();
    clock.advance(Duration::from_secs(48 * 3600));
    store.ack_audit(45, by_age).unwrap();
    assert!(seqs(&store).is_empty());
    assert_eq!(store.audit_head().unwrap(), (45, head45));
    audit_some(&mut store, 2);
    assert_eq!(seqs(&store), vec![46, 47]);
    assert!(matches!(
        store.verify_audit_chain().unwrap(),
        ChainVerdict::Intact { rows: 47, .. }
    ));
    drop(store);
    let (store, _) = open(&dir);
    assert!(matches!(
        store.verify_audit_chain().unwrap(),
        ChainVerdict::Intact { rows: 47, .. }
    ));
}

#[test]
fn triggers_refuse_deleting_unpruned_rows_and_pruning_past_the_acknowledgement() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    audit_some(&mut store, 10);
    store.ack_audit(5, rows(100)).unwrap();
    let err = store
        .conn
        .execute("DELETE FROM audit_log WHERE seq = 1", [])
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
    let err = store
        .conn
        .execute("UPDATE audit_retention SET pruned_seq = 8 WHERE id = 1", [])
        .unwrap_err();
    assert!(err.to_string().contains("acknowledged"), "{err}");
    let err = store
        .conn
        .execute("UPDATE audit_retention SET acked_seq = 2 WHERE id = 1", [])
        .unwrap_err();
    assert!(err.to_string().contains("forward"), "{err}");
    // Cutting rows off the front by hand (triggers dropped) is a gap at the anchor.
    let conn = rusqlite::Connection::open(dir.path().join("journal.db")).unwrap();
    conn.execute_batch("DROP TRIGGER audit_log_no_delete; DELETE FROM audit_log WHERE seq <= 3;")
        .unwrap();
    assert_eq!(
        store.verify_audit_chain().unwrap(),
        ChainVerdict::Broken {
            seq: 4,
            reason: BrokenLink::Gap { expected: 1 }
        }
    );
}
