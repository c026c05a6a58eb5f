//! A stand-in for systemd's handling of one `Type=notify`, `Restart=on-failure` unit, for
//! the demo's agent self-update (and the update tests): no PID-1 systemd runs here. It runs
//! `ExecStart=`'s program (a path through the slots' `current` link, resolved at every start
//! as systemd resolves it), reads `READY=1` on a `NOTIFY_SOCKET` it binds, restarts a failed
//! exit after `RestartSec` counting `NRestarts`, and restarts on request. `bosun-update-gate`
//! reaches it through [`systemctl_script`], a `systemctl` that answers `show` from the
//! stand-in's state file and turns `restart` into a request: the calls it makes on a host.

use std::ffi::OsString;
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::DemoError;
use super::children::RunAs;

/// The `systemctl` stand-in's shell text for the unit whose state lives in `dir`.
pub fn systemctl_script(dir: &Path) -> String {
    format!(
        "d='{}'\necho \"$*\" >> \"$d/systemctl.log\"\ncase \"$1\" in\n  show) cat \"$d/status\" ;;\n  restart) : > \"$d/restart-request\" ;;\n  reset-failed) ;;\n  *) exit 1 ;;\nesac",
        dir.display()
    )
}

/// How the stand-in starts the unit.
#[derive(Debug, Clone)]
pub struct UnitSpec {
    /// `ExecStart=`'s program (a path through `current`).
    pub exec: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// `RestartSec=`.
    pub restart_sec: Duration,
    /// Where the unit's output goes (appended).
    pub log: PathBuf,
    /// `User=` and `Group=`, when not this process's.
    pub run_as: Option<RunAs>,
}

/// The running stand-in; dropping it stops the unit.
#[derive(Debug)]
pub struct FakeSystemd {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Where its state (`status`, `notify.sock`, `systemctl.log`) lives.
    pub dir: PathBuf,
}

#[derive(Debug, Default)]
struct UnitState {
    active_state: String,
    n_restarts: u64,
    main_pid: u32,
    starts: u64,
}

fn artifact(path: &Path) -> impl FnOnce(std::io::Error) -> DemoError + '_ {
    move |source| DemoError::Artifact {
        path: path.to_owned(),
        source,
    }
}

impl FakeSystemd {
    /// Starts the unit now; its state lives in `dir`.
    pub fn start(dir: &Path, spec: UnitSpec) -> Result<Self, DemoError> {
        std::fs::create_dir_all(dir).map_err(artifact(dir))?;
        let socket_path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&socket_path);
        let socket = UnixDatagram::bind(&socket_path).map_err(artifact(&socket_path))?;
        socket
            .set_nonblocking(true)
            .map_err(artifact(&socket_path))?;
        if let Some(user) = spec.run_as {
            // The unit's user sends READY=1 to it, as systemd's socket lets any unit do.
            std::os::unix::fs::chown(&socket_path, Some(user.uid), Some(user.gid))
                .map_err(artifact(&socket_path))?;
        }
        let first = spawn(&spec, &socket_path)?;
        let state_dir = dir.to_owned();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            supervise(&state_dir, &socket, &socket_path, &spec, first, &stopping);
        });
        Ok(Self {
            stop,
            thread: Some(thread),
            dir: dir.to_owned(),
        })
    }

    /// The `systemctl show` text.
    pub fn status(&self) -> String {
        std::fs::read_to_string(self.dir.join("status")).unwrap_or_default()
    }

    /// How many times the unit was started (first start, restarts, requests).
    pub fn starts(&self) -> u64 {
        self.status()
            .lines()
            .find_map(|l| l.strip_prefix("X-Starts="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Waits until the status text satisfies `check`; panics after `limit` (tests).
    #[allow(clippy::panic, reason = "a test helper: a timeout is a failed test")]
    pub fn wait(&self, check: impl Fn(&str) -> bool, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !check(&self.status()) {
            assert!(Instant::now() < deadline, "unit state: {}", self.status());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the status text satisfies `check`, at most `limit`.
    pub async fn until(
        &self,
        what: &str,
        check: impl Fn(&str) -> bool,
        limit: Duration,
    ) -> Result<(), DemoError> {
        let deadline = Instant::now() + limit;
        while !check(&self.status()) {
            if Instant::now() >= deadline {
                return Err(DemoError::Timeout {
                    what: what.to_owned(),
                    after: limit,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }
}

impl Drop for FakeSystemd {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn write_status(dir: &Path, state: &UnitState) {
    let text = format!(
        "ActiveState={}\nNRestarts={}\nMainPID={}\nX-Starts={}\n",
        state.active_state, state.n_restarts, state.main_pid, state.starts
    );
    let tmp = dir.join(".status");
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, dir.join("status"));
    }
}

fn spawn(spec: &UnitSpec, socket_path: &Path) -> Result<Child, DemoError> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log)
        .map_err(artifact(&spec.log))?;
    let err_log = log.try_clone().map_err(artifact(&spec.log))?;
    let mut command = Command::new(&spec.exec);
    command
        .args(&spec.args)
        .env("NOTIFY_SOCKET", socket_path)
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(err_log));
    for (k, v) in &spec.env {
        command.env(k, v);
    }
    if let Some(user) = spec.run_as {
        command.uid(user.uid).gid(user.gid);
    }
    command.spawn().map_err(|source| DemoError::Spawn {
        program: spec.exec.clone(),
        source,
    })
}

fn stop_child(child: &mut Child) {
    let pid = rustix::process::Pid::from_child(child);
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn supervise(
    dir: &Path,
    socket: &UnixDatagram,
    socket_path: &Path,
    spec: &UnitSpec,
    first: Child,
    stop: &AtomicBool,
) {
    let mut state = UnitState {
        active_state: "activating".into(),
        main_pid: first.id(),
        starts: 1,
        ..UnitState::default()
    };
    let mut child = Some(first);
    write_status(dir, &state);
    let mut restart_at: Option<Instant> = None;
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::SeqCst) {
        let mut changed = false;
        while let Ok(n) = socket.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]);
            if text.lines().any(|l| l == "READY=1")
                && child.is_some()
                && state.active_state != "active"
            {
                state.active_state = "active".into();
                changed = true;
            }
        }
        let request = dir.join("restart-request");
        if request.exists() {
            if let Some(mut c) = child.take() {
                stop_child(&mut c);
            }
            // A restart asked for by hand starts the count again (systemd flushes
            // NRestarts on a manual start).
            state.n_restarts = 0;
            let _ = std::fs::remove_file(&request);
            restart_at = Some(Instant::now());
            state.active_state = "activating".into();
            state.main_pid = 0;
            changed = true;
        }
        if let Some(c) = child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            child = None;
            state.main_pid = 0;
            if status.success() {
                state.active_state = "inactive".into();
            } else {
                state.active_state = "activating".into();
                restart_at = Some(Instant::now() + spec.restart_sec);
                state.n_restarts += 1;
            }
            changed = true;
        }
        if child.is_none()
            && let Some(at) = restart_at
            && Instant::now() >= at
        {
            restart_at = None;
            match spawn(spec, socket_path) {
                Ok(c) => {
                    state.main_pid = c.id();
                    state.starts += 1;
                    state.active_state = "activating".into();
                    child = Some(c);
                }
                Err(_) => {
                    state.active_state = "failed".into();
                }
            }
            changed = true;
        }
        if changed {
            write_status(dir, &state);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if let Some(mut c) = child.take() {
        stop_child(&mut c);
    }
}
