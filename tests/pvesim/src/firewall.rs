//! The firewall options of a container (`GET/PUT …/lxc/{vmid}/firewall/options`) and of the
//! datacenter (`GET /cluster/firewall/options`).
//!
//! A container's options live beside its config, as PVE keeps `/etc/pve/firewall/<vmid>.fw`
//! apart from `/etc/pve/lxc/<vmid>.conf`: they go with the container when it is destroyed,
//! start empty on a fresh restore (archives carry no firewall file here) and do not take the
//! container's config lock. The options a PUT leaves out keep their value; `delete` removes
//! the named ones (their default applies again). Tests read what was set through
//! [`crate::SimHandle::guest_firewall`], and ask what the firewall lets a guest send through
//! [`crate::SimHandle::guest_may_send_from`] ([`passes_ipfilter`]).

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
    put_options(ctx, &mut guest.firewall)
}

/// `GET /nodes/{node}/qemu/{vmid}/firewall/options`: a VM's options, kept apart from its
/// config as a container's are (`/etc/pve/firewall/<vmid>.fw`).
pub(crate) fn get_vm(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let st = ctx.shared.state.lock();
    let vm = st
        .vms
        .get(&vmid)
        .ok_or_else(|| ApiError::internal(&crate::qemu::missing_config(ctx.node(), vmid)))?;
    data(rendered(&vm.firewall))
}

/// `PUT /nodes/{node}/qemu/{vmid}/firewall/options`.
pub(crate) fn put_vm(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let mut st = ctx.shared.state.lock();
    let node = ctx.node().to_owned();
    let vm = st
        .vms
        .get_mut(&vmid)
        .ok_or_else(|| ApiError::internal(&crate::qemu::missing_config(&node, vmid)))?;
    put_options(ctx, &mut vm.firewall)
}

/// Applies a `PUT …/firewall/options` to a guest's `options`.
fn put_options(ctx: &Ctx, options: &mut Conf) -> HandlerResult {
    if let Some(want) = ctx.get("digest")
        && want != digest(options)
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
            options.insert((*key).to_owned(), value.to_owned());
        }
    }
    for key in &deleted {
        options.remove(key);
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

/// Whether pve-firewall lets what a guest sends from `source` on its interface `netN` out onto
/// the bridge, as its rules for a container do: nothing is filtered while the datacenter's
/// firewall is off, the guest's own `enable` is off, or the interface lacks `firewall=1`;
/// with all three on and `ipfilter=1` (and no `ipfilter-net<N>` IP set of the operator's),
/// only the addresses the interface configures statically (`ip=a.b.c.d/n`, `ip6=…/n`) and the
/// IPv6 link-local address of its MAC pass (`Firewall.pm`: a DHCP or SLAAC lease is in no set).
pub(crate) fn passes_ipfilter(
    datacenter: bool,
    options: &Conf,
    net: &str,
    source: std::net::IpAddr,
) -> bool {
    let part = |key: &str| {
        net.split(',')
            .find_map(|p| p.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
    };
    let on = |key: &str| options.get(key).is_some_and(|v| v == "1");
    if !datacenter || !on("enable") || part("firewall") != Some("1") || !on("ipfilter") {
        return true;
    }
    let configured = ["ip", "ip6"].into_iter().filter_map(|key| {
        let (address, prefix) = part(key)?.split_once('/')?;
        prefix.parse::<u8>().ok()?;
        address.parse::<std::net::IpAddr>().ok()
    });
    let link_local = part("hwaddr").and_then(|mac| {
        let bytes: Vec<u8> = mac
            .split(':')
            .map(|b| u8::from_str_radix(b, 16))
            .collect::<Result<_, _>>()
            .ok()?;
        let [a, b, c, d, e, f] = <[u8; 6]>::try_from(bytes).ok()?;
        Some(std::net::IpAddr::V6(std::net::Ipv6Addr::from([
            0xfe,
            0x80,
            0,
            0,
            0,
            0,
            0,
            0,
            a ^ 0x02,
            b,
            c,
            0xff,
            0xfe,
            d,
            e,
            f,
        ])))
    });
    configured.chain(link_local).any(|a| a == source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipfilter_passes_only_the_static_addresses_and_only_when_everything_is_on() {
        let on: Conf = [("enable", "1"), ("ipfilter", "1")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let net = "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=192.0.2.100/24,firewall=1";
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert!(passes_ipfilter(true, &on, net, ip("192.0.2.100")));
        assert!(!passes_ipfilter(true, &on, net, ip("192.0.2.101")));
        assert!(passes_ipfilter(
            true,
            &on,
            net,
            ip("fe80::be24:11ff:fe00:1")
        ));
        // A lease is in no set.
        let dhcp = "name=eth0,bridge=vmbr0,ip=dhcp,firewall=1";
        assert!(!passes_ipfilter(true, &on, dhcp, ip("10.99.0.100")));
        // Any switch off, and nothing is filtered.
        assert!(passes_ipfilter(false, &on, net, ip("192.0.2.101")));
        assert!(passes_ipfilter(true, &Conf::new(), net, ip("192.0.2.101")));
        let unfirewalled = "name=eth0,bridge=vmbr0,ip=192.0.2.100/24";
        assert!(passes_ipfilter(true, &on, unfirewalled, ip("192.0.2.101")));
    }
}
