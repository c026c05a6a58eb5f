//! Admin API (`/v1/admin/...`), called with an operator token. Every operation is one row of
//! `routes`: its method, path, the [`Role`] it needs and its handler. [`router`] builds the
//! router from that table alone, with the role check in front of each row and the token check
//! ([`super::caller`]) in front of the whole tree, fallbacks included, so the handlers below
//! run only for a caller whose role allows them, and a route added to the table cannot skip
//! either check. The OpenAPI document states each operation's role from the same table.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::handler::Handler;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware;
use axum::routing::{MethodFilter, MethodRouter, on};
use axum::{Json, Router};
use bosun_proto::admin::ErrorBody;
use bosun_proto::admin::{
    Alert, CreateEnrollToken, DesiredAccepted, EnrollTokenCreated, EnrollTokenInfo, Event,
    OpenAlert,
};
use bosun_proto::desired::DesiredState;
use bosun_proto::operator_token::Role;
use sha2::{Digest as _, Sha256};

use super::admin_jobs::{cancel_job, get_escrow, list_jobs, submit_job};
use super::caller::{self, Caller};
use super::error::ApiError;
use super::extract::{self, Body};
use super::listing::{list_limit, newest_first};
use super::{
    admin_alerts as alerts, admin_desired as desired, admin_hosts as hosts, admin_tokens as tokens,
};
use crate::Hub;
use crate::auth_limit::AuthLimiter;
use crate::secret::{self, SecretKind};
use crate::store::dashboard::DashboardQuery;
use crate::store::{DesiredWrite, EventQuery, NewEnrollToken};

/// Where [`router`] is nested.
pub const PREFIX: &str = "/v1/admin";

/// Longest accepted `Idempotency-Key`.
const MAX_IDEMPOTENCY_KEY: usize = 128;

/// One admin operation: a method on a path under [`PREFIX`], the role it needs, its handler.
#[derive(Debug)]
pub struct AdminRoute {
    /// The method.
    pub method: Method,
    /// The path under [`PREFIX`].
    pub path: &'static str,
    /// The least role that may call it.
    pub role: Role,
    handler: MethodRouter<Hub>,
}

/// A row of the table: `handler` serves `method` on `path` for `role` and above.
fn op<H, T>(role: Role, method: Method, path: &'static str, handler: H) -> AdminRoute
where
    H: Handler<T, Hub>,
    T: 'static,
{
    let filter = MethodFilter::try_from(method.clone())
        .unwrap_or_else(|_| panic!("{method} is not a method a route can serve"));
    AdminRoute {
        handler: on(filter, handler),
        method,
        path,
        role,
    }
}

/// Every admin operation, with the role it needs: `viewer` reads, `operator` changes what
/// hosts run and triages alerts, `admin` manages tokens and hosts' membership.
fn routes() -> Vec<AdminRoute> {
    use Method as M;
    use Role::{Admin, Operator, Viewer};
    vec![
        op(Operator, M::POST, "/enrollment-tokens", create_enroll_token),
        op(Viewer, M::GET, "/enrollment-tokens", list_enroll_tokens),
        op(
            Operator,
            M::POST,
            "/enrollment-tokens/{token_id}/revoke",
            revoke_enroll_token,
        ),
        op(Viewer, M::GET, "/hosts", hosts::list_hosts),
        op(Viewer, M::GET, "/hosts/{host_id}", hosts::show_host),
        op(Admin, M::DELETE, "/hosts/{host_id}", hosts::remove_host),
        op(
            Operator,
            M::PUT,
            "/hosts/{host_id}/labels",
            hosts::label_host,
        ),
        op(
            Admin,
            M::POST,
            "/hosts/{host_id}/approve",
            hosts::approve_host,
        ),
        op(
            Admin,
            M::POST,
            "/hosts/{host_id}/revoke",
            hosts::revoke_host,
        ),
        op(
            Admin,
            M::POST,
            "/hosts/{host_id}/rotate-key",
            hosts::rotate_host_key,
        ),
        op(
            Viewer,
            M::GET,
            "/hosts/{host_id}/history",
            super::admin_history::host_history,
        ),
        op(Operator, M::PUT, "/hosts/{host_id}/desired", put_desired),
        op(
            Viewer,
            M::GET,
            "/hosts/{host_id}/desired",
            desired::get_desired,
        ),
        op(
            Viewer,
            M::GET,
            "/hosts/{host_id}/desired/status",
            desired::desired_status,
        ),
        op(
            Viewer,
            M::GET,
            "/hosts/{host_id}/operations",
            desired::list_operations,
        ),
        op(Operator, M::POST, "/hosts/{host_id}/jobs", submit_job),
        op(Viewer, M::GET, "/hosts/{host_id}/jobs", list_jobs),
        op(
            Operator,
            M::POST,
            "/hosts/{host_id}/jobs/{job_id}/cancel",
            cancel_job,
        ),
        // The blob is what a recovery needs: fetching it is a step of one, not a look around.
        op(Operator, M::GET, "/hosts/{host_id}/escrow", get_escrow),
        op(Viewer, M::GET, "/alerts", list_alerts),
        op(Viewer, M::GET, "/alerts/open", list_open_alerts),
        op(Operator, M::POST, "/alerts/ack", alerts::ack_alert),
        op(
            Operator,
            M::POST,
            "/alerts/silences",
            alerts::create_silence,
        ),
        op(Viewer, M::GET, "/alerts/silences", alerts::list_silences),
        op(
            Operator,
            M::DELETE,
            "/alerts/silences/{id}",
            alerts::remove_silence,
        ),
        op(Viewer, M::GET, "/events", list_events),
        op(Viewer, M::GET, "/audit", super::admin_audit::list_audit),
        op(
            Viewer,
            M::GET,
            "/artifacts",
            super::artifacts::list_artifacts,
        ),
        AdminRoute {
            method: M::PUT,
            path: "/artifacts/{sha256}",
            role: Operator,
            handler: super::artifacts::upload_route(),
        },
        op(Admin, M::POST, "/tokens", tokens::create_token),
        op(Admin, M::GET, "/tokens", tokens::list_tokens),
        op(
            Admin,
            M::POST,
            "/tokens/{name}/revoke",
            tokens::revoke_token,
        ),
        op(
            Admin,
            M::POST,
            "/tokens/{name}/rotate",
            tokens::rotate_token,
        ),
    ]
}

/// Every admin operation's method, path under [`PREFIX`] and role: the table the router is
/// built from (for the OpenAPI document and for tests that walk them all).
pub fn operations() -> Vec<(Method, &'static str, Role)> {
    routes()
        .into_iter()
        .map(|route| (route.method, route.path, route.role))
        .collect()
}

/// The paths the admin router serves, under [`PREFIX`], each once.
pub fn paths() -> Vec<&'static str> {
    let mut paths: Vec<&'static str> = Vec::new();
    for route in routes() {
        if !paths.contains(&route.path) {
            paths.push(route.path);
        }
    }
    paths
}

