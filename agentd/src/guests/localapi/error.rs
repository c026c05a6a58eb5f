//! The one place local-API errors become HTTP answers: a stable `code`, a human `message`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The JSON body of every error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// Stable, machine-readable code (`unauthorized`, `foreign_guest`, …).
    pub code: String,
    /// What went wrong, for a human.
    pub message: String,
}

/// Everything a local-API request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No bearer token, a malformed one, or one no guest owns.
    #[error("a valid bearer token is required")]
    Unauthorized,
    /// The request named a guest other than the caller's.
    #[error("this token may only act on its own guest")]
    ForeignGuest,
    /// No such route.
    #[error("no such endpoint")]
    NoRoute,
    /// The route exists but not with this method.
    #[error("method not allowed on this endpoint")]
    MethodNotAllowed,
    /// The request is malformed.
    #[error("{reason}")]
    BadRequest {
        /// What is wrong with it.
        reason: String,
    },
    /// The body is larger than the limit.
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body did not arrive in full in time.
    #[error("the request body did not arrive within {timeout_ms} ms")]
    BodyTimeout {
        /// The body timeout in milliseconds.
        timeout_ms: u128,
    },
    /// The body is not JSON.
    #[error("expected a JSON body (content-type: application/json)")]
    UnsupportedMediaType,
    /// The caller's token sent too many requests.
    #[error("too many requests; retry after {retry_after_s} s")]
    RateLimited {
        /// Seconds until a request will be accepted again.
        retry_after_s: u64,
    },
    /// The snapshot named does not belong to the caller's guest.
    #[error("guest has no snapshot named {name:?}")]
    SnapshotNotFound {
        /// The name asked for.
        name: String,
    },
    /// A backup of this guest is already queued or running.
    #[error("a backup of this guest is already {phase}")]
    BackupInProgress {
        /// Its phase.
        phase: String,
    },
    /// No backup policy is known yet (the agent has no desired state).
    #[error("no backup policy is known yet")]
    NoPolicy,
    /// The backup policy's schedule cannot be evaluated.
    #[error("the backup policy cannot be evaluated: {reason}")]
    PolicyInvalid {
        /// Why.
        reason: String,
    },
    /// The guest is locked by another Proxmox task (a backup, a snapshot).
    #[error("the guest is busy with another task; try again later")]
    GuestLocked,
    /// Proxmox refused or failed the operation.
    #[error("proxmox failed the {operation}")]
    Proxmox {
        /// What the agent was doing.
        operation: &'static str,
        /// The cause.
        #[source]
        source: bosun_pve::PveError,
    },
    /// The agent is shutting down or its journal is gone.
    #[error("the agent cannot take this request now ({what})")]
    Unavailable {
        /// What is unavailable.
        what: &'static str,
    },
}

impl ApiError {
    /// The HTTP status and the stable code.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::ForeignGuest => (StatusCode::FORBIDDEN, "foreign_guest"),
            Self::NoRoute => (StatusCode::NOT_FOUND, "not_found"),
            Self::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Self::BadRequest { .. } => (StatusCode::BAD_REQUEST, "bad_request"),
            Self::PayloadTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Self::BodyTimeout { .. } => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
            Self::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            Self::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            Self::SnapshotNotFound { .. } => (StatusCode::NOT_FOUND, "snapshot_not_found"),
            Self::BackupInProgress { .. } => (StatusCode::CONFLICT, "backup_in_progress"),
            Self::NoPolicy => (StatusCode::CONFLICT, "no_backup_policy"),
            Self::PolicyInvalid { .. } => (StatusCode::CONFLICT, "backup_policy_invalid"),
            Self::GuestLocked => (StatusCode::CONFLICT, "guest_locked"),
            Self::Proxmox { .. } => (StatusCode::BAD_GATEWAY, "proxmox_failed"),
            Self::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        }
    }

    /// The body sent for this error.
    pub fn body(&self) -> ErrorBody {
        let (_, code) = self.status_and_code();
        let message = match self {
            // The cause says what Proxmox answered; it holds no secret.
            Self::Proxmox { source, .. } => format!("{self}: {source}"),
            _ => self.to_string(),
        };
        ErrorBody {
            code: code.to_owned(),
            message,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if status.is_server_error() {
            tracing::warn!(code, error = %bosun_errchain::error_chain(&self), "local api request failed");
        } else {
            tracing::debug!(code, error = %self, "local api request refused");
        }
        let retry_after = match &self {
            Self::RateLimited { retry_after_s } => Some(*retry_after_s),
            _ => None,
        };
        let mut response = (status, axum::Json(self.body())).into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if status == StatusCode::REQUEST_TIMEOUT {
            // The rest of a stalled body is not waited for: the connection ends here.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"bosun-local\""),
            );
        }
        response
    }
}
