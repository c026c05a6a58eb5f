//! Connection hygiene: one guest must never starve another.
//!
//! Every accepted TCP connection first takes a [`ConnPermit`] from the [`SlotBook`]
//! ([`super::slots`]): caps per peer address, per guest (over all its addresses), for
//! addresses no guest is known by, and in all, with a share of the total reserved for each
//! known guest. A connection over a cap is closed before its TLS handshake, and a warning names
//! the peer and the cap — at most once per [`super::slots::CAP_LOG_INTERVAL`] per cap, with the
//! count of refusals it stands for.
//!
//! A connection that passed the caps gets the TLS handshake timeout (axum-server's acceptor),
//! then a [`GuardedStream`] that closes it when, with no request in flight:
//! - no byte arrived for `idle_timeout` since the last answer (or the handshake), or
//! - the first byte of a request head arrived but the head was not complete within
//!   `header_read_timeout` (the head counts as complete once the router sees the request).
//!
//! A request body that does not arrive in full within `body_timeout` is answered 408
//! (`body.rs`). The permit lives in the stream, so the caps count every open connection; each
//! request carries the connection's [`ConnSlot`], which the [`super::Caller`] extractor tells
//! which guest authenticated on it.

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

pub use super::slots::{Cap, ConnPermit, ConnSlot, SlotBook};
pub use crate::config::local_api::ConnectionLimits;

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
    slots: Arc<SlotBook>,
    limits: ConnectionLimits,
}

impl<A> LimitedAcceptor<A> {
    /// Wraps the TLS acceptor `inner`.
    pub fn new(inner: A, slots: Arc<SlotBook>, limits: ConnectionLimits) -> Self {
        Self {
            inner,
            slots,
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
        let permit = match self.slots.try_acquire(peer) {
            Ok(permit) => permit,
            Err(cap) => {
                self.slots.log_refusal(cap, peer);
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
            let slot = permit.slot();
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
                    slot,
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

/// A connection's service: marks a request in flight from its head to its answer, and hands
/// it the connection's [`ConnSlot`].
#[derive(Debug, Clone)]
pub struct InFlight<S> {
    inner: S,
    activity: SharedActivity,
    slot: ConnSlot,
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

impl<S, B> tower::Service<axum::http::Request<B>> for InFlight<S>
where
    S: tower::Service<axum::http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: axum::http::Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.slot.clone());
        let mark = RequestMark::begin(&self.activity);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            drop(mark);
            result
        })
    }
}
