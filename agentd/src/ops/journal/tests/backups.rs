//! Backup outcomes and the newest backup per (guest, storage).

use std::time::Duration;

use super::*;
use crate::clock::Clock;

fn backup_of(guest: Option<&str>, vmid: u32) -> NewOperation {
    NewOperation {
        kind: OpKind::Backup,
        guest_id: guest.map(str::to_owned),
        vmid: Some(vmid),
        job_id: None,
        request_id: None,
    }
}

fn ok(storage: &str, archive: &str, size: u64) -> BackupOutcome {
    BackupOutcome {
        storage: storage.into(),
        ok: true,
        archive: Some(archive.into()),
        size_bytes: Some(size),
        ..BackupOutcome::default()
    }
}

fn failed(storage: &str) -> BackupOutcome {
    BackupOutcome {
        storage: storage.into(),
        ok: false,
        ..BackupOutcome::default()
    }
}

/// Runs one backup operation of `guest` to its end with `outcome`.
fn take(store: &mut Store, guest: &str, vmid: u32, outcome: &BackupOutcome) -> OpId {
    let op = store
        .begin_operation(&backup_of(Some(guest), vmid))
        .unwrap();
    let error = (!outcome.ok).then_some("vzdump failed: exit code 255");
    store.finish_backup(op, outcome, error).unwrap();
    op
}

#[test]
fn a_later_failure_replaces_a_success_on_the_same_storage() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, clock) = open(&dir);
    let first = take(
        &mut store,
        "g-1",
        101,
        &ok("local", "local:backup/vzdump-lxc-101.tar.zst", 4096),
    );
    let done_at = clock.now();
    let only = store.last_backups().unwrap();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].op_id, first);
    assert_eq!(only[0].finished_at, done_at);
    assert!(only[0].ok);
    assert_eq!(only[0].size_bytes, Some(4096));
    assert_eq!(
        only[0].archive.as_deref(),
        Some("local:backup/vzdump-lxc-101.tar.zst")
    );
    assert_eq!(
        store.operation(first).unwrap().unwrap().status,
        OpStatus::Done
    );

    clock.advance(Duration::from_secs(60));
    let second = take(&mut store, "g-1", 101, &failed("local"));
    let last = store.last_backups().unwrap();
    assert_eq!(last.len(), 1, "one entry per (guest, storage)");
    assert_eq!(last[0].op_id, second);
    assert!(!last[0].ok);
    assert_eq!(last[0].finished_at, done_at + Duration::from_secs(60));
    assert_eq!((last[0].archive.as_ref(), last[0].size_bytes), (None, None));
    let op = store.operation(second).unwrap().unwrap();
    assert_eq!(op.status, OpStatus::Failed);
    assert_eq!(op.error.as_deref(), Some("vzdump failed: exit code 255"));
}

#[test]
fn each_storage_and_guest_keeps_its_own_newest_and_a_guest_without_backups_has_none() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, clock) = open(&dir);
    take(&mut store, "g-1", 101, &ok("local", "local:backup/a", 1));
    clock.advance(Duration::from_secs(1));
    take(&mut store, "g-1", 101, &ok("nfs", "nfs:backup/b", 2));
    clock.advance(Duration::from_secs(1));
    take(&mut store, "g-2", 102, &failed("local"));
    clock.advance(Duration::from_secs(1));
    take(&mut store, "g-1", 101, &ok("local", "local:backup/c", 3));
    // g-3 has an operation, but no backup of it finished.
    store.begin_operation(&backup_of(Some("g-3"), 103)).unwrap();

    let last: Vec<(String, String, bool, Option<u64>)> = store
        .last_backups()
        .unwrap()
        .into_iter()
        .map(|b| (b.guest_id, b.storage, b.ok, b.size_bytes))
        .collect();
    assert_eq!(
        last,
        vec![
            ("g-1".into(), "local".into(), true, Some(3)),
            ("g-1".into(), "nfs".into(), true, Some(2)),
            ("g-2".into(), "local".into(), false, None),
        ]
    );
}

