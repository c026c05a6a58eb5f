//! `break_glass_open` / `break_glass_close` through the real binary: the exact line in the
//! real file (which OpenSSH's own parser, `ssh-keygen -l`, reads as one key), its owner and
//! modes as sshd's StrictModes wants them, one door at a time, no capability held, and
//! every refusal (a deadline out of range, a key with options or a second line) before any
//! effect.
// Test harness code: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::MetadataExt;
use std::process::Command;

use bosun_proto::helper::{Output, Response, VerbName};
use common::*;
use serde_json::json;

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFrAsKmOJHqtIFg4iUWCxW/iCF63k3IM0oiEv25WH7JH op@desk";
const KEY_BARE: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFrAsKmOJHqtIFg4iUWCxW/iCF63k3IM0oiEv25WH7JH";
const FINGERPRINT: &str = "SHA256:/KBlLGwupR4VLRsZAf8MwXRQIpwy0gtAL5aROWSY63w";
const OTHER_KEY: &str = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBBftrSouNFZNaVGtlqbFlaQr6YFtzRNQyz4OFozvK0nJmIerLiUV1/c6SlhuHU9bRufFIweit7sLaBeTDXeOfBc=";

fn open_request(job: &str, key: &str, expires_at: jiff::Timestamp) -> Vec<u8> {
    let request = json!({
        "verb": "break_glass_open",
        "args": { "job_id": job, "key": key, "expires_at": expires_at.to_string() },
    });
    serde_json::to_vec(&request).unwrap()
}

fn close_request() -> Vec<u8> {
    br#"{"verb":"break_glass_close","args":{}}"#.to_vec()
}

fn in_hours(hours: i64) -> jiff::Timestamp {
    let now = jiff::Timestamp::now();
    let at = now
        .checked_add(jiff::SignedDuration::from_hours(hours))
        .unwrap();
    // Whole seconds, as the line carries them.
    jiff::Timestamp::from_second(at.as_second()).unwrap()
}

fn ok_output(call: &Call) -> Output {
    match call.response() {
        Response::Ok { output } => output,
        other => panic!("expected ok, got {other:?}: {call:?}"),
    }
}

#[test]
fn opening_writes_one_expiring_restricted_line_that_openssh_reads_and_closing_removes_it() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let file = install.break_glass_root.join("authorized_keys");
    assert!(!install.break_glass_root.exists(), "created on first use");
    let job = new_uuid();
    let expires = in_hours(2);
    let call = install.run_as_sudo(
        &["break_glass_open"],
        uid,
        &open_request(&job, KEY, expires),
    );
    let expiry = expires.strftime("%Y%m%d%H%M%SZ").to_string();
    match ok_output(&call) {
        Output::BreakGlassOpened {
            account,
            path,
            fingerprint,
            expiry_time,
        } => {
            assert_eq!(account, "bosun-breakglass");
            assert_eq!(path, file.display().to_string());
            assert_eq!(fingerprint, FINGERPRINT);
            assert_eq!(expiry_time, expiry);
        }
        other => panic!("{other:?}"),
    }
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        text,
        format!(
            "expiry-time=\"{expiry}\",restrict,pty,\
             command=\"/usr/libexec/bosun/bosun-support --session {job}\" \
             {KEY_BARE} bosun-break-glass {job}\n"
        )
    );
    // sshd's StrictModes: root-owned, writable by root only, the directory too.
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o644));
    let dir = std::fs::metadata(&install.break_glass_root).unwrap();
    assert_eq!((dir.uid(), dir.mode() & 0o777), (0, 0o755));
    // OpenSSH's own authorized_keys parser reads the line (options and all) as this key.
    let listed = Command::new("ssh-keygen")
        .args(["-l", "-E", "sha256", "-f"])
        .arg(&file)
        .output()
        .unwrap();
    let listed_text = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.status.success(), "{listed:?}");
    assert_eq!(listed_text.lines().count(), 1, "{listed_text}");
    assert!(listed_text.contains(FINGERPRINT), "{listed_text}");
    // No capability: the file and directory are root's own.
    let audit = call.audit();
    assert_eq!(audit["verb"], "break_glass_open");
    assert_eq!(audit["caps"]["effective"], json!([]));
    assert!(expected_caps(VerbName::BreakGlassOpen).is_empty());

    // A second door replaces the first: still one line, the new key and job.
    let second = new_uuid();
    let call = install.run_as_sudo(
        &["break_glass_open"],
        uid,
        &open_request(&second, OTHER_KEY, in_hours(1)),
    );
    ok_output(&call);
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains(OTHER_KEY) && text.ends_with(&format!(" {second}\n")),
        "{text}"
    );
    let entries: Vec<_> = std::fs::read_dir(&install.break_glass_root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, vec!["authorized_keys"], "no staged copy left");

    let call = install.run_as_sudo(&["break_glass_close"], uid, &close_request());
    assert!(
        matches!(
            ok_output(&call),
            Output::BreakGlassClosed { removed: true, .. }
        ),
        "{call:?}"
    );
    assert!(!file.exists());
    let call = install.run_as_sudo(&["break_glass_close"], uid, &close_request());
    assert!(
        matches!(
            ok_output(&call),
            Output::BreakGlassClosed { removed: false, .. }
        ),
        "closing a closed door is not an error: {call:?}"
    );
}

#[test]
fn deadlines_out_of_range_and_keys_with_options_or_lines_are_refused_before_any_write() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let file = install.break_glass_root.join("authorized_keys");
    let job = new_uuid();
    for expires in [in_hours(-1), in_hours(25)] {
        let call = install.run_as_sudo(
            &["break_glass_open"],
            uid,
            &open_request(&job, KEY, expires),
        );
        let message = expect_refused(&call, "malformed");
        assert!(message.contains("within 24 hours"), "{message}");
    }
    let hostile = [
        format!("command=\"/bin/sh -c id\" {KEY_BARE}"),
        format!("{KEY_BARE}\n{OTHER_KEY}"),
        format!("{KEY_BARE} x\nexpiry-time=\"29991231\" {OTHER_KEY}"),
        "ssh-ed25519 AAAA".to_owned(),
    ];
    for key in hostile {
        let call = install.run_as_sudo(
            &["break_glass_open"],
            uid,
            &open_request(&job, &key, in_hours(1)),
        );
        expect_refused(&call, "malformed");
    }
    let call = install.run_as_sudo(
        &["break_glass_close"],
        uid,
        br#"{"verb":"break_glass_close","args":{"path":"/root/.ssh/authorized_keys"}}"#,
    );
    expect_refused(&call, "malformed");
    assert!(!file.exists());
    assert!(!install.break_glass_root.exists(), "nothing was created");
}
