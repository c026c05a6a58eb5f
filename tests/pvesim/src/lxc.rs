//! LXC listing, status, power tasks and destroy.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::files::INIT;
use crate::lxc_config::missing_config;
use crate::state::{FLOCK_WAIT, Guest, Shared};
use crate::tasks;

pub(crate) use crate::restore::create;

fn memory_bytes(guest: &Guest, key: &str, default_mib: u64) -> u64 {
    guest
        .conf
        .get(key)
        .and_then(|m| m.parse::<u64>().ok())
        .unwrap_or(default_mib)
        << 20
}

pub(crate) fn summary(vmid: u32, guest: &Guest) -> Value {
    let running = guest.running();
    let uptime = guest
        .running_since
        .map_or(0, |t| Instant::now().duration_since(t).as_secs());
    let maxmem = memory_bytes(guest, "memory", 512);
    let maxdisk = guest.rootfs_size();
    let cpus: i64 = guest
        .conf
        .get("cores")
        .and_then(|c| c.parse().ok())
        .unwrap_or(1);
    let mut v = json!({
        "vmid": vmid,
        "type": "lxc",
        "status": if running { "running" } else { "stopped" },
        "name": guest.conf.get("hostname").cloned().unwrap_or_else(|| format!("CT{vmid}")),
        "maxmem": maxmem,
        "mem": if running { maxmem / 4 } else { 0 },
        "maxswap": memory_bytes(guest, "swap", 512),
        "swap": 0,
        "maxdisk": maxdisk,
        "disk": if running { guest.data_bytes().min(maxdisk) } else { 0 },
        "cpus": cpus,
        "cpu": if running { 0.01 } else { 0.0 },
        "uptime": uptime,
        "netin": 0,
        "netout": 0,
        "diskread": 0,
        "diskwrite": 0,
    });
    if let Some(lock) = guest.lock() {
        v["lock"] = json!(lock);
    }
    if let Some(tags) = guest.conf.get("tags") {
        v["tags"] = json!(tags);
    }
    if guest.conf.get("template").is_some_and(|t| t == "1") {
        v["template"] = json!(1);
    }
    if running {
        v["pid"] = json!(100_000 + vmid);
    }
    v
}

/// `GET /nodes/{node}/lxc`: only CTs with VM.Audit.
/// A running guest's usage as a test fixed it ([`crate::hardware::GuestLoad`]).
fn with_load(v: &mut Value, load: crate::hardware::GuestLoad) {
    if v["status"] != "running" {
        return;
    }
    if let Some(cpu) = load.cpu {
        v["cpu"] = json!(cpu);
    }
    for (used, max, share) in [
        ("mem", "maxmem", load.memory),
        ("disk", "maxdisk", load.disk),
    ] {
        if let (Some(share), Some(max)) = (share, v[max].as_u64()) {
            // A share of at most 1 of a u64 size, rounded down: no overflow, no sign.
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss
            )]
            let bytes = (max as f64 * share) as u64;
            v[used] = json!(bytes);
        }
    }
}

pub(crate) fn list(ctx: &Ctx) -> HandlerResult {
    let st = ctx.shared.state.lock();
    let items: Vec<Value> = st
        .guests
        .iter()
        .filter(|(vmid, _)| {
            st.access
                .has(&ctx.authid, &format!("/vms/{vmid}"), "VM.Audit")
        })
        .map(|(vmid, g)| {
            let mut v = summary(*vmid, g);
            with_load(&mut v, crate::hardware::guest_load(&ctx.shared, *vmid));
            v
        })
        .collect();
    data(Value::Array(items))
}

/// `GET /nodes/{node}/lxc/{vmid}/pending`: every option with its current value, the pending
/// value when a change waits for a restart, and `delete: 1` for a pending removal.
pub(crate) fn pending(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let st = ctx.shared.state.lock();
    let guest = st
        .guests
        .get(&vmid)
        .ok_or_else(|| missing_config(ctx.node(), vmid))?;
    let keys: std::collections::BTreeSet<&String> = guest
        .conf
        .keys()
        .chain(guest.pending.keys())
        .chain(guest.pending_delete.iter())
        .filter(|k| !k.starts_with("lxc."))
        .collect();
    let items: Vec<Value> = keys
        .into_iter()
        .map(|key| {
            let mut item = json!({ "key": key });
            if let Some(v) = guest.conf.get(key) {
                item["value"] = json!(v);
            }
            if let Some(v) = guest.pending.get(key) {
                item["pending"] = json!(v);
            }
            if guest.pending_delete.contains(key) {
                item["delete"] = json!(1);
            }
            item
        })
        .collect();
    data(Value::Array(items))
}

