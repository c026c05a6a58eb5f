//! What an agent self-update needs around it when no systemd runs as PID 1: real slot
//! directories under a private root-owned prefix, the real `bosun-update-gate` binary
//! installed there with its own root-owned config, and [`FakeSystemd`] (the demo's stand-in
//! for systemd's handling of `bosun-agentd.service`, `bosun_demo::unit`), which the gate
//! reaches through a `systemctl` stand-in that answers `show` from the stand-in's state
//! file and turns `restart` into a request, exactly the calls it makes on a host.
//!
//! Fixture agents are shell scripts: one that exits at start, one that never sends
//! `READY=1`, one that is ready but never polls, one that polls then crashes.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod swap_proxy;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use bosun_demo::unit::{FakeSystemd, UnitSpec};
use bosun_proto::update::{UpdatePhase, UpdateRecord};

/// `target/<profile>/<name>`, where cargo puts the workspace's binaries.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the workspace's binaries first (`cargo build --workspace --bins`)",
        path.display()
    );
    path
}

/// Copies an executable with install(1) (no write descriptor of ours to inherit).
pub fn install_executable(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let status = Command::new("install")
        .args(["-m", "0755"])
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success(), "install {from:?} {to:?}");
}

/// Writes a shell script and installs it executable at `to`.
pub fn install_script(dir: &Path, to: &Path, body: &str) {
    let source = dir.join(format!("script-{}", uuid::Uuid::new_v4().simple()));
    std::fs::write(&source, format!("#!/bin/sh\n{body}\n")).unwrap();
    install_executable(&source, to);
}

/// The gate's timings in the tests (milliseconds).
#[derive(Debug, Clone, Copy)]
pub struct GateTimings {
    pub window: u64,
    pub ready: u64,
    pub poll: u64,
    pub max_restarts: u64,
    pub interval: u64,
}

impl Default for GateTimings {
    fn default() -> Self {
        Self {
            window: 4_000,
            ready: 2_000,
            poll: 3_000,
            max_restarts: 2,
            interval: 50,
        }
    }
}

/// A private prefix: slots, the gate and its config, the systemctl stand-in.
pub struct Prefix {
    pub dir: tempfile::TempDir,
    pub slots: PathBuf,
    pub gate: PathBuf,
    pub unit_dir: PathBuf,
    pub poll_mark: PathBuf,
}

impl Prefix {
    /// Slot `a` holds `agent` and `current` names it; the gate reads `poll_mark`.
    pub fn new(poll_mark: &Path, timings: GateTimings) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("bosun-update-")
            .tempdir()
            .unwrap();
        let root = dir.path();
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
        for d in ["slots/a", "slots/b", "etc/bosun", "bin", "unit"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::os::unix::fs::symlink("a", root.join("slots/current")).unwrap();
        let gate = root.join("usr/libexec/bosun/bosun-update-gate");
        install_executable(&binary("bosun-update-gate"), &gate);
        let unit_dir = root.join("unit");
        let systemctl = root.join("bin/systemctl");
        install_script(
            root,
            &systemctl,
            &bosun_demo::unit::systemctl_script(&unit_dir),
        );
        let config = serde_json::json!({
            "slots_root": root.join("slots"),
            "agent_unit": "bosun-agentd.service",
            "systemctl": systemctl,
            "poll_mark": poll_mark,
            "health_window_ms": timings.window,
            "ready_timeout_ms": timings.ready,
            "poll_timeout_ms": timings.poll,
            "max_restarts": timings.max_restarts,
            "check_interval_ms": timings.interval,
        });
        std::fs::write(
            root.join("etc/bosun/update-gate.json"),
            serde_json::to_vec_pretty(&config).unwrap(),
        )
        .unwrap();
        Self {
            slots: root.join("slots"),
            gate,
            unit_dir,
            poll_mark: poll_mark.to_owned(),
            dir,
        }
    }

    /// The binary a slot runs.
    pub fn slot_binary(&self, slot: &str) -> PathBuf {
        self.slots.join(slot).join("bosun-agentd")
    }

    /// The slot `current` names.
    pub fn current(&self) -> String {
        std::fs::read_link(self.slots.join("current"))
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    /// The update record.
    pub fn record(&self) -> Option<UpdateRecord> {
        let text = std::fs::read(self.slots.join("update.json")).ok()?;
        Some(serde_json::from_slice(&text).unwrap())
    }

    /// Writes a record and points `current` at `current` (a state a crash left).
    pub fn set_state(&self, record: &UpdateRecord, current: &str) {
        std::fs::write(
            self.slots.join("update.json"),
            serde_json::to_vec_pretty(record).unwrap(),
        )
        .unwrap();
        let tmp = self.slots.join(".current.test");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(current, &tmp).unwrap();
        std::fs::rename(&tmp, self.slots.join("current")).unwrap();
    }

    /// What the gate asked systemctl.
    pub fn systemctl_calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.unit_dir.join("systemctl.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Starts the gate, as `bosun-update-gate.path` does when the record changes.
    pub fn start_gate(&self) -> Child {
        Command::new(&self.gate)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.dir.path().join("gate.log"))
                    .unwrap(),
            ))
            .spawn()
            .unwrap()
    }

    /// Runs the gate to its end (bounded); gives whether it exited 0.
    pub fn run_gate(&self, limit: Duration) -> bool {
        let mut child = self.start_gate();
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the gate did not decide within {limit:?}: {}",
                    self.gate_log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The gate's stderr.
    pub fn gate_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("gate.log")).unwrap_or_default()
    }

    /// Waits until the record reaches `phase`.
    pub fn wait_phase(&self, phase: UpdatePhase, limit: Duration) -> UpdateRecord {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(record) = self.record()
                && record.phase == phase
            {
                return record;
            }
            assert!(
                Instant::now() < deadline,
                "no {phase:?} within {limit:?}: {:?}",
                self.record()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The fixture agents. Each is what a broken release could do.
pub mod fixtures {
    /// A good stand-in agent: ready, then a poll mark every 100 ms from its own pid; it
    /// writes `tag` to `<mark dir>/running` first, so a test can tell which slot runs.
    pub fn good(mark: &std::path::Path, tag: &str) -> String {
        format!(
            "mkdir -p '{dir}'\necho {tag} > '{dir}/running'\nsystemd-notify --ready --no-block\nwhile true; do\n  printf '{{\"at_ms\":%s,\"pid\":%s}}' \"$(date +%s%3N)\" \"$$\" > '{dir}/.mark'\n  mv '{dir}/.mark' '{mark}'\n  sleep 0.1\ndone",
            dir = mark.parent().unwrap().display(),
            mark = mark.display()
        )
    }

    /// Exits at start.
    pub const EXITS_AT_START: &str = "echo 'bosun-agentd: cannot start' >&2\nexit 1";

    /// Runs but never sends `READY=1`.
    pub const NEVER_READY: &str = "exec sleep 600";

    /// Ready, but never completes a hub poll.
    pub const NEVER_POLLS: &str = "systemd-notify --ready --no-block\nexec sleep 600";

    /// Ready and polling, then crashes after half a second, every time.
    pub fn crashes_later(mark: &std::path::Path) -> String {
        format!(
            "systemd-notify --ready --no-block\nmkdir -p '{dir}'\nprintf '{{\"at_ms\":%s,\"pid\":%s}}' \"$(date +%s%3N)\" \"$$\" > '{dir}/.mark'\nmv '{dir}/.mark' '{mark}'\nsleep 0.5\nexit 3",
            dir = mark.parent().unwrap().display(),
            mark = mark.display()
        )
    }
}
