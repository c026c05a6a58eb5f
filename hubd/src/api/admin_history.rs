//! A host's history (`GET /v1/admin/hosts/{host_id}/history`): its five-minute points over a
//! bounded window, stored ones merged with what this hub holds and has not written yet.

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use bosun_proto::admin::ErrorBody;
use bosun_proto::history::{BUCKET_SECONDS, DEFAULT_HOURS, HostHistory, MAX_HOURS};
use uuid::Uuid;

use super::error::ApiError;
use super::extract;
use crate::Hub;
use crate::store::StoreError;

/// Hours in ms.
const HOUR_MS: i64 = 3_600_000;

/// `GET /v1/admin/hosts/{host_id}/history`.
#[utoipa::path(get, path = "/v1/admin/hosts/{host_id}/history", tag = "admin",
    params(
        ("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)"),
        ("hours" = Option<u32>, Query, minimum = 1, maximum = 336, description = "how far back, hours (1 to 336, 14 days; default 24)")),
    responses(
        (status = 200, description = "the host's five-minute points in the window, newest first", body = HostHistory),
        (status = 400, description = "`bad_host_id`, `bad_query`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn host_history(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<HostHistory>, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let hours = hours(query.as_deref())?;
    Ok(Json(read(&hub, host_id, hours).await?))
}

/// The `hours` the query asks for, within 1 to [`MAX_HOURS`].
pub fn hours(query: Option<&str>) -> Result<u32, ApiError> {
    let hours = extract::query_number::<u32>(query, "hours")?.unwrap_or(DEFAULT_HOURS);
    if !(1..=MAX_HOURS).contains(&hours) {
        return Err(ApiError::BadRequest {
            code: "bad_query",
            message: format!("query parameter `hours` = {hours} is not 1 to {MAX_HOURS}"),
        });
    }
    Ok(hours)
}

/// The host's history over the last `hours` (the host must exist).
pub async fn read(hub: &Hub, host_id: Uuid, hours: u32) -> Result<HostHistory, StoreError> {
    let now_ms = hub.clock().now_ms();
    let to_ms = crate::history::bucket_of(now_ms) + crate::history::BUCKET_MS;
    let from_ms = crate::history::bucket_of(now_ms - i64::from(hours) * HOUR_MS);
    let stored = hub
        .store_call(move |store| {
            if store.host_credentials(host_id)?.is_none() {
                return Err(StoreError::UnknownHost { host_id });
            }
            store.host_history(host_id, from_ms, to_ms)
        })
        .await?;
    let unwritten = hub.history().unwritten(host_id);
    let points = crate::history::merged(stored, unwritten, from_ms, to_ms)
        .iter()
        .map(crate::store::history::HistoryBucket::point)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(HostHistory {
        host_id,
        bucket_seconds: BUCKET_SECONDS,
        from: crate::store::history::timestamp(from_ms)?,
        to: crate::store::history::timestamp(now_ms)?,
        points,
    })
}
