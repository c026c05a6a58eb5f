//! The recovery sheet rendered by the agent itself (no browser) and read back with
//! poppler's `pdfinfo`, `pdffonts`, `pdftotext` and `pdftoppm`: one A4 page with its fonts
//! embedded that holds every word, the fingerprint, the customer and operator, the steps,
//! the handover box and the caveats, with and without the extras, and with the largest
//! content the input limits allow; every word's box (`pdftotext -bbox`) inside the page's
//! margins, and no fingerprint broken inside a byte at a line's end.
//!
//! poppler-utils is required, not optional: CI installs it with `scripts/install-deps`,
//! and a missing tool fails the test saying so. The sheet with both extras is kept as
//! `target/test-artifacts/recovery-sheet.png`.

use std::os::unix::fs::PermissionsExt as _;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bosun_agentctl::escrow::sheet::{
    MAX_HOSTNAME_CHARS, MAX_OLDER_KEYS, MAX_OLDER_KEYS_WITH_BLOB, MAX_PARTY_CHARS,
    MAX_WRAPPED_BLOB_CHARS, OlderKey, SheetContent, print_sheet,
};
use bosun_agentd::trust::keys::pbs_key::PbsKey;

/// Each test's budget; one sheet takes milliseconds, poppler a fraction of a second.
const BUDGET: Duration = Duration::from_secs(60);

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

/// The sheet speaks of what Bosun keeps (containers) and sets commands on their own lines,
/// never in quotes a reader would type: no backtick and no "virtual machines" on it.
fn assert_plain_text(reading: &str) {
    assert!(
        !reading.contains('`'),
        "a backtick on the sheet:\n{reading}"
    );
    assert!(
        !reading.contains("virtualmachine"),
        "the sheet speaks of virtual machines:\n{reading}"
    );
}

/// How far down the page the content reaches, as a fraction of the page's height: the
/// lowest row with ink above the footer's band (the bottom 50 points), on the page rendered
/// in gray by `pdftoppm`.
fn lowest_ink_above_footer(pdf: &Path) -> f32 {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let base = dir.path().join("page");
    poppler(
        "pdftoppm",
        &[
            "-gray".as_ref(),
            "-r".as_ref(),
            "36".as_ref(),
            "-singlefile".as_ref(),
            pdf.as_os_str(),
            base.as_os_str(),
        ],
    );
    let pgm = std::fs::read(base.with_extension("pgm")).expect("pdftoppm wrote the page");
    // P5 WIDTH HEIGHT 255, then one byte a pixel.
    let mut fields = Vec::new();
    let mut at = 0;
    while fields.len() < 4 {
        while pgm[at].is_ascii_whitespace() {
            at += 1;
        }
        let start = at;
        while !pgm[at].is_ascii_whitespace() {
            at += 1;
        }
        fields.push(String::from_utf8_lossy(&pgm[start..at]).into_owned());
    }
    let pixels = &pgm[at + 1..];
    let width: usize = fields[1].parse().expect("a PGM width");
    let height: usize = fields[2].parse().expect("a PGM height");
    // The footer's band is the bottom 50 of the page's 841.89 points: in whole rows, the
    // same fraction of `height`.
    let footer_band = height - height * 5_000 / 84_189;
    let lowest = (0..footer_band)
        .rev()
        .find(|row| {
            pixels[row * width..(row + 1) * width]
                .iter()
                .any(|&p| p < 160)
        })
        .unwrap_or(0);
    lowest as f32 / height as f32
}

/// A word on the page and its box as `pdftotext -bbox` reads it: (text, xMin, yMin, xMax,
/// yMax), in points from the top left.
type WordBox = (String, f32, f32, f32, f32);

/// Every word's box, and the page's width and height.
fn word_boxes(pdf: &Path) -> (Vec<WordBox>, f32, f32) {
    let html = poppler(
        "pdftotext",
        &["-bbox".as_ref(), pdf.as_os_str(), "-".as_ref()],
    );
    let attr = |tag: &str, name: &str| -> f32 {
        let key = format!("{name}=\"");
        let at = tag
            .find(&key)
            .unwrap_or_else(|| panic!("no {name} in {tag}"))
            + key.len();
        tag[at..]
            .split('"')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {tag}"))
    };
    let page = html
        .split("<page ")
        .nth(1)
        .and_then(|p| p.split('>').next())
        .expect("a page element");
    let (width, height) = (attr(page, "width"), attr(page, "height"));
    let words = html
        .split("<word ")
        .skip(1)
        .map(|w| {
            let (tag, rest) = w.split_once('>').expect("a word element");
            let text = rest.split("</word>").next().unwrap_or_default();
            let text = text
                .replace("&amp;", "&")
                .replace("&lt;", "<")
                .replace("&gt;", ">");
            (
                text,
                attr(tag, "xMin"),
                attr(tag, "yMin"),
                attr(tag, "xMax"),
                attr(tag, "yMax"),
            )
        })
        .collect();
    (words, width, height)
}

