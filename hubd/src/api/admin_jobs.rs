//! The admin API's job and escrow operations (rows of [`super::admin`]'s table): a signed job
//! queued byte-exact for its host, the host's jobs listed, a queued job cancelled, and the
//! escrow blob the agent stored.

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bosun_proto::admin::{ErrorBody, JobAccepted, JobCancelled, JobRecord};
use bosun_proto::job::SignedJob;

use super::error::ApiError;
use super::extract::{self, Body};
use super::listing::{MAX_LISTED, list_limit, newest_first};
use crate::Hub;
use crate::store::NewJob;

/// `POST /v1/admin/hosts/{host_id}/jobs`: queue a signed job, stored byte-exact.
#[utoipa::path(post, path = "/v1/admin/hosts/{host_id}/jobs", tag = "admin",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)")),
    request_body(content = SignedJob, description = "the operator-signed job; stored and forwarded byte-exact"),
    responses(
        (status = 200, description = "the identical job was already queued", body = JobAccepted),
        (status = 201, description = "queued", body = JobAccepted),
        (status = 400, description = "`malformed_json`, `unreadable_body`, `bad_host_id`, `job_expired` (its `expires_at` has passed by the hub's clock), `job_target_mismatch`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 409, description = "`job_conflict`: another job has this id", body = ErrorBody),
        (status = 408, description = "`body_timeout`: the body did not arrive whole in time", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 422, description = "`invalid_field`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn submit_job(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
    body: Body,
) -> Result<(StatusCode, Json<JobAccepted>), ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let envelope = extract::parse(&body.0, "bosun.signed-job/v1 envelope", SignedJob::validate)?;
    let document = envelope
        .parse_document()
        .map_err(|source| ApiError::Invalid {
            document: "bosun.signed-job/v1 envelope",
            source,
        })?;
    // The agent would refuse it as `expired` on arrival: say so now, not after the next poll.
    let now_ms = hub.clock().now_ms();
    if document.expires_at.as_millisecond() <= now_ms {
        return Err(ApiError::BadRequest {
            code: "job_expired",
            message: format!(
                "job {} expired at {}; sign a new one (bosunctl job new)",
                document.job_id, document.expires_at
            ),
        });
    }
    if document.target.host_id != host_id {
        return Err(ApiError::BadRequest {
            code: "job_target_mismatch",
            message: format!(
                "job {} targets host {}, not {host_id}",
                document.job_id, document.target.host_id
            ),
        });
    }
    let bytes = envelope
        .document_bytes()
        .map_err(|source| ApiError::Invalid {
            document: "bosun.signed-job/v1 envelope",
            source,
        })?;
    let job = NewJob {
        job_id: document.job_id,
        host_id,
        kind: document.kind.as_str(),
        document: bytes,
        signature: envelope.signature,
        priority: document.priority,
        now_ms,
    };
    let accepted = hub.store_call(move |store| store.submit_job(job)).await?;
    if accepted.created {
        hub.signals().notify(host_id);
        tracing::info!(%host_id, job_id = %accepted.job_id, kind = document.kind.as_str(), "job queued");
    }
    let status = if accepted.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(accepted)))
}

/// `GET /v1/admin/hosts/{host_id}/jobs?limit=N`.
#[utoipa::path(get, path = "/v1/admin/hosts/{host_id}/jobs", tag = "admin",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)"),
        ("limit" = Option<u32>, Query, maximum = 10000, description = "most jobs to list, newest first (default and most 10000)")),
    responses(
        (status = 200, description = "the host's newest jobs and their results, newest first", body = Vec<JobRecord>),
        (status = 400, description = "`bad_host_id`, `bad_query`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn list_jobs(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<JobRecord>>, ApiError> {
    let limit = list_limit(query.as_deref(), MAX_LISTED)?;
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let mut jobs = hub
        .store_call(move |store| store.list_jobs(host_id, limit))
        .await?;
    newest_first(&mut jobs);
    Ok(Json(jobs))
}

/// `POST /v1/admin/hosts/{host_id}/jobs/{job_id}/cancel`: the job leaves the queue.
#[utoipa::path(post, path = "/v1/admin/hosts/{host_id}/jobs/{job_id}/cancel", tag = "admin",
    params(
        ("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)"),
        ("job_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the queued job: its id, or an unambiguous prefix of it")),
    responses(
        (status = 200, description = "cancelled (or cancelled already): the next polls no longer carry it; an agent that received it in an earlier poll answer may still run it, and its result then replaces `cancelled`", body = JobCancelled),
        (status = 400, description = "`bad_host_id`, `bad_job_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`, `unknown_job`", body = ErrorBody),
        (status = 409, description = "`job_not_queued`: the agent acknowledged or finished it", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn cancel_job(
    State(hub): State<Hub>,
    Path((raw_host, raw_job)): Path<(String, String)>,
) -> Result<Json<JobCancelled>, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let job_id = extract::admin_job(&hub, &raw_job).await?;
    let now_ms = hub.clock().now_ms();
    let state = hub
        .store_call(move |store| store.cancel_job(host_id, job_id, now_ms))
        .await?;
    tracing::info!(%host_id, %job_id, "job cancelled");
    Ok(Json(JobCancelled { job_id, state }))
}

/// `GET /v1/admin/hosts/{host_id}/escrow`: the blob exactly as the agent sent it.
#[utoipa::path(get, path = "/v1/admin/hosts/{host_id}/escrow", tag = "admin",
    operation_id = "admin_get_escrow",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)")),
    responses(
        (status = 200, description = "the blob exactly as the agent sent it", body = bosun_proto::escrow::EscrowBlob),
        (status = 400, description = "`bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`, `no_escrow`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn get_escrow(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
) -> Result<Response, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    match hub.store_call(move |store| store.escrow(host_id)).await? {
        Some(blob) => Ok(([(header::CONTENT_TYPE, "application/json")], blob).into_response()),
        None => Err(ApiError::NotFound {
            code: "no_escrow",
            message: format!("host {host_id} has not stored an escrow blob"),
        }),
    }
}
