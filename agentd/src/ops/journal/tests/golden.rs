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
    crate::ops::journal::schema::rewind(&store.conn, 13).unwrap();
    store
        .conn
        .execute(
            "INSERT INTO golden_archives (volid, sha256, source, built_ms) VALUES (?1, ?2, 'signed', 0)",
            rusqlite::params![SIGNED, hash],
        )
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

fn build(volid: &str, version: &str, at_ms: i64) -> GoldenBuild {
    GoldenBuild {
        volid: volid.into(),
        sha256: "c".repeat(64),
        size: 4096,
        version: version.into(),
        controller_digest: "sha256:d".into(),
        built_at: jiff::Timestamp::from_millisecond(at_ms).unwrap(),
        recipe_serial: 0,
    }
}

#[test]
fn a_removed_archive_is_neither_listed_nor_provisioned_from_and_a_failed_removal_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let (old, new) = ("local:backup/old.tar.zst", "local:backup/new.tar.zst");
    store.record_golden_build(&build(old, "v1", 1_000)).unwrap();
    store.record_golden_build(&build(new, "v1", 2_000)).unwrap();
    assert!(
        store
            .mark_golden_verified(old, 1_500, serde_json::json!({}))
            .unwrap()
    );
    let kept = store.golden_archives().unwrap();
    assert_eq!(kept.len(), 2);
    assert_eq!(kept[0].volid, new, "newest first");
    assert_eq!(kept[1].verify_ms, Some(1_500));
    store
        .record_golden_prune_failure(old, "storage is locked\n\u{1b}[2J")
        .unwrap();
    store.record_golden_prune_failure(old, "again").unwrap();
    let failed = &store.golden_archives().unwrap()[1];
    assert_eq!(failed.prune_attempts, 2);
    assert_eq!(failed.prune_failed.as_ref().unwrap().1, "again");
    store.mark_golden_removed(old).unwrap();
    assert_eq!(store.golden_archives().unwrap().len(), 1);
    assert_eq!(store.golden_builds(16).unwrap().len(), 1);
    assert_eq!(
        store.golden_build("v1", None).unwrap(),
        None,
        "the removed build was the only verified one: nothing seeds a guest"
    );
    let audit = store.audit_since(0, 100).unwrap();
    let actions: Vec<&str> = audit.iter().map(|e| e.event.event.as_str()).collect();
    assert!(actions.contains(&"golden.prune_failed"), "{actions:?}");
    assert!(actions.contains(&"golden.pruned"), "{actions:?}");
    let texts: Vec<String> = audit
        .iter()
        .filter(|e| e.event.event == "golden.prune_failed")
        .map(|e| e.event.detail["error"].as_str().unwrap().to_owned())
        .collect();
    assert!(!texts[0].contains('\u{1b}'), "{texts:?}");
}

#[test]
fn a_running_provisioning_keeps_every_archive_busy_and_the_outcome_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    assert!(!store.golden_archive_busy(BUILT).unwrap());
    store.begin_operation(&provision()).unwrap();
    assert!(store.golden_archive_busy(BUILT).unwrap());
    assert_eq!(store.golden_outcome().unwrap(), None);
    store
        .record_golden_outcome("verify_failed", Some("boot_test_failed"), Some("v1"))
        .unwrap();
    store
        .record_golden_outcome("verified", None, Some("v2"))
        .unwrap();
    let outcome = store.golden_outcome().unwrap().unwrap();
    assert_eq!(
        (
            outcome.outcome.as_str(),
            outcome.reason,
            outcome.version.as_deref()
        ),
        ("verified", None, Some("v2"))
    );
}

#[test]
fn the_held_golden_serials_only_rise_each_kind_on_its_own_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    for kind in [GoldenSerialKind::Golden, GoldenSerialKind::Recipe] {
        assert_eq!(store.golden_serial(kind).unwrap(), 0, "none held: 0");
    }
    assert!(
        store
            .raise_golden_serial(GoldenSerialKind::Golden, 5)
            .unwrap()
    );
    assert!(
        !store
            .raise_golden_serial(GoldenSerialKind::Golden, 5)
            .unwrap()
    );
    assert!(
        !store
            .raise_golden_serial(GoldenSerialKind::Golden, 4)
            .unwrap(),
        "never lowered"
    );
    assert!(
        store
            .raise_golden_serial(GoldenSerialKind::Recipe, 2)
            .unwrap()
    );
    assert!(
        store
            .raise_golden_serial(GoldenSerialKind::Recipe, u64::MAX)
            .is_err(),
        "beyond what the journal stores"
    );
    drop(store);
    let (store, _) = open(&dir);
    assert_eq!(store.golden_serial(GoldenSerialKind::Golden).unwrap(), 5);
    assert_eq!(store.golden_serial(GoldenSerialKind::Recipe).unwrap(), 2);
}

#[test]
fn a_build_keeps_the_serial_of_its_recipe_and_one_from_before_serials_counts_as_zero() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let mut numbered = build(BUILT, "2026.11-1", 1_000);
    numbered.recipe_serial = 7;
    store.record_golden_build(&numbered).unwrap();
    store
        .mark_golden_verified(BUILT, 1, serde_json::json!({}))
        .unwrap();
    assert_eq!(
        store
            .golden_build("2026.11-1", None)
            .unwrap()
            .unwrap()
            .recipe_serial,
        7
    );
    assert_eq!(store.golden_builds(16).unwrap()[0].build.recipe_serial, 7);
    store
        .conn
        .execute("UPDATE golden_archives SET recipe_serial = NULL", [])
        .unwrap();
    assert_eq!(
        store
            .golden_build("2026.11-1", None)
            .unwrap()
            .unwrap()
            .recipe_serial,
        0
    );
}
