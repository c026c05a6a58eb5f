//! The recovery sheet printed by real headless Chromium and read back with poppler's
//! `pdfinfo`, `pdftotext` and `pdftoppm`: one A4 page that holds every word, the
//! fingerprint and the caveats, with and without the extras, and with the largest
//! content the input limits allow.
//!
//! Chromium and poppler-utils are required, not optional: CI installs them with
//! `scripts/install-deps`, and a missing tool fails the test saying so. Page 1 of the
//! sheet with both extras is kept as `target/test-artifacts/recovery-sheet.png`.

use std::os::unix::fs::PermissionsExt as _;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bosun_agentd::escrow::sheet::{
    MAX_HOSTNAME_CHARS, MAX_OLDER_KEYS, MAX_OLDER_KEYS_WITH_BLOB, MAX_PAPER_KEY_CHARS,
    MAX_WRAPPED_BLOB_CHARS, OlderKey, Printer, SheetContent, print_sheet,
};
use bosun_agentd::pbs_key::PbsKey;

/// Each test's budget; one print takes about a second.
const BUDGET: Duration = Duration::from_secs(180);

const WORDS: [&str; 12] = [
    "abandon", "ability", "able", "about", "above", "absent", "absorb", "abstract", "absurd",
    "abuse", "access", "accident",
];

/// The longest words of the BIP39 English list, the widest a grid cell gets.
const LONG_WORDS: [&str; 12] = [
    "abstract", "accident", "acoustic", "announce", "artefact", "attitude", "bachelor", "broccoli",
    "business", "category", "champion", "cinnamon",
];

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

/// Runs `test` on its own thread and fails when it takes longer than `limit`.
fn within(limit: Duration, test: impl FnOnce() + Send + 'static) {
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(std::panic::catch_unwind(AssertUnwindSafe(test)));
    });
    match done_rx.recv_timeout(limit) {
        Ok(Ok(())) => {}
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("the test did not finish within {limit:?}"),
    }
}

/// `tool` on `PATH`, or a failure that says how to install it.
fn require(tool: &str, package: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(tool))
                .find(|candidate| candidate.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "`{tool}` is not installed: run scripts/install-deps (it installs Debian's \
                 `{package}` package)"
            )
        })
}

/// The printer the agent would use, which must exist here.
fn chromium() -> Printer {
    let printer = Printer::from_env();
    if !printer.binary().is_file() {
        panic!(
            "chromium is not installed ({} not found): run scripts/install-deps (it installs \
             Debian's `chromium` package), or point BOSUN_CHROMIUM at a Chromium binary",
            printer.binary().display()
        );
    }
    printer
}

/// Runs a poppler tool and returns its stdout.
fn poppler(tool: &str, args: &[&std::ffi::OsStr]) -> String {
    let binary = require(tool, "poppler-utils");
    let out = Command::new(&binary)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", binary.display()));
    assert!(
        out.status.success(),
        "{tool} failed with {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("poppler writes UTF-8")
}

/// Asserts `pdfinfo` reports one A4 page.
fn assert_one_a4_page(pdf: &Path) {
    let info = poppler("pdfinfo", &[pdf.as_os_str()]);
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {name} in pdfinfo output:\n{info}"))
            .to_owned()
    };
    assert_eq!(field("Pages:"), "1", "the sheet must be one page:\n{info}");
    // "594.96 x 841.92 pts (A4)"
    let size = field("Page size:");
    let dims: Vec<f64> = size
        .split_whitespace()
        .filter_map(|part| part.parse().ok())
        .collect();
    assert!(
        matches!(dims[..], [w, h] if (594.0..=596.0).contains(&w) && (841.0..=843.0).contains(&h)),
        "not A4 portrait: {size}"
    );
}

/// The sheet's text as `pdftotext` extracts it, whitespace removed: with `-layout`
/// (the page's geometry, so boxes side by side interleave line by line), or in reading
/// order (box after box, but a line-end hyphen may be taken for hyphenation).
fn text_of(pdf: &Path, layout: bool) -> String {
    let mut args: Vec<&std::ffi::OsStr> = vec![pdf.as_os_str(), "-".as_ref()];
    if layout {
        args.insert(0, "-layout".as_ref());
    }
    squeeze(&poppler("pdftotext", &args))
}

/// Asserts `expected`, whitespace removed, is in either text.
fn assert_on_sheet(layout: &str, reading: &str, expected: &str) {
    let expected = squeeze(expected);
    assert!(
        layout.contains(&expected) || reading.contains(&expected),
        "{expected} not on the sheet:\n{layout}"
    );
}

fn squeeze(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Asserts the PDF is 0600 and the scratch directory's parent is empty again.
fn assert_private_and_clean(pdf: &Path, scratch_parent: &Path) {
    let mode = std::fs::metadata(pdf)
        .expect("the PDF exists")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "{} is {mode:o}", pdf.display());
    let left: Vec<_> = std::fs::read_dir(scratch_parent)
        .expect("the scratch parent exists")
        .collect();
    assert!(left.is_empty(), "scratch left behind: {left:?}");
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // agentd/ is one level below the workspace root.
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
            manifest.parent().unwrap_or(manifest).join("target")
        })
}

