//! `stage_agent_update` through the real binary: the agent's file in its inbox is copied
//! into the inactive slot only when the bytes copied hash to the signed digest; then the
//! trial is recorded and `current` flipped. Everything else is refused with no change.
// Test harness code: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use bosun_proto::helper::{Output, Response, VerbName};
use bosun_proto::update::{UpdatePhase, UpdateRecord};
use common::*;
use sha2::{Digest as _, Sha256};

const UPDATE_ID: &str = "0192e4d6-0000-7000-8000-00000000abcd";

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn request(id: &str, version: &str, sha256: &str) -> Vec<u8> {
    let mut text = serde_json::to_vec(&serde_json::json!({
        "verb": "stage_agent_update",
        "args": { "update_id": id, "version": version, "sha256": sha256 },
    }))
    .unwrap();
    text.push(b'\n');
    text
}

/// Puts `bytes` in the install's inbox, owned by `uid`.
fn put_inbox(install: &Install, bytes: &[u8], uid: u32) {
    let _ = std::fs::remove_file(&install.update_inbox);
    std::fs::write(&install.update_inbox, bytes).unwrap();
    std::os::unix::fs::chown(&install.update_inbox, Some(uid), None).unwrap();
}

fn current(install: &Install) -> String {
    std::fs::read_link(install.slots_root.join("current"))
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn record(install: &Install) -> Option<UpdateRecord> {
    let text = std::fs::read(install.slots_root.join("update.json")).ok()?;
    Some(serde_json::from_slice(&text).unwrap())
}

fn stage(install: &Install, uid: u32, body: &[u8]) -> Call {
    install.run_as_sudo(&["stage_agent_update"], uid, body)
}

#[test]
fn a_matching_binary_is_staged_recorded_and_made_current_once() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let binary = b"#!/bin/sh\nexit 0\n".repeat(1000);
    put_inbox(&install, &binary, uid);

    let call = stage(&install, uid, &request(UPDATE_ID, "0.2.0", &sha(&binary)));
    let Response::Ok { output } = call.response() else {
        panic!("{call:?}")
    };
    match output {
        Output::AgentUpdateStaged {
            slot,
            previous,
            size,
            already_staged,
            ..
        } => {
            assert_eq!((slot.as_str(), previous.as_str()), ("b", "a"));
            assert_eq!(size, binary.len() as u64);
            assert!(!already_staged);
        }
        other => panic!("{other:?}"),
    }
    let staged = install.slots_root.join("b/bosun-agentd");
    assert_eq!(std::fs::read(&staged).unwrap(), binary);
    let meta = std::fs::metadata(&staged).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o755));
    assert_eq!(current(&install), "b");
    let rec = record(&install).unwrap();
    assert_eq!(rec.phase, UpdatePhase::Trial);
    assert_eq!((rec.good.as_str(), rec.trial.as_str()), ("a", "b"));
    assert_eq!(rec.sha256, sha(&binary));
    let audit = call.audit();
    assert_eq!(audit["verb"], "stage_agent_update");
    assert_eq!(
        audit["caps"]["effective"],
        serde_json::json!(expected_caps(VerbName::StageAgentUpdate))
    );

    // The same job again (an agent that crashed before it heard the answer): nothing moves.
    let again = stage(&install, uid, &request(UPDATE_ID, "0.2.0", &sha(&binary)));
    match again.response() {
        Response::Ok {
            output: Output::AgentUpdateStaged { already_staged, .. },
        } => assert!(already_staged),
        other => panic!("{other:?}"),
    }
    assert_eq!(current(&install), "b");

    // Another update while this one is on trial is refused: the gate has not decided.
    let other = b"another binary".to_vec();
    put_inbox(&install, &other, uid);
    let refused = stage(
        &install,
        uid,
        &request(
            "0192e4d6-0000-7000-8000-00000000beef",
            "0.3.0",
            &sha(&other),
        ),
    );
    let message = expect_refused(&refused, "conflict");
    assert!(message.contains("has not decided"), "{message}");
    assert_eq!(current(&install), "b");
    assert_eq!(std::fs::read(&staged).unwrap(), binary);

    // Once the gate rolled it back, the same job is never staged again.
    let mut decided = record(&install).unwrap();
    decided.phase = UpdatePhase::RolledBack;
    std::fs::write(
        install.slots_root.join("update.json"),
        serde_json::to_vec(&decided).unwrap(),
    )
    .unwrap();
    std::os::unix::fs::symlink("a", install.slots_root.join("current.tmp")).unwrap();
    std::fs::rename(
        install.slots_root.join("current.tmp"),
        install.slots_root.join("current"),
    )
    .unwrap();
    put_inbox(&install, &binary, uid);
    let replay = stage(&install, uid, &request(UPDATE_ID, "0.2.0", &sha(&binary)));
    let message = expect_refused(&replay, "conflict");
    assert!(message.contains("already decided"), "{message}");
    assert_eq!(current(&install), "a");
}

