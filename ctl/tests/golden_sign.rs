//! `bosunctl golden sign` against the stock OpenSSH tools: the entry it writes carries the
//! exact document it signed, `ssh-keygen -Y verify` accepts the signature in the
//! `bosun-golden@v1` namespace only, and nothing is left beside the output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};

use bosun_proto::desired::GoldenArchive;
use bosun_proto::golden::GoldenDocument;

use crate::common;
use common::verify;

const VOLID: &str = "local:backup/vzdump-lxc-9000-2026_11_01-02_00_00.tar.zst";
const SHA: &str = "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08";

fn bosunctl(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bosunctl"))
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `bosunctl golden sign` for [`VOLID`] with `sha256` and `key`, writing `golden.json`.
fn golden_sign(dir: &Path, sha256: &str, key: &str) -> std::process::Output {
    bosunctl(
        dir,
        &[
            "golden",
            "sign",
            "--volid",
            VOLID,
            "--sha256",
            sha256,
            "-f",
            key,
            "-o",
            "golden.json",
        ],
    )
}

#[test]
fn golden_sign_writes_an_entry_openssh_verifies_and_leaves_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "op", "-f"])
        .arg(dir.path().join("key"))
        .status()
        .unwrap();
    assert!(status.success());
    let before = u64::try_from(jiff::Timestamp::now().as_second()).unwrap();
    let out = golden_sign(dir.path(), SHA, "key");
    let after = u64::try_from(jiff::Timestamp::now().as_second()).unwrap();
    assert!(out.status.success(), "{out:?}");
    let entry: GoldenArchive =
        serde_json::from_slice(&std::fs::read(dir.path().join("golden.json")).unwrap()).unwrap();
    assert_eq!(entry.volid, VOLID);
    assert_eq!(entry.sha256, SHA.to_ascii_lowercase());
    let signed = entry.signed.expect("a signed document");
    let document = signed.golden().unwrap();
    assert!(
        (before..=after).contains(&document.serial()),
        "the serial defaults to the signing second: {document:?}"
    );
    assert_eq!(
        document,
        GoldenDocument::new(VOLID, &SHA.to_ascii_lowercase()).with_serial(document.serial())
    );
    let bytes = signed.golden_bytes().unwrap();
    assert!(verify(
        dir.path(),
        "bosun-golden@v1",
        &bytes,
        &signed.signature
    ));
    assert!(!verify(
        dir.path(),
        "bosun-job@v1",
        &bytes,
        &signed.signature
    ));
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("golden"))
        .collect();
    left.sort();
    assert_eq!(left, ["golden.json"]);
}

#[test]
fn golden_sign_refuses_a_bad_hash_or_key_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bad_hash = golden_sign(dir.path(), "abc", "key");
    assert_eq!(bad_hash.status.code(), Some(4), "{bad_hash:?}");
    assert!(String::from_utf8_lossy(&bad_hash.stderr).contains("--sha256"));
    let no_key = golden_sign(dir.path(), SHA, "missing-key");
    assert!(!no_key.status.success());
    assert!(String::from_utf8_lossy(&no_key.stderr).contains("ssh-keygen -Y sign"));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing left behind"
    );
}

