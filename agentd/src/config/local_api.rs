//! The local API's connection limits and timeouts (`[local_api]` in the agent's
//! configuration), here beside the parser that reads them; the local API
//! (`crate::guests::localapi`) enforces them.

use std::time::Duration;

/// Connection limits and timeouts of the local API (`[local_api]` in the agent config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections allowed from one peer address.
    pub max_per_peer: usize,
    /// Open connections allowed for one guest, over every address it is known by.
    pub max_per_guest: usize,
    /// Open connections allowed, in all, from addresses no guest is known by.
    pub max_unattributed: usize,
    /// Open connections allowed in all.
    pub max_total: usize,
    /// Time a client gets to finish the TLS handshake.
    pub handshake_timeout: Duration,
    /// Time a request head gets from its first byte to its last.
    pub header_read_timeout: Duration,
    /// Time a connection may sit without a request in flight and without a byte received.
    pub idle_timeout: Duration,
    /// Time a request body gets to arrive in full.
    pub body_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_per_peer: 32,
            max_per_guest: 32,
            max_unattributed: 64,
            max_total: 512,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(10),
        }
    }
}
