//! Which keys each guest's bootstrap carries (decision 0107).

use secrecy::SecretString;

use super::*;

#[test]
fn the_keys_delivered_are_kept_per_guest_replaced_and_go_with_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    assert!(store.guest_access().unwrap().is_empty());
    store
        .store_token_hash("g-1", 101, &TokenHash::of(&SecretString::from("t1")))
        .unwrap();
    store.record_guest_access("g-1", [1; 32]).unwrap();
    store.record_guest_access("g-2", [2; 32]).unwrap();
    store.record_guest_access("g-1", [3; 32]).unwrap();
    let held = store.guest_access().unwrap();
    assert_eq!(
        held.into_iter().collect::<Vec<_>>(),
        vec![("g-1".to_owned(), [3; 32]), ("g-2".to_owned(), [2; 32])]
    );
    // Revoking the token takes the record of its bootstrap's keys with it.
    assert!(store.revoke_token("g-1").unwrap());
    assert_eq!(
        store.guest_access().unwrap().keys().collect::<Vec<_>>(),
        ["g-2"]
    );
    // The table holds only whole digests.
    assert!(
        store
            .conn
            .execute(
                "INSERT INTO guest_access (guest_id, keys_sha256, delivered_ms) VALUES ('g-3', zeroblob(31), 0)",
                [],
            )
            .is_err()
    );
}
