//! bosun-support: the forced command of a break-glass door (decision 0035).
//!
//! `bosun-support --session JOB [--spool FILE] [--consent FILE] [--sudo PATH] [--limit SECS]`
//! runs the one command in `SSH_ORIGINAL_COMMAND`, or reads commands line by line. Each line is
//! parsed before any effect; a command that touches a guest runs only while the consent file
//! holds that guest's live consent and the guest at its vmid still carries the identity the
//! consent names (decision 0080); a support command runs through `sudo -n` as
//! its fixed command line, and every line (run or refused) is appended to the spool the agent
//! turns into audit rows.

use std::io::{BufRead, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::process::ExitCode;
use std::time::Duration;

use bosun_boundexec::{ExecError, Limits, Ran, Streams};
use bosun_support::consent::{ConsentFile, DEFAULT_CONSENT_FILE, holds_identity};
use bosun_support::{Command, MAX_LINE};

const DEFAULT_SPOOL: &str = "/var/lib/bosun-breakglass/commands.jsonl";
const DEFAULT_SUDO: &str = "/usr/bin/sudo";
/// What one support command may take: its time (at most; `--limit SECS` shortens it), and the
/// output shown (the rest is counted).
const RUN_LIMITS: Limits = Limits {
    time: Duration::from_secs(120),
    keep: 1024 * 1024,
};
/// What reading a guest's configuration to learn who holds its vmid may take.
const HOLDER_LIMITS: Limits = Limits {
    time: Duration::from_secs(30),
    keep: 64 * 1024,
};
const HELP: &str = "commands: status | restart agent|helper-socket|update-gate | \
logs agent|helper-socket|helper|update-gate [--lines N] | guests | guest-config VMID (with the guest's consent) | help | exit";

struct Shell {
    session: String,
    spool: String,
    consent: String,
    sudo: String,
    limits: Limits,
}

/// The exit status of a command refused for want of its guest's consent (2 is a line that is
/// not a command).
const NO_CONSENT: u8 = 3;

fn main() -> ExitCode {
    let Some(shell) = Shell::from_args(std::env::args().skip(1)) else {
        eprintln!(
            "usage: bosun-support --session JOB [--spool FILE] [--consent FILE] [--sudo PATH] [--limit SECS]"
        );
        return ExitCode::from(2);
    };
    if let Ok(line) = std::env::var("SSH_ORIGINAL_COMMAND") {
        return ExitCode::from(shell.one(&line).unwrap_or(0));
    }
    println!("bosun break-glass support shell; every command is recorded. {HELP}");
    let mut input = std::io::stdin().lock();
    loop {
        print!("bosun-support> ");
        let _ = std::io::stdout().flush();
        let mut buf = Vec::new();
        // One byte past the limit is enough to refuse; the rest of the line is skipped.
        match (&mut input)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
        {
            Ok(0) | Err(_) => return ExitCode::SUCCESS,
            Ok(_) => {}
        }
        if buf.len() > MAX_LINE && buf.last() != Some(&b'\n') && !skip_line(&mut input) {
            return ExitCode::SUCCESS;
        }
        let line = String::from_utf8_lossy(&buf);
        if shell.one(&line).is_none() {
            return ExitCode::SUCCESS;
        }
    }
}

/// Drops the rest of an over-long line, a buffer at a time, keeping none of it; `false` when
/// the input ended (or failed) before its newline.
fn skip_line(input: &mut impl BufRead) -> bool {
    loop {
        let (found, n) = match input.fill_buf() {
            Ok([]) | Err(_) => return false,
            Ok(buf) => match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (true, i + 1),
                None => (false, buf.len()),
            },
        };
        input.consume(n);
        if found {
            return true;
        }
    }
}

impl Shell {
    fn from_args(mut args: impl Iterator<Item = String>) -> Option<Shell> {
        let mut shell = Shell {
            session: String::new(),
            spool: DEFAULT_SPOOL.to_owned(),
            consent: DEFAULT_CONSENT_FILE.to_owned(),
            sudo: DEFAULT_SUDO.to_owned(),
            limits: RUN_LIMITS,
        };
        while let Some(flag) = args.next() {
            let value = args.next()?;
            match flag.as_str() {
                "--session" => shell.session = value,
                "--spool" => shell.spool = value,
                "--consent" => shell.consent = value,
                "--sudo" => shell.sudo = value,
                "--limit" => {
                    let secs = value
                        .parse()
                        .ok()
                        .filter(|s| (1..=RUN_LIMITS.time.as_secs()).contains(s))?;
                    shell.limits.time = Duration::from_secs(secs);
                }
                _ => return None,
            }
        }
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '-';
        (!shell.session.is_empty() && shell.session.len() <= 64 && shell.session.chars().all(ok))
            .then_some(shell)
    }

