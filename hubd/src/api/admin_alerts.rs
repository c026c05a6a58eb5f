//! What operators do with open alerts (`/v1/admin/alerts/...`): acknowledge one, silence a
//! host's alerts for a while, list the silences in force and end one early. Each is an event
//! in the hub's log (`alert_acknowledged`, `alert_silenced`, `alert_unsilenced`).

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use bosun_proto::ValidationError;
use bosun_proto::admin::{ErrorBody, OpenAlert};
use bosun_proto::alert_triage::{AckAlert, CreateSilence, Silence};

use super::error::ApiError;
use super::extract::{self, Body};
use crate::Hub;

/// A request field the hub refuses: 400 with a code naming the field.
fn refused(err: ValidationError) -> ApiError {
    let code = match err.field() {
        "duration_seconds" => "bad_duration",
        "note" => "bad_note",
        "reason" => "bad_reason",
        _ => "bad_subject",
    };
    ApiError::BadRequest {
        code,
        message: err.to_string(),
    }
}

/// `POST /v1/admin/alerts/ack`: acknowledges an open alert. It stays open and listed, marked
/// acknowledged, and no longer escalates its host past `warning`, until it resolves.
#[utoipa::path(post, path = "/v1/admin/alerts/ack", tag = "admin",
    request_body(content = AckAlert, description = "the open alert (host, kind, subject as listed) and a note"),
    responses(
        (status = 200, description = "the alert as now listed", body = OpenAlert),
        (status = 400, description = "`malformed_json`, `unreadable_body`, `bad_subject`, `bad_note`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_alert`: no such alert is open", body = ErrorBody),
        (status = 408, description = "`body_timeout`: the body did not arrive whole in time", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn ack_alert(State(hub): State<Hub>, body: Body) -> Result<Json<OpenAlert>, ApiError> {
    let request: AckAlert = extract::parse(&body.0, "alert acknowledgement", |_| Ok(()))?;
    acknowledge(&hub, request).await.map(Json)
}

/// Acknowledges the open alert `request` names, as the operator the call runs for
/// ([`crate::actor`]): the one path of `POST /v1/admin/alerts/ack` and the dashboard's form.
pub(crate) async fn acknowledge(hub: &Hub, request: AckAlert) -> Result<OpenAlert, ApiError> {
    request.validate().map_err(refused)?;
    let now_ms = hub.clock().now_ms();
    let alert = hub
        .store_call(move |store| store.ack_alert(&request, now_ms))
        .await?;
    tracing::info!(host_id = %alert.host_id, kind = alert.kind.as_str(), subject = alert.subject, "alert acknowledged");
    Ok(alert)
}

/// `POST /v1/admin/alerts/silences`: silences a host's alerts (of a kind, about a subject) for
/// up to 30 days. Alerts it covers are stored, listed and counted, but not sent to the webhook.
#[utoipa::path(post, path = "/v1/admin/alerts/silences", tag = "admin",
    request_body(content = CreateSilence, description = "host, optional kind and subject, duration and reason"),
    responses(
        (status = 201, description = "the silence", body = Silence),
        (status = 400, description = "`malformed_json`, `unreadable_body`, `bad_duration`, `bad_subject`, `bad_reason`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 409, description = "`too_many_silences`: the host has 64 in force", body = ErrorBody),
        (status = 408, description = "`body_timeout`: the body did not arrive whole in time", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn create_silence(
    State(hub): State<Hub>,
    body: Body,
) -> Result<(StatusCode, Json<Silence>), ApiError> {
    let request: CreateSilence = extract::parse(&body.0, "silence", |_| Ok(()))?;
    let silence = silence(&hub, request).await?;
    Ok((StatusCode::CREATED, Json(silence)))
}

/// Silences what `request` names, as the operator the call runs for ([`crate::actor`]): the
/// one path of `POST /v1/admin/alerts/silences` and the dashboard's form.
pub(crate) async fn silence(hub: &Hub, request: CreateSilence) -> Result<Silence, ApiError> {
    request.validate().map_err(refused)?;
    let now_ms = hub.clock().now_ms();
    let silence = hub
        .store_call(move |store| store.create_silence(&request, now_ms))
        .await?;
    tracing::info!(silence_id = silence.id, host_id = %silence.host_id, until = %silence.until, "alerts silenced");
    Ok(silence)
}

/// `GET /v1/admin/alerts/silences?limit=N`: the newest silences in force, newest first
/// (decision 0069).
#[utoipa::path(get, path = "/v1/admin/alerts/silences", tag = "admin",
    params(("limit" = Option<u32>, Query, maximum = 10000, description = "most silences to list, newest first (default and most 10000)")),
    responses(
        (status = 200, description = "the newest silences in force, newest first", body = Vec<Silence>),
        (status = 400, description = "`bad_query`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn list_silences(
    State(hub): State<Hub>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<Silence>>, ApiError> {
    let limit = super::listing::list_limit(query.as_deref(), super::listing::MAX_LISTED)?;
    let now_ms = hub.clock().now_ms();
    let mut silences = hub
        .store_call(move |store| store.list_silences(now_ms, limit))
        .await?;
    silences.reverse();
    Ok(Json(silences))
}

/// `DELETE /v1/admin/alerts/silences/{id}`: ends a silence in force early.
#[utoipa::path(delete, path = "/v1/admin/alerts/silences/{id}", tag = "admin",
    params(("id" = u64, Path, description = "the silence")),
    responses(
        (status = 200, description = "the silence, ended", body = Silence),
        (status = 400, description = "`bad_silence_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_silence`: none in force under this id", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn remove_silence(
    State(hub): State<Hub>,
    Path(raw): Path<String>,
) -> Result<Json<Silence>, ApiError> {
    let id: u64 = raw.parse().map_err(|_| ApiError::BadRequest {
        code: "bad_silence_id",
        message: format!("`{raw}` is not a silence id (a number)"),
    })?;
    let now_ms = hub.clock().now_ms();
    let silence = hub
        .store_call(move |store| store.remove_silence(id, now_ms))
        .await?;
    tracing::info!(silence_id = id, host_id = %silence.host_id, "silence removed");
    Ok(Json(silence))
}
