use std::error::Error as _;

use super::*;

/// proxmox-backup, `pbs-key-config/src/lib.rs`, test `fingerprint_checks`: the key
/// `0, 1, …, 31` has this fingerprint (the bytes `14, 171, 212, …, 21, 155`).
const PBS_KEY: [u8; 32] = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
    26, 27, 28, 29, 30, 31,
];
const PBS_FINGERPRINT: [u8; 32] = [
    14, 171, 212, 70, 11, 110, 185, 202, 52, 80, 35, 222, 226, 183, 120, 199, 144, 229, 74, 22,
    131, 185, 101, 156, 10, 87, 174, 25, 144, 144, 21, 155,
];
const PBS_FINGERPRINT_TEXT: &str = "0e:ab:d4:46:0b:6e:b9:ca:34:50:23:de:e2:b7:78:c7:\
                                    90:e5:4a:16:83:b9:65:9c:0a:57:ae:19:90:90:15:9b";
const PBS_KEY_BASE64: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn write_key_file(dir: &Path, text: &str, mode: u32) -> PathBuf {
    let path = dir.join(KEY_FILE);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// A key file as PBS writes it: local time with an offset.
fn pbs_style_file(data: &str, fingerprint: &str) -> String {
    format!(
        r#"{{"kdf":null,"created":"2024-06-05T16:24:36+02:00","modified":"2024-06-05T16:24:36+02:00","data":"{data}","fingerprint":"{fingerprint}"}}"#
    )
}

/// The error and every cause below it, one message each.
fn chain(err: &PbsKeyError) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        text.push_str(" | ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

fn load_err(dir: &Path) -> PbsKeyError {
    PbsKey::load_or_create(dir).expect_err("the key file should be refused")
}

/// Why a state directory holding only a key file with `text` and `mode` is refused.
fn refusal(text: &str, mode: u32) -> PbsKeyError {
    let dir = tempfile::tempdir().unwrap();
    write_key_file(dir.path(), text, mode);
    load_err(dir.path())
}

#[test]
fn fingerprint_reproduces_pbs_known_answer() {
    assert_eq!(compute_fingerprint(&PBS_KEY), PBS_FINGERPRINT);
    assert_eq!(format_fingerprint(&PBS_FINGERPRINT), PBS_FINGERPRINT_TEXT);
    assert_eq!(
        parse_fingerprint(PBS_FINGERPRINT_TEXT),
        Some(PBS_FINGERPRINT)
    );
}

#[test]
fn fingerprint_input_is_sha256_of_its_label() {
    let digest: [u8; 32] = Sha256::digest(b"Proxmox Backup Encryption Key Fingerprint").into();
    assert_eq!(digest, FINGERPRINT_INPUT);
}

#[test]
fn a_pbs_written_key_file_loads() {
    let dir = tempfile::tempdir().unwrap();
    write_key_file(
        dir.path(),
        &pbs_style_file(PBS_KEY_BASE64, PBS_FINGERPRINT_TEXT),
        0o600,
    );
    let key = PbsKey::load_or_create(dir.path()).unwrap();
    assert_eq!(*key.key, PBS_KEY);
    assert_eq!(key.fingerprint(), PBS_FINGERPRINT_TEXT);
    assert_eq!(
        key.created,
        "2024-06-05T14:24:36Z".parse::<Timestamp>().unwrap()
    );
    assert_eq!(
        *key.key_file_json(),
        format!(
            r#"{{"kdf":null,"created":"2024-06-05T14:24:36Z","modified":"2024-06-05T14:24:36Z","data":"{PBS_KEY_BASE64}","fingerprint":"{PBS_FINGERPRINT_TEXT}"}}"#
        )
    );
}

#[test]
fn created_once_with_mode_0600_and_reloaded() {
    let dir = tempfile::tempdir().unwrap();
    let first = PbsKey::load_or_create(dir.path()).unwrap();
    let path = dir.path().join(KEY_FILE);
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    assert!(!dir.path().join(KEY_FILE_TMP).exists());
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        *first.key_file_json()
    );

    let second = PbsKey::load_or_create(dir.path()).unwrap();
    assert_eq!(second.fingerprint(), first.fingerprint());
    assert_eq!(*second.key, *first.key);
    assert_eq!(*second.key_file_json(), *first.key_file_json());
    assert_ne!(*first.key, [0u8; 32]);
}

#[test]
fn key_file_json_has_the_pbs_fields() {
    let dir = tempfile::tempdir().unwrap();
    let key = PbsKey::load_or_create(dir.path()).unwrap();
    let json = key.key_file_json();
    assert!(json.len() <= JSON_CAPACITY);
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let object = value.as_object().unwrap();
    let mut names: Vec<&str> = object.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["created", "data", "fingerprint", "kdf", "modified"]);
    assert!(object["kdf"].is_null());
    let created = object["created"].as_str().unwrap();
    assert_eq!(created.len(), 20, "{created}");
    assert!(created.ends_with('Z'), "{created}");
    assert_eq!(object["modified"].as_str(), Some(created));
    let data = BASE64.decode(object["data"].as_str().unwrap()).unwrap();
    assert_eq!(data, *key.key);
    assert_eq!(
        object["fingerprint"].as_str(),
        Some(key.fingerprint().as_str())
    );
    assert_eq!(key.fingerprint().len(), 95);
}

