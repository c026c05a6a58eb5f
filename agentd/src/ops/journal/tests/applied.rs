use super::*;

/// The applied generation outlives the store, and a journal migrated from version 27 (which
/// kept it nowhere) starts with none.
#[test]
fn the_applied_generation_outlives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    assert_eq!(store.applied_generation().unwrap(), 0);
    store.record_applied_generation(4).unwrap();
    store.record_applied_generation(4).unwrap();
    drop(store);
    let (mut store, _) = open(&dir);
    assert_eq!(store.applied_generation().unwrap(), 4);
    // A hub reset starts its generations again: a lower one replaces it.
    store.record_applied_generation(1).unwrap();
    assert_eq!(store.applied_generation().unwrap(), 1);
    store.record_applied_generation(4).unwrap();
    drop(store);

    let path = dir.path().join("journal.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    crate::ops::journal::schema::rewind(&conn, 27).unwrap();
    drop(conn);
    let (store, _) = open(&dir);
    assert_eq!(store.applied_generation().unwrap(), 0);
}
