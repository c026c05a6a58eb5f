//! Connection hygiene: one guest must never starve another.
//!
//! Every accepted TCP connection first takes a [`ConnPermit`] from the [`ConnLimiter`]: at most
//! `max_per_peer` connections per peer address and `max_total` in all. A connection over a cap
//! is closed before its TLS handshake, and a warning names the peer and the cap — at most once
//! per [`CAP_LOG_INTERVAL`] per cap, with the count of refusals it stands for.
//!
//! A connection that passed the caps gets the TLS handshake timeout (axum-server's acceptor),
//! then a [`GuardedStream`] that closes it when, with no request in flight:
//! - no byte arrived for `idle_timeout` since the last answer (or the handshake), or
//! - the first byte of a request head arrived but the head was not complete within
//!   `header_read_timeout` (the head counts as complete once the router sees the request).
//!
//! A request body that does not arrive in full within `body_timeout` is answered 408
//! (`body.rs`). The permit lives in the stream, so the caps count every open connection.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// How often, at most, a refusal by one cap is logged.
pub const CAP_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Connection limits and timeouts of the local API (`[local_api]` in the agent config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections allowed from one peer address.
    pub max_per_peer: usize,
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
            max_total: 512,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(10),
        }
    }
}

/// Which cap refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// `max_per_peer`.
    PerPeer,
    /// `max_total`.
    Total,
}

impl Cap {
    fn name(self) -> &'static str {
        match self {
            Self::PerPeer => "per_peer",
            Self::Total => "total",
        }
    }
}

/// Counts open connections per peer and in all.
#[derive(Debug)]
pub struct ConnLimiter {
    max_per_peer: usize,
    max_total: usize,
    state: Mutex<Counts>,
    per_peer_log: Mutex<CapLog>,
    total_log: Mutex<CapLog>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
}

/// The rate limit of one cap's warning.
#[derive(Debug, Default)]
struct CapLog {
    last: Option<Instant>,
    suppressed: u64,
}

impl ConnLimiter {
    /// A limiter with `limits`' caps.
    pub fn new(limits: &ConnectionLimits) -> Arc<Self> {
        Arc::new(Self {
            max_per_peer: limits.max_per_peer,
            max_total: limits.max_total,
            state: Mutex::new(Counts::default()),
            per_peer_log: Mutex::new(CapLog::default()),
            total_log: Mutex::new(CapLog::default()),
        })
    }

    /// A permit for one more connection from `peer`, or the cap that refuses it.
    pub fn try_acquire(self: &Arc<Self>, peer: IpAddr) -> Result<ConnPermit, Cap> {
        let peer = peer.to_canonical();
        let mut counts = self.state.lock();
        if counts.total >= self.max_total {
            return Err(Cap::Total);
        }
        let mine = counts.per_peer.entry(peer).or_insert(0);
        if *mine >= self.max_per_peer {
            return Err(Cap::PerPeer);
        }
        *mine += 1;
        counts.total += 1;
        Ok(ConnPermit {
            limiter: Arc::clone(self),
            peer,
        })
    }

    /// Open connections from `peer` and in all.
    pub fn open(&self, peer: IpAddr) -> (usize, usize) {
        let counts = self.state.lock();
        let mine = counts
            .per_peer
            .get(&peer.to_canonical())
            .copied()
            .unwrap_or(0);
        (mine, counts.total)
    }

    /// Logs a refusal by `cap`, unless one was logged less than [`CAP_LOG_INTERVAL`] ago.
    fn log_refusal(&self, cap: Cap, peer: IpAddr) {
        let (log, limit) = match cap {
            Cap::PerPeer => (&self.per_peer_log, self.max_per_peer),
            Cap::Total => (&self.total_log, self.max_total),
        };
        let mut log = log.lock();
        let now = Instant::now();
        if log
            .last
            .is_some_and(|last| now.duration_since(last) < CAP_LOG_INTERVAL)
        {
            log.suppressed = log.suppressed.saturating_add(1);
            return;
        }
        let suppressed = std::mem::take(&mut log.suppressed);
        log.last = Some(now);
        drop(log);
        tracing::warn!(
            peer = %peer,
            cap = cap.name(),
            limit,
            refused_since_last_line = suppressed,
            "local api connection refused: connection cap reached"
        );
    }

    fn release(&self, peer: IpAddr) {
        let mut counts = self.state.lock();
        counts.total = counts.total.saturating_sub(1);
        if let Some(mine) = counts.per_peer.get_mut(&peer) {
            *mine = mine.saturating_sub(1);
            if *mine == 0 {
                counts.per_peer.remove(&peer);
            }
        }
    }
}

/// One open connection, counted until dropped.
#[derive(Debug)]
pub struct ConnPermit {
    limiter: Arc<ConnLimiter>,
    peer: IpAddr,
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        self.limiter.release(self.peer);
    }
}

/// What a connection is doing, shared by its stream and its service.
#[derive(Debug)]
struct Activity {
    in_flight: usize,
    /// When the connection last became idle (handshake done, answer sent, byte written).
    idle_since: Instant,
    /// When the first byte of the next request head arrived.
    head_started: Option<Instant>,
}

type SharedActivity = Arc<Mutex<Activity>>;

/// The accept step of the local API: caps, then the TLS handshake (`inner`), then timeouts.
#[derive(Debug, Clone)]
pub struct LimitedAcceptor<A> {
    inner: A,
    limiter: Arc<ConnLimiter>,
    limits: ConnectionLimits,
}

impl<A> LimitedAcceptor<A> {
    /// Wraps the TLS acceptor `inner`.
    pub fn new(inner: A, limiter: Arc<ConnLimiter>, limits: ConnectionLimits) -> Self {
        Self {
            inner,
            limiter,
            limits,
        }
    }
}