const BLOB_CAVEAT: &str =
    "With this block the code works even if the hub is gone; it is useless without the 12 words.";
const KEY_CAVEAT: &str = "This is the key itself: anyone holding this paper can read every \
                          backup, with no code needed, and it cannot be revoked. Keep it in a safe.";
/// The paper key's caveat after a rotation: the key reads the backups made with it.
const ROTATED_KEY_CAVEAT: &str = "This is the key itself: anyone holding this paper can read \
                                  every backup made with it, with no code needed, and it \
                                  cannot be revoked. Keep it in a safe.";

#[test]
fn sheet_with_both_extras_is_one_a4_page_with_every_word() {
    within(BUDGET, || {
        let printer = chromium();
        let state = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let printer = printer.with_scratch_parent(scratch.path().to_path_buf());

        // A real K, and K really wrapped under the words (a low scrypt work factor: the
        // sheet only prints the armor).
        let key = PbsKey::load_or_create(state.path()).unwrap();
        let fingerprint = key.fingerprint();
        let key_file = key.key_file_json();
        let words = strings(&WORDS);
        let mut recipient = age::scrypt::Recipient::new(words.join(" ").into());
        recipient.set_work_factor(10);
        let blob = age::encrypt_and_armor(&recipient, key_file.as_bytes()).unwrap();
        // The key this rotation retired.
        let retired_dir = tempfile::tempdir().unwrap();
        let retired = PbsKey::load_or_create(retired_dir.path())
            .unwrap()
            .fingerprint();
        let older = [OlderKey {
            fingerprint: retired.clone(),
            retired_at: "2025-03-01T23:30:00Z".parse().unwrap(),
        }];

        let content = SheetContent {
            hostname: "pve-01.example.net",
            host_id: uuid::Uuid::now_v7(),
            created_at: "2025-03-01T23:30:00Z".parse().unwrap(),
            words: &words,
            key_fingerprint: &fingerprint,
            rotated: true,
            older_keys: &older,
            wrapped_blob: Some(&blob),
            paper_key: Some(key_file.as_str()),
        };
        let started = Instant::now();
        let pdf = print_sheet(out.path(), &content, &printer).unwrap();
        eprintln!("printed the sheet in {:?}", started.elapsed());

        assert_eq!(
            pdf,
            out.path().join("recovery-sheet-pve-01.example.net.pdf")
        );
        assert_private_and_clean(&pdf, scratch.path());
        assert_one_a4_page(&pdf);

        let text = text_of(&pdf, true);
        let reading = text_of(&pdf, false);
        for (index, word) in WORDS.iter().enumerate() {
            let numbered = format!("{}{word}", index + 1);
            assert!(
                text.contains(&numbered),
                "{numbered} not on the sheet:\n{text}"
            );
        }
        assert!(text.contains(&fingerprint), "{text}");
        for expected in [
            "Bosun recovery code",
            "pve-01.example.net",
            &content.host_id.to_string(),
            "2025-03-01 (UTC)",
            &fingerprint,
            "This code replaces an earlier recovery code",
            &format!(
                "The earlier code still unlocks only the keys up to {} (backups made before \
                 2025-03-01), never the key above.",
                &retired[..23]
            ),
            &format!("{} (2025-03-01)", &retired[..23]),
            "It also unlocks these keys, each used before its date.",
            "can be read by nobody: not your operator, not Bosun",
            "does not re-encrypt existing backups",
            BLOB_CAVEAT,
            ROTATED_KEY_CAVEAT,
        ] {
            assert_on_sheet(&text, &reading, expected);
        }
        for line in blob.lines() {
            assert!(
                text.contains(&squeeze(line)),
                "blob line {line} not on the sheet"
            );
        }
        let data = serde_json::from_str::<serde_json::Value>(&key_file).unwrap()["data"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            reading.contains(&data),
            "the paper key's data is not on the sheet"
        );

        let artifacts = target_dir().join("test-artifacts");
        std::fs::create_dir_all(&artifacts).unwrap();
        let png = artifacts.join("recovery-sheet");
        poppler(
            "pdftoppm",
            &[
                "-png".as_ref(),
                "-r".as_ref(),
                "60".as_ref(),
                "-singlefile".as_ref(),
                pdf.as_os_str(),
                png.as_os_str(),
            ],
        );
        let png = png.with_extension("png");
        assert!(std::fs::metadata(&png).unwrap().len() > 0);
        eprintln!("page 1 is at {}", png.display());
    });
}

