use std::time::Duration;

use jiff::Timestamp;
use secrecy::SecretString;
use serde_json::json;

use super::*;
use crate::clock::ManualClock;
use crate::ops::operation::OpKind;

mod addresses;
mod applied;
mod audit;
mod audit_retention;
mod backups;
mod bulk_archives;
mod failures;
mod golden;
mod guest_access;
mod identity;
mod late_landings;
mod verifications;

fn start() -> Timestamp {
    "2026-03-01T12:00:00Z".parse().unwrap()
}

fn open(dir: &tempfile::TempDir) -> (Store, ManualClock) {
    let clock = ManualClock::new(start());
    let store = Store::open(&dir.path().join("journal.db"), clock.shared()).unwrap();
    (store, clock)
}

fn provision() -> NewOperation {
    NewOperation {
        kind: OpKind::Provision,
        guest_id: Some("g-1".into()),
        vmid: Some(101),
        job_id: None,
        request_id: Some("req-7".into()),
    }
}

fn claim(job_id: &str, nonce: &str) -> JobClaim {
    JobClaim {
        job_id: job_id.into(),
        kind: "restore".into(),
        nonce: nonce.into(),
        expires_at: start() + jiff::SignedDuration::from_hours(1),
        signer_fingerprint: "SHA256:abc".into(),
        principals: "ops@example.com".into(),
        timeout_s: None,
    }
}

#[test]
fn a_cached_statement_is_not_compiled_again_when_its_values_change() {
    use rusqlite::StatementStatus;
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&dir);
    // A bound value compared where a partial index looks (`operations_running` holds
    // `status = 'running'`): without the planner's stability guarantee, SQLite compiles such a
    // statement again at each new value.
    let sql = "SELECT count(*) FROM operations WHERE status = ?1";
    for status in ["running", "done", "running", "failed"] {
        let mut stmt = store.conn.prepare_cached(sql).unwrap();
        let _: i64 = stmt.query_row([status], |r| r.get(0)).unwrap();
        assert_eq!(
            stmt.get_status(StatementStatus::RePrepare),
            0,
            "compiled again for {status}"
        );
    }
}

#[test]
fn opens_in_wal_with_full_sync_and_current_schema() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&dir);
    let mode: String = store
        .conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let sync: i64 = store
        .conn
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .unwrap();
    assert_eq!(sync, 2, "synchronous must be FULL");
    let version: i64 = store
        .conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
}

#[test]
fn database_and_wal_are_private_to_the_agent() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    store.begin_operation(&provision()).unwrap();
    for name in ["journal.db", "journal.db-wal"] {
        let mode = std::fs::metadata(dir.path().join(name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{name}");
    }
}

#[test]
fn refuses_a_newer_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    drop(open(&dir));
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    drop(conn);
    let err = Store::open(&path, ManualClock::new(start()).shared()).unwrap_err();
    assert!(
        matches!(err, JournalError::SchemaTooNew { found, known } if found == SCHEMA_VERSION + 1 && known == SCHEMA_VERSION),
        "{err:?}"
    );
}

#[test]
fn refuses_a_file_that_is_not_a_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    std::fs::write(&path, b"this is not an sqlite database, just some text").unwrap();
    let err = Store::open(&path, ManualClock::new(start()).shared()).unwrap_err();
    assert!(
        matches!(err, JournalError::Open { .. } | JournalError::Query { .. }),
        "{err:?}"
    );
}

#[test]
fn reopening_keeps_data_and_does_not_migrate_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let op = store.begin_operation(&provision()).unwrap();
    drop(store);
    let (store, _) = open(&dir);
    assert_eq!(store.operation(op).unwrap().unwrap().kind, "provision");
}

