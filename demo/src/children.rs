//! The programs the demo starts: the real binaries from the same build, each with its log
//! file, all stopped when the demo ends, whether it succeeded or not.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::DemoError;

/// Child processes, stopped (SIGTERM, then SIGKILL after a grace period) on [`Children::stop_all`]
/// and killed on drop as a last resort.
#[derive(Debug, Default)]
pub struct Children {
    running: Vec<Running>,
    /// Every process id ever started, written to `pids.txt` in the demo folder so a test can
    /// check that none is left behind.
    started: Vec<u32>,
}

/// The unprivileged user a child runs as when the demo itself runs as root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
}

impl RunAs {
    /// Fails, naming the directory, when this user could not walk down to `path` (every
    /// directory above it must let the user search it), e.g. a checkout under `/root`.
    pub fn check_reaches(&self, path: &Path) -> Result<(), DemoError> {
        use std::os::unix::fs::MetadataExt as _;
        for dir in path.ancestors().skip(1) {
            let meta = std::fs::metadata(dir).map_err(|source| DemoError::Artifact {
                path: dir.to_owned(),
                source,
            })?;
            let mode = meta.mode();
            let searchable = if meta.uid() == self.uid {
                mode & 0o100 != 0
            } else if meta.gid() == self.gid {
                mode & 0o010 != 0
            } else {
                mode & 0o001 != 0
            };
            if !searchable {
                return Err(DemoError::Check(format!(
                    "the agent runs as uid {} and cannot enter {}: keep the checkout and --out where an unprivileged user can reach them",
                    self.uid,
                    dir.display()
                )));
            }
        }
        Ok(())
    }

    /// `name` from `/etc/passwd`, when the demo runs as root; `None` otherwise (children then
    /// run as the current user).
    pub fn for_agent(name: &str) -> Result<Option<Self>, DemoError> {
        if !rustix::process::geteuid().is_root() {
            return Ok(None);
        }
        let passwd = Path::new("/etc/passwd");
        let text = std::fs::read_to_string(passwd).map_err(|source| DemoError::Artifact {
            path: passwd.to_owned(),
            source,
        })?;
        let found = text.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            match fields.as_slice() {
                [user, _, uid, gid, ..] if *user == name => {
                    Some((uid.parse::<u32>().ok()?, gid.parse::<u32>().ok()?))
                }
                _ => None,
            }
        });
        match found {
            Some((uid, gid)) if uid != 0 => Ok(Some(Self { uid, gid })),
            _ => Err(DemoError::Check(format!(
                "running as root, the agent needs the unprivileged user `{name}`: run `make deps` (scripts/install-deps creates it)"
            ))),
        }
    }
}

/// The box a program of the demo belongs to. The main scenario has one; the host-loss walk has
/// the box that is lost (`a`) and the box that replaces it (`b`). It names each program's
/// child process, log and folder: `agentd`, or `agentd-a` for box a.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site(Option<&'static str>);

impl Site {
    /// The main scenario's only box.
    pub const ONLY: Self = Self(None);
    /// The host-loss walk's box that is lost.
    pub const A: Self = Self(Some("a"));
    /// The host-loss walk's replacement box.
    pub const B: Self = Self(Some("b"));

    /// `base` for this box: as is, or with `-a`/`-b`.
    pub fn name(self, base: &str) -> String {
        match self.0 {
            Some(site) => format!("{base}-{site}"),
            None => base.to_owned(),
        }
    }
}

#[derive(Debug)]
struct Running {
    name: String,
    child: Child,
}