#[test]
fn sheet_without_extras_leaves_them_out() {
    within(BUDGET, || {
        let printer = chromium();
        let out = tempfile::tempdir().unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let printer = printer.with_scratch_parent(scratch.path().to_path_buf());
        let words = strings(&WORDS);
        let fingerprint = "0e:ab:d4:46:0b:6e:b9:ca:34:50:23:de:e2:b7:78:c7:\
                           90:e5:4a:16:83:b9:65:9c:0a:57:ae:19:90:90:15:9b";
        let content = SheetContent {
            hostname: "<b>node</b> 7",
            host_id: uuid::Uuid::now_v7(),
            created_at: jiff::Timestamp::now(),
            words: &words,
            key_fingerprint: fingerprint,
            rotated: false,
            older_keys: &[],
            wrapped_blob: None,
            paper_key: None,
        };
        let pdf = print_sheet(out.path(), &content, &printer).unwrap();

        assert_eq!(pdf, out.path().join("recovery-sheet-_b_node__b__7.pdf"));
        assert_private_and_clean(&pdf, scratch.path());
        assert_one_a4_page(&pdf);
        let text = text_of(&pdf, true);
        for (index, word) in WORDS.iter().enumerate() {
            let numbered = format!("{}{word}", index + 1);
            assert!(
                text.contains(&numbered),
                "{numbered} not on the sheet:\n{text}"
            );
        }
        assert!(text.contains(fingerprint), "{text}");
        // The host name is shown as text, not markup.
        assert!(text.contains("<b>node</b>7"), "{text}");
        for absent in [
            "optionalextra",
            "Lockedkey",
            "Paperkey",
            "keyitself",
            "BEGINAGE",
            "replacesanearlier",
        ] {
            assert!(!text.contains(absent), "{absent} is on the sheet:\n{text}");
        }
    });
}

#[test]
fn largest_sheet_still_fits_one_page() {
    // The wrapped blob at its longest before any rotation, and with the most older keys
    // printed beside it; the longest list of older keys without it.
    largest_sheet(0, true);
    largest_sheet(MAX_OLDER_KEYS_WITH_BLOB, true);
    largest_sheet(MAX_OLDER_KEYS, false);
}

fn largest_sheet(older_keys: usize, with_blob: bool) {
    within(BUDGET, move || {
        let printer = chromium();
        let out = tempfile::tempdir().expect("a temporary directory");
        let scratch = tempfile::tempdir().expect("a temporary directory");
        let printer = printer.with_scratch_parent(scratch.path().to_path_buf());
        let words = strings(&LONG_WORDS);
        let hostname: String = "backup-node-with-a-rather-long-name."
            .repeat(8)
            .chars()
            .take(MAX_HOSTNAME_CHARS)
            .collect();
        let mut blob = String::from("-----BEGIN AGE ENCRYPTED FILE-----\n");
        let end = "-----END AGE ENCRYPTED FILE-----\n";
        while blob.len() + 65 + end.len() <= MAX_WRAPPED_BLOB_CHARS {
            blob.push_str(&"W".repeat(64));
            blob.push('\n');
        }
        blob.push_str(end);
        let paper_key = format!(
            "{{\"kdf\":null,\"hint\":\"{}\"}}",
            "m".repeat(MAX_PAPER_KEY_CHARS - 22)
        );
        assert_eq!(paper_key.len(), MAX_PAPER_KEY_CHARS);
        let fingerprint = "ff:".repeat(31) + "ff";
        let older: Vec<OlderKey> = (0..older_keys)
            .map(|i| OlderKey {
                fingerprint: format!("{:02x}:", i + 0xa0).repeat(31) + "ee",
                retired_at: jiff::Timestamp::now(),
            })
            .collect();
        let content = SheetContent {
            hostname: &hostname,
            host_id: uuid::Uuid::now_v7(),
            created_at: jiff::Timestamp::now(),
            words: &words,
            key_fingerprint: &fingerprint,
            rotated: true,
            older_keys: &older,
            wrapped_blob: with_blob.then_some(blob.as_str()),
            paper_key: Some(&paper_key),
        };
        let pdf = print_sheet(out.path(), &content, &printer).expect("the sheet prints");
        assert_one_a4_page(&pdf);
        let text = text_of(&pdf, true);
        let reading = text_of(&pdf, false);
        for (index, word) in LONG_WORDS.iter().enumerate() {
            let numbered = format!("{}{word}", index + 1);
            assert!(
                text.contains(&numbered),
                "{numbered} not on the sheet:\n{text}"
            );
        }
        // Everything down to the footer made it onto the page.
        let mut expected = vec![hostname.as_str(), fingerprint.as_str(), "Page 1 of 1"];
        match older.last() {
            Some(oldest) => expected.extend([ROTATED_KEY_CAVEAT, &oldest.fingerprint[..23]]),
            None => expected.push(KEY_CAVEAT),
        }
        if with_blob {
            expected.extend([BLOB_CAVEAT, "-----END AGE ENCRYPTED FILE-----"]);
        }
        for expected in expected {
            assert_on_sheet(&text, &reading, expected);
        }
    });
}
