//! The verbs other than mounting, against stand-in `pct`, `vzdump` and `smartctl`
//! that record their exact command lines; and each verb's capabilities.
// Test harness code: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::MetadataExt;

use bosun_proto::helper::{Output, Response, VerbName};
use common::*;

fn ok_output(call: &Call) -> Output {
    match call.response() {
        Response::Ok { output } => output,
        other => panic!("expected ok, got {other:?}: {call:?}"),
    }
}

fn assert_caps(call: &Call, verb: VerbName) {
    let audit = call.audit();
    assert_eq!(audit["verb"], verb.as_str());
    let effective: Vec<String> =
        serde_json::from_value(audit["caps"]["effective"].clone()).unwrap();
    assert_eq!(effective, expected_caps(verb), "{audit}");
    assert_eq!(audit["caps"]["no_new_privs"], true);
}

const SECRET: &str = "tok_live_3b1f6a";

fn prepare_request(vmid: u32) -> Vec<u8> {
    let doc = serde_json::json!({"schema": "bosun.bootstrap/v1", "token": SECRET}).to_string();
    serde_json::to_vec(&serde_json::json!({
        "verb": "prepare_config_mount",
        "args": {"vmid": vmid, "root_uid": 100000, "root_gid": 100000, "bootstrap": doc},
    }))
    .unwrap()
}

#[test]
fn prepare_config_mount_writes_a_private_file_for_the_mapped_root() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let call = install.run_as_sudo(&["prepare_config_mount"], uid, &prepare_request(101));
    let dir = install.guests_root.join("101/bootstrap");
    let file = dir.join("bootstrap.json");
    assert_eq!(
        ok_output(&call),
        Output::ConfigPrepared {
            dir: dir.display().to_string(),
            file: file.display().to_string(),
        }
    );
    let (d, f) = (
        std::fs::metadata(&dir).unwrap(),
        std::fs::metadata(&file).unwrap(),
    );
    assert_eq!(
        (d.uid(), d.gid(), d.mode() & 0o7777),
        (100000, 100000, 0o700)
    );
    assert_eq!(
        (f.uid(), f.gid(), f.mode() & 0o7777),
        (100000, 100000, 0o600)
    );
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(written["token"], SECRET);
    assert!(
        !call.stderr.contains(SECRET),
        "the token never reaches the audit line"
    );
    assert!(
        call.audit()["args"]["bootstrap"]
            .as_str()
            .unwrap()
            .contains("redacted")
    );
    assert_caps(&call, VerbName::PrepareConfigMount);

    // Again, over the now foreign-owned directory: replaced atomically.
    let call = install.run_as_sudo(&["prepare_config_mount"], uid, &prepare_request(101));
    ok_output(&call);
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("bootstrap.json")]);
}

#[test]
fn prepare_config_mount_refuses_a_symlinked_guest_directory() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), install.guests_root.join("102")).unwrap();
    let call = install.run_as_sudo(&["prepare_config_mount"], uid, &prepare_request(102));
    expect_refused(&call, "unsafe_path");
    assert!(
        std::fs::read_dir(elsewhere.path())
            .unwrap()
            .next()
            .is_none()
    );
}

fn attach_request(vmid: u32, index: u32, source: serde_json::Value, read_only: bool) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "verb": "attach_bind_mount",
        "args": {"vmid": vmid, "index": index, "source": source,
                 "guest_path": "/etc/bosun-bootstrap", "read_only": read_only},
    }))
    .unwrap()
}

#[test]
fn attach_bind_mount_runs_pct_set_with_the_exact_arguments() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    ok_output(&install.run_as_sudo(&["prepare_config_mount"], uid, &prepare_request(103)));
    // read_only=false is ignored for the bootstrap directory.
    let call = install.run_as_sudo(
        &["attach_bind_mount"],
        uid,
        &attach_request(103, 7, serde_json::json!({"kind": "bootstrap"}), false),
    );
    let dir = install.guests_root.join("103/bootstrap");
    let value = format!("{},mp=/etc/bosun-bootstrap,ro=1", dir.display());
    assert_eq!(
        ok_output(&call),
        Output::BindAttached {
            key: "mp7".into(),
            value: value.clone()
        }
    );
    assert_eq!(
        install.calls(),
        vec![format!("pct [set] [103] [-mp7] [{value}]")]
    );
    assert_caps(&call, VerbName::AttachBindMount);

    // A storage target must be mounted before it can be bound.
    std::fs::create_dir(install.mount_root.join("nas")).unwrap();
    let call = install.run_as_sudo(
        &["attach_bind_mount"],
        uid,
        &attach_request(
            103,
            8,
            serde_json::json!({"kind": "target", "target_id": "nas"}),
            false,
        ),
    );
    expect_refused(&call, "conflict");
    let call = install.run_as_sudo(
        &["attach_bind_mount"],
        uid,
        &attach_request(104, 0, serde_json::json!({"kind": "bootstrap"}), true),
    );
    expect_refused(&call, "not_found");
    assert_eq!(install.calls().len(), 1, "no pct call after a refusal");
}

