//! LXC snapshots: list (with the `current` pseudo-entry), create, delete, rollback.

use std::time::Instant;

use serde_json::{Value, json};

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::files::INIT;
use crate::lxc_config::missing_config;
use crate::state::{FLOCK_WAIT, NodeState, Snapshot, now_epoch, volume_of};
use crate::tasks::{self, TaskCtx};

/// `GET …/snapshot`.
pub(crate) fn list(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let st = ctx.shared.state.lock();
    let guest = st
        .guests
        .get(&vmid)
        .ok_or_else(|| missing_config(ctx.node(), vmid))?;
    let mut items: Vec<Value> = guest
        .snapshots
        .iter()
        .map(|(name, snap)| {
            let mut v = json!({
                "name": name,
                "snaptime": snap.snaptime,
                "description": snap.description,
            });
            if let Some(parent) = snap.conf.get("parent") {
                v["parent"] = json!(parent);
            }
            if let Some(state) = &snap.snapstate {
                v["snapstate"] = json!(state);
            }
            v
        })
        .collect();
    let mut current = json!({
        "name": "current",
        "description": "You are here!",
        "running": u8::from(guest.running()),
        "digest": guest.digest(),
    });
    if let Some(parent) = guest.conf.get("parent") {
        current["parent"] = json!(parent);
    }
    items.push(current);
    data(Value::Array(items))
}

fn no_config(shared: &crate::state::Shared, vmid: u32) -> String {
    format!(
        "Configuration file 'nodes/{}/lxc/{vmid}.conf' does not exist",
        shared.node()
    )
}

/// Whether every volume of the CT sits on a snapshot-capable storage.
fn snapshot_capable(st: &NodeState, vmid: u32) -> bool {
    let Some(guest) = st.guests.get(&vmid) else {
        return false;
    };
    guest
        .conf
        .iter()
        .filter(|(k, _)| *k == "rootfs" || k.starts_with("mp"))
        .filter_map(|(_, v)| volume_of(v))
        .all(|vol| {
            vol.split_once(':')
                .and_then(|(sid, _)| st.storages.get(sid))
                .is_some_and(|s| s.kind.snapshots())
        })
}

/// `POST …/snapshot` (task `vzsnapshot`).
pub(crate) fn create(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let name = ctx.required("snapname")?.to_owned();
    if name == "current" || name == "vzdump" {
        return Err(ApiError::internal(&format!(
            "unable to use snapshot name '{name}' (reserved name)"
        )));
    }
    if !ctx.shared.state.lock().guests.contains_key(&vmid) {
        return Err(missing_config(ctx.node(), vmid));
    }
    let description = ctx.get("description").unwrap_or_default().to_owned();
    let shared = ctx.shared.clone();
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "vzsnapshot",
        &vmid.to_string(),
        format!(
            "lvcreate 'pve/snap_vm-{vmid}-disk-0_{name}' error:   Cannot create new thin volume, free space in thin pool pve/data reached threshold."
        ),
        move |t| async move {
            prepare_snapshot(&t, vmid, &name, &description).await?;
            let result = async {
                t.work(shared.config.durations.vzsnapshot).await?;
                t.checkpoint()
            }
            .await;
            finish_snapshot(&t, vmid, &name, result)
        },
    );
    data(json!(upid))
}

/// The first phase: checks, `lock: snapshot` and the entry in state `prepare`.
pub(crate) async fn prepare_snapshot(
    t: &TaskCtx,
    vmid: u32,
    name: &str,
    description: &str,
) -> Result<(), String> {
    let shared = &t.shared;
    let _flock = shared.flock(vmid, FLOCK_WAIT).await?;
    let mut st = shared.state.lock();
    let capable = snapshot_capable(&st, vmid);
    let guest = st
        .guests
        .get_mut(&vmid)
        .ok_or_else(|| no_config(shared, vmid))?;
    guest.check_lock(&[])?;
    if guest.snapshots.contains_key(name) {
        return Err(format!("snapshot name '{name}' already used"));
    }
    if guest.conf.get("template").is_some_and(|v| v == "1") {
        return Err("you can't take a snapshot if it's a template".to_owned());
    }
    if !capable {
        return Err("snapshot feature is not available".to_owned());
    }
    guest.conf.insert("lock".to_owned(), "snapshot".to_owned());
    let mut conf = guest.conf.clone();
    conf.remove("lock");
    guest.snapshots.insert(
        name.to_owned(),
        Snapshot {
            conf,
            snaptime: now_epoch(),
            description: description.to_owned(),
            snapstate: Some("prepare".to_owned()),
            files: guest.files.clone(),
        },
    );
    let disks: Vec<String> = guest
        .conf
        .iter()
        .filter(|(k, _)| *k == "rootfs" || k.starts_with("mp"))
        .filter_map(|(_, v)| volume_of(v))
        .collect();
    drop(st);
    for vol in disks {
        let short = vol.split_once(':').map_or(vol.as_str(), |(_, n)| n);
        t.log(format!("  Logical volume \"snap_{short}_{name}\" created."));
    }
    Ok(())
}

