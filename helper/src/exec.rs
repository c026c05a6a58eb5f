//! The one place the helper starts programs: by absolute path, no shell, with an
//! empty environment apart from a fixed `PATH` and `LC_ALL=C`.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::error::HelperError;

/// `PATH` handed to every program (they may run their own helpers by name).
pub const FIXED_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";
/// How much of a failed program's stderr goes into the error.
const STDERR_TAIL: usize = 2000;

/// A finished program.
#[derive(Debug)]
pub struct Finished {
    /// Exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Everything it wrote to stdout.
    pub stdout: String,
}

/// A program [`run_bounded`] ran.
#[derive(Debug)]
pub struct Bounded {
    /// Exit code (`None`: killed, at the time limit or by a signal).
    pub code: Option<i32>,
    /// The start of what it wrote to stdout and stderr together, lossily decoded.
    pub head: String,
    /// It was still running at the time limit and was killed with its process group.
    pub timed_out: bool,
}

fn command<S: AsRef<OsStr>>(program: &Path, args: &[S]) -> Result<Command, HelperError> {
    if !program.is_absolute() {
        return Err(HelperError::Spawn {
            program: program.into(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not absolute"),
        });
    }
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .env("PATH", FIXED_PATH)
        .env("LC_ALL", "C")
        .current_dir("/")
        .stdin(Stdio::null());
    Ok(command)
}

/// Runs `program args...` to completion. `ok_codes` lists the exit codes that count
/// as success; anything else is [`HelperError::ProgramFailed`].
pub fn run<S: AsRef<OsStr>>(
    program: &Path,
    args: &[S],
    ok_codes: &[i32],
) -> Result<Finished, HelperError> {
    let output = command(program, args)?
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| HelperError::Spawn {
            program: program.into(),
            source,
        })?;
    let code = output.status.code();
    if code.is_some_and(|c| ok_codes.contains(&c)) {
        return Ok(Finished {
            code,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        });
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tail: Vec<char> = stderr.trim().chars().rev().take(STDERR_TAIL).collect();
    Err(HelperError::ProgramFailed {
        program: program.into(),
        args: args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect(),
        status: output.status.to_string(),
        stderr: tail.into_iter().rev().collect(),
    })
}

/// Runs `program args...` in a process group of its own for at most `limit`, then kills the
/// group. Its stdout and stderr share one pipe, of which the first `max_bytes` are kept; the
/// rest is read and dropped, so the program never blocks on a full pipe.
pub fn run_bounded<S: AsRef<OsStr>>(
    program: &Path,
    args: &[S],
    limit: Duration,
    max_bytes: usize,
) -> Result<Bounded, HelperError> {
    let spawn_err = |source| HelperError::Spawn {
        program: program.into(),
        source,
    };
    let deadline = Instant::now() + limit;
    let (mut reader, writer) = std::io::pipe().map_err(spawn_err)?;
    let mut child = {
        // The command, holding our copies of the pipe's write end, ends with this block.
        let mut command = command(program, args)?;
        command
            .stdout(writer.try_clone().map_err(spawn_err)?)
            .stderr(writer)
            .process_group(0);
        command.spawn().map_err(spawn_err)?
    };
    let head = Arc::new(Mutex::new(Vec::new()));
    let drain = {
        let head = Arc::clone(&head);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                let mut head = head.lock().unwrap_or_else(PoisonError::into_inner);
                let room = max_bytes.saturating_sub(head.len());
                head.extend_from_slice(&buf[..n.min(room)]);
            }
        })
    };
    let wait_err = |source| HelperError::Io {
        op: "waiting for",
        path: program.into(),
        source,
    };
    let mut status = child.try_wait().map_err(wait_err)?;
    while status.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        status = child.try_wait().map_err(wait_err)?;
    }
    let timed_out = status.is_none();
    if timed_out {
        let group = i32::try_from(child.id()).ok().and_then(Pid::from_raw);
        if let Some(group) = group {
            let _ = rustix::process::kill_process_group(group, Signal::KILL);
        }
        let _ = child.kill();
        status = Some(child.wait().map_err(wait_err)?);
    }
    // What it wrote before it ended may still be in the pipe.
    let drained = Instant::now() + Duration::from_millis(500);
    while !drain.is_finished() && Instant::now() < drained {
        std::thread::sleep(Duration::from_millis(10));
    }
    let head = head.lock().unwrap_or_else(PoisonError::into_inner).clone();
    Ok(Bounded {
        code: status.and_then(|s| s.code()).filter(|_| !timed_out),
        head: String::from_utf8_lossy(&head).into_owned(),
        timed_out,
    })
}
