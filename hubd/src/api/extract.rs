//! Request parsing and authentication shared by the handlers.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::request::Parts;
use bosun_proto::ValidationError;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::error::ApiError;
use crate::Hub;
use crate::secret::SecretHash;
use crate::store::id_lookup::IdKind;

/// The raw request body, with the size limit mapped to 413 and the time limit to 408.
#[derive(Debug)]
pub struct Body(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .copied()
            .unwrap_or(BodyLimit {
                bytes: 0,
                within: BodyLimit::UNSET_WITHIN,
            });
        let read = tokio::time::timeout(limit.within, Bytes::from_request(req, state)).await;
        let Ok(read) = read else {
            return Err(ApiError::BodyTimeout {
                within: limit.within,
            });
        };
        read.map(Body).map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge { limit: limit.bytes }
            } else {
                ApiError::BadRequest {
                    code: "unreadable_body",
                    message: rejection.body_text(),
                }
            }
        })
    }
}

/// A route's body limits, put into request extensions: the most bytes (for error messages;
/// `DefaultBodyLimit` enforces them), and the time the whole body has to arrive in. A request
/// is in flight while its body arrives, so no connection timeout ends one that trickles: this
/// one does.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit {
    /// The most bytes a body may have.
    pub bytes: usize,
    /// The time from the handler's first look at the body to its last byte.
    pub within: Duration,
}

impl BodyLimit {
    /// The time a body gets on a route without limits of its own (every route has them:
    /// `api::finish` puts them on each).
    pub const UNSET_WITHIN: Duration = Duration::from_secs(30);
}

/// Parses a JSON document and validates it. A whole number written as a float (`969.0`) is
/// taken where an integer is wanted, as the OpenAPI document's `integer` allows
/// ([`bosun_proto::json_body`]); a fraction or a value out of range is 400 `malformed_json`
/// naming it.
pub fn parse<T: DeserializeOwned>(
    body: &Bytes,
    document: &'static str,
    validate: impl FnOnce(&T) -> Result<(), ValidationError>,
) -> Result<T, ApiError> {
    let value: T =
        bosun_proto::json_body::from_slice(body).map_err(|e| ApiError::MalformedJson {
            document,
            reason: e.to_string(),
        })?;
    validate(&value).map_err(|source| ApiError::Invalid { document, source })?;
    Ok(value)
}

/// Parses a host id from the path.
pub fn host_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::BadRequest {
        code: "bad_host_id",
        message: format!("`{raw}` is not a host id (UUID)"),
    })
}

/// Parses a job id from the path.
pub fn job_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::BadRequest {
        code: "bad_job_id",
        message: format!("`{raw}` is not a job id (UUID)"),
    })
}

/// The host an admin request names: its whole id as is, or an unambiguous prefix of it
/// resolved by the store (400 `bad_id_prefix`, 404 `unknown_host`, 409 `ambiguous_id` listing
/// candidates). Agents' paths take whole ids only ([`host_id`]).
pub async fn admin_host(hub: &Hub, raw: &str) -> Result<Uuid, ApiError> {
    admin_id(hub, IdKind::Host, raw).await
}

/// The job an admin request names, as [`admin_host`] (404 `unknown_job`).
pub async fn admin_job(hub: &Hub, raw: &str) -> Result<Uuid, ApiError> {
    admin_id(hub, IdKind::Job, raw).await
}

async fn admin_id(hub: &Hub, kind: IdKind, raw: &str) -> Result<Uuid, ApiError> {
    if let Ok(id) = Uuid::try_parse(raw) {
        return Ok(id);
    }
    let raw = raw.to_owned();
    Ok(hub
        .store_call(move |store| store.resolve_id(kind, &raw))
        .await?)
}

/// The bearer token of a request.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Proof that a request to `/v1/hosts/{host_id}/...` carries that host's own key and that the
/// host is active: only this extractor makes one, so a handler that takes it cannot forget
/// the check. A host taken over by a new box (restore mode) answers only to the new key.
#[derive(Debug, Clone, Copy)]
pub struct ActiveHost {
    host_id: Uuid,
}

impl ActiveHost {
    /// The host the path names and the key belongs to.
    pub fn host_id(&self) -> Uuid {
        self.host_id
    }
}

impl FromRequestParts<Hub> for ActiveHost {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, hub: &Hub) -> Result<Self, Self::Rejection> {
        let params = RawPathParams::from_request_parts(parts, hub)
            .await
            .map_err(|rejection| ApiError::BadRequest {
                code: "bad_path",
                message: rejection.body_text(),
            })?;
        let raw = params
            .iter()
            .find(|(name, _)| *name == "host_id")
            .map(|(_, value)| value)
            .ok_or_else(|| ApiError::BadRequest {
                code: "bad_path",
                message: "this endpoint names no host".to_owned(),
            })?;
        let host_id = host_id(raw)?;
        require_host(hub, host_id, &parts.headers).await?;
        Ok(Self { host_id })
    }
}

/// Requires the host's own key (current, or the next one its agent made) and an active host.
async fn require_host(hub: &Hub, host_id: Uuid, headers: &HeaderMap) -> Result<(), ApiError> {
    require_host_key(hub, host_id, headers).await?;
    let credentials = hub
        .store_call(move |store| store.host_credentials(host_id))
        .await?
        .ok_or(ApiError::Store(crate::store::StoreError::UnknownHost {
            host_id,
        }))?;
    match credentials.status {
        bosun_proto::admin::HostStatus::Active => Ok(()),
        bosun_proto::admin::HostStatus::Revoked => Err(ApiError::Unauthorized),
        bosun_proto::admin::HostStatus::PendingApproval => {
            Err(ApiError::PendingApproval { host_id })
        }
    }
}

/// Requires the host's own key: its current key, or the next one its agent made, which
/// becomes the current key with this request (`Hub::host_key_matches`). Status, and the key
/// once more, are checked where the poll is recorded; returns the presented key's hash for
/// that check.
pub async fn require_host_key(
    hub: &Hub,
    host_id: Uuid,
    headers: &HeaderMap,
) -> Result<SecretHash, ApiError> {
    let presented = SecretHash::of(bearer(headers).ok_or(ApiError::Unauthorized)?);
    match hub.host_key_matches(host_id, presented).await? {
        Some(_) => Ok(presented),
        None => Err(ApiError::Unauthorized),
    }
}

/// Reads `name=value` from a raw query string.
pub fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Parses an optional numeric query parameter.
pub fn query_number<T: std::str::FromStr>(
    query: Option<&str>,
    name: &'static str,
) -> Result<Option<T>, ApiError> {
    query_param(query, name)
        .map(|raw| {
            raw.parse().map_err(|_| ApiError::BadRequest {
                code: "bad_query",
                message: format!("query parameter `{name}` = `{raw}` is not a valid number"),
            })
        })
        .transpose()
}
