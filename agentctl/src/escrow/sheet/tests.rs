//! The sheet's unit tests: validation, redaction and the file written. What the PDF says
//! is read back with poppler in `agentctl/tests/recovery_sheet.rs`.

use std::os::unix::fs::PermissionsExt as _;

use super::print::pdf_file_name;
use super::*;

const WORDS: [&str; 12] = [
    "abandon", "ability", "able", "about", "above", "absent", "absorb", "abstract", "absurd",
    "abuse", "access", "accident",
];
const FINGERPRINT: &str = "0e:ab:d4:8e:9a:51:45:02:06:c6:3c:23:c2:1b:cf:8e:\
                           14:a2:0f:6a:59:31:da:d3:e4:5b:91:0c:12:fe:15:9b";
const BLOB: &str = "-----BEGIN AGE ENCRYPTED FILE-----\n\
    YWdlLWVuY3J5cHRpb24ub3JnL3YxCi0+IHNjcnlwdCBsbXBQYTVjOWx4a3NBZG5H\n\
    TnN1a1FRIDE4ClZ0L2JmZWZ6UzJ0UmRLc0FOY2VFZ2VpOWJ5K0tURTdiVm9qZ3Qw\n\
    -----END AGE ENCRYPTED FILE-----\n";
/// The paper key of the bytes 0 to 31.
fn paper_key() -> zeroize::Zeroizing<String> {
    let mut key = [0u8; 32];
    for (index, byte) in key.iter_mut().enumerate() {
        *byte = u8::try_from(index).unwrap();
    }
    crate::escrow::paper_key::encode(&key)
}

fn words() -> Vec<String> {
    WORDS.iter().map(|w| (*w).to_owned()).collect()
}

fn content(words: &[String]) -> SheetContent<'_> {
    SheetContent {
        hostname: "pve-01.example.net",
        host_id: uuid::Uuid::from_u128(0x0196_5f2a_7c1e_7a3b_9d4e_1f2a_3b4c_5d6e),
        created_at: "2025-03-01T23:30:00Z".parse().unwrap(),
        words,
        key_fingerprint: FINGERPRINT,
        rotated: false,
        older_keys: &[],
        wrapped_blob: None,
        paper_key: None,
        customer: Some("Acme Widgets GmbH"),
        operator: Some("Northwind Hosting"),
        operator_contact: Some("+49 30 1234567, ops@northwind.example"),
    }
}

/// `count` older keys, newest first, a day apart.
fn older_keys(count: usize) -> Vec<OlderKey> {
    let mut retired_at = jiff::Timestamp::from_second(1_800_000_000).unwrap();
    (0..count)
        .map(|i| {
            let key = OlderKey {
                fingerprint: format!("{i:02x}:").repeat(31) + "ab",
                retired_at,
            };
            retired_at -= jiff::SignedDuration::from_hours(24);
            key
        })
        .collect()
}

#[test]
fn word_count_is_checked() {
    let mut words = words();
    words.pop();
    let err = render_pdf(&content(&words)).unwrap_err();
    assert!(
        matches!(err, SheetError::WordCount { found: 11 }),
        "{err:?}"
    );
    words.extend(["access".to_owned(), "accident".to_owned()]);
    let err = render_pdf(&content(&words)).unwrap_err();
    assert!(
        matches!(err, SheetError::WordCount { found: 13 }),
        "{err:?}"
    );
}

#[test]
fn bad_words_are_refused_by_position_without_quoting_them() {
    // (word, whether it has the shape of one and is only missing from the list)
    let cases = [
        ("Abandon", false),
        ("ab", false),
        ("abandoned", false),
        ("ab1e", false),
        ("zzzzz", true),
    ];
    for (bad, shaped) in cases {
        let mut words = words();
        words[4] = bad.to_owned();
        let err = render_pdf(&content(&words)).unwrap_err();
        if shaped {
            assert!(
                matches!(err, SheetError::UnknownWord { position: 5 }),
                "{bad}: {err:?}"
            );
        } else {
            assert!(
                matches!(err, SheetError::WordShape { position: 5 }),
                "{bad}: {err:?}"
            );
        }
        let shown = format!("{err} {err:?}");
        assert!(
            !shown.contains(bad) && !shown.contains("abandon"),
            "{shown}"
        );
    }
    let mut words = words();
    words[4] = "tiger".to_owned();
    render_pdf(&content(&words)).expect("any word of the list is accepted");
}

#[test]
fn fingerprint_shape_is_checked() {
    let words = words();
    let upper = FINGERPRINT.to_uppercase();
    let short = &FINGERPRINT[..92];
    let dashes = FINGERPRINT.replace(':', "-");
    let spaced = FINGERPRINT.replacen(":", " ", 1);
    for bad in ["", short, &upper, &dashes, &spaced] {
        let err = render_pdf(&SheetContent {
            key_fingerprint: bad,
            ..content(&words)
        })
        .unwrap_err();
        assert!(matches!(err, SheetError::Fingerprint), "{bad}: {err:?}");
    }
}