/// `GET /nodes/{node}/lxc/{vmid}/status/current`.
pub(crate) fn status(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let st = ctx.shared.state.lock();
    let guest = st
        .guests
        .get(&vmid)
        .ok_or_else(|| missing_config(ctx.node(), vmid))?;
    let mut v = summary(vmid, guest);
    v["ha"] = json!({ "managed": 0 });
    data(v)
}

/// The address the simulator's DHCP gives a container's `eth0`: `10.X.Y.Z/16` from its vmid, so
/// a guest restored under another vmid has another address.
pub fn dhcp_address(vmid: u32) -> std::net::Ipv4Addr {
    let [_, _, high, low] = vmid.to_be_bytes();
    std::net::Ipv4Addr::new(10, 99, high, low)
}

/// `GET /nodes/{node}/lxc/{vmid}/interfaces`: a running container's interfaces as its network
/// namespace has them (`lo`, then one per `netN` under its `name=`, with the address the guest's
/// root set on it, else the `ip=` it names or the simulator's DHCP address); a stopped one has
/// none to read (PVE fails the call).
pub(crate) fn interfaces(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let st = ctx.shared.state.lock();
    let guest = st
        .guests
        .get(&vmid)
        .ok_or_else(|| missing_config(ctx.node(), vmid))?;
    if !guest.running() {
        return Err(ApiError::internal(&format!("CT {vmid} not running")));
    }
    let mut out = vec![json!({
        "name": "lo", "hwaddr": "00:00:00:00:00:00", "hardware-address": "00:00:00:00:00:00",
        "inet": "127.0.0.1/8", "ip-addresses": [{"ip-address": "127.0.0.1", "ip-address-type": "inet", "prefix": 8}],
    })];
    for (key, value) in guest.conf.iter().filter(|(k, _)| k.starts_with("net")) {
        let prop = |name: &str| {
            value
                .split(',')
                .find_map(|p| p.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
                .map(str::to_owned)
        };
        let name = prop("name").unwrap_or_else(|| format!("eth{}", &key[3..]));
        let hwaddr = prop("hwaddr").unwrap_or_else(|| "BC:24:11:00:00:00".into());
        // What the guest's root set on its interface wins over what Proxmox configured (it can
        // set anything; ipfilter decides whether it reaches anyone).
        let inet = match (guest.own_address, prop("ip")) {
            (Some(own), Some(ip)) if ip.contains('/') => {
                format!("{own}/{}", ip.split_once('/').map_or("24", |(_, p)| p))
            }
            (None, Some(ip)) if ip.contains('/') => ip,
            _ => format!(
                "{}/16",
                guest.own_address.unwrap_or_else(|| dhcp_address(vmid))
            ),
        };
        let (address, prefix) = inet.split_once('/').unwrap_or((inet.as_str(), "16"));
        out.push(json!({
            "name": name, "hwaddr": hwaddr, "hardware-address": hwaddr, "inet": inet,
            "ip-addresses": [{"ip-address": address, "ip-address-type": "inet", "prefix": prefix.parse::<u8>().unwrap_or(16)}],
        }));
    }
    data(Value::Array(out))
}

fn skiplock_check(ctx: &Ctx) -> Result<(), ApiError> {
    if ctx.flag("skiplock") && !ctx.is_root() {
        return Err(ApiError::param(
            "skiplock",
            "Only root may use this option.",
        ));
    }
    Ok(())
}

/// `POST …/status/start` (task `vzstart`).
pub(crate) fn start(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    skiplock_check(ctx)?;
    if ctx
        .shared
        .state
        .lock()
        .guests
        .get(&vmid)
        .is_some_and(Guest::running)
    {
        return Err(ApiError::internal(&format!("CT {vmid} already running")));
    }
    let upid = spawn_start(
        &ctx.shared,
        &ctx.authid,
        vmid,
        ctx.flag("skiplock"),
        ctx.flag("debug"),
    );
    data(json!(upid))
}

/// Starts the `vzstart` task (also what `start=1` of a restore or rollback runs when the start
/// fails); returns its UPID. Pending values are applied first, as PVE's `vm_start` does; a CT
/// whose `/sbin/init` cannot be exec'd does not start.
pub(crate) fn spawn_start(
    shared: &Arc<Shared>,
    authid: &str,
    vmid: u32,
    skiplock: bool,
    debug: bool,
) -> String {
    let task_shared = shared.clone();
    tasks::spawn(
        shared,
        authid,
        "vzstart",
        &vmid.to_string(),
        format!("startup for container '{vmid}' failed"),
        move |t| async move {
            let shared = task_shared;
            let _flock = shared.flock(vmid, FLOCK_WAIT).await?;
            {
                let st = shared.state.lock();
                let guest = st.guests.get(&vmid).ok_or_else(|| {
                    format!(
                        "Configuration file 'nodes/{}/lxc/{vmid}.conf' does not exist",
                        shared.node()
                    )
                })?;
                if !skiplock {
                    guest.check_lock(&["mounted"])?;
                }
                if guest.conf.get("template").is_some_and(|v| v == "1") {
                    return Err("you can't start a CT if it's a template".to_owned());
                }
                if guest.running() {
                    return Err(format!("CT {vmid} already running"));
                }
            }
            t.work(shared.config.durations.vzstart).await?;
            t.checkpoint()?;
            let mut st = shared.state.lock();
            let guest = st
                .guests
                .get_mut(&vmid)
                .ok_or_else(|| format!("CT {vmid} does not exist"))?;
            guest.apply_pending();
            if !guest.files.executable(INIT) {
                for line in init_failure_log(vmid, debug) {
                    t.log(line);
                }
                return Err(format!("startup for container '{vmid}' failed"));
            }
            guest.running_since = Some(Instant::now());
            Ok(())
        },
    )
}

/// What `vm_start` prints from `/run/pve/ct-<vmid>.stderr` when the CT's init cannot be
/// exec'd (lxc-pve 6.0: the child fails `execvp`, the parent's sync fails), each line with its
/// `lxc-start: <vmid>: <file>: ` prefix cut off as PVE cuts it. The child's own error goes to
/// the container's console, so only with `debug` (lxc-start's log at DEBUG on the same file)
/// does the log name `/sbin/init`.
fn init_failure_log(vmid: u32, debug: bool) -> Vec<String> {
    let sync = "sync_wait: 34 An error occurred in another process (expected sequence number 7)";
    let spawn = format!("__lxc_start: 2119 Failed to spawn container \"{vmid}\"");
    if !debug {
        return vec![sync.to_owned(), spawn];
    }
    vec![
        format!("NOTICE   start - ../src/lxc/start.c:start:2206 - Exec'ing \"{INIT}\""),
        format!(
            "ERROR    start - ../src/lxc/start.c:start:2209 - No such file or directory - \
             Failed to exec \"{INIT}\""
        ),
        "ERROR    sync - ../src/lxc/sync.c:sync_wait:34 - An error occurred in another process \
         (expected sequence number 7)"
            .to_owned(),
        sync.to_owned(),
        format!(
            "ERROR    start - ../src/lxc/start.c:__lxc_start:2119 - Failed to spawn container \
             \"{vmid}\""
        ),
        spawn,
    ]
}

fn require_running(ctx: &Ctx, vmid: u32) -> Result<(), ApiError> {
    let st = ctx.shared.state.lock();
    let guest = st
        .guests
        .get(&vmid)
        .ok_or_else(|| missing_config(ctx.node(), vmid))?;
    if guest.running() {
        Ok(())
    } else {
        Err(ApiError::internal(&format!("CT {vmid} not running")))
    }
}

/// `POST …/status/stop` (task `vzstop`).
pub(crate) fn stop(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    skiplock_check(ctx)?;
    require_running(ctx, vmid)?;
    let skiplock = ctx.flag("skiplock");
    let shared = ctx.shared.clone();
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "vzstop",
        &vmid.to_string(),
        format!("command 'lxc-stop -n {vmid} --kill' failed: exit code 1"),
        move |t| async move {
            let _flock = shared.flock(vmid, FLOCK_WAIT).await?;
            if !skiplock {
                let st = shared.state.lock();
                if let Some(g) = st.guests.get(&vmid) {
                    g.check_lock(&[])?;
                }
            }
            t.work(shared.config.durations.vzstop).await?;
            t.checkpoint()?;
            if let Some(g) = shared.state.lock().guests.get_mut(&vmid) {
                g.running_since = None;
            }
            Ok(())
        },
    );
    data(json!(upid))
}

