//! Snapshot endpoints: list, take (named `bosun-…`, journaled, through the guest's queue)
//! and roll back to one of the caller's own snapshots; a container's through `…/lxc/…`, a
//! VM's through `…/qemu/…` (`qmsnapshot`, `qmrollback`), by the kind the journal recorded.

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use bosun_proto::desired::GuestKind;
use bosun_pve::{Op, SnapName, SnapshotInfo};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::LocalApi;
use super::auth::Caller;
use super::body::JsonBody;
use super::error::{ApiError, ErrorBody};
use super::handlers::{Scope, check_scope, pve_error};
use crate::guests::queue::GuestKey;
use crate::ops::journal::{AuditEvent, NewOperation, OpStatus};
use crate::ops::operation::OpKind;
use crate::ops::operation::StepName;
use crate::ops::operation::{OpJournal, StepError};

/// One snapshot of the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SnapshotEntry {
    /// Its name.
    pub name: String,
    /// When it was taken (epoch seconds).
    pub taken_at: Option<u64>,
    /// Its description.
    pub description: Option<String>,
    /// Taken through this API (named `bosun-…`).
    pub taken_through_api: bool,
}

/// The answer of `GET /v1/snapshot`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SnapshotList {
    /// Oldest first.
    pub snapshots: Vec<SnapshotEntry>,
}

/// Prefix of snapshots taken through the API.
pub const API_SNAPSHOT_PREFIX: &str = "bosun-";

/// The guest's snapshots, so a controller finds the one it took before a deploy.
#[utoipa::path(get, path = "/v1/snapshot", tag = "snapshot", security(("bearer" = [])),
    params(("vmid" = Option<u32>, Query, description = "if given, must be the caller's own"),
           ("guest_id" = Option<String>, Query, description = "if given, must be the caller's own")),
    responses((status = 200, body = SnapshotList), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 429, body = ErrorBody),
              (status = 502, body = ErrorBody)))]
pub(super) async fn list_snapshots(
    State(api): State<LocalApi>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<SnapshotList>, ApiError> {
    check_scope(&api, &caller, query.as_deref(), None, "snapshot.list").await?;
    let mut snapshots: Vec<SnapshotEntry> = own_snapshots(&api, &caller)
        .await?
        .into_iter()
        .map(|s| SnapshotEntry {
            taken_through_api: s.name.starts_with(API_SNAPSHOT_PREFIX),
            name: s.name,
            taken_at: s.snaptime,
            description: s.description.filter(|d| !d.is_empty()),
        })
        .collect();
    snapshots.sort_by(|a, b| a.taken_at.cmp(&b.taken_at).then(a.name.cmp(&b.name)));
    Ok(Json(SnapshotList { snapshots }))
}

/// The body of `POST /v1/snapshot`.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct SnapshotBody {
    /// Stored with the snapshot (at most 200 printable characters).
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1F\x7F-\x9F]*$")]
    pub description: Option<String>,
    /// Explicit ids, checked against the caller.
    #[serde(flatten)]
    pub scope: Scope,
}

/// The answer of `POST /v1/snapshot`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SnapshotTaken {
    /// The snapshot's name (`bosun-YYYYMMDD-HHMMSS`).
    pub name: String,
    /// The Proxmox task that took it.
    pub upid: String,
}

/// Picks `bosun-YYYYMMDD-HHMMSS`, with `-N` appended while the name is taken.
pub(super) fn snapshot_name(now: Timestamp, taken: &[String]) -> Result<SnapName, ApiError> {
    let base = format!("{API_SNAPSHOT_PREFIX}{}", now.strftime("%Y%m%d-%H%M%S"));
    let mut name = base.clone();
    let mut n = 2u32;
    while taken.contains(&name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    SnapName::new(name).map_err(|e| ApiError::BadRequest {
        reason: format!("cannot name the snapshot: {e}"),
    })
}

/// Snapshots the caller's guest and waits for the task.
#[utoipa::path(post, path = "/v1/snapshot", tag = "snapshot", security(("bearer" = [])),
    request_body(content = SnapshotBody, content_type = "application/json"),
    responses((status = 201, body = SnapshotTaken), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 408, body = ErrorBody), (status = 409, body = ErrorBody),
              (status = 413, body = ErrorBody),
              (status = 429, body = ErrorBody), (status = 502, body = ErrorBody)))]
