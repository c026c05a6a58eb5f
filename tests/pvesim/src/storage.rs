//! Storages and their content: list, status, add (`POST /storage`), content listing
//! filtered per volume, and content deletion (task `imgdel`).

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::state::{NodeState, Storage, StorageKind, Volume};
use crate::tasks;

fn visible(ctx: &Ctx, st: &NodeState, sid: &str) -> bool {
    let path = format!("/storage/{sid}");
    st.access.has(&ctx.authid, &path, "Datastore.Audit")
        || st.access.has(&ctx.authid, &path, "Datastore.AllocateSpace")
}

fn storage_json(sid: &str, s: &Storage) -> Value {
    let used = s.used();
    let avail = s.total.saturating_sub(used);
    json!({
        "storage": sid,
        "type": s.kind.type_name(),
        "content": s.content_list(),
        "active": u8::from(s.enabled),
        "enabled": u8::from(s.enabled),
        "shared": u8::from(s.shared),
        "total": s.total,
        "used": used,
        "avail": avail,
        "used_fraction": used as f64 / (s.total.max(1)) as f64,
    })
}

/// `GET /nodes/{node}/storage`.
pub(crate) fn index(ctx: &Ctx) -> HandlerResult {
    let st = ctx.shared.state.lock();
    let wanted: Option<BTreeSet<&str>> = ctx
        .get("content")
        .map(|c| c.split([',', ';', ' ']).filter(|s| !s.is_empty()).collect());
    let items: Vec<Value> = st
        .storages
        .iter()
        .filter(|(sid, _)| visible(ctx, &st, sid))
        .filter(|(sid, _)| ctx.get("storage").is_none_or(|s| s == sid.as_str()))
        .filter(|(_, s)| !ctx.flag("enabled") || s.enabled)
        .filter(|(_, s)| {
            wanted
                .as_ref()
                .is_none_or(|w| w.iter().any(|c| s.content.contains(*c)))
        })
        .map(|(sid, s)| storage_json(sid, s))
        .collect();
    data(Value::Array(items))
}

/// `GET /nodes/{node}/storage/{storage}/status`.
pub(crate) fn status(ctx: &Ctx) -> HandlerResult {
    let sid = ctx.required("storage")?;
    let st = ctx.shared.state.lock();
    let s = st
        .storages
        .get(sid)
        .ok_or_else(|| ApiError::internal(&format!("storage '{sid}' does not exist")))?;
    let mut v = storage_json(sid, s);
    if let Some(o) = v.as_object_mut() {
        o.remove("storage");
        o.remove("used_fraction");
    }
    data(v)
}

