//! The HTTP surface: routes, request ids, body limit, unread bodies, `/metrics` and
//! `/v1/health`.

pub mod admin;
pub mod admin_alerts;
pub mod admin_audit;
pub mod admin_desired;
pub mod admin_history;
pub mod admin_hosts;
pub mod admin_jobs;
pub mod admin_tokens;
pub mod agent;
pub mod artifacts;
pub mod caller;
mod common;
pub mod error;
pub mod extract;
pub mod listing;
pub mod metrics;
pub mod openapi;

pub use common::{CORRELATION_ID, REQUEST_ID};
pub(crate) use common::{no_method, no_route};

use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bosun_proto::admin::ErrorBody;
use tracing::Instrument as _;

use self::extract::BodyLimit;
use crate::Hub;

/// Both sides on one listener: what a hub without a separate admin address serves.
pub fn router(hub: Hub) -> Router {
    finish(agent_routes().merge(admin_routes(&hub)), hub)
}

/// The agent side alone: enrollment, polls, job results, escrow, health. This is what the
/// hub serves on its public address when the admin side has an address of its own; an
/// admin path there is simply not found.
pub fn agent_router(hub: Hub) -> Router {
    finish(agent_routes(), hub)
}

/// The operator side alone: the admin API, metrics and health, for an internal address.
pub fn admin_router(hub: Hub) -> Router {
    finish(admin_routes(&hub), hub)
}

/// The routes agents call.
fn agent_routes() -> Router<Hub> {
    agent::router()
}

/// The routes operators and their tools call.
///
/// The admin API's bearer tokens and the dashboard's login share one allowance of failures
/// per source address ([`crate::auth_limit`]).
fn admin_routes(hub: &Hub) -> Router<Hub> {
    let limiter = std::sync::Arc::new(crate::auth_limit::AuthLimiter::default());
    Router::new()
        .route("/metrics", get(metrics::metrics))
        .route("/v1/openapi.json", get(openapi::openapi_json_handler))
        .nest(admin::PREFIX, admin::router(hub.clone(), limiter.clone()))
        .merge(crate::ui::router(hub.clone(), limiter))
}

/// What every listener has: health, not-found and wrong-method answers in the API's error
/// shape, the body limit, unread bodies drained or their connection closed
/// ([`bosun_httpkit`]), request and correlation ids.
fn finish(routes: Router<Hub>, hub: Hub) -> Router {
    let limit = BodyLimit {
        bytes: hub.config().max_body_bytes,
        within: hub.config().body_timeout,
    };
    routes
        .route("/v1/health", get(health))
        .fallback(no_route)
        .method_not_allowed_fallback(no_method)
        .layer(DefaultBodyLimit::max(limit.bytes))
        .layer(axum::Extension(limit))
        .layer(middleware::from_fn_with_state(
            bosun_httpkit::DrainLimits::within(std::time::Duration::from_secs(10)),
            bosun_httpkit::settle,
        ))
        .layer(middleware::from_fn(request_ids))
        .with_state(hub)
}

/// Liveness; needs no credentials.
#[utoipa::path(get, path = "/v1/health", tag = "operations",
    responses((status = 200, description = "the hub is up", body = openapi::Health)))]
async fn health() -> impl IntoResponse {
    axum::Json(serde_json::json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION") }))
}

/// Takes an id from a header if it is short, visible ASCII.
fn presented_id(headers: &HeaderMap, name: &HeaderName) -> Option<String> {
    let value = headers.get(name)?.to_str().ok()?;
    let ok = !value.is_empty() && value.len() <= 128 && value.bytes().all(|b| b.is_ascii_graphic());
    ok.then(|| value.to_owned())
}

/// Request and correlation ids: taken from the request or generated, put on the request's
/// span, echoed in the response headers and in error bodies.
async fn request_ids(request: Request, next: Next) -> Response {
    let request_id = presented_id(request.headers(), &REQUEST_ID)
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let correlation_id =
        presented_id(request.headers(), &CORRELATION_ID).unwrap_or_else(|| request_id.clone());
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        request_id = %request_id,
        correlation_id = %correlation_id,
        token = tracing::field::Empty,
    );
    let started = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    if let Some(mut body) = response.extensions_mut().remove::<ErrorBody>() {
        body.request_id = Some(request_id.clone());
        if let Ok(bytes) = serde_json::to_vec(&body) {
            response.headers_mut().remove(header::CONTENT_LENGTH);
            *response.body_mut() = axum::body::Body::from(bytes);
        }
    }
    for (name, value) in [(REQUEST_ID, &request_id), (CORRELATION_ID, &correlation_id)] {
        if let Ok(value) = HeaderValue::from_str(value) {
            response.headers_mut().insert(name, value);
        }
    }
    let status = response.status().as_u16();
    span.in_scope(|| {
        tracing::debug!(
            status,
            elapsed_ms = started.elapsed().as_millis(),
            "request finished"
        );
    });
    response
}
