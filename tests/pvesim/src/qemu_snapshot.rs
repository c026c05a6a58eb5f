//! A VM's snapshots (disk-only, frozen through the guest agent when it answers) and its
//! cloud-init drive (built at start and by `PUT …/cloudinit`).

use std::time::Instant;

use serde_json::{Value, json};

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::qemu::{VmSnapshot, missing_config, vm_exists};
use crate::state::FLOCK_WAIT;
use crate::tasks;

/// `GET …/qemu/{vmid}/snapshot`.
pub(crate) fn snapshot_list(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let st = ctx.shared.state.lock();
    let vm = st
        .vms
        .get(&vmid)
        .ok_or_else(|| ApiError::internal(&missing_config(ctx.node(), vmid)))?;
    let mut items: Vec<Value> = vm
        .snapshots
        .iter()
        .map(|(name, s)| {
            json!({
                "name": name,
                "snaptime": s.snaptime,
                "description": s.description,
                "vmstate": 0,
            })
        })
        .collect();
    let mut current = json!({
        "name": "current",
        "description": "You are here!",
        "running": u8::from(vm.running()),
        "digest": vm.digest(),
    });
    if let Some(parent) = vm.conf.get("parent") {
        current["parent"] = json!(parent);
    }
    items.push(current);
    data(Value::Array(items))
}

/// `POST …/qemu/{vmid}/snapshot` (task `qmsnapshot`): a disk-only snapshot; with a guest
/// agent answering, qemu-server freezes and thaws the guest's filesystems around it.
pub(crate) fn snapshot_create(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let name = ctx.required("snapname")?.to_owned();
    let description = ctx.get("description").unwrap_or_default().to_owned();
    vm_exists(ctx, vmid)?;
    let shared = ctx.shared.clone();
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "qmsnapshot",
        &vmid.to_string(),
        "snapshot create failed: starting cleanup".to_owned(),
        move |t| async move {
            {
                let mut st = shared.state.lock();
                let vm = st
                    .vms
                    .get_mut(&vmid)
                    .ok_or_else(|| missing_config(shared.node(), vmid))?;
                vm.check_lock()?;
                if vm.snapshots.contains_key(&name) {
                    return Err(format!("snapshot name '{name}' already used"));
                }
                vm.conf.insert("lock".into(), "snapshot".into());
                if vm.agent_answers() {
                    t.log("guest-fsfreeze-freeze");
                }
            }
            let outcome = async {
                t.work(shared.config.durations.vzsnapshot).await?;
                t.checkpoint()
            }
            .await;
            let mut st = shared.state.lock();
            let vm = st
                .vms
                .get_mut(&vmid)
                .ok_or_else(|| missing_config(shared.node(), vmid))?;
            if vm.agent_answers() {
                t.log("guest-fsfreeze-thaw");
            }
            vm.conf.remove("lock");
            outcome?;
            let mut conf = vm.conf.clone();
            conf.remove("parent");
            vm.snapshots.insert(
                name.clone(),
                VmSnapshot {
                    conf,
                    snaptime: shared.clock.epoch(),
                    description,
                    files: vm.files.clone(),
                },
            );
            vm.conf.insert("parent".into(), name);
            Ok(())
        },
    );
    data(json!(upid))
}

/// `DELETE …/qemu/{vmid}/snapshot/{snapname}` (task `qmdelsnapshot`).
pub(crate) fn snapshot_delete(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let name = ctx.required("snapname")?.to_owned();
    vm_exists(ctx, vmid)?;
    let shared = ctx.shared.clone();
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "qmdelsnapshot",
        &vmid.to_string(),
        format!("snapshot '{name}' could not be removed"),
        move |t| async move {
            t.work(shared.config.durations.vzdelsnapshot).await?;
            t.checkpoint()?;
            let mut st = shared.state.lock();
            let vm = st
                .vms
                .get_mut(&vmid)
                .ok_or_else(|| missing_config(shared.node(), vmid))?;
            vm.check_lock()?;
            if vm.snapshots.remove(&name).is_none() {
                return Err(format!("snapshot '{name}' does not exist"));
            }
            if vm.conf.get("parent") == Some(&name) {
                vm.conf.remove("parent");
            }
            Ok(())
        },
    );
    data(json!(upid))
}

