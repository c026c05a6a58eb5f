//! Every refusal: a clear answer, one audit line, exit code 2, and no side effect.
//! The helper is started the way sudo starts it (as root, `SUDO_UID` set).
// Test harness code: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::PermissionsExt;

use bosun_proto::helper::MAX_REQUEST_BYTES;
use common::*;

struct Case {
    install: Install,
    uid: u32,
}

impl Case {
    fn new() -> Case {
        let (uid, _) = test_user();
        Case {
            install: Install::new(TEST_USER),
            uid,
        }
    }

    fn call(&self, verb: &str, input: &[u8]) -> Call {
        self.install.run_as_sudo(&[verb], self.uid, input)
    }

    /// Asserts the refusal left the mount root and the mount table untouched.
    fn assert_untouched(&self, entries_before: &[String]) {
        assert_eq!(self.install.mount_root_entries(), entries_before);
        assert!(
            self.install.mounts().is_empty(),
            "{:?}",
            self.install.mounts()
        );
        assert!(
            self.install.calls().is_empty(),
            "{:?}",
            self.install.calls()
        );
    }
}

#[test]
fn unknown_verb_in_request_and_on_the_command_line() {
    let case = Case::new();
    let call = case.call(
        "mount_by_uuid",
        br#"{"verb":"run_command","args":{"argv":["/bin/sh"]}}"#,
    );
    let message = expect_refused(&call, "malformed");
    assert!(message.contains("unknown variant"), "{message}");
    assert!(
        call.audit()["caps"].is_null(),
        "refused before any capability work"
    );
    let call = case.call("shell", b"{}");
    let message = expect_refused(&call, "malformed");
    assert!(message.contains("usage"), "{message}");
    let call = case.install.run_as_sudo(&[], case.uid, b"");
    expect_refused(&call, "malformed");
    case.assert_untouched(&[]);
}

#[test]
fn socket_mode_without_a_socket_has_no_caller() {
    let case = Case::new();
    let call = case
        .install
        .run_as_sudo(&["--socket"], case.uid, &unmount_request("a"));
    let message = expect_refused(&call, "caller");
    assert!(
        message.contains("identifying the caller over socket"),
        "{message}"
    );
    case.assert_untouched(&[]);
}

#[test]
fn malformed_json_trailing_data_and_verb_mismatch() {
    let case = Case::new();
    for input in [
        &b"{\"verb\":\"unmount\",\"args\":{\"target_id\":"[..],
        b"not json at all\n",
        b"",
        b"{\"verb\":\"unmount\",\"args\":{\"target_id\":\"a\"}}\n{\"verb\":\"unmount\"}",
        b"{\"verb\":\"unmount\",\"args\":{\"target_id\":\"a\",\"extra\":true}}",
    ] {
        let call = case.call("unmount", input);
        expect_refused(&call, "malformed");
    }
    let call = case.call("mount_by_uuid", &unmount_request("a"));
    let message = expect_refused(&call, "malformed");
    assert!(message.contains("does not match"), "{message}");
    case.assert_untouched(&[]);
}

#[test]
fn oversized_input_is_refused_without_reading_it_all() {
    let case = Case::new();
    let mut input = b"{\"verb\":\"unmount\",\"args\":{\"target_id\":\"".to_vec();
    input.resize(MAX_REQUEST_BYTES + 4096, b'a');
    let call = case.call("unmount", &input);
    let message = expect_refused(&call, "oversized");
    assert!(
        message.contains(&MAX_REQUEST_BYTES.to_string()),
        "{message}"
    );
    // Exactly at the limit is read (and then fails to parse, not to fit).
    let mut input = b"{\"verb\":\"unmount\",\"args\":{\"target_id\":\"".to_vec();
    input.resize(MAX_REQUEST_BYTES, b'a');
    expect_refused(&case.call("unmount", &input), "malformed");
    case.assert_untouched(&[]);
}

