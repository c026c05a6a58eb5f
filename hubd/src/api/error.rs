//! The one place that maps errors to HTTP statuses and JSON error bodies.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bosun_proto::ValidationError;
use bosun_proto::admin::ErrorBody;
use uuid::Uuid;

use crate::store::StoreError;
use crate::store::id_lookup::IdKind;

/// An error answered to an API caller.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not JSON of the expected shape.
    #[error("request body is not a valid {document}: {reason}")]
    MalformedJson {
        /// The expected document.
        document: &'static str,
        /// The parser's complaint.
        reason: String,
    },
    /// The body parsed but a field is invalid.
    #[error("invalid {document}")]
    Invalid {
        /// The document.
        document: &'static str,
        /// Which field and why.
        #[source]
        source: ValidationError,
    },
    /// Other malformed input (path, query, header).
    #[error("{message}")]
    BadRequest {
        /// Stable code.
        code: &'static str,
        /// Human text.
        message: String,
    },
    /// The body exceeds the limit.
    #[error("request body exceeds {limit} bytes")]
    PayloadTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The body did not arrive whole in time.
    #[error("the request body did not arrive whole within {}s", within.as_secs())]
    BodyTimeout {
        /// The time it had.
        within: std::time::Duration,
    },
    /// Missing, wrong or revoked credentials.
    #[error("missing, wrong or revoked credentials")]
    Unauthorized,
    /// The source address failed too many authentications lately (decision 0055); the token
    /// was not looked at.
    #[error("too many failed authentications from this address; try again in {}s", crate::auth_limit::retry_after_secs(*wait))]
    TooManyAttempts {
        /// How long until this source may try again.
        wait: std::time::Duration,
    },
    /// The operator token's role is below the one the call needs.
    #[error("this call needs a token with the role `{needed}`; `{token}` is a `{role}` token")]
    Forbidden {
        /// The role the call needs.
        needed: bosun_proto::operator_token::Role,
        /// The token's name.
        token: String,
        /// Its role.
        role: bosun_proto::operator_token::Role,
    },
    /// The host still waits for approval.
    #[error("host {host_id} is waiting for operator approval")]
    PendingApproval {
        /// The host.
        host_id: Uuid,
    },
    /// No such route or resource.
    #[error("{message}")]
    NotFound {
        /// Stable code.
        code: &'static str,
        /// Human text.
        message: String,
    },
    /// The store refused or failed.
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        Self::Store(err)
    }
}

impl ApiError {
    /// The HTTP status this error is answered with.
    pub(crate) fn status(&self) -> StatusCode {
        self.status_and_code().0
    }

