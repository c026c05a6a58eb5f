//! `GET/PUT …/lxc/{vmid}/config` and `PUT …/resize`, with PVE's per-option privilege
//! checks and root-only rules (shared with create/restore).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::schema::{MP, ROOTFS, format_size, parse_prop_string, parse_size};
use crate::state::{Conf, FLOCK_WAIT, Guest, NodeState, Volume, is_volume_key, volume_of};
use crate::tasks;

const INT_KEYS: &[&str] = &["cores", "cpuunits", "memory", "swap", "tty"];
const BOOL_KEYS: &[&str] = &[
    "console",
    "debug",
    "onboot",
    "protection",
    "template",
    "unprivileged",
];

/// Keys a running CT applies at once; everything else waits in `[pve:pending]`.
fn hotplug(key: &str, guest: &Guest) -> bool {
    const HOT: &[&str] = &[
        "description",
        "onboot",
        "startup",
        "protection",
        "hostname",
        "hookscript",
        "cores",
        "tags",
        "lock",
        "memory",
        "swap",
        "cpulimit",
        "cpuunits",
    ];
    HOT.contains(&key)
        || key.starts_with("net")
        || ((key.starts_with("mp") || key.starts_with("dev")) && !guest.conf.contains_key(key))
}

/// A config map rendered with Perl types: integers as numbers, booleans 0/1, the rest strings.
pub(crate) fn typed(conf: &Conf) -> Map<String, Value> {
    let raw: Vec<Value> = conf
        .iter()
        .filter(|(k, _)| k.starts_with("lxc."))
        .map(|(k, v)| json!([k, v]))
        .collect();
    let mut out: Map<String, Value> = conf
        .iter()
        .filter(|(k, _)| !k.starts_with("lxc."))
        .map(|(k, v)| {
            let val = if INT_KEYS.contains(&k.as_str()) || BOOL_KEYS.contains(&k.as_str()) {
                v.parse::<i64>().map_or_else(|_| json!(v), |n| json!(n))
            } else {
                json!(v)
            };
            (k.clone(), val)
        })
        .collect();
    if !raw.is_empty() {
        out.insert("lxc".to_owned(), Value::Array(raw));
    }
    out
}

pub(crate) fn missing_config(node: &str, vmid: u32) -> ApiError {
    ApiError::internal(&format!(
        "Configuration file 'nodes/{node}/lxc/{vmid}.conf' does not exist"
    ))
}

/// `GET /nodes/{node}/lxc/{vmid}/config`.
pub(crate) fn get(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let st = ctx.shared.state.lock();
    let guest = st
        .guests
        .get(&vmid)
        .ok_or_else(|| missing_config(ctx.node(), vmid))?;
    let mut conf = if let Some(snap) = ctx.get("snapshot") {
        guest
            .snapshots
            .get(snap)
            .map(|s| s.conf.clone())
            .ok_or_else(|| ApiError::internal(&format!("snapshot '{snap}' does not exist")))?
    } else if ctx.flag("current") {
        guest.conf.clone()
    } else {
        let mut merged = guest.conf.clone();
        for key in &guest.pending_delete {
            merged.remove(key);
        }
        merged.extend(guest.pending.clone());
        merged
    };
    if !st
        .access
        .has(&ctx.authid, &format!("/vms/{vmid}"), "VM.Config.Options")
    {
        conf.remove("env");
    }
    let mut out = typed(&conf);
    out.insert("digest".to_owned(), json!(guest.digest()));
    data(Value::Object(out))
}

/// Which bridge a `netN` value uses.
pub(crate) fn bridge_of(value: &str) -> Option<String> {
    value
        .split(',')
        .find_map(|p| p.strip_prefix("bridge=").map(str::to_owned))
}

fn features_of(value: Option<&str>) -> BTreeMap<String, String> {
    value
        .and_then(|v| parse_prop_string(&crate::schema::FEATURES, v).ok())
        .unwrap_or_default()
}