#[test]
fn bytes_that_do_not_hash_to_the_signed_digest_are_never_staged() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let signed = b"the binary the operator signed".to_vec();
    let served = b"what a compromised hub served instead".to_vec();
    put_inbox(&install, &served, uid);
    let call = stage(&install, uid, &request(UPDATE_ID, "0.2.0", &sha(&signed)));
    let message = expect_refused(&call, "conflict");
    assert!(message.contains(&sha(&served)), "{message}");
    assert_eq!(current(&install), "a");
    assert!(record(&install).is_none());
    let slot_b: Vec<_> = std::fs::read_dir(install.slots_root.join("b"))
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(slot_b.is_empty(), "nothing left in slot b: {slot_b:?}");
}

#[test]
fn an_inbox_file_the_agent_does_not_own_alone_is_refused() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let bytes = b"bytes".to_vec();
    let digest = sha(&bytes);

    // Root's file (say, a hard link the agent could not make; here written by root).
    put_inbox(&install, &bytes, 0);
    let message = expect_refused(
        &stage(&install, uid, &request(UPDATE_ID, "1.0.0", &digest)),
        "conflict",
    );
    assert!(message.contains("not the agent"), "{message}");

    // Two links.
    put_inbox(&install, &bytes, uid);
    let second = install.dir.path().join("second-link");
    std::fs::hard_link(&install.update_inbox, &second).unwrap();
    let message = expect_refused(
        &stage(&install, uid, &request(UPDATE_ID, "1.0.0", &digest)),
        "conflict",
    );
    assert!(message.contains("links"), "{message}");
    std::fs::remove_file(&second).unwrap();

    // A symlink to a file with the right bytes.
    let elsewhere = install.dir.path().join("elsewhere");
    std::fs::write(&elsewhere, &bytes).unwrap();
    std::fs::remove_file(&install.update_inbox).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &install.update_inbox).unwrap();
    expect_refused(
        &stage(&install, uid, &request(UPDATE_ID, "1.0.0", &digest)),
        "unsafe_path",
    );

    // A FIFO would block a reader that did not check first.
    std::fs::remove_file(&install.update_inbox).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(&install.update_inbox)
        .status()
        .unwrap();
    assert!(status.success());
    std::os::unix::fs::chown(&install.update_inbox, Some(uid), None).unwrap();
    expect_refused(
        &stage(&install, uid, &request(UPDATE_ID, "1.0.0", &digest)),
        "conflict",
    );

    assert_eq!(current(&install), "a");
    assert!(record(&install).is_none());
}

#[test]
fn bad_arguments_and_missing_slots_are_refused() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    for body in [
        request(UPDATE_ID, "../../etc", &"a".repeat(64)),
        request(UPDATE_ID, "1.0.0", &"A".repeat(64)),
        request("not-a-uuid", "1.0.0", &"a".repeat(64)),
    ] {
        expect_refused(&stage(&install, uid, &body), "malformed");
    }
    // Without `current` the helper does not guess which slot is live.
    std::fs::remove_file(install.slots_root.join("current")).unwrap();
    put_inbox(&install, b"x", uid);
    let message = expect_refused(
        &stage(&install, uid, &request(UPDATE_ID, "1.0.0", &sha(b"x"))),
        "conflict",
    );
    assert!(message.contains("current"), "{message}");
    assert!(!Path::new(&install.slots_root.join("b/bosun-agentd")).exists());
}