    /// The text an answer carries: the error itself, or for a server-side failure a pointer
    /// to the hub's log (the cause stays there).
    pub(crate) fn public_message(&self) -> String {
        self.message()
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::MalformedJson { .. } => (StatusCode::BAD_REQUEST, "malformed_json"),
            Self::Invalid { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field"),
            Self::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            Self::PayloadTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            Self::BodyTimeout { .. } => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
            Self::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::TooManyAttempts { .. } => (StatusCode::TOO_MANY_REQUESTS, "too_many_attempts"),
            Self::Forbidden { .. } => (StatusCode::FORBIDDEN, "forbidden"),
            Self::PendingApproval { .. } => (StatusCode::FORBIDDEN, "host_pending_approval"),
            Self::NotFound { code, .. } => (StatusCode::NOT_FOUND, code),
            Self::Store(err) => match err {
                StoreError::UnknownHost { .. } => (StatusCode::NOT_FOUND, "unknown_host"),
                StoreError::UnknownJob { .. } => (StatusCode::NOT_FOUND, "unknown_job"),
                StoreError::TokenUnknown => (StatusCode::UNAUTHORIZED, "enrollment_token_invalid"),
                StoreError::TokenUsed => (StatusCode::UNAUTHORIZED, "enrollment_token_used"),
                StoreError::TokenExpired => (StatusCode::UNAUTHORIZED, "enrollment_token_expired"),
                StoreError::TokenRevoked => (StatusCode::UNAUTHORIZED, "enrollment_token_revoked"),
                StoreError::TokenConsumed { .. } => (StatusCode::CONFLICT, "enrollment_token_used"),
                StoreError::UnknownToken { .. } => {
                    (StatusCode::NOT_FOUND, "unknown_enrollment_token")
                }
                StoreError::IdempotencyConflict { .. } => {
                    (StatusCode::CONFLICT, "idempotency_conflict")
                }
                StoreError::NotSeenSinceRestore { .. } => {
                    (StatusCode::CONFLICT, "not_seen_since_restore")
                }
                StoreError::JobConflict { .. } => (StatusCode::CONFLICT, "job_conflict"),
                StoreError::JobFinished { .. } => (StatusCode::CONFLICT, "job_finished"),
                StoreError::JobNotQueued { .. } => (StatusCode::CONFLICT, "job_not_queued"),
                StoreError::HostState { .. } => (StatusCode::CONFLICT, "host_state"),
                StoreError::HostNotRevoked { .. } | StoreError::HostNotRemovable { .. } => {
                    (StatusCode::CONFLICT, "host_not_revoked")
                }
                StoreError::EscrowHeld { .. } => (StatusCode::CONFLICT, "escrow_held"),
                StoreError::BadIdPrefix { kind, .. } => match kind {
                    IdKind::Host => (StatusCode::BAD_REQUEST, "bad_host_id"),
                    IdKind::Job => (StatusCode::BAD_REQUEST, "bad_job_id"),
                },
                StoreError::UnknownId { kind, .. } => match kind {
                    IdKind::Host => (StatusCode::NOT_FOUND, "unknown_host"),
                    IdKind::Job => (StatusCode::NOT_FOUND, "unknown_job"),
                },
                StoreError::AmbiguousId { .. } | StoreError::AmbiguousAlert { .. } => {
                    (StatusCode::CONFLICT, "ambiguous_id")
                }
                StoreError::UnknownAlert { .. } => (StatusCode::NOT_FOUND, "unknown_alert"),
                StoreError::UnknownSilence { .. } => (StatusCode::NOT_FOUND, "unknown_silence"),
                StoreError::TooManySilences { .. } => (StatusCode::CONFLICT, "too_many_silences"),
                StoreError::TooManyLabels { .. } => (StatusCode::CONFLICT, "too_many_labels"),
                StoreError::KeyRotation(_) => (StatusCode::CONFLICT, "key_rotation"),
                StoreError::WrongHostKey { .. } => (StatusCode::UNAUTHORIZED, "unauthorized"),
                StoreError::HostNotActive { status, .. } => match status {
                    bosun_proto::admin::HostStatus::PendingApproval => {
                        (StatusCode::FORBIDDEN, "host_pending_approval")
                    }
                    bosun_proto::admin::HostStatus::Revoked
                    | bosun_proto::admin::HostStatus::Active => {
                        (StatusCode::UNAUTHORIZED, "unauthorized")
                    }
                },
                StoreError::UnknownOperatorToken { .. } => (StatusCode::NOT_FOUND, "unknown_token"),
                StoreError::OperatorTokenNameTaken { .. } => {
                    (StatusCode::CONFLICT, "token_name_taken")
                }
                StoreError::TooManyOperatorTokens { .. } => {
                    (StatusCode::CONFLICT, "too_many_tokens")
                }
                StoreError::LastAdminToken { .. } => (StatusCode::CONFLICT, "last_admin_token"),
                StoreError::ArtifactCorrupt { .. } => {
                    (StatusCode::INTERNAL_SERVER_ERROR, "artifact_corrupt")
                }
                StoreError::Open { .. }
                | StoreError::Sync { .. }
                | StoreError::ArtifactFile { .. }
                | StoreError::Migrate { .. }
                | StoreError::TooNew { .. }
                | StoreError::Sqlite { .. }
                | StoreError::Postgres { .. }
                | StoreError::Corrupt { .. }
                | StoreError::Worker { .. }
                | StoreError::Batch { .. }
                | StoreError::AlreadyInitialized
                | StoreError::NotInitialized => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            },
        }
    }

    fn message(&self) -> String {
        match self {
            Self::Invalid { document, source } => format!("invalid {document}: {source}"),
            Self::Store(_) if self.status_and_code().0.is_server_error() => {
                "internal error; see the hub log for this request id".to_owned()
            }
            other => other.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if status.is_server_error() {
            tracing::error!(
                error = &self as &dyn std::error::Error,
                code,
                "request failed"
            );
        } else {
            tracing::debug!(error = %self, code, "request refused");
        }
        let body = ErrorBody {
            code: code.to_owned(),
            message: self.message(),
            request_id: None,
        };
        // The request-id middleware fills in `request_id` and writes the body.
        let mut response = (status, axum::Json(&body)).into_response();
        if let Self::TooManyAttempts { wait } = &self {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                crate::auth_limit::retry_after_secs(*wait).into(),
            );
        }
        response.extensions_mut().insert(body);
        response
    }
}