#[test]
fn golden_sign_binds_the_choice_to_a_host_and_an_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "op", "-f"])
        .arg(dir.path().join("key"))
        .status()
        .unwrap();
    assert!(status.success());
    let host = uuid::Uuid::new_v4().to_string();
    let sign = |extra: &[&str]| {
        let _ = std::fs::remove_file(dir.path().join("golden.json"));
        let mut args = vec![
            "golden",
            "sign",
            "--volid",
            VOLID,
            "--sha256",
            SHA,
            "-f",
            "key",
            "-o",
            "golden.json",
        ];
        args.extend_from_slice(extra);
        bosunctl(dir.path(), &args)
    };
    let before = jiff::Timestamp::now();
    let out = sign(&["--host", &host, "--expires-in", "90d"]);
    assert!(out.status.success(), "{out:?}");
    let entry: GoldenArchive =
        serde_json::from_slice(&std::fs::read(dir.path().join("golden.json")).unwrap()).unwrap();
    let signed = entry.signed.expect("a signed document");
    let document = signed.golden().unwrap();
    assert_eq!(document.host_id.unwrap().to_string(), host);
    let expires = document.expires_at.unwrap();
    let ninety_days = jiff::SignedDuration::from_hours(90 * 24);
    assert!(
        expires >= before + ninety_days && expires <= jiff::Timestamp::now() + ninety_days,
        "{expires}"
    );
    assert!(verify(
        dir.path(),
        "bosun-golden@v1",
        &signed.golden_bytes().unwrap(),
        &signed.signature
    ));

    let out = sign(&["--expires-at", "2031-01-01T00:00:00Z"]);
    assert!(out.status.success(), "{out:?}");
    let entry: GoldenArchive =
        serde_json::from_slice(&std::fs::read(dir.path().join("golden.json")).unwrap()).unwrap();
    let document = entry.signed.unwrap().golden().unwrap();
    assert_eq!(document.host_id, None);
    assert_eq!(
        document.expires_at,
        Some("2031-01-01T00:00:00Z".parse().unwrap())
    );

    // The operator's own serial, as for a rollback.
    let out = sign(&["--serial", "3"]);
    assert!(out.status.success(), "{out:?}");
    let entry: GoldenArchive =
        serde_json::from_slice(&std::fs::read(dir.path().join("golden.json")).unwrap()).unwrap();
    assert_eq!(entry.signed.unwrap().golden().unwrap().serial, Some(3));

    // An expiry already past, a nil host and two expiries at once are refused before
    // anything is signed.
    for (extra, code, names) in [
        (
            &["--expires-at", "2020-01-01T00:00:00Z"][..],
            4,
            "--expires-at",
        ),
        (&["--expires-in", "0"][..], 4, "--expires-in"),
        (&["--expires-in", "3x"][..], 4, "--expires-in"),
        (
            &["--host", "00000000-0000-0000-0000-000000000000"][..],
            4,
            "--host",
        ),
        (
            &["--expires-in", "1d", "--expires-at", "2031-01-01T00:00:00Z"][..],
            2,
            "--expires-at",
        ),
    ] {
        let out = sign(extra);
        assert_eq!(out.status.code(), Some(code), "{extra:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(names),
            "{extra:?}: {out:?}"
        );
        assert!(!dir.path().join("golden.json").exists(), "{extra:?}");
    }
}

#[test]
fn a_vm_base_is_signed_with_its_kind_and_a_kind_that_names_another_archive_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "op", "-f"])
        .arg(dir.path().join("key"))
        .status()
        .unwrap();
    assert!(status.success());
    let vm = "local:backup/vzdump-qemu-9001-2026_11_01-02_00_00.vma.zst";
    let sign = |volid: &str, kind: &str| {
        bosunctl(
            dir.path(),
            &[
                "golden",
                "sign",
                "--volid",
                volid,
                "--sha256",
                SHA,
                "--kind",
                kind,
                "-f",
                "key",
                "-o",
                "golden.json",
            ],
        )
    };
    let out = sign(vm, "qemu");
    assert!(out.status.success(), "{out:?}");
    let entry: GoldenArchive =
        serde_json::from_slice(&std::fs::read(dir.path().join("golden.json")).unwrap()).unwrap();
    let signed = entry.signed.expect("a signed document");
    let document = signed.golden().unwrap();
    assert_eq!(document.kind, bosun_proto::desired::GuestKind::Qemu);
    assert!(verify(
        dir.path(),
        "bosun-golden@v1",
        &signed.golden_bytes().unwrap(),
        &signed.signature
    ));
    std::fs::remove_file(dir.path().join("golden.json")).unwrap();
    for (volid, kind) in [(vm, "lxc"), (VOLID, "qemu")] {
        let out = sign(volid, kind);
        assert!(!out.status.success(), "{volid} as {kind}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--kind"),
            "{out:?}"
        );
        assert!(!dir.path().join("golden.json").exists());
    }
}