#[test]
fn wrong_caller_uid_is_refused_before_the_request_is_read() {
    let case = Case::new();
    let loopdev = LoopDevice::ext4(&new_uuid());
    let _guard = MountGuard(case.install.mount_root.join("x"));
    for uid in [0, case.uid + 1] {
        let call =
            case.install
                .run_as_sudo(&["mount_by_uuid"], uid, &mount_request(&loopdev.uuid, "x"));
        let message = expect_refused(&call, "caller");
        assert!(message.contains(&format!("caller uid {uid}")), "{message}");
        let audit = call.audit();
        assert_eq!(audit["caller_uid"], uid);
        assert!(audit["args"].is_null(), "request never read");
    }
    // No SUDO_UID at all.
    let mut cmd = std::process::Command::new(&case.install.helper);
    cmd.arg("unmount").env_clear();
    let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains(r#""reason":"caller""#));
    case.assert_untouched(&[]);
}

#[test]
fn path_traversal_in_any_argument_fails_to_parse() {
    let case = Case::new();
    let uuid = new_uuid();
    for target in ["..", "../../etc", "a/b", "/etc", ".hidden"] {
        let call = case.call("mount_by_uuid", &mount_request(&uuid, target));
        let message = expect_refused(&call, "malformed");
        assert!(message.contains("target id"), "{message}");
    }
    let smart = br#"{"verb":"smart_status","args":{"device":"/dev/../etc/shadow"}}"#;
    expect_refused(&case.call("smart_status", smart), "malformed");
    case.assert_untouched(&[]);
}

#[test]
fn symlinked_target_or_root_is_refused_and_nothing_is_mounted_elsewhere() {
    let case = Case::new();
    let loopdev = LoopDevice::ext4(&new_uuid());
    case.install.mark_usb_disk(&loopdev);
    let elsewhere = tempfile::tempdir().unwrap();
    let _guard_a = MountGuard(elsewhere.path().to_path_buf());
    let _guard_b = MountGuard(case.install.mount_root.join("evil"));
    std::os::unix::fs::symlink(elsewhere.path(), case.install.mount_root.join("evil")).unwrap();
    let call = case.call("mount_by_uuid", &mount_request(&loopdev.uuid, "evil"));
    let message = expect_refused(&call, "unsafe_path");
    assert!(message.contains("evil"), "{message}");
    assert!(
        !mountinfo()
            .iter()
            .any(|(t, _)| t.as_str() == elsewhere.path().to_str().unwrap())
    );

    // A file where the directory should be.
    std::fs::write(case.install.mount_root.join("file"), b"").unwrap();
    let call = case.call("mount_by_uuid", &mount_request(&loopdev.uuid, "file"));
    expect_refused(&call, "unsafe_path");

    // A configured root reached through a symlink stops the helper before any verb.
    let link = case.install.dir.path().join("mnt-link");
    std::os::unix::fs::symlink(&case.install.mount_root, &link).unwrap();
    let config = std::fs::read_to_string(case.install.config_path()).unwrap();
    let mount_root = serde_json::to_string(&case.install.mount_root).unwrap();
    let relinked = config.replace(&mount_root, &serde_json::to_string(&link).unwrap());
    assert_ne!(config, relinked);
    std::fs::write(case.install.config_path(), relinked).unwrap();
    let call = case.call("mount_by_uuid", &mount_request(&loopdev.uuid, "fresh"));
    assert_eq!(call.code, Some(1), "{call:?}");
    let audit = call.audit();
    assert_eq!(audit["result"], "failed");
    assert!(
        audit["message"].as_str().unwrap().contains("mnt-link"),
        "{audit}"
    );
    case.assert_untouched(&["evil".to_string(), "file".to_string()]);
}

#[test]
fn disallowed_fstype_options_and_mismatches() {
    let case = Case::new();
    let loopdev = LoopDevice::ext4(&new_uuid());
    case.install.mark_usb_disk(&loopdev);
    let _guard = MountGuard(case.install.mount_root.join("t"));
    let body = |fstype: &str, class: &str, options: &str| {
        format!(
            r#"{{"verb":"mount_by_uuid","args":{{"uuid":"{}","serial":"{TEST_SERIAL}","target_id":"t","fstype":"{fstype}","class":"{class}","options":{options}}}}}"#,
            loopdev.uuid
        )
        .into_bytes()
    };
    for (fstype, class, options) in [
        ("btrfs", "data", "[]"),
        ("ext4", "data", r#"["suid"]"#),
        ("ext4", "data", r#"["exec"]"#),
        ("ext4", "data", r#"["dev"]"#),
        ("ext4", "data", r#"["rw,suid"]"#),
        ("ext4", "setuid", "[]"),
    ] {
        let call = case.call("mount_by_uuid", &body(fstype, class, options));
        expect_refused(&call, "malformed");
    }
    let call = case.call(
        "mount_by_uuid",
        &body("ext4", "data", r#"["noatime","relatime"]"#),
    );
    let message = expect_refused(&call, "malformed");
    assert!(message.contains("exclude each other"), "{message}");
    // The image is ext4; asking for xfs is refused after looking, before mounting.
    let call = case.call("mount_by_uuid", &body("xfs", "data", "[]"));
    let message = expect_refused(&call, "conflict");
    assert!(message.contains("not xfs"), "{message}");
    case.assert_untouched(&[]);
}

#[test]
fn unknown_and_duplicate_uuids_are_refused() {
    let case = Case::new();
    let call = case.call("mount_by_uuid", &mount_request(&new_uuid(), "t"));
    expect_refused(&call, "not_found");

    let uuid = new_uuid();
    let first = LoopDevice::ext4(&uuid);
    let second = LoopDevice::ext4(&uuid);
    let _guard = MountGuard(case.install.mount_root.join("t"));
    let call = case.call("mount_by_uuid", &mount_request(&uuid, "t"));
    let message = expect_refused(&call, "conflict");
    assert!(
        message.contains(&first.device) && message.contains(&second.device),
        "{message}"
    );
    case.assert_untouched(&[]);
}

#[test]
fn double_mount_and_unmount_of_a_plain_directory_are_refused() {
    let case = Case::new();
    let loopdev = LoopDevice::ext4(&new_uuid());
    case.install.mark_usb_disk(&loopdev);
    let _guard = MountGuard(case.install.mount_root.join("t"));
    let call = case.call("mount_by_uuid", &mount_request(&loopdev.uuid, "t"));
    assert_eq!(call.code, Some(0), "{call:?}");
    let call = case.call("mount_by_uuid", &mount_request(&loopdev.uuid, "t"));
    let message = expect_refused(&call, "conflict");
    assert!(message.contains("already a mount point"), "{message}");
    assert_eq!(case.install.mounts().len(), 1);
    assert_eq!(case.call("unmount", &unmount_request("t")).code, Some(0));

    std::fs::create_dir(case.install.mount_root.join("plain")).unwrap();
    let call = case.call("unmount", &unmount_request("plain"));
    let message = expect_refused(&call, "conflict");
    assert!(message.contains("not a mount point"), "{message}");
    expect_refused(
        &case.call("unmount", &unmount_request("absent")),
        "not_found",
    );
    case.assert_untouched(&["plain".to_string()]);
}

#[test]
fn a_root_or_program_others_can_change_stops_the_helper() {
    let case = Case::new();
    let (uid, gid) = test_user();
    // The agent user owning the mount root could swap it between calls.
    std::os::unix::fs::chown(&case.install.mount_root, Some(uid), Some(gid)).unwrap();
    let call = case.call("unmount", &unmount_request("a"));
    assert_eq!(call.code, Some(1), "{call:?}");
    assert!(call.stdout.contains("must be owned by root"), "{call:?}");
    std::os::unix::fs::chown(&case.install.mount_root, Some(0), Some(0)).unwrap();
    // A group-writable program root would run.
    let pct = case.install.bin.join("pct");
    std::fs::set_permissions(&pct, std::fs::Permissions::from_mode(0o775)).unwrap();
    let call = case.call("unmount", &unmount_request("a"));
    assert!(call.stdout.contains("must be owned by root"), "{call:?}");
    assert!(call.stdout.contains("pct"), "{call:?}");
    case.assert_untouched(&[]);
}

#[test]
fn an_insecure_configuration_stops_the_helper() {
    let case = Case::new();
    let loopdev = LoopDevice::ext4(&new_uuid());
    let _guard = MountGuard(case.install.mount_root.join("t"));
    let config = case.install.config_path();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o666)).unwrap();
    let call = case.call("mount_by_uuid", &mount_request(&loopdev.uuid, "t"));
    assert_eq!(call.code, Some(1), "{call:?}");
    let response = serde_json::to_value(call.response()).unwrap();
    assert_eq!(response["status"], "failed");
    assert!(
        response["message"]
            .as_str()
            .unwrap()
            .contains("must be owned by root"),
        "{response}"
    );
    assert_eq!(call.audit()["result"], "failed");
    case.assert_untouched(&[]);
}

#[test]
fn a_disk_that_is_not_removable_or_usb_is_refused_whatever_uuid_it_holds() {
    // The real sysfs: a loop device is neither removable nor on USB, as the root
    // filesystem's disk, /boot's or the EFI partition's are not.
    let mut case = Case::new();
    case.install.sysfs_root = "/sys".into();
    case.install.write_config(TEST_USER, "/usr/sbin/blkid");
    let loopdev = LoopDevice::ext4(&new_uuid());
    let _guard = MountGuard(case.install.mount_root.join("t"));
    let call = case.call("mount_by_uuid", &mount_request(&loopdev.uuid, "t"));
    let message = expect_refused(&call, "device_not_allowed");
    assert!(
        message.contains(&loopdev.device) && message.contains("neither removable nor USB"),
        "{message}"
    );
    case.assert_untouched(&[]);
}

#[test]
fn a_removable_disk_with_another_serial_or_mounted_elsewhere_is_refused() {
    let case = Case::new();
    let loopdev = LoopDevice::ext4(&new_uuid());
    case.install.mark_usb_disk(&loopdev);
    let _guard = MountGuard(case.install.mount_root.join("t"));
    let call = case.call(
        "mount_by_uuid",
        &mount_request_for(&loopdev.uuid, "SOMEONE-ELSES-DISK", "t"),
    );
    let message = expect_refused(&call, "device_not_allowed");
    assert!(message.contains(TEST_SERIAL), "{message}");
    case.assert_untouched(&[]);

    // The right disk, but mounted already somewhere else (by an administrator, or as a
    // system filesystem): not mounted a second time.
    let elsewhere = tempfile::tempdir().unwrap();
    let _guard_elsewhere = MountGuard(elsewhere.path().to_path_buf());
    let status = std::process::Command::new("mount")
        .arg(&loopdev.device)
        .arg(elsewhere.path())
        .status()
        .unwrap();
    assert!(status.success());
    let call = case.call("mount_by_uuid", &mount_request(&loopdev.uuid, "t"));
    let message = expect_refused(&call, "device_not_allowed");
    assert!(message.contains("mounted already"), "{message}");
    assert_eq!(case.install.mount_root_entries(), Vec::<String>::new());
    assert!(
        case.install.mounts().is_empty(),
        "{:?}",
        case.install.mounts()
    );
}
