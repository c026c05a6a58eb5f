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
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| DemoError::Spawn {
                program: program.to_owned(),
                source,
            })?;
        self.running.push(Running {
            name: name.to_owned(),
            child,
        });
        Ok(())
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
