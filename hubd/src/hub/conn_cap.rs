//! How many connections the hub holds open: what its file limit leaves after its own files.
//!
//! Agents long-poll, so a fleet keeps about one connection open per host. Without a cap, a
//! fleet larger than the file limit, or anyone who can reach the agent address and opens
//! connections without a handshake, takes the descriptors the store needs: a log sync that
//! cannot open the write-ahead log fails the polls it was for, and a database connection
//! cannot be opened. With the cap, a connection over it is closed before its TLS handshake,
//! its agent tries again later, and the hub keeps [`OWN_FILES`] for itself.
//!
//! A connection past its handshake holds its place only while it is used: with no request in
//! flight, it is closed [`TIMEOUTS`] after its last answer, or after the first byte of a head
//! that never completes ([`bosun_httpkit::conn`]). Without them, anyone who reaches the agent
//! address could fill the cap with connections that finished a handshake and then sent half a
//! request, and keep every agent out for as long as they held them.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bosun_httpkit::conn::{self, Guarded, InFlight, Named, Timeout, Timeouts};
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Files the hub keeps for itself besides its connections: the database and its log, read
/// connections, PostgreSQL sessions, artifact files, the webhook's and the sweeps' sockets.
pub const OWN_FILES: u64 = 512;

/// Connections the admin side holds when it has a listener of its own, out of the total.
pub const ADMIN_CONNECTIONS: usize = 256;

/// The fewest connections the hub holds, however low its file limit.
const FEWEST: usize = 64;

/// The connection timeouts of both sides ([`crate::HubConfig::connection_timeouts`]'s
/// default). Both are longer than a client's pool keeps an idle connection (reqwest's 90 s,
/// the agent's client), so a client never sends a request on a connection the hub is closing
/// at that moment. The header-read one is as long as the idle one: an agent's HTTP/2 client
/// may send a flow-control frame after an answer and nothing more until its next poll, which
/// starts that clock. A long-poll, and an answer the client is reading, are in flight and
/// never cut.
pub const TIMEOUTS: Timeouts = Timeouts {
    header_read: Duration::from_secs(120),
    idle: Duration::from_secs(120),
};

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

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Both APIs, the dashboard and the metrics, on one address.
    Both,
    /// The agent API alone.
    Agent,
    /// The admin API, the dashboard and the metrics, on an address of their own.
    Admin,
}

impl Side {
    /// The name in logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Both => "hub",
            Self::Agent => "agent API",
            Self::Admin => "admin API",
        }
    }

    /// The value of the metrics' `listener` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Both => "both",
            Self::Agent => "agent",
            Self::Admin => "admin",
        }
    }
}

/// Open connections of one listener, counted by the streams that hold them.
#[derive(Debug)]
pub struct ConnectionCap {
    side: Side,
    max: usize,
    open: Arc<Semaphore>,
    /// Every refusal, for the metrics.
    refusals: Counter,
    /// Every connection closed on a timeout, for the metrics.
    timeouts: TimeoutCounters,
    /// Refusals since the last log line.
    refused: AtomicU64,
    last_logged: Mutex<Option<Instant>>,
}

impl ConnectionCap {
    /// At most `max` connections open at once on the listener serving `side`; each refusal
    /// counts in `refusals`, each connection closed on a timeout in `timeouts`.
    pub fn new(side: Side, max: usize, refusals: Counter, timeouts: TimeoutCounters) -> Arc<Self> {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Self {
            side,
            max,
            open: Arc::new(Semaphore::new(max)),
            refusals,
            timeouts,
            refused: AtomicU64::new(0),
            last_logged: Mutex::new(None),
        })
    }

    /// What the listener serves.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The most connections held at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections open now (past the cap, in their handshake or after it).
    pub fn open(&self) -> usize {
        self.max.saturating_sub(self.open.available_permits())
    }

    /// Counts a refusal and logs the refusals of the last interval, at most once an interval.
    fn refused(&self) {
        self.refusals.inc();
        self.refused.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut last = self.last_logged.lock();
        if last.is_some_and(|at| now.duration_since(at) < REFUSAL_LOG_INTERVAL) {
            return;
        }
        *last = Some(now);
        drop(last);
        tracing::warn!(
            side = self.side.name(),
            max_connections = self.max,
            refused = self.refused.swap(0, Ordering::Relaxed),
            "connections refused: the hub holds as many as its file limit allows"
        );
    }
}

/// A listener's connections closed on each of the guard's timeouts.
#[derive(Debug, Clone)]
pub struct TimeoutCounters([Counter; 3]);

