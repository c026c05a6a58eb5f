//! The restore check bosun-guest writes: run for real (`/bin/sh`, coreutils' `sha256sum`), it
//! passes on the data it summed and fails, naming the file, on data that changed; it refuses
//! what it cannot name plainly and bounds what it hashes; and a simulated guest
//! (`bosun-pvesim`'s `pct exec`) runs it the same way, so the restore tests of the agent's
//! suites exercise what a real guest would run.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

#[path = "../../agentd/tests/localapi_support/mod.rs"]
mod localapi_support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bosun_guest::{RestoreCheck, RestoreCheckError};

fn check_in(dir: &Path) -> RestoreCheck {
    RestoreCheck {
        script: dir.join("etc/bosun/restore-check"),
        checksums: dir.join("var/lib/bosun-guest/restore-check.sha256"),
        ..RestoreCheck::default()
    }
}

/// `srv/shop` with two files, one in a subdirectory, and a symlink out of the data.
fn data_in(dir: &Path) -> PathBuf {
    let data = dir.join("srv/shop");
    std::fs::create_dir_all(data.join("db")).unwrap();
    std::fs::write(data.join("orders.db"), "order 1: 3 chairs\n").unwrap();
    std::fs::write(data.join("db/customers.db"), "acme\n").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", data.join("hostname")).unwrap();
    data
}

fn run(script: &Path) -> std::process::Output {
    std::process::Command::new(script).output().unwrap()
}

#[test]
fn the_check_passes_on_the_data_it_summed_and_names_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_in(dir.path());
    let check = check_in(dir.path());
    assert_eq!(check.install(std::slice::from_ref(&data), None).unwrap(), 2);
    let mode = std::fs::metadata(&check.script)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    let script = std::fs::read_to_string(&check.script).unwrap();
    assert!(script.starts_with("#!/bin/sh -e\n"), "{script}");
    assert!(
        script.ends_with(&format!(
            "\n/usr/bin/sha256sum --check --strict --quiet {}\n",
            check.checksums.display()
        )),
        "{script}"
    );
    let listed = std::fs::read_to_string(&check.checksums).unwrap();
    assert_eq!(
        listed.lines().count(),
        2,
        "the symlink is not followed: {listed}"
    );
    let ran = run(&check.script);
    assert!(ran.status.success(), "{ran:?}");
    assert!(ran.stdout.is_empty(), "quiet when whole: {ran:?}");

    // A torn copy of one file fails the check, which names it.
    std::fs::write(data.join("orders.db"), "order 1: 3 ch\0\0\0\0\n").unwrap();
    let ran = run(&check.script);
    assert_eq!(ran.status.code(), Some(1), "{ran:?}");
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout),
        format!("{}: FAILED\n", data.join("orders.db").display())
    );
    assert!(
        String::from_utf8_lossy(&ran.stderr).contains("1 computed checksum did NOT match"),
        "{ran:?}"
    );
    // So does a lost one.
    std::fs::remove_file(data.join("db/customers.db")).unwrap();
    assert_eq!(run(&check.script).status.code(), Some(1));

    // Removed: the script first, then its list; removing again is no error.
    check.remove().unwrap();
    assert!(!check.script.exists() && !check.checksums.exists());
    check.remove().unwrap();
}

#[test]
fn the_check_lists_neither_itself_nor_its_list() {
    let dir = tempfile::tempdir().unwrap();
    let check = check_in(dir.path());
    let data = data_in(dir.path());
    check.install(std::slice::from_ref(&data), None).unwrap();
    // The whole tree as data, the check and its list inside it: they are left out.
    assert_eq!(check.install(&[dir.path().to_path_buf()], None).unwrap(), 2);
    assert!(run(&check.script).status.success());
}

