//! Desired state as operators follow it: the current document (`GET …/desired`), where each
//! guest stands against it (`GET …/desired/status`: current, last-applied and observed), and
//! the operation-journal records agents report (`GET …/operations`, what `bosunctl explain
//! --host` reads). These routes sit under the admin router, behind its token and role checks.
//!
//! A `PUT …/desired` may carry `X-Correlation-Id`; the hub stores it with the generation,
//! hands it to the agent with the document, and the agent tags the operations that
//! generation causes with it ([`correlation_id`]).

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use bosun_proto::admin::ErrorBody;
use bosun_proto::desired::{GuestSpec, Power};
use bosun_proto::desired_status::{self, DesiredStatus, DesiredView, GuestProgress, ProgressState};
use bosun_proto::oplog::{self, MAX_STORED_PER_HOST, OperationRecord};
use bosun_proto::report::{GuestReport, GuestStatus};
use uuid::Uuid;

use super::error::ApiError;
use super::extract;
use crate::Hub;
use crate::store::{DesiredFacts, OperationQuery};

/// Operation records listed when the query names no limit.
const DEFAULT_OPERATIONS: usize = 50;

/// The operator's `X-Correlation-Id`, if the request carries one: 1..=128 visible ASCII
/// characters, else 400 `bad_correlation_id`.
pub fn correlation_id(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(super::CORRELATION_ID) else {
        return Ok(None);
    };
    let bad = || ApiError::BadRequest {
        code: "bad_correlation_id",
        message: format!(
            "X-Correlation-Id must be 1..={} visible ASCII characters",
            oplog::MAX_CORRELATION_ID
        ),
    };
    let text = value.to_str().map_err(|_| bad())?;
    oplog::check_correlation_id("X-Correlation-Id", text).map_err(|_| bad())?;
    Ok(Some(text.to_owned()))
}

/// `GET /v1/admin/hosts/{host_id}/desired`.
#[utoipa::path(get, path = "/v1/admin/hosts/{host_id}/desired", tag = "admin",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)")),
    responses(
        (status = 200, description = "the current document with its generation and correlation id", body = DesiredView),
        (status = 400, description = "`bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`, `no_desired_state`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn get_desired(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
) -> Result<Json<DesiredView>, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    match hub
        .store_call(move |store| store.desired_current(host_id))
        .await?
    {
        Some(current) => Ok(Json(DesiredView { host_id, current })),
        None => Err(ApiError::NotFound {
            code: "no_desired_state",
            message: format!("host {host_id} has no desired state yet"),
        }),
    }
}

/// `GET /v1/admin/hosts/{host_id}/desired/status`.
#[utoipa::path(get, path = "/v1/admin/hosts/{host_id}/desired/status", tag = "admin",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)")),
    responses(
        (status = 200, description = "current and last-applied documents, and per guest whether the current generation is applied, pending or failed", body = DesiredStatus),
        (status = 400, description = "`bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn desired_status(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
) -> Result<Json<DesiredStatus>, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let facts = hub
        .store_call(move |store| store.desired_facts(host_id))
        .await?;
    Ok(Json(status(host_id, facts)))
}

/// `GET /v1/admin/hosts/{host_id}/operations?op=ID&correlation=C&limit=N`: the newest
/// records, one operation's, or those of one correlation id; with both `op` and
/// `correlation`, the operation's records if it carries that correlation id.
#[utoipa::path(get, path = "/v1/admin/hosts/{host_id}/operations", tag = "admin",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)"),
        ("op" = Option<uuid::Uuid>, Query, description = "only this operation (with `correlation` too: only if it carries that correlation id)"),
        ("correlation" = Option<String>, Query, min_length = 1, max_length = 128, pattern = "^[!-~]+$",
            description = "only operations carrying this correlation id (1..=128 visible ASCII characters)"),
        ("limit" = Option<u32>, Query, maximum = 256, description = "most records to list, the newest (default 50)")),
    responses(
        (status = 200, description = "the operation-journal records the agent reported, oldest first", body = Vec<OperationRecord>),
        (status = 400, description = "`bad_query`, `bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn list_operations(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<OperationRecord>>, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let bad_query = |message: String| ApiError::BadRequest {
        code: "bad_query",
        message,
    };
    let op = extract::query_param(query.as_deref(), "op")
        .map(|op| Uuid::parse_str(op).map_err(|e| bad_query(format!("op {op:?}: {e}"))))
        .transpose()?;
    let correlation = extract::query_param(query.as_deref(), "correlation")
        .map(|id| {
            oplog::check_correlation_id("correlation", id)
                .map(|()| id.to_owned())
                .map_err(|e| bad_query(e.to_string()))
        })
        .transpose()?;
    // Both: the one operation, if it carries that correlation id.
    let filter = match (op, &correlation) {
        (Some(op), _) => OperationQuery::Op(op),
        (None, Some(id)) => OperationQuery::Correlation(id.clone()),
        (None, None) => OperationQuery::Recent,
    };
    let limit = extract::query_number::<usize>(query.as_deref(), "limit")?
        .unwrap_or(DEFAULT_OPERATIONS)
        .min(MAX_STORED_PER_HOST);
    let mut records = hub
        .store_call(move |store| store.operations(host_id, filter, limit))
        .await?;
    if let (Some(_), Some(id)) = (op, &correlation) {
        records.retain(|record| record.correlation_id.as_deref() == Some(id.as_str()));
    }
    Ok(Json(records))
}