type AcceptFuture<T, S> = Pin<Box<dyn Future<Output = io::Result<(T, S)>> + Send>>;

impl<A, S> axum_server::accept::Accept<TcpStream, S> for LimitedAcceptor<A>
where
    A: axum_server::accept::Accept<TcpStream, S>,
    A::Future: Send + 'static,
    A::Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    A::Service: Send + 'static,
{
    type Stream = GuardedStream<A::Stream>;
    type Service = InFlight<A::Service>;
    type Future = AcceptFuture<Self::Stream, Self::Service>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let peer = match stream.peer_addr() {
            Ok(addr) => addr.ip(),
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let permit = match self.limiter.try_acquire(peer) {
            Ok(permit) => permit,
            Err(cap) => {
                self.limiter.log_refusal(cap, peer);
                drop(stream);
                return Box::pin(std::future::ready(Err(io::Error::other(
                    "connection cap reached",
                ))));
            }
        };
        // Answers are small and written whole: no reason to let Nagle hold them back.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(peer = %peer, error = %e, "TCP_NODELAY not set");
        }
        let handshake = self.inner.accept(stream, service);
        let limits = self.limits;
        Box::pin(async move {
            let (stream, service) = handshake.await?;
            let activity = Arc::new(Mutex::new(Activity {
                in_flight: 0,
                idle_since: Instant::now(),
                head_started: None,
            }));
            let stream = GuardedStream {
                inner: stream,
                activity: Arc::clone(&activity),
                sleep: Box::pin(tokio::time::sleep_until(
                    Instant::now() + limits.idle_timeout,
                )),
                armed_for: None,
                header_read_timeout: limits.header_read_timeout,
                idle_timeout: limits.idle_timeout,
                peer,
                _permit: permit,
            };
            Ok((
                stream,
                InFlight {
                    inner: service,
                    activity,
                },
            ))
        })
    }
}

/// A connection's stream that closes it on the header-read and idle timeouts.
#[derive(Debug)]
pub struct GuardedStream<T> {
    inner: T,
    activity: SharedActivity,
    sleep: Pin<Box<Sleep>>,
    armed_for: Option<Instant>,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    peer: IpAddr,
    _permit: ConnPermit,
}

impl<T> GuardedStream<T> {
    /// Ready with an error once the connection's current deadline has passed.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let (deadline, what) = {
            let activity = self.activity.lock();
            if activity.in_flight > 0 {
                return Poll::Pending;
            }
            match activity.head_started {
                Some(started) => (started + self.header_read_timeout, "header read"),
                None => (activity.idle_since + self.idle_timeout, "idle"),
            }
        };
        if self.armed_for != Some(deadline) {
            self.sleep.as_mut().reset(deadline);
            self.armed_for = Some(deadline);
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                tracing::debug!(peer = %self.peer, timeout = what, "local api connection timed out");
                Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{what} timeout"),
                ))
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for GuardedStream<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    let mut activity = this.activity.lock();
                    if activity.in_flight == 0 && activity.head_started.is_none() {
                        activity.head_started = Some(Instant::now());
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.poll_deadline(cx).map(Err),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for GuardedStream<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, data) {
            Poll::Ready(Ok(written)) => {
                if written > 0 {
                    let mut activity = this.activity.lock();
                    if activity.in_flight == 0 {
                        activity.idle_since = Instant::now();
                    }
                }
                Poll::Ready(Ok(written))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.poll_deadline(cx).map(Err),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending => this.poll_deadline(cx).map(Err),
            done => done,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Pending => this.poll_deadline(cx).map(Err),
            done => done,
        }
    }
}

/// A connection's service: marks a request in flight from its head to its answer.
#[derive(Debug, Clone)]
pub struct InFlight<S> {
    inner: S,
    activity: SharedActivity,
}

/// Ends a request's in-flight mark when its answer is ready or it is dropped.
struct RequestMark(SharedActivity);

impl RequestMark {
    fn begin(activity: &SharedActivity) -> Self {
        let mut state = activity.lock();
        state.in_flight += 1;
        state.head_started = None;
        drop(state);
        Self(Arc::clone(activity))
    }
}

impl Drop for RequestMark {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            state.idle_since = Instant::now();
        }
    }
}

impl<S, R> tower::Service<R> for InFlight<S>
where
    S: tower::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let mark = RequestMark::begin(&self.activity);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            drop(mark);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_count_per_peer_and_in_all_and_free_on_drop() {
        let limits = ConnectionLimits {
            max_per_peer: 2,
            max_total: 3,
            ..ConnectionLimits::default()
        };
        let limiter = ConnLimiter::new(&limits);
        let a: IpAddr = "127.0.0.2".parse().unwrap_or(IpAddr::from([127, 0, 0, 2]));
        let b: IpAddr = "::ffff:127.0.0.3"
            .parse()
            .unwrap_or(IpAddr::from([127, 0, 0, 3]));
        let a1 = limiter.try_acquire(a);
        let a2 = limiter.try_acquire(a);
        assert!(a1.is_ok() && a2.is_ok());
        assert_eq!(limiter.try_acquire(a).err(), Some(Cap::PerPeer));
        let b1 = limiter.try_acquire(b);
        assert!(b1.is_ok());
        assert_eq!(
            limiter.try_acquire(IpAddr::from([127, 0, 0, 3])).err(),
            Some(Cap::Total)
        );
        assert_eq!(limiter.open(IpAddr::from([127, 0, 0, 3])), (1, 3));
        drop(a1);
        assert_eq!(limiter.open(a), (1, 2));
        assert!(limiter.try_acquire(a).is_ok());
        drop(a2);
        drop(b1);
    }
}
