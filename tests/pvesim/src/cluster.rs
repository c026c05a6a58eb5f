//! The cluster around the simulated node. Standalone by default; a test can make the node
//! one of a cluster ([`crate::SimHandle::join_cluster`]) and move a guest to another node of
//! it ([`crate::SimHandle::migrate_guest`]), as `pct migrate` would. The other nodes are not
//! served: only what the whole cluster shares is, as PVE's cluster filesystem shares it.
//!
//! - `GET /cluster/resources`: every guest, storage and node of the cluster, as PVE lists
//!   them for the caller — each entry only when the caller may audit it (`VM.Audit` on the
//!   guest, `Datastore.Audit` or `Datastore.AllocateSpace` on the storage, `Sys.Audit` on the
//!   node). `type` narrows the list to `vm`, `storage` or `node` (`sdn` lists nothing: the
//!   simulator has no SDN zones). A guest on another node is listed with that node.
//! - `GET /cluster/status` (`Sys.Audit` on `/`): on a standalone node, the node alone; on a
//!   cluster's node, the cluster (`nodes`, `quorate`) and each node (`local` for this one).
//! - A vmid another node holds is taken: `GET /cluster/nextid` skips it and a create with it
//!   fails with `CT <id> already exists on node '<node>'`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::access::{NODE_MAXMEM, node_cpu, node_usage};
use crate::api::{Ctx, HandlerResult, data};
use crate::state::Guest;

/// The cluster the node is part of.
#[derive(Debug, Clone)]
pub(crate) struct Cluster {
    /// Its name (`pvecm create NAME`).
    pub(crate) name: String,
    /// Its other nodes, all online.
    pub(crate) peers: Vec<String>,
    /// The guests the other nodes hold, by vmid.
    pub(crate) guests: BTreeMap<u32, PeerGuest>,
}

/// A guest another node of the cluster holds.
#[derive(Debug, Clone)]
pub(crate) struct PeerGuest {
    /// The node.
    pub(crate) node: String,
    /// The guest as it left this node.
    pub(crate) guest: Guest,
}

/// `GET /cluster/status`.
pub(crate) fn status(ctx: &Ctx) -> HandlerResult {
    let node = ctx.node().to_owned();
    let st = ctx.shared.state.lock();
    let local = json!({
        "id": format!("node/{node}"),
        "type": "node",
        "name": node,
        "nodeid": if st.cluster.is_some() { 1 } else { 0 },
        "ip": "127.0.0.1",
        "local": 1,
        "online": 1,
        "level": "",
    });
    let Some(cluster) = &st.cluster else {
        return data(json!([local]));
    };
    let mut items = vec![json!({
        "id": "cluster",
        "type": "cluster",
        "name": cluster.name,
        "nodes": cluster.peers.len() + 1,
        "quorate": 1,
        "version": cluster.peers.len() + 1,
    })];
    items.push(local);
    for (i, peer) in cluster.peers.iter().enumerate() {
        items.push(json!({
            "id": format!("node/{peer}"),
            "type": "node",
            "name": peer,
            "nodeid": i + 2,
            "ip": format!("127.0.0.{}", i + 2),
            "local": 0,
            "online": 1,
            "level": "",
        }));
    }
    data(Value::Array(items))
}

/// `GET /cluster/resources`.
pub(crate) fn resources(ctx: &Ctx) -> HandlerResult {
    let wanted = ctx.get("type");
    let want = |kind: &str| wanted.is_none_or(|w| w == kind);
    let node = ctx.node().to_owned();
    let mut items = Vec::new();
    if want("node") {
        let (mem, disk, rootfs) = node_usage(ctx);
        let st = ctx.shared.state.lock();
        if st
            .access
            .has(&ctx.authid, &format!("/nodes/{node}"), "Sys.Audit")
        {
            items.push(json!({
                "id": format!("node/{node}"),
                "type": "node",
                "node": node,
                "status": "online",
                "cpu": node_cpu(ctx),
                "maxcpu": 16,
                "mem": mem,
                "maxmem": NODE_MAXMEM,
                "disk": disk,
                "maxdisk": rootfs,
                "uptime": 86_400,
                "level": "",
            }));
            for peer in st.cluster.iter().flat_map(|c| &c.peers) {
                items.push(json!({
                    "id": format!("node/{peer}"),
                    "type": "node",
                    "node": peer,
                    "status": "online",
                    "level": "",
                }));
            }
        }
    }
    let st = ctx.shared.state.lock();
    if want("vm") {
        let peers = st.cluster.iter().flat_map(|c| &c.guests);
        for (vmid, peer) in peers {
            if !st
                .access
                .has(&ctx.authid, &format!("/vms/{vmid}"), "VM.Audit")
            {
                continue;
            }
            let mut item = crate::lxc::summary(*vmid, &peer.guest);
            if let Some(obj) = item.as_object_mut() {
                obj.insert("id".into(), json!(format!("lxc/{vmid}")));
                obj.insert("node".into(), json!(peer.node));
                obj.insert("template".into(), json!(0));
            }
            items.push(item);
        }
        for (vmid, guest) in &st.guests {
            if !st
                .access
                .has(&ctx.authid, &format!("/vms/{vmid}"), "VM.Audit")
            {
                continue;
            }
            let mut item = crate::lxc::summary(*vmid, guest);
            if let Some(obj) = item.as_object_mut() {
                obj.insert("id".into(), json!(format!("lxc/{vmid}")));
                obj.insert("node".into(), json!(node));
                obj.insert(
                    "template".into(),
                    json!(u8::from(
                        guest.conf.get("template").is_some_and(|t| t == "1")
                    )),
                );
            }
            items.push(item);
        }
        for (vmid, vm) in &st.vms {
            if !st
                .access
                .has(&ctx.authid, &format!("/vms/{vmid}"), "VM.Audit")
            {
                continue;
            }
            let mut item = crate::qemu::summary(*vmid, vm);
            if let Some(obj) = item.as_object_mut() {
                obj.insert("id".into(), json!(format!("qemu/{vmid}")));
                obj.insert("type".into(), json!("qemu"));
                obj.insert("node".into(), json!(node));
                obj.insert(
                    "template".into(),
                    json!(u8::from(vm.conf.get("template").is_some_and(|t| t == "1"))),
                );
                if let Some(pool) = st.access.pool_of(*vmid) {
                    obj.insert("pool".into(), json!(pool));
                }
            }
            items.push(item);
        }
    }
    if want("storage") {
        for (sid, storage) in &st.storages {
            let path = format!("/storage/{sid}");
            let visible = st.access.has(&ctx.authid, &path, "Datastore.Audit")
                || st.access.has(&ctx.authid, &path, "Datastore.AllocateSpace");
            if !visible {
                continue;
            }
            let content: Vec<&str> = storage.content.iter().map(String::as_str).collect();
            items.push(json!({
                "id": format!("storage/{node}/{sid}"),
                "type": "storage",
                "storage": sid,
                "node": node,
                "status": if storage.enabled { "available" } else { "unknown" },
                "plugintype": storage.kind.type_name(),
                "content": content.join(","),
                "shared": u8::from(storage.shared),
                "maxdisk": storage.total,
                "disk": 0,
            }));
        }
    }
    data(Value::Array(items))
}
