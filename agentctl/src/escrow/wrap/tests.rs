use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::*;
use bosun_agentd::trust::keys::pbs_key::keyring::MAX_KEYS;

/// A low factor keeps the tests quick; the real one is measured in the benchmark.
const TEST_FACTOR: u8 = 10;

fn key(dir: &Path) -> PbsKey {
    PbsKey::load_or_create(dir).unwrap()
}

/// A keyring of `key` alone, as before any rotation.
fn ring_of(key: &PbsKey) -> PbsKeyring {
    PbsKeyring::new(copy(key), Vec::new())
}

fn copy(key: &PbsKey) -> PbsKey {
    PbsKey::from_key_file_json(Path::new("test"), &key.key_file_json()).unwrap()
}

/// `payload` wrapped under `code` as an escrow of `host`, whatever it holds.
fn seal(payload: &serde_json::Value, host: Uuid, code: &RecoveryCode, fp: &str) -> EscrowBlob {
    let mut recipient =
        age::scrypt::Recipient::new(SecretString::from(code.phrase().as_str().to_owned()));
    recipient.set_work_factor(TEST_FACTOR);
    let plaintext = serde_json::to_vec(payload).unwrap();
    EscrowBlob {
        schema: SCHEMA.to_owned(),
        format: EscrowFormat::AgeScrypt,
        host_id: Some(host),
        key_fingerprint: fp.to_owned(),
        created_at: now(),
        ciphertext: age::encrypt_and_armor(&recipient, &plaintext).unwrap(),
    }
}

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

#[test]
fn a_wrapped_key_unwraps_with_its_words_to_the_same_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    let k = key(dir.path());
    let host = Uuid::new_v4();
    let code = RecoveryCode::generate().unwrap();
    let blob = wrap(&ring_of(&k), host, &code, TEST_FACTOR, now()).unwrap();
    blob.validate().unwrap();
    assert_eq!(blob.host_id, Some(host));
    assert_eq!(blob.key_fingerprint, k.fingerprint());
    // Neither the words nor the key are in the blob in any readable form.
    let json = serde_json::to_string(&blob).unwrap();
    for word in code.words().iter() {
        assert!(!json.contains(&format!(" {word} ")), "a word leaked");
    }
    let key_json = k.key_file_json();
    let data = key_json
        .split("\"data\":\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert!(!json.contains(data), "the key leaked");

    let typed = RecoveryCode::parse(&code.words().join(" ")).unwrap();
    let back = unwrap(&blob, &typed, host).unwrap();
    assert_eq!(back.fingerprints(), vec![k.fingerprint()]);
    assert_eq!(back.current().data_base64(), k.data_base64());
    assert_eq!(back.current().created(), k.created());
}

#[test]
fn other_words_another_host_and_a_damaged_blob_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let k = key(dir.path());
    let host = Uuid::new_v4();
    let code = RecoveryCode::generate().unwrap();
    let blob = wrap(&ring_of(&k), host, &code, TEST_FACTOR, now()).unwrap();

    let other = RecoveryCode::generate().unwrap();
    assert!(matches!(
        unwrap(&blob, &other, host),
        Err(WrapError::WrongCode)
    ));

    let stranger = Uuid::new_v4();
    assert!(matches!(
        unwrap(&blob, &code, stranger),
        Err(WrapError::OtherHost { expected, found }) if expected == stranger && found == host
    ));

    // A hub that relabels another host's blob as ours: the outer id says ours, the
    // sealed one does not.
    let mut relabelled = blob.clone();
    relabelled.host_id = Some(stranger);
    assert!(matches!(
        unwrap(&relabelled, &code, stranger),
        Err(WrapError::OtherHost { found, .. }) if found == host
    ));

    let mut truncated = blob.clone();
    let cut = truncated.ciphertext.len() / 2;
    truncated.ciphertext.truncate(cut);
    assert!(matches!(
        unwrap(&truncated, &code, host),
        Err(WrapError::Malformed(_) | WrapError::WrongCode)
    ));

    let mut relabelled_fp = blob.clone();
    relabelled_fp.key_fingerprint = "00:".repeat(31) + "00";
    assert!(matches!(
        unwrap(&relabelled_fp, &code, host),
        Err(WrapError::Fingerprint { .. })
    ));
}

