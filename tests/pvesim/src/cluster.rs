//! `GET /cluster/resources`: every guest, storage and node of the (one-node) cluster, as PVE
//! lists them for the caller — each entry only when the caller may audit it (`VM.Audit` on
//! the guest, `Datastore.Audit` or `Datastore.AllocateSpace` on the storage, `Sys.Audit` on
//! the node). `type` narrows the list to `vm`, `storage` or `node` (`sdn` lists nothing: the
//! simulator has no SDN zones).

use serde_json::{Value, json};

use crate::access::{NODE_MAXMEM, node_cpu, node_usage};
use crate::api::{Ctx, HandlerResult, data};

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
        }
    }
    let st = ctx.shared.state.lock();
    if want("vm") {
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
