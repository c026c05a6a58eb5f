//! Node-level read calls: version, nodes, next free vmid, effective permissions.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::api::{ApiError, Ctx, HandlerResult, data};

/// The PVE release the simulator answers as.
pub(crate) const PVE_VERSION: &str = "9.1.9";
pub(crate) const PVE_RELEASE: &str = "9.1";
pub(crate) const PVE_REPOID: &str = "3a7d2f0c1b9e4d58";

/// `GET /version`.
pub(crate) fn version(_ctx: &Ctx) -> HandlerResult {
    data(json!({
        "version": PVE_VERSION,
        "release": PVE_RELEASE,
        "repoid": PVE_REPOID,
    }))
}

/// `GET /nodes`.
pub(crate) fn nodes(ctx: &Ctx) -> HandlerResult {
    let node = ctx.node();
    let (mem, disk) = {
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
        let disk: u64 = st
            .storages
            .get("local")
            .map(crate::state::Storage::used)
            .unwrap_or(0);
        (mem + (2 << 30), disk + (6 << 30))
    };
    data(json!([{
        "node": node,
        "id": format!("node/{node}"),
        "type": "node",
        "status": "online",
        "level": "",
        "cpu": 0.03,
        "maxcpu": 16,
        "mem": mem,
        "maxmem": 68_719_476_736_u64,
        "disk": disk,
        "maxdisk": 107_374_182_400_u64,
        "uptime": 86_400,
        "ssl_fingerprint": ctx.shared.fingerprint,
    }]))
}

/// `GET /cluster/nextid`: the first free id from 100, as a string.
pub(crate) fn nextid(ctx: &Ctx) -> HandlerResult {
    let st = ctx.shared.state.lock();
    if let Some(vmid) = ctx.get("vmid") {
        let id: u32 = vmid
            .parse()
            .map_err(|_| ApiError::param("vmid", "value does not look like a valid VM ID"))?;
        if st.guests.contains_key(&id) {
            return Err(ApiError::param("vmid", &format!("VM {id} already exists")));
        }
        return data(json!(id.to_string()));
    }
    let free = (100..1_000_000u32)
        .find(|id| !st.guests.contains_key(id))
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
