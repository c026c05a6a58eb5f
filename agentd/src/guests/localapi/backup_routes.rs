//! Backup endpoints: start a quiesced backup, ask whether one is due, read its phase, and
//! `GET /v1/protection`: the caller's own guest's protection, from the agent's journal and
//! judged against the signed plan ([`crate::data::protection`]): when it was last backed up per
//! tier, last verified per PBS tier, last restore-tested, how each ended and whether any of it
//! is overdue. Another guest's protection is never shown; an explicit id naming another guest
//! is refused (403) like every other route.

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use bosun_errchain::error_chain;
use bosun_proto::protection::GuestProtection;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::LocalApi;
use super::auth::Caller;
use super::body::JsonBody;
use super::error::{ApiError, ErrorBody};
use super::handlers::{Scope, check_scope, pve_error};
use crate::data::backup::{BackupError, BackupInitiator, BackupRequest, BackupRun};
use crate::data::protection::{Facts, assess};
use crate::ops::journal::JournalError;

/// The body of `POST /v1/backup`.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct BackupBody {
    /// The controller stopped its apps before asking.
    #[serde(default)]
    pub quiesced: bool,
    /// The longest the controller keeps its apps stopped, 1..=86400 s.
    #[schema(minimum = 1, maximum = 86_400)]
    pub max_quiesce_s: Option<u32>,
    /// Explicit ids, checked against the caller.
    #[serde(flatten)]
    pub scope: Scope,
}

/// Queues a snapshot-mode backup of the caller's guest.
#[utoipa::path(post, path = "/v1/backup", tag = "backup", security(("bearer" = [])),
    request_body(content = BackupBody, content_type = "application/json"),
    responses((status = 202, body = BackupRun), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 408, body = ErrorBody), (status = 409, body = ErrorBody),
              (status = 429, body = ErrorBody)))]
pub(super) async fn start_backup(
    State(api): State<LocalApi>,
    caller: Caller,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody<BackupBody>,
) -> Result<impl IntoResponse, ApiError> {
    check_scope(&api, &caller, query.as_deref(), Some(&body.scope), "backup").await?;
    if body
        .max_quiesce_s
        .is_some_and(|s| !(1..=86_400).contains(&s))
    {
        return Err(ApiError::BadRequest {
            reason: "max_quiesce_s must be between 1 and 86400".to_owned(),
        });
    }
    let request = BackupRequest {
        tier: 0,
        quiesced: body.quiesced,
        max_quiesce_s: body.max_quiesce_s,
        initiator: BackupInitiator::Controller,
    };
    let run = api
        .inner
        .backups
        .start(caller.guest_ref(), request, None)
        .await
        .map_err(backup_error)?;
    Ok((StatusCode::ACCEPTED, Json(run)))
}

fn backup_error(e: BackupError) -> ApiError {
    match e {
        BackupError::InProgress { phase, .. } => ApiError::BackupInProgress {
            phase: phase.to_owned(),
        },
        BackupError::Queue { .. } => ApiError::Unavailable { what: "work queue" },
        BackupError::Journal { .. } => ApiError::Unavailable { what: "journal" },
        BackupError::NoSuchTier { .. } => ApiError::Unavailable {
            what: "backup policy",
        },
        BackupError::ListBackups { source, .. } => pve_error("backup listing", source),
        BackupError::Schedule { source, .. } => ApiError::PolicyInvalid {
            reason: source.to_string(),
        },
    }
}

/// The answer of `GET /v1/backup/due`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BackupDue {
    /// A policy backup is due: quiesce, then `POST /v1/backup`.
    pub due: bool,
    /// The vzdump mode the backup uses.
    pub mode: String,
    /// The policy's calendar event.
    pub schedule: String,
    /// The scheduled time the backup is due for (RFC 3339), when due.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub due_since: Option<Timestamp>,
    /// When the agent backs up without waiting for the controller (RFC 3339), when due.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub deadline: Option<Timestamp>,
    /// The next scheduled time (RFC 3339).
    #[schema(value_type = Option<String>, format = DateTime)]
    pub next_run: Option<Timestamp>,
    /// Seconds between the last two scheduled times.
    pub interval_s: Option<i64>,
    /// The last successful backup (RFC 3339), if any.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_success: Option<Timestamp>,
    /// The minutes the controller has to quiesce before the deadline.
    pub quiesce_grace_minutes: u32,
}

/// Whether a policy backup of the caller's guest is due.
#[utoipa::path(get, path = "/v1/backup/due", tag = "backup", security(("bearer" = [])),
    params(("vmid" = Option<u32>, Query, description = "if given, must be the caller's own"),
           ("guest_id" = Option<String>, Query, description = "if given, must be the caller's own")),
    responses((status = 200, body = BackupDue), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 409, body = ErrorBody),
              (status = 429, body = ErrorBody), (status = 502, body = ErrorBody)))]
