//! Every guest has an address Bosun assigned (DESIGN §7, decision 0101). The demo's agent has a
//! pool (`[addresses]`, 192.0.2.100 to .199); every guest it created along the way, alpha
//! through its disaster recovery included, runs with a static `ip=` of the pool in its `net0`
//! and Proxmox's `ipfilter` on, so it can send from that address alone; no two share one; and
//! `bosunctl status` shows each guest's address on its line.

use std::collections::BTreeSet;

use bosun_pve::{Pve as _, Vmid};
use uuid::Uuid;

use super::children::Children;
use super::scenario::{check, converge, show};
use super::sim::{self, SimEndpoint};
use super::{DemoError, Narrator};
use bosunctl::client::HubClient;
use bosunctl::status;

/// The demo agent's pool, as its `agent.toml` writes it.
pub const POOL: &str = "[addresses]\nbridge = \"vmbr0\"\nipv4_first = \"192.0.2.100\"\n\
                        ipv4_last = \"192.0.2.199\"\nipv4_prefix = 24\nipv4_gateway = \"192.0.2.1\"\n";

fn in_pool(address: &str) -> bool {
    address
        .strip_prefix("192.0.2.")
        .and_then(|last| last.parse::<u8>().ok())
        .is_some_and(|last| (100..=199).contains(&last))
}

/// The step: each running guest of the agent's, read back from Proxmox and the hub.
pub(super) async fn assigned_addresses(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    sim: &SimEndpoint,
    alpha: Uuid,
) -> Result<(), DemoError> {
    let fleet = converge(children, client, "alpha reports its address", |f| {
        f.hosts
            .first()
            .map(status::guest_lines)
            .into_iter()
            .flatten()
            .any(|g| g.guest_id == Some(alpha) && !g.addresses.is_empty())
    })
    .await?;
    let pve = sim::pve_client(sim)?;
    let lines = fleet
        .hosts
        .first()
        .map(status::guest_lines)
        .unwrap_or_default();
    let mut seen = BTreeSet::new();
    let mut guests = 0;
    for line in lines
        .iter()
        .filter(|l| l.observed == "running" && l.desired)
    {
        let Some(vmid) = line.vmid else { continue };
        let id = Vmid::new(vmid).map_err(|e| DemoError::Check(format!("vmid {vmid}: {e}")))?;
        let config = pve.ct_config(id).await.map_err(|source| DemoError::Pve {
            what: "GET config",
            source,
        })?;
        let firewall = pve.ct_firewall(id).await.map_err(|source| DemoError::Pve {
            what: "GET firewall options",
            source,
        })?;
        let net0 = config.get_str("net0").unwrap_or_default();
        let ip = net0
            .split(',')
            .find_map(|p| p.strip_prefix("ip="))
            .unwrap_or("none");
        let address = ip.split('/').next().unwrap_or_default().to_owned();
        check(
            ip.contains('/') && in_pool(&address) && firewall.enable && firewall.ipfilter,
            || {
                format!(
                    "guest {} (CT {vmid}): net0 {net0}, firewall {firewall:?}: not a pool address under ipfilter",
                    line.hostname
                )
            },
        )?;
        check(line.addresses == [address.clone()], || {
            format!(
                "guest {}: the report says {:?}, its config {address}",
                line.hostname, line.addresses
            )
        })?;
        check(seen.insert(address.clone()), || {
            format!("two guests hold {address}")
        })?;
        n.detail(format!(
            "proxmox: CT {vmid} ({}) net0 ip={ip}, firewall=1; its firewall: enable=1 ipfilter=1",
            line.hostname
        ));
        guests += 1;
    }
    check(guests >= 1, || "no running guest to look at".to_owned())?;
    n.detail(format!(
        "{guests} running guest(s), each at its own address of the pool, sending from no other"
    ));
    show(n, &fleet);
    Ok(())
}
