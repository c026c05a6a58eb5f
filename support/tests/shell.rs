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
        // `pct config VMID` prints the guest's tags as Proxmox would: guest VMID carries
        // the identity `bosun-op-g<VMID>`, unless a `tags-VMID` file says otherwise.
        std::fs::write(
            &sudo,
            format!(
                "#!/bin/sh\necho \"$*\" >> '{calls}'\nif [ \"$3 $4\" = '/usr/sbin/pct config' ]; then\n  \
                 if [ -f '{dir}/tags-'\"$5\" ]; then cat '{dir}/tags-'\"$5\"; else echo \"tags: web;bosun-op-g$5\"; fi\nfi\n",
                calls = calls.display(),
                dir = dir.path().display(),
            ),
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

/// Waits for `child` and returns its exit status and its peak resident set, in KiB.
#[allow(unsafe_code)]
fn wait_measured(child: &std::process::Child) -> (i32, i64) {
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    let mut status = 0;
    // SAFETY: both pointers are to live locals of the right types, for the call only.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `pid` is our own child, not yet reaped.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid, "wait4");
    (libc::WEXITSTATUS(status), usage.ru_maxrss)
}

#[test]
#[allow(clippy::zombie_processes)] // reaped by `wait4`, for its rusage
fn a_64_mib_line_without_newline_is_refused_in_bounded_memory() {
    let f = Fixture::new();
    let mut child = f
        .shell()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'a'; 1024 * 1024];
        for _ in 0..64 {
            stdin.write_all(&chunk).expect("write");
        }
        // The shell goes on after the over-long line: the next one runs.
        stdin.write_all(b"\nstatus\n").expect("write");
    });
    let mut stderr = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).expect("read");
        text
    });
    let started = std::time::Instant::now();
    let (code, max_rss_kib) = wait_measured(&child);
    writer.join().expect("writer");
    let stderr = reader.join().expect("reader");
    eprintln!(
        "64 MiB line: answered in {:?}, shell max RSS {max_rss_kib} KiB",
        started.elapsed()
    );
    assert_eq!(code, 0);
    assert!(stderr.contains("refused: "), "{stderr}");
    assert!(max_rss_kib < 16 * 1024, "max RSS {max_rss_kib} KiB");
    let commands: Vec<_> = f.spool().iter().map(|l| l["command"].clone()).collect();
    assert_eq!(commands, ["refused", "status"]);
}

#[test]
#[allow(clippy::zombie_processes)] // reaped by `wait4`, for its rusage
fn a_command_that_floods_or_never_ends_is_cut_and_stopped() {
    let f = Fixture::new();
    let sudo = f.dir.path().join("sudo");
    let pid_file = f.dir.path().join("pid");
    let script = format!(
        "#!/bin/sh\necho $$ > '{}'\ncase \"$*\" in *status*) head -c 100000000 /dev/zero;; esac\nexec sleep 1000\n",
        pid_file.display()
    );
    std::fs::write(&sudo, script).expect("write sudo");
    let mut child = f
        .shell()
        .args(["--limit", "2"])
        .env("SSH_ORIGINAL_COMMAND", "status")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut n = 0u64;
        let mut buf = vec![0u8; 65536];
        while let Ok(k @ 1..) = std::io::Read::read(&mut out, &mut buf) {
            n += k as u64;
        }
        n
    });
    let started = std::time::Instant::now();
    let (code, max_rss_kib) = wait_measured(&child);
    let shown = reader.join().expect("reader");
    eprintln!(
        "flooding, hanging support command: ended after {:?}, {shown} bytes shown, max RSS {max_rss_kib} KiB",
        started.elapsed()
    );
    assert_eq!(code, 1, "a command stopped at its limit fails");
    assert!(shown < 2 * 1024 * 1024, "{shown} bytes shown");
    assert!(max_rss_kib < 16 * 1024, "max RSS {max_rss_kib} KiB");
    let pid = std::fs::read_to_string(&pid_file).expect("pid");
    assert!(
        !Path::new("/proc").join(pid.trim()).exists(),
        "the command outlived its limit"
    );
}

