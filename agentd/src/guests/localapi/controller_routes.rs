//! The controller endpoints (DESIGN §11): which image digest this guest's controller should
//! run (as an operator's signed `controller-update` job chose it), and the controller's health
//! report, which decides a rollout and keeps the heal task from restarting it.

use axum::Json;
use axum::extract::{RawQuery, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::LocalApi;
use super::auth::Caller;
use super::body::JsonBody;
use super::error::{ApiError, ErrorBody};
use super::handlers::{Scope, check_scope};
use crate::guests::controller::board::MAX_DETAIL_CHARS;

/// Where this guest's controller stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ControllerStatus {
    /// Neither this guest's golden base nor a signed rollout named a digest: keep running
    /// what the image was built with.
    Unmanaged,
    /// A rollout waits for this guest's health report of `digest`.
    RollingOut,
    /// `digest` reported healthy.
    Running,
    /// The controller reported the last rollout's digest unhealthy; the guest was rolled back
    /// and `digest` is the previous one.
    RolledBack,
    /// The controller stayed silent through every in-place restart, or through the last
    /// rollout's window (then `digest` is the previous one again; the guest was not rolled back).
    Broken,
}

/// The answer of `GET /v1/controller`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DesiredController {
    /// The image digest to run (`sha256:…`), when a signature chose one (the golden recipe
    /// the guest was provisioned from, or a rollout).
    pub digest: Option<String>,
    /// Where it stands.
    pub status: ControllerStatus,
    /// The rollout that announced it.
    pub rollout_id: Option<String>,
    /// How often to report health, in seconds; a controller silent for much longer is
    /// restarted in place.
    pub report_interval_s: u64,
}

/// The body of `POST /v1/controller/health`.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct HealthBody {
    /// The image digest the controller runs (`sha256:` + 64 lowercase hex digits).
    #[serde(default)]
    #[schema(required = true, pattern = "^sha256:[0-9a-f]{64}$")]
    pub digest: String,
    /// Whether it is healthy.
    #[serde(default)]
    pub healthy: bool,
    /// What it says about it (at most 200 printable characters).
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1F\x7F-\x9F]*$")]
    pub detail: Option<String>,
    /// Explicit ids, checked against the caller.
    #[serde(flatten)]
    pub scope: Scope,
}

/// The answer of `POST /v1/controller/health`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HealthRecorded {
    /// The digest this guest should run, when one was chosen: a controller reporting another
    /// one should switch.
    pub desired_digest: Option<String>,
    /// Whether the reported digest is the desired one.
    pub matches: bool,
}

/// The image digest this guest's controller should run.
#[utoipa::path(get, path = "/v1/controller", tag = "controller", security(("bearer" = [])),
    params(("vmid" = Option<u32>, Query, description = "if given, must be the caller's own"),
           ("guest_id" = Option<String>, Query, description = "if given, must be the caller's own")),
    responses((status = 200, body = DesiredController), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub(super) async fn desired_controller(
    State(api): State<LocalApi>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<DesiredController>, ApiError> {
    check_scope(&api, &caller, query.as_deref(), None, "controller").await?;
    let announced = api.inner.controllers.announced(&caller.guest_id);
    let report_interval_s = api.inner.config.controller_report_interval.as_secs().max(1);
    Ok(Json(match announced {
        None => DesiredController {
            digest: None,
            status: ControllerStatus::Unmanaged,
            rollout_id: None,
            report_interval_s,
        },
        Some(a) => DesiredController {
            status: match a.state {
                crate::ops::journal::ControllerState::RollingOut => ControllerStatus::RollingOut,
                crate::ops::journal::ControllerState::Running => ControllerStatus::Running,
                crate::ops::journal::ControllerState::RolledBack => ControllerStatus::RolledBack,
                crate::ops::journal::ControllerState::Broken => ControllerStatus::Broken,
            },
            digest: a.digest,
            rollout_id: a.op_id.map(|o| o.to_string()),
            report_interval_s,
        },
    }))
}

/// The controller reports the digest it runs and whether it is healthy.
#[utoipa::path(post, path = "/v1/controller/health", tag = "controller", security(("bearer" = [])),
    request_body(content = HealthBody, content_type = "application/json"),
    responses((status = 200, body = HealthRecorded), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 408, body = ErrorBody), (status = 413, body = ErrorBody),
              (status = 415, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub(super) async fn report_health(
    State(api): State<LocalApi>,
    caller: Caller,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody<HealthBody>,
) -> Result<Json<HealthRecorded>, ApiError> {
    check_scope(
        &api,
        &caller,
        query.as_deref(),
        Some(&body.scope),
        "controller.health",
    )
    .await?;
    if !bosun_proto::controller::is_image_digest(&body.digest) {
        return Err(ApiError::BadRequest {
            reason: "digest must be an image digest: `sha256:` and 64 lowercase hex digits"
                .to_owned(),
        });
    }
    if let Some(detail) = &body.detail
        && (detail.chars().count() > MAX_DETAIL_CHARS || detail.chars().any(char::is_control))
    {
        return Err(ApiError::BadRequest {
            reason: format!("detail must be at most {MAX_DETAIL_CHARS} printable characters"),
        });
    }
    let desired = api.inner.controllers.report(
        &caller.guest_id,
        caller.vmid.get(),
        body.digest.clone(),
        body.healthy,
        body.detail,
    );
    tracing::debug!(guest_id = %caller.guest_id, vmid = %caller.vmid, digest = %body.digest, healthy = body.healthy, "controller health report");
    Ok(Json(HealthRecorded {
        matches: desired.as_deref() == Some(body.digest.as_str()),
        desired_digest: desired,
    }))
}
