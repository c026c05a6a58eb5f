//! The endpoints (DESIGN §7). Each takes the [`Caller`] resolved from its token and acts on
//! that guest's vmid only; explicit ids are checked with [`NamedGuests`] first.

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use super::LocalApi;
use super::auth::{Caller, NamedGuests};
use super::body::JsonBody;
use super::error::{ApiError, ErrorBody};
use super::restore_test::{RestoreTestRecord, RestoreTestStatus};
use crate::backup::{
    BackupError, BackupPhase, BackupRequest, BackupRun, CalendarEvent, StorageSnapshot, schedule,
};
use crate::journal::{AuditEvent, NewOperation, OpId, OpStatus, StepOutcome};
use crate::pve::{Op, PveError, SnapName};
use crate::queue::GuestKey;

/// The generated document's frame.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Bosun local API",
        description = "Per-guest API the Bosun agent serves to the controller inside each guest. \
                       Every call acts on the caller's own guest, resolved from its bearer token."
    ),
    modifiers(&BearerAuth),
    components(schemas(ErrorBody, BackupPhase, StorageSnapshot, RestoreTestRecord))
)]
pub(super) struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The answer of `GET /v1/health`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// Always `ok` when the agent answers.
    pub status: String,
    /// The agent's version.
    pub version: String,
}

/// Liveness; needs no token.
#[utoipa::path(get, path = "/v1/health", tag = "health",
    responses((status = 200, description = "the agent is up", body = Health)))]
pub(super) async fn health() -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
    })
}

/// Speed class of a mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MountClass {
    /// SSD/NVMe-class: hot volumes (databases, config).
    Fast,
    /// Spinning or remote: bulk volumes.
    Slow,
}

/// One mount of the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MountInfo {
    /// The config key (`rootfs`, `mp0`, …).
    pub key: String,
    /// Where it appears inside the guest.
    pub path: String,
    /// The Proxmox storage id, for a volume.
    pub storage: Option<String>,
    /// Its speed class, when the operator classified it.
    pub class: Option<MountClass>,
    /// Whether guest backups include it.
    pub backup: bool,
    /// Whether it is mounted read-only.
    pub read_only: bool,
    /// Its size, as Proxmox states it (`8G`).
    pub size: Option<String>,
}

/// The answer of `GET /v1/storage`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StorageReport {
    /// The caller's guest.
    pub guest_id: String,
    /// Its vmid.
    pub vmid: u32,
    /// Its mounts.
    pub mounts: Vec<MountInfo>,
}

/// Explicit guest ids a body may carry; any but the caller's own is refused.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct Scope {
    /// If present, must be the caller's vmid.
    #[schema(value_type = Option<u32>)]
    pub vmid: Option<serde_json::Value>,
    /// If present, must be the caller's guest id.
    #[schema(value_type = Option<String>)]
    pub guest_id: Option<serde_json::Value>,
}

async fn check_scope(
    api: &LocalApi,
    caller: &Caller,
    query: Option<&str>,
    body: Option<&Scope>,
    endpoint: &str,
) -> Result<(), ApiError> {
    let mut named = NamedGuests::from_query(query)?;
    if let Some(scope) = body {
        named.add_json(scope.vmid.as_ref(), scope.guest_id.as_ref());
    }
    named.check(api, caller, endpoint).await
}

fn pve_error(operation: &'static str, source: PveError) -> ApiError {
    if source.is_lock_contention() {
        return ApiError::GuestLocked;
    }
    ApiError::Proxmox { operation, source }
}

/// The guest's mounts and their class.
#[utoipa::path(get, path = "/v1/storage", tag = "storage", security(("bearer" = [])),
    params(("vmid" = Option<u32>, Query, description = "if given, must be the caller's own"),
           ("guest_id" = Option<String>, Query, description = "if given, must be the caller's own")),
    responses((status = 200, body = StorageReport), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 429, body = ErrorBody),
              (status = 502, body = ErrorBody)))]
