//! `bosun-guest run`, the controller image's one process (decision 0088, amended): the image
//! `scripts/controller-image` builds names it, and that command line, with the image's paths
//! moved under a temporary directory, reports the signed digest healthy to a real local API
//! and quiesces the apps around a due backup in the same process, keeps its digest across a
//! SIGTERM, refuses a rollout it cannot switch to, retries while the local API is away and
//! exits at once on a missing bootstrap. In a golden guest it also quiesces the customer's
//! apps from the guest's own apps file and writes the keys the bootstrap carries where the
//! golden image's sshd reads them (decision 0107).

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

#[path = "../../agentd/tests/localapi_support/mod.rs"]
mod localapi_support;

mod image_support;

use std::os::unix::fs::PermissionsExt as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bosun_agentd::guests::controller::Announced;
use bosun_agentd::guests::localapi::LocalApiConfig;
use bosun_agentd::ops::journal::ControllerState;
use image_support::{
    ENTRYPOINT, ImageCommand, STATE_DIR, apps, apps_named, bootstrap, digest, image_config,
    terminate, wait_until, write_json,
};
use localapi_support::{Harness, Options, daily_policy};

#[test]
fn the_recipe_s_entry_point_is_run_with_its_state_in_the_controller_volume() {
    let dir = tempfile::tempdir().unwrap();
    let config = image_config(dir.path());
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!([ENTRYPOINT])
    );
    let cmd: Vec<&str> = config["config"]["Cmd"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let mode = cmd
        .iter()
        .position(|a| *a == "run")
        .expect("the image runs `run`");
    assert_eq!(
        &cmd[mode + 1..],
        ["--state", &format!("{STATE_DIR}/controller.digest")],
        "the controller's digest is kept in the state volume: {cmd:?}"
    );
    assert!(
        cmd[..mode]
            .windows(2)
            .any(|w| w == ["--marker", &format!("{STATE_DIR}/quiesce.marker")]),
        "the quiesce marker is kept in the state volume: {cmd:?}"
    );
    assert!(
        !cmd.contains(&"--activate"),
        "the image has no switch command"
    );
}

