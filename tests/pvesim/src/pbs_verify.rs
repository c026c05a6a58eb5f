//! The Proxmox Backup Server's own API, the part a host agent uses to verify its backup
//! groups: `POST /api2/json/admin/datastore/{store}/verify` starts a verify task and answers its
//! UPID, `GET /api2/json/nodes/localhost/tasks/{upid}/status` follows it. Proxmox VE has no
//! verify call (its storage content only shows the state PBS recorded), so a client verifies
//! against the PBS server itself.
//!
//! The simulator's listener answers as that server for a request authenticated the PBS way
//! (`Authorization: PBSAPIToken=user@realm!token:secret`), at whichever address it is reached
//! by: the remote named by the request's host (`Host`, without its port) is the PBS server, so a
//! test names the simulator's own address and certificate fingerprint in its PBS target. The
//! token must be the one the declared remote accepts (an implicit remote accepts any).
//!
//! A verify reads every chunk of every snapshot of the group: it takes a second per GiB of the
//! group's backups (at `time_scale` 1, at least 50 ms) and fails when a snapshot's chunks are
//! damaged. `POST /_sim/remotes/{server}/chunks/damage` (admin) damages a guest's chunks: every
//! snapshot of the group then fails verification, and restores from it fail as an unreadable
//! archive does. `POST /_sim/remotes/{server}/chunks/repair` (same body) heals them, as a pull
//! sync from an intact replica rewrites the chunks a verify found bad.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, Response, StatusCode, header};
use axum::routing::post;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::remotes::RemoteSpec;
use crate::request::decode_form;
use crate::server::App;
use crate::state::Shared;

/// PBS's message when a verify found damage (the task's exit status).
pub const VERIFY_FAILED: &str = "verification failed - please check the log for details";

/// Most PBS tasks kept; the oldest finished ones go first.
const MAX_TASKS: usize = 1024;

/// One PBS worker task.
#[derive(Debug, Clone)]
pub(crate) struct PbsTask {
    upid: String,
    worker_id: String,
    authid: String,
    starttime: i64,
    exitstatus: Option<String>,
}

/// Whether a request is meant for the PBS side.
pub(crate) fn is_pbs_request(headers: &HeaderMap) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("PBSAPIToken"))
}

fn reply(status: StatusCode, body: &Value) -> Response<Body> {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json;charset=UTF-8"),
    );
    resp
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    reply(
        status,
        &json!({ "data": null, "message": format!("{message}\n") }),
    )
}

/// The token (`user@realm!token`, secret) a PBS request presents.
fn token(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let rest = value
        .strip_prefix("PBSAPIToken=")
        .or_else(|| value.strip_prefix("PBSAPIToken "))?;
    let (id, secret) = rest.rsplit_once(':')?;
    id.contains('!').then(|| (id.to_owned(), secret.to_owned()))
}

/// The server a request reached: its `Host` without the port.
fn server_of(headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    Some(name.to_owned())
}

/// Answers one PBS API request.
pub(crate) async fn serve(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    query: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response<Body> {
    let Some((authid, secret)) = token(headers) else {
        return error(
            StatusCode::UNAUTHORIZED,
            "authentication failed - invalid token",
        );
    };
    let Some(server) = server_of(headers) else {
        return error(StatusCode::BAD_REQUEST, "no host");
    };
    {
        let st = shared.state.lock();
        let spec = st.remotes.store(&server).and_then(|(spec, _)| spec);
        let accepted = match spec {
            Some(RemoteSpec::Pbs {
                username, password, ..
            }) => username.as_deref().is_none_or(|u| u == authid) && *password == secret,
            Some(_) => false,
            None => true,
        };
        if !accepted {
            return error(
                StatusCode::UNAUTHORIZED,
                "authentication failed - invalid token",
            );
        }
    }
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, segments.as_slice()) {
        (&Method::POST, ["admin", "datastore", store, "verify"]) => {
            let mut params = decode_form(query).pairs;
            if let Ok(text) = std::str::from_utf8(body) {
                params.extend(decode_form(text).pairs);
            }
            start_verify(shared, &server, store, &authid, &params)
        }
        (&Method::GET, ["nodes", _node, "tasks", upid, "status"]) => {
            let upid = crate::request::unescape(upid);
            let tasks = shared.pbs_tasks.lock();
            match tasks.iter().find(|t| t.upid == upid) {
                Some(task) => reply(StatusCode::OK, &json!({ "data": status_json(task) })),
                None => error(StatusCode::BAD_REQUEST, "no such task"),
            }
        }
        _ => error(
            StatusCode::NOT_IMPLEMENTED,
            &format!("Path '/api2/json{path}' not found."),
        ),
    }
}

