//! A host's history (`host_history`): one row per host and bucket of
//! [`BUCKET_SECONDS`](bosun_proto::history::BUCKET_SECONDS), holding sums, counts and highs
//! so that two writes of one bucket (a replica's and another's, or one written before a
//! restart and one after) add up to what one would have held. The hub gathers a bucket in
//! memory ([`crate::history`]) and writes it once it is over, so a poll writes nothing here.
//! The retention sweeper removes rows older than `history_days` host by host through the key
//! ([`super::retention`]); removing a host removes its rows.

use bosun_proto::history::HistoryPoint;
use uuid::Uuid;

use super::StoreResult;
use super::codec::ts;
use super::tx::{Dialect, Tx};

/// Most rows one read returns: fourteen days of five-minute buckets.
pub const MAX_POINTS: i64 = 14 * 24 * 12;

/// What the hub saw of one host in one bucket, as sums so that parts of it merge.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HistoryBucket {
    /// The host.
    pub host_id: Uuid,
    /// The bucket's start, Unix ms.
    pub bucket_ms: i64,
    /// Polls answered.
    pub polls: u32,
    /// Polls that carried (or kept) a host reading.
    pub samples: u32,
    /// CPU usage summed over the samples.
    pub cpu_sum: f64,
    /// Highest CPU usage.
    pub cpu_max: f64,
    /// Memory share summed over the samples.
    pub memory_sum: f64,
    /// Root-disk share summed over the samples.
    pub disk_sum: f64,
    /// Polls whose report named a pool.
    pub pool_samples: u32,
    /// Highest data fill of any pool.
    pub pool_max: f64,
    /// Backups first seen.
    pub backups: u32,
    /// Their bytes.
    pub backup_bytes: u64,
    /// Their seconds.
    pub backup_seconds: u64,
    /// Time spent recording the polls, microseconds.
    pub poll_us_sum: u64,
    /// Longest of those times.
    pub poll_us_max: u64,
}

impl HistoryBucket {
    /// An empty bucket of `host_id` starting at `bucket_ms`.
    pub fn new(host_id: Uuid, bucket_ms: i64) -> Self {
        Self {
            host_id,
            bucket_ms,
            ..Self::default()
        }
    }

    /// Adds another part of the same bucket.
    pub fn merge(&mut self, other: &Self) {
        self.polls = self.polls.saturating_add(other.polls);
        self.samples = self.samples.saturating_add(other.samples);
        self.cpu_sum += other.cpu_sum;
        self.cpu_max = self.cpu_max.max(other.cpu_max);
        self.memory_sum += other.memory_sum;
        self.disk_sum += other.disk_sum;
        self.pool_samples = self.pool_samples.saturating_add(other.pool_samples);
        self.pool_max = self.pool_max.max(other.pool_max);
        self.backups = self.backups.saturating_add(other.backups);
        self.backup_bytes = self.backup_bytes.saturating_add(other.backup_bytes);
        self.backup_seconds = self.backup_seconds.saturating_add(other.backup_seconds);
        self.poll_us_sum = self.poll_us_sum.saturating_add(other.poll_us_sum);
        self.poll_us_max = self.poll_us_max.max(other.poll_us_max);
    }

    /// The bucket as the API shows it (an error only for a start no timestamp can hold).
    pub fn point(&self) -> StoreResult<HistoryPoint> {
        let mean = |sum: f64, n: u32| (n > 0).then(|| (sum / f64::from(n)).clamp(0.0, 1.0));
        let polls = f64::from(self.polls.max(1));
        #[allow(clippy::cast_precision_loss)] // microseconds of a bucket: far below 2^52
        let (poll_sum, poll_max) = (self.poll_us_sum as f64, self.poll_us_max as f64);
        Ok(HistoryPoint {
            at: ts(self.bucket_ms)?,
            polls: self.polls,
            cpu: mean(self.cpu_sum, self.samples),
            cpu_max: (self.samples > 0).then_some(self.cpu_max.clamp(0.0, 1.0)),
            memory: mean(self.memory_sum, self.samples),
            disk: mean(self.disk_sum, self.samples),
            pool_max: (self.pool_samples > 0).then_some(self.pool_max.clamp(0.0, 1.0)),
            backups: self.backups,
            backup_bytes: self.backup_bytes,
            backup_seconds: self.backup_seconds,
            poll_ms: poll_sum / polls / 1000.0,
            poll_ms_max: poll_max / 1000.0,
        })
    }
}

/// Unix ms as a timestamp (an error for one out of range).
pub fn timestamp(ms: i64) -> StoreResult<jiff::Timestamp> {
    ts(ms)
}

/// Adds a bucket to its row (made when missing). A host removed meanwhile gets none.
const RECORD_SQLITE: &str = "INSERT INTO host_history (host_id, bucket_ms, polls, samples, \
    cpu_sum, cpu_max, memory_sum, disk_sum, pool_samples, pool_max, backups, backup_bytes, \
    backup_seconds, poll_us_sum, poll_us_max) \
    SELECT host_id, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15 \
    FROM hosts WHERE host_id = ?1 \
    ON CONFLICT (host_id, bucket_ms) DO UPDATE SET polls = polls + excluded.polls, \
    samples = samples + excluded.samples, cpu_sum = cpu_sum + excluded.cpu_sum, \
    cpu_max = MAX(cpu_max, excluded.cpu_max), memory_sum = memory_sum + excluded.memory_sum, \
    disk_sum = disk_sum + excluded.disk_sum, \
    pool_samples = pool_samples + excluded.pool_samples, \
    pool_max = MAX(pool_max, excluded.pool_max), backups = backups + excluded.backups, \
    backup_bytes = backup_bytes + excluded.backup_bytes, \
    backup_seconds = backup_seconds + excluded.backup_seconds, \
    poll_us_sum = poll_us_sum + excluded.poll_us_sum, \
    poll_us_max = MAX(poll_us_max, excluded.poll_us_max)";

