//! The one place the helper starts programs: by absolute path, no shell, with an empty
//! environment apart from a fixed `PATH` and `LC_ALL=C`, through [`bosun_boundexec::run`]:
//! a time limit the verb sizes to what the program really does, at most [`KEEP`] bytes kept of
//! each output stream, and the program's whole process group killed when it ends or times out.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

pub use bosun_boundexec::{Limits, Ran, Streams};

use crate::error::HelperError;

/// `PATH` handed to every program (they may run their own helpers by name).
pub const FIXED_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";
/// Bytes kept of each stream of a program whose output is read (a vzdump log, `smartctl`'s
/// JSON, `pct config`); more is a failure of [`run`], never a cut-off answer.
pub const KEEP: usize = 1024 * 1024;
/// How much of a failed program's stderr goes into the error.
const STDERR_TAIL: usize = 2000;

/// Time limits per kind of program, sized to what each really does.
pub mod limit {
    use std::time::Duration;

    /// `pct config`, `pct push`/`pull` of a small file, `blkid`, one fixed command in a guest.
    pub const QUICK: Duration = Duration::from_secs(60);
    /// `systemctl restart` of the controller's unit in a guest (its stop may take its timeout).
    pub const RESTART: Duration = Duration::from_secs(180);
    /// `smartctl`, which may wake a sleeping disk.
    pub const SMART: Duration = Duration::from_secs(120);
    /// A golden build's package steps and image load.
    pub const PACKAGES: Duration = Duration::from_secs(1800);
    /// A golden build's vzdump of the builder.
    pub const VZDUMP: Duration = Duration::from_secs(3600);
}

/// Runs `program args...` within `time` (see the module docs); whatever its exit status.
pub fn start<S: AsRef<OsStr>>(
    program: &Path,
    args: &[S],
    streams: Streams,
    limits: Limits,
) -> Result<Ran, HelperError> {
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
        .current_dir("/");
    bosun_boundexec::run(command, streams, limits).map_err(|source| HelperError::Exec { source })
}

/// Runs `program args...` within `time`. Success is an exit code in `ok_codes` with all output
/// kept; a time-out, another code or more than [`KEEP`] bytes on a stream is
/// [`HelperError::ProgramFailed`].
pub fn run<S: AsRef<OsStr>>(
    program: &Path,
    args: &[S],
    time: Duration,
    ok_codes: &[i32],
) -> Result<Ran, HelperError> {
    let limits = Limits { time, keep: KEEP };
    let ran = start(program, args, Streams::Separate, limits)?;
    let status = match (ran.timed_out, ran.code(), ran.discarded()) {
        (true, _, _) => format!(
            "no end within {}s (its process group was killed)",
            time.as_secs()
        ),
        (_, Some(code), 0) if ok_codes.contains(&code) => return Ok(ran),
        (_, _, 0) => ran.status.map_or_else(String::new, |s| s.to_string()),
        (_, _, extra) => format!("{extra} bytes of output beyond {KEEP}"),
    };
    let stderr = ran.stderr.text();
    let tail: Vec<char> = stderr.trim().chars().rev().take(STDERR_TAIL).collect();
    Err(HelperError::ProgramFailed {
        program: program.into(),
        args: args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect(),
        status,
        stderr: tail.into_iter().rev().collect(),
    })
}
