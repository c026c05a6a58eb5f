//! A host's history as the hub keeps it (`GET /v1/admin/hosts/{host_id}/history`): one point
//! per host and [`BUCKET_SECONDS`] of polls, newest first, for at most [`MAX_HOURS`].

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// How many seconds one point covers.
pub const BUCKET_SECONDS: u32 = 300;

/// The longest window one request may ask for: 14 days.
pub const MAX_HOURS: u32 = 14 * 24;

/// The window a request gets when it names none.
pub const DEFAULT_HOURS: u32 = 24;

/// A host's history over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostHistory {
    /// The host.
    pub host_id: Uuid,
    /// Seconds each point covers.
    pub bucket_seconds: u32,
    /// The window's start (the first point it may hold).
    pub from: Timestamp,
    /// The window's end (now).
    pub to: Timestamp,
    /// Points newest first; a stretch without polls has none.
    pub points: Vec<HistoryPoint>,
}

/// What the hub saw of one host in one bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryPoint {
    /// The bucket's start.
    pub at: Timestamp,
    /// Polls the hub answered in it.
    pub polls: u32,
    /// Mean CPU usage, a share (none: no poll carried a reading).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 0.0, maximum = 1.0))]
    pub cpu: Option<f64>,
    /// Highest CPU usage, a share.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 0.0, maximum = 1.0))]
    pub cpu_max: Option<f64>,
    /// Mean memory in use, a share.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 0.0, maximum = 1.0))]
    pub memory: Option<f64>,
    /// Mean root disk in use, a share.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 0.0, maximum = 1.0))]
    pub disk: Option<f64>,
    /// Highest data fill of the node's fullest pool, a share (none: no pool reported).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 0.0, maximum = 1.0))]
    pub pool_max: Option<f64>,
    /// Backups first reported in it.
    pub backups: u32,
    /// Their size together, bytes (those that name one).
    pub backup_bytes: u64,
    /// Their durations together, seconds (those that name one).
    pub backup_seconds: u64,
    /// Mean time the hub took to record a poll, milliseconds.
    pub poll_ms: f64,
    /// Longest such time, milliseconds.
    pub poll_ms_max: f64,
}
