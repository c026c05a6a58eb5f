//! The admin endpoint outside `/api2`: the request log, fault injection, root's CLI on the
//! node, a guest's files, damaged archives, the remote servers storages reach (and a PBS
//! server's store, to move it to another node), the clock and the node's load, authorized by
//! `Authorization: Bearer <admin_token>`.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post, put};
use serde::Deserialize;

use crate::LoggedRequest;
use crate::cli::{CliFault, CliOutput, CliRequest};
use crate::config::FaultConfig;
use crate::damage::DamageRequest;
use crate::files::{GuestFile, canonical};
use crate::remote_store::RemoteStore;
use crate::remotes::{RemoteDeclaration, RemoteInfo};
use crate::server::App;

/// `pct push` carries the file (hex, so twice its size): files up to 128 MiB.
const PCT_BODY_LIMIT: usize = 256 << 20;

/// A remote server's store carries its archives' files as hex, like `pct push`.
const STORE_BODY_LIMIT: usize = 256 << 20;

pub(crate) fn routes() -> Router<App> {
    Router::new()
        .route("/_sim/requests", get(requests).delete(clear_requests))
        .route("/_sim/faults", get(get_faults).post(set_faults))
        .route(
            "/_sim/pct",
            post(pct).layer(DefaultBodyLimit::max(PCT_BODY_LIMIT)),
        )
        .route("/_sim/vzdump", post(vzdump))
        .route("/_sim/cli-faults", get(get_cli_faults).post(set_cli_faults))
        .route("/_sim/guests/{vmid}/file", get(guest_file))
        .route("/_sim/archives/damage", post(damage_archive))
        .route("/_sim/remotes", get(list_remotes))
        .route("/_sim/remotes/{server}", put(declare_remote))
        .route("/_sim/remotes/{server}/reachable", post(set_reachable))
        .route("/_sim/remotes/{server}/hanging", post(set_hanging))
        .route(
            "/_sim/remotes/{server}/store",
            get(export_store)
                .put(import_store)
                .layer(DefaultBodyLimit::max(STORE_BODY_LIMIT)),
        )
        .route(
            "/_sim/clock",
            get(get_clock).post(set_clock).delete(wall_clock),
        )
        .merge(crate::node_load::routes())
        .merge(crate::qemu_admin::routes())
        .merge(crate::hardware::routes())
        .merge(crate::pbs_verify::routes())
}

/// `GET /_sim/remotes`: every declared or implicit server (passwords left out).
async fn list_remotes(
    State(app): State<App>,
    headers: HeaderMap,
) -> Result<Json<Vec<RemoteInfo>>, StatusCode> {
    authorized(&app, &headers)?;
    Ok(Json(app.shared.state.lock().remotes.list()))
}

/// `PUT /_sim/remotes/{server}`: declares or replaces a server ([`RemoteSpec`] JSON, tagged
/// by `type`, plus `reachable`, default true).
async fn declare_remote(
    State(app): State<App>,
    headers: HeaderMap,
    Path(server): Path<String>,
    body: Bytes,
) -> Result<Json<Vec<RemoteInfo>>, (StatusCode, String)> {
    authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let decl: RemoteDeclaration = serde_json::from_slice(&body)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("invalid remote: {e}\n")))?;
    tracing::info!(%server, reachable = decl.reachable, "remote declared over the admin endpoint");
    let mut st = app.shared.state.lock();
    st.remotes.declare(&server, decl.spec, decl.reachable);
    Ok(Json(st.remotes.list()))
}

/// `GET /_sim/remotes/{server}/store`: the server's [`RemoteStore`] (its spec with the
/// password, every backup with its archive); 404 for a server the node does not know.
async fn export_store(
    State(app): State<App>,
    headers: HeaderMap,
    Path(server): Path<String>,
) -> Result<Json<RemoteStore>, (StatusCode, String)> {
    authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    crate::remote_store::export(&app.shared.state.lock(), &server)
        .map(Json)
        .map_err(|e| (StatusCode::NOT_FOUND, format!("{e}\n")))
}

