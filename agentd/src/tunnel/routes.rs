//! Placing the signed routes: each route's guest id becomes the guest's vmid (the agent's own
//! journal: the guest it created, restored or adopted under that id, never the hub's say) and
//! that guest's address on the bridge (its Proxmox config's static `ip=` on `net0`, or the
//! address Proxmox reads from the running container's `net0` interface). Then what changed
//! against the rules in force, for the audit log of every guest concerned.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;

use bosun_proto::tunnel::TunnelRoute;
use bosun_pve::{CtConfig, Pve, Vmid};
use serde_json::json;

use super::ingress::IngressRule;
use crate::guests::reconcile::lookup::carries_identity;
use crate::ops::journal::{AuditEvent, GuestProvenance};

/// A route added, moved or dropped.
pub const ROUTE_ADDED: &str = "tunnel.route_added";
/// A hostname now reaches another guest: written to the guest that lost it and to the one
/// that gained it.
pub const ROUTE_MOVED: &str = "tunnel.route_moved";
/// A hostname no longer reaches the guest.
pub const ROUTE_REMOVED: &str = "tunnel.route_removed";
/// A hostname reaches the same guest at another address (it was restored, or its address
/// changed).
pub const ROUTE_READDRESSED: &str = "tunnel.route_readdressed";

/// A rule in force, with the guest it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct PlacedRoute {
    /// The rule as written.
    pub rule: IngressRule,
    /// Its guest.
    pub guest_id: String,
    /// The guest's vmid when it was placed.
    pub vmid: u32,
}

/// What placing the routes gave.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The rules to write, in the plan's order.
    pub placed: Vec<PlacedRoute>,
    /// Routes whose guest is not on this host, or has no address yet: left out (the
    /// catch-all answers them).
    pub unplaced: Vec<TunnelRoute>,
}

/// A guest's address, and whether the guest itself said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestAddress {
    /// The IPv4 address.
    pub address: Ipv4Addr,
    /// Read from the running container's interface (a DHCP or manual `net0`), so what the
    /// guest configured, not what Proxmox assigned: taken only when no other guest and not
    /// the node holds it ([`place`]).
    pub leased: bool,
}