/// PVE's `check_ct_modify_config_perm` for the given changes (`None` = delete) on a CT
/// whose current config is `old`; `unprivileged` is the CT's (or the sent) flag.
pub(crate) fn check_modify_perm(
    ctx: &Ctx,
    st: &NodeState,
    vmid: u32,
    old: &Conf,
    changes: &BTreeMap<String, Option<String>>,
    unprivileged: bool,
) -> Result<(), ApiError> {
    let vm_path = format!("/vms/{vmid}");
    let need = |privilege: &str| -> Result<(), ApiError> {
        if st.access.has(&ctx.authid, &vm_path, privilege) {
            Ok(())
        } else {
            Err(ApiError::perm(&vm_path, privilege))
        }
    };
    for (key, value) in changes {
        match key.as_str() {
            "cores" | "cpulimit" | "cpuunits" => need("VM.Config.CPU")?,
            "memory" | "swap" => need("VM.Config.Memory")?,
            "hostname" | "nameserver" | "searchdomain" => need("VM.Config.Network")?,
            k if k.starts_with("net") => {
                need("VM.Config.Network")?;
                if let Some(bridge) = value.as_deref().and_then(bridge_of) {
                    let mut path = format!("/sdn/zones/localnetwork/{bridge}");
                    if let Some(tag) = value
                        .as_deref()
                        .and_then(|v| v.split(',').find_map(|p| p.strip_prefix("tag=")))
                    {
                        path = format!("{path}/{tag}");
                    }
                    if !st.access.has(&ctx.authid, &path, "SDN.Use") {
                        return Err(ApiError::perm(&path, "SDN.Use"));
                    }
                }
            }
            k if k == "rootfs" || k.starts_with("mp") => {
                if let Some(v) = value {
                    let spec = if k == "rootfs" { &ROOTFS } else { &MP };
                    let vol = parse_prop_string(spec, v)
                        .ok()
                        .and_then(|m| m.get("volume").cloned())
                        .unwrap_or_default();
                    if vol.starts_with('/') && !ctx.is_root() {
                        let kind = if vol.starts_with("/dev/") {
                            "device"
                        } else {
                            "bind"
                        };
                        return Err(ApiError::perm_text(&format!(
                            "mount point type {kind} is only allowed for root@pam"
                        )));
                    }
                    if let Some((sid, _)) = vol.split_once(':')
                        && !st.access.has(
                            &ctx.authid,
                            &format!("/storage/{sid}"),
                            "Datastore.AllocateSpace",
                        )
                    {
                        return Err(ApiError::perm(
                            &format!("/storage/{sid}"),
                            "Datastore.AllocateSpace",
                        ));
                    }
                }
                need("VM.Config.Disk")?;
            }
            k if k.starts_with("dev") => {
                if !ctx.is_root() {
                    return Err(ApiError::perm_text(
                        "configuring device passthrough is only allowed for root@pam",
                    ));
                }
            }
            "hookscript" => {
                if !ctx.is_root() {
                    return Err(ApiError::perm_text(
                        "changing the hookscript is only allowed for root@pam",
                    ));
                }
            }
            "features" => {
                if ctx.is_root() {
                    continue;
                }
                if !unprivileged {
                    return Err(ApiError::perm_text(
                        "changing feature flags for privileged container is only allowed for root@pam",
                    ));
                }
                let before = features_of(old.get("features").map(String::as_str));
                let after = features_of(value.as_deref());
                let keys: std::collections::BTreeSet<&String> =
                    before.keys().chain(after.keys()).collect();
                for feature in keys {
                    if before.get(feature) == after.get(feature) {
                        continue;
                    }
                    if feature == "nesting" {
                        need("VM.Allocate")?;
                    } else {
                        return Err(ApiError::perm_text(
                            "changing feature flags (except nesting) is only allowed for root@pam",
                        ));
                    }
                }
            }
            _ => need("VM.Config.Options")?,
        }
    }
    Ok(())
}

