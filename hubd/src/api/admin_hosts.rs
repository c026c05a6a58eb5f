//! Removing a revoked host (`DELETE /v1/admin/hosts/{host_id}`, decision 0040).

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use bosun_proto::admin::ErrorBody;

use super::error::ApiError;
use super::extract;
use crate::Hub;

/// `DELETE /v1/admin/hosts/{host_id}`: removes a revoked host and everything the hub keeps
/// about it; the event log keeps a `host_removed` event naming it.
#[utoipa::path(delete, path = "/v1/admin/hosts/{host_id}", tag = "admin",
    params(
        ("host_id" = uuid::Uuid, Path, description = "the host"),
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
    let host_id = extract::host_id(&raw_host)?;
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
    hub.signals().notify(host_id);
    tracing::info!(%host_id, hostname = %removed.hostname, deleted = ?removed.rows, "host removed");
    Ok(StatusCode::NO_CONTENT)
}