/// The guest's IPv4 address on `net0`: the static `ip=` of its config, else the address of the
/// running container's interface `net0` names (`name=`, `eth0` when absent).
pub async fn guest_address<P: Pve>(pve: &P, vmid: Vmid, config: &CtConfig) -> Option<GuestAddress> {
    let net0 = config.get_str("net0")?;
    let prop = |key: &str| {
        net0.split(',')
            .find_map(|p| p.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
            .map(str::to_owned)
    };
    if let Some(ip) = prop("ip").filter(|ip| ip != "dhcp" && ip != "manual") {
        let address = ip.split('/').next()?.parse().ok()?;
        return Some(GuestAddress {
            address,
            leased: false,
        });
    }
    let name = prop("name").unwrap_or_else(|| "eth0".to_owned());
    let interfaces = pve.ct_interfaces(vmid).await.ok()?;
    let inet = interfaces.into_iter().find(|i| i.name == name)?.inet?;
    let address = inet.split('/').next()?.parse().ok()?;
    Some(GuestAddress {
        address,
        leased: true,
    })
}

/// Whether a guest's own word for its address may be routed to: a unicast address a guest
/// can hold (never loopback, link-local, unspecified, broadcast or multicast), held by no
/// other guest (`others`) and not by the node (`node`): a guest that names another's address,
/// or the node's own, would have the tunnel carry its hostname's traffic there. (A guest
/// whose routes already go to an address keeps it: [`place`].)
fn leased_acceptable(address: Ipv4Addr, others: &[Ipv4Addr], node: &[Ipv4Addr]) -> bool {
    !(address.is_loopback()
        || address.is_link_local()
        || address.is_unspecified()
        || address.is_broadcast()
        || address.is_multicast()
        || others.contains(&address)
        || node.contains(&address))
}

/// The node's own IPv4 addresses, as its network configuration lists them; none when it
/// cannot be read (then no leased address is taken: see [`place`]).
async fn node_addresses<P: Pve>(pve: &P) -> Option<Vec<Ipv4Addr>> {
    let interfaces = pve.network().await.ok()?;
    Some(
        interfaces
            .iter()
            .filter_map(|i| i.address.as_deref()?.parse().ok())
            .collect(),
    )
}

/// Places every route of the plan: `provenance` is the agent's record of its guests, `last`
/// the rules in force. A guest that is still the one recorded at its vmid but whose address
/// cannot be read now (it is stopped, or Proxmox did not answer) keeps the address it had; a
/// guest whose container is gone or is another's loses its route, so its hostname never
/// reaches whoever holds the old address next.
pub async fn place<P: Pve>(
    pve: &P,
    routes: &[TunnelRoute],
    provenance: &[GuestProvenance],
    last: &[PlacedRoute],
) -> Placement {
    let by_guest: HashMap<&str, &GuestProvenance> = provenance
        .iter()
        .filter(|p| !p.is_scratch())
        .filter_map(|p| Some((p.guest_id()?, p)))
        .collect();
    let mut addresses: HashMap<String, Option<GuestAddress>> = HashMap::new();
    for route in routes {
        let guest_id = route.guest_id.to_string();
        let Some(guest) = by_guest.get(guest_id.as_str()) else {
            continue;
        };
        if addresses.contains_key(&guest_id) {
            continue;
        }
        let found = match address_of(pve, guest).await {
            Seen::At(address) => Some(address),
            // The address it had was taken when it was read.
            Seen::Unread => last
                .iter()
                .find(|l| l.guest_id == guest_id && l.vmid == guest.vmid())
                .map(|l| GuestAddress {
                    address: l.rule.address,
                    leased: false,
                }),
            Seen::Gone => None,
        };
        addresses.insert(guest_id, found);
    }
    let node = if addresses.values().flatten().any(|a| a.leased) {
        node_addresses(pve).await
    } else {
        Some(Vec::new())
    };
    let accepted: HashMap<&str, Ipv4Addr> = addresses
        .iter()
        .filter_map(|(guest_id, found)| {
            let found = (*found)?;
            // The guest that held the address in the rules in force keeps it: a guest that
            // names another's address later cannot take its routes away.
            let held = last
                .iter()
                .any(|l| &l.guest_id == guest_id && l.rule.address == found.address);
            if found.leased && !held {
                let others: Vec<Ipv4Addr> = addresses
                    .iter()
                    .filter(|(other, _)| *other != guest_id)
                    .filter_map(|(_, a)| a.map(|a| a.address))
                    .collect();
                let node = node.as_deref()?;
                if !leased_acceptable(found.address, &others, node) {
                    tracing::warn!(guest_id = %guest_id, address = %found.address, "a guest's own address for its tunnel route is another guest's, the node's or no guest's: its hostnames are not routed");
                    return None;
                }
            }
            Some((guest_id.as_str(), found.address))
        })
        .collect();
    let mut out = Placement::default();
    for route in routes {
        let guest_id = route.guest_id.to_string();
        match (
            by_guest.get(guest_id.as_str()),
            accepted.get(guest_id.as_str()),
        ) {
            (Some(guest), Some(address)) => out.placed.push(PlacedRoute {
                rule: IngressRule {
                    hostname: route.hostname.clone(),
                    address: *address,
                    port: route.port,
                },
                guest_id,
                vmid: guest.vmid(),
            }),
            _ => out.unplaced.push(route.clone()),
        }
    }
    out
}

/// What the agent sees of a recorded guest's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// The container is the recorded guest, at this address.
    At(GuestAddress),
    /// The container may well be the recorded guest, but no address could be read now (it
    /// is stopped, or Proxmox did not answer).
    Unread,
    /// No container at the vmid, or one that is not the recorded guest.
    Gone,
}

/// The address of the guest at `guest`'s vmid, when that container is still the one the agent
/// recorded (its identity tag).
async fn address_of<P: Pve>(pve: &P, guest: &GuestProvenance) -> Seen {
    let Ok(vmid) = Vmid::new(guest.vmid()) else {
        return Seen::Gone;
    };
    let config = match pve.ct_config(vmid).await {
        Ok(config) => config,
        Err(e) if e.is_missing() => return Seen::Gone,
        Err(_) => return Seen::Unread,
    };
    if !carries_identity(&config, guest.identity()) {
        return Seen::Gone;
    }
    guest_address(pve, vmid, &config)
        .await
        .map_or(Seen::Unread, Seen::At)
}

