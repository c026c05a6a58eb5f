//! How many connections the hub holds open: what its file limit leaves after its own files.
//!
//! Agents long-poll, so a fleet keeps about one connection open per host. Without a cap, a
//! fleet larger than the file limit, or anyone who can reach the agent address and opens
//! connections without a handshake, takes the descriptors the store needs: a log sync that
//! cannot open the write-ahead log fails the polls it was for, and a database connection
//! cannot be opened. With the cap, a connection over it is closed before its TLS handshake,
//! its agent tries again later, and the hub keeps [`OWN_FILES`] for itself.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Files the hub keeps for itself besides its connections: the database and its log, read
/// connections, PostgreSQL sessions, artifact files, the webhook's and the sweeps' sockets.
pub const OWN_FILES: u64 = 512;

/// Connections the admin side holds when it has a listener of its own, out of the total.
pub const ADMIN_CONNECTIONS: usize = 256;

/// The fewest connections the hub holds, however low its file limit.
const FEWEST: usize = 64;

/// How often the refusals are logged, at most: one line with how many there were.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Connections the hub may hold open in all: the process's file limit less [`OWN_FILES`]. The
/// limit is raised to its ceiling first where the process may (a hub run by hand; the unit's
/// system-call filter refuses it, and the unit sets the limit itself).
pub fn total() -> usize {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(err) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(error = %err, "the file limit was not raised");
        }
    }
    let files = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    usize::try_from(files.saturating_sub(OWN_FILES))
        .unwrap_or(usize::MAX)
        .max(FEWEST)
}

/// Open connections of one listener, counted by the streams that hold them.
#[derive(Debug)]
pub struct ConnectionCap {
    side: &'static str,
    max: usize,
    open: Arc<Semaphore>,
    refused: AtomicU64,
    last_logged: Mutex<Option<Instant>>,
}

impl ConnectionCap {
    /// At most `max` connections open at once on the listener serving `side`.
    pub fn new(side: &'static str, max: usize) -> Arc<Self> {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Self {
            side,
            max,
            open: Arc::new(Semaphore::new(max)),
            refused: AtomicU64::new(0),
            last_logged: Mutex::new(None),
        })
    }

    /// The listener's side, for logs.
    pub fn side(&self) -> &'static str {
        self.side
    }

    /// The most connections held at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Counts a refusal and logs the refusals of the last interval, at most once an interval.
    fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut last = self.last_logged.lock();
        if last.is_some_and(|at| now.duration_since(at) < REFUSAL_LOG_INTERVAL) {
            return;
        }
        *last = Some(now);
        drop(last);
        tracing::warn!(
            side = self.side,
            max_connections = self.max,
            refused = self.refused.swap(0, Ordering::Relaxed),
            "connections refused: the hub holds as many as its file limit allows"
        );
    }
}

/// The accept step: the cap, then the TLS handshake (`inner`).
#[derive(Debug, Clone)]
pub struct CappedAcceptor<A> {
    inner: A,
    cap: Arc<ConnectionCap>,
}

impl<A> CappedAcceptor<A> {
    /// Wraps the TLS acceptor `inner`.
    pub fn new(inner: A, cap: Arc<ConnectionCap>) -> Self {
        Self { inner, cap }
    }
}

type AcceptFuture<T, S> = Pin<Box<dyn Future<Output = io::Result<(T, S)>> + Send>>;

impl<A, S> axum_server::accept::Accept<TcpStream, S> for CappedAcceptor<A>
where
    A: axum_server::accept::Accept<TcpStream, S>,
    A::Future: Send + 'static,
    A::Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    A::Service: Send + 'static,
{
    type Stream = Held<A::Stream>;
    type Service = A::Service;
    type Future = AcceptFuture<Self::Stream, Self::Service>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let Ok(permit) = Arc::clone(&self.cap.open).try_acquire_owned() else {
            self.cap.refused();
            drop(stream);
            return Box::pin(std::future::ready(Err(io::Error::other(
                "connection cap reached",
            ))));
        };
        let handshake = self.inner.accept(stream, service);
        Box::pin(async move {
            let (stream, service) = handshake.await?;
            Ok((
                Held {
                    inner: stream,
                    _permit: permit,
                },
                service,
            ))
        })
    }
}

/// A connection's stream, holding its place under the cap until it closes.
#[derive(Debug)]
pub struct Held<T> {
    inner: T,
    _permit: OwnedSemaphorePermit,
}

impl<T: AsyncRead + Unpin> AsyncRead for Held<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Held<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
