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

const DESTINATION: &str = "/etc/bosun-bootstrap/bootstrap.json";

/// The exact `pct push` line for the call whose audit line is `audit`.
fn expected_push(install: &Install, vmid: u32, audit: &serde_json::Value) -> String {
    let staged = install
        .staging_root
        .join(format!("bootstrap-{vmid}-{}", audit["pid"]));
    format!(
        "pct [push] [{vmid}] [{}] [{DESTINATION}] [--perms] [0600] [--user] [0] [--group] [0]",
        staged.display()
    )
}

fn staging_entries(install: &Install) -> Vec<String> {
    std::fs::read_dir(&install.staging_root)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn push_bootstrap_stages_a_private_copy_runs_pct_push_and_removes_it() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let seen = install.dir.path().join("seen");
    // While pct runs, the staged file is root's 0600 and holds the document.
    install.guest_pct_with(
        &format!(
            "[ \"$1\" = push ] && {{ stat -c '%a %u %g' \"$3\" > '{seen}.stat'; cat \"$3\" > '{seen}.doc'; }}",
            seen = seen.display()
        ),
        "",
    );
    install.stamp_guest(101, Some(DOC_GUEST));
    assert!(!install.staging_root.exists(), "created on first use");
    let call = install.run_as_sudo(&["push_bootstrap"], uid, &push_request(101));
    match ok_output(&call) {
        Output::BootstrapPushed { vmid, destination } => {
            assert_eq!(vmid.get(), 101);
            assert_eq!(destination, DESTINATION);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        install.calls(),
        vec![
            "pct [config] [101] [--current]".to_owned(),
            format!(
                "pct [pull] [101] [{GUEST_STAMP_PATH}] [{}/pull-101-{}]",
                install.staging_root.display(),
                call.audit()["pid"]
            ),
            expected_push(&install, 101, &call.audit())
        ]
    );
    assert_eq!(
        install.guest_file(101, DESTINATION).unwrap(),
        bootstrap_document().as_bytes()
    );
    assert_eq!(
        std::fs::read_to_string(seen.with_extension("stat")).unwrap(),
        "600 0 0\n"
    );
    let pushed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(seen.with_extension("doc")).unwrap()).unwrap();
    assert_eq!(pushed["local_api"]["token"], SECRET);
    assert_eq!(
        std::fs::read_to_string(seen.with_extension("doc")).unwrap(),
        bootstrap_document(),
        "pushed byte for byte"
    );
    let dir = std::fs::metadata(&install.staging_root).unwrap();
    assert_eq!((dir.uid(), dir.mode() & 0o7777), (0, 0o700));
    assert!(staging_entries(&install).is_empty(), "staged copy removed");
    assert!(
        !call.stderr.contains(SECRET),
        "the token never reaches the audit line"
    );
    assert!(
        call.audit()["args"]["document"]
            .as_str()
            .unwrap()
            .contains("redacted")
    );
    assert_caps(&call, VerbName::PushBootstrap);

    // A too-open staging directory is closed again before anything is staged in it.
    std::fs::set_permissions(
        &install.staging_root,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    ok_output(&install.run_as_sudo(&["push_bootstrap"], uid, &push_request(101)));
    let dir = std::fs::metadata(&install.staging_root).unwrap();
    assert_eq!(dir.mode() & 0o7777, 0o700);
    assert!(staging_entries(&install).is_empty());
}

#[test]
fn push_bootstrap_reports_a_stopped_guest_and_leaves_nothing_staged() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    install.stand_in(
        "pct",
        "[ \"$1\" = push ] && { echo 'can only push files to a running CT' >&2; exit 1; }\n\
         [ \"$1\" = pull ] && { echo 'can only pull files from a running VM' >&2; exit 255; }",
    );
    let call = install.run_as_sudo(&["push_bootstrap"], uid, &push_request(105));
    assert_eq!(call.code, Some(1), "{call:?}");
    match call.response() {
        Response::Failed { message } => {
            assert!(
                message.contains("can only pull files from a running VM"),
                "{message}"
            );
            assert!(message.contains("[\"pull\", \"105\""), "{message}");
            assert!(!message.contains(SECRET), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(call.audit()["result"], "failed");
    assert_eq!(
        install.acting_calls(),
        Vec::<String>::new(),
        "nothing pushed"
    );
    assert!(staging_entries(&install).is_empty(), "staged copy removed");
}

#[test]
fn push_bootstrap_refuses_a_symlinked_staging_root() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), &install.staging_root).unwrap();
    let call = install.run_as_sudo(&["push_bootstrap"], uid, &push_request(102));
    assert_ne!(call.code, Some(0), "{call:?}");
    assert!(
        std::fs::read_dir(elsewhere.path())
            .unwrap()
            .next()
            .is_none()
    );
    assert!(install.calls().is_empty(), "no pct call");
}