/// Allocates a new volume for `STORAGE:N` (N GiB) on behalf of `vmid`; returns its volid.
pub(crate) fn allocate_volume(
    st: &mut NodeState,
    vmid: u32,
    sid: &str,
    size: u64,
) -> Result<String, String> {
    let storage = st
        .storages
        .get(sid)
        .ok_or_else(|| format!("storage '{sid}' does not exist"))?;
    if !storage.content.contains("rootdir") {
        return Err(format!(
            "storage '{sid}' does not support container directories"
        ));
    }
    let is_dir = matches!(storage.kind, crate::state::StorageKind::Dir { .. });
    let existing: std::collections::BTreeSet<String> =
        storage.volumes.iter().map(|v| v.volid.clone()).collect();
    let volid = (0..)
        .map(|n| {
            if is_dir {
                format!("{sid}:{vmid}/vm-{vmid}-disk-{n}.raw")
            } else {
                format!("{sid}:vm-{vmid}-disk-{n}")
            }
        })
        .find(|v| !existing.contains(v))
        .ok_or_else(|| "unable to allocate a volume name".to_owned())?;
    if storage.used() + size > storage.total {
        return Err(format!("not enough free space on storage '{sid}'"));
    }
    if let Some(storage) = st.storages.get_mut(sid) {
        storage.volumes.push(Volume {
            volid: volid.clone(),
            content: "rootdir".to_owned(),
            format: "raw".to_owned(),
            size,
            ctime: crate::state::now_epoch(),
            vmid: Some(vmid),
            notes: None,
            protected: false,
            encrypted: None,
            archive: None,
        });
    }
    Ok(volid)
}

