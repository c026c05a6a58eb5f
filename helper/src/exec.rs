//! The one place the helper starts programs: by absolute path, no shell, with an empty
//! environment apart from a fixed `PATH` and `LC_ALL=C`, through [`bosun_boundexec::run`]:
//! a time limit sized to what the program really does ([`crate::config::TimeLimits`]), at most [`KEEP`] bytes kept of
//! each output stream, and the program's whole process group killed when it ends or times out.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bosun_boundexec::Written;
pub use bosun_boundexec::{Kept, Limits, Ran, Streams};

use crate::error::{HelperError, io_error};

/// `PATH` handed to every program (they may run their own helpers by name).
pub const FIXED_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";
/// Bytes kept of each stream of a program whose output is read (a vzdump log, `smartctl`'s
/// JSON, `pct config`); more is a failure of [`run`], never a cut-off answer.
pub const KEEP: usize = 1024 * 1024;
/// How much of a failed program's stderr goes into the error.
const STDERR_TAIL: usize = 2000;

fn command<S: AsRef<OsStr>>(program: &Path, args: &[S]) -> Result<Command, HelperError> {
    if !program.is_absolute() {
        return Err(HelperError::Spawn(
            program.into(),
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not absolute"),
        ));
    }
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .env("PATH", FIXED_PATH)
        .env("LC_ALL", "C")
        .current_dir("/");
    Ok(command)
}

/// Runs `program args...` within `limits` (see the module docs), whatever its exit status.
pub fn start<S: AsRef<OsStr>>(
    program: &Path,
    args: &[S],
    streams: Streams,
    limits: Limits,
) -> Result<Ran, HelperError> {
    bosun_boundexec::run(command(program, args)?, streams, limits).map_err(HelperError::Exec)
}

/// Runs `program args...` for at most `secs` seconds. Success is an exit code in `ok_codes`
/// with all output kept; a time-out, another code or more than [`KEEP`] bytes on a stream is
/// [`HelperError::ProgramFailed`].
pub fn run<S: AsRef<OsStr>>(
    program: &Path,
    args: &[S],
    secs: u64,
    ok_codes: &[i32],
) -> Result<Ran, HelperError> {
    let time = Duration::from_secs(secs);
    let ran = start(
        program,
        args,
        Streams::Separate,
        Limits { time, keep: KEEP },
    )?;
    succeeded(program, args, ran, ok_codes)
}

/// [`run`] for a program that writes into the file `fifo` it is named in `args` (see
/// [`bosun_boundexec::run_into_fifo`]): also what it wrote there, at most `keep` bytes kept.
pub fn run_into_fifo<S: AsRef<OsStr>>(
    program: &Path,
    args: &[S],
    fifo: &Path,
    keep: usize,
    secs: u64,
) -> Result<(Ran, Kept), HelperError> {
    let time = Duration::from_secs(secs);
    let limits = Limits { time, keep: KEEP };
    let command = command(program, args)?;
    let (ran, kept) =
        bosun_boundexec::run_into_fifo(command, fifo, keep, Streams::Separate, limits)
            .map_err(HelperError::Exec)?;
    Ok((succeeded(program, args, ran, &[0])?, kept))
}

/// [`run`] for a program whose stdout goes into `file` (at `path`, for messages), at most
/// `max` bytes (see [`bosun_boundexec::run_to_file`]): more, or a failed write, fails it.
pub fn run_to_file<S: AsRef<OsStr>>(
    (program, args): (&Path, &[S]),
    (file, path): (std::fs::File, &Path),
    max: u64,
    time: Duration,
) -> Result<u64, HelperError> {
    let limits = Limits { time, keep: KEEP };
    let (ran, written) = bosun_boundexec::run_to_file(command(program, args)?, file, max, limits)
        .map_err(HelperError::Exec)?;
    match written {
        Written { over: true, .. } => Err(HelperError::ProgramOutput(
            program.into(),
            format!("more than {max} bytes on its standard output"),
        )),
        Written {
            error: Some(source),
            ..
        } => Err(io_error("write", path)(source)),
        Written { bytes, .. } => succeeded(program, args, ran, &[0]).map(|_| bytes),
    }
}

/// [`run`] for a program whose stdin is fed from `source` (at `path`, for messages), at most
/// `max` bytes (see [`bosun_boundexec::run_fed`]); gives the source back, read up to its end or
/// `max`.
pub fn run_fed<S: AsRef<OsStr>, R: std::io::Read + Send + 'static>(
    (program, args): (&Path, &[S]),
    (source, path): (R, &Path),
    max: u64,
    time: Duration,
) -> Result<R, HelperError> {
    let limits = Limits { time, keep: KEEP };
    let (ran, fed) = bosun_boundexec::run_fed(command(program, args)?, source, max, limits)
        .map_err(HelperError::Exec)?;
    if let Some(source) = fed.error {
        return Err(io_error("read", path)(source));
    }
    succeeded(program, args, ran, &[0]).map(|_| fed.source)
}

fn succeeded<S: AsRef<OsStr>>(
    program: &Path,
    args: &[S],
    ran: Ran,
    ok_codes: &[i32],
) -> Result<Ran, HelperError> {
    let Some(status) = ran.failure(ok_codes) else {
        return Ok(ran);
    };
    let stderr = ran.stderr.text();
    let tail: Vec<char> = stderr.trim().chars().rev().take(STDERR_TAIL).collect();
    let args = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned());
    let stderr = tail.into_iter().rev().collect();
    Err(HelperError::ProgramFailed(
        program.into(),
        args.collect(),
        status,
        stderr,
    ))
}