#[test]
fn programs_run_with_an_empty_environment_and_a_fixed_path() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let env_file = install.dir.path().join("pct.env");
    install.guest_pct_with(&format!("env | sort > '{}'", env_file.display()), "");
    install.stamp_guest(106, Some(DOC_GUEST));
    let mut cmd = std::process::Command::new(&install.helper);
    cmd.arg("push_bootstrap")
        .env_clear()
        .env("SUDO_UID", uid.to_string())
        .env("LD_PRELOAD", "/tmp/evil.so")
        .env("PATH", "/tmp/evil-bin")
        .env("BOSUN_HELPER_CONFIG", "/tmp/evil.json");
    let call = run_command(cmd, &push_request(106));
    ok_output(&call);
    assert_eq!(
        std::fs::read_to_string(&env_file).unwrap(),
        "LC_ALL=C\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\nPWD=/\n"
    );
}

#[test]
fn build_golden_runs_the_recipe_in_order() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let archive = install
        .dump_root
        .join("vzdump-lxc-9000-2026_11_21-00_00_00.tar.zst");
    let content = b"the golden archive bytes";
    install.stand_in(
        "vzdump",
        &format!(
            "printf '%s' '{}' > '{path}'; echo \"INFO: creating vzdump archive '{path}'\"; echo 'INFO: Finished Backup of VM 9000 (00:00:05)'",
            std::str::from_utf8(content).unwrap(),
            path = archive.display()
        ),
    );
    let call = install.run_as_sudo(&["build_golden"], uid, &golden_request());
    match ok_output(&call) {
        Output::GoldenBuilt {
            vmid,
            archive: got,
            sha256,
            size,
        } => {
            assert_eq!(vmid.get(), 9000);
            assert_eq!(got.as_deref(), archive.to_str());
            // Read back from the file vzdump wrote, not taken from anyone's word.
            assert_eq!(sha256.as_deref(), Some(sha256_hex(content).as_str()));
            assert_eq!(size, Some(content.len() as u64));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(install.calls(), expected_golden_calls(&install));
    assert_caps(&call, VerbName::BuildGolden);
}

#[test]
fn build_golden_gives_no_hash_for_an_archive_outside_the_dump_root() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let archive = "/var/lib/vz/dump/vzdump-lxc-9000-2026_11_21-00_00_00.tar.zst";
    install.stand_in(
        "vzdump",
        &format!("echo \"INFO: creating vzdump archive '{archive}'\""),
    );
    let call = install.run_as_sudo(&["build_golden"], uid, &golden_request());
    match ok_output(&call) {
        Output::GoldenBuilt {
            archive: got,
            sha256,
            size,
            ..
        } => {
            assert_eq!(got.as_deref(), Some(archive));
            assert_eq!((sha256, size), (None, None));
        }
        other => panic!("{other:?}"),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn hash_request(name: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "verb": "hash_archive", "args": { "archive": name } }))
        .unwrap()
}

