//! `GET /v1/protection`: the caller's own guest's protection, from the agent's journal and
//! judged against the signed plan ([`crate::data::protection`]): when it was last backed up per
//! tier, last verified per PBS tier, last restore-tested, how each ended and whether any of it
//! is overdue. Another guest's protection is never shown; an explicit id naming another guest
//! is refused (403) like every other route.

use axum::Json;
use axum::extract::{RawQuery, State};
use bosun_errchain::error_chain;
use bosun_proto::protection::GuestProtection;

use super::LocalApi;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::handlers::check_scope;
use crate::data::protection::{Facts, assess};
use crate::ops::journal::JournalError;

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
