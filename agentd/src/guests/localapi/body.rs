//! [`JsonBody`]: the JSON body extractor whose rejections are local-API errors (400, 408,
//! 413, 415) in the one error format. An empty body reads as `{}`; a whole number written as a
//! float (`969.0`) is read where an integer is wanted ([`bosun_proto::json_body`]).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A JSON request body.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T> FromRequest<super::LocalApi> for JsonBody<T>
where
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &super::LocalApi) -> Result<Self, ApiError> {
        let json_type = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                let mime = v.split(';').next().unwrap_or("").trim();
                mime.eq_ignore_ascii_case("application/json")
            });
        let limit = state.inner.config.max_body_bytes;
        let timeout = state.inner.config.connections.body_timeout;
        let read = tokio::time::timeout(timeout, Bytes::from_request(req, state))
            .await
            .map_err(|_| ApiError::BodyTimeout {
                timeout_ms: timeout.as_millis(),
            })?;
        let bytes = read.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge { limit }
            } else {
                ApiError::BadRequest {
                    reason: "the request body could not be read".to_owned(),
                }
            }
        })?;
        let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            if json_type != Some(true) {
                return Err(ApiError::UnsupportedMediaType);
            }
            &bytes
        };
        bosun_proto::json_body::from_slice(bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::BadRequest {
                reason: format!("invalid JSON body: {e}"),
            })
    }
}