    /// Runs one line; `None` when the session should end, else the line's exit status.
    fn one(&self, line: &str) -> Option<u8> {
        match Command::parse(line) {
            Ok(None) => Some(0),
            Ok(Some(Command::Exit)) => None,
            Ok(Some(Command::Help)) => {
                println!("{HELP}");
                Some(0)
            }
            Ok(Some(command)) => {
                if let Some(vmid) = command.guest()
                    && let Err(why) = self.consented(vmid)
                {
                    eprintln!("refused: {why}");
                    self.record(&command.to_string(), None, Some("no_consent"));
                    return Some(NO_CONSENT);
                }
                let status = self.run(&command);
                self.record(&command.to_string(), Some(status), None);
                Some(status)
            }
            Err(e) => {
                eprintln!("refused: {e}");
                self.record("refused", None, None);
                Some(2)
            }
        }
    }

    /// Whether guest `vmid` consents now, read afresh for every command (a revoke holds from
    /// the next command on), and whether the guest at `vmid` is still the one that consented
    /// (its Proxmox config carries the consent's identity tag: a consent left by a destroyed
    /// guest opens nothing on the next guest given its vmid); the reason to show the operator
    /// when not.
    fn consented(&self, vmid: u32) -> Result<(), String> {
        let now = unix_now();
        let file = ConsentFile::read(std::path::Path::new(&self.consent)).map_err(|e| {
            format!(
                "guest {vmid}'s consent cannot be checked: {e} ({})",
                self.consent
            )
        })?;
        let no_consent = |why: &str| {
            format!(
                "guest {vmid} {why} (its controller grants consent, for a bounded time, through \
                 POST /v1/break-glass/consent on the local API; ask the customer)"
            )
        };
        let Some(consent) = file.live_for(vmid, now) else {
            return Err(no_consent("has not consented to break-glass commands"));
        };
        let argv = Command::GuestConfig { vmid }.argv().unwrap_or_default();
        let limits = Limits {
            time: HOLDER_LIMITS.time.min(self.limits.time),
            ..HOLDER_LIMITS
        };
        let ran = self
            .sudo(&argv, limits)
            .map_err(|e| format!("guest {vmid}'s holder cannot be checked: {}", not_run(&e)))?;
        if ran.timed_out || ran.code() != Some(0) {
            return Err(format!(
                "guest {vmid}'s holder cannot be checked: pct config did not succeed"
            ));
        }
        if !holds_identity(
            &String::from_utf8_lossy(&ran.stdout.bytes),
            &consent.identity,
        ) {
            return Err(no_consent(&format!(
                "is not the guest that consented (guest {} did, and no longer holds vmid {vmid}); \
                 the guest there now has not consented",
                consent.guest_id
            )));
        }
        Ok(())
    }

    /// Runs `argv` through `sudo -n` within `limits`, its output merged.
    fn sudo(&self, argv: &[String], limits: Limits) -> Result<Ran, ExecError> {
        let mut sudo = std::process::Command::new(&self.sudo);
        sudo.arg("-n")
            .arg("--")
            .args(argv)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("SYSTEMD_PAGER", "")
            .env("PAGER", "cat");
        bosun_boundexec::run(sudo, Streams::Merged, limits)
    }

    /// Runs the command's fixed line through `sudo -n` within [`RUN_LIMITS`], then shows what
    /// was kept of its output and what was not.
    fn run(&self, command: &Command) -> u8 {
        let Some(argv) = command.argv() else { return 0 };
        let ran = match self.sudo(&argv, self.limits) {
            Ok(ran) => ran,
            Err(e) => {
                eprintln!("{}", not_run(&e));
                return 1;
            }
        };
        let _ = std::io::stdout().write_all(&ran.stdout.bytes);
        if ran.stdout.discarded > 0 {
            println!("[{} more bytes of output not shown]", ran.stdout.discarded);
        }
        if ran.timed_out {
            eprintln!("stopped: no end within {}s", self.limits.time.as_secs());
            return 1;
        }
        ran.code().and_then(|c| u8::try_from(c).ok()).unwrap_or(1)
    }

    /// Appends one bounded JSON line; a failure to record is said, not hidden.
    /// `refused` says why a command that parsed did not run (`no_consent`).
    fn record(&self, command: &str, status: Option<u8>, refused: Option<&str>) {
        let at = unix_now();
        let mut line = serde_json::json!({
            "at": at, "session": self.session, "command": command, "status": status,
        });
        if let Some(refused) = refused {
            line["refused"] = refused.into();
        }
        // Readable by the agent through the spool directory's group (setgid `bosun`).
        let appended = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(&self.spool)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = appended {
            eprintln!("warning: could not record this command: {e}");
        }
    }
}

/// Why sudo could not be run, with its cause.
fn not_run(e: &ExecError) -> String {
    let cause = std::error::Error::source(e).map(ToString::to_string);
    format!("could not run sudo: {e}: {}", cause.unwrap_or_default())
}

/// The time in Unix seconds (0 before 1970, which no consent outlives).
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
