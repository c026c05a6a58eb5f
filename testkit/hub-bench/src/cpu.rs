//! CPU time of the hub's threads and of the load generator's, from `/proc/self/task`.
//!
//! The hub runs on its own runtime whose threads are named [`HUB_THREADS`] (the poll writer
//! names its thread `bosun-poll-writer`); everything else in the process is the load
//! generator: the process's time (exited threads included) less the hub threads'. The
//! hub's blocking threads are kept alive for the whole run, so none of their time is lost.

use std::time::Duration;

/// Name of the hub runtime's threads.
pub const HUB_THREADS: &str = "hub-rt";

/// Kernel clock ticks per second of `/proc/*/stat` (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// CPU time used so far: the process's (exited threads included) and each live hub
/// thread's.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    process: u64,
    hub_threads: std::collections::HashMap<String, u64>,
    writer: u64,
}

/// CPU time used between two snapshots.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu {
    /// By the hub's threads.
    pub hub: Duration,
    /// By the rest of the process (the load generator).
    pub generator: Duration,
    /// By the hub's poll writer thread alone (part of `hub`).
    pub writer: Duration,
}

impl Snapshot {
    /// The time used since `earlier`: the hub's threads' own, and the rest of the process's.
    pub fn since(&self, earlier: &Snapshot) -> Cpu {
        let hub: u64 = self
            .hub_threads
            .iter()
            .map(|(tid, ticks)| {
                ticks.saturating_sub(earlier.hub_threads.get(tid).copied().unwrap_or(0))
            })
            .sum();
        let process = self.process.saturating_sub(earlier.process);
        Cpu {
            hub: duration(hub),
            generator: duration(process.saturating_sub(hub)),
            writer: duration(self.writer.saturating_sub(earlier.writer)),
        }
    }
}

fn duration(ticks: u64) -> Duration {
    Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND)
}

/// The CPU time of this process and of its live hub threads.
pub fn now() -> Snapshot {
    let mut snapshot = Snapshot {
        process: std::fs::read_to_string("/proc/self/stat")
            .ok()
            .as_deref()
            .and_then(ticks)
            .unwrap_or(0),
        hub_threads: std::collections::HashMap::new(),
        writer: 0,
    };
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return snapshot;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(path.join("comm")),
            std::fs::read_to_string(path.join("stat")),
        ) else {
            continue;
        };
        let comm = comm.trim_end();
        if !(comm.starts_with(HUB_THREADS) || comm.starts_with("bosun-poll-writ")) {
            continue;
        }
        if let Some(ticks) = ticks(&stat) {
            if comm.starts_with("bosun-poll-writ") {
                snapshot.writer += ticks;
            }
            snapshot
                .hub_threads
                .insert(task.file_name().to_string_lossy().into_owned(), ticks);
        }
    }
    snapshot
}

/// utime + stime of a `/proc/*/stat` line (fields 14 and 15; the name in field 2 may hold
/// spaces, so fields are counted after its closing parenthesis).
fn ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Milliseconds of CPU per 1,000 requests.
pub fn per_thousand(time: Duration, requests: usize) -> f64 {
    if requests == 0 {
        return 0.0;
    }
    time.as_secs_f64() * 1000.0 * 1000.0 / requests as f64
}