#[test]
fn hash_archive_reads_the_file_under_the_dump_root() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let name = "vzdump-lxc-9001-2026_11_21-10_00_00.tar.zst";
    let path = install.dump_root.join(name);
    std::fs::write(&path, b"first contents").unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let call = install.run_as_sudo(&["hash_archive"], uid, &hash_request(name));
    match ok_output(&call) {
        Output::ArchiveHashed {
            archive,
            sha256,
            size,
        } => {
            assert_eq!(archive, path.display().to_string());
            assert_eq!(sha256, sha256_hex(b"first contents"));
            assert_eq!(size, 14);
        }
        other => panic!("{other:?}"),
    }
    assert_caps(&call, VerbName::HashArchive);
    // A changed file gives another hash.
    std::fs::write(&path, b"changed contents").unwrap();
    let call = install.run_as_sudo(&["hash_archive"], uid, &hash_request(name));
    match ok_output(&call) {
        Output::ArchiveHashed { sha256, .. } => {
            assert_eq!(sha256, sha256_hex(b"changed contents"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn hash_archive_refuses_symlinks_other_names_and_missing_files() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let secret = install.dir.path().join("etc/bosun/helper.json");
    let link = "vzdump-lxc-9002-2026_11_21-10_00_00.tar.zst";
    std::os::unix::fs::symlink(&secret, install.dump_root.join(link)).unwrap();
    let call = install.run_as_sudo(&["hash_archive"], uid, &hash_request(link));
    expect_refused(&call, "unsafe_path");
    for bad in [
        "../etc/bosun/helper.json",
        "/etc/shadow",
        "vzdump-lxc-100-2026_11_21-10_00_00.vma.zst",
        "vzdump-qemu-100-2026_11_21-10_00_00.vma.xz",
        "vzdump-lxc-100-2026_11_21-10_00_00.tar.zst/x",
    ] {
        let call = install.run_as_sudo(&["hash_archive"], uid, &hash_request(bad));
        expect_refused(&call, "malformed");
    }
    // A container's and a VM's archive name are both well formed; neither is there.
    for missing in [
        "vzdump-lxc-9003-2026_11_21-10_00_00.tar.zst",
        "vzdump-qemu-100-2026_11_21-10_00_00.vma.zst",
    ] {
        let call = install.run_as_sudo(&["hash_archive"], uid, &hash_request(missing));
        expect_refused(&call, "not_found");
    }
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

/// The signed recipe's digest decides what is baked: an archive whose bytes are not the
/// signed ones (replaced on the host, or a recipe signed for another archive) is refused
/// before the builder exists, with both digests in the message.
#[test]
fn build_golden_bakes_only_the_controller_archive_the_recipe_signed() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let other = sha256_hex(b"another controller");
    let call = install.run_as_sudo(&["build_golden"], uid, &golden_request_signing(&other));
    let message = expect_refused(&call, "conflict");
    assert!(install.calls().is_empty(), "{:?}", install.calls());
    assert!(
        message.contains("controller image archive")
            && message.contains(&other)
            && message.contains(&sha256_hex(IMAGE_ARCHIVE_BYTES)),
        "{message}"
    );

    std::fs::write(&install.image_archive, b"a miner, planted").unwrap();
    let call = install.run_as_sudo(&["build_golden"], uid, &golden_request());
    expect_refused(&call, "conflict");
    assert!(install.calls().is_empty(), "{:?}", install.calls());
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

#[test]
fn push_bootstrap_refuses_a_document_that_is_not_a_bootstrap() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let request = serde_json::to_vec(&serde_json::json!({
        "verb": "push_bootstrap",
        "args": {"vmid": 101, "document": format!("{{\"token\":\"{SECRET}\"}}")},
    }))
    .unwrap();
    let call = install.run_as_sudo(&["push_bootstrap"], uid, &request);
    let message = expect_refused(&call, "malformed");
    assert!(!message.contains(SECRET), "{message}");
    assert!(!call.stderr.contains(SECRET), "{}", call.stderr);
    assert!(install.calls().is_empty(), "no pct call");
    assert!(!install.staging_root.exists(), "nothing staged");
}

fn restart_request(vmid: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(
        &serde_json::json!({ "verb": "restart_controller", "args": { "vmid": vmid } }),
    )
    .unwrap()
}

#[test]
fn restart_controller_runs_one_fixed_pct_exec_and_refuses_anything_else() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    install.guest_pct("exit 0");
    install.stamp_guest(101, Some(DOC_GUEST));
    let call = install.run_as_sudo(&["restart_controller"], uid, &restart_request(101.into()));
    match ok_output(&call) {
        Output::ControllerRestarted {
            vmid,
            unit,
            measured,
        } => {
            assert_eq!(measured, None, "the guest holds no image archive");
            assert_eq!(vmid.get(), 101);
            assert_eq!(unit, "bosun-bootstrap.service");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        install.acting_calls(),
        vec![
            "pct [exec] [101] [--] [/usr/bin/systemctl] [restart] [bosun-bootstrap.service]"
                .to_owned()
        ]
    );
    assert_caps(&call, VerbName::RestartController);

    // A stopped guest (pct exec refuses it) fails, with pct's words.
    install.guest_pct("echo 'CT 105 not running' >&2; exit 255");
    install.stamp_guest(105, Some(DOC_GUEST));
    let call = install.run_as_sudo(&["restart_controller"], uid, &restart_request(105.into()));
    match call.response() {
        Response::Failed { message } => {
            assert!(message.contains("CT 105 not running"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // Nothing but a vmid may be named: no unit, no command, no out-of-range id.
    let calls_before = install.calls().len();
    for body in [
        restart_request(99.into()),
        restart_request("101; reboot".into()),
        serde_json::to_vec(&serde_json::json!({
            "verb": "restart_controller",
            "args": { "vmid": 101, "unit": "ssh.service" }
        }))
        .unwrap(),
    ] {
        let call = install.run_as_sudo(&["restart_controller"], uid, &body);
        assert!(
            matches!(call.response(), Response::Refused { .. }),
            "{call:?}"
        );
    }
    assert_eq!(
        install.calls().len(),
        calls_before,
        "no refused request ran pct"
    );
}

fn reset_identity_request(vmid: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(
        &serde_json::json!({ "verb": "reset_guest_identity", "args": { "vmid": vmid } }),
    )
    .unwrap()
}

#[test]
fn reset_guest_identity_runs_two_fixed_pct_execs_and_refuses_anything_else() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    install.guest_pct("exit 0");
    install.stamp_guest(105, Some(DOC_GUEST));
    install.stamp_guest(106, None);
    let call = install.run_as_sudo(
        &["reset_guest_identity"],
        uid,
        &reset_identity_request(105.into()),
    );
    match ok_output(&call) {
        Output::GuestIdentityReset { vmid } => assert_eq!(vmid.get(), 105),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        install.acting_calls(),
        vec![
            "pct [exec] [105] [--] [/usr/bin/find] [/etc/ssh] [-maxdepth] [1] [-name] [ssh_host_*] [-delete]"
                .to_owned(),
            "pct [exec] [105] [--] [/usr/bin/truncate] [-s] [0] [/etc/machine-id]".to_owned(),
        ]
    );
    assert_caps(&call, VerbName::ResetGuestIdentity);

    // The first command that fails ends the verb with its words; the second never runs.
    install.guest_pct(
        "case \"$1\" in /usr/bin/find) echo \"find: cannot delete '/etc/ssh/ssh_host_rsa_key': Read-only file system\" >&2; exit 1;; esac",
    );
    let calls_before = install.acting_calls().len();
    let call = install.run_as_sudo(
        &["reset_guest_identity"],
        uid,
        &reset_identity_request(106.into()),
    );
    match call.response() {
        Response::Failed { message } => {
            assert!(message.contains("Read-only file system"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        install.acting_calls().len(),
        calls_before + 1,
        "truncate not run"
    );

    // Nothing but a vmid may be named: no path, no command, no out-of-range id, and the
    // request's verb must be the one sudo ran.
    let calls_before = install.calls().len();
    for (argv, body) in [
        ("reset_guest_identity", reset_identity_request(99.into())),
        (
            "reset_guest_identity",
            reset_identity_request("105 -- /bin/sh".into()),
        ),
        (
            "reset_guest_identity",
            serde_json::to_vec(&serde_json::json!({
                "verb": "reset_guest_identity",
                "args": { "vmid": 105, "path": "/etc/shadow" }
            }))
            .unwrap(),
        ),
        ("restart_controller", reset_identity_request(105.into())),
    ] {
        let call = install.run_as_sudo(&[argv], uid, &body);
        assert!(
            matches!(call.response(), Response::Refused { .. }),
            "{call:?}"
        );
    }
    assert_eq!(
        install.calls().len(),
        calls_before,
        "no refused request ran pct"
    );
}

fn restore_check_request(vmid: serde_json::Value, timeout_secs: u64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "verb": "restore_check",
        "args": { "vmid": vmid, "timeout_secs": timeout_secs }
    }))
    .unwrap()
}

/// A `pct` for stamped guest 105 whose `config` shows `config` (`%s`: the vmid) and whose
/// `exec` of the restore check runs `check` (shell text); the probe finds the check when
/// `installed`.
fn scratch_pct(install: &Install, config: &str, installed: bool, check: &str) {
    install.guest_config(105, &config.replace("%s", "105").replace("\\n", "\n"));
    install.stamp_guest(105, Some(DOC_GUEST));
    install.guest_pct(&format!(
        "case \"$1\" in\n\
           /usr/bin/test) exit {probe};;\n\
           /etc/bosun/restore-check) {check};;\n\
         esac",
        probe = if installed { 0 } else { 1 },
    ));
}

const SCRATCH_CONFIG: &str = "arch: amd64\\nhostname: restore-test-%s\\nnet0: name=eth0,bridge=vmbr0,ip=dhcp,link_down=1,type=veth\\nrootfs: local-lvm:vm-%s-disk-0,size=8G\\n";

#[test]
fn restore_check_runs_the_guests_own_check_and_answers_its_status_and_first_lines() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    scratch_pct(
        &install,
        SCRATCH_CONFIG,
        true,
        "echo '/srv/shop/orders.db: FAILED'; echo 'sha256sum: WARNING: 1 computed checksum did NOT match' >&2; exit 1",
    );
    let call = install.run_as_sudo(
        &["restore_check"],
        uid,
        &restore_check_request(105.into(), 60),
    );
    match ok_output(&call) {
        Output::RestoreChecked {
            vmid,
            installed,
            exit_code,
            timed_out,
            output,
        } => {
            assert_eq!(vmid.get(), 105);
            assert!(installed);
            assert_eq!(exit_code, Some(1));
            assert!(!timed_out);
            assert_eq!(
                output,
                vec![
                    "/srv/shop/orders.db: FAILED",
                    "sha256sum: WARNING: 1 computed checksum did NOT match"
                ]
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        install.acting_calls(),
        vec![
            "pct [exec] [105] [--] [/usr/bin/test] [-x] [/etc/bosun/restore-check]".to_owned(),
            "pct [exec] [105] [--] [/etc/bosun/restore-check]".to_owned(),
        ]
    );
    assert_caps(&call, VerbName::RestoreCheck);

    // A check that passes: exit 0.
    scratch_pct(&install, SCRATCH_CONFIG, true, "echo 'all data checked'");
    let call = install.run_as_sudo(
        &["restore_check"],
        uid,
        &restore_check_request(105.into(), 60),
    );
    assert!(
        matches!(ok_output(&call), Output::RestoreChecked { installed: true, exit_code: Some(0), timed_out: false, ref output, .. } if output == &["all data checked"]),
        "{call:?}"
    );

    // No check installed: nothing runs, and the answer says so.
    scratch_pct(&install, SCRATCH_CONFIG, false, "exit 0");
    let before = install.calls().len();
    let call = install.run_as_sudo(
        &["restore_check"],
        uid,
        &restore_check_request(105.into(), 60),
    );
    assert_eq!(
        ok_output(&call),
        Output::RestoreChecked {
            vmid: bosun_proto::helper::Vmid::new(105).unwrap(),
            installed: false,
            exit_code: None,
            timed_out: false,
            output: Vec::new(),
        }
    );
    assert_eq!(
        install.calls().len(),
        before + 3,
        "config, the stamp and the probe only"
    );

    // A guest pct cannot exec in (stopped) fails with pct's words.
    scratch_pct(
        &install,
        SCRATCH_CONFIG,
        true,
        "echo \"container '105' not running!\" >&2; exit 255",
    );
    install.guest_pct("echo \"container '105' not running!\" >&2; exit 255");
    let call = install.run_as_sudo(
        &["restore_check"],
        uid,
        &restore_check_request(105.into(), 60),
    );
    match call.response() {
        Response::Failed { message } => assert!(message.contains("not running"), "{message}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn restore_check_is_killed_at_its_time_limit_and_its_output_is_cut() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    // A check that floods its output, then hangs with a child of its own holding the pipe.
    scratch_pct(
        &install,
        SCRATCH_CONFIG,
        true,
        "i=0; while [ $i -lt 3000 ]; do echo \"line $i of a check that says too much\"; i=$((i+1)); done; sleep 60 & sleep 60",
    );
    let started = std::time::Instant::now();
    let call = install.run_as_sudo(
        &["restore_check"],
        uid,
        &restore_check_request(105.into(), 2),
    );
    let took = started.elapsed();
    match ok_output(&call) {
        Output::RestoreChecked {
            installed,
            exit_code,
            timed_out,
            output,
            ..
        } => {
            assert!(installed);
            assert!(timed_out);
            assert_eq!(exit_code, None);
            assert_eq!(output.len(), bosun_proto::helper::RESTORE_CHECK_MAX_LINES);
            assert_eq!(output[0], "line 0 of a check that says too much");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        took >= std::time::Duration::from_secs(2) && took < std::time::Duration::from_secs(10),
        "{took:?}"
    );
}

#[test]
fn restore_check_refuses_a_guest_that_is_not_an_isolated_scratch_guest() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    for (config, why) in [
        // A customer's live guest.
        (
            "hostname: shop\\nnet0: name=eth0,bridge=vmbr0,ip=dhcp,type=veth\\n",
            "net0 has its link up",
        ),
        // A scratch name, a link up.
        (
            "hostname: restore-test-%s\\nnet0: name=eth0,bridge=vmbr0,ip=dhcp\\n",
            "net0 has its link up",
        ),
        // Links down, a mount point kept.
        (
            "hostname: restore-test-%s\\nnet0: name=eth0,link_down=1\\nmp0: /srv/data,mp=/data\\n",
            "mount point mp0",
        ),
        // Isolated, but not named as this scratch guest.
        (
            "hostname: shop\\nnet0: name=eth0,link_down=1\\n",
            "hostname is not restore-test-105",
        ),
    ] {
        scratch_pct(&install, config, true, "exit 0");
        let before = install.calls().len();
        let call = install.run_as_sudo(
            &["restore_check"],
            uid,
            &restore_check_request(105.into(), 60),
        );
        let message = expect_refused(&call, "conflict");
        assert!(message.contains(why), "{message}");
        assert_eq!(
            install.calls()[before..],
            ["pct [config] [105] [--current]".to_owned()],
            "nothing was read from or ran in the guest"
        );
    }
    // Nothing but a vmid and a bounded time may be named.
    scratch_pct(&install, SCRATCH_CONFIG, true, "exit 0");
    let before = install.calls().len();
    for (argv, body) in [
        ("restore_check", restore_check_request(105.into(), 0)),
        ("restore_check", restore_check_request(105.into(), 86_400)),
        (
            "restore_check",
            restore_check_request("105 -- /bin/sh".into(), 60),
        ),
        (
            "restore_check",
            serde_json::to_vec(&serde_json::json!({
                "verb": "restore_check",
                "args": { "vmid": 105, "timeout_secs": 60, "path": "/bin/sh" }
            }))
            .unwrap(),
        ),
        (
            "reset_guest_identity",
            restore_check_request(105.into(), 60),
        ),
    ] {
        let call = install.run_as_sudo(&[argv], uid, &body);
        assert!(
            matches!(call.response(), Response::Refused { .. }),
            "{call:?}"
        );
    }
    assert_eq!(install.calls().len(), before, "no refused request ran pct");
}
