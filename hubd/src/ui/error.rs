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
    /// A form's body is over the limit.
    #[error("the {what} form exceeds {limit} bytes or was cut off")]
    TooLarge {
        /// Which form.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// A form's body did not arrive whole in time.
    #[error("the {what} form did not arrive whole within {}s", within.as_secs())]
    TooSlow {
        /// Which form.
        what: &'static str,
        /// The time it had.
        within: Duration,
    },
    /// A form that changes state was posted without the session's form token, or with
    /// another one.
    #[error("the form does not carry this session's form token: reload the page and send it again")]
    FormToken,
    /// The session's token may not do what the form asks.
    #[error("the token `{token}` is a `{role}` token; {action} needs `{needed}` or `admin`")]
    Forbidden {
        /// The session's operator token.
        token: String,
        /// Its role.
        role: bosun_proto::operator_token::Role,
        /// The role the action needs.
        needed: bosun_proto::operator_token::Role,
        /// What was asked.
        action: &'static str,
    },
    /// The admin API's own logic refused or failed the action the form asked for.
    #[error("{}", .0.public_message())]
    Api(#[source] crate::api::error::ApiError),
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
            Self::CrossOrigin | Self::FormToken | Self::Forbidden { .. } => StatusCode::FORBIDDEN,
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::TooSlow { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::Api(api) => api.status(),
            Self::TooManyLogins { .. } => StatusCode::TOO_MANY_REQUESTS,
        };
        if matches!(&self, Self::Store(_)) || status.is_server_error() {
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
                } @else if status.is_server_error() {
                    p { "The hub could not do it; its log has the cause." }
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