pub(super) async fn take_snapshot(
    State(api): State<LocalApi>,
    caller: Caller,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody<SnapshotBody>,
) -> Result<(StatusCode, Json<SnapshotTaken>), ApiError> {
    check_scope(
        &api,
        &caller,
        query.as_deref(),
        Some(&body.scope),
        "snapshot",
    )
    .await?;
    let description = body.description.unwrap_or_default();
    if description.chars().count() > 200 || description.chars().any(bosun_proto::inert::is_control)
    {
        return Err(ApiError::BadRequest {
            reason: "description must be at most 200 printable characters".to_owned(),
        });
    }
    let run_api = api.clone();
    let guest = caller.clone();
    let taken = api
        .inner
        .queue
        .run(GuestKey::guest(&caller.guest_id), async move {
            let api = run_api;
            let existing: Vec<String> = own_snapshots(&api, &guest)
                .await?
                .into_iter()
                .map(|s| s.name)
                .collect();
            let name = snapshot_name(api.inner.clock.now(), &existing)?;
            let description = (!description.is_empty()).then_some(description);
            let op = begin(&api, &guest, OpKind::Snapshot).await?;
            let ops = api.inner.ops.as_ref();
            let detail = serde_json::json!({ "vmid": guest.vmid.get(), "snapshot": name.as_str() });
            let (sent, task_type, task_op) = match guest.kind {
                GuestKind::Lxc => (
                    ops.create_snapshot(guest.vmid, &name, description.as_deref()),
                    "vzsnapshot",
                    Op::CreateSnapshot,
                ),
                GuestKind::Qemu => (
                    ops.create_vm_snapshot(guest.vmid, &name, description.as_deref()),
                    "qmsnapshot",
                    Op::CreateVmSnapshot,
                ),
            };
            let taken = op
                .task_looked(
                    StepName::Snapshot,
                    detail,
                    sent,
                    |asked_at| ops.find_task(guest.vmid, task_type, asked_at),
                    |upid| async move { ops.wait_task(task_op, &upid).await },
                )
                .await;
            let upid = finish(&op, taken)
                .await
                .map_err(|e| step_error("snapshot", e))?;
            Ok::<_, ApiError>(SnapshotTaken {
                name: name.to_string(),
                upid,
            })
        })
        .await
        .map_err(|_| ApiError::Unavailable { what: "work queue" })??;
    Ok((StatusCode::CREATED, Json(taken)))
}

/// The caller's guest's snapshots, asked of Proxmox as the kind the journal recorded for it
/// (a container's or a VM's endpoints).
async fn own_snapshots(api: &LocalApi, caller: &Caller) -> Result<Vec<SnapshotInfo>, ApiError> {
    let ops = api.inner.ops.as_ref();
    match caller.kind {
        GuestKind::Lxc => ops.list_snapshots(caller.vmid).await,
        GuestKind::Qemu => ops.list_vm_snapshots(caller.vmid).await,
    }
    .map_err(|e| pve_error("snapshot listing", e))
}

/// Opens a journaled operation of `kind` for the caller's guest.
async fn begin(api: &LocalApi, caller: &Caller, kind: OpKind) -> Result<OpJournal, ApiError> {
    OpJournal::begin(
        &api.inner.journal,
        NewOperation {
            kind,
            guest_id: Some(caller.guest_id.clone()),
            vmid: Some(caller.vmid.get()),
            job_id: None,
            request_id: None,
        },
    )
    .await
    .map_err(|_| ApiError::Unavailable { what: "journal" })
}