/// `PUT /_sim/remotes/{server}/store` with a [`RemoteStore`]: the server holds exactly its
/// backups, declared with its spec and reachable; 204, or 400 (and no change) for a document
/// that does not parse or does not describe a valid store.
async fn import_store(
    State(app): State<App>,
    headers: HeaderMap,
    Path(server): Path<String>,
    body: Bytes,
) -> Result<StatusCode, (StatusCode, String)> {
    authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let store: RemoteStore = serde_json::from_slice(&body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("invalid remote store: {e}\n"),
        )
    })?;
    crate::remote_store::import(&mut app.shared.state.lock(), &server, store)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("{e}\n")))?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct Reachable {
    reachable: bool,
}

/// `POST /_sim/remotes/{server}/reachable` `{"reachable": bool}`.
async fn set_reachable(
    State(app): State<App>,
    headers: HeaderMap,
    Path(server): Path<String>,
    body: Bytes,
) -> Result<Json<Vec<RemoteInfo>>, (StatusCode, String)> {
    authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let r: Reachable = serde_json::from_slice(&body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("invalid reachability: {e}\n"),
        )
    })?;
    tracing::info!(%server, reachable = r.reachable, "remote reachability set over the admin endpoint");
    let mut st = app.shared.state.lock();
    st.remotes.set_reachable(&server, r.reachable);
    Ok(Json(st.remotes.list()))
}

#[derive(Deserialize)]
struct Hanging {
    hanging: bool,
}

/// `POST /_sim/remotes/{server}/hanging` `{"hanging": bool}`.
async fn set_hanging(
    State(app): State<App>,
    headers: HeaderMap,
    Path(server): Path<String>,
    body: Bytes,
) -> Result<Json<Vec<RemoteInfo>>, (StatusCode, String)> {
    authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let h: Hanging = serde_json::from_slice(&body)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("invalid hanging: {e}\n")))?;
    tracing::info!(%server, hanging = h.hanging, "remote hanging set over the admin endpoint");
    let mut st = app.shared.state.lock();
    st.remotes.set_hanging(&server, h.hanging);
    Ok(Json(st.remotes.list()))
}

#[derive(Deserialize)]
struct ClockBody {
    now: jiff::Timestamp,
}

fn clock_json(app: &App) -> serde_json::Value {
    serde_json::json!({
        "now": app.shared.clock.now().timestamp().to_string(),
        "fixed": app.shared.clock.fixed().is_some(),
    })
}

/// `GET /_sim/clock`: `{"now": RFC 3339, "fixed": bool}`.
async fn get_clock(
    State(app): State<App>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, StatusCode> {
    authorized(&app, &headers)?;
    Ok(Json(clock_json(&app)))
}

/// `POST /_sim/clock` `{"now": "<RFC 3339>"}`: fixes the simulator's time.
async fn set_clock(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<serde_json::Value>, (StatusCode, String)> {
    authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let c: ClockBody = serde_json::from_slice(&body)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("invalid clock: {e}\n")))?;
    tracing::info!(now = %c.now, "clock fixed over the admin endpoint");
    app.shared.clock.set(Some(c.now));
    Ok(Json(clock_json(&app)))
}

/// `DELETE /_sim/clock`: back to the wall clock.
async fn wall_clock(State(app): State<App>, headers: HeaderMap) -> StatusCode {
    if let Err(status) = authorized(&app, &headers) {
        return status;
    }
    app.shared.clock.set(None);
    StatusCode::NO_CONTENT
}

/// `pct …` as root@pam on the node (see `crate::cli`): `{"exit", "stdout", "stderr"}`, or
/// 400 for arguments `pct` would not accept.
async fn pct(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<CliOutput>, (StatusCode, String)> {
    cli(&app, &headers, &body, "pct").await
}

/// `vzdump …` as root@pam on the node, like [`pct`].
async fn vzdump(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<CliOutput>, (StatusCode, String)> {
    cli(&app, &headers, &body, "vzdump").await
}

async fn cli(
    app: &App,
    headers: &HeaderMap,
    body: &[u8],
    program: &str,
) -> Result<Json<CliOutput>, (StatusCode, String)> {
    authorized(app, headers).map_err(|s| (s, String::new()))?;
    let request: CliRequest = serde_json::from_slice(body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("invalid {program} command: {e}\n"),
        )
    })?;
    crate::cli::run(&app.shared, program, &request)
        .await
        .map(Json)
        .map_err(|e| (StatusCode::BAD_REQUEST, e + "\n"))
}

