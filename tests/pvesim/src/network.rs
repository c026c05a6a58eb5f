//! `GET /nodes/{node}/network`: the node's interfaces as its network configuration lists them.
//! The simulated node has one bridge (`vmbr0` over `eno1`, with the node's address) and a
//! second NIC that is configured but down (`eno2`). `type` filters as Proxmox does
//! (`any_bridge` and `any_local_bridge` take Linux and OVS bridges).

use serde_json::{Value, json};

use crate::api::{Ctx, HandlerResult, data};

/// The interfaces, in Proxmox's shape.
fn interfaces() -> Vec<Value> {
    vec![
        json!({
            "iface": "eno1", "type": "eth", "active": 1, "exists": 1, "autostart": 1,
            "method": "manual", "method6": "manual", "families": ["inet"], "priority": 3,
        }),
        json!({
            "iface": "eno2", "type": "eth", "exists": 1,
            "method": "manual", "method6": "manual", "families": ["inet"], "priority": 4,
        }),
        json!({
            "iface": "vmbr0", "type": "bridge", "active": 1, "autostart": 1,
            "bridge_ports": "eno1", "bridge_stp": "off", "bridge_fd": "0",
            "method": "static", "method6": "manual", "families": ["inet"],
            "cidr": "192.0.2.10/24", "address": "192.0.2.10", "netmask": "24",
            "gateway": "192.0.2.1", "priority": 5,
        }),
    ]
}

/// `GET /nodes/{node}/network`.
pub(crate) fn list(ctx: &Ctx) -> HandlerResult {
    let wanted = ctx.get("type");
    let items: Vec<Value> = interfaces()
        .into_iter()
        .filter(|i| {
            let kind = i["type"].as_str().unwrap_or_default();
            match wanted {
                None => true,
                Some("any_bridge" | "any_local_bridge") => kind == "bridge" || kind == "OVSBridge",
                Some(other) => kind == other,
            }
        })
        .collect();
    data(Value::Array(items))
}
