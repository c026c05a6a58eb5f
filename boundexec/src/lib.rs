//! `bosun-boundexec`: the one way the root helper and the break-glass support shell run a
//! program.
//!
//! [`run`] starts the program in a process group of its own with stdin on `/dev/null`, reads
//! its stdout and stderr on threads of their own (so it never blocks on a full pipe), keeps at
//! most [`Limits::keep`] bytes of each and counts the rest, and waits at most [`Limits::time`].
//! When the time is up, or as soon as the program itself ends, the whole group gets `SIGKILL`:
//! nothing the program started in its group (a guest's `systemctl`, `find` or `test` behind
//! `pct exec`, a forked writer) outlives the call. The leader is only reaped after that kill, so
//! its pid, and with it the group id, cannot have been reused by then.
//!
//! Memory stays bounded by `2 × keep` plus two read buffers, whatever the program writes; time by
//! `time` plus a short grace for the readers ([`READ_GRACE`]).

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

/// How long, after the group is killed, the readers get to take what is still in the pipes.
pub const READ_GRACE: Duration = Duration::from_millis(500);
/// How often a running program is looked at.
const POLL: Duration = Duration::from_millis(10);

/// How long a program may run and how much of each output stream is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time from the start; then the group is killed.
    pub time: Duration,
    /// Bytes kept per stream; the rest is read and counted in [`Kept::discarded`].
    pub keep: usize,
}

/// Whether stderr gets a pipe of its own or shares stdout's (output in the order written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streams {
    /// stdout and stderr apart.
    Separate,
    /// stderr into stdout's pipe; [`Ran::stderr`] stays empty.
    Merged,
}

/// What was kept of one stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    /// The first bytes, at most [`Limits::keep`].
    pub bytes: Vec<u8>,
    /// Bytes read after those and dropped.
    pub discarded: u64,
}

impl Kept {
    /// The kept bytes, lossily decoded.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// A program [`run`] ran.
#[derive(Debug)]
pub struct Ran {
    /// How it ended; `None` when it was killed at the time limit.
    pub status: Option<ExitStatus>,
    /// It was still running at the time limit.
    pub timed_out: bool,
    /// Its stdout (with stderr when [`Streams::Merged`]).
    pub stdout: Kept,
    /// Its stderr.
    pub stderr: Kept,
    /// From start to the end of the call.
    pub elapsed: Duration,
}

impl Ran {
    /// Exit code: `None` when killed at the time limit or by a signal.
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    /// Bytes dropped from both streams.
    pub fn discarded(&self) -> u64 {
        self.stdout.discarded + self.stderr.discarded
    }

