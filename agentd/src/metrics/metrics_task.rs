//! The `/metrics` server: plain HTTP on the configured local-only address
//! (`[metrics] listen`, loopback by default), separate from the local API, which listens on
//! the guests' bridge and never serves metrics.
//!
//! Only `GET /metrics` is answered (anything else is a 404). Scrapes run one at a time,
//! each bounded by [`SCRAPE_TIMEOUT`]; at most [`MAX_IN_FLIGHT`] requests wait at once.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bosun_errchain::error_chain;
use bosun_metrics::Format;

use tokio_util::sync::CancellationToken;

use super::agent;
use super::snapshot::ReadSnapshot;

/// The longest a scrape may take before it is answered 503.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests handled at once; more wait for a slot.
pub const MAX_IN_FLIGHT: usize = 4;

/// The metrics server failed.
#[derive(Debug, thiserror::Error)]
pub enum MetricsServeError {
    /// The listener could not be used or serving failed.
    #[error("serving metrics on {addr}")]
    Serve {
        /// The listener's address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The router: `GET /metrics` and nothing else.
pub fn router(sources: Arc<dyn ReadSnapshot>) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .fallback(|| async { StatusCode::NOT_FOUND })
        .layer(tower::limit::ConcurrencyLimitLayer::new(MAX_IN_FLIGHT))
        .with_state(sources)
}

async fn scrape(State(sources): State<Arc<dyn ReadSnapshot>>, headers: HeaderMap) -> Response {
    let format = Format::negotiate(
        headers
            .get(header::ACCEPT)
            .and_then(|value| value.to_str().ok()),
    );
    let rendered = tokio::time::timeout(SCRAPE_TIMEOUT, async {
        let snapshot = sources.read().await;
        agent().render(snapshot, format).await
    })
    .await;
    match rendered {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, format.content_type())], text).into_response(),
        Ok(Err(e)) => {
            tracing::error!(error = %error_chain(&e), "encoding the metrics failed");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
        Err(_) => {
            tracing::warn!(
                timeout_ms = u64::try_from(SCRAPE_TIMEOUT.as_millis()).unwrap_or(u64::MAX),
                "a metrics scrape ran out of time"
            );
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
    }
}

/// Serves `/metrics` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: std::net::TcpListener,
    sources: Arc<dyn ReadSnapshot>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), MetricsServeError> {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let serve_err = |source| MetricsServeError::Serve {
        addr: addr.clone(),
        source,
    };
    listener.set_nonblocking(true).map_err(serve_err)?;
    let listener = tokio::net::TcpListener::from_std(listener).map_err(serve_err)?;
    tracing::info!(addr = %addr, "metrics listening");
    axum::serve(listener, router(sources))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(serve_err)?;
    tracing::info!(addr = %addr, "metrics stopped");
    Ok(())
}

/// Binds `listen` and serves `/metrics` there as a supervised task until `cancel`; gives the bound
/// address (the real port when the config asked for 0).
///
/// A listener that cannot be bound is logged and the agent runs on without metrics: the
/// guests' backups matter more than their monitoring, and the scraper's `up == 0` shows the
/// gap.
pub fn spawn(
    tasks: &crate::runtime::supervisor::Supervisor,
    listen: SocketAddr,
    sources: Arc<dyn ReadSnapshot>,
    cancel: CancellationToken,
) -> Option<SocketAddr> {
    let bound = std::net::TcpListener::bind(listen).and_then(|l| {
        let addr = l.local_addr()?;
        Ok((l, addr))
    });
    let (listener, addr) = match bound {
        Ok(bound) => bound,
        Err(e) => {
            tracing::error!(addr = %listen, error = %e, "cannot bind the metrics listener; running without /metrics");
            return None;
        }
    };
    tasks.spawn("metrics", async move {
        if let Err(e) = serve(listener, sources, cancel.cancelled_owned()).await {
            tracing::error!(error = %error_chain(&e), "the metrics server stopped with an error");
        }
    });
    Some(addr)
}
