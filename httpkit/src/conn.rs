//! How long a connection may hold its place without a request: the header-read, idle and
//! write-stall timeouts of the hub's listeners and of the agent's local API.
//!
//! [`guard`] wraps an accepted connection (after its TLS handshake) in a [`Guarded`] stream and
//! its service in an [`InFlight`] one. A request is in flight from its head until its answer's
//! body is sent to the end (or dropped). The stream closes the connection when:
//! - with no request in flight, no byte arrived for [`Timeouts::idle`] since the last answer
//!   (or the handshake);
//! - with no request in flight, a byte arrived but no request was complete within
//!   [`Timeouts::header_read`] of it: a head sent a byte at a time, an HTTP/2 client sending
//!   pings or settings and no request;
//! - an answer could not be written for [`Timeouts::idle`]: a client that stopped reading.
//!
//! Otherwise a request in flight is never timed out here: a long-poll holds its answer for as
//! long as its handler says, and a large answer takes as long as the client keeps reading it.
//! The stream also holds the connection's permit `P`, so a cap counts the connection until it
//! closes.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A connection's timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Time from a request's first byte to its head being complete.
    pub header_read: Duration,
    /// Time a connection may sit without a request in flight and without a byte received,
    /// and time an answer may wait for the client to read it.
    pub idle: Duration,
}

/// The timeout that closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timeout {
    /// No byte and no request for [`Timeouts::idle`].
    Idle,
    /// Bytes but no complete request within [`Timeouts::header_read`].
    HeaderRead,
    /// An answer the client did not read for [`Timeouts::idle`].
    WriteStall,
}

impl Timeout {
    /// Every timeout, for counters made ahead of the first.
    pub const ALL: [Self; 3] = [Self::Idle, Self::HeaderRead, Self::WriteStall];

    /// Its name, in a log line and a metric's label.
    pub fn name(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::HeaderRead => "header_read",
            Self::WriteStall => "write_stall",
        }
    }
}

/// Told of each connection a guard closes on a timeout (a metric's counter).
pub type OnTimeout = Arc<dyn Fn(Timeout) + Send + Sync>;

/// Names a guarded connection: its server and peer in the log line of a timeout, and who is
/// told of one.
#[derive(Clone)]
pub struct Named {
    /// The server, as the log line names it.
    pub server: &'static str,
    /// The client's address.
    pub peer: IpAddr,
    /// Told of the timeout that closes the connection, if any does.
    pub on_timeout: Option<OnTimeout>,
}

impl Named {
    /// A connection of `server` from `peer`, its timeouts only logged.
    pub fn new(server: &'static str, peer: IpAddr) -> Self {
        Self {
            server,
            peer,
            on_timeout: None,
        }
    }
}

impl std::fmt::Debug for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Named")
            .field("server", &self.server)
            .field("peer", &self.peer)
            .field("on_timeout", &self.on_timeout.is_some())
            .finish()
    }
}

/// What a connection is doing, shared by its stream and its service.
#[derive(Debug)]
struct Activity {
    in_flight: usize,
    /// When the connection last became idle (handshake done, answer sent).
    idle_since: Instant,
    /// When the first byte of the next request arrived.
    head_started: Option<Instant>,
}

type SharedActivity = Arc<Mutex<Activity>>;

/// Guards a connection whose handshake is done: `stream` gets the [`Timeouts`], `service` marks
/// its requests in flight and puts `tag` (when given) into each request's extensions. `named`
/// names the connection in the log line of a timeout, and says who is told of one.
pub fn guard<T, S, P, X>(
    stream: T,
    service: S,
    permit: P,
    timeouts: Timeouts,
    named: Named,
    tag: Option<X>,
) -> (Guarded<T, P>, InFlight<S, X>) {
    let now = Instant::now();
    let activity = Arc::new(Mutex::new(Activity {
        in_flight: 0,
        idle_since: now,
        head_started: None,
    }));
    let stream = Guarded {
        inner: stream,
        activity: Arc::clone(&activity),
        read_timer: Timer::new(now + timeouts.idle),
        write_timer: Timer::new(now + timeouts.idle),
        write_waiting_since: None,
        timeouts,
        named,
        _permit: permit,
    };
    let service = InFlight {
        inner: service,
        activity,
        tag,
    };
    (stream, service)
}

/// A sleep re-armed lazily: a deadline that moves later (each answer moves the idle one) leaves
/// the sleep where it is, and only when it fires is it set again for the deadline then. A
/// connection's timer touches the runtime's timer wheel about once a timeout, not once a
/// request.
#[derive(Debug)]
struct Timer {
    sleep: Pin<Box<Sleep>>,
    armed_for: Instant,
}

impl Timer {
    fn new(deadline: Instant) -> Self {
        Self {
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            armed_for: deadline,
        }
    }

    /// Ready once `deadline` has passed; wakes the task then.
    fn poll_until(&mut self, deadline: Instant, cx: &mut Context<'_>) -> Poll<()> {
        if deadline < self.armed_for {
            self.arm(deadline);
        }
        loop {
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if self.armed_for >= deadline {
                return Poll::Ready(());
            }
            // It fired for a deadline that has since moved later.
            self.arm(deadline);
        }
    }

