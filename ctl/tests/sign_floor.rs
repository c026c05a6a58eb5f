//! `bosunctl policy sign-floor` against the stock OpenSSH tools: the floor it prints or writes
//! into a desired state carries the exact document it signed, `ssh-keygen -Y verify` accepts
//! the signature in the `bosun-policy@v1` namespace only, and nothing is left behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};

use bosun_proto::desired::DesiredState;
use bosun_proto::retention::{FLOOR_SCHEMA, RetentionFloor};
use bosun_proto::signed::SignedDocument;

use crate::common;
use common::verify;

const HOST: &str = "0190f5a6-0000-7000-8000-000000000001";
const PBS: &str = "backup@pbs@pbs.example.net:store1";

fn bosunctl(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bosunctl"))
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .env("TMPDIR", dir.join("tmp"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `bosunctl policy sign-floor` for [`HOST`] with `key`, a first-tier and a PBS floor.
fn sign_floor(dir: &Path, key: &str, extra: &[&str]) -> std::process::Output {
    let pbs_tier = format!("{PBS}=keep_daily:7,keep_weekly:4");
    let mut args = vec![
        "policy",
        "sign-floor",
        "--host",
        HOST,
        "--key",
        key,
        "--tier",
        "first=keep_last:3,keep_daily:7",
        "--tier",
        &pbs_tier,
    ];
    args.extend_from_slice(extra);
    bosunctl(dir, &args)
}

/// The floor inside `signed`, checked against what the command line asked for.
fn check_floor(signed: &SignedDocument) -> Vec<u8> {
    let floor: RetentionFloor = signed
        .decode(
            "floor",
            FLOOR_SCHEMA,
            bosun_proto::retention::MAX_FLOOR_DOCUMENT,
        )
        .unwrap();
    floor.validate().unwrap();
    assert_eq!(floor.host_id.to_string(), HOST);
    let age = jiff::Timestamp::now().duration_since(floor.issued_at);
    assert!(age.as_secs() < 600, "issued now, not {age:?} ago");
    assert_eq!(floor.tier(None).unwrap().retention.keep_last, 3);
    assert_eq!(floor.tier(Some(PBS)).unwrap().retention.keep_weekly, 4);
    signed.bytes_within("floor", 8192).unwrap()
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn sign_floor_prints_or_writes_a_floor_openssh_verifies_and_leaves_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::create_dir(dir.join("tmp")).unwrap();
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "op", "-f"])
        .arg(dir.join("key"))
        .status()
        .unwrap();
    assert!(status.success());
    let desired = include_str!("../../docs/proto/desired.json");
    std::fs::write(dir.join("desired.json"), desired).unwrap();
    let before = files(dir);

    // Printed.
    let out = sign_floor(dir, "key", &[]);
    assert!(out.status.success(), "{out:?}");
    let signed: SignedDocument = serde_json::from_slice(&out.stdout).unwrap();
    let bytes = check_floor(&signed);
    assert!(verify(dir, "bosun-policy@v1", &bytes, &signed.signature));
    assert!(!verify(dir, "bosun-golden@v1", &bytes, &signed.signature));
    assert!(!verify(dir, "bosun-job@v1", &bytes, &signed.signature));

    // Written into a desired state, which keeps everything else.
    let out = sign_floor(dir, "key", &["--desired", "desired.json"]);
    assert!(out.status.success(), "{out:?}");
    let written: DesiredState =
        serde_json::from_slice(&std::fs::read(dir.join("desired.json")).unwrap()).unwrap();
    written.validate().unwrap();
    let mut expected: DesiredState = serde_json::from_str(desired).unwrap();
    let signed = written.backup_policy.floor.clone().expect("a floor");
    expected.backup_policy.floor = Some(signed.clone());
    assert_eq!(written, expected);
    let bytes = check_floor(&signed);
    assert!(verify(dir, "bosun-policy@v1", &bytes, &signed.signature));

    assert_eq!(files(dir), before, "no file left beside the desired state");
    assert!(files(&dir.join("tmp")).is_empty(), "no temporary file left");
}

#[test]
fn sign_floor_refuses_a_bad_tier_or_key_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::create_dir(dir.join("tmp")).unwrap();
    let desired = include_str!("../../docs/proto/desired.json");
    std::fs::write(dir.join("desired.json"), desired).unwrap();
    let bad_tier = bosunctl(
        dir,
        &[
            "policy",
            "sign-floor",
            "--host",
            HOST,
            "--key",
            "key",
            "--tier",
            "first=keep_hourly:3",
        ],
    );
    assert_eq!(bad_tier.status.code(), Some(4), "{bad_tier:?}");
    assert!(String::from_utf8_lossy(&bad_tier.stderr).contains("--tier"));
    for extra in [&[][..], &["--desired", "desired.json"][..]] {
        let no_key = sign_floor(dir, "missing-key", extra);
        assert!(!no_key.status.success());
        assert!(String::from_utf8_lossy(&no_key.stderr).contains("ssh-keygen -Y sign"));
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("desired.json")).unwrap(),
        desired,
        "the desired state is untouched"
    );
    assert_eq!(files(dir), ["desired.json", "tmp"], "nothing left behind");
    assert!(files(&dir.join("tmp")).is_empty(), "no temporary file left");
}