async fn get_cli_faults(
    State(app): State<App>,
    headers: HeaderMap,
) -> Result<Json<Vec<CliFault>>, StatusCode> {
    authorized(&app, &headers)?;
    Ok(Json(app.shared.state.lock().cli_faults.clone()))
}

async fn set_cli_faults(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Vec<CliFault>>, (StatusCode, String)> {
    authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let faults: Vec<CliFault> = serde_json::from_slice(&body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("invalid cli faults: {e}\n"),
        )
    })?;
    tracing::info!(
        rules = faults.len(),
        "cli faults replaced over the admin endpoint"
    );
    app.shared.state.lock().cli_faults = faults.clone();
    Ok(Json(faults))
}

#[derive(Deserialize)]
struct FileQuery {
    path: String,
}

/// `GET /_sim/guests/{vmid}/file?path=…`: one path of a CT's root filesystem as
/// [`GuestFile`] JSON; 404 when the CT or the path does not exist.
async fn guest_file(
    State(app): State<App>,
    headers: HeaderMap,
    Path(vmid): Path<u32>,
    Query(query): Query<FileQuery>,
) -> Result<Json<GuestFile>, (StatusCode, String)> {
    authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let path = canonical(&query.path).map_err(|e| (StatusCode::BAD_REQUEST, e + "\n"))?;
    let st = app.shared.state.lock();
    let guest = st
        .guests
        .get(&vmid)
        .ok_or_else(|| (StatusCode::NOT_FOUND, format!("CT {vmid} does not exist\n")))?;
    guest.files.describe(&path).map(Json).ok_or_else(|| {
        (
            StatusCode::NOT_FOUND,
            format!("{path}: No such file or directory\n"),
        )
    })
}

/// `POST /_sim/archives/damage` `{"volid": "…", "damage": "unreadable"|"no_init"|{"corrupt_data":
/// {"path": "…"}}}`: 204; 400 for a body that does not parse (an unknown damage), 404 for a
/// volid no archive has or a path that is no regular file in it.
async fn damage_archive(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, (StatusCode, String)> {
    authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let request: DamageRequest = serde_json::from_slice(&body)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("invalid damage: {e}\n")))?;
    crate::damage::apply(&mut app.shared.state.lock(), &request.volid, request.damage)
        .map_err(|e| (StatusCode::NOT_FOUND, format!("{e}\n")))?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) fn authorized(app: &App, headers: &HeaderMap) -> Result<(), StatusCode> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(token) if token.as_bytes() == app.admin_token.as_bytes() => Ok(()),
        _ => Err(StatusCode::UNAUTHORIZED),
    }
}

async fn requests(
    State(app): State<App>,
    headers: HeaderMap,
) -> Result<Json<Vec<LoggedRequest>>, StatusCode> {
    authorized(&app, &headers)?;
    Ok(Json(app.shared.state.lock().requests.clone()))
}

async fn clear_requests(State(app): State<App>, headers: HeaderMap) -> StatusCode {
    if let Err(status) = authorized(&app, &headers) {
        return status;
    }
    app.shared.state.lock().requests.clear();
    StatusCode::NO_CONTENT
}

async fn get_faults(
    State(app): State<App>,
    headers: HeaderMap,
) -> Result<Json<FaultConfig>, StatusCode> {
    authorized(&app, &headers)?;
    Ok(Json(app.shared.state.lock().faults.clone()))
}

/// Authorization comes before the body is even parsed.
async fn set_faults(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<FaultConfig>, (StatusCode, String)> {
    authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let faults: FaultConfig = serde_json::from_slice(&body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("invalid fault config: {e}\n"),
        )
    })?;
    tracing::info!(
        rules = faults.endpoints.len(),
        "faults replaced over the admin endpoint"
    );
    let mut st = app.shared.state.lock();
    st.faults = faults;
    st.apply_stale_locks();
    Ok(Json(st.faults.clone()))
}
