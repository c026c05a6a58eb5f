//! Hosts (`/v1/admin/hosts/...`): listing and showing them, approving a pending one, revoking
//! one's key, asking for its key to be rotated (decision 0044), and removing a revoked host
//! (decision 0040).

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use bosun_proto::admin::{ErrorBody, HostDetail, HostSummary};

use super::error::ApiError;
use super::extract;
use crate::Hub;

/// `GET /v1/admin/hosts`.
#[utoipa::path(get, path = "/v1/admin/hosts", tag = "admin",
    responses(
        (status = 200, description = "every host: status, liveness, generations, health", body = Vec<HostSummary>),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn list_hosts(State(hub): State<Hub>) -> Result<Json<Vec<HostSummary>>, ApiError> {
    let now_ms = hub.clock().now_ms();
    let (details, _) = hub
        .store_call(move |store| crate::health::fleet(store, now_ms))
        .await?;
    Ok(Json(details.into_iter().map(|d| d.summary).collect()))
}

/// `GET /v1/admin/hosts/{host_id}`.
#[utoipa::path(get, path = "/v1/admin/hosts/{host_id}", tag = "admin",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)")),
    responses(
        (status = 200, description = "the host with its desired state and last report", body = HostDetail),
        (status = 400, description = "`bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn show_host(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
) -> Result<Json<HostDetail>, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let now_ms = hub.clock().now_ms();
    let (detail, _) = hub
        .store_call(move |store| crate::health::host(store, host_id, now_ms))
        .await?;
    Ok(Json(detail))
}

/// `POST /v1/admin/hosts/{host_id}/approve`.
#[utoipa::path(post, path = "/v1/admin/hosts/{host_id}/approve", tag = "admin",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)")),
    responses(
        (status = 204, description = "approved: the host may poll"),
        (status = 400, description = "`bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 409, description = "`host_state`: not possible from the host's current status", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn approve_host(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
) -> Result<StatusCode, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let now_ms = hub.clock().now_ms();
    hub.store_call(move |store| store.approve_host(host_id, now_ms))
        .await?;
    tracing::info!(%host_id, "host approved");
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/admin/hosts/{host_id}/revoke`.
#[utoipa::path(post, path = "/v1/admin/hosts/{host_id}/revoke", tag = "admin",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)")),
    responses(
        (status = 204, description = "revoked: its key no longer works (a host already revoked stays so; nothing changes)"),
        (status = 400, description = "`bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 409, description = "`host_state`: not possible from the host's current status", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn revoke_host(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
) -> Result<StatusCode, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let now_ms = hub.clock().now_ms();
    hub.store_call(move |store| store.revoke_host(host_id, now_ms))
        .await?;
    hub.signals().notify(host_id);
    tracing::info!(%host_id, "host revoked");
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/admin/hosts/{host_id}/rotate-key`: the host's agent replaces its key at its next
/// poll (e.g. after a suspected leak). The old key keeps working until the agent first
/// presents the new one; a next key the hub held is dropped.
#[utoipa::path(post, path = "/v1/admin/hosts/{host_id}/rotate-key", tag = "admin",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)")),
    responses(
        (status = 202, description = "asked: the host's next poll answer tells its agent to make a new key; the `host.key_rotated` event says when the old key stopped working"),
        (status = 400, description = "`bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 409, description = "`host_state`: the host is revoked", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn rotate_host_key(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
) -> Result<StatusCode, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let now_ms = hub.clock().now_ms();
    hub.store_call(move |store| store.request_host_key_rotation(host_id, now_ms))
        .await?;
    hub.forget_host_key(host_id);
    // A held poll answers now, with the request in it.
    hub.signals().notify(host_id);
    tracing::info!(%host_id, "host key rotation requested");
    Ok(StatusCode::ACCEPTED)
}

/// `DELETE /v1/admin/hosts/{host_id}`: removes a revoked host and everything the hub keeps
/// about it; the event log keeps a `host_removed` event naming it.
#[utoipa::path(delete, path = "/v1/admin/hosts/{host_id}", tag = "admin",
    params(
        ("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)"),
        ("forget_escrow" = Option<bool>, Query, description = "`true` to remove a host whose escrow blob (the customer's wrapped key) the hub holds; without it such a host is refused with `escrow_held`")),
    responses(
        (status = 204, description = "removed: its desired state, jobs, escrow blob, audit trail, alerts, acknowledgements and silences are gone; the host id is unknown from now on"),
        (status = 400, description = "`bad_host_id`, `bad_query`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host` (also a host removed already)", body = ErrorBody),
        (status = 409, description = "`host_not_revoked`: the host is active or pending approval; revoke it first. `escrow_held`: the hub holds the host's escrow blob and `forget_escrow=true` was not given", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn remove_host(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<StatusCode, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let forget_escrow = match extract::query_param(query.as_deref(), "forget_escrow") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::BadRequest {
                code: "bad_query",
                message: format!(
                    "query parameter `forget_escrow` = `{other}` is not true or false"
                ),
            });
        }
    };
    let now_ms = hub.clock().now_ms();
    let removed = hub
        .store_call(move |store| store.remove_host(host_id, forget_escrow, now_ms))
        .await?;
    hub.forget_host_key(host_id);
    hub.history().forget(host_id);
    hub.signals().notify(host_id);
    tracing::info!(%host_id, hostname = %removed.hostname, deleted = ?removed.rows, "host removed");
    Ok(StatusCode::NO_CONTENT)
}
