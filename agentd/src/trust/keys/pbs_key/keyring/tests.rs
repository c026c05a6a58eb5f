use super::*;

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap()
}

/// A fresh key, not installed anywhere.
fn fresh() -> PbsKey {
    let dir = tempfile::tempdir().unwrap();
    PbsKey::generate(dir.path()).unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_rotation_retires_the_current_key_and_survives_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let k = PbsKey::load_or_create(dir.path()).unwrap();
    let ring = PbsKeyring::load(dir.path()).unwrap().unwrap();
    assert_eq!(ring.fingerprints(), vec![k.fingerprint()]);
    assert!(!dir.path().join(RETIRED_FILE).exists());

    let next = fresh();
    let rotated = ring.rotated(clone_key(&next), at(1_800_000_000));
    rotated.commit_rotation(dir.path()).unwrap();
    let loaded = PbsKeyring::load(dir.path()).unwrap().unwrap();
    assert_eq!(
        loaded.fingerprints(),
        vec![next.fingerprint(), k.fingerprint()]
    );
    assert_eq!(loaded.retired()[0].retired_at, at(1_800_000_000));
    assert_eq!(
        PbsKey::load_existing(dir.path())
            .unwrap()
            .unwrap()
            .fingerprint(),
        next.fingerprint(),
        "the key file holds the new K"
    );
    assert_eq!(mode(&dir.path().join(RETIRED_FILE)), 0o600);
    assert_eq!(mode(&dir.path().join(KEY_FILE)), 0o600);
    assert!(loaded.key(&k.fingerprint().to_uppercase()).is_some());
    assert!(loaded.retired_key(&next.fingerprint()).is_none());

    // A second rotation keeps both older keys, newest first.
    let third = fresh();
    loaded
        .rotated(clone_key(&third), at(1_800_100_000))
        .commit_rotation(dir.path())
        .unwrap();
    let loaded = PbsKeyring::load(dir.path()).unwrap().unwrap();
    assert_eq!(
        loaded.fingerprints(),
        vec![third.fingerprint(), next.fingerprint(), k.fingerprint()]
    );
}

#[test]
fn a_crash_between_the_two_writes_reads_as_before_the_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let k = PbsKey::load_or_create(dir.path()).unwrap();
    let ring = PbsKeyring::load(dir.path()).unwrap().unwrap();
    let rotated = ring.rotated(fresh(), at(1_800_000_000));
    // What `commit_rotation` leaves when killed after its first write.
    store_retired(dir.path(), rotated.retired()).unwrap();
    let loaded = PbsKeyring::load(dir.path()).unwrap().unwrap();
    assert_eq!(loaded.fingerprints(), vec![k.fingerprint()]);
    assert!(loaded.retired().is_empty());
}

#[test]
fn a_recovered_ring_installs_every_key_and_replaces_only_an_older_one_of_its_own() {
    let k = fresh();
    let next = fresh();
    let ring = || {
        PbsKeyring::new(
            clone_key(&next),
            vec![RetiredKey {
                key: clone_key(&k),
                retired_at: at(1_800_000_000),
            }],
        )
    };

    // An empty box gets the whole ring.
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(
        ring().install_recovered(empty.path()).unwrap(),
        Installed::New
    );
    let loaded = PbsKeyring::load(empty.path()).unwrap().unwrap();
    assert_eq!(
        loaded.fingerprints(),
        vec![next.fingerprint(), k.fingerprint()]
    );
    assert_eq!(
        ring().install_recovered(empty.path()).unwrap(),
        Installed::AlreadyThere
    );

    // A box that recovered the old escrow first (K current): K joins the retired keys and
    // the ring's current key replaces it.
    let older = tempfile::tempdir().unwrap();
    k.install(older.path()).unwrap();
    assert_eq!(
        ring().install_recovered(older.path()).unwrap(),
        Installed::New
    );
    let loaded = PbsKeyring::load(older.path()).unwrap().unwrap();
    assert_eq!(
        loaded.fingerprints(),
        vec![next.fingerprint(), k.fingerprint()]
    );

    // A key that is not in the ring is never replaced, and nothing is written.
    let other = tempfile::tempdir().unwrap();
    let stranger = PbsKey::load_or_create(other.path()).unwrap();
    let before = std::fs::read(other.path().join(KEY_FILE)).unwrap();
    assert!(matches!(
        ring().install_recovered(other.path()),
        Err(PbsKeyError::Conflict { existing, .. }) if existing == stranger.fingerprint()
    ));
    assert_eq!(std::fs::read(other.path().join(KEY_FILE)).unwrap(), before);
    assert!(!other.path().join(RETIRED_FILE).exists());
}

#[test]
fn a_retired_file_open_to_others_or_tampered_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    PbsKey::load_or_create(dir.path()).unwrap();
    let ring = PbsKeyring::load(dir.path()).unwrap().unwrap();
    ring.rotated(fresh(), at(1_800_000_000))
        .commit_rotation(dir.path())
        .unwrap();
    let path = dir.path().join(RETIRED_FILE);

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(matches!(
        PbsKeyring::load(dir.path()),
        Err(PbsKeyError::Exposed { mode: 0o640, .. })
    ));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();

    let text = std::fs::read_to_string(&path).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["keys"][0]["fingerprint"] = serde_json::json!("00:".repeat(31) + "00");
    std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
    assert!(matches!(
        PbsKeyring::load(dir.path()),
        Err(PbsKeyError::FingerprintMismatch { .. })
    ));
    std::fs::write(&path, b"{\"schema\":\"other\",\"keys\":[]}").unwrap();
    assert!(matches!(
        PbsKeyring::load(dir.path()),
        Err(PbsKeyError::Malformed {
            field: "schema",
            ..
        })
    ));
}

#[test]
fn debug_shows_fingerprints_only() {
    let dir = tempfile::tempdir().unwrap();
    let k = PbsKey::load_or_create(dir.path()).unwrap();
    let ring = PbsKeyring::load(dir.path())
        .unwrap()
        .unwrap()
        .rotated(fresh(), at(1_800_000_000));
    let shown = format!("{ring:?}");
    assert!(shown.contains(&k.fingerprint()), "{shown}");
    assert!(!shown.contains(k.data_base64().as_str()), "{shown}");
}
