//! The crash suites' agent: this test binary re-run with `BOSUN_CRASH_CHILD` set, so the
//! agent under test is the library built with the `failpoints` feature. A failpoint named
//! in `BOSUN_FAILPOINT` aborts the process at that journal write (what `SIGKILL` leaves).
//! Each crash suite has a `crash_child` test that calls [`child_main`].
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bosun_agentd::clock::SystemClock;
use bosun_agentd::ops::journal::Store;
use serde_json::Value;
use uuid::Uuid;

const CHILD_ENV: &str = "BOSUN_CRASH_CHILD";

/// The signal `std::process::abort` raises (SIGABRT on Linux): how a failpoint ends the child.
const SIGABRT: i32 = 6;

/// The body of a suite's `crash_child` test: runs the agent when spawned as one.
pub fn child_main() {
    let Ok(config) = std::env::var(CHILD_ENV) else {
        return;
    };
    log_to_stderr();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    super::process::run_agent(&config, &runtime);
}

/// The crash children's log, beside their configuration: every child appends its stderr
/// (its tracing output and any panic) to it, so a failing suite can show what the agent did
/// ([`log_tail`]).
fn log_path(config: &Path) -> std::path::PathBuf {
    config.with_file_name("agent.log")
}

fn log_to_stderr() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "info,hyper=warn,reqwest=warn,rustls=warn",
        ))
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The last `lines` lines the crash children of `config` logged, for a failure message.
pub fn log_tail(config: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log_path(config)).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// An agent child process, killed when dropped: a test that fails half-way leaves no agent
/// running behind it.
#[derive(Debug)]
pub struct AgentChild(Child);

impl std::ops::Deref for AgentChild {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for AgentChild {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for AgentChild {
    fn drop(&mut self) {
        kill(&mut self.0);
    }
}

/// Starts the agent on `config`, with `failpoint` armed if given.
pub fn spawn_agent(config: &Path, failpoint: Option<&str>) -> AgentChild {
    let exe = std::env::current_exe().unwrap();
    let mut command = Command::new(exe);
    command
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, config)
        .stdout(Stdio::null());
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path(config))
    {
        Ok(log) => command.stderr(log),
        Err(_) => command.stderr(Stdio::null()),
    };
    match failpoint {
        Some(name) => command.env(bosun_agentd::failpoint::ENV, name),
        None => command.env_remove(bosun_agentd::failpoint::ENV),
    };
    AgentChild(command.spawn().unwrap())
}

/// Waits up to `limit` for the child to exit; gives its status, `None` if it still runs.
pub async fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits for the armed failpoint to abort the child: an exit for any other reason (an
/// error at start, a panic) fails with the end of the child's log.
pub async fn assert_tripped(child: &mut Child, config: &Path, point: &str) {
    use std::os::unix::process::ExitStatusExt;
    let status = wait_exit(child, Duration::from_secs(60)).await;
    assert!(
        status.is_some_and(|s| s.signal() == Some(SIGABRT)),
        "{point}: the failpoint did not trip ({status:?}); the agent's log ends:\n{}",
        log_tail(config, 80)
    );
}

/// Kills the child and reaps it.
pub fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The agent's journal, opened beside it.
pub fn journal(state_dir: &Path) -> Store {
    Store::open(&state_dir.join("journal.sqlite"), SystemClock::shared()).unwrap()
}

/// Asserts that no operation is left `running`.
pub fn assert_no_unfinished(state_dir: &Path, point: &str) {
    let unfinished = journal(state_dir).unfinished_operations().unwrap();
    assert!(
        unfinished.is_empty(),
        "{point}: unfinished operations {unfinished:?}"
    );
}

/// Waits until the journal has no unfinished operation.
pub async fn journal_settles(state_dir: &Path) {
    super::eventually(Duration::from_secs(30), "journal settles", || {
        let dir = state_dir.to_path_buf();
        async move { journal(&dir).unfinished_operations().unwrap().is_empty() }
    })
    .await;
}

/// The host id the agent enrolled as.
pub async fn host_id(state_dir: &Path) -> Uuid {
    let path = state_dir.join("host.json");
    for _ in 0..300 {
        if let Ok(text) = std::fs::read_to_string(&path)
            && let Ok(v) = serde_json::from_str::<Value>(&text)
        {
            return v["host_id"].as_str().unwrap().parse().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the agent did not enroll");
}