#[test]
fn a_leftover_temporary_file_does_not_block_creation() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(KEY_FILE_TMP), "half-written").unwrap();
    PbsKey::load_or_create(dir.path()).unwrap();
    assert!(!dir.path().join(KEY_FILE_TMP).exists());
}

#[test]
fn tampered_data_is_refused() {
    let other = BASE64.encode([7u8; 32]);
    let err = refusal(&pbs_style_file(&other, PBS_FINGERPRINT_TEXT), 0o600);
    assert!(
        matches!(err, PbsKeyError::FingerprintMismatch { ref stated, .. } if stated == PBS_FINGERPRINT_TEXT),
        "{err:?}"
    );
}

#[test]
fn tampered_fingerprint_is_refused() {
    let wrong = PBS_FINGERPRINT_TEXT.replacen("0e", "0f", 1);
    let err = refusal(&pbs_style_file(PBS_KEY_BASE64, &wrong), 0o600);
    assert!(
        matches!(err, PbsKeyError::FingerprintMismatch { ref computed, .. } if computed == PBS_FINGERPRINT_TEXT),
        "{err:?}"
    );
}

#[test]
fn malformed_fields_are_refused() {
    let short = BASE64.encode([1u8; 31]);
    let long = BASE64.encode([1u8; 33]);
    let cases = [
        (pbs_style_file(&short, PBS_FINGERPRINT_TEXT), "data"),
        (pbs_style_file(&long, PBS_FINGERPRINT_TEXT), "data"),
        (pbs_style_file("not base64!", PBS_FINGERPRINT_TEXT), "data"),
        (pbs_style_file(PBS_KEY_BASE64, "0e:ab"), "fingerprint"),
        (
            format!(
                r#"{{"kdf":null,"created":"2024-06-05T16:24:36Z","modified":"2024-06-05T16:24:36Z","data":"{PBS_KEY_BASE64}"}}"#
            ),
            "fingerprint",
        ),
    ];
    for (text, field) in cases {
        let err = refusal(&text, 0o600);
        assert!(
            matches!(err, PbsKeyError::Malformed { field: f, .. } if f == field),
            "{text}: {err:?}"
        );
    }
}

