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
//! then the header-read and idle timeouts of [`bosun_httpkit::conn`]. A request body that
//! does not arrive in full within `body_timeout` is answered 408 (`body.rs`). The permit
//! lives in the stream, so the caps count every open connection; each request carries the
//! connection's [`ConnSlot`], which the [`super::Caller`] extractor tells which guest
//! authenticated on it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use bosun_httpkit::conn::{self, Guarded, InFlight, Timeouts};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

pub use super::slots::{Cap, ConnPermit, ConnSlot, SlotBook};
pub use crate::config::local_api::ConnectionLimits;

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
    type Stream = Guarded<A::Stream, ConnPermit>;
    type Service = InFlight<A::Service, ConnSlot>;
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
            let timeouts = Timeouts {
                header_read: limits.header_read_timeout,
                idle: limits.idle_timeout,
            };
            Ok(conn::guard(
                stream,
                service,
                permit,
                timeouts,
                conn::Named {
                    on_timeout: Some(Arc::new(|timeout| {
                        crate::metrics::agent().local_api_timed_out(timeout);
                    })),
                    ..conn::Named::new("local api", peer)
                },
                Some(slot),
            ))
        })
    }
}
