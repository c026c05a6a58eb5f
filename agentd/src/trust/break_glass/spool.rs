//! Reads what was done through a break-glass door into the audit trail (decision 0035).
//!
//! The door's forced command, `bosun-support`, appends one JSON line per command it runs or
//! refuses to a spool file the break-glass account owns. [`SpoolTask`] reads the lines
//! added since its last pass and journals one `break_glass.command` audit row each, with
//! the spool's new offset, in one transaction ([`crate::ops::journal::Store::record_support_commands`]):
//! the rows reach the hub through the audit tail. A command that touched a guest (or was
//! refused for want of its consent, decision 0080) is that guest's row, shown to it in full
//! through its audit log; every guest of the host sees each host-level command's kind and exit
//! status.
//!
//! The spool is written by another account, so it is read as hostile input: opened without
//! following a symbolic link, at most [`MAX_PASS_BYTES`] and [`MAX_PASS_LINES`] a pass, lines
//! longer than [`MAX_SPOOL_LINE`] skipped, and only a line naming a door (a job id), a
//! command in the support shell's own canonical spelling (or `refused`), an exit status that
//! fits the command (or, for a guest's command only, `refused: no_consent`) and a sane time
//! becomes a row. Anything else is counted and skipped. A
//! spool shorter than the offset (replaced or truncated) is read again from its start.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_errchain::error_chain;
use jiff::Timestamp;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::ops::journal::{JournalError, JournalHandle, SupportCommand};

mod watch;

pub use watch::SpoolWatch;

/// Where `bosun-support` appends its lines (the package makes the directory).
pub const DEFAULT_SPOOL: &str = "/var/lib/bosun-breakglass/commands.jsonl";
/// Most bytes read in one pass.
pub const MAX_PASS_BYTES: usize = 64 * 1024;
/// Most lines turned into rows in one pass (the rest wait for the next).
pub const MAX_PASS_LINES: usize = 256;
/// Longest line accepted (`bosun-support` writes about 150 bytes).
pub const MAX_SPOOL_LINE: usize = 1024;
/// The default time between two passes when the spool's directory cannot be watched.
pub const DEFAULT_SCAN_INTERVAL: Duration = Duration::from_secs(10);
/// The pause before the next page when a pass stopped at a bound.
const NEXT_PAGE: Duration = Duration::from_millis(100);

/// Why a pass failed.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// The spool could not be read.
    #[error("reading the break-glass spool {path}")]
    Read {
        /// The spool.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The journal could not read the offset or record the commands.
    #[error("journaling break-glass commands")]
    Journal(#[from] JournalError),
}

/// What one pass read.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    /// The commands, in the order they were written.
    pub commands: Vec<SupportCommand>,
    /// Lines skipped as not a command the support shell writes.
    pub garbage: usize,
    /// Where the next pass starts.
    pub next: u64,
    /// Whether the spool was shorter than the offset and was read from its start.
    pub restarted: bool,
    /// Whether the pass stopped at a bound with more complete lines to read.
    pub more: bool,
}

/// One line as `bosun-support` writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    at: u64,
    session: String,
    command: String,
    status: Option<u8>,
    /// Why a command that parsed did not run: only `no_consent` (decision 0080).
    #[serde(default)]
    refused: Option<String>,
}

/// The only reason a parsed command is refused: its guest did not consent.
pub const NO_CONSENT: &str = "no_consent";

/// The command of a spool line, checked: `None` for anything the support shell would not
/// have written.
fn command(line: &[u8]) -> Option<SupportCommand> {
    if line.len() > MAX_SPOOL_LINE {
        return None;
    }
    let line: Line = serde_json::from_slice(line).ok()?;
    let session = uuid::Uuid::parse_str(&line.session).ok()?;
    let ran_at = Timestamp::from_second(i64::try_from(line.at).ok()?).ok()?;
    let (kind, command, vmid, refused) = if line.command == "refused" {
        if line.status.is_some() || line.refused.is_some() {
            return None;
        }
        ("refused".to_owned(), line.command, None, None)
    } else {
        let parsed = bosun_support::Command::parse(&line.command).ok()??;
        // Only what the shell writes: its canonical spelling of a command that runs.
        if parsed.to_string() != line.command || parsed.argv().is_none() {
            return None;
        }
        // Run with a status, or refused for want of consent (only a guest's command is).
        let refused = match (line.status, line.refused.as_deref()) {
            (Some(_), None) => None,
            (None, Some(NO_CONSENT)) if parsed.guest().is_some() => Some(NO_CONSENT),
            _ => return None,
        };
        let kind = line.command.split(' ').next()?.to_owned();
        (kind, line.command, parsed.guest(), refused)
    };
    Some(SupportCommand {
        session: session.to_string(),
        command,
        kind,
        status: line.status,
        vmid,
        refused,
        ran_at,
    })
}

