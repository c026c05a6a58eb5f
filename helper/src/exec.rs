//! The one place the helper starts programs: by absolute path, no shell, with an
//! empty environment apart from a fixed `PATH` and `LC_ALL=C`.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};

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

/// Runs `program args...` to completion. `ok_codes` lists the exit codes that count
/// as success; anything else is [`HelperError::ProgramFailed`].
pub fn run<S: AsRef<OsStr>>(
    program: &Path,
    args: &[S],
    ok_codes: &[i32],
) -> Result<Finished, HelperError> {
    if !program.is_absolute() {
        return Err(HelperError::Spawn {
            program: program.into(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not absolute"),
        });
    }
    let output = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", FIXED_PATH)
        .env("LC_ALL", "C")
        .current_dir("/")
        .stdin(Stdio::null())
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