#[test]
fn programs_run_with_an_empty_environment_and_a_fixed_path() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let env_file = install.dir.path().join("pct.env");
    install.stand_in("pct", &format!("env | sort > '{}'", env_file.display()));
    ok_output(&install.run_as_sudo(&["prepare_config_mount"], uid, &prepare_request(106)));
    let mut cmd = std::process::Command::new(&install.helper);
    cmd.arg("attach_bind_mount")
        .env_clear()
        .env("SUDO_UID", uid.to_string())
        .env("LD_PRELOAD", "/tmp/evil.so")
        .env("PATH", "/tmp/evil-bin")
        .env("BOSUN_HELPER_CONFIG", "/tmp/evil.json");
    let call = run_command(
        cmd,
        &attach_request(106, 1, serde_json::json!({"kind": "bootstrap"}), true),
    );
    ok_output(&call);
    assert_eq!(
        std::fs::read_to_string(&env_file).unwrap(),
        "LC_ALL=C\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\nPWD=/\n"
    );
}

#[test]
fn attach_bind_mount_reports_a_failing_pct() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    install.stand_in("pct", "echo \"CT 105 does not exist\" >&2; exit 2");
    ok_output(&install.run_as_sudo(&["prepare_config_mount"], uid, &prepare_request(105)));
    let call = install.run_as_sudo(
        &["attach_bind_mount"],
        uid,
        &attach_request(105, 0, serde_json::json!({"kind": "bootstrap"}), true),
    );
    assert_eq!(call.code, Some(1));
    match call.response() {
        Response::Failed { message } => {
            assert!(message.contains("CT 105 does not exist"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(call.audit()["result"], "failed");
}

#[test]
fn build_golden_runs_the_recipe_in_order() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let archive = "/var/lib/vz/dump/vzdump-lxc-9000-2026_11_21-00_00_00.tar.zst";
    install.stand_in(
        "vzdump",
        &format!("echo \"INFO: creating vzdump archive '{archive}'\"; echo 'INFO: Finished Backup of VM 9000 (00:00:05)'"),
    );
    let call = install.run_as_sudo(&["build_golden"], uid, &golden_request());
    match ok_output(&call) {
        Output::GoldenBuilt { vmid, archive: got } => {
            assert_eq!(vmid.get(), 9000);
            assert_eq!(got.as_deref(), Some(archive));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(install.calls(), expected_golden_calls(&install));
    assert_caps(&call, VerbName::BuildGolden);
}

#[test]
fn build_golden_tears_the_builder_down_when_a_step_fails() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    install.stand_in(
        "pct",
        "if [ \"$1\" = exec ] && [ \"$4\" = /usr/bin/docker ]; then echo 'no such image' >&2; exit 1; fi",
    );
    let call = install.run_as_sudo(&["build_golden"], uid, &golden_request());
    assert_failed_at_docker_load(&install, &call, "no such image");

    // Missing inputs are refused before anything is created.
    let install = Install::new(TEST_USER);
    std::fs::remove_file(&install.image_archive).unwrap();
    let call = install.run_as_sudo(&["build_golden"], uid, &golden_request());
    expect_refused(&call, "not_found");
    assert!(install.calls().is_empty());
}

#[test]
fn smart_status_reads_smartctl_json_for_a_block_device_only() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    // Bit 2 (0x4): a SMART command failed; informative, not fatal.
    install.stand_in(
        "smartctl",
        "echo '{\"smart_status\":{\"passed\":true}}'; exit 4",
    );
    let loopdev = LoopDevice::ext4(&new_uuid());
    let body = |device: &str| {
        format!(r#"{{"verb":"smart_status","args":{{"device":"{device}"}}}}"#).into_bytes()
    };
    let call = install.run_as_sudo(&["smart_status"], uid, &body(&loopdev.device));
    match ok_output(&call) {
        Output::Smart {
            device,
            report,
            exit_status,
        } => {
            assert_eq!(device, loopdev.device);
            assert_eq!(report["smart_status"]["passed"], true);
            assert_eq!(exit_status, 4);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        install.calls(),
        vec![format!("smartctl [--json] [--all] [{}]", loopdev.device)]
    );
    assert_caps(&call, VerbName::SmartStatus);

    expect_refused(
        &install.run_as_sudo(&["smart_status"], uid, &body("/dev/null")),
        "not_found",
    );
    expect_refused(
        &install.run_as_sudo(&["smart_status"], uid, &body("/dev/nosuchdisk")),
        "not_found",
    );
    assert_eq!(install.calls().len(), 1);

    // Fatal bits (device open failed) make the call fail.
    install.stand_in("smartctl", "echo '{}'; exit 2");
    let call = install.run_as_sudo(&["smart_status"], uid, &body(&loopdev.device));
    assert_eq!(call.code, Some(1), "{call:?}");
}
