//! The firewall options of a container (`GET/PUT …/lxc/{vmid}/firewall/options`) and of the
//! datacenter (`GET /cluster/firewall/options`).
//!
//! A container's options live beside its config, as PVE keeps `/etc/pve/firewall/<vmid>.fw`
//! apart from `/etc/pve/lxc/<vmid>.conf`: they go with the container when it is destroyed,
//! start empty on a fresh restore (archives carry no firewall file here) and do not take the
//! container's config lock. The options a PUT leaves out keep their value; `delete` removes
//! the named ones (their default applies again). No packet is filtered: tests read what was
//! set through [`crate::SimHandle::guest_firewall`].

use serde_json::{Map, Value, json};
use sha1::{Digest, Sha1};

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::lxc_config::missing_config;
use crate::state::Conf;

/// The options `PUT` may set, as PVE names them; `enable`, `ipfilter`, `macfilter`, `dhcp`,
/// `ndp` and `radv` are booleans.
const BOOL_OPTIONS: &[&str] = &["dhcp", "enable", "ipfilter", "macfilter", "ndp", "radv"];
const OTHER_OPTIONS: &[&str] = &["log_level_in", "log_level_out", "policy_in", "policy_out"];

/// SHA-1 of the options as PVE writes them in the `[OPTIONS]` section.
fn digest(options: &Conf) -> String {
    let mut text = String::from("[OPTIONS]\n\n");
    for (k, v) in options {
        text.push_str(&format!("{k}: {v}\n"));
    }
    hex::encode(Sha1::digest(text.as_bytes()))
}

fn rendered(options: &Conf) -> Value {
    let mut out: Map<String, Value> = options
        .iter()
        .map(|(k, v)| {
            let value = if BOOL_OPTIONS.contains(&k.as_str()) {
                v.parse::<i64>().map_or_else(|_| json!(v), |n| json!(n))
            } else {
                json!(v)
            };
            (k.clone(), value)
        })
        .collect();
    out.insert("digest".to_owned(), json!(digest(options)));
    Value::Object(out)
}

/// `GET /nodes/{node}/lxc/{vmid}/firewall/options`.
pub(crate) fn get(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let st = ctx.shared.state.lock();
    let guest = st
        .guests
        .get(&vmid)
        .ok_or_else(|| missing_config(ctx.node(), vmid))?;
    data(rendered(&guest.firewall))
}

/// `PUT /nodes/{node}/lxc/{vmid}/firewall/options`.
pub(crate) fn put(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let mut st = ctx.shared.state.lock();
    let node = ctx.node().to_owned();
    let guest = st
        .guests
        .get_mut(&vmid)
        .ok_or_else(|| missing_config(&node, vmid))?;
    if let Some(want) = ctx.get("digest")
        && want != digest(&guest.firewall)
    {
        return Err(ApiError::internal(
            "update failed - file has been modified since reading it (digest mismatch)",
        ));
    }
    let deleted: Vec<String> = ctx
        .get("delete")
        .map(|list| {
            list.split([',', ';', ' '])
                .filter(|k| !k.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    for key in &deleted {
        if !BOOL_OPTIONS.contains(&key.as_str()) && !OTHER_OPTIONS.contains(&key.as_str()) {
            return Err(ApiError::param(
                "delete",
                &format!("invalid option '{key}'"),
            ));
        }
        if ctx.explicit.contains(key) {
            return Err(ApiError::param(
                key,
                &format!("cannot set and delete option '{key}'"),
            ));
        }
    }
    for key in BOOL_OPTIONS.iter().chain(OTHER_OPTIONS) {
        if let Some(value) = ctx.get(key) {
            guest.firewall.insert((*key).to_owned(), value.to_owned());
        }
    }
    for key in &deleted {
        guest.firewall.remove(key);
    }
    data(Value::Null)
}

/// `GET /cluster/firewall/options`: the datacenter's switch (off in a default install).
pub(crate) fn datacenter(ctx: &Ctx) -> HandlerResult {
    let st = ctx.shared.state.lock();
    let mut options = Conf::new();
    options.insert(
        "enable".to_owned(),
        u8::from(st.datacenter_firewall).to_string(),
    );
    data(rendered(&options))
}
