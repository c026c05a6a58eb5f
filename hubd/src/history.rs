//! Hosts' history gathered in memory: each poll adds its figures to its host's bucket of
//! [`BUCKET_SECONDS`], and a bucket is written to the store once it is over
//! ([`History::take`], called by the flush task), so a poll costs a lock and a few additions,
//! never a write (decision 0078). A bucket is kept as sums, highs and counts
//! ([`HistoryBucket`]): what this hub writes adds to what another replica (or this one before
//! a restart) wrote of the same bucket.
//!
//! A delta carries the host's figures only when they changed, so the last ones seen stand for
//! the polls in between. A backup counts once, in the bucket of the poll that first reports
//! it: the hub remembers the newest finish time it counted per guest and target, and counts
//! none that finished before it started (a full report after a restart repeats old ones).

use std::collections::{HashMap, VecDeque};

use bosun_proto::delta::ReportDelta;
use bosun_proto::health::HostHealth;
use bosun_proto::history::BUCKET_SECONDS;
use bosun_proto::poll::PollRequest;
use bosun_proto::report::{BackupReport, HostMetrics};
use parking_lot::Mutex;
use uuid::Uuid;

use crate::store::history::HistoryBucket;

/// A bucket's length, ms.
pub const BUCKET_MS: i64 = BUCKET_SECONDS as i64 * 1000;

/// Most finished buckets held while the store cannot take them (the oldest go first).
const MAX_WAITING: usize = 200_000;

/// Most (guest, target) pairs remembered per host as counted: a host names at most
/// [`bosun_proto::desired::MAX_GUESTS`] guests, each with a few targets; a host that names
/// new pairs in every poll makes the oldest be forgotten, never the hub's memory grow.
const MAX_COUNTED: usize = 8 * bosun_proto::desired::MAX_GUESTS;

/// The start of the bucket `now_ms` falls in.
pub fn bucket_of(now_ms: i64) -> i64 {
    now_ms - now_ms.rem_euclid(BUCKET_MS)
}

/// What one poll says of its host's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// The host reading: `Some(None)` when the poll says there is none, `None` when it keeps
    /// the last one (a delta without a change).
    reading: Option<Option<Reading>>,
    /// The fullest pool's data fill, likewise.
    pool: Option<Option<f64>>,
    /// Backups the poll names: (guest, target, finished ms, bytes, seconds).
    backups: Vec<Backup>,
}

/// A backup a poll names: guest, target, finished (Unix ms), bytes, seconds.
type Backup = (Uuid, String, i64, Option<u64>, Option<u64>);

/// CPU, memory and root-disk use, shares.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reading {
    cpu: f64,
    memory: f64,
    disk: f64,
}

impl Reading {
    fn of(host: &HostMetrics) -> Self {
        #[allow(clippy::cast_precision_loss)] // MiB and GiB counts: far below 2^52
        let share = |used: u64, total: u64| {
            if total == 0 {
                0.0
            } else {
                (used as f64 / total as f64).clamp(0.0, 1.0)
            }
        };
        Self {
            cpu: host.cpu_usage.clamp(0.0, 1.0),
            memory: share(host.memory_used_mib, host.memory_total_mib),
            disk: share(host.disk_used_gib, host.disk_total_gib),
        }
    }
}

fn fullest_pool(health: &HostHealth) -> Option<f64> {
    health
        .pools
        .iter()
        .map(|p| p.data.usage.clamp(0.0, 1.0))
        .reduce(f64::max)
}

fn backups(list: &[BackupReport]) -> Vec<Backup> {
    list.iter()
        .map(|b| {
            let finished = b.finished_at.as_millisecond();
            (
                b.guest_id,
                b.target.clone(),
                finished,
                b.size_bytes,
                b.duration_seconds,
            )
        })
        .collect()
}

impl Sample {
    /// The figures of a poll's report or delta (validated before).
    pub fn of(request: &PollRequest) -> Self {
        if let Some(report) = &request.report {
            return Self {
                reading: Some(report.host.as_ref().map(Reading::of)),
                pool: Some(report.host_health.as_ref().and_then(fullest_pool)),
                backups: backups(&report.last_backups),
            };
        }
        request
            .delta
            .as_ref()
            .map_or_else(Self::default, Self::of_delta)
    }

    fn of_delta(delta: &ReportDelta) -> Self {
        let reading = match (&delta.host, delta.host_unread) {
            (Some(host), _) => Some(Some(Reading::of(host))),
            (None, true) => Some(None),
            (None, false) => None,
        };
        Self {
            reading,
            pool: delta.host_health.as_ref().map(fullest_pool),
            backups: backups(&delta.last_backups),
        }
    }
}

/// What the hub holds of one host.
#[derive(Debug)]
struct HostHistory {
    reading: Option<Reading>,
    pool: Option<f64>,
    /// Newest finish counted per (guest, target).
    counted: HashMap<(Uuid, String), i64>,
    open: HistoryBucket,
}

#[derive(Debug, Default)]
struct State {
    hosts: HashMap<Uuid, HostHistory>,
    /// Finished buckets not yet written, oldest first.
    waiting: VecDeque<HistoryBucket>,
    /// The bucket [`History::take`] last moved every finished one out of.
    taken_before: i64,
}

/// The hub's hosts' history in memory.
#[derive(Debug)]
pub struct History {
    state: Mutex<State>,
    /// When this hub started, Unix ms: backups finished earlier are not counted.
    started_ms: i64,
}

