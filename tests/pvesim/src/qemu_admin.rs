//! What the admin endpoint shows and does inside a VM, for tests and the demo outside the
//! simulator's process: a file written in the guest as a program there would
//! (`PUT /_sim/qemu/{vmid}/file?path=…&mode=…`, the body the content, at most
//! [`MAX_FILE`] bytes; [`SimHandle::write_vm_file`](crate::SimHandle::write_vm_file)) and the
//! freeze windows vzdump held through its guest agent while it backed the VM up
//! (`GET /_sim/qemu/{vmid}/freezes`, [`SimHandle::vm_backup_freezes`](crate::SimHandle::vm_backup_freezes)).

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::admin::authorized;
use crate::server::App;

/// The largest file written into a VM over the admin endpoint.
pub const MAX_FILE: usize = 1 << 20;

pub(crate) fn routes() -> Router<App> {
    Router::new()
        .route(
            "/_sim/qemu/{vmid}/file",
            put(write_file).layer(DefaultBodyLimit::max(MAX_FILE)),
        )
        .route("/_sim/qemu/{vmid}/freezes", get(freezes))
}

#[derive(Deserialize)]
struct FileQuery {
    path: String,
    /// Octal permission bits (`755`); `644` when absent.
    #[serde(default)]
    mode: Option<String>,
}

/// `PUT /_sim/qemu/{vmid}/file?path=…&mode=…`: writes the body as the file at `path` inside VM
/// `vmid` (its parents made); 404 for an unknown VM, 400 for a path or mode that is not one.
async fn write_file(
    State(app): State<App>,
    headers: HeaderMap,
    Path(vmid): Path<u32>,
    Query(query): Query<FileQuery>,
    body: Bytes,
) -> Result<StatusCode, (StatusCode, String)> {
    authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let path =
        crate::files::canonical(&query.path).map_err(|e| (StatusCode::BAD_REQUEST, e + "\n"))?;
    let mode = match query.mode.as_deref() {
        None => 0o644,
        Some(m) => u32::from_str_radix(m, 8)
            .ok()
            .filter(|m| *m <= 0o7777)
            .ok_or_else(|| {
                (
                    StatusCode::BAD_REQUEST,
                    format!("mode {m}: not octal bits\n"),
                )
            })?,
    };
    let mut st = app.shared.state.lock();
    let vm = st
        .vms
        .get_mut(&vmid)
        .ok_or_else(|| (StatusCode::NOT_FOUND, format!("VM {vmid} does not exist\n")))?;
    let parent = crate::files::parent(&path).to_owned();
    vm.files
        .mkdir_all(&parent, 0o755)
        .and_then(|()| vm.files.write(&path, body.to_vec(), mode))
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("{path}: {e}\n")))?;
    Ok(StatusCode::NO_CONTENT)
}

/// The body of `GET /_sim/qemu/{vmid}/freezes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmFreezes {
    /// How long each backup of the VM held its filesystems frozen, in microseconds, oldest
    /// first.
    pub freezes_us: Vec<u64>,
}

/// `GET /_sim/qemu/{vmid}/freezes`: 404 for an unknown VM.
async fn freezes(
    State(app): State<App>,
    headers: HeaderMap,
    Path(vmid): Path<u32>,
) -> Result<Json<VmFreezes>, StatusCode> {
    authorized(&app, &headers)?;
    let st = app.shared.state.lock();
    let vm = st.vms.get(&vmid).ok_or(StatusCode::NOT_FOUND)?;
    Ok(Json(VmFreezes {
        freezes_us: vm
            .backup_freezes
            .iter()
            .map(|f| {
                u64::try_from(f.thawed_at.duration_since(f.frozen_at).as_micros())
                    .unwrap_or(u64::MAX)
            })
            .collect(),
    }))
}