/// The image's command line against a real local API: one process reports the signed digest
/// healthy and stops and restarts the apps around a due backup; after a SIGTERM (exit 0) the
/// digest file is still there; through a rollout it keeps reporting the digest it runs until
/// the host's helper places the new image's digest beside the bootstrap, then reports that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_reports_the_signed_digest_and_quiesces_the_apps() {
    let h = Harness::start_with(Options {
        guests: 1,
        config: LocalApiConfig {
            rate_per_s: 1000,
            burst: 1000,
            controller_report_interval: Duration::from_secs(1),
            ..LocalApiConfig::default()
        },
        ..Options::default()
    })
    .await;
    let root = h.dir.path().join("image-root");
    // The golden unit's StateDirectory, the container's volume.
    std::fs::create_dir_all(root.join(STATE_DIR.trim_start_matches('/'))).unwrap();
    let command = ImageCommand::from_config(&image_config(h.dir.path()), &root);
    let guest = h.guest(0).clone();
    write_json(
        &command.env("BOSUN_BOOTSTRAP"),
        &bootstrap(&h.base, &h.fingerprint, &guest.guest_id, &guest.token),
    );
    let app_dir = h.dir.path().join("apps");
    std::fs::create_dir_all(&app_dir).unwrap();
    write_json(&command.env("BOSUN_GUEST_APPS"), &apps(&app_dir));
    // The guest's record: the golden recipe's signed digest, as provisioning writes it.
    let signed = digest('a');
    h.controllers.announce(
        &guest.guest_id,
        guest.vmid,
        Announced {
            digest: Some(signed.clone()),
            state: ControllerState::Running,
            op_id: None,
        },
    );
    h.policy.send_replace(Some(daily_policy("hourly", 10)));

    let mut child = command.spawn(&root, &[]);
    let healthy_since = h.controllers.seq();
    wait_until("a healthy report of the signed digest", &mut child, || {
        h.controllers
            .last_report(&guest.guest_id)
            .is_some_and(|r| r.digest == signed && r.healthy && r.seq > healthy_since)
    })
    .await;
    let log = || -> Vec<String> {
        std::fs::read_to_string(app_dir.join("log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    wait_until("the quiesce window closed", &mut child, || log().len() == 4).await;
    assert_eq!(log(), ["stop db", "stop web", "start web", "start db"]);
    assert!(app_dir.join("db.running").exists() && app_dir.join("web.running").exists());
    let (_, run) = h.follow_backup(0).await;
    assert_eq!(
        (run["phase"].as_str(), run["quiesced"].as_bool()),
        (Some("done"), Some(true))
    );
    // Still reporting after the backup: the two loops run side by side.
    let after_backup = h.controllers.seq();
    wait_until("a report after the backup", &mut child, || {
        h.controllers
            .last_report(&guest.guest_id)
            .is_some_and(|r| r.seq > after_backup && r.digest == signed)
    })
    .await;
    let (status, stderr) = terminate(child).await;
    assert!(status.success(), "{status}: {stderr}");
    let state = root.join("var/lib/bosun-controller/controller.digest");
    assert_eq!(std::fs::read_to_string(&state).unwrap().trim(), signed);
    assert!(
        !root
            .join("var/lib/bosun-controller/quiesce.marker")
            .exists()
    );

    // A rollout to another digest: this image cannot switch itself, so it keeps reporting the
    // digest it runs, healthy, until the host's helper has placed the new image.
    let other = digest('b');
    h.controllers.announce(
        &guest.guest_id,
        guest.vmid,
        Announced {
            digest: Some(other.clone()),
            state: ControllerState::RollingOut,
            op_id: None,
        },
    );
    let mut child = command.spawn(&root, &[]);
    let since = h.controllers.seq();
    wait_until("a report of the digest it runs", &mut child, || {
        h.controllers
            .last_report(&guest.guest_id)
            .is_some_and(|r| r.seq > since)
    })
    .await;
    let (status, stderr) = terminate(child).await;
    assert!(status.success(), "{status}: {stderr}");
    let last = h.controllers.last_report(&guest.guest_id).unwrap();
    assert_eq!(
        (last.digest.as_str(), last.healthy),
        (signed.as_str(), true)
    );
    assert_eq!(std::fs::read_to_string(&state).unwrap().trim(), signed);

    // The helper placed the new image and wrote its digest beside the bootstrap, then restarted
    // the unit: the controller runs by that digest and reports it healthy.
    let placed = command
        .env("BOSUN_BOOTSTRAP")
        .with_file_name("controller.digest");
    std::fs::write(&placed, format!("{other}\n")).unwrap();
    let mut child = command.spawn(&root, &[]);
    let since = h.controllers.seq();
    wait_until("a healthy report of the placed digest", &mut child, || {
        h.controllers
            .last_report(&guest.guest_id)
            .is_some_and(|r| r.seq > since && r.digest == other && r.healthy)
    })
    .await;
    let (status, stderr) = terminate(child).await;
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(log().len(), 4, "nothing was due: no app stopped again");

    // A SIGTERM while the health check runs ends the process at once, not after the check.
    h.controllers.announce(
        &guest.guest_id,
        guest.vmid,
        Announced {
            digest: Some(signed.clone()),
            state: ControllerState::Running,
            op_id: None,
        },
    );
    let sleeping = app_dir.join("health-check-ran");
    let health = serde_json::json!([
        "/bin/sh",
        "-c",
        format!("touch '{}' && exec sleep 120", sleeping.display())
    ])
    .to_string();
    let mut child = command.spawn(&root, &["--health", &health]);
    wait_until("the health check running", &mut child, || sleeping.exists()).await;
    let begun = Instant::now();
    let (status, stderr) = terminate(child).await;
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        begun.elapsed() < Duration::from_secs(5),
        "stopped {:?} after SIGTERM",
        begun.elapsed()
    );
    h.shutdown().await;
}

/// With nothing listening where the bootstrap says, every loop logs the failure and retries
/// with growing delays; the process does not exit until SIGTERM, and then with success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_local_api_is_retried_not_an_exit() {
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", closed.local_addr().unwrap());
    drop(closed);
    let boot = dir.path().join("bootstrap.json");
    write_json(
        &boot,
        &bootstrap(
            &url,
            &"cd".repeat(32),
            &localapi_support::guest_id(0),
            "t0ken-unused",
        ),
    );
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_bosun-guest"))
        .env_clear()
        .env("RUST_LOG", "info")
        .arg("--bootstrap")
        .arg(&boot)
        .arg("--marker")
        .arg(dir.path().join("quiesce.marker"))
        .args(["run", "--state"])
        .arg(dir.path().join("controller.digest"))
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(child.try_wait().unwrap().is_none(), "still running");
    let (status, stderr) = terminate(child).await;
    assert!(status.success(), "{status}: {stderr}");
    for what in [
        "quiesce pass failed; retrying",
        "controller pass failed; retrying",
        "protection pass failed; retrying",
    ] {
        let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(what)).collect();
        assert!(
            (2..=4).contains(&lines.len()),
            "{what}: a line per try, 1 s then 2 s apart: {stderr}"
        );
        assert!(
            lines[0].contains("retry_in_s=1") && lines[1].contains("retry_in_s=2"),
            "{stderr}"
        );
        assert!(
            lines[0].contains("GET /v1/"),
            "the failing call is named: {stderr}"
        );
    }
    assert!(!dir.path().join("controller.digest").exists());
}

/// A bootstrap that is not there cannot get better by retrying: exit 1 at once, naming it.
#[tokio::test]
async fn a_missing_bootstrap_is_an_exit_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let boot = dir.path().join("bootstrap.json");
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_bosun-guest"))
            .env_clear()
            .env("BOSUN_BOOTSTRAP", &boot)
            .args(["run", "--state"])
            .arg(dir.path().join("controller.digest"))
            .output(),
    )
    .await
    .expect("exits at once")
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&boot.display().to_string()) && stderr.contains("No such file"),
        "{stderr}"
    );
}

