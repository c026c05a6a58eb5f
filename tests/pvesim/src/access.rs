//! Node-level read calls: version, nodes, next free vmid, effective permissions.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::api::{ApiError, Ctx, HandlerResult, data};

/// The build the simulator answers as (its version comes from the configuration).
pub(crate) const PVE_REPOID: &str = "3a7d2f0c1b9e4d58";

/// `GET /version`.
pub(crate) fn version(ctx: &Ctx) -> HandlerResult {
    let (version, release) = ctx.shared.config.pve_version.version_release();
    data(json!({
        "version": version,
        "release": release,
        "repoid": PVE_REPOID,
    }))
}

/// Memory used, root filesystem used and its size (the `local` storage lives on it): the
/// running guests' memory and the `local` storage's volumes on top of a base for the host
/// itself, unless a test fixed them ([`crate::node_load`]).
pub(crate) fn node_usage(ctx: &Ctx) -> (u64, u64, u64) {
    let load = *ctx.shared.node_load.lock();
    let st = ctx.shared.state.lock();
    let mem: u64 = st
        .guests
        .values()
        .filter(|g| g.running())
        .map(|g| {
            g.conf
                .get("memory")
                .and_then(|m| m.parse::<u64>().ok())
                .unwrap_or(512)
                << 20
        })
        .sum();
    let (disk, total) = st
        .storages
        .get("local")
        .map_or((0, NODE_MAXDISK), |s| (s.used(), s.total));
    (
        load.memory_used.unwrap_or(mem + (2 << 30)),
        load.rootfs_used.unwrap_or(disk + (6 << 30)).min(total),
        total,
    )
}

/// The size of the node's root filesystem in bytes.
pub(crate) fn rootfs_total(shared: &crate::state::Shared) -> u64 {
    shared
        .state
        .lock()
        .storages
        .get("local")
        .map_or(NODE_MAXDISK, |s| s.total)
}

/// CPU usage: a quiet node unless a test fixed it.
pub(crate) fn node_cpu(ctx: &Ctx) -> f64 {
    ctx.shared.node_load.lock().cpu.unwrap_or(0.03)
}

pub(crate) const NODE_MAXMEM: u64 = crate::node_load::NODE_MAXMEM;
const NODE_MAXDISK: u64 = 107_374_182_400;

/// `GET /nodes`.
pub(crate) fn nodes(ctx: &Ctx) -> HandlerResult {
    let node = ctx.node();
    let (mem, disk, rootfs) = node_usage(ctx);
    data(json!([{
        "node": node,
        "id": format!("node/{node}"),
        "type": "node",
        "status": "online",
        "level": "",
        "cpu": node_cpu(ctx),
        "maxcpu": 16,
        "mem": mem,
        "maxmem": NODE_MAXMEM,
        "disk": disk,
        "maxdisk": rootfs,
        "uptime": 86_400,
        "ssl_fingerprint": ctx.shared.fingerprint,
    }]))
}

/// `GET /nodes/{node}/status` (Sys.Audit on `/nodes/{node}`).
pub(crate) fn node_status(ctx: &Ctx) -> HandlerResult {
    let (mem, disk, rootfs) = node_usage(ctx);
    let loadavg = ctx.shared.node_load.lock().loadavg.map_or_else(
        || vec!["0.12".to_owned(), "0.09".to_owned(), "0.05".to_owned()],
        |l| l.iter().map(|v| format!("{v:.2}")).collect(),
    );
    let (version, release) = ctx.shared.config.pve_version.version_release();
    let kernel = if release.starts_with('9') {
        "6.17.2-1-pve"
    } else {
        "6.8.12-4-pve"
    };
    let free = NODE_MAXMEM.saturating_sub(mem);
    let mut memory = json!({ "total": NODE_MAXMEM, "used": mem, "free": free });
    if release.starts_with('9') {
        // PVE 9 reports what the kernel calls MemAvailable too (required in its schema).
        memory["available"] = json!(free);
    }
    data(json!({
        "uptime": 86_400,
        "cpu": node_cpu(ctx),
        "wait": 0.0,
        "idle": 0,
        "loadavg": loadavg,
        "cpuinfo": {
            "model": "Simulated CPU",
            "cpus": 16,
            "cores": 8,
            "sockets": 1,
            "mhz": "3200.000",
            "hvm": "1",
            "user_hz": 100,
            "flags": "fpu vme de pse tsc msr pae mce cx8 apic sep",
        },
        "memory": memory,
        "swap": { "total": 0, "used": 0, "free": 0 },
        "rootfs": {
            "total": rootfs,
            "used": disk,
            "free": rootfs.saturating_sub(disk),
            "avail": rootfs.saturating_sub(disk),
        },
        "ksm": { "shared": 0 },
        "kversion": format!("Linux {kernel} #1 SMP PREEMPT_DYNAMIC PMX {kernel}"),
        "current-kernel": {
            "sysname": "Linux",
            "release": kernel,
            "version": "#1 SMP PREEMPT_DYNAMIC PMX",
            "machine": "x86_64",
        },
        "pveversion": format!("pve-manager/{version}/{PVE_REPOID}"),
        "boot-info": { "mode": "efi", "secureboot": 0 },
    }))
}

/// `GET /cluster/nextid`: the first id from 100 free on every node of the cluster, as a string.
pub(crate) fn nextid(ctx: &Ctx) -> HandlerResult {
    let st = ctx.shared.state.lock();
    if let Some(vmid) = ctx.get("vmid") {
        let id: u32 = vmid
            .parse()
            .map_err(|_| ApiError::param("vmid", "value does not look like a valid VM ID"))?;
        if st.vmid_taken(id) {
            return Err(ApiError::param("vmid", &format!("VM {id} already exists")));
        }
        return data(json!(id.to_string()));
    }
    let free = (100..1_000_000u32)
        .find(|id| !st.vmid_taken(*id))
        .ok_or_else(|| ApiError::internal("unable to get any free VMID in range [100, 999999]"))?;
    data(json!(free.to_string()))
}

/// `GET /access/permissions[?path=…][&userid=…]`.
pub(crate) fn permissions(ctx: &Ctx) -> HandlerResult {
    let target = ctx.get("userid").unwrap_or(&ctx.authid).to_owned();
    let own_token = target
        .strip_prefix(ctx.authid.as_str())
        .is_some_and(|rest| rest.starts_with('!'));
    if target != ctx.authid && !own_token {
        ctx.require("/access", "Sys.Audit")?;
    }
    let st = ctx.shared.state.lock();
    let paths: Vec<String> = match ctx.get("path") {
        Some(p) => vec![p.to_owned()],
        None => {
            // PVE's default top-level paths plus every path with an ACL entry.
            let mut paths = st.access.acl_paths();
            for p in [
                "/",
                "/access",
                "/access/groups",
                "/nodes",
                "/pool",
                "/sdn",
                "/storage",
                "/vms",
            ] {
                paths.insert(p.to_owned());
            }
            // Paths pools reference: their member VMs (`get_effective_permissions`).
            for vmid in st.vms.keys() {
                if st.access.pool_of(*vmid).is_some() {
                    paths.insert(format!("/vms/{vmid}"));
                }
            }
            paths.into_iter().collect()
        }
    };
    let mut out = BTreeMap::new();
    for path in paths {
        let privs = st.access.privileges(&target, &path);
        if ctx.get("path").is_some() || !privs.is_empty() {
            let map: BTreeMap<String, Value> = privs
                .into_iter()
                .map(|(p, prop)| (p, json!(u8::from(prop))))
                .collect();
            out.insert(path, map);
        }
    }
    data(json!(out))
}