#[test]
fn step_lifecycle_records_intent_upid_and_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, clock) = open(&dir);
    let op = store.begin_operation(&provision()).unwrap();
    let seq = store
        .step_intent(
            op,
            "restore",
            &json!({"vmid": 101, "archive": "local:backup/base.tar.zst"}),
        )
        .unwrap();
    assert_eq!(seq, 1);
    clock.advance(Duration::from_secs(1));
    let upid = "UPID:pve:0000A1B2:0001C3D4:65F0A1B2:vzrestore:101:bosun@pve!agent:";
    store.step_sent(op, seq, Some(upid)).unwrap();
    clock.advance(Duration::from_secs(30));
    store
        .step_finished(op, seq, &StepOutcome::Ok { warnings: 2 })
        .unwrap();
    let s2 = store
        .step_intent(op, "start", &json!({"vmid": 101}))
        .unwrap();
    assert_eq!(s2, 2);
    store
        .step_finished(op, s2, &StepOutcome::Ok { warnings: 0 })
        .unwrap();
    store.finish_operation(op, OpStatus::Done, None).unwrap();

    let steps = store.steps(op).unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].state, StepState::Ok);
    assert_eq!(steps[0].upid.as_deref(), Some(upid));
    assert_eq!(steps[0].warnings, Some(2));
    assert_eq!(steps[0].intent_at, start());
    assert_eq!(
        steps[0].sent_at,
        Some(start() + jiff::SignedDuration::from_secs(1))
    );
    assert_eq!(
        steps[0].ended_at,
        Some(start() + jiff::SignedDuration::from_secs(31))
    );
    assert_eq!(steps[0].detail["archive"], "local:backup/base.tar.zst");
    assert_eq!(steps[1].upid, None);
    let op_row = store.operation(op).unwrap().unwrap();
    assert_eq!(op_row.status, OpStatus::Done);
    assert_eq!(op_row.request_id.as_deref(), Some("req-7"));
    assert!(store.unfinished_operations().unwrap().is_empty());
}

#[test]
fn step_order_is_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let op = store.begin_operation(&provision()).unwrap();
    let seq = store.step_intent(op, "restore", &json!({})).unwrap();
    // A second intent while the first is open is refused.
    let err = store.step_intent(op, "start", &json!({})).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::StepStillOpen {
                seq: 1,
                state: StepState::Intent,
                ..
            }
        ),
        "{err:?}"
    );
    // Finishing the operation with an open step is refused.
    let err = store
        .finish_operation(op, OpStatus::Done, None)
        .unwrap_err();
    assert!(matches!(err, JournalError::StepStillOpen { .. }), "{err:?}");
    store
        .step_finished(
            op,
            seq,
            &StepOutcome::Failed {
                error: "exit code 1".into(),
            },
        )
        .unwrap();
    // A finished step cannot be sent or finished again.
    let err = store.step_sent(op, seq, Some("UPID:x")).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::StepTransition {
                from: StepState::Failed,
                to: StepState::Sent,
                ..
            }
        ),
        "{err:?}"
    );
    let err = store
        .step_finished(op, seq, &StepOutcome::Ok { warnings: 0 })
        .unwrap_err();
    assert!(
        matches!(err, JournalError::StepTransition { .. }),
        "{err:?}"
    );
    let err = store.step_sent(op, 9, None).unwrap_err();
    assert!(
        matches!(err, JournalError::UnknownStep { seq: 9, .. }),
        "{err:?}"
    );
    // A running status is not an end.
    let err = store
        .finish_operation(op, OpStatus::Running, None)
        .unwrap_err();
    assert!(matches!(err, JournalError::NotTerminal { .. }), "{err:?}");
    store
        .finish_operation(op, OpStatus::Failed, Some("restore failed"))
        .unwrap();
    // Nothing more once ended.
    let err = store.step_intent(op, "start", &json!({})).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::OperationEnded {
                status: OpStatus::Failed,
                ..
            }
        ),
        "{err:?}"
    );
    let err = store
        .finish_operation(op, OpStatus::Done, None)
        .unwrap_err();
    assert!(
        matches!(err, JournalError::OperationEnded { .. }),
        "{err:?}"
    );
    let unknown = OpId::new();
    let err = store.step_intent(unknown, "x", &json!({})).unwrap_err();
    assert!(
        matches!(err, JournalError::UnknownOperation { op_id } if op_id == unknown),
        "{err:?}"
    );
}

