//! `GET /v1/audit`: what was done to the caller's own guest, from the host's chained audit
//! log ([`crate::ops::journal::guest_audit`]): its operations (snapshots, rollbacks, backups,
//! restores, restore tests, controller rollouts, resizes, power, decommission) and the
//! break-glass sessions opened on its host and the kind and exit status of each host-level
//! command run through them; each break-glass command on its own guest in full, and its
//! consents (decision 0080). Another guest's rows are never shown.

use axum::Json;
use axum::extract::{RawQuery, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::LocalApi;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::handlers::check_scope;
use crate::ops::journal::guest_audit::MAX_PAGE;

/// Rows a page holds when the caller does not say.
const DEFAULT_PAGE: u32 = 50;

/// One entry of the caller's audit log.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditItem {
    /// Its position in the host's log; pages go by it.
    pub seq: u64,
    /// When it was written (RFC 3339).
    #[schema(value_type = String, format = DateTime)]
    pub at: jiff::Timestamp,
    /// What happened (`operation.finished`, `localapi.rollback`, `guest.restored`,
    /// `break_glass.opened`, `break_glass.command`, …).
    pub event: String,
    /// It concerns the whole host (a break-glass session), not only this guest.
    pub host_wide: bool,
    /// Its facts (for `operation.finished`: `kind`, `status` and, when it failed, `error`;
    /// for a host-wide `break_glass.command`: the command's `kind` and exit `status`; for one on
    /// this guest also its `command` and, when it was refused, `refused: no_consent`).
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

/// The answer of `GET /v1/audit`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditPage {
    /// Newest first.
    pub entries: Vec<AuditItem>,
    /// Ask again with `before` set to this for the older entries; absent on the last page.
    pub next_before: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct PageQuery {
    before: Option<String>,
    limit: Option<String>,
}

fn parse_page(query: Option<&str>) -> Result<(Option<u64>, u32), ApiError> {
    let page: PageQuery = match query {
        Some(q) => serde_urlencoded::from_str::<Vec<(String, String)>>(q)
            .map(|pairs| {
                let take = |k: &str| pairs.iter().rev().find(|(n, _)| n == k);
                PageQuery {
                    before: take("before").map(|(_, v)| v.clone()),
                    limit: take("limit").map(|(_, v)| v.clone()),
                }
            })
            .map_err(|_| ApiError::BadRequest {
                reason: "the query string is malformed".to_owned(),
            })?,
        None => PageQuery::default(),
    };
    let before = page
        .before
        .map(|b| b.parse::<u64>().ok().filter(|b| *b >= 1))
        .map(|b| {
            b.ok_or_else(|| ApiError::BadRequest {
                reason: "before must be a positive whole number (an entry's seq)".to_owned(),
            })
        })
        .transpose()?;
    let limit = match page.limit {
        None => DEFAULT_PAGE,
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|l| (1..=MAX_PAGE).contains(l))
            .ok_or_else(|| ApiError::BadRequest {
                reason: format!("limit must be a whole number from 1 to {MAX_PAGE}"),
            })?,
    };
    Ok((before, limit))
}

/// What was done to the caller's guest, newest first.
#[utoipa::path(get, path = "/v1/audit", tag = "audit", security(("bearer" = [])),
    params(("before" = Option<u64>, Query, minimum = 1, description = "only entries older than this seq (the previous page's `next_before`)"),
           ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "at most this many entries (default 50)"),
           ("vmid" = Option<u32>, Query, description = "if given, must be the caller's own"),
           ("guest_id" = Option<String>, Query, description = "if given, must be the caller's own")),
    responses((status = 200, body = AuditPage), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub(super) async fn guest_audit(
    State(api): State<LocalApi>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<AuditPage>, ApiError> {
    check_scope(&api, &caller, query.as_deref(), None, "audit").await?;
    let (before, limit) = parse_page(query.as_deref())?;
    let rows = api
        .inner
        .journal
        .guest_audit(caller.guest_id.clone(), before, limit)
        .await
        .map_err(|e| {
            tracing::warn!(error = %bosun_errchain::error_chain(&e), "the guest's audit log is unreadable");
            ApiError::Unavailable { what: "journal" }
        })?;
    let full = u32::try_from(rows.len()).unwrap_or(u32::MAX) == limit;
    let next_before = rows.last().filter(|_| full).map(|r| r.seq);
    Ok(Json(AuditPage {
        entries: rows
            .into_iter()
            .map(|r| AuditItem {
                seq: r.seq,
                at: r.at,
                event: r.event,
                host_wide: r.host_wide,
                detail: r.detail,
            })
            .collect(),
        next_before,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_bounded_and_malformed_ones_refused() {
        assert_eq!(parse_page(None).unwrap(), (None, DEFAULT_PAGE));
        assert_eq!(
            parse_page(Some("before=7&limit=100&vmid=101")).unwrap(),
            (Some(7), 100)
        );
        for bad in [
            "limit=0",
            "limit=101",
            "limit=x",
            "before=0",
            "before=-1",
            "before=1e3",
        ] {
            assert!(
                matches!(parse_page(Some(bad)), Err(ApiError::BadRequest { .. })),
                "{bad}"
            );
        }
    }
}
