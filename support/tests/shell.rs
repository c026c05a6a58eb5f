//! bosun-support run for real, with a stand-in for sudo that records its arguments.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let sudo = dir.path().join("sudo");
        let calls = dir.path().join("calls");
        std::fs::write(
            &sudo,
            format!("#!/bin/sh\necho \"$*\" >> '{}'\n", calls.display()),
        )
        .expect("write sudo");
        std::fs::set_permissions(&sudo, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Fixture { dir }
    }

    fn shell(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_bosun-support"));
        c.args(["--session", "job-7", "--spool"])
            .arg(self.dir.path().join("spool"))
            .arg("--sudo")
            .arg(self.dir.path().join("sudo"))
            .env_remove("SSH_ORIGINAL_COMMAND");
        c
    }

    fn calls(&self) -> Vec<String> {
        read_lines(&self.dir.path().join("calls"))
    }

    fn spool(&self) -> Vec<serde_json::Value> {
        read_lines(&self.dir.path().join("spool"))
            .iter()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_ssh_command_runs_through_sudo_as_its_fixed_line_and_is_recorded() {
    let f = Fixture::new();
    let out = f
        .shell()
        .env("SSH_ORIGINAL_COMMAND", "logs agent --lines 5")
        .output()
        .expect("run");
    assert!(out.status.success());
    assert_eq!(
        f.calls(),
        ["-n -- /usr/bin/journalctl --no-pager --unit bosun-agentd.service --lines 5"]
    );
    let spool = f.spool();
    assert_eq!(spool.len(), 1);
    assert_eq!(spool[0]["command"], "logs agent --lines 5");
    assert_eq!(spool[0]["session"], "job-7");
    assert_eq!(spool[0]["status"], 0);
}

#[test]
fn an_injection_runs_nothing_and_is_recorded_as_refused() {
    let f = Fixture::new();
    let out = f
        .shell()
        .env("SSH_ORIGINAL_COMMAND", "logs agent; sh")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(f.calls().is_empty());
    let spool = f.spool();
    assert_eq!(spool.len(), 1);
    assert_eq!(spool[0]["command"], "refused");
    assert_eq!(spool[0]["status"], serde_json::Value::Null);
}

#[test]
fn an_interactive_session_runs_each_line_until_exit() {
    let f = Fixture::new();
    let mut child = f
        .shell()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let long = "x".repeat(100_000);
    let input = format!("status\n{long}\nrestart agent\nexit\nguests\n");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    assert!(child.wait().expect("wait").success());
    assert_eq!(
        f.calls(),
        [
            "-n -- /usr/bin/systemctl --no-pager --lines=0 status bosun-agentd.service \
             bosun-helper.socket bosun-update-gate.service",
            "-n -- /usr/bin/systemctl restart bosun-agentd.service",
        ]
    );
    let commands: Vec<_> = f.spool().iter().map(|l| l["command"].clone()).collect();
    assert_eq!(commands, ["status", "refused", "restart agent"]);
}

#[test]
fn a_session_name_that_is_not_a_job_id_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_bosun-support"))
        .args(["--session", "a b;c"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}