/// The admin router, to be nested at [`PREFIX`], built from `routes`: each row's handler
/// behind the check of its role ([`caller::require_role`]), and the whole router, fallbacks
/// included, behind the token check ([`caller::authenticate`]): a request anywhere under the
/// prefix without a valid operator token gets 401 before it is routed, whether or not the path
/// exists. In front of that, a bearer token from a source address that failed too often lately
/// gets 429 before it is looked at ([`caller::limit`]). Two rows for one method on one path panic here (and in every test that builds it).
pub fn router(hub: Hub, limiter: Arc<AuthLimiter>) -> Router<Hub> {
    let mut by_path: BTreeMap<&'static str, MethodRouter<Hub>> = BTreeMap::new();
    for route in routes() {
        let guarded = route.handler.route_layer(middleware::from_fn_with_state(
            route.role,
            caller::require_role,
        ));
        let merged = match by_path.remove(route.path) {
            Some(earlier) => earlier.merge(guarded),
            None => guarded,
        };
        by_path.insert(route.path, merged);
    }
    by_path
        .into_iter()
        .fold(Router::new(), |router, (path, handlers)| {
            router.route(path, handlers)
        })
        .fallback(super::no_route)
        .method_not_allowed_fallback(super::no_method)
        .layer(middleware::from_fn_with_state(hub, caller::authenticate))
        .layer(middleware::from_fn_with_state(limiter, caller::limit))
}

