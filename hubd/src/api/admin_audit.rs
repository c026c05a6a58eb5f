//! `GET /v1/admin/audit`: the audit trail the agents reported, newest first, a page at a time.

use axum::Json;
use axum::extract::{RawQuery, State};
use bosun_proto::admin::{AuditPage, ErrorBody, MAX_AUDIT_PAGE};
use uuid::Uuid;

use super::error::ApiError;
use crate::Hub;
use crate::store::{AuditCursor, AuditQuery};

/// Entries a page holds when `limit` is not given.
pub const DEFAULT_AUDIT_PAGE: u32 = 50;

/// The query, every key optional; an unknown key is refused (a misspelt filter must not
/// answer the whole trail).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    host: Option<String>,
    guest: Option<String>,
    since: Option<String>,
    before: Option<String>,
    limit: Option<String>,
}

fn bad_query(message: String) -> ApiError {
    ApiError::BadRequest {
        code: "bad_query",
        message,
    }
}

/// Reads and checks the query of `GET /v1/admin/audit`; `host=` is a whole id or an
/// unambiguous prefix the store resolves, as everywhere an operator names a host.
pub async fn audit_query(hub: &Hub, raw: Option<&str>) -> Result<AuditQuery, ApiError> {
    let params: Params = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|e| bad_query(format!("audit query: {e}")))?;
    let host_id = match params.host.as_deref() {
        Some(raw) => Some(super::extract::admin_host(hub, raw).await?),
        None => None,
    };
    let guest_id = params
        .guest
        .as_deref()
        .map(|raw| {
            Uuid::parse_str(raw).map_err(|_| ApiError::BadRequest {
                code: "bad_guest_id",
                message: format!("guest {raw:?} is not a guest id (a UUID)"),
            })
        })
        .transpose()?;
    if guest_id.is_some() && host_id.is_none() {
        return Err(ApiError::BadRequest {
            code: "guest_needs_host",
            message: "name the guest's host too (`host=`): a guest's entries are read from its \
                      host's trail"
                .to_owned(),
        });
    }
    let since_ms = params
        .since
        .as_deref()
        .map(|raw| {
            raw.parse::<jiff::Timestamp>()
                .map(|at| at.as_millisecond())
                .map_err(|_| bad_query(format!("since {raw:?} is not an RFC 3339 time")))
        })
        .transpose()?;
    let before = params
        .before
        .as_deref()
        .map(|raw| {
            AuditCursor::decode(raw).ok_or_else(|| {
                bad_query(format!(
                    "before {raw:?} is not a cursor (pass the `next_before` of a page)"
                ))
            })
        })
        .transpose()?;
    let limit = match params.limit.as_deref() {
        None => DEFAULT_AUDIT_PAGE,
        Some(raw) => match raw.parse::<u32>() {
            Ok(limit @ 1..=MAX_AUDIT_PAGE) => limit,
            _ => {
                return Err(bad_query(format!(
                    "limit {raw:?} must be 1 to {MAX_AUDIT_PAGE}"
                )));
            }
        },
    };
    Ok(AuditQuery {
        host_id,
        guest_id,
        since_ms,
        before,
        limit,
    })
}

/// Reads one page: `query.limit` entries and the cursor of the next page, if there is one.
pub async fn audit_page(hub: &Hub, query: AuditQuery) -> Result<AuditPage, ApiError> {
    let limit = usize::try_from(query.limit).unwrap_or(usize::MAX);
    // One more than the page: whether another page follows.
    let probe = AuditQuery {
        limit: query.limit.saturating_add(1),
        ..query
    };
    let mut entries = hub.store_call(move |store| store.audit(&probe)).await?;
    let next_before = if entries.len() > limit {
        entries.truncate(limit);
        entries.last().map(|last| AuditCursor::after(last).encode())
    } else {
        None
    };
    Ok(AuditPage {
        entries,
        next_before,
    })
}

/// `GET /v1/admin/audit?host=ID&guest=ID&since=RFC3339&before=CURSOR&limit=N`.
#[utoipa::path(get, path = "/v1/admin/audit", tag = "admin",
    params(
        ("host" = Option<String>, Query, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "only this host's entries: its id or an unambiguous prefix of it (409 `ambiguous_id` lists candidates)"),
        ("guest" = Option<uuid::Uuid>, Query, description = "only entries about this guest (its `guest_id`); needs `host`"),
        ("since" = Option<String>, Query, format = DateTime, description = "only entries at or after this RFC 3339 time"),
        ("before" = Option<String>, Query, pattern = r"^-?[0-9]{1,19}\.[0-9]{1,19}\.[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "only entries older than the previous page's last: its `next_before`"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "most entries on the page (default 50)")),
    responses(
        (status = 200, description = "a page of the audit trail, newest first", body = AuditPage),
        (status = 400, description = "`bad_query` (an unknown key, a bad time, cursor or limit), `bad_host_id` (not an id or a prefix of one), `bad_guest_id`, `guest_needs_host`", body = ErrorBody),
        (status = 404, description = "`unknown_host`: no host has that id or prefix", body = ErrorBody),
        (status = 409, description = "`ambiguous_id`: the prefix names more than one host", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn list_audit(
    State(hub): State<Hub>,
    RawQuery(query): RawQuery,
) -> Result<Json<AuditPage>, ApiError> {
    let query = audit_query(&hub, query.as_deref()).await?;
    Ok(Json(audit_page(&hub, query).await?))
}
