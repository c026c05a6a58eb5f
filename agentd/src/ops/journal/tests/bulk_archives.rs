use std::collections::BTreeSet;

use super::open;
use crate::ops::journal::BulkArchived;

fn archived(name: &str) -> BulkArchived {
    BulkArchived {
        guest_id: "g1".into(),
        volume: "media".into(),
        target: "/srv/bulk".into(),
        name: name.into(),
        size_bytes: 10_240,
        sha256: "ab".repeat(32),
    }
}

#[test]
fn a_failure_keeps_the_newest_archive_and_a_new_archive_ends_the_failure() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _clock) = open(&dir);
    store
        .record_bulk_failure("g1", "media", "tar failed")
        .unwrap();
    let rows = store.last_bulk_archives().unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].archive.is_none());
    assert_eq!(rows[0].error.as_ref().unwrap().0, "tar failed");

    store
        .record_bulk_archive(&archived("bulk-media-1.tar"))
        .unwrap();
    let rows = store.last_bulk_archives().unwrap();
    assert_eq!(rows[0].archive.as_ref().unwrap().0.name, "bulk-media-1.tar");
    assert!(rows[0].error.is_none());

    store
        .record_bulk_failure("g1", "media", "target gone")
        .unwrap();
    let rows = store.last_bulk_archives().unwrap();
    assert_eq!(rows[0].archive.as_ref().unwrap().0.name, "bulk-media-1.tar");
    assert_eq!(rows[0].error.as_ref().unwrap().0, "target gone");
    assert!(rows[0].last_attempt().is_some());
}

#[test]
fn pruning_keeps_only_the_named_volumes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _clock) = open(&dir);
    store
        .record_bulk_archive(&archived("bulk-media-1.tar"))
        .unwrap();
    store.record_bulk_failure("g2", "dl", "no").unwrap();
    let keep = BTreeSet::from([("g1".to_owned(), "media".to_owned())]);
    assert_eq!(store.prune_bulk_archives(&keep).unwrap(), 1);
    let rows = store.last_bulk_archives().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].guest_id, "g1");
}