fn status_json(task: &PbsTask) -> Value {
    let mut v = json!({
        "upid": task.upid,
        "node": "localhost",
        "starttime": task.starttime,
        "type": "verify",
        "id": task.worker_id,
        "user": task.authid,
        "status": if task.exitstatus.is_some() { "stopped" } else { "running" },
    });
    if let Some(exit) = &task.exitstatus {
        v["exitstatus"] = json!(exit);
    }
    v
}

fn param<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
    params
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// `POST …/verify`: checks the parameters, finds the group's snapshots and starts the task.
fn start_verify(
    shared: &Arc<Shared>,
    server: &str,
    store: &str,
    authid: &str,
    params: &[(String, String)],
) -> Response<Body> {
    let ns = param(params, "ns").unwrap_or_default().to_owned();
    let backup_type = param(params, "backup-type");
    let backup_id = param(params, "backup-id");
    if backup_type.is_some_and(|t| !matches!(t, "ct" | "vm" | "host")) {
        return error(
            StatusCode::BAD_REQUEST,
            "parameter verification failed - 'backup-type'",
        );
    }
    if backup_id.is_some() != backup_type.is_some() {
        return error(
            StatusCode::BAD_REQUEST,
            "parameter verification failed - 'backup-id' needs 'backup-type'",
        );
    }
    let prefix = match (backup_type, backup_id) {
        (Some(t), Some(id)) => format!("backup/{t}/{id}/"),
        _ => "backup/".to_owned(),
    };
    let (snapshots, bytes, damaged) = {
        let st = shared.state.lock();
        let known = st.remotes.store(server).is_some_and(|(spec, backups)| {
            let declared = match spec {
                Some(RemoteSpec::Pbs { datastores, .. }) => datastores.iter().any(|d| d == store),
                _ => false,
            };
            declared || backups.keys().any(|(ds, _)| ds == store)
        });
        if !known {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("datastore '{store}' does not exist"),
            );
        }
        let group: Vec<_> = st
            .remotes
            .backups(server, store, &ns)
            .iter()
            .filter(|v| v.volid.starts_with(&prefix))
            .cloned()
            .collect();
        let bytes: u64 = group.iter().map(|v| v.size).sum();
        let damaged: Vec<String> = group
            .iter()
            .filter(|v| v.archive.as_ref().is_some_and(|a| a.unreadable))
            .map(|v| v.volid.clone())
            .collect();
        (group.len(), bytes, damaged)
    };
    if backup_id.is_some() && snapshots == 0 {
        return error(
            StatusCode::BAD_REQUEST,
            &format!(
                "no such backup group '{}'",
                prefix.trim_start_matches("backup/").trim_end_matches('/')
            ),
        );
    }
    let worker_id = format!(
        "{store}:{}",
        prefix.trim_start_matches("backup/").trim_end_matches('/')
    );
    let starttime = shared.clock.epoch();
    let upid = format!(
        "UPID:localhost:{:08X}:{:08X}:{:08X}:{starttime:08X}:verify:{}:{authid}:",
        std::process::id(),
        0,
        shared.pbs_tasks.lock().len(),
        worker_id.replace('/', "\\x2f").replace(':', "\\x3a"),
    );
    let task = PbsTask {
        upid: upid.clone(),
        worker_id,
        authid: authid.to_owned(),
        starttime,
        exitstatus: None,
    };
    {
        let mut tasks = shared.pbs_tasks.lock();
        if tasks.len() >= MAX_TASKS
            && let Some(i) = tasks.iter().position(|t| t.exitstatus.is_some())
        {
            tasks.remove(i);
        }
        tasks.push(task);
    }
    tracing::info!(%server, store, %upid, snapshots, damaged = damaged.len(), "pbs verify started");
    let answer = upid.clone();
    let shared2 = Arc::clone(shared);
    let took = Duration::from_millis((bytes >> 20).max(50));
    shared.tracker.spawn(async move {
        shared2.sleep(took).await;
        let exit = if damaged.is_empty() {
            "OK".to_owned()
        } else {
            VERIFY_FAILED.to_owned()
        };
        if let Some(task) = shared2.pbs_tasks.lock().iter_mut().find(|t| t.upid == upid) {
            task.exitstatus = Some(exit);
        }
    });
    reply(StatusCode::OK, &json!({ "data": answer }))
}