impl TimeoutCounters {
    fn count(&self, timeout: Timeout) {
        let i = match timeout {
            Timeout::Idle => 0,
            Timeout::HeaderRead => 1,
            Timeout::WriteStall => 2,
        };
        self.0[i].inc();
    }
}

type ListenerLabels = Vec<(String, String)>;

fn listener_labels(side: Side) -> ListenerLabels {
    vec![("listener".to_owned(), side.label().to_owned())]
}

fn timeout_labels(side: Side, timeout: Timeout) -> ListenerLabels {
    let mut labels = listener_labels(side);
    labels.push(("timeout".to_owned(), timeout.name().to_owned()));
    labels
}

/// The listeners' connections in the hub's metrics: open now, the most, those refused, and
/// those closed on a timeout.
#[derive(Debug)]
pub struct ConnectionMetrics {
    refused: Family<ListenerLabels, Counter>,
    timed_out: Family<ListenerLabels, Counter>,
    open: Family<ListenerLabels, Gauge>,
    max: Family<ListenerLabels, Gauge>,
    /// The listeners whose connections a scrape counts.
    listeners: Mutex<Vec<Arc<ConnectionCap>>>,
}

impl ConnectionMetrics {
    /// Registers the families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            refused: Family::default(),
            timed_out: Family::default(),
            open: Family::default(),
            max: Family::default(),
            listeners: Mutex::new(Vec::new()),
        };
        registry.register(
            "connections_refused",
            "Connections closed before their TLS handshake because the listener held as many as the hub's file limit allows, by listener (both, agent, admin)",
            metrics.refused.clone(),
        );
        registry.register(
            "connections_timed_out",
            "Connections closed because they held their place without a request (idle, header_read) or did not read an answer (write_stall), by listener and timeout",
            metrics.timed_out.clone(),
        );
        registry.register(
            "connections_open",
            "Connections the listener holds open now",
            metrics.open.clone(),
        );
        registry.register(
            "connections_max",
            "The most connections the listener holds open: the hub's file limit less its own files",
            metrics.max.clone(),
        );
        metrics
    }

    /// The cap of the listener serving `side`, at most `max` connections: its refusals and
    /// timeouts counted from 0 (so a rate sees the first), its connections counted at each
    /// scrape.
    pub fn cap(&self, side: Side, max: usize) -> Arc<ConnectionCap> {
        let refusals = self.refused.get_or_create(&listener_labels(side)).clone();
        let timeouts = TimeoutCounters(Timeout::ALL.map(|t| {
            self.timed_out
                .get_or_create(&timeout_labels(side, t))
                .clone()
        }));
        let cap = ConnectionCap::new(side, max, refusals, timeouts);
        self.listeners.lock().push(Arc::clone(&cap));
        cap
    }

    /// Sets each listener's open and most connections, for a scrape.
    pub fn fill(&self) {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        for cap in self.listeners.lock().iter() {
            let labels = listener_labels(cap.side());
            self.open.get_or_create(&labels).set(count(cap.open()));
            self.max.get_or_create(&labels).set(count(cap.max()));
        }
    }
}

/// The accept step: the cap, then the TLS handshake (`inner`), then the connection's
/// timeouts.
#[derive(Debug, Clone)]
pub struct CappedAcceptor<A> {
    inner: A,
    cap: Arc<ConnectionCap>,
    timeouts: Timeouts,
}

impl<A> CappedAcceptor<A> {
    /// Wraps the TLS acceptor `inner`.
    pub fn new(inner: A, cap: Arc<ConnectionCap>, timeouts: Timeouts) -> Self {
        Self {
            inner,
            cap,
            timeouts,
        }
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
    type Stream = Guarded<A::Stream, OwnedSemaphorePermit>;
    type Service = InFlight<A::Service, ()>;
    type Future = AcceptFuture<Self::Stream, Self::Service>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let Ok(permit) = Arc::clone(&self.cap.open).try_acquire_owned() else {
            self.cap.refused();
            drop(stream);
            return Box::pin(std::future::ready(Err(io::Error::other(
                "connection cap reached",
            ))));
        };
        let peer = match stream.peer_addr() {
            Ok(addr) => addr.ip(),
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let handshake = self.inner.accept(stream, service);
        let counters = self.cap.timeouts.clone();
        let named = Named {
            on_timeout: Some(Arc::new(move |timeout| counters.count(timeout))),
            ..Named::new(self.cap.side.name(), peer)
        };
        let timeouts = self.timeouts;
        Box::pin(async move {
            let (stream, service) = handshake.await?;
            Ok(conn::guard(stream, service, permit, timeouts, named, None))
        })
    }
}