/// Every word lies inside the page's margins (the layout's 40 points, which every box and
/// its text keep within), and no fingerprint is broken inside a byte at a line's end.
fn assert_inside_and_unbroken(pdf: &Path) {
    const MARGIN: f32 = 39.0;
    let (words, width, height) = word_boxes(pdf);
    assert!(!words.is_empty(), "pdftotext read no words");
    let outside: Vec<_> = words
        .iter()
        .filter(|(_, x0, y0, x1, y1)| {
            *x0 < MARGIN || *x1 > width - MARGIN || *y0 < 0.0 || *y1 > height
        })
        .collect();
    assert!(
        outside.is_empty(),
        "words outside the page's margins ({width} x {height}): {outside:?}"
    );
    let broken: Vec<_> = words
        .iter()
        .map(|(text, ..)| text.as_str())
        .filter(|text| {
            text.contains(':')
                && text.chars().all(|c| c == ':' || c.is_ascii_hexdigit())
                && text
                    .trim_matches(':')
                    .split(':')
                    .any(|byte| byte.len() != 2)
        })
        .collect();
    assert!(
        broken.is_empty(),
        "fingerprints broken inside a byte: {broken:?}"
    );
}

fn squeeze(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Asserts the PDF is 0600 and alone in its directory.
fn assert_private_and_alone(pdf: &Path) {
    let mode = std::fs::metadata(pdf)
        .expect("the PDF exists")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "{} is {mode:o}", pdf.display());
    let dir = pdf.parent().expect("the PDF is in a directory");
    let count = std::fs::read_dir(dir)
        .expect("the directory exists")
        .count();
    assert_eq!(count, 1, "more than the sheet in {}", dir.display());
}

/// Asserts `pdffonts` lists the three DejaVu fonts, each embedded and subset.
fn assert_fonts_embedded(pdf: &Path) {
    let fonts = poppler("pdffonts", &[pdf.as_os_str()]);
    let rows: Vec<&str> = fonts.lines().skip(2).collect();
    assert!(!rows.is_empty(), "no fonts:\n{fonts}");
    for row in &rows {
        // name type encoding emb sub uni object ID
        let columns: Vec<&str> = row.split_whitespace().collect();
        let n = columns.len();
        assert!(n >= 7, "{row}");
        assert_eq!(
            &columns[n - 5..n - 2],
            &["yes", "yes", "yes"],
            "a font is not embedded, subset and mapped to Unicode:\n{fonts}"
        );
        assert!(row.contains("DejaVu"), "not a built-in font:\n{fonts}");
    }
    for name in ["DejaVuSans-Bold", "DejaVuSansMono", "DejaVuSans "] {
        assert!(
            rows.iter().any(|row| row.contains(name)),
            "{name} missing:\n{fonts}"
        );
    }
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // agentctl/ is one level below the workspace root.
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
            manifest.parent().unwrap_or(manifest).join("target")
        })
}

const BLOB_CAVEAT: &str = "With this block the code works even if the hub is gone";
const KEY_CAVEAT: &str = "This is the key itself: anyone holding this paper can read every \
                          backup, with no code needed, and it cannot be revoked.";
/// The paper key's caveat after a rotation: the key reads the backups made with it.
const ROTATED_KEY_CAVEAT: &str = "This is the key itself: anyone holding this paper can read \
                                  every backup made with it, with no code needed, and it \
                                  cannot be revoked.";
const CUSTOMER: &str = "Acme Widgets GmbH";
const OPERATOR: &str = "Northwind Hosting";
const CONTACT: &str = "+49 30 1234567, ops@northwind.example";

