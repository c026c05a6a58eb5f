//! What every part of the API shares: the id headers and the answers to a request no route
//! takes.

use axum::extract::Request;
use axum::http::HeaderName;

use super::error::ApiError;

/// Request id header (generated when absent, echoed).
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// Correlation id header (defaults to the request id, echoed).
pub const CORRELATION_ID: HeaderName = HeaderName::from_static("x-correlation-id");

pub(crate) async fn no_route(request: Request) -> ApiError {
    ApiError::NotFound {
        code: "no_such_endpoint",
        message: format!("no endpoint {} {}", request.method(), request.uri().path()),
    }
}

pub(crate) async fn no_method() -> ApiError {
    ApiError::BadRequest {
        code: "method_not_allowed",
        message: "this endpoint does not accept that method".to_owned(),
    }
}