/// Rewrites the scrypt stanza's work factor in an armored age file (the header MAC no
/// longer matches, but the factor is checked before anything else).
fn with_work_factor(armored: &str, from: u8, to: u8) -> String {
    let body: String = armored
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let bytes = BASE64.decode(body).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let header_end = text.find("\n---").unwrap();
    let header = &text[..header_end];
    let patched = header
        .lines()
        .map(|l| {
            if l.starts_with("-> scrypt ") {
                l.replace(&format!(" {from}"), &format!(" {to}"))
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = patched.into_bytes();
    out.extend_from_slice(&bytes[header_end..]);
    let encoded = BASE64.encode(out);
    let mut armored = String::from("-----BEGIN AGE ENCRYPTED FILE-----\n");
    for chunk in encoded.as_bytes().chunks(64) {
        armored.push_str(std::str::from_utf8(chunk).unwrap());
        armored.push('\n');
    }
    armored.push_str("-----END AGE ENCRYPTED FILE-----\n");
    armored
}

#[test]
fn a_blob_demanding_huge_scrypt_work_is_refused_without_doing_it() {
    let dir = tempfile::tempdir().unwrap();
    let k = key(dir.path());
    let host = Uuid::new_v4();
    let code = RecoveryCode::generate().unwrap();
    let mut blob = wrap(&ring_of(&k), host, &code, TEST_FACTOR, now()).unwrap();
    blob.ciphertext = with_work_factor(&blob.ciphertext, TEST_FACTOR, 40);
    let started = std::time::Instant::now();
    assert!(matches!(
        unwrap(&blob, &code, host),
        Err(WrapError::ExcessiveWork)
    ));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn the_blob_opens_with_the_age_cli_semantics_of_a_passphrase() {
    // The passphrase is the normalized phrase: the same words typed differently open it.
    let dir = tempfile::tempdir().unwrap();
    let k = key(dir.path());
    let host = Uuid::new_v4();
    let code = RecoveryCode::generate().unwrap();
    let blob = wrap(&ring_of(&k), host, &code, TEST_FACTOR, now()).unwrap();
    let shouted = code.words().join("\n").to_uppercase();
    let typed = RecoveryCode::parse(&shouted).unwrap();
    assert!(unwrap(&blob, &typed, host).is_ok());
}

#[test]
fn a_blob_of_the_single_key_format_still_opens() {
    // What `escrow create` wrapped before keyrings: the key file's text, one key.
    let dir = tempfile::tempdir().unwrap();
    let k = key(dir.path());
    let host = Uuid::new_v4();
    let code = RecoveryCode::generate().unwrap();
    let payload = serde_json::json!({
        "schema": "bosun.escrow-key/v1",
        "host_id": host,
        "key_file": k.key_file_json().as_str(),
    });
    let blob = seal(&payload, host, &code, &k.fingerprint());
    let back = unwrap(&blob, &code, host).unwrap();
    assert_eq!(back.fingerprints(), vec![k.fingerprint()]);
    assert!(back.retired().is_empty());
    assert_eq!(
        back.current().key_file_json().as_str(),
        k.key_file_json().as_str()
    );
    // Its sealed host id still counts.
    assert!(matches!(
        unwrap(&blob, &code, Uuid::new_v4()),
        Err(WrapError::OtherHost { .. })
    ));
}

#[test]
fn after_a_rotation_the_old_words_and_blob_open_only_the_old_keys() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let k = key(a.path());
    let next = key(b.path());
    let host = Uuid::new_v4();
    let old_code = RecoveryCode::generate().unwrap();
    let old_blob = wrap(&ring_of(&k), host, &old_code, TEST_FACTOR, now()).unwrap();

    let rotated_at = Timestamp::from_second(1_800_086_400).unwrap();
    let rotated = ring_of(&k).rotated(copy(&next), rotated_at);
    let new_code = RecoveryCode::generate().unwrap();
    let new_blob = wrap(&rotated, host, &new_code, TEST_FACTOR, now()).unwrap();
    assert_eq!(new_blob.key_fingerprint, next.fingerprint());

    // The new words open the new key and every older one, with when each was retired.
    let opened = unwrap(&new_blob, &new_code, host).unwrap();
    assert_eq!(
        opened.fingerprints(),
        vec![next.fingerprint(), k.fingerprint()]
    );
    assert_eq!(opened.retired()[0].retired_at, rotated_at);
    assert_eq!(
        opened.key(&next.fingerprint()).unwrap().data_base64(),
        next.data_base64()
    );

    // The old words do not open the new blob, and the old blob holds no new key: an old
    // sheet (with its printed blob) reads nothing made after the rotation.
    assert!(matches!(
        unwrap(&new_blob, &old_code, host),
        Err(WrapError::WrongCode)
    ));
    let old = unwrap(&old_blob, &old_code, host).unwrap();
    assert_eq!(old.fingerprints(), vec![k.fingerprint()]);
    assert!(old.key(&next.fingerprint()).is_none());
    // A hub that puts the new blob's fingerprint on the old blob gains nothing.
    let mut relabelled = old_blob.clone();
    relabelled.key_fingerprint = next.fingerprint();
    assert!(matches!(
        unwrap(&relabelled, &old_code, host),
        Err(WrapError::Fingerprint { .. })
    ));
}

#[test]
fn a_keyring_payload_out_of_shape_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let k = key(dir.path());
    let data = k.data_base64();
    let host = Uuid::new_v4();
    let code = RecoveryCode::generate().unwrap();
    let entry = |retired: Option<&str>| {
        let mut e = serde_json::json!({ "data": data.as_str(), "created": "2027-01-15T08:00:00Z" });
        if let Some(at) = retired {
            e["retired_at"] = serde_json::json!(at);
        }
        e
    };
    let ring = |keys: Vec<serde_json::Value>| serde_json::json!({ "schema": "bosun.escrow-keyring/v2", "host_id": host, "keys": keys });
    let cases = [
        ("no key", ring(vec![])),
        (
            "the first key retired",
            ring(vec![entry(Some("2027-02-01T00:00:00Z"))]),
        ),
        ("two current keys", ring(vec![entry(None), entry(None)])),
        (
            "more keys than a ring holds",
            ring(
                std::iter::once(entry(None))
                    .chain((0..MAX_KEYS).map(|_| entry(Some("2027-02-01T00:00:00Z"))))
                    .collect(),
            ),
        ),
        (
            "a key that is not 32 bytes",
            ring(vec![
                serde_json::json!({ "data": "AAAA", "created": "2027-01-15T08:00:00Z" }),
            ]),
        ),
        (
            "an unknown field",
            serde_json::json!({ "schema": "bosun.escrow-keyring/v2", "host_id": host, "keys": [entry(None)], "extra": 1 }),
        ),
    ];
    for (what, payload) in cases {
        let blob = seal(&payload, host, &code, &k.fingerprint());
        assert!(
            matches!(
                unwrap(&blob, &code, host),
                Err(WrapError::Malformed(_) | WrapError::Key(_))
            ),
            "{what}"
        );
    }
    // The same shape with one current key opens.
    let blob = seal(&ring(vec![entry(None)]), host, &code, &k.fingerprint());
    assert_eq!(
        unwrap(&blob, &code, host).unwrap().fingerprints(),
        vec![k.fingerprint()]
    );
}

#[test]
fn a_ring_of_up_to_three_keys_prints_on_the_sheet() {
    // Each key adds about 170 characters to the armored block; the sheet prints at most
    // `MAX_WRAPPED_BLOB_CHARS` (`escrow rotate --include-blob` says so before it makes
    // anything when the ring has grown past that).
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let host = Uuid::new_v4();
    let code = RecoveryCode::generate().unwrap();
    let mut ring = ring_of(&key(dirs[0].path()));
    for dir in &dirs[1..] {
        ring = ring.rotated(key(dir.path()), now());
    }
    assert_eq!(ring.len(), 3);
    let blob = wrap(&ring, host, &code, TEST_FACTOR, now()).unwrap();
    let chars = blob.ciphertext.trim_end().len();
    assert!(
        chars <= crate::escrow::sheet::MAX_WRAPPED_BLOB_CHARS,
        "{chars} characters"
    );
}
