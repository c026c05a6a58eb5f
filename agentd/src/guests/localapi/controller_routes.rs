//! The controller endpoints (DESIGN §11): which image digest this guest's controller should
//! run (as an operator's signed `controller-update` job chose it), and the controller's health
//! report, which decides a rollout and keeps the heal task from restarting it.
//!
//! And `/v1/break-glass/consent` (DESIGN §12, decision 0080): the controller grants, for a
//! bounded time, or revokes consent to break-glass support commands touching its own guest, and
//! reads where it stands. The guest is the caller's, from its token alone; an explicit id naming
//! another guest is refused with 403 before anything changes ([`check_scope`]). Each grant and
//! revoke is in the consent file the support shell reads before this answers, and in the
//! guest's `GET /v1/audit`.

use std::time::Duration;

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
use crate::trust::break_glass::consent::{
    ConsentError, LiveConsent, MAX_CONSENT_REASON_CHARS, MAX_CONSENT_SECONDS, MIN_CONSENT_SECONDS,
};

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
        && (detail.chars().count() > MAX_DETAIL_CHARS
            || detail.chars().any(bosun_proto::inert::is_control))
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

/// Where the caller's consent stands.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ConsentState {
    /// Whether break-glass commands may touch this guest now.
    pub granted: bool,
    /// When the consent ends (RFC 3339); absent without one.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<jiff::Timestamp>,
    /// The longest consent that may be granted, in seconds.
    pub max_duration_seconds: u64,
}

/// The body of `POST /v1/break-glass/consent`.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct ConsentBody {
    /// How long the consent lasts, in seconds (1 to 86 400). A grant replaces the guest's
    /// earlier one.
    #[serde(default)]
    #[schema(required = true, minimum = 1, maximum = 86400)]
    pub duration_seconds: u64,
    /// Why, for the guest's audit log (at most 200 printable characters).
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1F\x7F-\x9F]*$")]
    pub reason: Option<String>,
    /// Explicit ids, checked against the caller.
    #[serde(flatten)]
    pub scope: Scope,
}

fn state(consent: Option<LiveConsent>) -> ConsentState {
    ConsentState {
        granted: consent.is_some(),
        expires_at: consent.map(|c| c.expires_at),
        max_duration_seconds: MAX_CONSENT_SECONDS,
    }
}

fn unavailable(error: &ConsentError) -> ApiError {
    tracing::error!(error = %bosun_errchain::error_chain(error), "a break-glass consent could not be changed");
    ApiError::Unavailable {
        what: "break-glass consent file",
    }
}

/// Whether break-glass commands may touch the caller's guest now, and until when.
#[utoipa::path(get, path = "/v1/break-glass/consent", tag = "break-glass", security(("bearer" = [])),
    params(("vmid" = Option<u32>, Query, description = "if given, must be the caller's own"),
           ("guest_id" = Option<String>, Query, description = "if given, must be the caller's own")),
    responses((status = 200, body = ConsentState), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub(super) async fn consent_state(
    State(api): State<LocalApi>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<ConsentState>, ApiError> {
    check_scope(&api, &caller, query.as_deref(), None, "break-glass.consent").await?;
    Ok(Json(state(
        api.inner.consent.current(&caller.guest_id).await,
    )))
}

/// Consents, for `duration_seconds`, to break-glass support commands touching the caller's
/// guest.
#[utoipa::path(post, path = "/v1/break-glass/consent", tag = "break-glass", security(("bearer" = [])),
    request_body(content = ConsentBody, content_type = "application/json"),
    responses((status = 200, body = ConsentState), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 408, body = ErrorBody), (status = 413, body = ErrorBody),
              (status = 415, body = ErrorBody), (status = 429, body = ErrorBody),
              (status = 503, body = ErrorBody)))]
pub(super) async fn grant_consent(
    State(api): State<LocalApi>,
    caller: Caller,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody<ConsentBody>,
) -> Result<Json<ConsentState>, ApiError> {
    check_scope(
        &api,
        &caller,
        query.as_deref(),
        Some(&body.scope),
        "break-glass.consent",
    )
    .await?;
    if !(MIN_CONSENT_SECONDS..=MAX_CONSENT_SECONDS).contains(&body.duration_seconds) {
        return Err(ApiError::BadRequest {
            reason: format!(
                "duration_seconds must lie between {MIN_CONSENT_SECONDS} and \
                 {MAX_CONSENT_SECONDS} (24 h): a consent is bounded in time; grant again when it ends"
            ),
        });
    }
    if let Some(reason) = &body.reason
        && (reason.chars().count() > MAX_CONSENT_REASON_CHARS
            || reason.chars().any(bosun_proto::inert::is_control))
    {
        return Err(ApiError::BadRequest {
            reason: format!(
                "reason must be at most {MAX_CONSENT_REASON_CHARS} printable characters"
            ),
        });
    }
    let granted = api
        .inner
        .consent
        .grant(
            &caller.guest_id,
            caller.vmid.get(),
            Duration::from_secs(body.duration_seconds),
            body.reason,
        )
        .await
        .map_err(|e| unavailable(&e))?;
    Ok(Json(state(Some(granted))))
}

/// Revokes the caller's consent; break-glass commands touching its guest are refused from the
/// next one on.
#[utoipa::path(delete, path = "/v1/break-glass/consent", tag = "break-glass", security(("bearer" = [])),
    params(("vmid" = Option<u32>, Query, description = "if given, must be the caller's own"),
           ("guest_id" = Option<String>, Query, description = "if given, must be the caller's own")),
    responses((status = 200, body = ConsentState), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 429, body = ErrorBody),
              (status = 503, body = ErrorBody)))]
pub(super) async fn revoke_consent(
    State(api): State<LocalApi>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<ConsentState>, ApiError> {
    check_scope(&api, &caller, query.as_deref(), None, "break-glass.consent").await?;
    api.inner
        .consent
        .revoke(&caller.guest_id, caller.vmid.get())
        .await
        .map_err(|e| unavailable(&e))?;
    Ok(Json(state(None)))
}