    /// `None` when the program ended with one of `ok_codes` and nothing of its output was
    /// dropped; otherwise what went wrong, in words.
    pub fn failure(&self, ok_codes: &[i32]) -> Option<String> {
        match (self.timed_out, self.code(), self.discarded()) {
            (true, _, _) => Some(format!(
                "no end within {}s (its process group was killed)",
                self.elapsed.as_secs()
            )),
            (_, Some(code), 0) if ok_codes.contains(&code) => None,
            (_, _, 0) => Some(self.status.map_or_else(String::new, |s| s.to_string())),
            (_, _, extra) => Some(format!("{extra} bytes of output beyond what is kept")),
        }
    }
}

/// Why a program could not be run or waited for.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// Creating a pipe or starting the program failed.
    #[error("starting {program}")]
    Spawn {
        /// The program.
        program: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The FIFO of [`run_into_fifo`] could not be made or opened.
    #[error("preparing the pipe {path}")]
    Fifo {
        /// Its path.
        path: std::path::PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for it failed.
    #[error("waiting for {program}")]
    Wait {
        /// The program.
        program: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// A reader emptied on a thread of its own: the first `keep` bytes kept, the rest counted.
/// Also what a caller uses for a pipe of its own (a FIFO a program writes into).
#[derive(Debug)]
pub struct Drain {
    kept: Arc<Mutex<Kept>>,
    thread: JoinHandle<()>,
}

impl Drain {
    /// Starts reading `reader` until its end.
    pub fn start(mut reader: impl Read + Send + 'static, keep: usize) -> Drain {
        let kept = Arc::new(Mutex::new(Kept::default()));
        let shared = Arc::clone(&kept);
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                let mut kept = shared.lock().unwrap_or_else(PoisonError::into_inner);
                let room = keep.saturating_sub(kept.bytes.len()).min(n);
                kept.bytes.extend_from_slice(&buf[..room]);
                kept.discarded += (n - room) as u64;
            }
        });
        Drain { kept, thread }
    }

    /// What was read, once the reader ended or `grace` passed (whichever is first).
    pub fn finish(self, grace: Duration) -> Kept {
        wait_for(&self.thread, grace);
        std::mem::take(&mut *self.kept.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Waits until `thread` finished or `grace` passed; whether it finished.
fn wait_for<T>(thread: &JoinHandle<T>, grace: Duration) -> bool {
    let until = Instant::now() + grace;
    while !thread.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
    thread.is_finished()
}

/// Runs `command` within `limits` (see the crate docs). Its stdin, stdout, stderr and process
/// group are set here; everything else (program, arguments, environment) is the caller's.
pub fn run(command: Command, streams: Streams, limits: Limits) -> Result<Ran, ExecError> {
    run_piped(command, streams, limits, None, Stdio::null()).map(|(ran, _)| ran)
}

/// What [`run_fed`] fed the program.
#[derive(Debug)]
pub struct Fed<R> {
    /// The source, read up to its end or the limit (so a reader that hashes has seen it all).
    pub source: R,
    /// Bytes read from the source.
    pub read: u64,
    /// Bytes the program took before it closed its stdin (or ended).
    pub taken: u64,
    /// Reading the source failed.
    pub error: Option<std::io::Error>,
}

/// [`run`] with the program's stdin fed from `source`, at most `max` bytes, on a thread of its
/// own. When the program stops reading, the rest of the source (up to `max`) is still read, not
/// written; when the call ends by its time limit, reading stops.
pub fn run_fed<R: Read + Send + 'static>(
    command: Command,
    source: R,
    max: u64,
    limits: Limits,
) -> Result<(Ran, Fed<R>), ExecError> {
    let program = command.get_program().to_string_lossy().into_owned();
    let (read_end, write_end) = std::io::pipe().map_err(|source| ExecError::Spawn {
        program: program.clone(),
        source,
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let feeding = Arc::clone(&stop);
    let feeder = std::thread::spawn(move || feed(source, write_end, max, &feeding));
    let ran = run_piped(command, Streams::Separate, limits, None, read_end.into());
    stop.store(
        ran.as_ref().is_ok_and(|(r, _)| r.timed_out),
        Ordering::SeqCst,
    );
    let fed = feeder.join().map_err(|_| ExecError::Wait {
        program,
        source: std::io::Error::other("the feeder panicked"),
    })?;
    Ok((ran?.0, fed))
}

/// Copies `source` into `pipe` (see [`run_fed`]).
fn feed<R: Read>(
    mut source: R,
    mut pipe: std::io::PipeWriter,
    max: u64,
    stop: &AtomicBool,
) -> Fed<R> {
    let (mut read, mut taken, mut open) = (0u64, 0u64, true);
    let mut buf = vec![0u8; 64 * 1024];
    let mut error = None;
    while read < max && !stop.load(Ordering::SeqCst) {
        let want = usize::try_from(max - read)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = match source.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                error = Some(e);
                break;
            }
        };
        read += n as u64;
        if open && pipe.write_all(&buf[..n]).is_ok() {
            taken += n as u64;
        } else {
            open = false;
        }
    }
    drop(pipe);
    Fed {
        source,
        read,
        taken,
        error,
    }
}

/// What [`run_to_file`] wrote.
#[derive(Debug, Default)]
pub struct Written {
    /// Bytes written into the file.
    pub bytes: u64,
    /// The program wrote more than the limit: the rest was not written and its group killed.
    pub over: bool,
    /// Writing into the file failed (the group was killed), or the program's output was still
    /// open [`READ_GRACE`] after the group was killed.
    pub error: Option<std::io::Error>,
}

/// [`run`] with the program's stdout written into `file` (its stderr kept as [`run`] keeps
/// it), at most `max` bytes: a byte more, or a failed write, ends the call at once, the whole
/// group killed as at the time limit ([`Written::over`], [`Written::error`]).
pub fn run_to_file(
    command: Command,
    file: std::fs::File,
    max: u64,
    limits: Limits,
) -> Result<(Ran, Written), ExecError> {
    let (ran, written) = run_piped(
        command,
        Streams::Separate,
        limits,
        Some((file, max)),
        Stdio::null(),
    )?;
    Ok((ran, written.unwrap_or_default()))
}

/// Copies `reader` into `file` until its end, `max` bytes at most; sets `stop` when it stops
/// early.
fn copy_bounded(
    mut reader: impl Read,
    mut file: std::fs::File,
    max: u64,
    stop: &AtomicBool,
) -> Written {
    let mut written = Written::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                written.error = Some(e);
                break;
            }
        };
        if written.bytes + n as u64 > max {
            written.over = true;
            break;
        }
        if let Err(e) = file.write_all(&buf[..n]) {
            written.error = Some(e);
            break;
        }
        written.bytes += n as u64;
    }
    stop.store(written.over || written.error.is_some(), Ordering::SeqCst);
    written
}

