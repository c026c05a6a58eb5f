//! Giving back the daemon's code pages once start-up, or a burst of work, is over
//! (docs/decisions/0063-code-pages-given-back-when-settled.md).
//!
//! The kernel maps a program's code into the process as it runs, 64 KiB of the file around
//! each page touched, and keeps it mapped for the process's life: after start-up (the
//! journal, enrolment, the replay, the first passes) most of `bosun-agentd`'s code and
//! constants count in its RSS, although an idle agent runs a small part of them. Once the
//! agent has settled, [`give_back`] drops this process's page-table entries for the binary's
//! read-only mappings (`MADV_DONTNEED`); the pages stay in the page cache, and the code the
//! agent runs next is mapped again from there (a minor fault, no disk read).
//!
//! Only mappings none of whose pages was ever written qualify: private, not writable, of the
//! agent's own binary (mapped for the whole life of the process, so no other mapping can take
//! their addresses), with no copy-on-write copy (`Anonymous: 0 kB` in `/proc/self/smaps`). The
//! relocated read-only data (RELRO) was written by the loader at start and is never touched.
//!
//! [`give_back_when_settled`] decides when: at every look it compares the process's CPU time
//! with the last look's; a window busier than [`BUSY_SHARE`] marks the agent busy (start-up
//! counts as busy), and the first quiet window after a busy one gives the pages back.

use std::time::Duration;

use bosun_errchain::error_chain;
use tokio_util::sync::CancellationToken;

/// How soon the next look comes while the agent is busy (or starting).
pub const LOOK_SOON: Duration = Duration::from_secs(10);
/// How often the agent looks once it has settled.
pub const LOOK_SETTLED: Duration = Duration::from_secs(60);
/// A window in which the agent used more than this share of one core (in percent) was busy:
/// an idle agent uses ~0.01–0.1 %, start-up and provisioning far more than 1 %.
pub const BUSY_SHARE: u32 = 1;

/// Why the pages could not be given back.
#[derive(Debug, thiserror::Error)]
pub enum CodePagesError {
    /// `/proc/self/exe` or `/proc/self/smaps` could not be read.
    #[error("reading {path}")]
    Proc {
        /// The file.
        path: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The kernel refused the advice for one mapping.
    #[error("advising the kernel about {len} bytes at {start:#x}")]
    Advise {
        /// The mapping's first address.
        start: usize,
        /// Its length.
        len: usize,
        /// The cause.
        #[source]
        source: rustix::io::Errno,
    },
}

/// One mapping of the binary that qualifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Its first address.
    pub start: usize,
    /// Its length in bytes.
    pub len: usize,
    /// Its resident size before the advice, in kB.
    pub resident_kb: u64,
}

/// What [`give_back`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Given {
    /// Mappings advised.
    pub regions: usize,
    /// Their resident size before the advice, in kB.
    pub resident_kb: u64,
}

/// The mappings of `exe` in `smaps` (the text of `/proc/self/smaps`) none of whose pages was
/// ever written: private, readable, not writable, no copy-on-write copy; those with nothing
/// resident are left out.
pub fn never_written(smaps: &str, exe: &str) -> Vec<Region> {
    let mut found = Vec::new();
    // The mapping being read, while it still qualifies: (start, len, resident kB).
    let mut current: Option<(usize, usize, u64)> = None;
    for line in smaps.lines() {
        let mut fields = line.split_ascii_whitespace();
        let first = fields.next().unwrap_or_default();
        if let Some((start, end)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
            current = header(start, end, fields.next().unwrap_or_default(), line, exe);
            continue;
        }
        let value = fields.next().and_then(|v| v.parse::<u64>().ok());
        match (first, value, current.as_mut()) {
            ("Rss:", Some(kb), Some(region)) => region.2 = kb,
            ("Anonymous:", Some(0), Some(&mut (start, len, resident_kb))) => {
                if resident_kb > 0 {
                    found.push(Region {
                        start,
                        len,
                        resident_kb,
                    });
                }
                current = None;
            }
            // A page of it was written (or the line is unreadable): not this one.
            ("Anonymous:", _, _) => current = None,
            _ => {}
        }
    }
    found
}