#[test]
fn replay_lists_unfinished_operations_with_their_last_step() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, clock) = open(&dir);
    let done = store.begin_operation(&provision()).unwrap();
    store.finish_operation(done, OpStatus::Done, None).unwrap();
    clock.advance(Duration::from_secs(1));
    let a = store.begin_operation(&provision()).unwrap();
    let s = store.step_intent(a, "restore", &json!({})).unwrap();
    store.step_sent(a, s, Some("UPID:a")).unwrap();
    clock.advance(Duration::from_secs(1));
    let b = store.begin_operation(&provision()).unwrap();
    drop(store);

    let (store, _) = open(&dir);
    let unfinished = store.unfinished_operations().unwrap();
    assert_eq!(unfinished.len(), 2);
    assert_eq!(unfinished[0].operation.op_id, a);
    let last = unfinished[0].last_step.as_ref().unwrap();
    assert_eq!(
        (last.seq, last.state, last.upid.as_deref()),
        (1, StepState::Sent, Some("UPID:a"))
    );
    assert_eq!(unfinished[1].operation.op_id, b);
    assert!(unfinished[1].last_step.is_none());
}

#[test]
fn a_job_runs_at_most_once_and_a_nonce_is_seen_once_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    store.claim_job(&claim("job-1", "n-1")).unwrap();
    assert!(store.nonce_seen("n-1").unwrap());
    assert!(!store.nonce_seen("n-2").unwrap());
    drop(store);

    let (mut store, _) = open(&dir);
    let err = store.claim_job(&claim("job-1", "n-9")).unwrap_err();
    assert!(
        matches!(&err, JournalError::JobAlreadyRun { job_id, outcome: None } if job_id == "job-1"),
        "{err:?}"
    );
    let err = store.claim_job(&claim("job-2", "n-1")).unwrap_err();
    assert!(
        matches!(&err, JournalError::NonceReused { first_job_id } if first_job_id == "job-1"),
        "{err:?}"
    );
    // The refused claims left nothing behind.
    assert!(store.job_run("job-2").unwrap().is_none());
    assert!(!store.nonce_seen("n-9").unwrap());

    let op = store
        .begin_operation(&NewOperation {
            job_id: Some("job-1".into()),
            ..provision()
        })
        .unwrap();
    store
        .finish_job("job-1", JobOutcome::Succeeded, Some(op), Some("restored"))
        .unwrap();
    let run = store.job_run("job-1").unwrap().unwrap();
    assert_eq!(run.outcome, Some(JobOutcome::Succeeded));
    assert_eq!(run.op_id, Some(op));
    assert_eq!(run.principals, "ops@example.com");
    let err = store
        .finish_job("job-1", JobOutcome::Failed, None, None)
        .unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::JobAlreadyRun {
                outcome: Some(JobOutcome::Succeeded),
                ..
            }
        ),
        "{err:?}"
    );
    let err = store
        .finish_job("nope", JobOutcome::Failed, None, None)
        .unwrap_err();
    assert!(matches!(err, JournalError::UnknownJob { .. }), "{err:?}");
    let err = store.claim_job(&claim("job-1", "n-10")).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::JobAlreadyRun {
                outcome: Some(JobOutcome::Succeeded),
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn nonces_are_pruned_only_after_their_job_expired() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    store.claim_job(&claim("job-1", "n-1")).unwrap();
    let mut late = claim("job-2", "n-2");
    late.expires_at = start() + jiff::SignedDuration::from_hours(48);
    store.claim_job(&late).unwrap();
    assert_eq!(store.prune_nonces(start(), 100).unwrap(), 0);
    assert_eq!(
        store
            .prune_nonces(start() + jiff::SignedDuration::from_hours(2), 100)
            .unwrap(),
        1
    );
    assert!(!store.nonce_seen("n-1").unwrap());
    assert!(store.nonce_seen("n-2").unwrap());
    // The job id still refuses a rerun after its nonce is gone.
    let err = store.claim_job(&claim("job-1", "n-1")).unwrap_err();
    assert!(matches!(err, JournalError::JobAlreadyRun { .. }), "{err:?}");
}

