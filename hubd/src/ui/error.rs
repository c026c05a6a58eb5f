//! The dashboard's errors and the one place that turns them into HTML answers.

use std::time::Duration;

use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use maud::html;

use super::layout;
use crate::store::StoreError;

/// Why a dashboard request failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UiError {
    /// Reading the store failed.
    #[error("reading the hub's store for the dashboard")]
    Store(#[source] StoreError),
    /// No such page or host.
    #[error("{what} not found")]
    NotFound {
        /// What was asked for.
        what: String,
    },
    /// The request is malformed.
    #[error("{message}")]
    BadRequest {
        /// Why.
        message: String,
    },
    /// A login or logout posted without this hub's `Origin`.
    #[error("the form was not posted from this hub's own pages")]
    CrossOrigin,
    /// The login body is over the limit.
    #[error("the login form exceeds {limit} bytes or was cut off")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// Too many failed logins lately.
    #[error("too many failed logins; try again in {}s", crate::auth_limit::retry_after_secs(*wait))]
    TooManyLogins {
        /// How long until one more login is allowed.
        wait: Duration,
    },
}

impl From<StoreError> for UiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::UnknownHost { host_id } => Self::NotFound {
                what: format!("host {host_id}"),
            },
            other => Self::Store(other),
        }
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let status = match &self {
            Self::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::NotFound { .. } => StatusCode::NOT_FOUND,
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::CrossOrigin => StatusCode::FORBIDDEN,
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::TooManyLogins { .. } => StatusCode::TOO_MANY_REQUESTS,
        };
        if let Self::Store(_) = &self {
            tracing::error!(
                error = %bosun_errchain::error_chain(&self),
                "dashboard page failed"
            );
        }
        let body = html! {
            main {
                h1 { (status.canonical_reason().unwrap_or("Error")) }
                @if let Self::Store(_) = &self {
                    p { "The hub could not read its store; its log has the cause." }
                } @else {
                    p { (self.to_string()) }
                }
                p { a href="/ui/" { "Back to the fleet" } }
            }
        };
        let mut response = (status, layout::bare("Error", body)).into_response();
        if let Self::TooManyLogins { wait } = &self
            && let Ok(value) = crate::auth_limit::retry_after_secs(*wait)
                .to_string()
                .parse()
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}

/// An unknown path under `/ui/` (reached only with a session).
pub(crate) async fn not_found(uri: Uri) -> UiError {
    UiError::NotFound {
        what: format!("page {}", uri.path()),
    }
}