/// Where the current generation stands, per guest.
pub fn status(host_id: Uuid, facts: DesiredFacts) -> DesiredStatus {
    let (observed, refused): (Vec<GuestReport>, _) = facts
        .report
        .map(|r| (r.guests, r.refused))
        .unwrap_or_default();
    let (guests, unmanaged) = match &facts.current {
        Some(current) => {
            let host_applied = facts.applied_generation >= current.generation;
            let guests = current
                .document
                .guests
                .iter()
                .map(|spec| {
                    let seen = observed.iter().find(|g| g.guest_id == Some(spec.guest_id));
                    progress(spec, seen, host_applied, &facts.operations)
                })
                .collect();
            let unmanaged = observed
                .iter()
                .filter(|g| {
                    !g.guest_id
                        .is_some_and(|id| current.document.guests.iter().any(|s| s.guest_id == id))
                })
                .cloned()
                .collect();
            (guests, unmanaged)
        }
        None => (Vec::new(), observed),
    };
    DesiredStatus {
        host_id,
        desired: facts.current,
        applied: facts.applied,
        known_generation: facts.known_generation,
        applied_generation: facts.applied_generation,
        last_seen: facts.last_seen,
        guests,
        unmanaged,
        operations: facts.operations,
        refused,
    }
}

/// One guest's progress: broken or lost is a final failure; migrated away is refused (final,
/// the host leaves it alone); a field the host cannot apply is
/// refused (final, with why); applied when the host converged to the generation or the guest
/// already matches its spec; failed (with the agent's reason)
/// when the newest operation the generation caused for it failed; otherwise pending.
fn progress(
    spec: &GuestSpec,
    seen: Option<&GuestReport>,
    host_applied: bool,
    operations: &[OperationRecord],
) -> GuestProgress {
    let id = spec.guest_id.to_string();
    let newest = operations
        .iter()
        .filter(|op| op.guest_id.as_deref() == Some(id.as_str()))
        .max_by_key(|op| (op.started_at, op.op_id));
    let (state, terminal, reason) = match seen.map(|g| g.status) {
        Some(GuestStatus::Broken) => (
            ProgressState::Failed,
            true,
            Some(
                "the guest failed to start too many times; it is not started again until desired state changes"
                    .to_owned(),
            ),
        ),
        Some(GuestStatus::Lost) => (
            ProgressState::Failed,
            true,
            Some("the guest is lost: gone from Proxmox; restore it from a backup".to_owned()),
        ),
        Some(GuestStatus::Migrated) => (
            ProgressState::Refused,
            true,
            Some(
                "the guest was migrated to another node of the Proxmox cluster; this host leaves it alone there"
                    .to_owned(),
            ),
        ),
        // A field the host cannot apply keeps the guest out of sync, whatever generation the
        // host says it converged to.
        _ if let Some(refused) = seen
            .map(|g| desired_status::unappliable(spec, g))
            .filter(|r| !r.is_empty()) =>
        {
            let reasons: Vec<String> = refused
                .iter()
                .map(|r| format!("{}: {}", r.field, r.reason))
                .collect();
            (ProgressState::Refused, true, Some(reasons.join("; ")))
        }
        _ if host_applied || seen.is_some_and(|g| matches(spec, g)) => {
            (ProgressState::Applied, false, None)
        }
        _ => match newest {
            Some(op) if matches!(op.status.as_str(), "failed" | "compensated") => (
                ProgressState::Failed,
                false,
                Some(format!(
                    "{} {}: {}",
                    op.kind,
                    op.status,
                    op.error.as_deref().unwrap_or("no reason recorded")
                )),
            ),
            _ => (ProgressState::Pending, false, None),
        },
    };
    GuestProgress {
        guest_id: spec.guest_id,
        hostname: spec.hostname.clone(),
        state,
        terminal,
        reason,
        observed: seen.cloned(),
    }
}

/// Whether what the host reports of a guest already is what `spec` asks for: power, cores,
/// memory and root disk as asked (a larger root disk is refused before this is asked).
fn matches(spec: &GuestSpec, seen: &GuestReport) -> bool {
    let power = matches!(
        (spec.power, seen.status),
        (Power::Running, GuestStatus::Running) | (Power::Stopped, GuestStatus::Stopped)
    );
    let size = seen.resources.is_some_and(|r| {
        r.cores == spec.resources.cores
            && r.memory_mib == spec.resources.memory_mib
            && r.rootfs_gib == spec.resources.rootfs_gib
    });
    power && size
}

#[cfg(test)]
#[path = "admin_desired_tests.rs"]
mod tests;