#[test]
fn sheet_with_both_extras_is_one_a4_page_with_every_word() {
    within(BUDGET, || {
        let state = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();

        // A real K, and K really wrapped under the words (a low scrypt work factor: the
        // sheet only prints the armor).
        let key = PbsKey::load_or_create(state.path()).unwrap();
        let fingerprint = key.fingerprint();
        let key_file = key.key_file_json();
        let data = serde_json::from_str::<serde_json::Value>(&key_file).unwrap()["data"]
            .as_str()
            .unwrap()
            .to_owned();
        let raw: [u8; 32] =
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &data)
                .unwrap()
                .try_into()
                .unwrap();
        let paper_key = bosun_agentctl::escrow::paper_key::encode(&raw);
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
            paper_key: Some(paper_key.as_str()),
            customer: Some(CUSTOMER),
            operator: Some(OPERATOR),
            operator_contact: Some(CONTACT),
        };
        let started = Instant::now();
        let pdf = print_sheet(out.path(), &content).unwrap();
        eprintln!("rendered the sheet in {:?}", started.elapsed());

        assert_eq!(
            pdf,
            out.path().join("recovery-sheet-pve-01.example.net.pdf")
        );
        assert_private_and_alone(&pdf);
        assert_one_a4_page(&pdf);
        assert_inside_and_unbroken(&pdf);
        assert_fonts_embedded(&pdf);

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
            "Recovery code",
            "pve-01.example.net",
            CUSTOMER,
            OPERATOR,
            CONTACT,
            &format!("Who to call {OPERATOR}, {CONTACT}"),
            "The Bosun hub your hosting provider runs keeps a copy of that key, locked with \
             these words; it never holds the words.",
            "neither the hub nor your hosting provider stores them",
            "The hub keeps only the locked key, never these words.",
            "On the day the server is lost",
            &format!(
                "1. Call {OPERATOR} (see \u{201c}Who to call\u{201d} above) and say that this server is lost."
            ),
            "3. At the replacement server, run this command and type the 12 words when asked",
            "$ bosun-agentctl escrow recover Check that the key fingerprint",
            "4. The server then restores its containers from the newest offsite backups by itself.",
            "$ bosun-agentctl escrow rotate",
            "$ bosun-agentctl escrow recover --blob FILE",
            "$ bosun-agentctl escrow recover --paper-key",
            "Handover (filled in by hand)",
            "Copy 1 is kept at:",
            "Copy 2 is kept at:",
            "Handed over on (date):",
            "Signatures: the hosting provider's and the customer's",
            "Page 1 of 1",
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
            "can be read by nobody: not your hosting provider, not the hub",
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
        // The paper key as printed reads back into the key, and no JSON is printed.
        let layout = poppler(
            "pdftotext",
            &["-layout".as_ref(), pdf.as_os_str(), "-".as_ref()],
        );
        let printed: String = layout
            .lines()
            .flat_map(str::split_whitespace)
            .filter(|group| {
                group.len() == 4
                    && group
                        .bytes()
                        .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b))
            })
            .collect::<Vec<_>>()
            .join(" ");
        assert!(printed.contains(paper_key.as_str()), "{printed}");
        assert_eq!(
            *bosun_agentctl::escrow::paper_key::parse(&paper_key).unwrap(),
            raw
        );
        assert!(!reading.contains(&data) && !reading.contains("kdf"));
        assert_plain_text(&reading);
        // Nothing names Bosun as the one to call: the hoster does.
        assert!(!text.contains("BosunkeepsnocopY") && !text.contains("notBosun"));

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
        let out = tempfile::tempdir().unwrap();
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
            customer: None,
            operator: None,
            operator_contact: None,
        };
        let pdf = print_sheet(out.path(), &content).unwrap();

        assert_eq!(pdf, out.path().join("recovery-sheet-_b_node__b__7.pdf"));
        assert_private_and_alone(&pdf);
        assert_one_a4_page(&pdf);
        assert_inside_and_unbroken(&pdf);
        assert_fonts_embedded(&pdf);
        let text = text_of(&pdf, true);
        for (index, word) in WORDS.iter().enumerate() {
            let numbered = format!("{}{word}", index + 1);
            assert!(
                text.contains(&numbered),
                "{numbered} not on the sheet:\n{text}"
            );
        }
        assert!(text.contains(fingerprint), "{text}");
        // The host name is shown as given.
        assert!(text.contains("<b>node</b>7"), "{text}");
        // Without a customer or operator the sheet leaves lines to write them on.
        assert!(text.contains("Customer______"), "{text}");
        assert!(text.contains("Whotocall______"), "{text}");
        assert!(text.contains("1.Callyourhostingprovider"), "{text}");
        assert_plain_text(&text_of(&pdf, false));
        // Little on it: the sheet is set larger and fills its page, not two thirds of it.
        let reach = lowest_ink_above_footer(&pdf);
        assert!(
            reach > 0.85,
            "the content ends {:.0}% down the page",
            reach * 100.0
        );
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
        let out = tempfile::tempdir().expect("a temporary directory");
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
        let paper_key = bosun_agentctl::escrow::paper_key::encode(&[0xff; 32]);
        // Long, real-looking names at the limit (a string of the widest letter can still
        // overflow the page: that is refused with SheetError::TooLong, see the unit tests).
        let party: String =
            "Northwind Hosting and Datacenter Services GmbH & Co. KG, Berlin-Charlottenburg "
                .chars()
                .take(MAX_PARTY_CHARS)
                .collect();
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
            customer: Some(&party),
            operator: Some(&party),
            operator_contact: Some(&party),
        };
        let pdf = print_sheet(out.path(), &content).expect("the sheet fits the page");
        assert_one_a4_page(&pdf);
        assert_fonts_embedded(&pdf);
        assert_inside_and_unbroken(&pdf);
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
        let mut expected = vec![
            hostname.as_str(),
            fingerprint.as_str(),
            paper_key.as_str(),
            "Handed over on (date):",
            "Page 1 of 1",
        ];
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