#[test]
fn a_prune_forgets_at_most_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    for i in 0..5 {
        store
            .claim_job(&claim(&format!("job-{i}"), &format!("n-{i}")))
            .unwrap();
    }
    let later = start() + jiff::SignedDuration::from_hours(2);
    assert_eq!(store.prune_nonces(later, 3).unwrap(), 3);
    assert_eq!(store.prune_nonces(later, 3).unwrap(), 2);
    assert_eq!(store.prune_nonces(later, 3).unwrap(), 0);
    assert!((0..5).all(|i| !store.nonce_seen(&format!("n-{i}")).unwrap()));
}

#[test]
fn only_the_creating_operation_marks_a_guest_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let creator = store.begin_operation(&provision()).unwrap();
    let other = store.begin_operation(&provision()).unwrap();
    store
        .record_created(creator, 9001, None, bosun_proto::desired::GuestKind::Lxc)
        .unwrap();
    assert!(!store.provenance(9001).unwrap().unwrap().is_scratch());

    let err = store.mark_scratch(other, 9001).unwrap_err();
    assert!(
        matches!(err, JournalError::ScratchRefused { created_by_op: Some(c), .. } if c == creator),
        "{err:?}"
    );
    let err = store.mark_scratch(creator, 9002).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::ScratchRefused {
                created_by_op: None,
                ..
            }
        ),
        "{err:?}"
    );
    store.mark_scratch(creator, 9001).unwrap();
    let p = store.provenance(9001).unwrap().unwrap();
    assert!(p.is_scratch());
    assert_eq!(p.created_by_op(), creator);

    let err = store
        .record_created(other, 9001, None, bosun_proto::desired::GuestKind::Lxc)
        .unwrap_err();
    assert!(
        matches!(err, JournalError::VmidAlreadyRecorded { vmid: 9001, .. }),
        "{err:?}"
    );

    store
        .finish_operation(creator, OpStatus::Done, None)
        .unwrap();
    // An ended operation can no longer mark anything.
    store
        .record_created(other, 9003, None, bosun_proto::desired::GuestKind::Lxc)
        .unwrap();
    let err = store.mark_scratch(creator, 9003).unwrap_err();
    assert!(
        matches!(err, JournalError::OperationEnded { .. }),
        "{err:?}"
    );

    assert!(store.forget_guest(other, 9001).unwrap());
    assert!(store.provenance(9001).unwrap().is_none());
    assert!(!store.forget_guest(other, 9001).unwrap());
    assert!(
        store.provenance(101).unwrap().is_none(),
        "unknown guests have no provenance"
    );
}

#[test]
fn token_hashes_map_to_one_guest_and_last_write_wins() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let first = TokenHash::of(&SecretString::from("first-token"));
    let second = TokenHash::of(&SecretString::from("second-token"));
    store.store_token_hash("g-1", 101, &first).unwrap();
    assert_eq!(
        store.token_owner(&first).unwrap(),
        Some(TokenOwner {
            guest_id: "g-1".into(),
            vmid: 101
        })
    );
    store.store_token_hash("g-1", 101, &second).unwrap();
    assert_eq!(store.token_owner(&first).unwrap(), None);
    assert_eq!(store.token_owner(&second).unwrap().unwrap().guest_id, "g-1");
    let err = store.store_token_hash("g-2", 102, &second).unwrap_err();
    assert!(
        matches!(err, JournalError::TokenCollision { .. }),
        "{err:?}"
    );
    // Only the digest is stored, never the token.
    let stored: Vec<u8> = store
        .conn
        .query_row("SELECT token_sha256 FROM local_api_tokens", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(stored, second.as_bytes().to_vec());
    assert!(!format!("{second:?}").contains("second-token"));
    assert!(store.revoke_token("g-1").unwrap());
    assert_eq!(store.token_owner(&second).unwrap(), None);
}