/// Reads the lines of `path` from `offset`, within the pass's bounds. A missing spool reads
/// as empty (no door was ever used, or the package is not installed).
pub fn read_from(path: &Path, offset: u64) -> Result<Chunk, std::io::Error> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let mut file = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => std::fs::File::from(fd),
        Err(rustix::io::Errno::NOENT) => {
            return Ok(Chunk {
                next: offset,
                ..Chunk::default()
            });
        }
        Err(e) => return Err(e.into()),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let len = meta.len();
    let (start, restarted) = if len < offset {
        (0, true)
    } else {
        (offset, false)
    };
    let mut chunk = Chunk {
        next: start,
        restarted,
        ..Chunk::default()
    };
    if len == start {
        return Ok(chunk);
    }
    file.seek(SeekFrom::Start(start))?;
    let unread = usize::try_from(len - start).unwrap_or(usize::MAX);
    let mut buf = Vec::with_capacity(MAX_PASS_BYTES.min(unread));
    file.take(MAX_PASS_BYTES as u64).read_to_end(&mut buf)?;
    let mut used = 0;
    for line in buf.split_inclusive(|b| *b == b'\n') {
        if chunk.commands.len() + chunk.garbage >= MAX_PASS_LINES {
            chunk.more = true;
            break;
        }
        let Some(body) = line.strip_suffix(b"\n") else {
            // A line still being written waits for the next pass, unless it alone fills a
            // whole pass: then it is longer than any line the shell writes, and is skipped.
            if used == 0 && buf.len() == MAX_PASS_BYTES {
                chunk.garbage += 1;
                used = buf.len();
                chunk.more = true;
            }
            break;
        };
        used += line.len();
        match command(body) {
            Some(command) => chunk.commands.push(command),
            None if body.is_empty() => {}
            None => chunk.garbage += 1,
        }
    }
    chunk.next = start + used as u64;
    chunk.more |= buf.len() == MAX_PASS_BYTES && chunk.next < len;
    Ok(chunk)
}

/// Turns the spool into audit rows: a pass at start, then one whenever the spool's directory
/// changes ([`SpoolWatch`]), or every interval where it cannot be watched.
#[derive(Debug)]
pub struct SpoolTask {
    journal: JournalHandle,
    path: PathBuf,
    interval: Duration,
}

impl SpoolTask {
    /// A task reading `path` when it changes, or every `interval` where its directory cannot
    /// be watched.
    pub fn new(journal: JournalHandle, path: PathBuf, interval: Duration) -> Self {
        Self {
            journal,
            path,
            interval,
        }
    }

    /// One pass: reads what was added since the journaled offset and journals it. Gives
    /// whether more is left to read at once.
    pub async fn pass(&self) -> Result<bool, SpoolError> {
        let offset = self.journal.spool_offset().await?;
        let path = self.path.clone();
        let chunk = tokio::task::spawn_blocking(move || read_from(&path, offset))
            .await
            .map_err(|e| SpoolError::Read {
                path: self.path.clone(),
                source: std::io::Error::other(e),
            })?
            .map_err(|source| SpoolError::Read {
                path: self.path.clone(),
                source,
            })?;
        if chunk.restarted {
            tracing::warn!(spool = %self.path.display(), offset, "the break-glass spool is shorter than what was read of it; reading it again from its start");
        }
        if chunk.garbage > 0 {
            tracing::warn!(spool = %self.path.display(), skipped = chunk.garbage, "skipped break-glass spool lines the support shell does not write");
        }
        if chunk.next == offset && chunk.commands.is_empty() {
            return Ok(false);
        }
        for command in &chunk.commands {
            tracing::warn!(session = %command.session, command = %command.command, status = ?command.status, "break-glass command");
        }
        self.journal
            .record_support_commands(chunk.commands, chunk.next)
            .await?;
        Ok(chunk.more)
    }

    /// Runs until `cancel`: a pass at once, then one whenever the spool's directory changes
    /// (every interval where it cannot be watched: no directory, no inotify); a pass that
    /// stopped at a bound goes on with the next page shortly, one that failed is tried again
    /// after the interval.
    pub async fn run(self, cancel: CancellationToken) {
        // Watched before the first pass, so no change after it goes unnoticed.
        let mut watch = self.watch();
        loop {
            let wait = match self.pass().await {
                Ok(true) => Some(NEXT_PAGE),
                Ok(false) if watch.is_some() => None,
                Ok(false) => Some(self.interval),
                Err(e) => {
                    tracing::error!(error = %error_chain(&e), "could not read break-glass commands into the audit trail");
                    Some(self.interval)
                }
            };
            let changed = async {
                match watch.as_mut() {
                    Some(watch) => watch.changed().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(wait.unwrap_or_default()), if wait.is_some() => {}
                changed = changed => {
                    if let Err(e) = changed {
                        tracing::warn!(spool = %self.path.display(), error = %e, interval_s = self.interval.as_secs(), "the break-glass spool's directory is no longer watched; reading the spool every interval");
                        watch = None;
                    }
                }
            }
        }
    }

    /// The watch on the spool's directory, when it can be had.
    fn watch(&self) -> Option<SpoolWatch> {
        let dir = self.path.parent()?;
        match SpoolWatch::new(dir) {
            Ok(watch) => Some(watch),
            Err(e) => {
                tracing::info!(spool = %self.path.display(), error = %e, interval_s = self.interval.as_secs(), "the break-glass spool's directory cannot be watched; reading the spool every interval");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
