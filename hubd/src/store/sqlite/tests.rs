//! Checks of what only the SQLite store does: the monitored-host count its triggers keep, and
//! read connections that keep their memory map across the writer's commits.
#![allow(clippy::unwrap_used)]

use rusqlite::Connection;
use uuid::Uuid;

use super::{DB_FILE, SqliteStore};
use crate::store::tests::{NOW, enroll, poll};
use crate::store::{HostStore as _, PollStore as _};

/// The count the triggers keep and a full count of the same hosts, read on a connection of
/// their own (what was committed).
fn counts(dir: &std::path::Path) -> (i64, i64) {
    let conn = Connection::open(dir.join(DB_FILE)).unwrap();
    let kept = conn
        .query_row(
            "SELECT value FROM meta WHERE key = ?1",
            [super::monitored::MONITORED_KEY],
            |r| r.get(0),
        )
        .unwrap();
    let full = conn
        .query_row(
            "SELECT COUNT(*) FROM hosts WHERE status = 'active' AND last_seen_ms IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    (kept, full)
}

fn polled(store: &SqliteStore, host: Uuid, key: crate::secret::SecretHash) {
    store.record_polls(vec![poll(host, key)]).unwrap()[0]
        .as_ref()
        .unwrap();
}

/// Moves a host's status on the writer's connection, as no store call does for a host that
/// polled (an approval finds it pending before its first poll).
fn set_status(store: &SqliteStore, host: Uuid, status: &str) {
    store
        .hold_writer()
        .execute(
            "UPDATE hosts SET status = ?1 WHERE host_id = ?2",
            [status, &host.to_string()],
        )
        .unwrap();
}

#[test]
fn the_monitored_host_count_stays_a_full_count_through_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let expect = |want: i64, step: &str| {
        assert_eq!(counts(dir.path()), (want, want), "after {step}");
    };
    expect(0, "opening an empty hub");

    // Enrolled hosts are watched from their first poll on, once each.
    let (a, a_key) = enroll(&store, None);
    let (b, b_key) = enroll(&store, None);
    let (c, _) = enroll(&store, None);
    expect(0, "enrolling three hosts");
    polled(&store, a, a_key);
    polled(&store, b, b_key);
    expect(2, "two first polls");
    polled(&store, a, a_key);
    polled(&store, b, b_key);
    expect(2, "polls of watched hosts");

    // Monitoring off and on: a revocation, and a status moved by hand both ways.
    store.revoke_host(b, NOW + 1).unwrap();
    expect(1, "revoking a watched host");
    store.revoke_host(c, NOW + 1).unwrap();
    expect(1, "revoking a host that never polled");
    set_status(&store, a, "pending_approval");
    expect(0, "a watched host set pending");
    set_status(&store, a, "active");
    expect(1, "the host set active again");

    // A revoked host restored onto a new box is watched again from its first poll.
    let (restored, restored_key) = enroll(&store, Some(b));
    assert_eq!(restored, b);
    expect(1, "restoring a revoked host");
    polled(&store, b, restored_key);
    expect(2, "the restored host's first poll");

    // Removing hosts: one never watched, then one that was.
    store.remove_host(c, true, NOW + 2).unwrap();
    expect(2, "removing a revoked host");
    store.revoke_host(a, NOW + 3).unwrap();
    store.remove_host(a, true, NOW + 3).unwrap();
    expect(1, "revoking and removing a watched host");
    drop(store);

    // A database whose count went astray (another build wrote it) is counted again on open.
    Connection::open(dir.path().join(DB_FILE))
        .unwrap()
        .execute(
            "UPDATE meta SET value = 42 WHERE key = ?1",
            [super::monitored::MONITORED_KEY],
        )
        .unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    expect(1, "opening the hub again");
    let (d, d_key) = enroll(&store, None);
    polled(&store, d, d_key);
    expect(2, "a first poll after opening again");
}

#[test]
fn a_reader_keeps_its_memory_map_across_the_writers_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let (host, key) = enroll(&store, None);
    polled(&store, host, key);
    crate::store::backend::Backend::flush(&store).unwrap();
    let listed = |want: usize| {
        assert_eq!(store.list_hosts().unwrap().len(), want);
        store
            .reader_map_drops()
            .expect("readers use the keep-map VFS")
    };
    let opened = listed(1);

    // Commits that leave the database file as large as it was (they are in the log): every
    // read after one keeps the map, and sees the commit.
    let mut hosts = 1;
    for round in 1..=3 {
        enroll(&store, None);
        hosts += 1;
        assert_eq!(
            listed(hosts),
            (opened.0 + round, opened.1),
            "read {round} after a commit (kept, dropped)"
        );
    }

    // A checkpoint that grows the file: the next read maps it again, the one after keeps it.
    for _ in 0..200 {
        enroll(&store, None);
    }
    hosts += 200;
    let before = std::fs::metadata(dir.path().join(DB_FILE)).unwrap().len();
    crate::store::backend::Backend::flush(&store).unwrap();
    let after = std::fs::metadata(dir.path().join(DB_FILE)).unwrap().len();
    assert!(
        after > before,
        "the checkpoint grew the file ({before} → {after})"
    );
    let (kept, dropped) = listed(hosts);
    assert_eq!(dropped, opened.1 + 1, "a grown file is mapped again");
    enroll(&store, None);
    assert_eq!(listed(hosts + 1), (kept + 1, dropped));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(
    clippy::await_holding_lock,
    reason = "the held sync is the slow disk the test is about"
)]
async fn a_poll_waiting_for_the_disk_holds_back_no_other_batch() {
    use crate::poll_writer_task::PollWriterHandle;

    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(SqliteStore::open(dir.path()).unwrap());
    let (host, key) = enroll(store.as_ref(), None);
    let writer = PollWriterHandle::spawn(store.clone()).unwrap();
    // A disk that does not answer: the log's sync waits.
    let disk = store.hold_sync();
    // A first report must be durable before its answer: committed, then it waits.
    let first = tokio::spawn({
        let writer = writer.clone();
        async move { writer.record(poll(host, key)).await }
    });
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while !store.syncs().0 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the first report is committed");
    // A poll behind it in the writer's queue (a stranger's, refused) is answered meanwhile:
    // the writer goes on while the sync waits.
    let stranger = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        writer.record(poll(Uuid::new_v4(), key)),
    )
    .await
    .expect("the writer answers the next batch while a sync waits");
    assert!(
        matches!(stranger, Err(crate::store::StoreError::UnknownHost { .. })),
        "{stranger:?}"
    );
    assert!(
        !first.is_finished(),
        "a first report is answered only once it is on disk"
    );
    drop(disk);
    let (recorded, view) = tokio::time::timeout(std::time::Duration::from_secs(10), first)
        .await
        .expect("the first report is answered once the sync ran")
        .unwrap()
        .unwrap();
    assert!(recorded.durable);
    assert_eq!(view.report_seq, Some(1));
    assert!(!store.syncs().0, "the sync paid what the batch owed");
}