pub(super) async fn storage(
    State(api): State<LocalApi>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<StorageReport>, ApiError> {
    check_scope(&api, &caller, query.as_deref(), None, "storage").await?;
    let config = api
        .inner
        .ops
        .ct_config(caller.vmid)
        .await
        .map_err(|e| pve_error("config read", e))?;
    let classes = &api.inner.config.storage_classes;
    let mut mounts = Vec::new();
    for key in config.values.keys() {
        let is_mount = key == "rootfs"
            || key
                .strip_prefix("mp")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !is_mount {
            continue;
        }
        let Some(text) = config.get_str(key) else {
            continue;
        };
        mounts.push(parse_mount(key, &text, classes));
    }
    Ok(Json(StorageReport {
        guest_id: caller.guest_id,
        vmid: caller.vmid.get(),
        mounts,
    }))
}

/// Reads one `rootfs`/`mpN` property string.
pub(super) fn parse_mount(
    key: &str,
    text: &str,
    classes: &std::collections::BTreeMap<String, MountClass>,
) -> MountInfo {
    let mut parts = text.split(',');
    let source = parts.next().unwrap_or("").trim();
    let source = source.strip_prefix("volume=").unwrap_or(source);
    let mut info = MountInfo {
        key: key.to_owned(),
        path: if key == "rootfs" {
            "/".to_owned()
        } else {
            String::new()
        },
        storage: None,
        class: None,
        backup: key == "rootfs",
        read_only: false,
        size: None,
    };
    for part in parts {
        match part.split_once('=') {
            Some(("mp", p)) => info.path = p.to_owned(),
            Some(("backup", b)) => info.backup = b == "1",
            Some(("ro", r)) => info.read_only = r == "1",
            Some(("size", s)) => info.size = Some(s.to_owned()),
            _ => {}
        }
    }
    if source.starts_with('/') {
        info.class = classes
            .iter()
            .filter(|(prefix, _)| prefix.starts_with('/') && source.starts_with(prefix.as_str()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, c)| *c);
    } else if let Some((storage, _)) = source.split_once(':') {
        info.class = classes.get(storage).copied();
        info.storage = Some(storage.to_owned());
    }
    info
}

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
    let mut snapshots: Vec<SnapshotEntry> = api
        .inner
        .ops
        .list_snapshots(caller.vmid)
        .await
        .map_err(|e| pve_error("snapshot listing", e))?
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
    /// Stored with the snapshot (at most 200 characters).
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
              (status = 409, body = ErrorBody), (status = 413, body = ErrorBody),
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
    if description.chars().count() > 200 || description.chars().any(char::is_control) {
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
            let existing: Vec<String> = api
                .inner
                .ops
                .list_snapshots(guest.vmid)
                .await
                .map_err(|e| pve_error("snapshot listing", e))?
                .into_iter()
                .map(|s| s.name)
                .collect();
            let name = snapshot_name(api.inner.clock.now(), &existing)?;
            let description = (!description.is_empty()).then_some(description);
            let upid = journaled_task(&api, &guest, "snapshot", Op::CreateSnapshot, &name, |ops| {
                ops.create_snapshot(guest.vmid, &name, description.as_deref())
            })
            .await?;
            Ok::<_, ApiError>(SnapshotTaken {
                name: name.to_string(),
                upid,
            })
        })
        .await
        .map_err(|_| ApiError::Unavailable { what: "work queue" })??;
    Ok((StatusCode::CREATED, Json(taken)))
}

