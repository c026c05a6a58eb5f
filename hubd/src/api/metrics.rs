//! `GET /metrics`: the hub's metrics in the format the scraper asks for (see
//! [`crate::metrics`] for the families).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bosun_errchain::error_chain;
use bosun_metrics::Format;
use bosun_proto::admin::{ErrorBody, HostDetail, HostStatus};

use super::error::ApiError;
use crate::Hub;
use crate::store::{Store, StoreResult};

/// Answers a scrape: OpenMetrics when the `Accept` header prefers
/// `application/openmetrics-text` (as Prometheus does), the text format 0.0.4 otherwise.
/// Needs no credentials (serve it on an internal address).
#[utoipa::path(get, path = "/metrics", tag = "operations",
    params(("Accept" = Option<String>, Header,
        description = "`application/openmetrics-text` for OpenMetrics; anything else (`*/*`, `text/plain; version=0.0.4`) gets the Prometheus text format 0.0.4")),
    responses(
        (status = 200, description = "the hub's metrics, in the format the `Accept` header chose",
         content(
            (String = "application/openmetrics-text; version=1.0.0; charset=utf-8"),
            (String = "text/plain; version=0.0.4; charset=utf-8"))),
        (status = 500, description = "`internal`: the store failed (or, with no body, the metrics could not be encoded)", body = ErrorBody)))]
pub async fn metrics(State(hub): State<Hub>, headers: HeaderMap) -> Result<Response, ApiError> {
    let format = Format::negotiate(
        headers
            .get(header::ACCEPT)
            .and_then(|value| value.to_str().ok()),
    );
    let now_ms = hub.clock().now_ms();
    let (counts, fleet) = hub
        .store_call(move |store| Ok((store.host_counts()?, active_hosts(store, now_ms)?)))
        .await?;
    let now = hub.clock().now();
    match hub.metrics().render(counts, &fleet, now, format) {
        Ok(text) => Ok(([(header::CONTENT_TYPE, format.content_type())], text).into_response()),
        Err(e) => {
            tracing::error!(error = %error_chain(&e), "encoding the metrics failed");
            Ok(StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
    }
}

/// The details of every active host, each with its health roll-up (the per-host gauges cover
/// active hosts only).
fn active_hosts(store: &dyn Store, now_ms: i64) -> StoreResult<Vec<HostDetail>> {
    let (details, _) = crate::health::fleet(store, now_ms)?;
    Ok(details
        .into_iter()
        .filter(|d| d.summary.status == HostStatus::Active)
        .collect())
}
