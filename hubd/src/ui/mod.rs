//! The operator dashboard: HTML pages rendered on the server from the live store,
//! with no script, no external asset and no JS toolchain.
//!
//! ```text
//!  GET  /               303 → /ui/
//!  GET  /ui/login       the login form              ┐
//!  POST /ui/login       operator token → cookie      │ open (Origin checked on POSTs,
//!  POST /ui/logout      ends the session             │ failed logins rate-limited)
//!  GET  /ui/static/…    the stylesheet (embedded)    ┘
//!  GET  /ui/            fleet                        ┐ behind the `Operator` extractor, a
//!  GET  /ui/hosts/{id}  one host                     │ route layer: no session → 303 to
//!  GET  /ui/alerts      open and recent alerts       │ /ui/login
//!  POST /ui/alerts/ack  acknowledge an open alert    │ (operator and admin tokens, this
//!  POST /ui/alerts/silence  silence one for a while  │ hub's Origin and the session's
//!  GET  /ui/events      the event log                ┘ form token)
//! ```
//!
//! Every answer carries a strict Content-Security-Policy (`default-src 'none'`, the served
//! stylesheet only, no frames), `Referrer-Policy: no-referrer` and `Cache-Control: no-store`.
//! Nothing here changes the hub's state but a login, a logout, and an alert acknowledged or
//! silenced (through the admin API's own logic, `ui::triage`): desired state and jobs stay with
//! the admin API and operator-signed jobs. Sessions live in memory (a restart logs
//! every operator out); the hub keeps only the SHA-256 of each session id.

mod assets;
mod audit;
mod backups;
mod bulk;
mod error;
mod fleet;
mod golden;
mod hardware;
mod health;
mod history;
mod host;
mod job_result;
mod layout;
mod login;
mod logs;
mod profile;
mod session;
mod triage;
mod verify;

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use crate::Hub;

pub use self::session::{COOKIE_NAME, SESSION_TTL};

/// The Content-Security-Policy of every dashboard answer: nothing but the served stylesheet
/// and same-origin form posts; no script, no frame, no plugin, no base change.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
     form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// State of the dashboard's handlers.
#[derive(Debug, Clone)]
pub(crate) struct Ui {
    hub: Hub,
    sessions: Arc<session::Sessions>,
    limiter: Arc<crate::auth_limit::AuthLimiter>,
}

/// The dashboard's routes, to be merged into the operator-side router; failed logins draw on
/// `limiter`, the allowance per source address the admin API's bearer tokens share.
pub fn router(hub: Hub, limiter: Arc<crate::auth_limit::AuthLimiter>) -> Router<Hub> {
    let ui = Ui {
        hub,
        sessions: Arc::new(session::Sessions::default()),
        limiter,
    };
    let pages = Router::new()
        .route("/ui/", get(fleet::page))
        .route("/ui/hosts/{host_id}", get(host::page))
        .route("/ui/alerts", get(logs::alerts))
        .route("/ui/alerts/ack", post(triage::ack))
        .route("/ui/alerts/silence", post(triage::silence))
        .route("/ui/events", get(logs::events))
        .route("/ui/{*rest}", get(error::not_found))
        .route_layer(middleware::from_extractor_with_state::<session::Operator, Ui>(ui.clone()));
    let open = Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/login", get(login::form).post(login::submit))
        .route("/ui/logout", post(login::logout))
        .route(assets::STYLESHEET_PATH, get(assets::stylesheet));
    pages
        .merge(open)
        .layer(middleware::from_fn(security_headers))
        .with_state(ui)
}

/// Adds the dashboard's security headers to every answer, redirects and errors included.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await.into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers.insert(
        header::HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        header::HeaderName::from_static("cross-origin-resource-policy"),
        HeaderValue::from_static("same-origin"),
    );
    response
}