#[test]
fn hostname_and_extras_are_checked() {
    let words = words();
    let long = "a".repeat(MAX_HOSTNAME_CHARS + 1);
    for hostname in ["", "pve\n01", &long] {
        let err = render_pdf(&SheetContent {
            hostname,
            ..content(&words)
        })
        .unwrap_err();
        assert!(matches!(err, SheetError::Hostname), "{hostname:?}: {err:?}");
    }
    let huge_blob = format!(
        "{ARMOR_BEGIN}\n{}{ARMOR_END}\n",
        format!("{}\n", "A".repeat(64)).repeat(16)
    );
    for blob in [
        "not armored",
        "-----BEGIN AGE ENCRYPTED FILE-----\n<b>\n-----END AGE ENCRYPTED FILE-----",
        &huge_blob,
    ] {
        let err = render_pdf(&SheetContent {
            wrapped_blob: Some(blob),
            ..content(&words)
        })
        .unwrap_err();
        assert!(matches!(err, SheetError::WrappedBlob), "{err:?}");
    }
    let key = paper_key();
    let typo = format!("{}B{}", &key[..5], &key[6..]);
    let typo = if typo == *key {
        format!("{}C{}", &key[..5], &key[6..])
    } else {
        typo
    };
    let lower = key.to_lowercase();
    let json = r#"{"kdf":null,"data":"AAECAw=="}"#;
    for bad in ["", "key\u{7}", json, &lower, &typo] {
        let err = render_pdf(&SheetContent {
            paper_key: Some(bad),
            ..content(&words)
        })
        .unwrap_err();
        assert!(matches!(err, SheetError::PaperKey), "{err:?}");
        assert!(!format!("{err} {err:?}").contains("AAECAw"));
    }
    render_pdf(&SheetContent {
        paper_key: Some(&key),
        ..content(&words)
    })
    .expect("a paper key as encoded is accepted");
}

#[test]
fn debug_redacts_the_secrets() {
    let words = words();
    let key = paper_key();
    let shown = format!(
        "{:?}",
        SheetContent {
            paper_key: Some(&key),
            ..content(&words)
        }
    );
    assert!(shown.contains("pve-01.example.net"));
    assert!(
        !shown.contains("abandon") && !shown.contains(&key[..9]),
        "{shown}"
    );
}

#[test]
fn file_name_keeps_to_safe_characters() {
    assert_eq!(
        pdf_file_name("pve-01.example.net"),
        "recovery-sheet-pve-01.example.net.pdf"
    );
    assert_eq!(
        pdf_file_name("../../etc/x y"),
        "recovery-sheet-.._.._etc_x_y.pdf"
    );
    assert!(pdf_file_name(&"h".repeat(253)).len() < 255);
}

#[test]
fn customer_and_operator_fields_are_checked_by_name() {
    let words = words();
    let long = "x".repeat(MAX_PARTY_CHARS + 1);
    let longest = "x".repeat(MAX_PARTY_CHARS);
    for bad in ["", "   ", "Acme\nEvil", &long] {
        for (field, make) in [
            (
                "customer",
                SheetContent {
                    customer: Some(bad),
                    ..content(&words)
                },
            ),
            (
                "operator's name",
                SheetContent {
                    operator: Some(bad),
                    ..content(&words)
                },
            ),
            (
                "operator's contact",
                SheetContent {
                    operator_contact: Some(bad),
                    ..content(&words)
                },
            ),
        ] {
            let err = render_pdf(&make).unwrap_err();
            assert!(
                matches!(err, SheetError::Party { field: f } if f == field),
                "{bad:?}: {err:?}"
            );
        }
    }
    // Absent fields leave lines to fill in; the longest accepted ones still fit.
    render_pdf(&SheetContent {
        customer: None,
        operator: None,
        operator_contact: None,
        ..content(&words)
    })
    .unwrap();
    render_pdf(&SheetContent {
        customer: Some(&longest),
        operator: Some(&longest),
        operator_contact: Some(&longest),
        ..content(&words)
    })
    .unwrap();
}

#[test]
fn the_sheet_is_one_private_file_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let words = words();
    let pdf = print_sheet(dir.path(), &content(&words)).unwrap();
    assert_eq!(
        pdf,
        dir.path().join("recovery-sheet-pve-01.example.net.pdf")
    );
    let meta = std::fs::metadata(&pdf).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let bytes = std::fs::read(&pdf).unwrap();
    assert!(bytes.starts_with(b"%PDF-"), "not a PDF");
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    // The words are not in the file as plain text (the content stream is compressed and
    // the font subset's glyphs are not ASCII): a `strings` of the file shows none.
    let plain = String::from_utf8_lossy(&bytes);
    assert!(
        !plain.contains("abandon"),
        "a word is in the file as plain text"
    );

    // A directory that cannot be written leaves nothing and says where.
    let missing = dir.path().join("missing");
    let err = print_sheet(&missing, &content(&words)).unwrap_err();
    assert!(
        matches!(&err, SheetError::Io { path, .. } if *path == missing),
        "{err:?}"
    );
    // Invalid content is refused before any file is created.
    let mut short = words.clone();
    short.pop();
    assert!(print_sheet(dir.path(), &content(&short)).is_err());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn extras_are_bounded_by_the_older_keys_beside_them() {
    let words = words();
    let key = paper_key();
    let two = older_keys(MAX_OLDER_KEYS_WITH_BLOB);
    render_pdf(&SheetContent {
        rotated: true,
        older_keys: &two,
        wrapped_blob: Some(BLOB),
        paper_key: Some(&key),
        ..content(&words)
    })
    .expect("the blob with the most older keys beside it fits");
    let three = older_keys(MAX_OLDER_KEYS_WITH_BLOB + 1);
    let err = render_pdf(&SheetContent {
        rotated: true,
        older_keys: &three,
        wrapped_blob: Some(BLOB),
        ..content(&words)
    })
    .unwrap_err();
    assert!(matches!(err, SheetError::OlderKeys), "{err:?}");
    let all = older_keys(MAX_OLDER_KEYS);
    render_pdf(&SheetContent {
        rotated: true,
        older_keys: &all,
        paper_key: Some(&key),
        ..content(&words)
    })
    .expect("the longest list of older keys fits");
}