#[test]
fn a_pause_of_zero_or_over_a_day_is_a_usage_error() {
    for (flag, bad) in [("--poll-ms", "0"), ("--max-quiesce-s", "0")] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_bosun-guest"))
            .args([flag, bad, "once"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {bad}: {stderr}");
        assert!(stderr.contains(flag), "{flag} {bad}: {stderr}");
    }
    for command in ["run", "watch"] {
        for bad in ["0", "86401"] {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_bosun-guest"))
                .args([command, "--interval-s", bad])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command} {bad}: {stderr}");
            assert!(stderr.contains("--interval-s"), "{command} {bad}: {stderr}");
        }
    }
}

/// Two customer keys, as the operator's signed plan lists them (comments dropped).
const CUSTOMER_KEYS: [&str; 2] = [
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMJ9ICvzuRFQSTsuN1n1uZmou1NEzhm7SDmBZQBvv5uX",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPPyqA64EZx2WDADL9rLZIRJm7ZDsG/SLszl6swG3/y4",
];

/// A golden guest: the image's command line with nothing baked in but an empty apps list, the
/// customer's apps in the guest's `/etc/bosun/apps.json` and two keys in the bootstrap. The
/// keys land, alone, in `/etc/bosun/authorized_keys/root` (0600); the customer's apps are
/// stopped and started around the due backup, which is taken quiesced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_golden_guest_s_controller_quiesces_the_customer_s_apps_and_writes_its_keys() {
    let h = Harness::start_with(Options {
        guests: 1,
        config: LocalApiConfig {
            rate_per_s: 1000,
            burst: 1000,
            ..LocalApiConfig::default()
        },
        ..Options::default()
    })
    .await;
    let root = h.dir.path().join("image-root");
    std::fs::create_dir_all(root.join(STATE_DIR.trim_start_matches('/'))).unwrap();
    let command = ImageCommand::from_config(&image_config(h.dir.path()), &root);
    let guest = h.guest(0).clone();
    let mut boot = bootstrap(&h.base, &h.fingerprint, &guest.guest_id, &guest.token);
    boot.ssh_authorized_keys = CUSTOMER_KEYS
        .iter()
        .map(|k| bosun_proto::break_glass::SshPublicKey::new(k).unwrap())
        .collect();
    write_json(&command.env("BOSUN_BOOTSTRAP"), &boot);
    // Nothing of the customer's is baked into the image.
    write_json(
        &command.env("BOSUN_GUEST_APPS"),
        &Vec::<bosun_guest::App>::new(),
    );
    let customer_apps = command.env("BOSUN_CUSTOMER_APPS");
    assert!(
        customer_apps.ends_with("etc/bosun/apps.json"),
        "{}",
        customer_apps.display()
    );
    let app_dir = h.dir.path().join("apps");
    std::fs::create_dir_all(&app_dir).unwrap();
    write_json(
        &customer_apps,
        &apps_named(&app_dir, &["shop-db", "shop-web"]),
    );
    h.policy.send_replace(Some(daily_policy("hourly", 10)));

    let mut child = command.spawn(&root, &[]);
    let keys = command.env("BOSUN_AUTHORIZED_KEYS");
    assert!(
        keys.ends_with("etc/bosun/authorized_keys/root"),
        "{}",
        keys.display()
    );
    wait_until("the keys written", &mut child, || keys.exists()).await;
    assert_eq!(
        std::fs::read_to_string(&keys).unwrap(),
        format!("{}\n{}\n", CUSTOMER_KEYS[0], CUSTOMER_KEYS[1])
    );
    assert_eq!(
        std::fs::metadata(&keys).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let log = || -> Vec<String> {
        std::fs::read_to_string(app_dir.join("log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    wait_until("the quiesce window closed", &mut child, || log().len() == 4).await;
    assert_eq!(
        log(),
        [
            "stop shop-db",
            "stop shop-web",
            "start shop-web",
            "start shop-db"
        ]
    );
    let (_, run) = h.follow_backup(0).await;
    assert_eq!(
        (run["phase"].as_str(), run["quiesced"].as_bool()),
        (Some("done"), Some(true))
    );
    let (status, stderr) = terminate(child).await;
    assert!(status.success(), "{status}: {stderr}");

    // A new bootstrap without keys (the plan took them away): the next start empties the file.
    boot.ssh_authorized_keys.clear();
    write_json(&command.env("BOSUN_BOOTSTRAP"), &boot);
    let mut child = command.spawn(&root, &[]);
    wait_until("the keys taken away", &mut child, || {
        std::fs::read_to_string(&keys).is_ok_and(|k| k.is_empty())
    })
    .await;
    let (status, stderr) = terminate(child).await;
    assert!(status.success(), "{status}: {stderr}");
    h.shutdown().await;
}
