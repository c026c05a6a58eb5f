use super::*;

#[test]
fn a_retired_guest_leaves_a_tombstone_and_identities_survive_the_migration() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let op = store.begin_operation(&provision()).unwrap();
    store.record_created(op, 101, Some("g-1")).unwrap();
    let row = store.provenance(101).unwrap().unwrap();
    assert_eq!(row.identity(), identity_tag(op));
    assert!(row.identity().starts_with("bosun-op-"));

    // A journal written before version 6 gets the same identity from `created_by_op`.
    store
        .conn
        .execute_batch(
            "ALTER TABLE golden_archives DROP COLUMN signer_principals;
             ALTER TABLE golden_archives DROP COLUMN signer_fingerprint;
             ALTER TABLE golden_archives DROP COLUMN signature;
             ALTER TABLE golden_archives DROP COLUMN signed_document;
             DROP TABLE guest_macs; ALTER TABLE backup_outcomes DROP COLUMN proof;
             DROP TABLE data_plan; DROP TABLE break_glass_doors; DROP INDEX golden_archives_by_version;
             ALTER TABLE golden_archives DROP COLUMN size;
             ALTER TABLE golden_archives DROP COLUMN recipe_version;
             ALTER TABLE golden_archives DROP COLUMN controller_digest;
             DROP INDEX operations_by_start; ALTER TABLE operations DROP COLUMN correlation_id;
             ALTER TABLE desired_state DROP COLUMN correlation_id;
             DROP TABLE guest_tombstones; ALTER TABLE guest_provenance DROP COLUMN identity;
             DROP TABLE retention_floor; DROP INDEX backup_outcomes_good;
             ALTER TABLE backup_outcomes DROP COLUMN target;
             ALTER TABLE backup_outcomes DROP COLUMN tier;
             ALTER TABLE backup_outcomes DROP COLUMN warnings;
             ALTER TABLE backup_outcomes DROP COLUMN encrypted;
             ALTER TABLE backup_outcomes DROP COLUMN error;
             ALTER TABLE backup_outcomes DROP COLUMN started_ms;
             PRAGMA user_version = 5;",
        )
        .unwrap();
    drop(store);
    let (mut store, _) = open(&dir);
    assert_eq!(
        store.provenance(101).unwrap().unwrap().identity(),
        identity_tag(op)
    );

    assert!(store.tombstones().unwrap().is_empty());
    let decommission = store
        .begin_operation(&NewOperation {
            kind: OpKind::DecommissionJob,
            ..provision()
        })
        .unwrap();
    assert!(store.retire_guest(decommission, 101).unwrap());
    assert!(store.provenance(101).unwrap().is_none());
    let tombstones = store.tombstones().unwrap();
    assert_eq!(tombstones.len(), 1);
    assert_eq!(
        (
            tombstones[0].guest_id.as_str(),
            tombstones[0].vmid,
            tombstones[0].op_id
        ),
        ("g-1", 101, decommission)
    );
    // Retiring again (a resumed job) keeps the one tombstone.
    assert!(!store.retire_guest(decommission, 101).unwrap());
    assert_eq!(store.tombstones().unwrap().len(), 1);
}
