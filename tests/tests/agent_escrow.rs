//! The escrow commands as the operator runs them: the real `bosun-agentctl` binary, `escrow
//! create | rotate | recover | status`, on a host that enrolled at a real hub through the
//! simulator (its agent stopped again: the commands do not need the daemon).
//!
//! The words come off the printed PDF with `pdftotext`, the way a person reads the sheet,
//! and go back in on stdin. scrypt runs at the hidden `--work-factor 12` to keep each run
//! quick. The binary comes from the target directory of this test: `cargo build
//! --workspace --bins`, `cargo nextest run --workspace` and `make test` build it.
//!
//! Every test ends by checking that the recovery code was never stored: no file of a state
//! directory, nor of the hub's data directory, holds two consecutive words of any code the
//! test made.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::escrow_support;

use std::path::Path;

use agent_support::RealHub;
use bosun_agentctl::escrow::record;
use bosun_agentd::config::AgentConfig;
use bosun_agentd::trust::keys::pbs_key::keyring::RETIRED_FILE;
use bosun_agentd::trust::keys::pbs_key::{KEY_FILE, PbsKey};
use escrow_support::*;
use serde_json::Value;

/// A valid code (a BIP39 test vector) that no escrow here is wrapped under.
const FOREIGN_CODE: &str =
    "legal winner thank year wave sausage worth useful legal winner thank yellow";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_prints_a_private_sheet_stores_a_verified_escrow_and_runs_once() {
    let hub = RealHub::start().await;
    let host = Host::enroll(&hub).await;
    host.agentctl(&["escrow", "status"], None)
        .await
        .expect(0, &["escrow: none", "escrow create"]);
    assert_eq!(hub.host(host.id).await["escrow"]["state"], "none");

    let sheets = host.dir("sheets");
    let (run, pdf, words) = host.create(&sheets).await;
    run.expect(0, &["Print the sheet now", "shred -u"]);
    assert_eq!(mode(&pdf), 0o600, "the sheet holds the code");
    assert!(sheet_text(&pdf).contains(&host.id.to_string()));
    let listed: Vec<_> = std::fs::read_dir(&sheets).unwrap().flatten().collect();
    assert_eq!(
        listed.len(),
        1,
        "only the PDF is left in the sheet directory"
    );
    verified_escrow(&hub, &host).await;
    let stored = record::load(host.state_dir())
        .unwrap()
        .expect("escrow.json");
    assert_eq!(stored.key_fingerprint, host.fingerprint);
    assert_eq!(stored.rotations, 0);

    // A second run is refused before it makes anything: the code made first stays the one.
    let before = std::fs::read(&pdf).unwrap();
    let blob = hub_blob(&hub, host.id).await;
    host.sheet_command("create", &sheets, &[])
        .await
        .expect(75, &["exists", "escrow rotate"]);
    assert_eq!(std::fs::read(&pdf).unwrap(), before);
    assert_eq!(std::fs::read_dir(&sheets).unwrap().count(), 1);
    assert_eq!(hub_blob(&hub, host.id).await, blob);

    host.agentctl(&["escrow", "status"], None).await.expect(
        0,
        &[
            &format!("escrow: stored for key {}", host.fingerprint),
            "rotations: 0",
        ],
    );

    assert_codes_not_stored(&[host.state_dir(), hub.dir.path()], &[&words]);
    host.finish().await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_brings_k_back_from_the_sheets_words_and_never_replaces_another_key() {
    let hub = RealHub::start().await;
    let host = Host::enroll(&hub).await;
    let (_, pdf, words) = host
        .make_sheet("create", &host.dir("sheets"), &["--include-blob"])
        .await;
    assert!(
        sheet_text(&pdf).contains("-----BEGIN AGE ENCRYPTED FILE-----"),
        "--include-blob prints the wrapped key"
    );

    // A box that needs K back: the words, typed on stdin, open the hub's blob.
    host.remove_key();
    let run = host.recover(&words, None).await;
    run.expect(0, &[]);
    assert_eq!(
        run.stdout.lines().next(),
        Some("pbs encryption key recovered and installed"),
        "{run}"
    );
    assert_eq!(run.field("key fingerprint"), host.fingerprint);
    assert_eq!(host.installed_fingerprint(), Some(host.fingerprint.clone()));
    assert_eq!(mode(&host.key_file()), 0o600);
    host.recover(&words, None)
        .await
        .expect(0, &["already installed", &host.fingerprint]);

    // The bare armored block (as on a sheet with --include-blob) works without the hub's
    // envelope; the grid's numbers and capitals, as a person types them, are fine.
    let armored = hub_blob(&hub, host.id).await["ciphertext"]
        .as_str()
        .unwrap()
        .to_owned();
    let block = host.file("block.txt", &armored);
    let numbered: String = words
        .split(' ')
        .enumerate()
        .map(|(i, w)| format!("{}. {} ", i + 1, w.to_uppercase()))
        .collect();
    host.remove_key();
    host.recover(&numbered, Some(&block))
        .await
        .expect(0, &["recovered and installed", &host.fingerprint]);
    assert_eq!(host.installed_fingerprint(), Some(host.fingerprint.clone()));

    // Another K in place is never replaced, from the hub's blob or from a block.
    let elsewhere = tempfile::tempdir().unwrap();
    let other = PbsKey::load_or_create(elsewhere.path()).unwrap();
    assert_ne!(other.fingerprint(), host.fingerprint);
    std::fs::remove_file(host.key_file()).unwrap();
    std::fs::copy(elsewhere.path().join(KEY_FILE), host.key_file()).unwrap();
    let installed = std::fs::read(host.key_file()).unwrap();
    for blob in [None, Some(block.as_path())] {
        host.recover(&words, blob).await.expect(
            1,
            &[
                "not installed",
                "not replaced",
                &other.fingerprint(),
                &host.fingerprint,
            ],
        );
        assert_eq!(std::fs::read(host.key_file()).unwrap(), installed);
    }

    assert_codes_not_stored(&[host.state_dir(), hub.dir.path()], &[&words]);
    host.finish().await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_words_and_wrong_blobs_fail_cleanly_and_install_nothing() {
    let hub = RealHub::start().await;
    let (host, other) = tokio::join!(Host::enroll(&hub), Host::enroll(&hub));
    let (_, _, words) = host.create(&host.dir("sheets")).await;
    let (_, _, other_words) = other.create(&other.dir("sheets")).await;
    let record = std::fs::read(host.state_dir().join(record::FILE)).unwrap();
    host.remove_key();

    let (typo, position, meant) = mistyped(&words);
    let wrong_words: [(&str, String, Vec<String>); 6] = [
        (
            "a word not on the list",
            typo,
            vec![
                format!("word {position} is not a recovery-code word"),
                format!("did you mean \"{meant}\""),
            ],
        ),
        (
            "two words swapped",
            swapped(&words),
            vec!["checksum".into()],
        ),
        (
            "another valid code",
            FOREIGN_CODE.into(),
            vec!["do not unlock".into()],
        ),
        (
            "another host's code",
            other_words.clone(),
            vec!["do not unlock".into()],
        ),
        (
            "11 words",
            words.rsplit_once(' ').unwrap().0.to_owned(),
            vec!["12 words; 11 were given".into()],
        ),
        ("nothing", String::new(), vec!["0 were given".into()]),
    ];
    for (what, typed, says) in &wrong_words {
        let says: Vec<&str> = says.iter().map(String::as_str).collect();
        let run = host.recover(typed, None).await;
        run.expect(65, &says);
        assert!(!host.key_file().exists(), "{what}: K was installed");
        // The output never repeats what was typed: no two words, no word off the list.
        let shown = run.to_string();
        let typed: Vec<&str> = typed.split(' ').collect();
        for pair in typed.windows(2).map(|w| w.join(" ")) {
            assert!(!shown.contains(&pair), "{what}: {run}");
        }
        for word in typed
            .iter()
            .filter(|w| !w.is_empty() && bip39::Language::English.find_word(w).is_none())
        {
            assert!(!shown.contains(word), "{what}: {run}");
        }
    }

    // Blobs that are not this host's escrow, even with words that open them.
    let theirs = hub_blob(&hub, other.id).await;
    let theirs_json = host.file("theirs.json", &theirs.to_string());
    let mut relabelled = theirs.clone();
    relabelled["host_id"] = Value::String(host.id.to_string());
    let relabelled = host.file("relabelled.json", &relabelled.to_string());
    let their_block = host.file("their-block.txt", theirs["ciphertext"].as_str().unwrap());
    let ours = hub_blob(&hub, host.id).await;
    let ours_text = ours.to_string();
    let truncated_json = host.file("truncated.json", &ours_text[..ours_text.len() / 2]);
    let block = ours["ciphertext"].as_str().unwrap();
    let truncated_block = host.file("truncated-block.txt", &block[..block.len() / 2]);
    let mut cut = ours.clone();
    cut["ciphertext"] = Value::String(block[..block.len() / 2].to_owned());
    let cut = host.file("cut.json", &cut.to_string());
    let belongs = format!("belongs to host {}", other.id);
    let wrong_blobs: [(&str, &Path, &str, &str); 7] = [
        ("a truncated file", &truncated_json, &words, "malformed"),
        ("a document cut short", &cut, &words, "malformed"),
        ("a truncated block", &truncated_block, &words, "malformed"),
        ("another host's blob", &theirs_json, &words, &belongs),
        (
            "another host's blob, its words",
            &theirs_json,
            &other_words,
            &belongs,
        ),
        (
            "another host's blob relabelled",
            &relabelled,
            &other_words,
            &belongs,
        ),
        (
            "another host's block, its words",
            &their_block,
            &other_words,
            &belongs,
        ),
    ];
    for (what, file, typed, says) in wrong_blobs {
        let run = host.recover(typed, Some(file)).await;
        assert_eq!(run.code, Some(65), "{what}: {run}");
        assert!(run.stderr.contains(says), "{what}: {run}");
        assert!(!host.key_file().exists(), "{what}: K was installed");
    }
    assert_eq!(
        std::fs::read(host.state_dir().join(record::FILE)).unwrap(),
        record,
        "the escrow record is untouched"
    );

    // The failures were about the input: the right words still work.
    host.recover(&words, None)
        .await
        .expect(0, &["recovered and installed"]);
    assert_eq!(host.installed_fingerprint(), Some(host.fingerprint.clone()));

    assert_codes_not_stored(
        &[host.state_dir(), other.state_dir(), hub.dir.path()],
        &[&words, &other_words],
    );
    host.finish().await;
    other.finish().await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_makes_a_new_key_under_new_words_and_an_old_sheet_opens_only_the_old_key() {
    let hub = RealHub::start().await;
    let host = Host::enroll(&hub).await;
    host.sheet_command("rotate", &host.dir("early"), &[])
        .await
        .expect(75, &["no escrow to rotate", "escrow create"]);

    let k = host.fingerprint.clone();
    let (_, old_pdf, old_words) = host.create(&host.dir("first")).await;
    let old_blob = hub_blob(&hub, host.id).await;
    let old_blob_file = host.file("old-blob.json", &old_blob.to_string());
    let run = host.sheet_command("rotate", &host.dir("second"), &[]).await;
    let k2 = run.field("key fingerprint");
    run.expect(
        0,
        &[
            "rotated with a new key",
            &format!("previous key fingerprint: {k}"),
            &format!("older key: {k}"),
            &format!("The old code still opens only the keys up to {k}"),
            "never the new key",
        ],
    );
    assert_ne!(k2, k, "a rotation makes a new key");
    assert_eq!(host.installed_fingerprint(), Some(k2.clone()));
    let new_pdf = std::path::PathBuf::from(run.field("recovery sheet"));
    let new_words = words_on_sheet(&new_pdf);
    assert_ne!(new_words, old_words, "a new code");
    assert!(old_pdf.is_file() && new_pdf.is_file());
    let sheet = sheet_text(&new_pdf);
    let squeezed = sheet.replace(char::is_whitespace, "");
    for expected in [
        "replaces an earlier recovery code".to_owned(),
        format!(
            "The earlier code still unlocks only the keys up to {} (backups made before",
            &k[..23]
        ),
        "never the key above".to_owned(),
        format!("{} (", &k[..23]),
    ] {
        assert!(
            squeezed.contains(&expected.replace(char::is_whitespace, "")),
            "{expected} is not on the sheet:\n{sheet}"
        );
    }

    let new_blob = hub_blob(&hub, host.id).await;
    assert_ne!(new_blob["ciphertext"], old_blob["ciphertext"]);
    assert_eq!(new_blob["key_fingerprint"], k2.as_str());
    host.agentctl(&["escrow", "status"], None).await.expect(
        0,
        &[
            &format!("escrow: stored for key {k2}"),
            "rotations: 1",
            &format!("current key: {k2}"),
            &format!("older key: {k}"),
        ],
    );
    let k2_file = std::fs::read_to_string(host.key_file()).unwrap();

    // A box without its keys, and an attacker's best: the old sheet's words.
    let forget = || {
        std::fs::remove_file(host.key_file()).unwrap();
        let _ = std::fs::remove_file(host.state_dir().join(RETIRED_FILE));
    };
    forget();
    host.recover(&old_words, None)
        .await
        .expect(65, &["do not unlock"]);
    assert!(!host.key_file().exists());
    // The old words with the old blob (the hub's copy from before, or the block an old
    // sheet printed) give back K, and nothing made after the rotation.
    host.recover(&old_words, Some(&old_blob_file))
        .await
        .expect(0, &["recovered and installed", &k]);
    assert_eq!(host.installed_fingerprint(), Some(k.clone()));
    assert!(!host.state_dir().join(RETIRED_FILE).exists());
    let k2_data = k2_file
        .split("\"data\":\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    for (place, bytes) in files_under(host.state_dir()) {
        assert!(!contains(&bytes, k2_data), "the new key is in {place}");
    }

    // The new words open both keys: on this box the new key replaces the old one, which
    // joins the retired keys.
    let run = host.recover(&new_words, None).await;
    run.expect(
        0,
        &["recovered and installed", &k2, &format!("older key: {k}")],
    );
    assert_eq!(host.installed_fingerprint(), Some(k2.clone()));
    host.agentctl(&["escrow", "status"], None).await.expect(
        0,
        &[&format!("current key: {k2}"), &format!("older key: {k}")],
    );
    // And on an empty box.
    forget();
    host.recover(&new_words, None).await.expect(
        0,
        &["recovered and installed", &k2, &format!("older key: {k}")],
    );
    assert_eq!(std::fs::read_to_string(host.key_file()).unwrap(), k2_file);
    assert_eq!(mode(&host.state_dir().join(RETIRED_FILE)), 0o600);

    assert_codes_not_stored(
        &[host.state_dir(), hub.dir.path()],
        &[&old_words, &new_words],
    );
    host.finish().await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_with_the_hub_unreachable_keeps_the_key_and_leaves_no_sheet() {
    let hub = RealHub::start().await;
    let host = Host::enroll(&hub).await;
    let (_, _, words) = host.create(&host.dir("first")).await;
    let blob = hub_blob(&hub, host.id).await;
    let record = std::fs::read(host.state_dir().join(record::FILE)).unwrap();
    let key = std::fs::read(host.key_file()).unwrap();
    let config = std::fs::read_to_string(&host.files.config_path).unwrap();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!(
            "https://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        )
    };
    std::fs::write(&host.files.config_path, config.replace(&hub.url, &closed)).unwrap();
    let sheets = host.dir("second");
    host.sheet_command("rotate", &sheets, &[])
        .await
        .expect(69, &["hub", "run the command again"]);
    std::fs::write(&host.files.config_path, &config).unwrap();
    assert_eq!(
        std::fs::read_dir(&sheets).unwrap().count(),
        0,
        "the sheet is deleted"
    );
    assert_eq!(
        std::fs::read(host.key_file()).unwrap(),
        key,
        "K stays current"
    );
    assert!(!host.state_dir().join(RETIRED_FILE).exists());
    assert_eq!(
        std::fs::read(host.state_dir().join(record::FILE)).unwrap(),
        record
    );
    assert_eq!(hub_blob(&hub, host.id).await, blob);
    assert_codes_not_stored(&[host.state_dir(), hub.dir.path()], &[&words]);
    host.finish().await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_with_the_hub_unreachable_leaves_no_sheet_and_no_record_and_can_run_again() {
    let hub = RealHub::start().await;
    let host = Host::enroll(&hub).await;
    let config = std::fs::read_to_string(&host.files.config_path).unwrap();
    assert_eq!(config.matches(&hub.url).count(), 1, "{config}");
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!(
            "https://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        )
    };
    std::fs::write(&host.files.config_path, config.replace(&hub.url, &closed)).unwrap();
    assert_eq!(
        AgentConfig::load(&host.files.config_path)
            .unwrap()
            .hub
            .url
            .as_str(),
        format!("{closed}/")
    );

    let sheets = host.dir("sheets");
    host.sheet_command("create", &sheets, &[])
        .await
        .expect(69, &["hub", "not sent", "run the command again"]);
    let left: Vec<_> = std::fs::read_dir(&sheets)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(
        left.is_empty(),
        "the sheet of an unstored code is deleted: {left:?}"
    );
    assert!(!host.state_dir().join(record::FILE).exists());
    assert_eq!(hub.host(host.id).await["escrow"]["state"], "none");

    // Once the hub answers, the same command succeeds.
    std::fs::write(&host.files.config_path, &config).unwrap();
    let (_, pdf, words) = host.create(&sheets).await;
    assert!(pdf.is_file());
    verified_escrow(&hub, &host).await;
    assert!(record::load(host.state_dir()).unwrap().is_some());

    assert_codes_not_stored(&[host.state_dir(), hub.dir.path()], &[&words]);
    host.finish().await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_terminal_the_words_are_not_echoed_and_a_typo_is_asked_again() {
    let hub = RealHub::start().await;
    let host = Host::enroll(&hub).await;
    let (_, _, words) = host.make_sheet("create", &host.dir("sheets"), &[]).await;
    host.remove_key();
    let (typo, position, meant) = mistyped(&words);
    let run = host.recover_at_terminal(&[typo, words.clone()]).await;
    run.expect(0, &["recovered and installed", &host.fingerprint]);
    assert!(
        run.stdout.contains(&format!("word {position}")) && run.stdout.contains(&meant),
        "the typo is named with the likely word: {run}"
    );
    assert_eq!(
        run.stdout.matches("Type the 12 words").count(),
        2,
        "asked again: {run}"
    );
    // Nothing typed appears on the terminal: no two consecutive words of the code.
    let typed: Vec<&str> = words.split(' ').collect();
    for pair in typed.windows(2) {
        assert!(
            !run.stdout.contains(&pair.join(" ")),
            "the terminal echoed the code: {run}"
        );
    }
    assert_eq!(host.installed_fingerprint(), Some(host.fingerprint.clone()));
    host.finish().await;
}

/// The groups of the paper key as printed on the sheet (14 groups of 4 base32 characters).
fn paper_key_on_sheet(pdf: &Path) -> String {
    let groups: Vec<String> = sheet_text(pdf)
        .split_whitespace()
        .filter(|t| {
            t.len() == 4
                && t.bytes()
                    .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b))
        })
        .map(str::to_owned)
        .collect();
    assert!(groups.len() >= 14, "no paper key on the sheet: {groups:?}");
    // The key's 14 groups are the only run of them on the page.
    groups[groups.len() - 14..].join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_paper_key_on_the_sheet_is_typed_back_by_recover_and_the_sheet_names_the_people() {
    let hub = RealHub::start().await;
    let host = Host::enroll(&hub).await;
    let sheets = host.dir("sheets");
    // Bad fields are refused by the command line before anything is made.
    let long = "x".repeat(65);
    for bad in ["", &long, "Acme\u{7}"] {
        host.sheet_command("create", &sheets, &["--customer", bad])
            .await
            .expect(2, &["--customer"]);
    }
    assert_eq!(std::fs::read_dir(&sheets).unwrap().count(), 0);

    let (_, pdf, words) = host
        .make_sheet(
            "create",
            &sheets,
            &[
                "--paper-key",
                "--customer",
                "Acme Widgets GmbH",
                "--operator-name",
                "Northwind Hosting",
                "--operator-contact",
                "+49 30 1234567",
            ],
        )
        .await;
    let text: String = sheet_text(&pdf).split_whitespace().collect();
    for expected in [
        "AcmeWidgetsGmbH",
        "WhotocallNorthwindHosting,+49301234567",
        "1.CallNorthwindHosting",
        "Handover(filledinbyhand)",
        "Thehubkeepsonlythelockedkey,neverthesewords.",
    ] {
        assert!(
            text.contains(expected),
            "{expected} not on the sheet:\n{text}"
        );
    }
    let paper_key = paper_key_on_sheet(&pdf);
    assert!(!text.contains("kdf"), "the paper key is no longer JSON");

    // A mistyped character is refused by the checksum and installs nothing.
    host.remove_key();
    let mut typo: Vec<char> = paper_key.chars().collect();
    typo[0] = if typo[0] == 'A' { 'C' } else { 'A' };
    let typo: String = typo.into_iter().collect();
    host.agentctl(
        &["escrow", "recover", "--paper-key"],
        Some(&format!("{typo}\n")),
    )
    .await
    .expect(65, &["checksum"]);
    assert_eq!(host.installed_fingerprint(), None);

    // Typed as a person might (lower case, dashes), it brings K back without the words.
    let typed = paper_key.to_lowercase().replace(' ', "-");
    let run = host
        .agentctl(
            &["escrow", "recover", "--paper-key"],
            Some(&format!("{typed}\n")),
        )
        .await;
    run.expect(0, &["recovered and installed"]);
    assert_eq!(run.field("key fingerprint"), host.fingerprint);
    assert_eq!(host.installed_fingerprint(), Some(host.fingerprint.clone()));
    assert_eq!(mode(&host.key_file()), 0o600);

    assert_codes_not_stored(&[host.state_dir(), hub.dir.path()], &[&words]);
    host.finish().await;
    hub.stop().await;
}