/// Runs one task-starting call as a journaled operation of one step, waiting for the task.
async fn journaled_task<'a, F>(
    api: &'a LocalApi,
    caller: &Caller,
    kind: &str,
    op: Op,
    name: &SnapName,
    issue: F,
) -> Result<String, ApiError>
where
    F: FnOnce(
        &'a dyn super::GuestOps,
    ) -> futures::future::BoxFuture<'a, Result<crate::pve::Upid, PveError>>,
{
    let journal = &api.inner.journal;
    let unavailable = |_| ApiError::Unavailable { what: "journal" };
    let op_id = journal
        .begin_operation(NewOperation {
            kind: format!("localapi.{kind}"),
            guest_id: Some(caller.guest_id.clone()),
            vmid: Some(caller.vmid.get()),
            job_id: None,
            request_id: None,
        })
        .await
        .map_err(unavailable)?;
    let detail = serde_json::json!({ "vmid": caller.vmid.get(), "snapshot": name.as_str() });
    let seq = journal
        .step_intent(op_id, kind, detail)
        .await
        .map_err(unavailable)?;
    let result = async {
        let upid = issue(api.inner.ops.as_ref()).await?;
        if let Err(e) = journal.step_sent(op_id, seq, Some(upid.to_string())).await {
            tracing::error!(op_id = %op_id, error = %e, "could not journal a task id");
        }
        api.inner.ops.wait_task(op, &upid).await
    }
    .await;
    finish(api, op_id, seq, &result).await;
    match result {
        Ok(outcome) => Ok(outcome.upid.to_string()),
        Err(e) => Err(pve_error(op_label(op), e)),
    }
}

fn op_label(op: Op) -> &'static str {
    match op {
        Op::CreateSnapshot => "snapshot",
        Op::RollbackSnapshot => "rollback",
        _ => "task",
    }
}

async fn finish(
    api: &LocalApi,
    op_id: OpId,
    seq: u32,
    result: &Result<crate::pve::TaskOutcome, PveError>,
) {
    let journal = &api.inner.journal;
    let (outcome, status, error) = match result {
        Ok(t) => (
            StepOutcome::Ok {
                warnings: t.warnings,
            },
            OpStatus::Done,
            None,
        ),
        Err(e) => (
            StepOutcome::Failed {
                error: e.to_string(),
            },
            OpStatus::Failed,
            Some(e.to_string()),
        ),
    };
    if let Err(e) = journal.step_finished(op_id, seq, outcome).await {
        tracing::error!(op_id = %op_id, error = %e, "could not journal a step's end");
    }
    if let Err(e) = journal.finish_operation(op_id, status, error).await {
        tracing::error!(op_id = %op_id, error = %e, "could not journal an operation's end");
    }
}

/// The body of `POST /v1/rollback`.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct RollbackBody {
    /// One of the caller's own snapshots.
    #[serde(default)]
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
              (status = 404, body = ErrorBody), (status = 429, body = ErrorBody),
              (status = 502, body = ErrorBody)))]
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
    let name = SnapName::new(body.snapshot.clone()).map_err(|_| ApiError::SnapshotNotFound {
        name: body.snapshot.chars().take(64).collect(),
    })?;
    let own = api
        .inner
        .ops
        .list_snapshots(caller.vmid)
        .await
        .map_err(|e| pve_error("snapshot listing", e))?;
    if !own.iter().any(|s| s.name == name.as_str()) {
        return Err(ApiError::SnapshotNotFound {
            name: name.to_string(),
        });
    }
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
            let result = rollback_steps(&api, &guest, &snapshot, op_tx).await;
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
    op_tx: tokio::sync::oneshot::Sender<Option<String>>,
) -> Result<(), ApiError> {
    let journal = &api.inner.journal;
    let op_id = match journal
        .begin_operation(NewOperation {
            kind: "localapi.rollback".to_owned(),
            guest_id: Some(guest.guest_id.clone()),
            vmid: Some(guest.vmid.get()),
            job_id: None,
            request_id: None,
        })
        .await
    {
        Ok(id) => id,
        Err(_) => {
            let _ = op_tx.send(None);
            return Err(ApiError::Unavailable { what: "journal" });
        }
    };
    let _ = op_tx.send(Some(op_id.to_string()));
    let detail = serde_json::json!({ "vmid": guest.vmid.get(), "snapshot": snapshot.as_str() });
    let seq = journal
        .step_intent(op_id, "rollback", detail)
        .await
        .map_err(|_| ApiError::Unavailable { what: "journal" })?;
    let result = async {
        let upid = api.inner.ops.rollback(guest.vmid, snapshot).await?;
        if let Err(e) = journal.step_sent(op_id, seq, Some(upid.to_string())).await {
            tracing::error!(op_id = %op_id, error = %e, "could not journal a task id");
        }
        api.inner.ops.wait_task(Op::RollbackSnapshot, &upid).await
    }
    .await;
    finish(api, op_id, seq, &result).await;
    result.map(|_| ()).map_err(|e| pve_error("rollback", e))
}

