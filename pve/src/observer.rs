//! What a [`PveClient`](crate::PveClient) tells about each request it sends, so a daemon
//! can count its Proxmox calls without this crate knowing the daemon's metrics.

use std::fmt;
use std::time::Duration;

use crate::catalogue::Endpoint;

/// How one Proxmox request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOutcome {
    /// Proxmox answered with this HTTP status.
    Answered(u16),
    /// The request was not sent (connection refused, TLS failure).
    NotSent,
    /// The request was sent and no answer came (timeout, connection lost).
    NoAnswer,
}

/// Told about every request a client sends, each retry again.
pub trait RequestObserver: Send + Sync + fmt::Debug {
    /// A request to `endpoint` (the catalogue's method and path template, never a
    /// filled-in path) ended with `outcome`, `elapsed` after it was sent.
    fn request(&self, endpoint: Endpoint, outcome: RequestOutcome, elapsed: Duration);
}
