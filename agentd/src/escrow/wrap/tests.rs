use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::*;

/// A low factor keeps the tests quick; the real one is measured in the benchmark.
const TEST_FACTOR: u8 = 10;

fn key(dir: &Path) -> PbsKey {
    PbsKey::load_or_create(dir).unwrap()
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
    let blob = wrap(&k, host, &code, TEST_FACTOR, now()).unwrap();
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
    assert_eq!(back.fingerprint(), k.fingerprint());
    assert_eq!(back.key_file_json().as_str(), k.key_file_json().as_str());
}

#[test]
fn other_words_another_host_and_a_damaged_blob_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let k = key(dir.path());
    let host = Uuid::new_v4();
    let code = RecoveryCode::generate().unwrap();
    let blob = wrap(&k, host, &code, TEST_FACTOR, now()).unwrap();

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
    let mut blob = wrap(&k, host, &code, TEST_FACTOR, now()).unwrap();
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
    let blob = wrap(&k, host, &code, TEST_FACTOR, now()).unwrap();
    let shouted = code.words().join("\n").to_uppercase();
    let typed = RecoveryCode::parse(&shouted).unwrap();
    assert!(unwrap(&blob, &typed, host).is_ok());
}