impl History {
    /// An empty history of a hub started at `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        Self {
            state: Mutex::new(State {
                taken_before: bucket_of(now_ms),
                ..State::default()
            }),
            started_ms: now_ms,
        }
    }

    /// Adds a poll of `host_id` at `now_ms` that took `poll_us` to record.
    pub fn observe(&self, host_id: Uuid, sample: Sample, now_ms: i64, poll_us: u64) {
        let bucket = bucket_of(now_ms);
        let mut state = self.state.lock();
        let State { hosts, waiting, .. } = &mut *state;
        let host = hosts.entry(host_id).or_insert_with(|| HostHistory {
            reading: None,
            pool: None,
            counted: HashMap::new(),
            open: HistoryBucket::new(host_id, bucket),
        });
        if host.open.bucket_ms != bucket {
            let done = std::mem::replace(&mut host.open, HistoryBucket::new(host_id, bucket));
            if done.polls > 0 {
                push_bounded(waiting, done);
            }
        }
        if let Some(reading) = sample.reading {
            host.reading = reading;
        }
        if let Some(pool) = sample.pool {
            host.pool = pool;
        }
        let open = &mut host.open;
        open.polls = open.polls.saturating_add(1);
        open.poll_us_sum = open.poll_us_sum.saturating_add(poll_us);
        open.poll_us_max = open.poll_us_max.max(poll_us);
        if let Some(r) = host.reading {
            open.samples += 1;
            open.cpu_sum += r.cpu;
            open.cpu_max = open.cpu_max.max(r.cpu);
            open.memory_sum += r.memory;
            open.disk_sum += r.disk;
        }
        if let Some(pool) = host.pool {
            open.pool_samples += 1;
            open.pool_max = open.pool_max.max(pool);
        }
        for (guest, target, finished, bytes, seconds) in sample.backups {
            if finished < self.started_ms {
                continue;
            }
            let key = (guest, target);
            if host.counted.get(&key).is_some_and(|&seen| seen >= finished) {
                continue;
            }
            remember(&mut host.counted, key, finished);
            open.backups = open.backups.saturating_add(1);
            open.backup_bytes = open.backup_bytes.saturating_add(bytes.unwrap_or(0));
            open.backup_seconds = open.backup_seconds.saturating_add(seconds.unwrap_or(0));
        }
    }

    /// The buckets to write at `now_ms`: every finished one, and with `all` the open ones too
    /// (the hub is stopping; what follows in the same bucket adds to them). Nothing is taken
    /// while the current bucket runs and nothing waits.
    pub fn take(&self, now_ms: i64, all: bool) -> Vec<HistoryBucket> {
        let current = bucket_of(now_ms);
        let mut state = self.state.lock();
        if !all && state.taken_before >= current && state.waiting.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::from(std::mem::take(&mut state.waiting));
        if all || state.taken_before < current {
            for host in state.hosts.values_mut() {
                if host.open.polls > 0 && (all || host.open.bucket_ms < current) {
                    let start = if all { host.open.bucket_ms } else { current };
                    let fresh = HistoryBucket::new(host.open.host_id, start);
                    out.push(std::mem::replace(&mut host.open, fresh));
                }
            }
            state.taken_before = current;
        }
        out
    }

    /// Puts back buckets the store could not take (the next [`History::take`] tries again).
    pub fn put_back(&self, buckets: Vec<HistoryBucket>) {
        let mut state = self.state.lock();
        for bucket in buckets {
            push_bounded(&mut state.waiting, bucket);
        }
    }

    /// What this hub holds of `host_id` and has not written: its open bucket and any waiting.
    pub fn unwritten(&self, host_id: Uuid) -> Vec<HistoryBucket> {
        let state = self.state.lock();
        let mut out: Vec<HistoryBucket> = state
            .waiting
            .iter()
            .filter(|b| b.host_id == host_id)
            .copied()
            .collect();
        if let Some(host) = state.hosts.get(&host_id)
            && host.open.polls > 0
        {
            out.push(host.open);
        }
        out
    }

    /// Forgets a removed host.
    pub fn forget(&self, host_id: Uuid) {
        let mut state = self.state.lock();
        state.hosts.remove(&host_id);
        state.waiting.retain(|b| b.host_id != host_id);
    }
}

fn push_bounded(waiting: &mut VecDeque<HistoryBucket>, bucket: HistoryBucket) {
    if waiting.len() >= MAX_WAITING {
        waiting.pop_front();
    }
    waiting.push_back(bucket);
}

/// Records `key` as counted up to `finished`, forgetting the pair counted longest ago when
/// the host already has [`MAX_COUNTED`].
fn remember(counted: &mut HashMap<(Uuid, String), i64>, key: (Uuid, String), finished: i64) {
    if counted.len() >= MAX_COUNTED && !counted.contains_key(&key) {
        let oldest = counted
            .iter()
            .min_by_key(|&(_, &seen)| seen)
            .map(|(k, _)| k.clone());
        if let Some(oldest) = oldest {
            counted.remove(&oldest);
        }
    }
    counted.insert(key, finished);
}

/// Merges `extra` into `stored` (newest first, as the store reads them) bucket by bucket,
/// dropping any outside `[from_ms, to_ms)`; the result is newest first.
pub fn merged(
    mut stored: Vec<HistoryBucket>,
    extra: Vec<HistoryBucket>,
    from_ms: i64,
    to_ms: i64,
) -> Vec<HistoryBucket> {
    for bucket in extra {
        if bucket.bucket_ms < from_ms || bucket.bucket_ms >= to_ms {
            continue;
        }
        match stored.iter_mut().find(|b| b.bucket_ms == bucket.bucket_ms) {
            Some(same) => same.merge(&bucket),
            None => stored.push(bucket),
        }
    }
    stored.sort_by_key(|b| std::cmp::Reverse(b.bucket_ms));
    stored
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
