//! `bosun-guest run`, the controller image's one process (decision 0088, amended): the image
//! `scripts/controller-image` builds names it, and that command line, with the image's paths
//! moved under a temporary directory, reports the signed digest healthy to a real local API
//! and quiesces the apps around a due backup in the same process, keeps its digest across a
//! SIGTERM, refuses a rollout it cannot switch to, retries while the local API is away and
//! exits at once on a missing bootstrap.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

#[path = "../../agentd/tests/localapi_support/mod.rs"]
mod localapi_support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use bosun_agentd::guests::controller::Announced;
use bosun_agentd::guests::localapi::LocalApiConfig;
use bosun_agentd::ops::journal::ControllerState;
use bosun_guest::App;
use bosun_proto::bootstrap::{Bootstrap, LocalApi, PinnedEndpoint};
use bosun_proto::desired::CustomerIdentity;
use bosun_proto::secret::SecretToken;
use localapi_support::{Harness, Options, daily_policy};
use serde_json::Value;
use tokio::io::AsyncReadExt as _;

/// The program, as the image's entry point names it.
const ENTRYPOINT: &str = "/usr/bin/bosun-guest";
/// Where the image keeps its state (the golden unit's volume).
const STATE_DIR: &str = "/var/lib/bosun-controller";
/// The directories of the image's paths the test moves under its own directory.
const RELOCATED: [&str; 3] = [
    "/etc/bosun-bootstrap/",
    "/etc/bosun-guest/",
    "/var/lib/bosun-controller/",
];

fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

fn check(what: &str, out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `bosun-guest` package file holding this build's program and an empty apps list.
fn package(dir: &Path) -> PathBuf {
    let root = dir.join("pkg");
    for sub in ["DEBIAN", "usr/bin", "etc/bosun-guest"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    let arch = std::process::Command::new("dpkg")
        .arg("--print-architecture")
        .output()
        .unwrap();
    check("dpkg --print-architecture", &arch);
    std::fs::write(
        root.join("DEBIAN/control"),
        format!(
            "Package: bosun-guest\nVersion: 0.0.0-test\nArchitecture: {}\n\
             Maintainer: Bosun maintainers <maintainers@example.invalid>\n\
             Description: bosun-guest built by the test\n",
            String::from_utf8_lossy(&arch.stdout).trim()
        ),
    )
    .unwrap();
    std::fs::copy(
        env!("CARGO_BIN_EXE_bosun-guest"),
        root.join("usr/bin/bosun-guest"),
    )
    .unwrap();
    std::fs::write(root.join("etc/bosun-guest/apps.json"), "[]\n").unwrap();
    let deb = dir.join("bosun-guest_0.0.0-test.deb");
    let out = std::process::Command::new("dpkg-deb")
        .args(["-Znone", "--root-owner-group", "--build"])
        .arg(&root)
        .arg(&deb)
        .output()
        .unwrap();
    check("dpkg-deb --build", &out);
    deb
}

/// Builds the image from the package with the recipe and gives its config.
fn image_config(dir: &Path) -> Value {
    let deb = package(dir);
    let archive = dir.join("controller-image.tar");
    let recipe = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/controller-image");
    let out = std::process::Command::new(recipe)
        .args(["--tag", "bosun/controller:test", "--deb"])
        .arg(&deb)
        .arg("--output")
        .arg(&archive)
        .output()
        .unwrap();
    check("scripts/controller-image", &out);
    let image = dir.join("image");
    std::fs::create_dir(&image).unwrap();
    let out = std::process::Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&image)
        .output()
        .unwrap();
    check("tar -xf", &out);
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(image.join("manifest.json")).unwrap()).unwrap();
    let config = image.join(manifest[0]["Config"].as_str().unwrap());
    serde_json::from_slice(&std::fs::read(config).unwrap()).unwrap()
}

/// `path` moved under `root` when it is in one of the image's directories the test moves.
fn relocate(root: &Path, text: &str) -> String {
    if RELOCATED.iter().any(|dir| text.starts_with(dir)) {
        root.join(text.trim_start_matches('/'))
            .display()
            .to_string()
    } else {
        text.to_owned()
    }
}