/// `POST /v1/admin/enrollment-tokens`. A restore-mode token (`restore_host`) is refused with
/// 404 `unknown_host` for a host the hub does not know and 409 `host_not_revoked` for one that
/// is not revoked.
#[utoipa::path(post, path = "/v1/admin/enrollment-tokens", tag = "admin",
    request_body(content = CreateEnrollToken, description = "lifetime, approval, note; `restore_host` for a restore-mode token"),
    responses(
        (status = 201, description = "the token, shown once", body = EnrollTokenCreated),
        (status = 400, description = "`malformed_json`, `unreadable_body`, `bad_ttl`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`: `restore_host` names no host", body = ErrorBody),
        (status = 409, description = "`host_not_revoked`: `restore_host` is not revoked", body = ErrorBody),
        (status = 408, description = "`body_timeout`: the body did not arrive whole in time", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 422, description = "`invalid_field`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn create_enroll_token(
    State(hub): State<Hub>,
    body: Body,
) -> Result<(StatusCode, Json<EnrollTokenCreated>), ApiError> {
    let request = extract::parse(
        &body.0,
        "enrollment-token request",
        CreateEnrollToken::validate,
    )?;
    let (token, hash) = secret::mint(SecretKind::Enrollment);
    let now = hub.clock().now();
    let expires_at = now
        .checked_add(jiff::SignedDuration::from_secs(i64::from(
            request.ttl_seconds,
        )))
        .map_err(|e| ApiError::BadRequest {
            code: "bad_ttl",
            message: format!("ttl_seconds overflows the clock: {e}"),
        })?;
    let token_id = crate::store::enroll_token_id(&hash.0);
    let record = NewEnrollToken {
        hash,
        created_ms: now.as_millisecond(),
        expires_ms: expires_at.as_millisecond(),
        require_approval: request.require_approval,
        note: request.note,
        restore_host: request.restore_host,
    };
    hub.store_call(move |store| store.create_enroll_token(record))
        .await?;
    tracing::info!(
        %expires_at,
        require_approval = request.require_approval,
        restore_host = request.restore_host.map(|h| h.to_string()),
        "enrollment token created"
    );
    Ok((
        StatusCode::CREATED,
        Json(EnrollTokenCreated {
            token,
            token_id,
            expires_at,
            require_approval: request.require_approval,
            restore_host: request.restore_host,
        }),
    ))
}

/// `GET /v1/admin/enrollment-tokens?limit=N`: the tokens the hub keeps, never a token itself.
#[utoipa::path(get, path = "/v1/admin/enrollment-tokens", tag = "admin",
    params(("limit" = Option<u32>, Query, maximum = 500, description = "most tokens to list, newest first (default and most 500)")),
    responses(
        (status = 200, description = "the tokens the hub keeps (retention prunes used and expired ones), newest first, at most 500", body = Vec<EnrollTokenInfo>),
        (status = 400, description = "`bad_query`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn list_enroll_tokens(
    State(hub): State<Hub>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<EnrollTokenInfo>>, ApiError> {
    let limit = list_limit(query.as_deref(), crate::store::MAX_LISTED_TOKENS)?;
    let now_ms = hub.clock().now_ms();
    Ok(Json(
        hub.store_call(move |store| store.list_enroll_tokens(now_ms, limit))
            .await?,
    ))
}

/// `POST /v1/admin/enrollment-tokens/{token_id}/revoke`.
#[utoipa::path(post, path = "/v1/admin/enrollment-tokens/{token_id}/revoke", tag = "admin",
    params(("token_id" = String, Path, pattern = "^[0-9a-fA-F]{16}$", description = "the token's id, as created or listed")),
    responses(
        (status = 204, description = "revoked (or revoked already): no box can enroll with it"),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_enrollment_token`", body = ErrorBody),
        (status = 409, description = "`enrollment_token_used`: a box enrolled with it already (revoke that host instead)", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn revoke_enroll_token(
    State(hub): State<Hub>,
    Path(token_id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let now_ms = hub.clock().now_ms();
    let id = token_id.clone();
    hub.store_call(move |store| store.revoke_enroll_token(&id, now_ms))
        .await?;
    tracing::info!(token_id = %token_id, "enrollment token revoked");
    Ok(StatusCode::NO_CONTENT)
}

/// `PUT /v1/admin/hosts/{host_id}/desired`, honouring `Idempotency-Key`.
#[utoipa::path(put, path = "/v1/admin/hosts/{host_id}/desired", tag = "admin",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)"),
        ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 128, pattern = "^[!-~]+$", description = "1..=128 visible ASCII characters; a retry with the same key and document answers the first write again"),
        ("X-Correlation-Id" = Option<String>, Header, min_length = 1, max_length = 128, pattern = "^[!-~]+$", description = "the operator's id for this change (1..=128 visible ASCII characters): stored with the generation, handed to the agent and tagged on the operations it causes")),
    request_body(content = DesiredState, description = "the whole `bosun.desired/v1` document"),
    responses(
        (status = 200, description = "stored under a new generation (or the replayed answer of an earlier request with the same key)", body = DesiredAccepted),
        (status = 400, description = "`malformed_json`, `unreadable_body`, `bad_host_id`, `bad_idempotency_key`, `bad_correlation_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 409, description = "`idempotency_conflict`: the key was used with another document; `not_seen_since_restore`: the hub was restored from a backup and the host has not polled since", body = ErrorBody),
        (status = 408, description = "`body_timeout`: the body did not arrive whole in time", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 422, description = "`invalid_field`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn put_desired(
    State(hub): State<Hub>,
    caller: Caller,
    Path(raw_host): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<DesiredAccepted>, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let idempotency_key = match headers.get("idempotency-key") {
        None => None,
        Some(value) => {
            let key = value
                .to_str()
                .ok()
                .filter(|k| !k.is_empty() && k.len() <= MAX_IDEMPOTENCY_KEY)
                .ok_or_else(|| ApiError::BadRequest {
                    code: "bad_idempotency_key",
                    message: format!(
                        "Idempotency-Key must be 1..={MAX_IDEMPOTENCY_KEY} visible ASCII characters"
                    ),
                })?;
            Some(key.to_owned())
        }
    };
    let desired = extract::parse(&body.0, "bosun.desired/v1 document", DesiredState::validate)?;
    let document = serde_json::to_string(&desired).map_err(|e| ApiError::MalformedJson {
        document: "bosun.desired/v1 document",
        reason: e.to_string(),
    })?;
    let write = DesiredWrite {
        host_id,
        idempotency: idempotency_key.map(|key| (key, Sha256::digest(document.as_bytes()).into())),
        correlation_id: super::admin_desired::correlation_id(&headers)?,
        set_by: Some(caller.name().to_owned()),
        document,
        now_ms: hub.clock().now_ms(),
    };
    let accepted = hub
        .store_call(move |store| store.put_desired(write))
        .await?;
    if accepted.created {
        hub.signals().notify(host_id);
        tracing::info!(%host_id, generation = accepted.generation, by = caller.name(), "desired state changed");
    }
    Ok(Json(accepted))
}

/// `GET /v1/admin/alerts?limit=N`.
#[utoipa::path(get, path = "/v1/admin/alerts", tag = "admin",
    params(("limit" = Option<u32>, Query, maximum = 10000, description = "most alerts to list, newest first (default 100)")),
    responses(
        (status = 200, description = "alerts, newest first", body = Vec<Alert>),
        (status = 400, description = "`bad_query`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn list_alerts(
    State(hub): State<Hub>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<Alert>>, ApiError> {
    let limit = extract::query_number::<u32>(query.as_deref(), "limit")?
        .unwrap_or(100)
        .min(10_000);
    let mut alerts = hub
        .store_call(move |store| store.list_alerts(limit))
        .await?;
    newest_first(&mut alerts);
    Ok(Json(alerts))
}

/// `GET /v1/admin/alerts/open?host=ID`.
#[utoipa::path(get, path = "/v1/admin/alerts/open", tag = "admin",
    params(("host" = Option<String>, Query, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "only this host's open alerts: its id or an unambiguous prefix of it")),
    responses(
        (status = 200, description = "the conditions still open, newest first", body = Vec<OpenAlert>),
        (status = 400, description = "`bad_query`, `bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn list_open_alerts(
    State(hub): State<Hub>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<OpenAlert>>, ApiError> {
    let host_id = match extract::query_param(query.as_deref(), "host") {
        Some(raw) => Some(extract::admin_host(&hub, raw).await?),
        None => None,
    };
    let now_ms = hub.clock().now_ms();
    let facts = hub
        .store_call(move |store| {
            store.dashboard_facts(DashboardQuery {
                host_id,
                alert_limit: 0,
                now_ms,
            })
        })
        .await?;
    let mut open = facts.open_alerts;
    newest_first(&mut open);
    Ok(Json(open))
}

/// `GET /v1/admin/events?host=ID&after=SEQ&limit=N`.
#[utoipa::path(get, path = "/v1/admin/events", tag = "admin",
    params(("host" = Option<String>, Query, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "only this host's events: its id or an unambiguous prefix of it"), ("after" = Option<u64>, Query, description = "only events with a larger `seq`"), ("limit" = Option<u32>, Query, maximum = 10000, description = "most events to list (default 100)")),
    responses(
        (status = 200, description = "the newest events (after `after`), newest first", body = Vec<Event>),
        (status = 400, description = "`bad_query`, `bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn list_events(
    State(hub): State<Hub>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<Event>>, ApiError> {
    let host_id = match extract::query_param(query.as_deref(), "host") {
        Some(raw) => Some(extract::admin_host(&hub, raw).await?),
        None => None,
    };
    let query = EventQuery {
        host_id,
        after: extract::query_number(query.as_deref(), "after")?,
        limit: extract::query_number::<u32>(query.as_deref(), "limit")?
            .unwrap_or(100)
            .min(10_000),
    };
    let mut events = hub
        .store_call(move |store| store.list_events(query))
        .await?;
    newest_first(&mut events);
    Ok(Json(events))
}
