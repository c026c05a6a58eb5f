//! The agent as a process of its own, as a hostile hub meets it: the binary named by
//! `BOSUN_AGENTD_BIN` when set, otherwise this test binary re-run as the agent (its
//! `agent_child` test calls [`child_main`], which runs `bosun_agentd::run` on a
//! current-thread runtime, as `bosun-agentd`'s `main` does).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};

const CHILD_ENV: &str = "BOSUN_AGENT_PROCESS_CONFIG";

/// The body of a suite's `agent_child` test: runs the agent when spawned as one.
pub fn child_main() {
    let Ok(config) = std::env::var(CHILD_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    run_agent(&config, &runtime);
}

/// Runs the agent on the config file `config` until it stops: on SIGTERM, as `bosun-agentd`'s
/// `main` does (a planned stop), or by SIGKILL or an abort at a failpoint.
pub fn run_agent(config: &str, runtime: &tokio::runtime::Runtime) {
    super::install_crypto();
    let config = config.to_owned();
    runtime.block_on(async move {
        let config = bosun_agentd::config::AgentConfig::load(Path::new(&config)).unwrap();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            term.recv().await;
            stop.cancel();
        });
        bosun_agentd::run(config, shutdown).await.unwrap();
    });
}

/// A running agent process.
pub struct AgentProcess {
    child: Child,
}

impl AgentProcess {
    pub fn start(config: &Path) -> Self {
        let mut command = match std::env::var("BOSUN_AGENTD_BIN") {
            Ok(bin) => {
                let mut c = Command::new(bin);
                c.arg("--config").arg(config);
                c
            }
            Err(_) => {
                let mut c = Command::new(std::env::current_exe().unwrap());
                c.args(["--exact", "agent_child", "--nocapture", "--test-threads=1"])
                    .env(CHILD_ENV, config);
                c
            }
        };
        let log = std::env::var("BOSUN_TEST_LOG").ok();
        command.env("RUST_LOG", log.as_deref().unwrap_or("warn"));
        if log.is_none() {
            command.stdout(Stdio::null()).stderr(Stdio::null());
        }
        Self {
            child: command.spawn().unwrap(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A `/proc/PID/status` field in kB (`VmHWM`, `VmRSS`).
    pub fn status_kb(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Asks the agent to stop (SIGTERM, a planned stop, as systemd stops it) and waits up to
    /// `limit` for it to exit; gives how it exited. Panics (after a SIGKILL) when it outlives
    /// `limit`.
    pub async fn terminate(mut self, limit: std::time::Duration) -> std::process::ExitStatus {
        let pid = rustix::process::Pid::from_raw(i32::try_from(self.pid()).unwrap()).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if std::time::Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the agent did not stop within {limit:?} of SIGTERM");
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Stops the agent (SIGKILL: the journal is crash-safe) and waits for it.
    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