/// The image's command line (entry point, arguments, environment) as the golden unit's
/// `docker run` starts it, its paths under `root`.
struct ImageCommand {
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl ImageCommand {
    fn from_config(config: &Value, root: &Path) -> Self {
        assert_eq!(
            config["config"]["Entrypoint"],
            serde_json::json!([ENTRYPOINT])
        );
        let args = config["config"]["Cmd"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| relocate(root, a.as_str().unwrap()))
            .collect();
        let env = config["config"]["Env"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e.as_str().unwrap().split_once('='))
            .map(|(key, value)| (key.to_owned(), relocate(root, value)))
            .collect();
        Self { args, env }
    }

    fn env(&self, key: &str) -> PathBuf {
        let (_, value) = self.env.iter().find(|(k, _)| k == key).unwrap();
        PathBuf::from(value)
    }

    /// Starts it, with the quiesce poll and pass fast and the restore check under `root`,
    /// and `extra` after `run`'s own arguments.
    fn spawn(&self, root: &Path, extra: &[&str]) -> tokio::process::Child {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_bosun-guest"));
        command
            .env_clear()
            .env("RUST_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .arg("--poll-ms")
            .arg("20")
            .arg("--restore-check")
            .arg(root.join("etc/bosun/restore-check"))
            .args(&self.args)
            .args(["--interval-s", "1"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command.spawn().unwrap()
    }
}

/// Apps whose "running" state is a file, every hook call logged.
fn apps(dir: &Path) -> Vec<App> {
    let sh = |script: String| vec!["/bin/sh".to_owned(), "-c".to_owned(), script];
    ["db", "web"]
        .into_iter()
        .map(|name| {
            let running = dir.join(format!("{name}.running"));
            std::fs::write(&running, "").unwrap();
            let log = dir.join("log");
            App {
                name: name.to_owned(),
                stop: sh(format!(
                    "rm -f '{}' && echo 'stop {name}' >> '{}'",
                    running.display(),
                    log.display()
                )),
                start: sh(format!(
                    "touch '{}' && echo 'start {name}' >> '{}'",
                    running.display(),
                    log.display()
                )),
                data: Vec::new(),
            }
        })
        .collect()
}

fn bootstrap(url: &str, fingerprint: &str, guest_id: &str, token: &str) -> Bootstrap {
    Bootstrap {
        schema: bosun_proto::bootstrap::SCHEMA.to_owned(),
        guest_id: guest_id.parse().unwrap(),
        customer: CustomerIdentity {
            customer_id: "acme-01".to_owned(),
            display_name: "Acme".to_owned(),
        },
        hub: PinnedEndpoint {
            url: "https://hub.example.net".to_owned(),
            fingerprint: "ab".repeat(32),
        },
        local_api: LocalApi {
            url: url.to_owned(),
            fingerprint: fingerprint.to_owned(),
            token: SecretToken::new(token.to_owned()),
        },
    }
}

fn write_json(path: &Path, value: &impl serde::Serialize) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_vec(value).unwrap()).unwrap();
}

/// Waits for `cond`; fails with the process's stderr when it exits or 30 s pass first.
async fn wait_until(what: &str, child: &mut tokio::process::Child, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        let exited = child.try_wait().unwrap();
        if exited.is_some() || Instant::now() >= deadline {
            let _ = child.start_kill();
            let mut text = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut text).await;
            panic!("waiting for {what}: exited {exited:?}; its stderr:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SIGTERM, then the exit status and everything it wrote to stderr.
async fn terminate(mut child: tokio::process::Child) -> (std::process::ExitStatus, String) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut text = String::new();
    let status = tokio::time::timeout(Duration::from_secs(15), async {
        stderr.read_to_string(&mut text).await.unwrap();
        child.wait().await.unwrap()
    })
    .await
    .expect("bosun-guest run ends on SIGTERM");
    (status, text)
}

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