/// `POST …/snapshot/{snapname}/rollback` (task `qmrollback`): stops the VM, brings back the
/// snapshot's config and disks, starts it again with `start=1`.
pub(crate) fn snapshot_rollback(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let name = ctx.required("snapname")?.to_owned();
    let start = ctx.flag("start");
    vm_exists(ctx, vmid)?;
    let shared = ctx.shared.clone();
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "qmrollback",
        &vmid.to_string(),
        format!("rollback to snapshot '{name}' failed"),
        move |t| async move {
            let _flock = shared.flock_qemu(vmid, FLOCK_WAIT).await?;
            {
                let st = shared.state.lock();
                let vm = st
                    .vms
                    .get(&vmid)
                    .ok_or_else(|| missing_config(shared.node(), vmid))?;
                vm.check_lock()?;
                if !vm.snapshots.contains_key(&name) {
                    return Err(format!("snapshot '{name}' does not exist"));
                }
            }
            t.work(shared.config.durations.vzrollback).await?;
            t.checkpoint()?;
            let mut st = shared.state.lock();
            let vm = st
                .vms
                .get_mut(&vmid)
                .ok_or_else(|| missing_config(shared.node(), vmid))?;
            let snap = vm
                .snapshots
                .get(&name)
                .cloned()
                .ok_or_else(|| format!("snapshot '{name}' does not exist"))?;
            vm.running_since = None;
            vm.frozen = false;
            vm.processes.clear();
            vm.conf = snap.conf;
            vm.conf.insert("parent".into(), name);
            vm.files = snap.files;
            if start {
                vm.running_since = Some(Instant::now());
                t.log(format!("start VM {vmid}"));
            }
            Ok(())
        },
    );
    data(json!(upid))
}

/// `GET …/qemu/{vmid}/cloudinit`: each cloud-init key with the value the drive was built
/// with and the one pending for the next build.
pub(crate) fn cloudinit_get(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let st = ctx.shared.state.lock();
    let vm = st
        .vms
        .get(&vmid)
        .ok_or_else(|| ApiError::internal(&missing_config(ctx.node(), vmid)))?;
    let now = vm.cloudinit_values();
    let mut keys: Vec<&String> = now.keys().chain(vm.cloudinit_drive.keys()).collect();
    keys.sort();
    keys.dedup();
    let items: Vec<Value> = keys
        .into_iter()
        .map(|key| {
            let mut item = json!({ "key": key });
            let built = vm.cloudinit_drive.get(key);
            let wanted = now.get(key);
            if let Some(v) = built {
                item["value"] = json!(v);
            }
            match (built, wanted) {
                (Some(_), None) => item["delete"] = json!(1),
                (b, Some(w)) if b != Some(w) => item["pending"] = json!(w),
                _ => {}
            }
            item
        })
        .collect();
    data(Value::Array(items))
}

/// `PUT …/qemu/{vmid}/cloudinit`: regenerates the drive from the config.
pub(crate) async fn cloudinit_put(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let _flock = ctx
        .shared
        .flock_qemu(vmid, FLOCK_WAIT)
        .await
        .map_err(|m| ApiError::internal(&m))?;
    let mut st = ctx.shared.state.lock();
    let vm = st
        .vms
        .get_mut(&vmid)
        .ok_or_else(|| ApiError::internal(&missing_config(ctx.node(), vmid)))?;
    vm.check_lock().map_err(|m| ApiError::internal(&m))?;
    if !vm.conf.values().any(|v| v.contains("cloudinit")) {
        return Err(ApiError::internal("no cloudinit drive found"));
    }
    vm.cloudinit_drive = vm.cloudinit_values();
    data(Value::Null)
}