#[test]
fn a_bad_timestamp_is_refused() {
    let text = pbs_style_file(PBS_KEY_BASE64, PBS_FINGERPRINT_TEXT).replacen(
        "2024-06-05T16:24:36+02:00",
        "yesterday",
        1,
    );
    let err = refusal(&text, 0o600);
    assert!(
        matches!(
            err,
            PbsKeyError::Timestamp {
                field: "created",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_password_protected_key_file_is_refused() {
    let text = pbs_style_file(PBS_KEY_BASE64, PBS_FINGERPRINT_TEXT).replacen(
        r#""kdf":null"#,
        r#""kdf":{"Scrypt":{"n":65536,"r":8,"p":1,"salt":"AAAA"}}"#,
        1,
    );
    let err = refusal(&text, 0o600);
    assert!(
        matches!(err, PbsKeyError::PasswordProtected { .. }),
        "{err:?}"
    );
}

#[test]
fn a_key_file_open_to_others_is_refused() {
    for mode in [0o644, 0o640, 0o604] {
        let err = refusal(&pbs_style_file(PBS_KEY_BASE64, PBS_FINGERPRINT_TEXT), mode);
        assert!(
            matches!(err, PbsKeyError::Exposed { mode: m, .. } if m == mode),
            "{mode:o}: {err:?}"
        );
    }
}

#[test]
fn debug_and_errors_do_not_show_the_key() {
    let hex_key = hex::encode(PBS_KEY);
    // The base64 text without its first character: the JSON case below escapes that
    // character, and a parser message quoting the decoded string would contain this.
    let base64_tail = &PBS_KEY_BASE64[1..];
    let shows_key = |text: &str| text.contains(base64_tail) || text.contains(&hex_key);

    let dir = tempfile::tempdir().unwrap();
    write_key_file(
        dir.path(),
        &pbs_style_file(PBS_KEY_BASE64, PBS_FINGERPRINT_TEXT),
        0o600,
    );
    let key = PbsKey::load_or_create(dir.path()).unwrap();
    let debug = format!("{key:?} {key:#?}");
    assert!(!shows_key(&debug), "{debug}");
    assert!(debug.contains(PBS_FINGERPRINT_TEXT), "{debug}");

    let escaped = format!("\\u0041{base64_tail}");
    let texts = [
        // serde_json cannot borrow an escaped string and says so, quoting it.
        pbs_style_file(&escaped, PBS_FINGERPRINT_TEXT),
        pbs_style_file(
            PBS_KEY_BASE64,
            &PBS_FINGERPRINT_TEXT.replacen("0e", "0f", 1),
        ),
        pbs_style_file(PBS_KEY_BASE64, PBS_FINGERPRINT_TEXT).replacen("null", "7", 1),
        pbs_style_file(&format!("{PBS_KEY_BASE64}AAAA"), PBS_FINGERPRINT_TEXT),
        pbs_style_file(&format!("!{base64_tail}"), PBS_FINGERPRINT_TEXT),
        pbs_style_file(PBS_KEY_BASE64, PBS_FINGERPRINT_TEXT).replacen(
            r#""kdf":null"#,
            r#""kdf":{"PBKDF2":{"iter":65535,"salt":"AAAA"}}"#,
            1,
        ),
    ];
    for (i, text) in texts.iter().enumerate() {
        let err = refusal(text, 0o600);
        let message = format!("{} | {err:?}", chain(&err));
        assert!(!shows_key(&message), "case {i}: {message}");
    }
    let err = refusal(&pbs_style_file(PBS_KEY_BASE64, PBS_FINGERPRINT_TEXT), 0o644);
    let message = format!("{} | {err:?}", chain(&err));
    assert!(!shows_key(&message), "{message}");
}

/// The escaped case above only proves something if serde_json's own message would
/// have quoted the key.
#[test]
fn serde_json_would_quote_an_escaped_key() {
    let escaped = format!("\\u0041{}", &PBS_KEY_BASE64[1..]);
    let text = pbs_style_file(&escaped, PBS_FINGERPRINT_TEXT);
    let err = serde_json::from_str::<KeyFileFields<'_>>(&text)
        .err()
        .expect("an escaped string cannot be borrowed");
    assert!(err.to_string().contains(&PBS_KEY_BASE64[1..]), "{err}");
}