/// The body of `POST /v1/backup`.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct BackupBody {
    /// The controller stopped its apps before asking.
    #[serde(default)]
    pub quiesced: bool,
    /// The longest the controller keeps its apps stopped, 1..=86400 s.
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
              (status = 409, body = ErrorBody), (status = 429, body = ErrorBody)))]
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
        quiesced: body.quiesced,
        max_quiesce_s: body.max_quiesce_s,
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
        BackupError::ListBackups { source, .. } => pve_error("backup listing", source),
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
    let event = CalendarEvent::parse(&policy.schedule).map_err(|e| ApiError::PolicyInvalid {
        reason: e.to_string(),
    })?;
    let last_success = api
        .inner
        .backups
        .last_success(&caller.guest_ref())
        .await
        .map_err(backup_error)?;
    let verdict = schedule::evaluate(
        &event,
        policy.quiesce_grace_minutes,
        last_success,
        api.inner.clock.now(),
        &api.inner.backups.config().time_zone,
    );
    Ok(Json(BackupDue {
        due: verdict.due,
        mode: "snapshot".to_owned(),
        schedule: policy.schedule,
        due_since: verdict.due_since,
        deadline: verdict.deadline,
        next_run: verdict.next_run,
        interval_s: verdict.interval.map(|d| d.as_secs()),
        last_success,
        quiesce_grace_minutes: policy.quiesce_grace_minutes,
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

/// The caller's last restore-test result.
#[utoipa::path(get, path = "/v1/restore-test/status", tag = "restore-test", security(("bearer" = [])),
    params(("vmid" = Option<u32>, Query, description = "if given, must be the caller's own"),
           ("guest_id" = Option<String>, Query, description = "if given, must be the caller's own")),
    responses((status = 200, body = RestoreTestStatus), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub(super) async fn restore_test_status(
    State(api): State<LocalApi>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<RestoreTestStatus>, ApiError> {
    check_scope(&api, &caller, query.as_deref(), None, "restore_test.status").await?;
    Ok(Json(api.inner.restore_tests.status(&caller.guest_id)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn mounts_are_read_with_their_class() {
        let mut classes = BTreeMap::new();
        classes.insert("local-lvm".to_owned(), MountClass::Fast);
        classes.insert("/mnt/bosun/bulk".to_owned(), MountClass::Slow);
        let root = parse_mount("rootfs", "local-lvm:vm-101-disk-0,size=8G", &classes);
        assert_eq!(root.path, "/");
        assert_eq!(root.class, Some(MountClass::Fast));
        assert!(root.backup);
        assert_eq!(root.size.as_deref(), Some("8G"));
        let bulk = parse_mount("mp1", "/mnt/bosun/bulk/101,mp=/mnt/bulk,backup=0", &classes);
        assert_eq!(bulk.path, "/mnt/bulk");
        assert_eq!(bulk.class, Some(MountClass::Slow));
        assert!(!bulk.backup);
        let cfg = parse_mount(
            "mp0",
            "/var/lib/bosun/guests/101/bootstrap,mp=/etc/bosun,ro=1",
            &classes,
        );
        assert!(cfg.read_only);
        assert_eq!(cfg.class, None);
    }

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
