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
        .record_bulk_archive(&archived("bulk-media-1.tar"), 3)
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
        .record_bulk_archive(&archived("bulk-media-1.tar"), 3)
        .unwrap();
    store.record_bulk_failure("g2", "dl", "no").unwrap();
    let keep = BTreeSet::from([("g1".to_owned(), "media".to_owned())]);
    assert_eq!(store.prune_bulk_archives(&keep).unwrap(), 1);
    let rows = store.last_bulk_archives().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].guest_id, "g1");
}

#[test]
fn each_volume_keeps_the_archives_the_helper_keeps_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _clock) = open(&dir);
    for n in 1..=4 {
        store
            .record_bulk_archive(&archived(&format!("bulk-media-2026112{n}.tar")), 3)
            .unwrap();
    }
    let named = |store: &crate::ops::journal::Store, name: &str| {
        store.bulk_archive_named("g1", "media", name).unwrap()
    };
    assert!(
        named(&store, "bulk-media-20261121.tar").is_none(),
        "past keep_last"
    );
    let older = named(&store, "bulk-media-20261122.tar").unwrap();
    assert_eq!(older, archived("bulk-media-20261122.tar"));
    assert!(named(&store, "bulk-media-20261124.tar").is_some());
    // Another guest's or volume's name, or one never written, is not there.
    assert!(
        store
            .bulk_archive_named("g2", "media", "bulk-media-20261124.tar")
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .bulk_archive_named("g1", "dl", "bulk-media-20261124.tar")
            .unwrap()
            .is_none()
    );
    // A volume pruned from the plan takes its history with it.
    store.prune_bulk_archives(&BTreeSet::new()).unwrap();
    assert!(named(&store, "bulk-media-20261124.tar").is_none());
}