pub(super) async fn backup_due(
    State(api): State<LocalApi>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<BackupDue>, ApiError> {
    check_scope(&api, &caller, query.as_deref(), None, "backup.due").await?;
    let policy = api
        .inner
        .policy
        .borrow()
        .clone()
        .ok_or(ApiError::NoPolicy)?;
    let crate::data::backup::PolicyVerdict {
        verdict,
        last_success,
    } = api
        .inner
        .backups
        .policy_verdict(&caller.guest_ref(), &policy)
        .await
        .map_err(backup_error)?;
    Ok(Json(BackupDue {
        due: verdict.due,
        mode: "snapshot".to_owned(),
        schedule: policy.schedule,
        due_since: verdict.due_since,
        deadline: verdict.deadline,
        next_run: verdict.next_run,
        interval_s: verdict.interval.map(|d| d.as_secs()),
        last_success,
        // The grace applied (at most half the signed interval), in whole minutes.
        quiesce_grace_minutes: u32::try_from(verdict.grace.as_secs() / 60).unwrap_or(0),
    }))
}

/// The answer of `GET /v1/backup/status`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BackupStatus {
    /// The current or most recent run since the agent started, if any.
    pub run: Option<BackupRun>,
}

/// The phase of the caller's current or latest backup.
#[utoipa::path(get, path = "/v1/backup/status", tag = "backup", security(("bearer" = [])),
    params(("vmid" = Option<u32>, Query, description = "if given, must be the caller's own"),
           ("guest_id" = Option<String>, Query, description = "if given, must be the caller's own")),
    responses((status = 200, body = BackupStatus), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub(super) async fn backup_status(
    State(api): State<LocalApi>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<BackupStatus>, ApiError> {
    check_scope(&api, &caller, query.as_deref(), None, "backup.status").await?;
    Ok(Json(BackupStatus {
        run: api.inner.backups.status(&caller.guest_id),
    }))
}

/// The caller's protection: every backup tier, every PBS tier's verification and the restore
/// test the plan (or, without one, desired state) promises, each with its newest result and
/// whether it is overdue (more than twice its interval without a success).
#[utoipa::path(get, path = "/v1/protection", tag = "protection", security(("bearer" = [])),
    params(("vmid" = Option<u32>, Query, description = "if given, must be the caller's own"),
           ("guest_id" = Option<String>, Query, description = "if given, must be the caller's own")),
    responses((status = 200, body = GuestProtection), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 429, body = ErrorBody),
              (status = 503, body = ErrorBody)))]
pub(super) async fn protection(
    State(api): State<LocalApi>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<GuestProtection>, ApiError> {
    check_scope(&api, &caller, query.as_deref(), None, "protection").await?;
    let unavailable = |e: JournalError| {
        tracing::warn!(guest_id = %caller.guest_id, error = %error_chain(&e), "the journal is unreadable; protection not answered");
        ApiError::Unavailable { what: "journal" }
    };
    let guest_id = uuid::Uuid::parse_str(&caller.guest_id).map_err(|_| {
        tracing::warn!(guest_id = %caller.guest_id, "a token's guest id is not a uuid");
        ApiError::Unavailable { what: "journal" }
    })?;
    let journal = &api.inner.journal;
    let vmid = caller.vmid.get();
    let arrived_at = journal
        .provenance(vmid)
        .await
        .map_err(unavailable)?
        .filter(|p| p.guest_id() == Some(caller.guest_id.as_str()))
        .map(|p| p.created_at());
    let backups = journal.last_backups().await.map_err(unavailable)?;
    let verifications = journal.last_verifications().await.map_err(unavailable)?;
    let restore_tests = journal.last_restore_tests().await.map_err(unavailable)?;
    let snapshot = api.inner.desired.borrow().clone();
    let config = &api.inner.config;
    let answer = assess(&Facts {
        guest_id,
        vmid,
        now: api.inner.clock.now(),
        state: snapshot.as_deref().map(|s| &s.state),
        plan: snapshot
            .as_deref()
            .and_then(|s| s.plan.as_deref())
            .map(|p| &p.plan),
        default_storage: &config.default_storage,
        verify_hour: config.verify_hour,
        arrived_at,
        backups: &backups,
        verifications: &verifications,
        restore_tests: &restore_tests,
    });
    if answer.overdue {
        tracing::info!(guest_id = %caller.guest_id, overdue = answer.overdue_items().count(), "a guest read its protection: overdue");
    }
    Ok(Json(answer))
}