#[test]
fn what_cannot_be_named_plainly_or_hashed_in_time_writes_no_check() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_in(dir.path());
    let spaced = RestoreCheck {
        checksums: dir.path().join("var/lib/my sums"),
        ..check_in(dir.path())
    };
    let err = spaced
        .install(std::slice::from_ref(&data), None)
        .unwrap_err();
    assert!(
        matches!(err, RestoreCheckError::UnsafePath { .. }),
        "{err:?}"
    );
    let relative = RestoreCheck {
        checksums: PathBuf::from("sums.sha256"),
        ..check_in(dir.path())
    };
    assert!(matches!(
        relative.install(std::slice::from_ref(&data), None),
        Err(RestoreCheckError::UnsafePath { .. })
    ));
    let check = check_in(dir.path());
    std::fs::write(data.join("line\nbreak"), "x").unwrap();
    assert!(matches!(
        check.install(std::slice::from_ref(&data), None),
        Err(RestoreCheckError::UnsafePath { .. })
    ));
    std::fs::remove_file(data.join("line\nbreak")).unwrap();
    assert!(matches!(
        check.install(&[PathBuf::from("srv/shop")], None),
        Err(RestoreCheckError::UnsafePath { .. })
    ));
    assert!(matches!(
        check.install(&[dir.path().join("nowhere")], None),
        Err(RestoreCheckError::Read { .. })
    ));
    let small = RestoreCheck {
        max_files: 1,
        ..check_in(dir.path())
    };
    assert!(matches!(
        small.install(std::slice::from_ref(&data), None),
        Err(RestoreCheckError::TooManyFiles { limit: 1 })
    ));
    let past = Instant::now().checked_sub(Duration::from_secs(1)).unwrap();
    assert!(matches!(
        check.install(std::slice::from_ref(&data), Some(past)),
        Err(RestoreCheckError::OutOfTime)
    ));
    assert!(!check.script.exists(), "no check was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_guest_runs_the_check_bosun_guest_writes() {
    let h = localapi_support::Harness::start().await;
    let vmid = h.guest(0).vmid.to_string();
    let dir = tempfile::tempdir().unwrap();
    let data = data_in(dir.path());
    let check = check_in(dir.path());
    check.install(std::slice::from_ref(&data), None).unwrap();
    let pct = |args: Vec<String>, input: Option<Vec<u8>>| {
        let sim = h.sim.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            sim.cli("pct", &args, input.as_deref()).await.unwrap()
        }
    };
    let s = |p: &Path| p.display().to_string();
    // The same files at the same paths inside the guest.
    let dirs = [
        data.join("db"),
        check.script.parent().unwrap().to_path_buf(),
        check.checksums.parent().unwrap().to_path_buf(),
    ];
    let mut mkdir = vec![
        "exec".to_owned(),
        vmid.clone(),
        "--".into(),
        "/usr/bin/mkdir".into(),
        "-p".into(),
    ];
    mkdir.extend(dirs.iter().map(|d| s(d)));
    assert_eq!(pct(mkdir, None).await.exit, 0);
    for (file, perms) in [
        (data.join("orders.db"), "0600"),
        (data.join("db/customers.db"), "0600"),
        (check.checksums.clone(), "0600"),
        (check.script.clone(), "0755"),
    ] {
        let args = vec![
            "push".to_owned(),
            vmid.clone(),
            "/host".into(),
            s(&file),
            "--perms".into(),
            perms.into(),
        ];
        let out = pct(args, Some(std::fs::read(&file).unwrap())).await;
        assert_eq!(out.exit, 0, "{out:?}");
    }
    let exec = |argv: &[String]| {
        let mut args = vec!["exec".to_owned(), vmid.clone(), "--".into()];
        args.extend(argv.iter().cloned());
        pct(args, None)
    };
    let probe = bosun_proto::helper::RESTORE_CHECK_PROBE.map(str::to_owned);
    // The probe the helper runs, at the real path: no check there yet.
    assert_eq!(exec(&probe).await.exit, 1);
    let out = exec(&[s(&check.script)]).await;
    assert_eq!(out.exit, 0, "{out:?}");
    // The torn copy, as a restore would bring it back.
    let torn = vec![
        "push".to_owned(),
        vmid.clone(),
        "/host".into(),
        s(&data.join("orders.db")),
    ];
    assert_eq!(
        pct(torn, Some(b"order 1: 3 ch\0\0\0\0\n".to_vec()))
            .await
            .exit,
        0
    );
    let out = exec(&[s(&check.script)]).await;
    assert_eq!(out.exit, 1, "{out:?}");
    assert_eq!(
        out.stdout,
        format!("{}: FAILED\n", data.join("orders.db").display())
    );
    assert_eq!(
        out.stderr,
        "sha256sum: WARNING: 1 computed checksum did NOT match\n"
    );
    h.shutdown().await;
}
