//! QEMU guests: the VM model, listing, config, status, power tasks, destroy, snapshots and
//! cloud-init, with qemu-server's checks, locks and texts. A VM is created only by restoring
//! a vzdump-qemu archive (`archive=`), as Bosun provisions; the guest agent is
//! `crate::qemu_agent`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use sha1::{Digest, Sha1};

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::files::FileTree;
use crate::state::{Conf, FLOCK_WAIT, FLOCK_WAIT_CREATE, Shared, render_section};
use crate::tasks;

pub(crate) use crate::qemu_restore::create;
pub(crate) use crate::qemu_snapshot::{
    cloudinit_get, cloudinit_put, snapshot_create, snapshot_delete, snapshot_list,
    snapshot_rollback,
};

/// Where a VM image keeps the QEMU guest agent; it answers only while this is in the guest
/// (and the VM has `agent: 1` and runs).
pub(crate) const QGA_BIN: &str = "/usr/sbin/qemu-ga";

/// The config keys cloud-init builds its drive from.
pub(crate) const CLOUDINIT_KEYS: &[&str] = &[
    "cicustom",
    "cipassword",
    "citype",
    "ciupgrade",
    "ciuser",
    "nameserver",
    "searchdomain",
    "sshkeys",
];

/// One snapshot section of a VM config.
#[derive(Debug, Clone)]
pub(crate) struct VmSnapshot {
    pub(crate) conf: Conf,
    pub(crate) snaptime: i64,
    pub(crate) description: String,
    pub(crate) files: FileTree,
}

/// A process the guest agent started (`guest-exec`).
#[derive(Debug, Clone)]
pub(crate) struct Process {
    pub(crate) exit: i32,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    /// When it ends (a `sleep` runs for its time; everything else ends at once).
    pub(crate) ends_at: Instant,
}

/// One QEMU guest.
#[derive(Debug, Clone)]
pub(crate) struct Vm {
    pub(crate) conf: Conf,
    pub(crate) snapshots: BTreeMap<String, VmSnapshot>,
    pub(crate) running_since: Option<Instant>,
    /// The guest's root filesystem, as its guest agent sees it.
    pub(crate) files: FileTree,
    /// A test stopped the agent's service inside the guest (`SimHandle::set_vm_agent`).
    pub(crate) agent_stopped: bool,
    /// The guest's filesystems are frozen (`guest-fsfreeze-freeze`).
    pub(crate) frozen: bool,
    /// The freezes vzdump issued through the agent, each with its thaw (oldest first).
    pub(crate) backup_freezes: Vec<crate::vzdump_qemu::BackupFreeze>,
    /// Processes the agent started and still remembers, by guest pid.
    pub(crate) processes: BTreeMap<u64, Process>,
    pub(crate) next_pid: u64,
    /// The cloud-init values the VM's drive was last generated with (at start, or by
    /// `PUT …/cloudinit`).
    pub(crate) cloudinit_drive: Conf,
    /// Its firewall options (`/etc/pve/firewall/<vmid>.fw`): empty on a fresh restore.
    pub(crate) firewall: Conf,
}

impl Vm {
    pub(crate) fn new(conf: Conf) -> Self {
        Self {
            conf,
            snapshots: BTreeMap::new(),
            running_since: None,
            files: FileTree::default(),
            agent_stopped: false,
            frozen: false,
            backup_freezes: Vec::new(),
            processes: BTreeMap::new(),
            next_pid: 1000,
            cloudinit_drive: Conf::new(),
            firewall: Conf::new(),
        }
    }

    pub(crate) fn running(&self) -> bool {
        self.running_since.is_some()
    }

    /// Whether the config names a guest agent device (`agent: 1` or `enabled=1,…`).
    pub(crate) fn agent_configured(&self) -> bool {
        self.conf.get("agent").is_some_and(|a| {
            a.split(',').any(|part| {
                matches!(
                    part.split_once('=')
                        .map_or(("enabled", part), |(k, v)| (k, v)),
                    ("enabled", "1" | "on" | "yes" | "true")
                )
            })
        })
    }

    /// Whether the guest agent answers: the VM runs with the device, and the agent runs in it.
    pub(crate) fn agent_answers(&self) -> bool {
        self.running()
            && self.agent_configured()
            && !self.agent_stopped
            && self.files.executable(QGA_BIN)
    }

    /// `VM is locked (<lock>)` unless unlocked.
    pub(crate) fn check_lock(&self) -> Result<(), String> {
        match self.conf.get("lock") {
            Some(l) => Err(format!("VM is locked ({l})")),
            None => Ok(()),
        }
    }

