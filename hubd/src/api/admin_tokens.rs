//! Operator tokens (`/v1/admin/tokens`): create one with a name, a role and an optional
//! lifetime (its secret is shown once), list them (never a secret), revoke one, or rotate one
//! (a new secret; the old one stops working at once). Each is an event in the hub's log
//! (`operator_token_created`, `…_revoked`, `…_rotated`) naming the token that did it (`by`).
//! The hub never lets its last unexpired admin token go (409 `last_admin_token`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use bosun_proto::admin::ErrorBody;
use bosun_proto::operator_token::{
    CreateOperatorToken, OperatorTokenCreated, OperatorTokenInfo, validate_name,
};

use super::caller::Caller;
use super::error::ApiError;
use super::extract::{self, Body};
use crate::Hub;
use crate::secret::{self, SecretKind};
use crate::store::NewOperatorToken;

/// The token name a path names, checked.
fn name(raw: String) -> Result<String, ApiError> {
    validate_name("name", &raw).map_err(|e| ApiError::BadRequest {
        code: "bad_token_name",
        message: e.to_string(),
    })?;
    Ok(raw)
}

/// `POST /v1/admin/tokens`: a new operator token, its secret shown once.
#[utoipa::path(post, path = "/v1/admin/tokens", tag = "admin",
    request_body(content = CreateOperatorToken, description = "name, role and optional lifetime"),
    responses(
        (status = 201, description = "the token with its secret, shown once", body = OperatorTokenCreated),
        (status = 400, description = "`malformed_json`, `unreadable_body`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 409, description = "`token_name_taken`, `too_many_tokens` (the hub keeps at most 256)", body = ErrorBody),
        (status = 408, description = "`body_timeout`: the body did not arrive whole in time", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 422, description = "`invalid_field`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn create_token(
    State(hub): State<Hub>,
    caller: Caller,
    body: Body,
) -> Result<(StatusCode, Json<OperatorTokenCreated>), ApiError> {
    let request = extract::parse(
        &body.0,
        "operator token request",
        CreateOperatorToken::validate,
    )?;
    let (token, hash) = secret::mint(SecretKind::Operator);
    let now_ms = hub.clock().now_ms();
    let record = NewOperatorToken {
        name: request.name,
        role: request.role,
        hash,
        created_by: Some(caller.name().to_owned()),
        expires_ms: request
            .expires_in_seconds
            .map(|seconds| now_ms.saturating_add(i64::from(seconds) * 1000)),
        now_ms,
    };
    let info = hub
        .store_call(move |store| store.create_operator_token(record))
        .await?;
    tracing::info!(name = %info.name, role = info.role.as_str(), by = caller.name(), "operator token created");
    Ok((
        StatusCode::CREATED,
        Json(OperatorTokenCreated { token, info }),
    ))
}

/// `GET /v1/admin/tokens`: every operator token, by name; never a secret.
#[utoipa::path(get, path = "/v1/admin/tokens", tag = "admin",
    responses(
        (status = 200, description = "the tokens, by name (at most 256)", body = Vec<OperatorTokenInfo>),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn list_tokens(State(hub): State<Hub>) -> Result<Json<Vec<OperatorTokenInfo>>, ApiError> {
    let now_ms = hub.clock().now_ms();
    Ok(Json(
        hub.store_call(move |store| store.list_operator_tokens(now_ms))
            .await?,
    ))
}

/// `POST /v1/admin/tokens/{name}/revoke`: the token stops working at once, on every replica;
/// the dashboard sessions it opened end with it.
#[utoipa::path(post, path = "/v1/admin/tokens/{name}/revoke", tag = "admin",
    params(("name" = String, Path, pattern = "^[a-z0-9][a-z0-9._-]{0,62}$", description = "the token's name")),
    responses(
        (status = 200, description = "revoked: the token as it was", body = OperatorTokenInfo),
        (status = 400, description = "`bad_token_name`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_token`", body = ErrorBody),
        (status = 409, description = "`last_admin_token`: it is the hub's last unexpired admin token", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn revoke_token(
    State(hub): State<Hub>,
    caller: Caller,
    Path(raw): Path<String>,
) -> Result<Json<OperatorTokenInfo>, ApiError> {
    let name = name(raw)?;
    let now_ms = hub.clock().now_ms();
    let info = hub
        .store_call(move |store| store.revoke_operator_token(&name, now_ms))
        .await?;
    tracing::info!(name = %info.name, role = info.role.as_str(), by = caller.name(), "operator token revoked");
    Ok(Json(info))
}

/// `POST /v1/admin/tokens/{name}/rotate`: a new secret for the token (same name, role and
/// expiry), shown once; the old secret stops working at once.
#[utoipa::path(post, path = "/v1/admin/tokens/{name}/rotate", tag = "admin",
    params(("name" = String, Path, pattern = "^[a-z0-9][a-z0-9._-]{0,62}$", description = "the token's name")),
    responses(
        (status = 200, description = "the token with its new secret, shown once", body = OperatorTokenCreated),
        (status = 400, description = "`bad_token_name`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_token`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn rotate_token(
    State(hub): State<Hub>,
    caller: Caller,
    Path(raw): Path<String>,
) -> Result<Json<OperatorTokenCreated>, ApiError> {
    let name = name(raw)?;
    let (token, hash) = secret::mint(SecretKind::Operator);
    let now_ms = hub.clock().now_ms();
    let info = hub
        .store_call(move |store| store.rotate_operator_token(&name, hash, now_ms))
        .await?;
    tracing::info!(name = %info.name, role = info.role.as_str(), by = caller.name(), "operator token rotated");
    Ok(Json(OperatorTokenCreated { token, info }))
}
