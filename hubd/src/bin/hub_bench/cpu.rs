//! CPU time of the hub's threads and of the load generator's, from `/proc/self/task`.
//!
//! The hub runs on its own runtime whose threads are named [`HUB_THREADS`] (the poll writer
//! names its thread `bosun-poll-writer`); everything else in the process is the load
//! generator. The hub's blocking threads are kept alive for the whole run, so no thread's
//! time is lost when it exits.

use std::time::Duration;

/// Name of the hub runtime's threads.
pub const HUB_THREADS: &str = "hub-rt";

/// Kernel clock ticks per second of `/proc/*/stat` (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// CPU time used so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu {
    /// By the hub's threads.
    pub hub: Duration,
    /// By the rest of the process (the load generator).
    pub generator: Duration,
}

impl Cpu {
    /// The time used since `earlier`.
    pub fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            hub: self.hub.saturating_sub(earlier.hub),
            generator: self.generator.saturating_sub(earlier.generator),
        }
    }
}

/// The CPU time of this process's live threads, split between hub and load generator.
pub fn now() -> Cpu {
    let mut cpu = Cpu::default();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return cpu;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(path.join("comm")),
            std::fs::read_to_string(path.join("stat")),
        ) else {
            continue;
        };
        let Some(ticks) = ticks(&stat) else {
            continue;
        };
        let time = Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND);
        let comm = comm.trim_end();
        if comm.starts_with(HUB_THREADS) || comm.starts_with("bosun-poll-writ") {
            cpu.hub += time;
        } else {
            cpu.generator += time;
        }
    }
    cpu
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