/// Writes a consent file for `vmid` ending at `expires_at` (Unix seconds), as the agent does.
fn consent(f: &Fixture, entries: &[(u32, u64)]) -> std::path::PathBuf {
    let path = f.dir.path().join("consent.json");
    let file = bosun_support::consent::ConsentFile {
        consents: entries
            .iter()
            .map(|(vmid, expires_at)| bosun_support::consent::Consent {
                vmid: *vmid,
                guest_id: format!("guest-{vmid}"),
                identity: format!("bosun-op-g{vmid}"),
                expires_at: *expires_at,
            })
            .collect(),
    };
    std::fs::write(&path, file.render()).expect("write consent");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    path
}

#[test]
fn a_guest_command_runs_only_with_that_guests_live_consent_and_a_host_command_needs_none() {
    let f = Fixture::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let run = |file: &Path, line: &str| {
        f.shell()
            .arg("--consent")
            .arg(file)
            .env("SSH_ORIGINAL_COMMAND", line)
            .output()
            .expect("run")
    };
    // No consent file at all: the guest command is refused, the host command runs.
    let missing = f.dir.path().join("none.json");
    let refused = run(&missing, "guest-config 101");
    assert_eq!(refused.status.code(), Some(3));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("guest 101 has not consented") && said.contains("/v1/break-glass/consent"),
        "{said}"
    );
    assert_eq!(run(&missing, "guests").status.code(), Some(0));
    // 102 consents, 101 consented once but its consent has ended: only 102's runs.
    let file = consent(&f, &[(102, now + 600), (101, now - 1)]);
    assert_eq!(run(&file, "guest-config 101").status.code(), Some(3));
    assert_eq!(run(&file, "guest-config 102").status.code(), Some(0));
    assert_eq!(
        f.calls(),
        [
            "-n -- /usr/sbin/pct list",
            "-n -- /usr/sbin/pct config 102",
            "-n -- /usr/sbin/pct config 102"
        ],
        "nothing ran for a guest without live consent; 102's holder was looked at first"
    );
    let spool = f.spool();
    let lines: Vec<(String, Option<u64>, Option<String>)> = spool
        .iter()
        .map(|l| {
            (
                l["command"].as_str().unwrap().to_owned(),
                l["status"].as_u64(),
                l["refused"].as_str().map(str::to_owned),
            )
        })
        .collect();
    let no = Some("no_consent".to_owned());
    assert_eq!(
        lines,
        [
            ("guest-config 101".to_owned(), None, no.clone()),
            ("guests".to_owned(), Some(0), None),
            ("guest-config 101".to_owned(), None, no),
            ("guest-config 102".to_owned(), Some(0), None),
        ]
    );
    // A consent file others may write is no consent.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let unsafe_file = run(&file, "guest-config 102");
    assert_eq!(unsafe_file.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&unsafe_file.stderr).contains("cannot be checked"));
}

#[test]
fn a_consent_left_by_a_guest_that_no_longer_holds_its_vmid_opens_nothing() {
    let f = Fixture::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let file = consent(&f, &[(101, now + 600)]);
    let run = |line: &str| {
        f.shell()
            .arg("--consent")
            .arg(&file)
            .env("SSH_ORIGINAL_COMMAND", line)
            .output()
            .expect("run")
    };
    assert_eq!(
        run("guest-config 101").status.code(),
        Some(0),
        "its own guest"
    );
    // Another guest now holds vmid 101 (its own identity tag), or one without tags.
    for tags in [
        "tags: web;bosun-op-other\narch: amd64\n",
        "arch: amd64\n# bosun-op-g101\n",
    ] {
        std::fs::write(f.dir.path().join("tags-101"), tags).expect("write tags");
        let refused = run("guest-config 101");
        assert_eq!(refused.status.code(), Some(3), "{tags}");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(said.contains("is not the guest that consented"), "{said}");
        assert!(
            said.contains("guest-101"),
            "names the guest that consented: {said}"
        );
    }
    assert_eq!(
        f.calls()
            .iter()
            .filter(|c| c.ends_with("config 101"))
            .count(),
        4,
        "each refused command only looked at the holder"
    );
    let spool = f.spool();
    assert_eq!(spool.len(), 3);
    assert!(
        spool[1..]
            .iter()
            .all(|l| l["refused"] == "no_consent" && l["status"].is_null())
    );
}