/// A mapping's start and length when its header line says it is a private, read-only mapping
/// of `exe`.
fn header(
    start: &str,
    end: &str,
    perms: &str,
    line: &str,
    exe: &str,
) -> Option<(usize, usize, u64)> {
    let perms = perms.as_bytes();
    let private_read_only =
        perms.len() == 4 && perms[0] == b'r' && perms[1] == b'-' && perms[3] == b'p';
    // The path is the rest of the line from its first " /" (the fields before it hold none).
    let path = line.find(" /").map(|at| line[at + 1..].trim_end());
    if !private_read_only || path != Some(exe) {
        return None;
    }
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    Some((start, end.checked_sub(start)?, 0))
}

/// Drops this process's page-table entries for `region`, so its pages no longer count in the
/// RSS; the next access maps them again from the page cache.
#[allow(unsafe_code, reason = "madvise takes a raw address range")]
fn forget(region: Region) -> Result<(), CodePagesError> {
    let advise = |source| CodePagesError::Advise {
        start: region.start,
        len: region.len,
        source,
    };
    // SAFETY: `region` is a whole private, non-writable mapping of the program's own file, none
    // of whose pages was ever written (`never_written`: no anonymous, copy-on-write page), and
    // the program's mappings stay where they are for the life of the process. MADV_DONTNEED on
    // such a mapping only unmaps pages whose content is the file's: the next access reads the
    // same bytes from the file again, so no memory the program can see changes. The address is
    // never dereferenced here; a range that were no longer mapped makes the call fail with
    // ENOMEM and nothing else.
    unsafe {
        rustix::mm::madvise(
            std::ptr::with_exposed_provenance_mut::<std::ffi::c_void>(region.start),
            region.len,
            rustix::mm::Advice::LinuxDontNeed,
        )
    }
    .map_err(advise)
}

/// Gives back the resident pages of the program's own read-only mappings (see the module
/// docs).
pub fn give_back() -> Result<Given, CodePagesError> {
    let proc = |path| move |source| CodePagesError::Proc { path, source };
    let exe = std::fs::read_link("/proc/self/exe").map_err(proc("/proc/self/exe"))?;
    let smaps = std::fs::read_to_string("/proc/self/smaps").map_err(proc("/proc/self/smaps"))?;
    let mut given = Given::default();
    for region in never_written(&smaps, &exe.to_string_lossy()) {
        forget(region)?;
        given.regions += 1;
        given.resident_kb += region.resident_kb;
    }
    Ok(given)
}

/// When to give the pages back: after the first quiet window that follows a busy one.
#[derive(Debug, Clone, Copy)]
pub struct Settling {
    busy: bool,
    cpu: Duration,
}

impl Settling {
    /// Starting: busy, with the process's CPU time so far.
    pub fn new(cpu: Duration) -> Self {
        Self { busy: true, cpu }
    }

    /// How long to wait before the next look.
    pub fn next_look(&self) -> Duration {
        if self.busy { LOOK_SOON } else { LOOK_SETTLED }
    }

    /// A look `window` after the last one, the process's CPU time now `cpu`: whether to give
    /// the pages back now.
    pub fn look(&mut self, cpu: Duration, window: Duration) -> bool {
        let used = cpu.saturating_sub(self.cpu);
        self.cpu = cpu;
        if used * 100 > window * BUSY_SHARE {
            self.busy = true;
            return false;
        }
        std::mem::replace(&mut self.busy, false)
    }
}

/// The CPU time of every thread of this process so far.
fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Gives the code pages back each time the agent settles, until `cancel`. A failure is logged
/// once and ends the task (nothing else depends on it).
pub async fn give_back_when_settled(cancel: CancellationToken) {
    let mut settling = Settling::new(cpu_time());
    loop {
        let wait = settling.next_look();
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        if !settling.look(cpu_time(), wait) {
            continue;
        }
        match give_back() {
            Ok(given) => tracing::debug!(
                regions = given.regions,
                resident_kb = given.resident_kb,
                "code pages given back"
            ),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "could not give code pages back; keeping them");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;