/// [`RECORD_SQLITE`] as PostgreSQL spells it (`GREATEST`, the row named, the values typed).
const RECORD_POSTGRES: &str = "INSERT INTO host_history AS h (host_id, bucket_ms, polls, \
    samples, cpu_sum, cpu_max, memory_sum, disk_sum, pool_samples, pool_max, backups, \
    backup_bytes, backup_seconds, poll_us_sum, poll_us_max) \
    SELECT host_id, ?2::BIGINT, ?3::BIGINT, ?4::BIGINT, ?5::FLOAT8, ?6::FLOAT8, ?7::FLOAT8, \
    ?8::FLOAT8, ?9::BIGINT, ?10::FLOAT8, ?11::BIGINT, ?12::BIGINT, ?13::BIGINT, ?14::BIGINT, \
    ?15::BIGINT \
    FROM hosts WHERE host_id = ?1 \
    ON CONFLICT (host_id, bucket_ms) DO UPDATE SET polls = h.polls + excluded.polls, \
    samples = h.samples + excluded.samples, cpu_sum = h.cpu_sum + excluded.cpu_sum, \
    cpu_max = GREATEST(h.cpu_max, excluded.cpu_max), \
    memory_sum = h.memory_sum + excluded.memory_sum, disk_sum = h.disk_sum + excluded.disk_sum, \
    pool_samples = h.pool_samples + excluded.pool_samples, \
    pool_max = GREATEST(h.pool_max, excluded.pool_max), backups = h.backups + excluded.backups, \
    backup_bytes = h.backup_bytes + excluded.backup_bytes, \
    backup_seconds = h.backup_seconds + excluded.backup_seconds, \
    poll_us_sum = h.poll_us_sum + excluded.poll_us_sum, \
    poll_us_max = GREATEST(h.poll_us_max, excluded.poll_us_max)";

/// A host's rows from `?2` (inclusive) to `?3` (exclusive), newest first, at most `?4`.
const READ: &str = "SELECT bucket_ms, polls, samples, cpu_sum, cpu_max, memory_sum, disk_sum, \
    pool_samples, pool_max, backups, backup_bytes, backup_seconds, poll_us_sum, poll_us_max \
    FROM host_history WHERE host_id = ?1 AND bucket_ms >= ?2 AND bucket_ms < ?3 \
    ORDER BY bucket_ms DESC LIMIT ?4";

/// The most one written part adds to a row's byte, second and microsecond sums.
const PART_CAP: u64 = 1 << 53;

/// Writes `buckets`, each added to its row; returns how many rows they reached (a removed
/// host's are skipped).
pub(super) fn record(tx: Tx<'_, '_>, buckets: &[HistoryBucket]) -> StoreResult<usize> {
    let sql = match tx.dialect() {
        Dialect::Sqlite => RECORD_SQLITE,
        Dialect::Postgres => RECORD_POSTGRES,
    };
    let mut written = 0;
    for b in buckets {
        // A part is capped at 2^53 so that the parts of one bucket (replicas, restarts) add
        // up in SQL without overflowing either store's 64-bit integer, whatever a host reports.
        let big = |n: u64| i64::try_from(n.min(PART_CAP)).unwrap_or(i64::MAX);
        written += tx.execute(
            "record host history",
            sql,
            rusqlite::params![
                b.host_id.to_string(),
                b.bucket_ms,
                b.polls,
                b.samples,
                b.cpu_sum,
                b.cpu_max,
                b.memory_sum,
                b.disk_sum,
                b.pool_samples,
                b.pool_max,
                b.backups,
                big(b.backup_bytes),
                big(b.backup_seconds),
                big(b.poll_us_sum),
                big(b.poll_us_max),
            ],
        )?;
    }
    Ok(written)
}

/// `host_id`'s buckets in `[from_ms, to_ms)`, newest first, at most [`MAX_POINTS`].
pub(super) fn read(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    from_ms: i64,
    to_ms: i64,
) -> StoreResult<Vec<HistoryBucket>> {
    let host = host_id.to_string();
    let small = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
    let big = |n: i64| u64::try_from(n).unwrap_or(0);
    tx.query_map(
        "read host history",
        READ,
        rusqlite::params![host, from_ms, to_ms, MAX_POINTS],
        |r| {
            Ok(HistoryBucket {
                host_id,
                bucket_ms: r.get(0)?,
                polls: small(r.get(1)?),
                samples: small(r.get(2)?),
                cpu_sum: r.get(3)?,
                cpu_max: r.get(4)?,
                memory_sum: r.get(5)?,
                disk_sum: r.get(6)?,
                pool_samples: small(r.get(7)?),
                pool_max: r.get(8)?,
                backups: small(r.get(9)?),
                backup_bytes: big(r.get(10)?),
                backup_seconds: big(r.get(11)?),
                poll_us_sum: big(r.get(12)?),
                poll_us_max: big(r.get(13)?),
            })
        },
    )
}