    fn arm(&mut self, deadline: Instant) {
        self.sleep.as_mut().reset(deadline);
        self.armed_for = deadline;
    }
}

/// A connection's stream that closes it on its timeouts, holding its permit `P` until it
/// closes.
#[derive(Debug)]
pub struct Guarded<T, P> {
    inner: T,
    activity: SharedActivity,
    read_timer: Timer,
    write_timer: Timer,
    /// Since when a write has waited for the client to read, if one does.
    write_waiting_since: Option<Instant>,
    timeouts: Timeouts,
    named: Named,
    _permit: P,
}

impl<T, P> Guarded<T, P> {
    /// Ready with an error once the deadline of a connection waiting to read has passed.
    fn poll_read_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let (deadline, what) = {
            let activity = self.activity.lock();
            if activity.in_flight > 0 {
                return Poll::Pending;
            }
            match activity.head_started {
                Some(started) => (started + self.timeouts.header_read, Timeout::HeaderRead),
                None => (activity.idle_since + self.timeouts.idle, Timeout::Idle),
            }
        };
        match self.read_timer.poll_until(deadline, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => Poll::Ready(self.timed_out(what)),
        }
    }

    /// Ready with an error once a write has waited for the client to read for the idle time.
    fn poll_write_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let since = *self.write_waiting_since.get_or_insert_with(Instant::now);
        match self.write_timer.poll_until(since + self.timeouts.idle, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => Poll::Ready(self.timed_out(Timeout::WriteStall)),
        }
    }

    fn timed_out(&mut self, what: Timeout) -> io::Error {
        tracing::debug!(
            server = self.named.server,
            peer = %self.named.peer,
            timeout = what.name(),
            "connection timed out"
        );
        // Told once: a connection closes on its first timeout, whatever is polled after it.
        if let Some(tell) = self.named.on_timeout.take() {
            tell(what);
        }
        io::Error::new(io::ErrorKind::TimedOut, format!("{} timeout", what.name()))
    }

    /// A write's outcome: progress ends a wait, a wait runs against its deadline.
    fn written<R>(
        &mut self,
        polled: Poll<io::Result<R>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<R>> {
        match polled {
            Poll::Pending => self.poll_write_deadline(cx).map(Err),
            done => {
                self.write_waiting_since = None;
                done
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
            Poll::Pending => this.poll_read_deadline(cx).map(Err),
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
        let polled = Pin::new(&mut this.inner).poll_write(cx, data);
        this.written(polled, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.written(polled, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.written(polled, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.written(polled, cx)
    }
}

/// A connection's service: marks a request in flight from its head to the end of its answer's
/// body, and puts the connection's tag `X`, if it has one, into the request's extensions.
#[derive(Debug, Clone)]
pub struct InFlight<S, X> {
    inner: S,
    activity: SharedActivity,
    tag: Option<X>,
}

/// Ends a request's in-flight mark when its answer is sent or dropped.
#[derive(Debug)]
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

/// An answer's body, holding its request's mark until the last frame is out.
struct MarkedBody {
    inner: Body,
    mark: Option<RequestMark>,
}

impl HttpBody for MarkedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.mark = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl<S, X, B> tower::Service<axum::http::Request<B>> for InFlight<S, X>
where
    S: tower::Service<axum::http::Request<B>, Response = axum::http::Response<Body>>,
    S::Future: Send + 'static,
    X: Clone + Send + Sync + 'static,
{
    type Response = axum::http::Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

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
            let response = answer.await?;
            Ok(response.map(|body| {
                if body.is_end_stream() {
                    drop(mark);
                    body
                } else {
                    Body::new(MarkedBody {
                        inner: body,
                        mark: Some(mark),
                    })
                }
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tower::Service as _;

    type Answer = axum::http::Response<Body>;
    type TestService = tower::util::BoxService<axum::http::Request<()>, Answer, io::Error>;

    /// A guarded end of a pipe whose service answers with the body `answer` makes.
    fn guarded(
        stream: tokio::io::DuplexStream,
        timeouts: Timeouts,
        answer: fn() -> Body,
    ) -> (
        Guarded<tokio::io::DuplexStream, ()>,
        InFlight<TestService, ()>,
    ) {
        let service = tower::util::BoxService::new(tower::service_fn(
            move |_: axum::http::Request<()>| async move {
                Ok::<_, io::Error>(axum::http::Response::new(answer()))
            },
        ));
        guard(
            stream,
            service,
            (),
            timeouts,
            Named::new("test", IpAddr::from([127, 0, 0, 1])),
            None,
        )
    }

    /// Reads until the stream fails; the error's kind.
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

    /// Bounds every wait: a guard that never fires fails the test rather than hanging it.
    const BOUND: Duration = Duration::from_secs(20);

    #[tokio::test]
    async fn a_silent_connection_closes_after_the_idle_timeout() {
        let timeouts = Timeouts {
            header_read: Duration::from_secs(60),
            idle: Duration::from_millis(400),
        };
        let (_client, server) = tokio::io::duplex(64);
        let told = Arc::new(Mutex::new(Vec::new()));
        let tell = Arc::clone(&told);
        let named = Named {
            on_timeout: Some(Arc::new(move |t| tell.lock().push(t))),
            ..Named::new("test", IpAddr::from([127, 0, 0, 1]))
        };
        let (mut stream, _service) = guard(server, (), (), timeouts, named, None::<()>);
        let started = Instant::now();
        let kind = tokio::time::timeout(BOUND, read_error(&mut stream)).await;
        assert_eq!(kind.unwrap(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= timeouts.idle);
        // Polled again after it, the stream fails again but is told of one timeout.
        assert_eq!(read_error(&mut stream).await, io::ErrorKind::TimedOut);
        assert_eq!(*told.lock(), [Timeout::Idle]);
    }

    #[tokio::test]
    async fn bytes_without_a_request_close_it_after_the_header_read_timeout() {
        // The idle timeout is far away: only the header-read timeout can close it in time.
        let timeouts = Timeouts {
            header_read: Duration::from_millis(400),
            idle: Duration::from_secs(60),
        };
        let (mut client, server) = tokio::io::duplex(64);
        let (mut stream, _service) = guarded(server, timeouts, Body::empty);
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
        let timeouts = Timeouts {
            header_read: Duration::from_millis(200),
            idle: Duration::from_millis(200),
        };
        let (_client, server) = tokio::io::duplex(64);
        let (mut stream, mut service) = guarded(server, timeouts, Body::empty);
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

    #[tokio::test]
    async fn an_answer_moves_the_idle_deadline_of_a_connection_already_waiting() {
        let timeouts = Timeouts {
            header_read: Duration::from_secs(60),
            idle: Duration::from_millis(400),
        };
        let (_client, server) = tokio::io::duplex(64);
        let (mut stream, mut service) = guarded(server, timeouts, Body::empty);
        // The stream waits with its timer set for the first idle deadline...
        let reading = tokio::spawn(async move { read_error(&mut stream).await });
        tokio::time::sleep(timeouts.idle * 3 / 4).await;
        // ...when an answer moves the deadline later: the timer set first must not close it.
        service.call(axum::http::Request::new(())).await.unwrap();
        let answered = Instant::now();
        let kind = tokio::time::timeout(BOUND, reading).await.unwrap().unwrap();
        assert_eq!(kind, io::ErrorKind::TimedOut);
        assert!(
            answered.elapsed() >= timeouts.idle - Duration::from_millis(5),
            "closed {:?} after the answer",
            answered.elapsed()
        );
    }

    #[tokio::test]
    async fn an_answer_still_being_sent_keeps_its_request_in_flight() {
        let timeouts = Timeouts {
            header_read: Duration::from_millis(200),
            idle: Duration::from_millis(200),
        };
        // An answer of two frames: the test takes the first, waits, then the second.
        fn two_frames() -> Body {
            Body::from_stream(futures::stream::iter([
                Ok::<_, io::Error>(Bytes::from_static(b"first")),
                Ok(Bytes::from_static(b"second")),
            ]))
        }
        let (_client, server) = tokio::io::duplex(64);
        let (mut stream, mut service) = guarded(server, timeouts, two_frames);
        let answer = service.call(axum::http::Request::new(())).await.unwrap();
        let mut body = answer.into_body();
        let first = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        assert!(first.is_some());
        // Five idle timeouts with the answer half sent: the stream stays open.
        let mut buf = [0u8; 1];
        let early = tokio::time::timeout(timeouts.idle * 5, stream.read(&mut buf)).await;
        assert!(
            early.is_err(),
            "the connection stays open while its answer is sent"
        );
        let rest = axum::body::to_bytes(body, 64).await.unwrap();
        assert_eq!(&rest[..], b"second");
        let sent = Instant::now();
        let kind = tokio::time::timeout(BOUND, read_error(&mut stream)).await;
        assert_eq!(kind.unwrap(), io::ErrorKind::TimedOut);
        assert!(sent.elapsed() >= timeouts.idle - Duration::from_millis(5));
    }

    #[tokio::test]
    async fn an_answer_the_client_stops_reading_closes_it_after_the_idle_timeout() {
        let timeouts = Timeouts {
            header_read: Duration::from_secs(60),
            idle: Duration::from_millis(400),
        };
        // The client never reads: the pipe holds 64 bytes, then each write waits.
        let (_client, server) = tokio::io::duplex(64);
        let (mut stream, service) = guarded(server, timeouts, Body::empty);
        let _in_flight = RequestMark::begin(&service.activity);
        let started = Instant::now();
        let written = tokio::time::timeout(BOUND, stream.write_all(&[0u8; 4096])).await;
        assert_eq!(
            written.unwrap().unwrap_err().kind(),
            io::ErrorKind::TimedOut
        );
        assert!(started.elapsed() >= timeouts.idle);
    }
}