/// [`run`], or [`run_to_file`] when `sink` names the file and its limit.
fn run_piped(
    mut command: Command,
    streams: Streams,
    limits: Limits,
    sink: Option<(std::fs::File, u64)>,
    stdin: Stdio,
) -> Result<(Ran, Option<Written>), ExecError> {
    let program = command.get_program().to_string_lossy().into_owned();
    let spawn_err = |source| ExecError::Spawn {
        program: program.clone(),
        source,
    };
    let started = Instant::now();
    let (out_read, out_write) = std::io::pipe().map_err(spawn_err)?;
    let (err_read, err_write) = match streams {
        Streams::Merged => (None, out_write.try_clone().map_err(spawn_err)?),
        Streams::Separate => {
            let (read, write) = std::io::pipe().map_err(spawn_err)?;
            (Some(read), write)
        }
    };
    command
        .stdin(stdin)
        .stdout(out_write)
        .stderr(err_write)
        .process_group(0);
    let spawned = command.spawn();
    // The command holds our copies of the write ends: the readers see the end only without them.
    drop(command);
    let mut child = spawned.map_err(spawn_err)?;
    let stop = Arc::new(AtomicBool::new(false));
    let (stdout, copier) = match sink {
        None => (Some(Drain::start(out_read, limits.keep)), None),
        Some((file, max)) => {
            let stop = Arc::clone(&stop);
            let copy = move || copy_bounded(out_read, file, max, &stop);
            (None, Some(std::thread::spawn(copy)))
        }
    };
    let stderr = err_read.map(|r| Drain::start(r, limits.keep));
    let wait_err = |source| ExecError::Wait {
        program: program.clone(),
        source,
    };
    let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) else {
        let _ = child.kill();
        let source = std::io::Error::other("the child's pid is out of range");
        return Err(wait_err(source));
    };
    let deadline = started + limits.time;
    let ended = loop {
        // Looked at without reaping: the leader stays a zombie, so its group id stays ours.
        let exited = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG;
        let status = rustix::process::waitid(WaitId::Pid(pid), exited);
        if status.map_err(|e| wait_err(e.into()))?.is_some() || stop.load(Ordering::SeqCst) {
            break true;
        }
        if Instant::now() >= deadline {
            break false;
        }
        std::thread::sleep(POLL.min(deadline.saturating_duration_since(Instant::now())));
    };
    // ESRCH: the group is already empty.
    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    let status = child.wait().map_err(wait_err)?;
    let lost = |why: &str| Written {
        error: Some(std::io::Error::other(why.to_owned())),
        ..Written::default()
    };
    let written = copier.map(|thread| match wait_for(&thread, READ_GRACE) {
        true => thread
            .join()
            .unwrap_or_else(|_| lost("the copy into the file panicked")),
        false => lost("its output stayed open after it ended"),
    });
    let ran = Ran {
        status: ended.then_some(status),
        timed_out: !ended,
        stdout: stdout.map_or_else(Kept::default, |d| d.finish(READ_GRACE)),
        stderr: stderr.map_or_else(Kept::default, |d| d.finish(READ_GRACE)),
        elapsed: started.elapsed(),
    };
    Ok((ran, written))
}

/// [`run`] for a program that writes what it produces into a file it is named: `fifo` (a path
/// in a directory only the caller controls, not yet taken) is made a FIFO (0600) for the call
/// and drained like a stream (at most `keep` bytes kept, the rest counted), so however much the
/// program writes, nothing lands on a disk. The FIFO is held open for writing until the program
/// ended, so its end is the program's; it is removed afterwards.
pub fn run_into_fifo(
    command: Command,
    fifo: &std::path::Path,
    keep: usize,
    streams: Streams,
    limits: Limits,
) -> Result<(Ran, Kept), ExecError> {
    use rustix::fs::{FileType, Mode, OFlags};
    let fifo_err = |e: rustix::io::Errno| ExecError::Fifo {
        path: fifo.into(),
        source: e.into(),
    };
    let mode = Mode::from_raw_mode(0o600);
    rustix::fs::mknodat(rustix::fs::CWD, fifo, FileType::Fifo, mode, 0).map_err(fifo_err)?;
    let open = |flags| {
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        rustix::fs::open(fifo, flags, Mode::empty()).map_err(fifo_err)
    };
    let opened = open(OFlags::RDONLY).and_then(|r| Ok((open(OFlags::WRONLY)?, r)));
    let (writer, reader) = match opened {
        Ok(pair) => pair,
        Err(e) => {
            let _ = std::fs::remove_file(fifo);
            return Err(e);
        }
    };
    let blocking = rustix::fs::fcntl_setfl(&reader, OFlags::empty()).map_err(fifo_err);
    let drain = Drain::start(std::fs::File::from(reader), keep);
    let ran = blocking.and_then(|()| run(command, streams, limits));
    drop(writer);
    let kept = drain.finish(READ_GRACE);
    let _ = std::fs::remove_file(fifo);
    Ok((ran?, kept))
}

#[cfg(test)]
mod tests;