    /// The cloud-init values in the config (what the next drive is built from).
    pub(crate) fn cloudinit_values(&self) -> Conf {
        self.conf
            .iter()
            .filter(|(k, _)| is_cloudinit_key(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The config file text as qemu-server writes it.
    pub(crate) fn render(&self) -> String {
        let mut out = render_section(&self.conf);
        for (name, snap) in &self.snapshots {
            out.push_str(&format!("\n[{name}]\n"));
            let mut conf = snap.conf.clone();
            conf.insert("snaptime".to_owned(), snap.snaptime.to_string());
            if !snap.description.is_empty() {
                conf.insert("description".to_owned(), snap.description.clone());
            }
            out.push_str(&render_section(&conf));
        }
        out
    }

    pub(crate) fn digest(&self) -> String {
        hex::encode(Sha1::digest(self.render().as_bytes()))
    }

    /// The disk volumes the config references (`scsiN`, `virtioN`, `sataN`, `ideN`, `efidisk0`,
    /// `tpmstate0`, `unusedN`).
    pub(crate) fn volumes(&self) -> Vec<String> {
        self.conf
            .iter()
            .filter(|(k, _)| is_disk_key(k) || k.starts_with("unused"))
            .filter_map(|(_, v)| crate::state::volume_of(v))
            .filter(|v| v.contains(':'))
            .collect()
    }
}

pub(crate) fn is_cloudinit_key(key: &str) -> bool {
    CLOUDINIT_KEYS.contains(&key)
        || key
            .strip_prefix("ipconfig")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

pub(crate) fn is_disk_key(key: &str) -> bool {
    ["scsi", "virtio", "sata", "ide"].iter().any(|p| {
        key.strip_prefix(p)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }) || key == "efidisk0"
        || key == "tpmstate0"
}

/// qemu-server's text for a VM whose config does not exist.
pub(crate) fn missing_config(node: &str, vmid: u32) -> String {
    format!("Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist")
}

fn memory_bytes(vm: &Vm) -> u64 {
    let mib = vm
        .conf
        .get("memory")
        .and_then(|m| {
            m.split(',')
                .find_map(|p| match p.split_once('=') {
                    Some(("current", v)) => Some(v),
                    Some(_) => None,
                    None => Some(p),
                })
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(512);
    mib << 20
}

fn disk_bytes(vm: &Vm) -> u64 {
    let Some(boot) = vm
        .conf
        .iter()
        .find(|(k, v)| is_disk_key(k) && !v.contains("media=cdrom"))
    else {
        return 0;
    };
    boot.1
        .split(',')
        .find_map(|p| p.strip_prefix("size="))
        .and_then(crate::schema::parse_size)
        .unwrap_or(0)
}

/// One VM as `GET /nodes/{node}/qemu` and `…/status/current` give it.
pub(crate) fn summary(vmid: u32, vm: &Vm) -> Value {
    let running = vm.running();
    let mut v = json!({
        "vmid": vmid,
        "status": if running { "running" } else { "stopped" },
        "name": vm.conf.get("name").cloned().unwrap_or_else(|| format!("VM {vmid}")),
        "maxmem": memory_bytes(vm),
        "mem": if running { memory_bytes(vm) / 4 } else { 0 },
        "maxdisk": disk_bytes(vm),
        "disk": 0,
        "cpus": vm.conf.get("cores").and_then(|c| c.parse::<u64>().ok()).unwrap_or(1),
        "cpu": 0,
        "uptime": vm.running_since.map_or(0, |t| t.elapsed().as_secs()),
        "netin": 0,
        "netout": 0,
        "diskread": 0,
        "diskwrite": 0,
    });
    if running {
        v["pid"] = json!(40_000 + vmid);
    }
    if let Some(lock) = vm.conf.get("lock") {
        v["lock"] = json!(lock);
    }
    if let Some(tags) = vm.conf.get("tags") {
        v["tags"] = json!(tags);
    }
    if vm.conf.get("template").is_some_and(|t| t == "1") {
        v["template"] = json!(1);
    }
    v
}

/// `GET /nodes/{node}/qemu`: only VMs the caller may audit.
pub(crate) fn list(ctx: &Ctx) -> HandlerResult {
    let st = ctx.shared.state.lock();
    let items: Vec<Value> = st
        .vms
        .iter()
        .filter(|(vmid, _)| {
            st.access
                .has(&ctx.authid, &format!("/vms/{vmid}"), "VM.Audit")
        })
        .map(|(vmid, vm)| summary(*vmid, vm))
        .collect();
    data(Value::Array(items))
}

/// `GET …/qemu/{vmid}/status/current`.
pub(crate) fn status(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let st = ctx.shared.state.lock();
    let vm = st
        .vms
        .get(&vmid)
        .ok_or_else(|| ApiError::internal(&missing_config(ctx.node(), vmid)))?;
    let mut v = summary(vmid, vm);
    v["qmpstatus"] = json!(if vm.running() { "running" } else { "stopped" });
    v["agent"] = json!(u8::from(vm.agent_configured()));
    data(v)
}

/// Integer options `GET …/config` gives as numbers (everything else stays a string).
const NUMERIC_KEYS: &[&str] = &[
    "cores",
    "cpuunits",
    "sockets",
    "onboot",
    "template",
    "numa",
    "protection",
];

/// `GET …/qemu/{vmid}/config` (`current` is accepted; the simulator keeps no pending section).
pub(crate) fn config_get(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let st = ctx.shared.state.lock();
    let vm = st
        .vms
        .get(&vmid)
        .ok_or_else(|| ApiError::internal(&missing_config(ctx.node(), vmid)))?;
    let mut out = serde_json::Map::new();
    for (k, v) in &vm.conf {
        let value = match v.parse::<i64>() {
            Ok(n) if NUMERIC_KEYS.contains(&k.as_str()) => json!(n),
            _ => json!(v),
        };
        out.insert(k.clone(), value);
    }
    out.insert("digest".into(), json!(vm.digest()));
    data(Value::Object(out))
}

/// The privilege a config key needs (qemu-server's `check_vm_modify_config_perm`).
pub(crate) fn key_privilege(key: &str) -> &'static str {
    match key {
        "cores" | "sockets" | "cpu" | "cpulimit" | "cpuunits" | "vcpus" => "VM.Config.CPU",
        "memory" | "balloon" | "shares" => "VM.Config.Memory",
        k if k.starts_with("net") => "VM.Config.Network",
        k if is_cloudinit_key(k) => "VM.Config.Cloudinit",
        // qemu-server's `$hwtypeoptions`.
        "smbios1" | "vmgenid" | "acpi" | "kvm" | "tablet" => "VM.Config.HWType",
        k if is_disk_key(k) => "VM.Config.Disk",
        _ => "VM.Config.Options",
    }
}

/// Checks the caller may set `keys` on VM `vmid` (in `pool`, when one is named): the
/// privilege on `/pool/<pool>` or `/vms/<vmid>`, and `SDN.Use` on a NIC's bridge.
pub(crate) fn check_config_keys(
    ctx: &Ctx,
    vmid: u32,
    pool: Option<&str>,
    values: &BTreeMap<String, String>,
) -> Result<(), ApiError> {
    let vm_path = format!("/vms/{vmid}");
    for key in values.keys() {
        let privilege = key_privilege(key);
        let on_pool = pool.is_some_and(|p| ctx.has(&format!("/pool/{p}"), privilege));
        if !on_pool {
            ctx.require(&vm_path, privilege)?;
        }
        if key.starts_with("net")
            && let Some(bridge) = values[key]
                .split(',')
                .find_map(|p| p.strip_prefix("bridge="))
        {
            ctx.require(&format!("/sdn/zones/localnetwork/{bridge}"), "SDN.Use")?;
        }
    }
    Ok(())
}

/// The config keys a request sets (everything but the route's own parameters).
pub(crate) fn config_values(ctx: &Ctx, own: &[&str]) -> BTreeMap<String, String> {
    ctx.params
        .iter()
        .filter(|(k, _)| !own.contains(&k.as_str()))
        .map(|(k, v)| {
            let v = if is_net_key(k) {
                with_mac(v, || ctx.shared.random_mac())
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect()
}

/// Whether `key` is a network device (`net0`…`net31`).
fn is_net_key(key: &str) -> bool {
    key.strip_prefix("net")
        .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
}

/// A `netN` value with a MAC address: qemu-server's `parse_net` gives a device named without
/// one (`virtio,bridge=…`, or `model=virtio` without `macaddr=`) a random one, on create,
/// restore and config change alike.
fn with_mac(value: &str, mac: impl FnOnce() -> String) -> String {
    let mut parts: Vec<String> = value.split(',').map(str::to_owned).collect();
    let has_mac = parts
        .iter()
        .any(|p| p.starts_with("macaddr=") || is_model_with_mac(p));
    if has_mac || parts.is_empty() {
        return value.to_owned();
    }
    if parts[0].starts_with("model=") {
        parts.push(format!("macaddr={}", mac()));
    } else if !parts[0].contains('=') {
        parts[0] = format!("{}={}", parts[0], mac());
    }
    parts.join(",")
}

/// Whether `part` is `<model>=<MAC>` (the short form qemu-server prints).
fn is_model_with_mac(part: &str) -> bool {
    const MODELS: &[&str] = &["virtio", "e1000", "e1000e", "rtl8139", "vmxnet3"];
    part.split_once('=')
        .is_some_and(|(model, mac)| MODELS.contains(&model) && mac.len() == 17)
}

/// `PUT …/qemu/{vmid}/config` (synchronous).
pub(crate) async fn config_put(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let values = config_values(ctx, &["node", "vmid", "delete", "digest"]);
    let deletes: Vec<String> = ctx
        .get("delete")
        .map(|d| {
            d.split([',', ';', ' '])
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if values.is_empty() && deletes.is_empty() {
        return Err(ApiError::internal("no options specified"));
    }
    let mut all = values.clone();
    for key in &deletes {
        all.insert(key.clone(), String::new());
    }
    check_config_keys(ctx, vmid, None, &all)?;
    crate::qemu_disks::check_allocations(ctx, &values)?;
    let mut values = values;
    let _flock = ctx
        .shared
        .flock_qemu(vmid, FLOCK_WAIT)
        .await
        .map_err(|m| ApiError::internal(&m))?;
    let now = ctx.shared.clock.epoch();
    let mut st = ctx.shared.state.lock();
    {
        let vm = st
            .vms
            .get(&vmid)
            .ok_or_else(|| ApiError::internal(&missing_config(ctx.node(), vmid)))?;
        if let Some(digest) = ctx.get("digest")
            && digest != vm.digest()
        {
            return Err(ApiError::internal(
                "detected modified configuration - file changed by other user? Try again.",
            ));
        }
        vm.check_lock().map_err(|m| ApiError::internal(&m))?;
    }
    crate::qemu_disks::allocate(&mut st, vmid, &mut values, now)
        .map_err(|m| ApiError::internal(&m))?;
    let vm = st
        .vms
        .get_mut(&vmid)
        .ok_or_else(|| ApiError::internal(&missing_config(ctx.node(), vmid)))?;
    for key in deletes {
        vm.conf.remove(&key);
    }
    vm.conf.extend(values);
    data(Value::Null)
}

pub(crate) fn vm_exists(ctx: &Ctx, vmid: u32) -> Result<(), ApiError> {
    if ctx.shared.state.lock().vms.contains_key(&vmid) {
        Ok(())
    } else {
        Err(ApiError::internal(&missing_config(ctx.node(), vmid)))
    }
}

fn running(ctx: &Ctx, vmid: u32) -> bool {
    ctx.shared
        .state
        .lock()
        .vms
        .get(&vmid)
        .is_some_and(Vm::running)
}

/// `POST …/status/start` (task `qmstart`).
pub(crate) fn start(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    if ctx.get("skiplock").is_some() && !ctx.is_root() {
        return Err(ApiError::param(
            "skiplock",
            "Only root may use this option.",
        ));
    }
    vm_exists(ctx, vmid)?;
    if running(ctx, vmid) {
        return Err(ApiError::internal(&format!("VM {vmid} already running")));
    }
    data(json!(spawn_start(&ctx.shared, &ctx.authid, vmid)))
}

/// Starts the `qmstart` task: regenerates the cloud-init drive from the config, boots, and
/// the guest agent comes up when the image has it.
pub(crate) fn spawn_start(shared: &Arc<Shared>, authid: &str, vmid: u32) -> String {
    let task_shared = shared.clone();
    tasks::spawn(
        shared,
        authid,
        "qmstart",
        &vmid.to_string(),
        format!("start failed: QEMU exited with code 1 (VM {vmid})"),
        move |t| async move {
            let shared = task_shared;
            let _flock = shared.flock_qemu(vmid, FLOCK_WAIT).await?;
            {
                let st = shared.state.lock();
                let vm = st
                    .vms
                    .get(&vmid)
                    .ok_or_else(|| missing_config(shared.node(), vmid))?;
                vm.check_lock()?;
                if vm.conf.get("template").is_some_and(|v| v == "1") {
                    return Err("you can't start a vm if it's a template".to_owned());
                }
                if vm.running() {
                    return Err(format!("VM {vmid} already running"));
                }
            }
            t.work(shared.config.durations.vzstart).await?;
            t.checkpoint()?;
            let mut st = shared.state.lock();
            let vm = st
                .vms
                .get_mut(&vmid)
                .ok_or_else(|| missing_config(shared.node(), vmid))?;
            if vm.conf.keys().any(|k| is_disk_key(k))
                && vm.conf.values().any(|v| v.contains("cloudinit"))
            {
                t.log("generating cloud-init ISO");
                vm.cloudinit_drive = vm.cloudinit_values();
            }
            vm.running_since = Some(Instant::now());
            vm.frozen = false;
            vm.processes.clear();
            Ok(())
        },
    )
}

/// `POST …/status/stop` (task `qmstop`): a VM that is not running stops at once.
pub(crate) fn stop(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    if ctx.get("skiplock").is_some() && !ctx.is_root() {
        return Err(ApiError::param(
            "skiplock",
            "Only root may use this option.",
        ));
    }
    vm_exists(ctx, vmid)?;
    let shared = ctx.shared.clone();
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "qmstop",
        &vmid.to_string(),
        format!("VM {vmid} qmp command 'quit' failed - got timeout"),
        move |t| async move {
            let _flock = shared.flock_qemu(vmid, FLOCK_WAIT).await?;
            if let Some(vm) = shared.state.lock().vms.get(&vmid) {
                vm.check_lock()?;
            }
            t.work(shared.config.durations.vzstop).await?;
            t.checkpoint()?;
            power_off(&shared, vmid);
            Ok(())
        },
    );
    data(json!(upid))
}

fn power_off(shared: &Shared, vmid: u32) {
    if let Some(vm) = shared.state.lock().vms.get_mut(&vmid) {
        vm.running_since = None;
        vm.frozen = false;
        vm.processes.clear();
    }
}

/// `POST …/status/shutdown` (task `qmshutdown`).
pub(crate) fn shutdown(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    vm_exists(ctx, vmid)?;
    if !running(ctx, vmid) {
        return Err(ApiError::internal(&format!("VM {vmid} not running")));
    }
    let force = ctx.flag("forceStop");
    let shared = ctx.shared.clone();
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "qmshutdown",
        &vmid.to_string(),
        "VM quit/powerdown failed - got timeout".to_owned(),
        move |t| async move {
            let _flock = shared.flock_qemu(vmid, FLOCK_WAIT).await?;
            if let Some(vm) = shared.state.lock().vms.get(&vmid) {
                vm.check_lock()?;
            }
            t.work(shared.config.durations.vzshutdown).await?;
            if t.injected().is_some() && force {
                t.log("VM still running - terminating now with SIGTERM");
            } else {
                t.checkpoint()?;
            }
            power_off(&shared, vmid);
            Ok(())
        },
    );
    data(json!(upid))
}

/// `DELETE /nodes/{node}/qemu/{vmid}` (task `qmdestroy`): the VM leaves its pool.
pub(crate) fn destroy(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    {
        let st = ctx.shared.state.lock();
        let vm = st
            .vms
            .get(&vmid)
            .ok_or_else(|| ApiError::internal(&missing_config(ctx.node(), vmid)))?;
        if vm.running() {
            return Err(ApiError::internal(&format!(
                "VM {vmid} is running - destroy failed"
            )));
        }
        vm.check_lock().map_err(|m| ApiError::internal(&m))?;
    }
    let shared = ctx.shared.clone();
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "qmdestroy",
        &vmid.to_string(),
        format!("can't remove VM {vmid} - volume deletion failed"),
        move |t| async move {
            let _flock = shared.flock_qemu(vmid, FLOCK_WAIT).await?;
            t.work(shared.config.durations.vzdestroy).await?;
            t.checkpoint()?;
            let mut st = shared.state.lock();
            let vm = st
                .vms
                .remove(&vmid)
                .ok_or_else(|| missing_config(shared.node(), vmid))?;
            for volid in vm.volumes() {
                st.remove_volume(&volid);
                t.log(format!(
                    "  Logical volume \"{volid}\" successfully removed."
                ));
            }
            st.access.remove_vm_from_pools(vmid);
            Ok(())
        },
    );
    data(json!(upid))
}

/// The wait for a VM's config lock at creation (qemu-server's `create_and_lock_config`).
pub(crate) const CREATE_WAIT: std::time::Duration = FLOCK_WAIT_CREATE;
