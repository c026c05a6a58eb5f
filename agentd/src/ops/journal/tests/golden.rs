use super::*;

const BUILT: &str = "local:backup/vzdump-lxc-9000-2026_11_21-10_00_00.tar.zst";
const SIGNED: &str = "local:backup/vzdump-lxc-9001-2026_11_21-10_00_00.tar.zst";

fn signature() -> GoldenSignature {
    GoldenSignature {
        document: br#"{"schema":"bosun.golden/v1"}"#.to_vec(),
        signature: "-----BEGIN SSH SIGNATURE-----".into(),
        fingerprint: "SHA256:abc".into(),
        principals: "op@example".into(),
    }
}

#[test]
fn a_signed_golden_keeps_its_signature_and_signer_and_a_built_one_has_none() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let hash = "a".repeat(64);
    store
        .record_golden(BUILT, &hash, GoldenSource::Built)
        .unwrap();
    store
        .record_golden(SIGNED, &hash, GoldenSource::Signed(signature()))
        .unwrap();
    assert_eq!(
        store.golden(BUILT).unwrap().unwrap().source,
        GoldenSource::Built
    );
    assert_eq!(
        store.golden(SIGNED).unwrap().unwrap().source,
        GoldenSource::Signed(signature())
    );
    // The schema itself refuses a signed row without its signature, and a built row with one.
    let bare = store.conn.execute(
        "INSERT INTO golden_archives (volid, sha256, source, built_ms)
         VALUES ('local:backup/x.tar', ?1, 'signed', 0)",
        [&hash],
    );
    assert!(bare.is_err(), "{bare:?}");
    let built_with_signer = store.conn.execute(
        "INSERT INTO golden_archives (volid, sha256, source, built_ms, signed_document,
             signature, signer_fingerprint, signer_principals)
         VALUES ('local:backup/y.tar', ?1, 'built', 0, x'00', 's', 'f', 'p')",
        [&hash],
    );
    assert!(built_with_signer.is_err(), "{built_with_signer:?}");
}

#[test]
fn migrating_to_version_14_forgets_signed_goldens_without_a_signature_and_keeps_builds() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let hash = "b".repeat(64);
    store
        .record_golden(BUILT, &hash, GoldenSource::Built)
        .unwrap();
    // Back to what a version-13 agent left behind: a signed record names no signer.
    store
        .conn
        .execute_batch(&format!(
            "DROP TABLE golden_outcome;
             ALTER TABLE golden_archives DROP COLUMN prune_failed_ms;
             ALTER TABLE golden_archives DROP COLUMN prune_error;
             ALTER TABLE golden_archives DROP COLUMN prune_attempts;
             ALTER TABLE golden_archives DROP COLUMN removed_ms;
             ALTER TABLE golden_archives DROP COLUMN verify_duration_ms;
             ALTER TABLE golden_archives DROP COLUMN verified_ms;
             ALTER TABLE golden_archives DROP COLUMN signer_principals;
             ALTER TABLE golden_archives DROP COLUMN signer_fingerprint;
             ALTER TABLE golden_archives DROP COLUMN signature;
             ALTER TABLE golden_archives DROP COLUMN signed_document;
             INSERT INTO golden_archives (volid, sha256, source, built_ms)
                 VALUES ('{SIGNED}', '{hash}', 'signed', 0);
             PRAGMA user_version = 13;"
        ))
        .unwrap();
    drop(store);
    let (store, _) = open(&dir);
    assert_eq!(
        store.golden(BUILT).unwrap().unwrap().source,
        GoldenSource::Built,
        "a build keeps its record"
    );
    assert_eq!(
        store.golden(SIGNED).unwrap(),
        None,
        "a signed record with no signature to check again is forgotten"
    );
}
