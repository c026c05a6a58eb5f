//! How long a connection may hold its place without a request: the header-read and idle
//! timeouts of the hub's listeners and of the agent's local API.
//!
//! [`guard`] wraps an accepted connection (after its TLS handshake) in a [`Guarded`] stream and
//! its service in an [`InFlight`] one. The stream closes the connection when, with no request
//! in flight:
//! - no byte arrived for [`Timeouts::idle`] since the last answer (or the handshake), or
//! - a byte arrived but no request was complete within [`Timeouts::header_read`] of it: a
//!   head sent a byte at a time, an HTTP/2 client sending pings or settings and no request.
//!
//! A request in flight is never timed out here: a long-poll holds its answer for as long as
//! its handler says. The stream also holds the connection's permit `P`, so a cap counts the
//! connection until it closes.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A connection's timeouts while no request is in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Time from a request's first byte to its head being complete.
    pub header_read: Duration,
    /// Time a connection may sit without a request in flight and without a byte received.
    pub idle: Duration,
}

/// What a connection is doing, shared by its stream and its service.
#[derive(Debug)]
struct Activity {
    in_flight: usize,
    /// When the connection last became idle (handshake done, answer sent, byte written).
    idle_since: Instant,
    /// When the first byte of the next request arrived.
    head_started: Option<Instant>,
}

type SharedActivity = Arc<Mutex<Activity>>;

/// Guards a connection whose handshake is done: `stream` gets the [`Timeouts`], `service` marks
/// its requests in flight and puts `tag` (when given) into each request's extensions. `server`
/// and `peer` name the connection in the log line of a timeout.
pub fn guard<T, S, P, X>(
    stream: T,
    service: S,
    permit: P,
    timeouts: Timeouts,
    (server, peer): (&'static str, IpAddr),
    tag: Option<X>,
) -> (Guarded<T, P>, InFlight<S, X>) {
    let activity = Arc::new(Mutex::new(Activity {
        in_flight: 0,
        idle_since: Instant::now(),
        head_started: None,
    }));
    let stream = Guarded {
        inner: stream,
        activity: Arc::clone(&activity),
        sleep: Box::pin(tokio::time::sleep_until(Instant::now() + timeouts.idle)),
        armed_for: None,
        timeouts,
        server,
        peer,
        _permit: permit,
    };
    let service = InFlight {
        inner: service,
        activity,
        tag,
    };
    (stream, service)
}

/// A connection's stream that closes it on the header-read and idle timeouts, holding its
/// permit `P` until it closes.
#[derive(Debug)]
pub struct Guarded<T, P> {
    inner: T,
    activity: SharedActivity,
    sleep: Pin<Box<Sleep>>,
    armed_for: Option<Instant>,
    timeouts: Timeouts,
    server: &'static str,
    peer: IpAddr,
    _permit: P,
}

impl<T, P> Guarded<T, P> {
    /// Ready with an error once the connection's current deadline has passed.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let (deadline, what) = {
            let activity = self.activity.lock();
            if activity.in_flight > 0 {
                return Poll::Pending;
            }
            match activity.head_started {
                Some(started) => (started + self.timeouts.header_read, "header read"),
                None => (activity.idle_since + self.timeouts.idle, "idle"),
            }
        };
        if self.armed_for != Some(deadline) {
            self.sleep.as_mut().reset(deadline);
            self.armed_for = Some(deadline);
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                tracing::debug!(
                    server = self.server,
                    peer = %self.peer,
                    timeout = what,
                    "connection timed out"
                );
                Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{what} timeout"),
                ))
            }
        }
    }
}

