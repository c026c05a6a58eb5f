//! The endpoints (DESIGN §7) other than snapshots (`snapshots.rs`) and backups
//! (`backup_routes.rs`), and the OpenAPI frame. Each takes the [`Caller`] resolved from its token and acts on
//! that guest's vmid only; explicit ids are checked with [`NamedGuests`] first.

use axum::Json;
use axum::extract::{RawQuery, State};
use bosun_proto::desired::{GuestKind, StorageClass};
use bosun_pve::PveError;
use serde::{Deserialize, Serialize};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use super::LocalApi;
use super::auth::{Caller, NamedGuests};
use super::error::{ApiError, ErrorBody};
use super::restore_test::{RestoreTestRecord, RestoreTestStatus};
use crate::data::backup::{BackupPhase, StorageSnapshot};
use crate::data::storage::StorageClasses;

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

impl From<StorageClass> for MountClass {
    fn from(class: StorageClass) -> Self {
        match class {
            StorageClass::Fast => Self::Fast,
            StorageClass::Slow => Self::Slow,
        }
    }
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
    /// Its speed class: that of the storage target it lives on, as the signed data plan sets
    /// it; absent on a storage no target names (such as the host's own root storage).
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

pub(super) async fn check_scope(
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

pub(super) fn pve_error(operation: &'static str, source: PveError) -> ApiError {
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
    // The classes as the storage watcher knows them now, not as they were at start.
    let classes = api.inner.storage.borrow().classes.clone();
    let mounts = match caller.kind {
        GuestKind::Lxc => {
            let config = api
                .inner
                .ops
                .ct_config(caller.vmid)
                .await
                .map_err(|e| pve_error("config read", e))?;
            let mut mounts = Vec::new();
            for key in config.values.keys() {
                let is_mount = key == "rootfs"
                    || key
                        .strip_prefix("mp")
                        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
                if let Some(text) = config.get_str(key).filter(|_| is_mount) {
                    mounts.push(parse_mount(key, &text, &classes));
                }
            }
            mounts
        }
        GuestKind::Qemu => {
            let config = api
                .inner
                .ops
                .vm_config(caller.vmid)
                .await
                .map_err(|e| pve_error("config read", e))?;
            vm_disks(&config, &classes)
        }
    };
    Ok(Json(StorageReport {
        guest_id: caller.guest_id,
        vmid: caller.vmid.get(),
        mounts,
    }))
}

/// Reads one `rootfs`/`mpN` property string; its class is that of the manifest target its
/// storage (a volume) or host directory (a bind mount) belongs to.
pub(super) fn parse_mount(key: &str, text: &str, classes: &StorageClasses) -> MountInfo {
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
        info.class = classes.of_path(source).map(MountClass::from);
    } else if let Some((storage, _)) = source.split_once(':') {
        info.class = classes.of_storage(storage).map(MountClass::from);
        info.storage = Some(storage.to_owned());
    }
    info
}

/// A VM's disks as mounts: every disk slot of a bus but a CD-ROM (the cloud-init drive), the
/// root disk at `/`; where another appears inside the VM is the guest's own business, so its
/// path is empty. A VM disk is in its backups unless it says `backup=0`.
pub(super) fn vm_disks(config: &bosun_pve::VmConfig, classes: &StorageClasses) -> Vec<MountInfo> {
    let root =
        crate::guests::reconcile::observe_vm::root_disk(config).map(|(disk, _)| disk.to_string());
    let mut disks = Vec::new();
    for key in config.values.keys() {
        if !bosun_pve::VmDisk::is_bus_slot(key) {
            continue;
        }
        let Some(text) = config.get_str(key) else {
            continue;
        };
        let mut parts = text.split(',');
        let source = parts.next().unwrap_or("").trim();
        let mut info = MountInfo {
            key: key.clone(),
            path: if root.as_deref() == Some(key.as_str()) {
                "/".to_owned()
            } else {
                String::new()
            },
            storage: None,
            class: None,
            backup: true,
            read_only: false,
            size: None,
        };
        let mut cdrom = false;
        for part in parts {
            match part.split_once('=') {
                Some(("media", "cdrom")) => cdrom = true,
                Some(("backup", b)) => info.backup = b == "1",
                Some(("ro", r)) => info.read_only = r == "1",
                Some(("size", s)) => info.size = Some(s.to_owned()),
                _ => {}
            }
        }
        if cdrom {
            continue;
        }
        if let Some((storage, _)) = source.split_once(':') {
            info.class = classes.of_storage(storage).map(MountClass::from);
            info.storage = Some(storage.to_owned());
        }
        disks.push(info);
    }
    disks
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
    use super::*;

    #[test]
    fn mounts_are_read_with_their_class() {
        let mut classes = StorageClasses::default();
        classes.insert_storage("local-lvm", StorageClass::Fast);
        classes.insert_dir("/mnt/bosun/bulk", StorageClass::Slow);
        let root = parse_mount("rootfs", "local-lvm:vm-101-disk-0,size=8G", &classes);
        assert_eq!(root.path, "/");
        assert_eq!(root.class, Some(MountClass::Fast));
        assert!(root.backup);
        assert_eq!(root.size.as_deref(), Some("8G"));
        let bulk = parse_mount("mp1", "/mnt/bosun/bulk/101,mp=/mnt/bulk,backup=0", &classes);
        assert_eq!(bulk.path, "/mnt/bulk");
        assert_eq!(bulk.class, Some(MountClass::Slow));
        assert!(!bulk.backup);
        // A directory beside a classed one is not beneath it.
        let beside = parse_mount("mp2", "/mnt/bosun/bulk2/101,mp=/mnt/other", &classes);
        assert_eq!(beside.class, None);
        let cfg = parse_mount(
            "mp0",
            "/var/lib/bosun-helper/mnt/nas,mp=/srv/nas,ro=1",
            &classes,
        );
        assert!(cfg.read_only);
        assert_eq!(cfg.class, None);
    }
}
