//! The allowance of failed operator authentications, per source address (decision 0055).
//!
//! A dashboard login with a wrong token and an admin API request whose bearer token is not a
//! live operator token both draw on the allowance of the address they came from: a bucket of
//! [`FAILURE_BURST`] failures that refills one every [`FAILURE_REFILL`]. While a source's bucket
//! is empty its attempts are answered 429 with `Retry-After` *before* the token is hashed or
//! looked up, so a guesser costs the hub a map lookup, not a store query. Nothing is counted
//! hub-wide: a source that has not failed is never refused, however many others have, so a
//! stranger cannot lock the operators out by failing from many addresses.
//!
//! What is bounded globally is memory: at most [`MAX_TRACKED`] sources are remembered. To make
//! room, the sources whose bucket has refilled (they remember nothing) are forgotten first, then
//! the one quiet the longest. An IPv6 source is its /64 (one subscriber's network), and an
//! IPv4 address seen through an IPv6 socket is that IPv4 address.
//!
//! The source is the TCP peer. The hub terminates TLS itself (agents authenticate with their
//! client certificates), so what stands in front of it is a TCP proxy or load balancer, whose
//! address is then every operator's source; no forwarded header is trusted.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::http::Extensions;
use parking_lot::Mutex;

/// Failed authentications one source may make at once before it has to wait.
pub const FAILURE_BURST: u32 = 10;

/// One more failed authentication is allowed per source per this interval (ten a minute).
pub const FAILURE_REFILL: Duration = Duration::from_secs(6);

/// Most sources whose failures are remembered at once.
pub const MAX_TRACKED: usize = 4_096;

/// A token bucket of failures.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(now: Instant) -> Self {
        Self {
            tokens: f64::from(FAILURE_BURST),
            at: now,
        }
    }

    /// Refills it up to `now`; `Err(wait)` when it holds less than one failure.
    fn admit(&mut self, now: Instant) -> Result<(), Duration> {
        let refilled = now.duration_since(self.at).as_secs_f64() / FAILURE_REFILL.as_secs_f64();
        *self = Self {
            tokens: (self.tokens + refilled).min(f64::from(FAILURE_BURST)),
            at: now,
        };
        if self.tokens >= 1.0 {
            Ok(())
        } else {
            Err(FAILURE_REFILL.mul_f64(1.0 - self.tokens))
        }
    }

    fn take(&mut self) {
        self.tokens = (self.tokens - 1.0).max(0.0);
    }

    /// Whether it would be full at `now` (it then remembers nothing).
    fn refilled_at(self, now: Instant) -> bool {
        let mut probe = self;
        let _ = probe.admit(now);
        probe.tokens >= f64::from(FAILURE_BURST)
    }
}

/// Where an attempt comes from, as the limiter counts it: an IPv4 address, or an IPv6
/// address's /64. `None` when the server did not record the peer (all such attempts are one
/// source).
pub fn source(peer: Option<IpAddr>) -> Option<IpAddr> {
    match peer? {
        IpAddr::V4(v4) => Some(IpAddr::V4(v4)),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => Some(IpAddr::V4(v4)),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                Some(IpAddr::V6(prefix.into()))
            }
        },
    }
}

/// The peer address of a request served with connect info.
pub fn peer(extensions: &Extensions) -> Option<IpAddr> {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip())
}

/// The per-source allowance shared by the dashboard's login and the admin API's bearer tokens.
#[derive(Debug, Default)]
pub struct AuthLimiter {
    by_source: Mutex<HashMap<Option<IpAddr>, Bucket>>,
}

impl AuthLimiter {
    /// `Ok` when an attempt from `peer` may be checked now, else how long it has to wait. A
    /// source with no failures remembered is always admitted.
    pub fn admit(&self, peer: Option<IpAddr>) -> Result<(), Duration> {
        let now = Instant::now();
        match self.by_source.lock().get_mut(&source(peer)) {
            Some(bucket) => bucket.admit(now),
            None => Ok(()),
        }
    }

    /// Takes one failure from `peer`'s allowance.
    pub fn failed(&self, peer: Option<IpAddr>) {
        let now = Instant::now();
        let key = source(peer);
        let mut by_source = self.by_source.lock();
        if !by_source.contains_key(&key) && by_source.len() >= MAX_TRACKED {
            forget_one(&mut by_source, now);
        }
        by_source
            .entry(key)
            .or_insert_with(|| Bucket::full(now))
            .take();
    }

    /// How many sources are remembered.
    pub fn tracked(&self) -> usize {
        self.by_source.lock().len()
    }
}

/// Makes room for one more source: drops every bucket that has refilled, else the one quiet
/// the longest.
fn forget_one(by_source: &mut HashMap<Option<IpAddr>, Bucket>, now: Instant) {
    by_source.retain(|_, bucket| !bucket.refilled_at(now));
    if by_source.len() >= MAX_TRACKED
        && let Some(oldest) = by_source
            .iter()
            .min_by_key(|(_, bucket)| bucket.at)
            .map(|(key, _)| *key)
    {
        by_source.remove(&oldest);
    }
}

/// The `Retry-After` value for `wait`: whole seconds, rounded up, at least one.
pub fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::net::Ipv4Addr;

    use super::*;

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().unwrap())
    }

    #[test]
    fn one_address_runs_dry_after_a_burst_and_the_others_do_not() {
        let limiter = AuthLimiter::default();
        for _ in 0..FAILURE_BURST {
            assert!(limiter.admit(ip("192.0.2.1")).is_ok());
            limiter.failed(ip("192.0.2.1"));
        }
        let wait = limiter.admit(ip("192.0.2.1")).unwrap_err();
        assert!(wait <= FAILURE_REFILL && wait > Duration::ZERO, "{wait:?}");
        assert!(limiter.admit(ip("192.0.2.2")).is_ok());
        // An IPv6 /64 is one source; its neighbour /64 is another.
        for _ in 0..FAILURE_BURST {
            limiter.failed(ip("2001:db8:0:1::1"));
        }
        assert!(limiter.admit(ip("2001:db8:0:1::ffff")).is_err());
        assert!(limiter.admit(ip("2001:db8:0:2::1")).is_ok());
        // An IPv4 peer seen through an IPv6 socket is the same IPv4 source.
        assert!(limiter.admit(ip("::ffff:192.0.2.1")).is_err());
    }

    #[test]
    fn failures_spread_over_many_addresses_never_refuse_a_clean_one() {
        let limiter = AuthLimiter::default();
        for n in 0..6_000u32 {
            let peer = Some(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n)));
            for _ in 0..FAILURE_BURST {
                limiter.failed(peer);
            }
        }
        assert!(limiter.admit(ip("203.0.113.200")).is_ok());
        assert!(limiter.tracked() <= MAX_TRACKED);
        // The newest are still remembered: the oldest made room.
        let newest = Some(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + 5_999)));
        assert!(limiter.admit(newest).is_err());
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(5_200)), 6);
        assert_eq!(retry_after_secs(Duration::from_secs(6)), 6);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
    }
}