/// The second phase: commit (parent = the new snapshot) or roll back the entry; unlock.
pub(crate) fn finish_snapshot(
    t: &TaskCtx,
    vmid: u32,
    name: &str,
    result: Result<(), String>,
) -> Result<(), String> {
    let mut st = t.shared.state.lock();
    let guest = st
        .guests
        .get_mut(&vmid)
        .ok_or_else(|| no_config(&t.shared, vmid))?;
    guest.conf.remove("lock");
    match result {
        Ok(()) => {
            if let Some(snap) = guest.snapshots.get_mut(name) {
                snap.snapstate = None;
            }
            guest.conf.insert("parent".to_owned(), name.to_owned());
            Ok(())
        }
        Err(e) => {
            guest.snapshots.remove(name);
            Err(e)
        }
    }
}

/// Removes a snapshot entry, re-parenting its children and the current state.
pub(crate) fn remove_snapshot(st: &mut NodeState, vmid: u32, name: &str) {
    let Some(guest) = st.guests.get_mut(&vmid) else {
        return;
    };
    let Some(removed) = guest.snapshots.remove(name) else {
        return;
    };
    let grandparent = removed.conf.get("parent").cloned();
    let fix = |conf: &mut crate::state::Conf| {
        if conf.get("parent").map(String::as_str) == Some(name) {
            match &grandparent {
                Some(p) => conf.insert("parent".to_owned(), p.clone()),
                None => conf.remove("parent"),
            };
        }
    };
    fix(&mut guest.conf);
    for snap in guest.snapshots.values_mut() {
        fix(&mut snap.conf);
    }
}

/// `DELETE …/snapshot/{snapname}` (task `vzdelsnapshot`).
pub(crate) fn delete(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let name = ctx.required("snapname")?.to_owned();
    let force = ctx.flag("force");
    if !ctx.shared.state.lock().guests.contains_key(&vmid) {
        return Err(missing_config(ctx.node(), vmid));
    }
    let shared = ctx.shared.clone();
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "vzdelsnapshot",
        &vmid.to_string(),
        "Failed to obtain guest migration lock - replication running?".to_owned(),
        move |t| async move {
            {
                let _flock = shared.flock(vmid, FLOCK_WAIT).await?;
                let mut st = shared.state.lock();
                let guest = st
                    .guests
                    .get_mut(&vmid)
                    .ok_or_else(|| no_config(&shared, vmid))?;
                if !force {
                    guest.check_lock(&[])?;
                }
                if !guest.snapshots.contains_key(&name) {
                    return Err(format!("snapshot '{name}' does not exist"));
                }
                guest
                    .conf
                    .insert("lock".to_owned(), "snapshot-delete".to_owned());
                if let Some(s) = guest.snapshots.get_mut(&name) {
                    s.snapstate = Some("delete".to_owned());
                }
            }
            let result = async {
                t.work(shared.config.durations.vzdelsnapshot).await?;
                t.checkpoint()
            }
            .await;
            let mut st = shared.state.lock();
            if let Some(g) = st.guests.get_mut(&vmid) {
                g.conf.remove("lock");
                if result.is_err()
                    && let Some(s) = g.snapshots.get_mut(&name)
                {
                    s.snapstate = None;
                }
            }
            result?;
            remove_snapshot(&mut st, vmid, &name);
            Ok(())
        },
    );
    data(json!(upid))
}