impl<T: AsyncRead + Unpin, P: Unpin> AsyncRead for Guarded<T, P> {
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

impl<T: AsyncWrite + Unpin, P: Unpin> AsyncWrite for Guarded<T, P> {
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

/// A connection's service: marks a request in flight from its head to its answer, and puts
/// the connection's tag `X`, if it has one, into the request's extensions.
#[derive(Debug, Clone)]
pub struct InFlight<S, X> {
    inner: S,
    activity: SharedActivity,
    tag: Option<X>,
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

impl<S, X, B> tower::Service<axum::http::Request<B>> for InFlight<S, X>
where
    S: tower::Service<axum::http::Request<B>>,
    S::Future: Send + 'static,
    X: Clone + Send + Sync + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: axum::http::Request<B>) -> Self::Future {
        if let Some(tag) = &self.tag {
            request.extensions_mut().insert(tag.clone());
        }
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
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    type TestService = tower::util::BoxService<axum::http::Request<()>, (), io::Error>;

    fn guarded(
        stream: tokio::io::DuplexStream,
        timeouts: Timeouts,
    ) -> (
        Guarded<tokio::io::DuplexStream, ()>,
        InFlight<TestService, ()>,
    ) {
        let service =
            tower::util::BoxService::new(tower::service_fn(|_: axum::http::Request<()>| async {
                Ok::<(), io::Error>(())
            }));
        guard(
            stream,
            service,
            (),
            timeouts,
            ("test", IpAddr::from([127, 0, 0, 1])),
            None,
        )
    }

    /// Reads until the stream fails; the error's kind and when it came.
    async fn read_error(stream: &mut Guarded<tokio::io::DuplexStream, ()>) -> io::ErrorKind {
        let mut buf = [0u8; 16];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => return io::ErrorKind::UnexpectedEof,
                Ok(_) => {}
                Err(e) => return e.kind(),
            }
        }
    }

    /// Bounds the whole test: a guard that never fires fails it rather than hanging.
    const BOUND: Duration = Duration::from_secs(20);

    #[tokio::test]
    async fn a_silent_connection_closes_after_the_idle_timeout() {
        let timeouts = Timeouts {
            header_read: Duration::from_secs(60),
            idle: Duration::from_millis(400),
        };
        let (_client, server) = tokio::io::duplex(64);
        let (mut stream, _service) = guarded(server, timeouts);
        let started = Instant::now();
        let kind = tokio::time::timeout(BOUND, read_error(&mut stream)).await;
        assert_eq!(kind.unwrap(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= timeouts.idle);
    }

    #[tokio::test]
    async fn bytes_without_a_request_close_it_after_the_header_read_timeout() {
        // The idle timeout is far away: only the header-read timeout can close it in time.
        let timeouts = Timeouts {
            header_read: Duration::from_millis(400),
            idle: Duration::from_secs(60),
        };
        let (mut client, server) = tokio::io::duplex(64);
        let (mut stream, _service) = guarded(server, timeouts);
        let started = Instant::now();
        // A byte every 100 ms: the head never completes.
        let trickle = tokio::spawn(async move {
            loop {
                if client.write_all(b"G").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let kind = tokio::time::timeout(BOUND, read_error(&mut stream)).await;
        assert_eq!(kind.unwrap(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= timeouts.header_read);
        trickle.abort();
    }

    #[tokio::test]
    async fn a_request_in_flight_is_never_timed_out_and_its_answer_restarts_the_idle_clock() {
        use tower::Service as _;
        let timeouts = Timeouts {
            header_read: Duration::from_millis(200),
            idle: Duration::from_millis(200),
        };
        let (_client, server) = tokio::io::duplex(64);
        let (mut stream, mut service) = guarded(server, timeouts);
        let held = RequestMark::begin(&service.activity);
        // Five idle timeouts pass with the request held: the stream stays open.
        let mut buf = [0u8; 1];
        let early = tokio::time::timeout(timeouts.idle * 5, stream.read(&mut buf)).await;
        assert!(
            early.is_err(),
            "the connection stays open while a request is in flight"
        );
        drop(held);
        service.call(axum::http::Request::new(())).await.unwrap();
        let answered = Instant::now();
        let kind = tokio::time::timeout(BOUND, read_error(&mut stream)).await;
        assert_eq!(kind.unwrap(), io::ErrorKind::TimedOut);
        assert!(answered.elapsed() >= timeouts.idle - Duration::from_millis(5));
    }
}
