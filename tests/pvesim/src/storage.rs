//! Storages on the node and their content: list, status (an inactive storage is `active: 0`),
//! content listing filtered per volume (it activates the storage first), and content deletion
//! (task `imgdel`). The storage configuration itself is `storage_config.rs`. The list, the
//! status and the content listing do I/O on NFS and CIFS mounts, which hangs or fails while
//! their server hangs (`hung_mounts.rs`).

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::hung_mounts;
use crate::state::{NodeState, Storage, StorageKind, Volume};
use crate::storage_config::activate;
use crate::tasks;

fn visible(ctx: &Ctx, st: &NodeState, sid: &str) -> bool {
    let path = format!("/storage/{sid}");
    st.access.has(&ctx.authid, &path, "Datastore.Audit")
        || st.access.has(&ctx.authid, &path, "Datastore.AllocateSpace")
}

/// One storage's status (`PVE::Storage::storage_info`): a storage that does not activate (or
/// whose `statvfs` failed, `io_failed`) is `active: 0` with zero sizes and no `used_fraction`.
fn storage_json(st: &NodeState, sid: &str, s: &Storage, io_failed: bool) -> Value {
    let mut v = json!({
        "storage": sid,
        "type": s.kind.type_name(),
        "content": s.content_list(),
        "active": 0,
        "enabled": u8::from(s.enabled),
        "shared": u8::from(s.shared),
        "total": 0,
        "used": 0,
        "avail": 0,
    });
    if !s.enabled || io_failed || activate(st, sid).is_err() {
        return v;
    }
    let used = match &s.kind {
        StorageKind::Pbs { server, datastore } => st.remotes.datastore_used(server, datastore),
        _ => s.used(),
    };
    v["active"] = json!(1);
    v["total"] = json!(s.total);
    v["used"] = json!(used);
    v["avail"] = json!(s.total.saturating_sub(used));
    v["used_fraction"] = json!(used as f64 / (s.total.max(1)) as f64);
    v
}

/// `GET /nodes/{node}/storage`: each storage's `statvfs` at once, so the list takes as long
/// as the slowest (for ever while a hard mount hangs).
pub(crate) async fn index(ctx: &Ctx) -> HandlerResult {
    let sids: Vec<String> = ctx.shared.state.lock().storages.keys().cloned().collect();
    let io_failed = hung_mounts::io_each(&ctx.shared, sids).await;
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
        .map(|(sid, s)| storage_json(&st, sid, s, io_failed.contains(sid)))
        .collect();
    data(Value::Array(items))
}

/// `GET /nodes/{node}/storage/{storage}/status`.
pub(crate) async fn status(ctx: &Ctx) -> HandlerResult {
    let sid = ctx.required("storage")?;
    let io_failed = hung_mounts::io(&ctx.shared, sid).await.is_err();
    let st = ctx.shared.state.lock();
    let s = st
        .storages
        .get(sid)
        .ok_or_else(|| ApiError::internal(&format!("storage '{sid}' does not exist")))?;
    let mut v = storage_json(&st, sid, s, io_failed);
    if let Some(o) = v.as_object_mut() {
        o.remove("storage");
        o.remove("used_fraction");
    }
    data(v)
}

/// Where a volume lives on the node (what `pvesm path` prints).
pub(crate) fn volume_path(kind: &StorageKind, name: &str) -> String {
    match kind {
        StorageKind::LvmThin { vgname, .. } => format!("/dev/{vgname}/{name}"),
        StorageKind::Pbs { .. } => name.to_owned(),
        other => format!(
            "{}/dump/{}",
            other.dir_path().unwrap_or_default(),
            name.strip_prefix("backup/").unwrap_or(name)
        ),
    }
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
pub(crate) async fn content(ctx: &Ctx) -> HandlerResult {
    let sid = ctx.required("storage")?;
    if let Err(e) = hung_mounts::io(&ctx.shared, sid).await {
        let path = {
            let st = ctx.shared.state.lock();
            st.storages
                .get(sid)
                .and_then(|s| s.kind.dir_path().map(str::to_owned))
                .unwrap_or_default()
        };
        return Err(ApiError::internal(&format!(
            "unable to read '{path}/dump' - {e}"
        )));
    }
    let st = ctx.shared.state.lock();
    if !st.storages.contains_key(sid) {
        return Err(ApiError::internal(&format!(
            "storage '{sid}' does not exist"
        )));
    }
    activate(&st, sid).map_err(|e| ApiError::internal(&e))?;
    let vmid: Option<u32> = ctx.get("vmid").and_then(|v| v.parse().ok());
    let volumes = st.volumes(sid);
    let items: Vec<Value> = volumes
        .iter()
        .filter(|v| ctx.get("content").is_none_or(|c| c == v.content))
        .filter(|v| vmid.is_none_or(|id| v.vmid == Some(id)))
        .filter(|v| volume_access(ctx, &st, sid, v))
        .map(|v| {
            let mut item = content_json(v);
            // PBS records the key fingerprint in each snapshot made with a key.
            if let Some(fp) = &v.encrypted {
                item["encrypted"] = json!(fp);
            }
            item
        })
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
        let path = volume_path(&storage.kind, name);
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
pub(crate) fn volid_param(ctx: &Ctx) -> Result<String, ApiError> {
    let raw = ctx.required("volume")?;
    Ok(match ctx.get("storage") {
        Some(sid) if !raw.starts_with(&format!("{sid}:")) => format!("{sid}:{raw}"),
        _ => raw.to_owned(),
    })
}

/// The storage id and a clone of the volume the caller may use, or PVE's refusal.
pub(crate) fn accessible_volume(
    ctx: &Ctx,
    st: &NodeState,
    volid: &str,
) -> Result<(String, Volume), ApiError> {
    let (sid, _) = st.storage_of(volid).ok_or_else(|| {
        ApiError::param("volume", &format!("unable to parse volume ID '{volid}'"))
    })?;
    let vol = st
        .find_volume(volid)
        .ok_or_else(|| ApiError::internal(&format!("volume '{volid}' does not exist")))?;
    if !volume_access(ctx, st, sid, &vol) {
        return Err(ApiError::perm(
            &format!("/storage/{sid}"),
            "Datastore.Audit",
        ));
    }
    Ok((sid.to_owned(), vol))
}

/// `GET /nodes/{node}/storage/{storage}/content/{volume}`: path, size, format and, for a
/// backup, its notes and protection.
pub(crate) fn volume_attributes(ctx: &Ctx) -> HandlerResult {
    let volid = volid_param(ctx)?;
    let st = ctx.shared.state.lock();
    let (sid, vol) = accessible_volume(ctx, &st, &volid)?;
    let name = volid.split_once(':').map_or("", |(_, n)| n);
    let path = match (st.archive_file(&volid), st.storages.get(&sid)) {
        (Some(file), _) => file.display().to_string(),
        (None, Some(s)) => volume_path(&s.kind, name),
        (None, None) => name.to_owned(),
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
        .volume_mut(&volid)
        .ok_or_else(|| ApiError::internal(&format!("volume '{volid}' does not exist")))?;
    if let Some(n) = notes {
        target.notes = (!n.is_empty()).then(|| n.to_owned());
    }
    if protected.is_some() {
        target.protected = ctx.flag("protected");
    }
    data(Value::Null)
}
