//! The controller image as `scripts/controller-image` builds it from a `bosun-guest` package
//! file of this build's program, and its command line run with the image's paths moved under
//! a test directory.

#![allow(
    dead_code,
    reason = "each test file uses the part of the support it needs"
)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use bosun_guest::App;
use bosun_proto::bootstrap::{Bootstrap, LocalApi, PinnedEndpoint};
use bosun_proto::desired::CustomerIdentity;
use bosun_proto::secret::SecretToken;
use serde_json::Value;
use tokio::io::AsyncReadExt as _;

/// The program, as the image's entry point names it.
pub const ENTRYPOINT: &str = "/usr/bin/bosun-guest";
/// Where the image keeps its state (the golden unit's volume).
pub const STATE_DIR: &str = "/var/lib/bosun-controller";
/// The directories of the image's paths the test moves under its own directory.
pub const RELOCATED: [&str; 4] = [
    "/etc/bosun/",
    "/etc/bosun-bootstrap/",
    "/etc/bosun-guest/",
    "/var/lib/bosun-controller/",
];

pub fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

pub fn check(what: &str, out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `bosun-guest` package file holding this build's program and an empty apps list.
pub fn package(dir: &Path) -> PathBuf {
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
pub fn image_config(dir: &Path) -> Value {
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
pub fn relocate(root: &Path, text: &str) -> String {
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
pub struct ImageCommand {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl ImageCommand {
    pub fn from_config(config: &Value, root: &Path) -> Self {
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

    pub fn env(&self, key: &str) -> PathBuf {
        let (_, value) = self.env.iter().find(|(k, _)| k == key).unwrap();
        PathBuf::from(value)
    }

    /// Starts it, with the quiesce poll and pass fast and the restore check under `root`,
    /// and `extra` after `run`'s own arguments.
    pub fn spawn(&self, root: &Path, extra: &[&str]) -> tokio::process::Child {
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
pub fn apps(dir: &Path) -> Vec<App> {
    apps_named(dir, &["db", "web"])
}

/// Apps named `names`, each one's "running" state a file, every hook call logged.
pub fn apps_named(dir: &Path, names: &[&str]) -> Vec<App> {
    let sh = |script: String| vec!["/bin/sh".to_owned(), "-c".to_owned(), script];
    names
        .iter()
        .copied()
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

pub fn bootstrap(url: &str, fingerprint: &str, guest_id: &str, token: &str) -> Bootstrap {
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
        ssh_authorized_keys: Vec::new(),
    }
}

pub fn write_json(path: &Path, value: &impl serde::Serialize) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_vec(value).unwrap()).unwrap();
}

/// Waits for `cond`; fails with the process's stderr when it exits or 30 s pass first.
pub async fn wait_until(
    what: &str,
    child: &mut tokio::process::Child,
    mut cond: impl FnMut() -> bool,
) {
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
pub async fn terminate(mut child: tokio::process::Child) -> (std::process::ExitStatus, String) {
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
