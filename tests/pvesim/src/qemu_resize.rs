//! `PUT /nodes/{node}/qemu/{vmid}/resize` (qemu-server's `resize_vm`): the request forks task
//! `resize` at once, and every check runs inside it under the VM's config lock, so a refusal
//! (a lock, a changed digest, a missing disk, a cdrom, a shrink) is the task's failure, not
//! the request's. A grow writes the drive's new `size=` into the config; the same size is a
//! task that changes nothing.

use serde_json::json;

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::qemu::{is_disk_key, missing_config, vm_exists};
use crate::schema::{format_size, parse_size};
use crate::state::FLOCK_WAIT;
use crate::tasks;

/// `PUT …/qemu/{vmid}/resize` (task `resize`).
pub(crate) fn resize(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let disk = ctx.required("disk")?.to_owned();
    let size_arg = ctx.required("size")?.to_owned();
    let digest = ctx.get("digest").map(str::to_owned);
    if ctx.get("skiplock").is_some() && !ctx.is_root() {
        return Err(ApiError::param(
            "skiplock",
            "Only root may use this option.",
        ));
    }
    vm_exists(ctx, vmid)?;
    let shared = ctx.shared.clone();
    let authid = ctx.authid.clone();
    let duration = shared.config.durations.resize;
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "resize",
        &vmid.to_string(),
        format!("VM {vmid} qmp command 'block_resize' failed - got timeout"),
        move |t| async move {
            let _flock = shared.flock_qemu(vmid, FLOCK_WAIT).await?;
            let (volid, old_size, new_size) = {
                let st = shared.state.lock();
                let vm = st
                    .vms
                    .get(&vmid)
                    .ok_or_else(|| missing_config(shared.node(), vmid))?;
                vm.check_lock()?;
                if let Some(d) = &digest
                    && *d != vm.digest()
                {
                    return Err(
                        "detected modified configuration - file changed by other user? Try again."
                            .to_owned(),
                    );
                }
                let drive = vm
                    .conf
                    .get(&disk)
                    .filter(|_| is_disk_key(&disk))
                    .ok_or_else(|| format!("disk '{disk}' does not exist"))?;
                if drive.split(',').any(|p| p == "media=cdrom") {
                    return Err("you can't resize a cdrom".to_owned());
                }
                let volid = crate::state::volume_of(drive).unwrap_or_default();
                if let Some((sid, _)) = volid.split_once(':')
                    && !st.access.has(
                        &authid,
                        &format!("/storage/{sid}"),
                        "Datastore.AllocateSpace",
                    )
                {
                    return Err(format!(
                        "Permission check failed (/storage/{sid}, Datastore.AllocateSpace)"
                    ));
                }
                let old_size = drive
                    .split(',')
                    .find_map(|p| p.strip_prefix("size="))
                    .and_then(parse_size)
                    .or_else(|| st.find_volume(&volid).map(|v| v.size))
                    .unwrap_or(0);
                let (grow, amount) = match size_arg.strip_prefix('+') {
                    Some(rest) => (true, rest),
                    None => (false, size_arg.as_str()),
                };
                let bytes = parse_size(amount).ok_or_else(|| "unable to parse size".to_owned())?;
                let new_size = if grow { old_size + bytes } else { bytes };
                if new_size < old_size {
                    return Err("shrinking disks is not supported".to_owned());
                }
                (volid, old_size, new_size)
            };
            if new_size == old_size {
                return Ok(());
            }
            t.log(format!(
                "  Size of logical volume {volid} changed from {} to {}.",
                format_size(old_size),
                format_size(new_size)
            ));
            t.work(duration).await?;
            t.checkpoint()?;
            let mut st = shared.state.lock();
            if let Some(storage) = volid
                .split_once(':')
                .and_then(|(s, _)| st.storages.get_mut(s))
                && let Some(vol) = storage.volumes.iter_mut().find(|v| v.volid == volid)
            {
                vol.size = new_size;
            }
            let vm = st
                .vms
                .get_mut(&vmid)
                .ok_or_else(|| missing_config(shared.node(), vmid))?;
            if let Some(value) = vm.conf.get(&disk).cloned() {
                let rebuilt: Vec<String> = value
                    .split(',')
                    .filter(|p| !p.starts_with("size="))
                    .map(str::to_owned)
                    .chain(std::iter::once(format!("size={}", format_size(new_size))))
                    .collect();
                vm.conf.insert(disk.clone(), rebuilt.join(","));
            }
            Ok(())
        },
    );
    data(json!(upid))
}