/// Ends the operation with its one task's outcome; gives the task's UPID.
async fn finish(
    op: &OpJournal,
    result: Result<bosun_pve::TaskOutcome, StepError>,
) -> Result<String, StepError> {
    let (status, error) = match &result {
        Ok(_) => (OpStatus::Done, None),
        Err(e) => (OpStatus::Failed, Some(bosun_errchain::error_chain(e))),
    };
    if let Err(e) = op.finish(status, error).await {
        tracing::error!(op_id = %op.op_id(), error = %bosun_errchain::error_chain(&e), "could not journal an operation's end");
    }
    result.map(|outcome| outcome.upid.to_string())
}

/// The answer for a failed step: Proxmox's refusal as the API maps it, else the journal.
fn step_error(what: &'static str, e: StepError) -> ApiError {
    match e {
        StepError::Pve { source, .. } => pve_error(what, source),
        StepError::Journal { .. }
        | StepError::Failed { .. }
        | StepError::Other { .. }
        | StepError::TimedOut { .. } => ApiError::Unavailable { what: "journal" },
    }
}

/// The body of `POST /v1/rollback`.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct RollbackBody {
    /// One of the caller's own snapshots.
    #[serde(default)]
    #[schema(required = true, min_length = 1)]
    pub snapshot: String,
    /// Explicit ids, checked against the caller.
    #[serde(flatten)]
    pub scope: Scope,
}

/// The answer of `POST /v1/rollback`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RollbackAccepted {
    /// The snapshot the guest is rolled back to.
    pub snapshot: String,
    /// The journal operation carrying it out.
    pub op_id: String,
}

/// Rolls the caller's guest back to one of its snapshots and starts it again. The rollback
/// stops the guest (and the controller asking), so it is answered once queued.
#[utoipa::path(post, path = "/v1/rollback", tag = "snapshot", security(("bearer" = [])),
    request_body(content = RollbackBody, content_type = "application/json"),
    responses((status = 202, body = RollbackAccepted), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 408, body = ErrorBody),
              (status = 429, body = ErrorBody), (status = 502, body = ErrorBody)))]
pub(super) async fn rollback(
    State(api): State<LocalApi>,
    caller: Caller,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody<RollbackBody>,
) -> Result<(StatusCode, Json<RollbackAccepted>), ApiError> {
    check_scope(
        &api,
        &caller,
        query.as_deref(),
        Some(&body.scope),
        "rollback",
    )
    .await?;
    if body.snapshot.is_empty() {
        return Err(ApiError::BadRequest {
            reason: "snapshot is required: the name of one of this guest's snapshots".to_owned(),
        });
    }
    let name = SnapName::new(body.snapshot.clone()).map_err(|_| ApiError::SnapshotNotFound {
        name: body.snapshot.chars().take(64).collect(),
    })?;
    let own = own_snapshots(&api, &caller).await?;
    let Some(taken_at) = own
        .iter()
        .find(|s| s.name == name.as_str())
        .map(|s| s.snaptime)
    else {
        return Err(ApiError::SnapshotNotFound {
            name: name.to_string(),
        });
    };
    let mut event = AuditEvent::new("localapi.rollback");
    event.guest_id = Some(caller.guest_id.clone());
    event.vmid = Some(caller.vmid.get());
    event.detail = serde_json::json!({ "snapshot": name.as_str() });
    api.inner
        .journal
        .append_audit(event)
        .await
        .map_err(|_| ApiError::Unavailable { what: "journal" })?;
    let run_api = api.clone();
    let guest = caller.clone();
    let (op_tx, op_rx) = tokio::sync::oneshot::channel::<Option<String>>();
    let snapshot = name.clone();
    let queued = api
        .inner
        .queue
        .submit(GuestKey::guest(&caller.guest_id), async move {
            let api = run_api;
            let result = rollback_steps(&api, &guest, &snapshot, taken_at, op_tx).await;
            if let Err(e) = result {
                tracing::warn!(guest_id = %guest.guest_id, vmid = %guest.vmid, error = %e, "rollback failed");
            }
        })
        .map_err(|_| ApiError::Unavailable { what: "work queue" })?;
    drop(queued);
    // The operation id exists once the queued work began its journal entry; a guest busy
    // with earlier work answers with the id as soon as its turn comes.
    let op_id = op_rx.await.ok().flatten().unwrap_or_default();
    Ok((
        StatusCode::ACCEPTED,
        Json(RollbackAccepted {
            snapshot: name.to_string(),
            op_id,
        }),
    ))
}

