//! The sheet's unit tests: rendering, validation and printing with stand-ins for
//! Chromium.

use std::path::Path;
use std::time::{Duration, Instant};

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
const PAPER_KEY: &str = r#"{"kdf":null,"created":"2025-03-01T10:00:00Z","data":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}"#;

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

fn without_whitespace(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

#[test]
fn html_holds_every_word_numbered_in_order() {
    let words = words();
    let html = render_html(&content(&words)).unwrap();
    let mut from = 0;
    for (index, word) in WORDS.iter().enumerate() {
        let cell = format!(
            "<li><span class=\"n\">{}</span><span class=\"w\">{word}</span></li>",
            index + 1
        );
        let at = html[from..].find(&cell).unwrap_or_else(|| panic!("{cell}"));
        from += at + cell.len();
    }
}

#[test]
fn html_holds_host_date_and_fingerprint() {
    let words = words();
    let html = render_html(&content(&words)).unwrap();
    assert!(html.contains("Bosun recovery code"));
    assert!(html.contains("pve-01.example.net"));
    assert!(html.contains("01965f2a-7c1e-7a3b-9d4e-1f2a3b4c5d6e"));
    assert!(html.contains("2025-03-01 (UTC)"));
    assert!(without_whitespace(&html.replace("<br>", "")).contains(FINGERPRINT));
    assert!(html.contains("can be read by nobody: not your operator, not Bosun"));
    assert!(html.contains("does not re-encrypt existing backups"));
    assert!(!html.contains("replaces an earlier recovery code"));
}

#[test]
fn html_is_self_contained() {
    let words = words();
    let html = render_html(&content(&words)).unwrap();
    assert!(html.contains("@page { size: A4;"));
    assert!(html.contains("default-src 'none'"));
    for outside in [
        "<script", "<link", "<img", "url(", "http:", "https:", "@import",
    ] {
        assert!(!html.contains(outside), "{outside}");
    }
}

#[test]
fn rotated_sheet_says_it_replaces_an_earlier_code() {
    let words = words();
    let html = render_html(&SheetContent {
        rotated: true,
        ..content(&words)
    })
    .unwrap();
    assert!(html.contains("This code replaces an earlier recovery code"));
}

#[test]
fn a_sheet_after_a_rotation_lists_the_older_keys_and_what_the_old_code_still_opens() {
    let words = words();
    let older = older_keys(2);
    let html = render_html(&SheetContent {
        rotated: true,
        older_keys: &older,
        paper_key: Some(PAPER_KEY),
        ..content(&words)
    })
    .unwrap();
    assert!(html.contains("This code replaces an earlier recovery code"));
    assert!(html.contains(
        "The earlier code still unlocks only the keys up to 00:00:00:00:00:00:00:00 (backups \
         made before 2027-01-15), never the key above."
    ));
    assert!(html.contains("<th>Older keys, retired on</th>"));
    assert!(html.contains("00:00:00:00:00:00:00:00&nbsp;(2027-01-15)"));
    assert!(html.contains("01:01:01:01:01:01:01:01&nbsp;(2027-01-14)"));
    assert!(html.contains("It also unlocks these keys, each used before its date."));
    assert!(html.contains("Identifies the key of the backups made from the date above on"));
    assert!(html.contains("can read every backup made with it, with no code needed"));
    // Before any rotation none of it is there.
    let plain = render_html(&SheetContent {
        paper_key: Some(PAPER_KEY),
        ..content(&words)
    })
    .unwrap();
    for absent in [
        "Older keys",
        "earlier code still unlocks",
        "replaces an earlier",
        "made with it",
    ] {
        assert!(!plain.contains(absent), "{absent}");
    }
    // Too many, or a malformed one, is refused; next to the blob the list is short.
    let beside_blob = older_keys(MAX_OLDER_KEYS_WITH_BLOB + 1);
    assert!(matches!(
        render_html(&SheetContent {
            older_keys: &beside_blob,
            wrapped_blob: Some(BLOB),
            ..content(&words)
        }),
        Err(SheetError::OlderKeys)
    ));
    assert!(
        render_html(&SheetContent {
            older_keys: &beside_blob,
            ..content(&words)
        })
        .is_ok()
    );
    let many = older_keys(MAX_OLDER_KEYS + 1);
    assert!(matches!(
        render_html(&SheetContent {
            older_keys: &many,
            ..content(&words)
        }),
        Err(SheetError::OlderKeys)
    ));
    let bad = [OlderKey {
        fingerprint: "nope".into(),
        retired_at: jiff::Timestamp::now(),
    }];
    assert!(matches!(
        render_html(&SheetContent {
            older_keys: &bad,
            ..content(&words)
        }),
        Err(SheetError::OlderKeys)
    ));
}

#[test]
fn hostile_hostname_is_escaped() {
    let words = words();
    let hostname = "<script>alert('x')</script>&\"";
    let html = render_html(&SheetContent {
        hostname,
        ..content(&words)
    })
    .unwrap();
    assert!(!html.contains("<script"));
    assert!(!html.contains("alert('x')"));
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"));
}

#[test]
fn extras_and_caveats_appear_only_when_asked_for() {
    let words = words();
    let plain = render_html(&content(&words)).unwrap();
    let blob_caveat = "With this block the code works even if the hub is gone; it is \
                       useless without the 12 words.";
    let key_caveat = "This is the key itself: anyone holding this paper can read every \
                      backup, with no code needed, and it cannot be revoked. Keep it in a \
                      safe.";
    for absent in [blob_caveat, key_caveat, ARMOR_BEGIN, "\"kdf\"", "Paper key"] {
        assert!(!plain.contains(absent), "{absent}");
    }

    let with_blob = render_html(&SheetContent {
        wrapped_blob: Some(BLOB),
        ..content(&words)
    })
    .unwrap();
    assert!(with_blob.contains(blob_caveat));
    assert!(with_blob.contains(BLOB.trim_end()));
    assert!(!with_blob.contains(key_caveat));

    let with_key = render_html(&SheetContent {
        paper_key: Some(PAPER_KEY),
        ..content(&words)
    })
    .unwrap();
    assert!(with_key.contains(key_caveat));
    assert!(with_key.contains("{&quot;kdf&quot;:null,"));
    assert!(!with_key.contains(blob_caveat));
}

#[test]
fn word_count_is_checked() {
    let mut words = words();
    words.pop();
    let err = render_html(&content(&words)).unwrap_err();
    assert!(
        matches!(err, SheetError::WordCount { found: 11 }),
        "{err:?}"
    );
    words.extend(["access".to_owned(), "accident".to_owned()]);
    let err = render_html(&content(&words)).unwrap_err();
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
        let err = render_html(&content(&words)).unwrap_err();
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
    render_html(&content(&words)).expect("any word of the list is accepted");
}

#[test]
fn fingerprint_shape_is_checked() {
    let words = words();
    let upper = FINGERPRINT.to_uppercase();
    let short = &FINGERPRINT[..92];
    let dashes = FINGERPRINT.replace(':', "-");
    let spaced = FINGERPRINT.replacen(":", " ", 1);
    for bad in ["", short, &upper, &dashes, &spaced] {
        let err = render_html(&SheetContent {
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
        let err = render_html(&SheetContent {
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
        let err = render_html(&SheetContent {
            wrapped_blob: Some(blob),
            ..content(&words)
        })
        .unwrap_err();
        assert!(matches!(err, SheetError::WrappedBlob), "{err:?}");
    }
    let long_key = "k".repeat(MAX_PAPER_KEY_CHARS + 1);
    for key in ["", "key\u{7}", "clé", &long_key] {
        let err = render_html(&SheetContent {
            paper_key: Some(key),
            ..content(&words)
        })
        .unwrap_err();
        assert!(matches!(err, SheetError::PaperKey), "{err:?}");
        assert!(!format!("{err} {err:?}").contains("key\u{7}"));
    }
}

#[test]
fn largest_sheet_fits_the_buffer_without_reallocating() {
    // The longest words of the list, the widest a grid cell gets.
    let words: Vec<String> = [
        "abstract", "accident", "acoustic", "announce", "artefact", "attitude", "bachelor",
        "broccoli", "business", "category", "champion", "cinnamon",
    ]
    .iter()
    .map(|w| (*w).to_owned())
    .collect();
    let hostname = "<&>\"'".repeat(MAX_HOSTNAME_CHARS / 5);
    let line = format!("{}\n", "Q".repeat(64));
    let body = line.repeat((MAX_WRAPPED_BLOB_CHARS - 80) / 65);
    let blob = format!("{ARMOR_BEGIN}\n{body}{ARMOR_END}");
    let key = "\"<>&'".repeat(MAX_PAPER_KEY_CHARS / 5);
    // The blob with the most older keys it is printed with, and the longest list alone.
    for (older, blob) in [
        (older_keys(MAX_OLDER_KEYS_WITH_BLOB), Some(blob.as_str())),
        (older_keys(MAX_OLDER_KEYS), None),
    ] {
        let html = render_html(&SheetContent {
            hostname: &hostname,
            rotated: true,
            older_keys: &older,
            wrapped_blob: blob,
            paper_key: Some(&key),
            ..content(&words)
        })
        .unwrap();
        assert_eq!(html.capacity(), HTML_CAPACITY, "the buffer reallocated");
        assert!(html.len() < HTML_CAPACITY);
    }
}

#[test]
fn debug_redacts_the_secrets() {
    let words = words();
    let shown = format!(
        "{:?}",
        SheetContent {
            paper_key: Some(PAPER_KEY),
            ..content(&words)
        }
    );
    assert!(shown.contains("pve-01.example.net"));
    assert!(
        !shown.contains("abandon") && !shown.contains("AAECAw"),
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

/// A printer whose "chromium" is another program, its scratch directory in `dir`.
fn fake_printer(binary: &str, dir: &Path) -> Printer {
    Printer::new(binary.into()).with_scratch_parent(dir.to_path_buf())
}

fn assert_nothing_left(scratch: &Path, out: &Path) {
    let left: Vec<_> = std::fs::read_dir(scratch)
        .unwrap()
        .chain(std::fs::read_dir(out).unwrap())
        .map(|entry| entry.unwrap().path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn failing_chromium_reports_status_and_stderr_and_cleans_up() {
    let scratch = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let words = words();
    // `sh --headless=new …` refuses the option, on stderr, with status 2.
    let err = print_sheet(
        out.path(),
        &content(&words),
        &fake_printer("/bin/sh", scratch.path()),
    )
    .unwrap_err();
    let SheetError::ChromiumFailed { status, stderr, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(status.code(), Some(2));
    assert!(stderr.contains("option"), "{stderr}");
    assert!(err.to_string().contains("exit status: 2"), "{err}");
    assert_nothing_left(scratch.path(), out.path());
}

#[test]
fn chromium_that_prints_nothing_is_an_error() {
    let scratch = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let words = words();
    let err = print_sheet(
        out.path(),
        &content(&words),
        &fake_printer("/bin/true", scratch.path()),
    )
    .unwrap_err();
    assert!(matches!(err, SheetError::NoPdf { .. }), "{err:?}");
    assert_nothing_left(scratch.path(), out.path());
}

#[test]
fn missing_chromium_says_what_to_install() {
    let scratch = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let words = words();
    let printer = fake_printer("/nonexistent/chromium", scratch.path());
    let err = print_sheet(out.path(), &content(&words), &printer).unwrap_err();
    assert!(matches!(err, SheetError::SpawnChromium { .. }), "{err:?}");
    assert!(err.to_string().contains("`chromium` package"), "{err}");
    assert_nothing_left(scratch.path(), out.path());
}

#[test]
fn hanging_chromium_is_killed_at_the_timeout() {
    let scratch = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let fake = bin.path().join("chromium");
    // A "chromium" that hangs and leaves a helper holding its stderr, as Chromium's
    // own helpers would. A shell writes it, so no descriptor of this (threaded)
    // process has it open for writing when it is run (ETXTBSY).
    let written = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg("printf '#!/bin/sh\\nsleep 30 &\\nexec sleep 30\\n' > \"$1\" && chmod 755 \"$1\"")
        .arg("sh")
        .arg(&fake)
        .status()
        .unwrap();
    assert!(written.success());
    let printer = Printer::new(fake)
        .with_scratch_parent(scratch.path().to_path_buf())
        .with_timeout(Duration::from_millis(500));
    let words = words();
    let started = Instant::now();
    let err = print_sheet(out.path(), &content(&words), &printer).unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(err, SheetError::ChromiumTimeout { .. }), "{err:?}");
    // Well below STDERR_GRACE: the helper was killed with the group.
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    assert_nothing_left(scratch.path(), out.path());
}

#[test]
fn invalid_content_is_refused_before_anything_runs() {
    let scratch = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let words = words();
    let printer = fake_printer("/nonexistent/chromium", scratch.path());
    let err = print_sheet(
        out.path(),
        &SheetContent {
            key_fingerprint: "nope",
            ..content(&words)
        },
        &printer,
    )
    .unwrap_err();
    assert!(matches!(err, SheetError::Fingerprint), "{err:?}");
    assert_nothing_left(scratch.path(), out.path());
}