/// `POST …/snapshot/{snapname}/rollback` (task `vzrollback`).
pub(crate) fn rollback(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let name = ctx.required("snapname")?.to_owned();
    let start = ctx.flag("start");
    if !ctx.shared.state.lock().guests.contains_key(&vmid) {
        return Err(missing_config(ctx.node(), vmid));
    }
    let shared = ctx.shared.clone();
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "vzrollback",
        &vmid.to_string(),
        format!(
            "lvconvert 'pve/snap_vm-{vmid}-disk-0_{name}' error: Merging of thin snapshot failed"
        ),
        move |t| async move {
            let flock = shared.flock(vmid, FLOCK_WAIT).await?;
            {
                let mut st = shared.state.lock();
                let guest = st
                    .guests
                    .get_mut(&vmid)
                    .ok_or_else(|| no_config(&shared, vmid))?;
                let snap = guest
                    .snapshots
                    .get(&name)
                    .ok_or_else(|| format!("snapshot '{name}' does not exist"))?;
                if let Some(state) = &snap.snapstate {
                    return Err(format!(
                        "unable to rollback to incomplete snapshot (snapstate = {state})"
                    ));
                }
                guest.check_lock(&[])?;
                if guest.running_since.take().is_some() {
                    t.log(format!("stopping CT {vmid} (rollback)"));
                }
                guest.conf.insert("lock".to_owned(), "rollback".to_owned());
            }
            let result = async {
                t.work(shared.config.durations.vzrollback).await?;
                t.checkpoint()
            }
            .await;
            let mut st = shared.state.lock();
            let guest = st
                .guests
                .get_mut(&vmid)
                .ok_or_else(|| no_config(&shared, vmid))?;
            if let Err(e) = result {
                guest.conf.remove("lock");
                return Err(e);
            }
            let (snap_conf, snap_files) = guest
                .snapshots
                .get(&name)
                .map(|s| (s.conf.clone(), s.files.clone()))
                .ok_or_else(|| format!("snapshot '{name}' does not exist"))?;
            guest.files = snap_files;
            let mut conf = snap_conf;
            conf.insert("parent".to_owned(), name.clone());
            conf.remove("lock");
            guest.conf = conf;
            guest.pending.clear();
            guest.pending_delete.clear();
            let boots = guest.files.executable(INIT);
            if start && boots {
                guest.running_since = Some(Instant::now());
            }
            drop(st);
            // A start that fails is a task of its own, as PVE's `vm_start` after the rollback.
            drop(flock);
            if start && !boots {
                crate::lxc::spawn_start(&shared, &t.authid, vmid, false, false);
            }
            Ok(())
        },
    );
    data(json!(upid))
}

/// `GET …/snapshot/{snapname}`: the directory index (PVE does not look the snapshot up).
pub(crate) fn index(_ctx: &Ctx) -> HandlerResult {
    data(json!([{ "cmd": "rollback" }, { "cmd": "config" }]))
}

fn no_snapshot(name: &str) -> ApiError {
    ApiError::internal(&format!("snapshot '{name}' does not exist"))
}

/// `GET …/snapshot/{snapname}/config`: the snapshot's section of the config file.
pub(crate) fn config_get(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let name = ctx.required("snapname")?;
    let st = ctx.shared.state.lock();
    let guest = st
        .guests
        .get(&vmid)
        .ok_or_else(|| missing_config(ctx.node(), vmid))?;
    let snap = guest.snapshots.get(name).ok_or_else(|| no_snapshot(name))?;
    let mut out = crate::lxc_config::typed(&snap.conf);
    out.remove("lxc");
    out.insert("snaptime".to_owned(), json!(snap.snaptime));
    if !snap.description.is_empty() {
        out.insert("description".to_owned(), json!(snap.description));
    }
    if let Some(state) = &snap.snapstate {
        out.insert("snapstate".to_owned(), json!(state));
    }
    data(Value::Object(out))
}

/// `PUT …/snapshot/{snapname}/config`: only the description can change; without one the
/// call changes nothing.
pub(crate) fn config_put(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let name = ctx.required("snapname")?;
    let mut st = ctx.shared.state.lock();
    let node = ctx.node().to_owned();
    let guest = st
        .guests
        .get_mut(&vmid)
        .ok_or_else(|| missing_config(&node, vmid))?;
    let snap = guest
        .snapshots
        .get_mut(name)
        .ok_or_else(|| no_snapshot(name))?;
    if let Some(description) = ctx.get("description") {
        snap.description = description.to_owned();
    }
    data(Value::Null)
}