#[test]
fn outcomes_need_a_running_operation_that_names_a_guest_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let anonymous = store.begin_operation(&backup_of(None, 101)).unwrap();
    let err = store
        .record_backup(anonymous, &failed("local"))
        .unwrap_err();
    assert!(
        matches!(err, JournalError::BackupWithoutGuest { op_id } if op_id == anonymous),
        "{err:?}"
    );
    let done = take(&mut store, "g-1", 101, &ok("local", "local:backup/a", 1));
    let err = store.record_backup(done, &failed("local")).unwrap_err();
    assert!(
        matches!(err, JournalError::OperationEnded { .. }),
        "{err:?}"
    );
    let err = store
        .record_backup(
            anonymous,
            &BackupOutcome {
                size_bytes: Some(u64::MAX),
                ..ok("local", "local:backup/x", 0)
            },
        )
        .unwrap_err();
    assert!(matches!(err, JournalError::SizeTooLarge { .. }), "{err:?}");

    // A job records the outcome first and ends its operation later.
    let job = store.begin_operation(&backup_of(Some("g-2"), 102)).unwrap();
    store
        .record_backup(job, &ok("nfs", "nfs:backup/j", 9))
        .unwrap();
    store.finish_operation(job, OpStatus::Done, None).unwrap();

    drop(store);
    let (store, _) = open(&dir);
    let last = store.last_backups().unwrap();
    assert_eq!(last.len(), 2);
    assert_eq!((last[0].op_id, last[1].op_id), (done, job));
}

#[test]
fn migrating_from_version_two_carries_over_finished_backups() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, clock) = open(&dir);
    let vzdump = |store: &mut Store, guest: &str, status: OpStatus| {
        let op = store.begin_operation(&backup_of(Some(guest), 101)).unwrap();
        let seq = store
            .step_intent(op, "vzdump", &json!({ "vmid": 101, "storage": "local" }))
            .unwrap();
        let outcome = match status {
            OpStatus::Done => StepOutcome::Ok { warnings: 0 },
            _ => StepOutcome::Failed {
                error: "exit code 255".into(),
            },
        };
        store.step_finished(op, seq, &outcome).unwrap();
        store.finish_operation(op, status, None).unwrap();
        op
    };
    let good = vzdump(&mut store, "g-1", OpStatus::Done);
    clock.advance(Duration::from_secs(5));
    let bad = vzdump(&mut store, "g-2", OpStatus::Failed);
    // Still running at the upgrade: not a finished backup.
    store.begin_operation(&backup_of(Some("g-3"), 103)).unwrap();
    // Back to what a version-2 agent left behind.
    crate::ops::journal::schema::rewind(&store.conn, 2).unwrap();
    drop(store);

    let (store, _) = open(&dir);
    let last = store.last_backups().unwrap();
    let got: Vec<(OpId, &str, bool)> = last
        .iter()
        .map(|b| (b.op_id, b.storage.as_str(), b.ok))
        .collect();
    assert_eq!(got, vec![(good, "local", true), (bad, "local", false)]);
    assert_eq!(last[1].finished_at, start() + Duration::from_secs(5));
    assert_eq!(last[0].archive, None, "version 2 did not record archives");
}

#[test]
fn the_last_good_backup_survives_a_later_failure_and_tiers_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, clock) = open(&dir);
    let good = BackupOutcome {
        target: Some("backup@pbs@pbs.example:store1".into()),
        tier: Some(1),
        warnings: 2,
        encrypted: true,
        started_at: Some(clock.now()),
        ..ok(
            "bosun-pbs-1a2b3c4d",
            "bosun-pbs-1a2b3c4d:backup/ct/100/2026-11-20T01:00:00Z",
            9,
        )
    };
    take(&mut store, "g", 100, &good);
    let good_at = store.last_backups().unwrap()[0].finished_at;
    clock.advance(Duration::from_secs(60));
    let bad = BackupOutcome {
        target: good.target.clone(),
        tier: Some(1),
        ..failed("bosun-pbs-1a2b3c4d")
    };
    take(&mut store, "g", 100, &bad);
    let last = store.last_backups().unwrap();
    assert_eq!(last.len(), 1);
    let b = &last[0];
    assert!(!b.ok);
    assert_eq!(b.error.as_deref(), Some("vzdump failed: exit code 255"));
    assert_eq!(b.target.as_deref(), Some("backup@pbs@pbs.example:store1"));
    assert_eq!(b.tier, Some(1));
    assert_eq!(b.last_ok_at, Some(good_at));
    assert!(b.finished_at > good_at);
}