/// `POST /storage`: add a `dir`, `lvmthin` or `pbs` storage.
pub(crate) fn create(ctx: &Ctx) -> HandlerResult {
    let sid = ctx.required("storage")?.to_owned();
    let stype = ctx.required("type")?;
    let need = |k: &str| ctx.required(k).map(str::to_owned);
    let (kind, default_content, allowed): (StorageKind, &[&str], &[&str]) = match stype {
        "dir" => (
            StorageKind::Dir {
                path: need("path")?,
            },
            &["images", "rootdir"],
            &[
                "backup", "images", "import", "iso", "none", "rootdir", "snippets", "vztmpl",
            ],
        ),
        "lvmthin" => (
            StorageKind::LvmThin {
                vgname: need("vgname")?,
                thinpool: need("thinpool")?,
            },
            &["images", "rootdir"],
            &["images", "rootdir"],
        ),
        "pbs" => {
            need("username")?;
            (
                StorageKind::Pbs {
                    server: need("server")?,
                    datastore: need("datastore")?,
                },
                &["backup"],
                &["backup"],
            )
        }
        other => {
            return Err(ApiError::param(
                "type",
                &format!("storage type '{other}' is not supported here"),
            ));
        }
    };
    let content: BTreeSet<String> = match ctx.get("content") {
        Some(c) => c
            .split([',', ';', ' '])
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        None => default_content.iter().map(|s| (*s).to_owned()).collect(),
    };
    if let Some(bad) = content.iter().find(|c| !allowed.contains(&c.as_str())) {
        return Err(ApiError::param(
            "content",
            &format!("storage does not support content type '{bad}'"),
        ));
    }
    let mut st = ctx.shared.state.lock();
    if st.storages.contains_key(&sid) {
        return Err(ApiError::internal(&format!(
            "create storage failed: storage ID '{sid}' already defined"
        )));
    }
    st.storages.insert(
        sid.clone(),
        Storage {
            kind,
            content,
            enabled: !ctx.flag("disable"),
            shared: ctx.flag("shared") || stype == "pbs",
            total: 1 << 40,
            prune_backups: ctx.get("prune-backups").map(str::to_owned),
            volumes: Vec::new(),
        },
    );
    tracing::info!(storage = %sid, r#type = stype, "storage added");
    data(json!({ "storage": sid, "type": stype }))
}

/// Whether the caller may see/use one volume (PVE's `check_volume_access`).
fn volume_access(ctx: &Ctx, st: &NodeState, sid: &str, vol: &Volume) -> bool {
    let spath = format!("/storage/{sid}");
    let has = |path: &str, p: &str| st.access.has(&ctx.authid, path, p);
    if has(&spath, "Datastore.Allocate") {
        return true;
    }
    match (vol.content.as_str(), vol.vmid) {
        ("backup", Some(owner)) => {
            has(&spath, "Datastore.AllocateSpace") && has(&format!("/vms/{owner}"), "VM.Backup")
        }
        ("images" | "rootdir", Some(owner)) => has(&format!("/vms/{owner}"), "VM.Config.Disk"),
        _ => has(&spath, "Datastore.AllocateSpace") || has(&spath, "Datastore.Audit"),
    }
}

fn content_json(vol: &Volume) -> Value {
    let mut v = json!({
        "volid": vol.volid,
        "format": vol.format,
        "size": vol.size,
        "ctime": vol.ctime,
        "content": vol.content,
    });
    if let Some(id) = vol.vmid {
        v["vmid"] = json!(id);
    }
    if vol.content == "backup" {
        v["subtype"] = json!("lxc");
        if let Some(n) = &vol.notes {
            v["notes"] = json!(n.lines().next().unwrap_or_default());
        }
        if vol.protected {
            v["protected"] = json!(1);
        }
    }
    v
}

/// `GET /nodes/{node}/storage/{storage}/content`: inaccessible volumes are dropped silently.
pub(crate) fn content(ctx: &Ctx) -> HandlerResult {
    let sid = ctx.required("storage")?;
    let st = ctx.shared.state.lock();
    let storage = st
        .storages
        .get(sid)
        .ok_or_else(|| ApiError::internal(&format!("storage '{sid}' does not exist")))?;
    let vmid: Option<u32> = ctx.get("vmid").and_then(|v| v.parse().ok());
    let items: Vec<Value> = storage
        .volumes
        .iter()
        .filter(|v| ctx.get("content").is_none_or(|c| c == v.content))
        .filter(|v| vmid.is_none_or(|id| v.vmid == Some(id)))
        .filter(|v| volume_access(ctx, &st, sid, v))
        .map(content_json)
        .collect();
    data(Value::Array(items))
}

/// `DELETE /nodes/{node}/storage/{storage}/content/{volume}` (task `imgdel`).
pub(crate) async fn delete_content(ctx: &Ctx) -> HandlerResult {
    let raw = ctx.required("volume")?;
    let volid = match ctx.get("storage") {
        Some(sid) if !raw.starts_with(&format!("{sid}:")) => format!("{sid}:{raw}"),
        _ => raw.to_owned(),
    };
    let (sid, owner, path) = {
        let st = ctx.shared.state.lock();
        let (sid, storage) = st.storage_of(&volid).ok_or_else(|| {
            ApiError::param("volume", &format!("unable to parse volume ID '{volid}'"))
        })?;
        let vol = st
            .find_volume(&volid)
            .ok_or_else(|| ApiError::internal(&format!("volume '{volid}' does not exist")))?;
        let spath = format!("/storage/{sid}");
        let allowed = st.access.has(&ctx.authid, &spath, "Datastore.Allocate")
            || (vol.content == "backup"
                && vol.vmid.is_some_and(|o| {
                    st.access
                        .has(&ctx.authid, &spath, "Datastore.AllocateSpace")
                        && st
                            .access
                            .has(&ctx.authid, &format!("/vms/{o}"), "VM.Backup")
                }));
        if !allowed {
            return Err(ApiError::perm(&spath, "Datastore.Allocate"));
        }
        let name = volid.split_once(':').map_or("", |(_, n)| n);
        let path = match &storage.kind {
            StorageKind::Dir { path } => format!(
                "{path}/dump/{}",
                name.strip_prefix("backup/").unwrap_or(name)
            ),
            StorageKind::LvmThin { vgname, .. } => format!("/dev/{vgname}/{name}"),
            StorageKind::Pbs { .. } => name.to_owned(),
        };
        (sid.to_owned(), vol.vmid, path)
    };
    let id = format!("{}@{sid}", owner.map(|o| o.to_string()).unwrap_or_default());
    let shared = ctx.shared.clone();
    let volid2 = volid.clone();
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "imgdel",
        &id,
        format!("error with cfs lock 'storage-{sid}': got lock timeout - aborting command"),
        move |t| async move {
            {
                let st = shared.state.lock();
                let vol = st
                    .find_volume(&volid2)
                    .ok_or_else(|| format!("volume '{volid2}' does not exist"))?;
                if vol.protected {
                    return Err(format!("cannot remove protected archive '{path}'"));
                }
            }
            t.work(shared.config.durations.imgdel).await?;
            t.checkpoint()?;
            t.log(format!("Removed volume '{volid2}'"));
            shared.state.lock().remove_volume(&volid2);
            Ok(())
        },
    );
    if let Some(delay) = ctx.get("delay").and_then(|d| d.parse::<u64>().ok()) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(delay);
        loop {
            let exit = ctx
                .shared
                .state
                .lock()
                .tasks
                .iter()
                .find(|t| t.upid == upid)
                .and_then(|t| t.exitstatus.clone());
            match exit {
                Some(e) if e == "OK" => return data(Value::Null),
                Some(_) => break,
                None if tokio::time::Instant::now() >= deadline => break,
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }
    data(json!(upid))
}

/// The volume id of a `…/content/{volume}` call: `{volume}` may leave out the storage.
fn volid_param(ctx: &Ctx) -> Result<String, ApiError> {
    let raw = ctx.required("volume")?;
    Ok(match ctx.get("storage") {
        Some(sid) if !raw.starts_with(&format!("{sid}:")) => format!("{sid}:{raw}"),
        _ => raw.to_owned(),
    })
}

/// The storage id and a clone of the volume the caller may use, or PVE's refusal.
fn accessible_volume(ctx: &Ctx, st: &NodeState, volid: &str) -> Result<(String, Volume), ApiError> {
    let (sid, _) = st.storage_of(volid).ok_or_else(|| {
        ApiError::param("volume", &format!("unable to parse volume ID '{volid}'"))
    })?;
    let vol = st
        .find_volume(volid)
        .ok_or_else(|| ApiError::internal(&format!("volume '{volid}' does not exist")))?;
    if !volume_access(ctx, st, sid, vol) {
        return Err(ApiError::perm(
            &format!("/storage/{sid}"),
            "Datastore.Audit",
        ));
    }
    Ok((sid.to_owned(), vol.clone()))
}

/// `GET /nodes/{node}/storage/{storage}/content/{volume}`: path, size, format and, for a
/// backup, its notes and protection.
pub(crate) fn volume_attributes(ctx: &Ctx) -> HandlerResult {
    let volid = volid_param(ctx)?;
    let st = ctx.shared.state.lock();
    let (sid, vol) = accessible_volume(ctx, &st, &volid)?;
    let name = volid.split_once(':').map_or("", |(_, n)| n);
    let path = match st.storages.get(&sid).map(|s| &s.kind) {
        Some(StorageKind::Dir { path }) => format!(
            "{path}/dump/{}",
            name.strip_prefix("backup/").unwrap_or(name)
        ),
        Some(StorageKind::LvmThin { vgname, .. }) => format!("/dev/{vgname}/{name}"),
        _ => name.to_owned(),
    };
    let mut out = json!({
        "path": path,
        "size": vol.size,
        "used": vol.size,
        "format": vol.format,
    });
    if vol.content == "backup" {
        out["protected"] = json!(u8::from(vol.protected));
        if let Some(notes) = &vol.notes {
            out["notes"] = json!(notes);
        }
    }
    data(out)
}

/// `PUT /nodes/{node}/storage/{storage}/content/{volume}`: sets a backup's notes (an empty
/// value removes them) and protection; nothing else about a volume can change here.
pub(crate) fn update_volume_attributes(ctx: &Ctx) -> HandlerResult {
    let volid = volid_param(ctx)?;
    let mut st = ctx.shared.state.lock();
    let (_, vol) = accessible_volume(ctx, &st, &volid)?;
    let notes = ctx.get("notes");
    let protected = ctx.get("protected");
    if vol.content != "backup" {
        if let Some(attr) = notes.map(|_| "notes").or(protected.map(|_| "protected")) {
            return Err(ApiError::internal(&format!(
                "{attr} are not supported for volume '{volid}'"
            )));
        }
        return data(Value::Null);
    }
    let target = st
        .storages
        .values_mut()
        .flat_map(|s| s.volumes.iter_mut())
        .find(|v| v.volid == volid)
        .ok_or_else(|| ApiError::internal(&format!("volume '{volid}' does not exist")))?;
    if let Some(n) = notes {
        target.notes = (!n.is_empty()).then(|| n.to_owned());
    }
    if protected.is_some() {
        target.protected = ctx.flag("protected");
    }
    data(Value::Null)
}