impl Children {
    /// Starts `program` with `args`, its stdout and stderr appended to `log`.
    pub fn spawn(
        &mut self,
        name: &str,
        program: &Path,
        args: &[&str],
        log: &Path,
        run_as: Option<RunAs>,
    ) -> Result<(), DemoError> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|source| DemoError::Artifact {
                path: log.to_owned(),
                source,
            })?;
        let err = out.try_clone().map_err(|source| DemoError::Artifact {
            path: log.to_owned(),
            source,
        })?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true);
        if let Some(user) = run_as {
            command.uid(user.uid).gid(user.gid);
        }
        let child = command.spawn().map_err(|source| DemoError::Spawn {
            program: program.to_owned(),
            source,
        })?;
        if let Some(pid) = child.id() {
            self.started.push(pid);
        }
        self.running.push(Running {
            name: name.to_owned(),
            child,
        });
        Ok(())
    }

    /// Process ids of every child started so far.
    pub fn started(&self) -> &[u32] {
        &self.started
    }

    /// Stops the child `name` (SIGTERM, then SIGKILL after `grace`); gives its exit status.
    pub async fn stop(&mut self, name: &str, grace: Duration) -> Result<String, DemoError> {
        let index = self
            .running
            .iter()
            .position(|r| r.name == name)
            .ok_or_else(|| DemoError::Check(format!("{name} is not running")))?;
        let mut running = self.running.remove(index);
        if let Some(pid) = running.child.id() {
            terminate(pid);
        }
        let status = match tokio::time::timeout(grace, running.child.wait()).await {
            Ok(Ok(status)) => status.to_string(),
            Ok(Err(err)) => format!("unknown ({err})"),
            Err(_) => {
                let _ = running.child.kill().await;
                "killed after the grace period".to_owned()
            }
        };
        Ok(status)
    }

    /// Kills the child `name` at once (SIGKILL: a crash, nothing it can clean up) and reaps it.
    pub async fn kill(&mut self, name: &str) -> Result<(), DemoError> {
        let index = self
            .running
            .iter()
            .position(|r| r.name == name)
            .ok_or_else(|| DemoError::Check(format!("{name} is not running")))?;
        let mut running = self.running.remove(index);
        running
            .child
            .kill()
            .await
            .map_err(|e| DemoError::Check(format!("killing {name}: {e}")))
    }

    /// Fails if a child has already exited (it would otherwise only show as a time-out).
    pub fn check_alive(&mut self) -> Result<(), DemoError> {
        for running in &mut self.running {
            if let Ok(Some(status)) = running.child.try_wait() {
                return Err(DemoError::ChildExited {
                    name: running.name.clone(),
                    status: status.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Stops every child: SIGTERM, up to `grace` to exit, then SIGKILL. Waits for each.
    pub async fn stop_all(&mut self, grace: Duration) {
        for running in &self.running {
            if let Some(pid) = running.child.id() {
                terminate(pid);
            }
        }
        let deadline = Instant::now() + grace;
        for running in &mut self.running {
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, running.child.wait())
                .await
                .is_err()
            {
                let _ = running.child.kill().await;
            }
        }
        self.running.clear();
    }
}

/// Asks a child to shut down cleanly.
fn terminate(pid: u32) {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    if let Some(pid) = pid {
        // A child that already exited is fine: the wait below reaps it.
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
}

/// The binary `name` next to the running `bosunctl` (same build, same profile).
pub fn sibling_binary(name: &str) -> Result<PathBuf, DemoError> {
    let exe = std::env::current_exe().map_err(|source| DemoError::Artifact {
        path: PathBuf::from("/proc/self/exe"),
        source,
    })?;
    let path = exe
        .parent()
        .map(|dir| dir.join(name))
        .unwrap_or_else(|| PathBuf::from(name));
    if path.is_file() {
        Ok(path)
    } else {
        Err(DemoError::MissingBinary { path })
    }
}

/// Waits until `path` exists and parses as JSON of type `T`, or `timeout` passes.
pub async fn wait_for_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    timeout: Duration,
    children: &mut Children,
) -> Result<T, DemoError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(value) = serde_json::from_str(&text)
        {
            return Ok(value);
        }
        children.check_alive()?;
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: format!("{} to appear", path.display()),
                after: timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