/// `PUT /nodes/{node}/lxc/{vmid}/config` (synchronous).
pub(crate) async fn put(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let _flock = ctx
        .shared
        .flock(vmid, FLOCK_WAIT)
        .await
        .map_err(|m| ApiError::internal(&m))?;
    let mut st = ctx.shared.state.lock();
    let guest = st
        .guests
        .get(&vmid)
        .ok_or_else(|| missing_config(ctx.node(), vmid))?
        .clone();
    let mut changes: BTreeMap<String, Option<String>> = BTreeMap::new();
    for key in &ctx.explicit {
        if matches!(key.as_str(), "delete" | "revert" | "digest") {
            continue;
        }
        if let Some(v) = ctx.get(key) {
            changes.insert(key.clone(), Some(v.to_owned()));
        }
    }
    let list = |k: &str| -> Vec<String> {
        ctx.get(k)
            .map(|v| {
                v.split([',', ';', ' ', '\0'])
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let deletes = list("delete");
    let reverts = list("revert");
    if changes.is_empty() && deletes.is_empty() && reverts.is_empty() {
        return Err(ApiError::internal("no options specified"));
    }
    if let Some(d) = ctx.get("digest")
        && d != guest.digest()
    {
        return Err(ApiError::internal(
            "detected modified configuration - file changed by other user? Try again.",
        ));
    }
    guest.check_lock(&[]).map_err(|m| ApiError::internal(&m))?;
    for key in &deletes {
        let known = crate::routes::routes()
            .iter()
            .find(|r| r.method == "PUT" && r.path == "/nodes/{node}/lxc/{vmid}/config")
            .and_then(|r| r.param(key))
            .is_some();
        if !known || matches!(key.as_str(), "delete" | "revert" | "digest") {
            return Err(ApiError::param(
                "delete",
                &format!("unknown option '{key}'"),
            ));
        }
        if matches!(key.as_str(), "rootfs" | "memory" | "ostype") {
            return Err(ApiError::internal(&format!(
                "unable to delete required option '{key}'"
            )));
        }
        changes.insert(key.clone(), None);
    }
    if let Some(Some(v)) = changes.get("unprivileged")
        && guest.conf.get("unprivileged").map_or("0", String::as_str) != v
    {
        return Err(ApiError::internal(
            "unable to modify read-only option: 'unprivileged'",
        ));
    }
    let unprivileged = guest.conf.get("unprivileged").is_some_and(|v| v == "1");
    check_modify_perm(ctx, &st, vmid, &guest.conf, &changes, unprivileged)?;

    // Allocate new volumes for `STORAGE:N` in rootfs/mpN.
    let mut final_changes = changes.clone();
    for (key, value) in &changes {
        let Some(v) = value else { continue };
        if !is_volume_key(key) || key.starts_with("unused") {
            continue;
        }
        let spec = if key == "rootfs" { &ROOTFS } else { &MP };
        let mut parts = parse_prop_string(spec, v).map_err(|e| ApiError::param(key, &e))?;
        let vol = parts.get("volume").cloned().unwrap_or_default();
        if let Some((sid, n)) = vol.split_once(':')
            && let Ok(gib) = n.parse::<u64>()
        {
            let size = gib << 30;
            let volid =
                allocate_volume(&mut st, vmid, sid, size).map_err(|m| ApiError::internal(&m))?;
            parts.insert("volume".to_owned(), volid.clone());
            parts.insert("size".to_owned(), format_size(size));
            let mut rendered = volid;
            for (k, val) in parts.iter().filter(|(k, _)| *k != "volume") {
                rendered.push_str(&format!(",{k}={val}"));
            }
            final_changes.insert(key.clone(), Some(rendered));
        }
    }

    // PVE's network parser gives an interface without `hwaddr` a fresh MAC.
    for (key, value) in final_changes.iter_mut() {
        if let Some(v) = value
            && key.starts_with("net")
            && !v.split(',').any(|p| p.starts_with("hwaddr="))
        {
            // Printed in the format's order: name, bridge, hwaddr, then the rest.
            let mut parts: Vec<String> = v.split(',').map(str::to_owned).collect();
            let at = parts
                .iter()
                .position(|p| p.starts_with("bridge="))
                .map_or(parts.len(), |i| i + 1);
            parts.insert(at, format!("hwaddr={}", ctx.shared.random_mac()));
            *v = parts.join(",");
        }
    }
    let guest = st
        .guests
        .get_mut(&vmid)
        .ok_or_else(|| missing_config(ctx.node(), vmid))?;
    for key in &reverts {
        guest.pending.remove(key);
        guest.pending_delete.remove(key);
    }
    let running = guest.running();
    for (key, value) in final_changes {
        let live = !running || hotplug(&key, guest);
        match (value, live) {
            (Some(v), true) => {
                guest.pending.remove(&key);
                guest.conf.insert(key, v);
            }
            (Some(v), false) => {
                guest.pending_delete.remove(&key);
                guest.pending.insert(key, v);
            }
            (None, true) => {
                guest.pending.remove(&key);
                guest.conf.remove(&key);
            }
            (None, false) => {
                guest.pending.remove(&key);
                guest.pending_delete.insert(key);
            }
        }
    }
    tracing::info!(vmid, "config updated");
    data(Value::Null)
}

/// `PUT /nodes/{node}/lxc/{vmid}/resize`: sync checks, then task `resize`.
pub(crate) async fn resize(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let disk = ctx.required("disk")?.to_owned();
    let size_arg = ctx.required("size")?.to_owned();
    let (volid, old_size, new_size) = {
        let st = ctx.shared.state.lock();
        let guest = st
            .guests
            .get(&vmid)
            .ok_or_else(|| missing_config(ctx.node(), vmid))?;
        if let Some(d) = ctx.get("digest")
            && d != guest.digest()
        {
            return Err(ApiError::internal(
                "detected modified configuration - file changed by other user? Try again.",
            ));
        }
        guest.check_lock(&[]).map_err(|m| ApiError::internal(&m))?;
        if !st
            .access
            .has(&ctx.authid, &format!("/vms/{vmid}"), "VM.Config.Options")
        {
            return Err(ApiError::perm(&format!("/vms/{vmid}"), "VM.Config.Options"));
        }
        let value = guest.conf.get(&disk).ok_or_else(|| {
            ApiError::internal(&format!("unable to parse config option '{disk}'"))
        })?;
        let spec = if disk == "rootfs" { &ROOTFS } else { &MP };
        let parts = parse_prop_string(spec, value).map_err(|m| ApiError::internal(&m))?;
        let volid = volume_of(value).unwrap_or_default();
        if let Some(owner) = volid
            .rsplit_once("vm-")
            .and_then(|(_, r)| r.split('-').next())
            .and_then(|v| v.parse::<u32>().ok())
            && owner != vmid
        {
            return Err(ApiError::internal(&format!(
                "can't resize mount point owned by another container ({owner})"
            )));
        }
        if let Some((sid, _)) = volid.split_once(':')
            && !st.access.has(
                &ctx.authid,
                &format!("/storage/{sid}"),
                "Datastore.AllocateSpace",
            )
        {
            return Err(ApiError::perm(
                &format!("/storage/{sid}"),
                "Datastore.AllocateSpace",
            ));
        }
        let old_size = parts
            .get("size")
            .and_then(|s| parse_size(s))
            .or_else(|| st.find_volume(&volid).map(|v| v.size))
            .unwrap_or(0);
        let (grow, amount) = match size_arg.strip_prefix('+') {
            Some(rest) => (true, rest),
            None => (false, size_arg.as_str()),
        };
        let bytes =
            parse_size(amount).ok_or_else(|| ApiError::param("size", "unable to parse size"))?;
        let new_size = if grow { old_size + bytes } else { bytes };
        if new_size < old_size {
            return Err(ApiError::internal("unable to shrink disk size"));
        }
        if new_size == old_size {
            return Err(ApiError::internal("disk is already at specified size"));
        }
        (volid, old_size, new_size)
    };
    let shared = ctx.shared.clone();
    let duration = shared.config.durations.resize;
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "resize",
        &vmid.to_string(),
        format!("command 'resize2fs /dev/pve/vm-{vmid}-disk-0' failed: exit code 1"),
        move |t| async move {
            let _flock = shared.flock(vmid, FLOCK_WAIT).await?;
            let lv = volid.split_once(':').map_or(volid.as_str(), |(_, v)| v);
            t.log(format!(
                "  Size of logical volume pve/{lv} changed from {} to {}.",
                human_gib(old_size),
                human_gib(new_size)
            ));
            t.work(duration).await?;
            t.checkpoint()?;
            t.log(format!("  Logical volume pve/{lv} successfully resized."));
            let mut st = shared.state.lock();
            if let Some(storage) = volid
                .split_once(':')
                .and_then(|(s, _)| st.storages.get_mut(s))
                && let Some(vol) = storage.volumes.iter_mut().find(|v| v.volid == volid)
            {
                vol.size = new_size;
            }
            let guest = st.guests.get_mut(&vmid).ok_or_else(|| {
                format!(
                    "Configuration file 'nodes/{}/lxc/{vmid}.conf' does not exist",
                    shared.node()
                )
            })?;
            guest.data = Some(guest.data_bytes());
            if let Some(value) = guest.conf.get(&disk).cloned() {
                let rebuilt: Vec<String> = value
                    .split(',')
                    .filter(|p| !p.starts_with("size="))
                    .map(str::to_owned)
                    .chain(std::iter::once(format!("size={}", format_size(new_size))))
                    .collect();
                guest.conf.insert(disk.clone(), rebuilt.join(","));
            }
            Ok(())
        },
    );
    data(json!(upid))
}

fn human_gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / f64::from(1u32 << 30))
}