/// `POST …/status/shutdown` (task `vzshutdown`).
pub(crate) fn shutdown(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    require_running(ctx, vmid)?;
    let force = ctx.flag("forceStop");
    let shared = ctx.shared.clone();
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "vzshutdown",
        &vmid.to_string(),
        "container did not stop".to_owned(),
        move |t| async move {
            let _flock = shared.flock(vmid, FLOCK_WAIT).await?;
            {
                let st = shared.state.lock();
                if let Some(g) = st.guests.get(&vmid) {
                    g.check_lock(&[])?;
                }
            }
            t.work(shared.config.durations.vzshutdown).await?;
            if t.injected().is_some() && force {
                t.log("shutdown timeout, forcing stop");
            } else {
                t.checkpoint()?;
            }
            if let Some(g) = shared.state.lock().guests.get_mut(&vmid) {
                g.running_since = None;
            }
            Ok(())
        },
    );
    data(json!(upid))
}

/// `DELETE /nodes/{node}/lxc/{vmid}` (task `vzdestroy`).
pub(crate) async fn destroy(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let force = ctx.flag("force");
    let purge = ctx.flag("purge");
    let destroy_unreferenced = ctx.flag("destroy-unreferenced-disks");
    {
        let st = ctx.shared.state.lock();
        let guest = st
            .guests
            .get(&vmid)
            .ok_or_else(|| missing_config(ctx.node(), vmid))?;
        if guest.conf.get("protection").is_some_and(|p| p == "1") {
            return Err(ApiError::internal(&format!(
                "can't remove CT {vmid} - protection mode enabled"
            )));
        }
        guest.check_lock(&[]).map_err(|m| ApiError::internal(&m))?;
        if guest.running() && !force {
            return Err(ApiError::internal(&format!(
                "unable to destroy CT {vmid} - container is running"
            )));
        }
    }
    let shared = ctx.shared.clone();
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "vzdestroy",
        &vmid.to_string(),
        format!("error with cfs lock 'storage-local-lvm': unable to remove volume of CT {vmid}"),
        move |t| async move {
            let _flock = shared.flock(vmid, FLOCK_WAIT).await?;
            {
                let mut st = shared.state.lock();
                let guest = st
                    .guests
                    .get_mut(&vmid)
                    .ok_or_else(|| format!("CT {vmid} does not exist"))?;
                guest.check_lock(&[])?;
                if guest.running_since.take().is_some() {
                    t.log(format!("stopping CT {vmid} before destroy"));
                }
                guest.conf.insert("lock".to_owned(), "destroyed".to_owned());
            }
            t.work(shared.config.durations.vzdestroy).await?;
            if let Err(e) = t.checkpoint() {
                if let Some(g) = shared.state.lock().guests.get_mut(&vmid) {
                    g.conf.remove("lock");
                }
                return Err(e);
            }
            let mut st = shared.state.lock();
            let Some(guest) = st.guests.remove(&vmid) else {
                return Err(format!("CT {vmid} does not exist"));
            };
            let mut volumes = guest.volumes();
            if destroy_unreferenced {
                for storage in st.storages.values() {
                    for v in &storage.volumes {
                        if v.vmid == Some(vmid) && v.content != "backup" {
                            volumes.insert(v.volid.clone());
                        }
                    }
                }
            }
            for volid in volumes {
                if st.remove_volume(&volid).is_some() {
                    let name = volid.split_once(':').map_or(volid.as_str(), |(_, n)| n);
                    t.log(format!("  Logical volume \"{name}\" successfully removed."));
                }
            }
            if purge {
                t.log(format!("purging CT {vmid} from related configurations.."));
            }
            Ok(())
        },
    );
    data(json!(upid))
}