#[test]
fn the_guests_holding_tokens_are_read_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    assert!(store.guests_with_tokens().unwrap().is_empty());
    for (guest, vmid) in [("g-1", 101), ("g-2", 102), ("g-3", 103)] {
        let token = TokenHash::of(&SecretString::from(format!("token-of-{guest}")));
        store.store_token_hash(guest, vmid, &token).unwrap();
    }
    assert!(store.revoke_token("g-2").unwrap());
    let holding = store.guests_with_tokens().unwrap();
    assert_eq!(
        holding.into_iter().collect::<Vec<_>>(),
        vec!["g-1".to_owned(), "g-3".to_owned()]
    );
}

#[test]
fn desired_state_cache_holds_the_document_acted_on() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    assert!(store.cached_desired_state().unwrap().is_none());
    assert_eq!(
        store.cache_desired_state(5, r#"{"g":5}"#).unwrap(),
        CacheOutcome::Stored
    );
    assert_eq!(
        store.cache_desired_state(4, r#"{"g":4}"#).unwrap(),
        CacheOutcome::Reset { previous: 5 }
    );
    drop(store);
    let (store, _) = open(&dir);
    let cached = store.cached_desired_state().unwrap().unwrap();
    assert_eq!(
        (cached.generation, cached.body.as_str()),
        (4, r#"{"g":4}"#),
        "the cache holds what the agent acts on, even a lower generation"
    );
    let mut store = store;
    assert_eq!(
        store.cache_desired_state(6, r#"{"g":6}"#).unwrap(),
        CacheOutcome::Stored
    );
    let err = store.cache_desired_state(u64::MAX, "{}").unwrap_err();
    assert!(
        matches!(err, JournalError::GenerationTooLarge { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn handle_runs_calls_on_the_journal_thread_and_closes() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(start());
    let handle = JournalHandle::open(&dir.path().join("journal.db"), clock.shared())
        .await
        .unwrap();
    let clones: Vec<_> = (0..8).map(|_| handle.clone()).collect();
    let mut tasks = Vec::new();
    for (i, h) in clones.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let op = h.begin_operation(provision()).await.unwrap();
            let seq = h
                .step_intent(op, "restore", json!({ "i": i }))
                .await
                .unwrap();
            h.step_sent(op, seq, Some(format!("UPID:{i}")))
                .await
                .unwrap();
            op
        }));
    }
    let mut ops = Vec::new();
    for t in tasks {
        ops.push(t.await.unwrap());
    }
    let unfinished = handle.unfinished_operations().await.unwrap();
    assert_eq!(unfinished.len(), 8);
    for op in ops {
        assert!(unfinished.iter().any(|u| u.operation.op_id == op));
    }
    handle.close().await.unwrap();
    let err = handle.operation(OpId::new()).await.unwrap_err();
    assert!(matches!(err, JournalError::Closed), "{err:?}");
    // The data is on disk once closed.
    let store = Store::open(&dir.path().join("journal.db"), clock.shared()).unwrap();
    assert_eq!(store.unfinished_operations().unwrap().len(), 8);
}

#[tokio::test]
async fn handle_open_reports_a_bad_path() {
    let dir = tempfile::tempdir().unwrap();
    let err = JournalHandle::open(
        &dir.path().join("missing-dir").join("journal.db"),
        ManualClock::new(start()).shared(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, JournalError::Create { .. }), "{err:?}");
}