/// The admin routes: `POST /_sim/remotes/{server}/chunks/damage` and `…/chunks/repair`.
pub(crate) fn routes() -> Router<App> {
    Router::new()
        .route("/_sim/remotes/{server}/chunks/damage", post(damage_chunks))
        .route("/_sim/remotes/{server}/chunks/repair", post(repair_chunks))
}

/// The body of `POST /_sim/remotes/{server}/chunks/damage`.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
pub struct ChunkDamage {
    /// The datastore.
    pub datastore: String,
    /// The namespace (`""`: the root).
    #[serde(default)]
    pub namespace: String,
    /// The guest whose group (`ct/<vmid>`) loses chunks.
    pub vmid: u32,
}

/// Damages the chunks of one guest's group: `Err` when the group has no snapshot.
pub(crate) fn damage(shared: &Shared, server: &str, damage: &ChunkDamage) -> Result<usize, String> {
    set_unreadable(shared, server, damage, true)
}

/// Heals the chunks of one guest's group (its snapshots verify and restore again): `Err`
/// when the group has no snapshot.
pub(crate) fn repair(shared: &Shared, server: &str, group: &ChunkDamage) -> Result<usize, String> {
    set_unreadable(shared, server, group, false)
}

fn set_unreadable(
    shared: &Shared,
    server: &str,
    damage: &ChunkDamage,
    unreadable: bool,
) -> Result<usize, String> {
    let prefix = format!("backup/ct/{}/", damage.vmid);
    let mut st = shared.state.lock();
    let group = st
        .remotes
        .backups_mut(server, &damage.datastore, &damage.namespace);
    let mut count = 0;
    for volume in group.iter_mut().filter(|v| v.volid.starts_with(&prefix)) {
        if let Some(archive) = volume.archive.as_mut() {
            archive.unreadable = unreadable;
            count += 1;
        }
    }
    if count == 0 {
        return Err(format!("no snapshot of ct/{} on {server}", damage.vmid));
    }
    let what = if unreadable {
        "pbs chunks damaged"
    } else {
        "pbs chunks repaired"
    };
    tracing::info!(%server, vmid = damage.vmid, snapshots = count, "{what}");
    Ok(count)
}

async fn damage_chunks(
    State(app): State<App>,
    headers: HeaderMap,
    Path(server): Path<String>,
    Json(body): Json<ChunkDamage>,
) -> Result<Json<Value>, (StatusCode, String)> {
    crate::admin::authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    damage(&app.shared, &server, &body)
        .map(|count| Json(json!({ "damaged": count })))
        .map_err(|e| (StatusCode::NOT_FOUND, e))
}

async fn repair_chunks(
    State(app): State<App>,
    headers: HeaderMap,
    Path(server): Path<String>,
    Json(body): Json<ChunkDamage>,
) -> Result<Json<Value>, (StatusCode, String)> {
    crate::admin::authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    repair(&app.shared, &server, &body)
        .map(|count| Json(json!({ "repaired": count })))
        .map_err(|e| (StatusCode::NOT_FOUND, e))
}