async fn rollback_steps(
    api: &LocalApi,
    guest: &Caller,
    snapshot: &SnapName,
    taken_at: Option<u64>,
    op_tx: tokio::sync::oneshot::Sender<Option<String>>,
) -> Result<(), ApiError> {
    let op = match begin(api, guest, OpKind::Rollback).await {
        Ok(op) => op,
        Err(e) => {
            let _ = op_tx.send(None);
            return Err(e);
        }
    };
    let _ = op_tx.send(Some(op.op_id().to_string()));
    // Before the rollback: a crash after it must not leave the restored (older) file next to
    // a newer token in the journal. At worst a rollback that then fails costs a re-issue.
    check_bootstrap(api, guest, &op, taken_at).await?;
    let ops = api.inner.ops.as_ref();
    let detail = serde_json::json!({ "vmid": guest.vmid.get(), "snapshot": snapshot.as_str() });
    let (sent, task_type, task_op) = match guest.kind {
        GuestKind::Lxc => (
            ops.rollback(guest.vmid, snapshot),
            "vzrollback",
            Op::RollbackSnapshot,
        ),
        GuestKind::Qemu => (
            ops.rollback_vm(guest.vmid, snapshot),
            "qmrollback",
            Op::RollbackVmSnapshot,
        ),
    };
    let rolled_back = op
        .task_looked(
            StepName::Rollback,
            detail,
            sent,
            |asked_at| ops.find_task(guest.vmid, task_type, asked_at),
            |upid| async move { ops.wait_task(task_op, &upid).await },
        )
        .await;
    finish(&op, rolled_back)
        .await
        .map(|_| ())
        .map_err(|e| step_error("rollback", e))
}

/// The rolled-back filesystem will hold the bootstrap of the snapshot's time: a token minted
/// since then is revoked so the reconciler re-issues the bootstrap once the guest runs.
async fn check_bootstrap(
    api: &LocalApi,
    guest: &Caller,
    op: &OpJournal,
    taken_at: Option<u64>,
) -> Result<(), ApiError> {
    let journal = &api.inner.journal;
    let detail = serde_json::json!({ "vmid": guest.vmid.get(), "snapshot_time": taken_at });
    let checked = op
        .local(StepName::CheckBootstrap, detail, async {
            crate::guests::credentials::stale::revoke_if_minted_after(
                journal,
                &guest.guest_id,
                guest.vmid.get(),
                taken_at,
                "rollback",
            )
            .await
            .map_err(|e| bosun_errchain::error_chain(&e))
        })
        .await;
    if let Err(e) = checked {
        // Rolling back now could leave the older file next to a newer token: refuse.
        let text = bosun_errchain::error_chain(&e);
        tracing::error!(guest_id = %guest.guest_id, vmid = %guest.vmid, error = %text, "could not compare the guest's token with the snapshot; rollback not started");
        let _ = op.finish(OpStatus::Failed, Some(text)).await;
        return Err(ApiError::Unavailable { what: "journal" });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_are_valid_and_unique() {
        let now: Timestamp = "2026-03-14T12:34:56Z".parse().unwrap();
        let first = snapshot_name(now, &[]).unwrap();
        assert_eq!(first.as_str(), "bosun-20260314-123456");
        let second = snapshot_name(now, &[first.to_string()]).unwrap();
        assert_eq!(second.as_str(), "bosun-20260314-123456-2");
        assert!(second.as_str().len() <= 40);
    }
}