/// The audit rows a change from `before` to `after` writes: each guest that gains, loses or
/// keeps a hostname at another address is told, under its own guest id (so it reads it in
/// `GET /v1/audit`). A moved hostname is told to both guests; neither learns the other's id.
pub fn changes(before: &[PlacedRoute], after: &[PlacedRoute], serial: u64) -> Vec<AuditEvent> {
    let old: BTreeMap<&str, &PlacedRoute> = before
        .iter()
        .map(|r| (r.rule.hostname.as_str(), r))
        .collect();
    let new: BTreeMap<&str, &PlacedRoute> = after
        .iter()
        .map(|r| (r.rule.hostname.as_str(), r))
        .collect();
    let event = |name: &str, route: &PlacedRoute, extra: serde_json::Value| {
        let mut detail = json!({
            "hostname": route.rule.hostname,
            "service": route.rule.service(),
            "plan_serial": serial,
        });
        if let (Some(d), Some(e)) = (detail.as_object_mut(), extra.as_object()) {
            d.extend(e.clone());
        }
        AuditEvent {
            guest_id: Some(route.guest_id.clone()),
            vmid: Some(route.vmid),
            detail,
            ..AuditEvent::new(name)
        }
    };
    let mut out = Vec::new();
    for (hostname, was) in &old {
        match new.get(hostname) {
            None => out.push(event(ROUTE_REMOVED, was, json!({}))),
            Some(now) if now.guest_id != was.guest_id => {
                out.push(event(ROUTE_MOVED, was, json!({ "direction": "away" })));
                out.push(event(ROUTE_MOVED, now, json!({ "direction": "here" })));
            }
            Some(now) if now.rule != was.rule => out.push(event(
                ROUTE_READDRESSED,
                now,
                json!({ "previous_service": was.rule.service() }),
            )),
            Some(_) => {}
        }
    }
    for (hostname, now) in &new {
        if !old.contains_key(hostname) {
            out.push(event(ROUTE_ADDED, now, json!({})));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(hostname: &str, guest: &str, last: u8) -> PlacedRoute {
        PlacedRoute {
            rule: IngressRule {
                hostname: hostname.into(),
                address: Ipv4Addr::new(10, 0, 0, last),
                port: 80,
            },
            guest_id: guest.into(),
            vmid: 100 + u32::from(last),
        }
    }

    fn names(events: &[AuditEvent]) -> Vec<(String, String)> {
        events
            .iter()
            .map(|e| (e.event.clone(), e.guest_id.clone().unwrap()))
            .collect()
    }

    #[test]
    fn every_guest_concerned_is_told_under_its_own_id() {
        let before = [
            placed("a.example.com", "A", 1),
            placed("b.example.com", "B", 2),
        ];
        assert!(changes(&before, &before, 1).is_empty());
        // a moves from A to B, b is dropped, c is added to A, B's address changes.
        let after = [
            placed("a.example.com", "B", 2),
            placed("c.example.com", "A", 1),
        ];
        let events = changes(&before, &after, 2);
        assert_eq!(
            names(&events),
            [
                (ROUTE_MOVED.into(), "A".into()),
                (ROUTE_MOVED.into(), "B".into()),
                (ROUTE_REMOVED.into(), "B".into()),
                (ROUTE_ADDED.into(), "A".into()),
            ]
        );
        assert_eq!(events[0].detail["direction"], "away");
        assert_eq!(events[1].detail["service"], "http://10.0.0.2:80");
        assert!(
            !events[0].detail.to_string().contains("\"B\""),
            "the losing guest does not learn the other's id"
        );
        let readdressed = changes(
            &[placed("a.example.com", "A", 1)],
            &[placed("a.example.com", "A", 9)],
            3,
        );
        assert_eq!(
            names(&readdressed),
            [(ROUTE_READDRESSED.into(), "A".into())]
        );
        assert_eq!(
            readdressed[0].detail["previous_service"],
            "http://10.0.0.1:80"
        );
    }

    #[test]
    fn a_guests_own_address_is_taken_only_when_no_one_else_holds_it() {
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        let others = [ip("10.99.0.101")];
        let node = [ip("192.0.2.10")];
        assert!(leased_acceptable(ip("10.99.0.100"), &others, &node));
        for taken in [
            "10.99.0.101",
            "192.0.2.10",
            "127.0.0.1",
            "169.254.1.1",
            "0.0.0.0",
        ] {
            assert!(
                !leased_acceptable(ip(taken), &others, &node),
                "{taken} is not a guest's own"
            );
        }
        assert!(!leased_acceptable(ip("255.255.255.255"), &[], &[]));
        assert!(!leased_acceptable(ip("224.0.0.1"), &[], &[]));
    }
}
