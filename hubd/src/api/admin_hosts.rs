//! Hosts (`/v1/admin/hosts/...`): listing them (by label and capability, decision 0077) and
//! showing them, labelling them, approving a pending one, revoking one's key, asking for its key
//! to be rotated (decision 0044), and removing a revoked host (decision 0040).

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use bosun_proto::admin::{ErrorBody, HostDetail, HostSummary};
use bosun_proto::capabilities::{HostLabels, LabelChange};

use super::error::ApiError;
use super::extract::{self, Body};
use crate::Hub;
use crate::store::host_profile::{HostFilter, MAX_FILTER_TERMS};

/// `GET /v1/admin/hosts`.
#[utoipa::path(get, path = "/v1/admin/hosts", tag = "admin",
    params(
        ("label" = Option<Vec<String>>, Query, explode = true, description = "only hosts carrying this label, `key=value` (repeat for several: all must match; at most 8 here and 8 `capability` terms)"),
        ("capability" = Option<Vec<String>>, Query, explode = true, description = "only hosts whose capabilities include this word: `helper`, `tunnel`, `smart`, or `arch=…`, `pve=<major>`, `storage=<kind>`, `target=<durable_id>`, `bridge=<name>`, `nic=<name>`, `bond=<name>`, `vlan=<name>` (repeat for several: all must match)")),
    responses(
        (status = 200, description = "every host the filter matches (every host without one): status, liveness, generations, health, labels", body = Vec<HostSummary>),
        (status = 400, description = "`bad_query`: an unknown parameter, a label that is not `key=value` within its bounds, a capability word of the wrong shape, or more than 8 of either", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn list_hosts(
    State(hub): State<Hub>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<HostSummary>>, ApiError> {
    let filter = host_filter(query.as_deref())?;
    let now_ms = hub.clock().now_ms();
    let (details, _) = hub
        .store_call(move |store| {
            let wanted = if filter.is_empty() {
                None
            } else {
                Some(store.hosts_matching(&filter)?)
            };
            let (mut details, open) = crate::health::fleet(store, now_ms)?;
            if let Some(wanted) = wanted {
                let wanted: std::collections::HashSet<uuid::Uuid> = wanted.into_iter().collect();
                details.retain(|d| wanted.contains(&d.summary.host_id));
            }
            Ok((details, open))
        })
        .await?;
    Ok(Json(details.into_iter().map(|d| d.summary).collect()))
}

/// The fleet filter a query names (`label=k=v`, `capability=word`, each repeatable).
pub(crate) fn host_filter(query: Option<&str>) -> Result<HostFilter, ApiError> {
    let bad = |message: String| ApiError::BadRequest {
        code: "bad_query",
        message,
    };
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|e| bad(format!("the query is not form-encoded: {e}")))?;
    let mut filter = HostFilter::default();
    for (name, value) in pairs {
        match name.as_str() {
            "label" => {
                let (key, value) = bosun_proto::capabilities::parse_label("label", &value)
                    .map_err(|e| bad(e.to_string()))?;
                filter
                    .labels
                    .push((key.as_str().to_owned(), value.as_str().to_owned()));
            }
            "capability" => {
                bosun_proto::capabilities::check_capability("capability", &value)
                    .map_err(|e| bad(e.to_string()))?;
                filter.capabilities.push(value);
            }
            other => {
                return Err(bad(format!(
                    "unknown query parameter `{}` (label, capability)",
                    bosun_proto::inert::escape(other)
                )));
            }
        }
    }
    for (kind, count) in [
        ("label", filter.labels.len()),
        ("capability", filter.capabilities.len()),
    ] {
        if count > MAX_FILTER_TERMS {
            return Err(bad(format!(
                "{count} `{kind}` terms; at most {MAX_FILTER_TERMS}"
            )));
        }
    }
    Ok(filter)
}

/// `PUT /v1/admin/hosts/{host_id}/labels`: sets and removes the host's labels in one change,
/// recorded as a `host_labeled` event naming the operator token.
#[utoipa::path(put, path = "/v1/admin/hosts/{host_id}/labels", tag = "admin",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)")),
    request_body(content = LabelChange, description = "labels to set (`key`: 1 to 63 of `a-z 0-9 . _ / -`, starting with a letter or digit; value: 1 to 63 of `A-Z a-z 0-9 . _ -`) and keys to remove; at most 32 of each"),
    responses(
        (status = 200, description = "the host's labels after the change", body = HostLabels),
        (status = 400, description = "`malformed_json`, `unreadable_body`, `bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 403, description = "`forbidden`: the token's role is below `operator`", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 409, description = "`too_many_labels`: the host would carry more than 32 labels (nothing changed); `ambiguous_id`", body = ErrorBody),
        (status = 408, description = "`body_timeout`: the body did not arrive whole in time", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 422, description = "`invalid_field`: a key or value outside its bounds, a key both set and removed, or an empty change", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn label_host(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
    body: Body,
) -> Result<Json<HostLabels>, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let change = extract::parse(&body.0, "label change", LabelChange::validate)?;
    let now_ms = hub.clock().now_ms();
    let labels = hub
        .store_call(move |store| store.change_host_labels(host_id, &change, now_ms))
        .await?;
    tracing::info!(%host_id, labels = labels.len(), "host labels changed");
    Ok(Json(HostLabels { host_id, labels }))
}

/// `GET /v1/admin/hosts/{host_id}`.
#[utoipa::path(get, path = "/v1/admin/hosts/{host_id}", tag = "admin",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)")),
    responses(
        (status = 200, description = "the host with its desired state and last report", body = HostDetail),
        (status = 400, description = "`bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn show_host(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
) -> Result<Json<HostDetail>, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let now_ms = hub.clock().now_ms();
    let (detail, _) = hub
        .store_call(move |store| crate::health::host(store, host_id, now_ms))
        .await?;
    Ok(Json(detail))
}

/// `POST /v1/admin/hosts/{host_id}/approve`.
#[utoipa::path(post, path = "/v1/admin/hosts/{host_id}/approve", tag = "admin",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)")),
    responses(
        (status = 204, description = "approved: the host may poll"),
        (status = 400, description = "`bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 409, description = "`host_state`: not possible from the host's current status", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn approve_host(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
) -> Result<StatusCode, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let now_ms = hub.clock().now_ms();
    hub.store_call(move |store| store.approve_host(host_id, now_ms))
        .await?;
    tracing::info!(%host_id, "host approved");
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/admin/hosts/{host_id}/revoke`.
#[utoipa::path(post, path = "/v1/admin/hosts/{host_id}/revoke", tag = "admin",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)")),
    responses(
        (status = 204, description = "revoked: its key no longer works (a host already revoked stays so; nothing changes)"),
        (status = 400, description = "`bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 409, description = "`host_state`: not possible from the host's current status", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn revoke_host(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
) -> Result<StatusCode, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let now_ms = hub.clock().now_ms();
    hub.store_call(move |store| store.revoke_host(host_id, now_ms))
        .await?;
    hub.signals().notify(host_id);
    tracing::info!(%host_id, "host revoked");
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/admin/hosts/{host_id}/rotate-key`: the host's agent replaces its key at its next
/// poll (e.g. after a suspected leak). The old key keeps working until the agent first
/// presents the new one; a next key the hub held is dropped.
#[utoipa::path(post, path = "/v1/admin/hosts/{host_id}/rotate-key", tag = "admin",
    params(("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)")),
    responses(
        (status = 202, description = "asked: the host's next poll answer tells its agent to make a new key; the `host.key_rotated` event says when the old key stopped working"),
        (status = 400, description = "`bad_host_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host`", body = ErrorBody),
        (status = 409, description = "`host_state`: the host is revoked", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn rotate_host_key(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
) -> Result<StatusCode, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let now_ms = hub.clock().now_ms();
    hub.store_call(move |store| store.request_host_key_rotation(host_id, now_ms))
        .await?;
    hub.forget_host_key(host_id);
    // A held poll answers now, with the request in it.
    hub.signals().notify(host_id);
    tracing::info!(%host_id, "host key rotation requested");
    Ok(StatusCode::ACCEPTED)
}

/// `DELETE /v1/admin/hosts/{host_id}`: removes a revoked host and everything the hub keeps
/// about it; the event log keeps a `host_removed` event naming it.
#[utoipa::path(delete, path = "/v1/admin/hosts/{host_id}", tag = "admin",
    params(
        ("host_id" = String, Path, pattern = "^[0-9A-Fa-f](-*[0-9A-Fa-f]){3,31}$", description = "the host: its id, or an unambiguous prefix of it (at least 4 hex digits; 409 `ambiguous_id` lists candidates)"),
        ("forget_escrow" = Option<bool>, Query, description = "`true` to remove a host whose escrow blob (the customer's wrapped key) the hub holds; without it such a host is refused with `escrow_held`")),
    responses(
        (status = 204, description = "removed: its desired state, jobs, escrow blob, audit trail, alerts, acknowledgements and silences are gone; the host id is unknown from now on"),
        (status = 400, description = "`bad_host_id`, `bad_query`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no operator token, or an unknown, expired or revoked one", body = ErrorBody),
        (status = 404, description = "`unknown_host` (also a host removed already)", body = ErrorBody),
        (status = 409, description = "`host_not_revoked`: the host is active or pending approval; revoke it first. `escrow_held`: the hub holds the host's escrow blob and `forget_escrow=true` was not given", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody)))]
pub async fn remove_host(
    State(hub): State<Hub>,
    Path(raw_host): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<StatusCode, ApiError> {
    let host_id = extract::admin_host(&hub, &raw_host).await?;
    let forget_escrow = match extract::query_param(query.as_deref(), "forget_escrow") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::BadRequest {
                code: "bad_query",
                message: format!(
                    "query parameter `forget_escrow` = `{other}` is not true or false"
                ),
            });
        }
    };
    let now_ms = hub.clock().now_ms();
    let removed = hub
        .store_call(move |store| store.remove_host(host_id, forget_escrow, now_ms))
        .await?;
    hub.forget_host_key(host_id);
    hub.history().forget(host_id);
    hub.signals().notify(host_id);
    tracing::info!(%host_id, hostname = %removed.hostname, deleted = ?removed.rows, "host removed");
    Ok(StatusCode::NO_CONTENT)
}
