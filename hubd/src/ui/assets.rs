//! The dashboard's one stylesheet, embedded in the binary and served from the hub itself
//! (the Content-Security-Policy allows no other source).

use axum::http::header;
use axum::response::IntoResponse;

/// Where the stylesheet is served.
pub(crate) const STYLESHEET_PATH: &str = "/ui/static/dashboard.css";

const STYLESHEET: &str = include_str!("dashboard.css");

/// `GET /ui/static/dashboard.css`.
pub(crate) async fn stylesheet() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        STYLESHEET,
    )
}
