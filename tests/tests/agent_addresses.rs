//! Every guest gets an address Bosun assigned, and the guard that goes with it (DESIGN §7,
//! decision 0101), against the real agent and hub over TLS, the simulator's Proxmox (whose
//! firewall models `ipfilter`) and the cloudflared stand-in:
//!
//! - two guests provisioned by default get the pool's first free addresses (never the node's
//!   own, which the pool overlaps), written as static `ip=`/`gw=` in their `net0`, and both get
//!   `ipfilter`; the report and `bosunctl status` show the addresses, the local API knows each
//!   guest by its address alone, and the tunnel routes each hostname to its guest's;
//! - a guest whose root sets its neighbour's address on its interface sends nothing from it
//!   (ipfilter drops it), is not known by it, and neither takes the neighbour's hostname nor
//!   loses its own;
//! - a hostile hub: a new guest named with another guest's address, the node's, one outside
//!   the pool or on another bridge is never built; an address moved from a running guest is
//!   refused in the report and the guest is left as it is; after a restart the pool hands out
//!   none of the addresses it gave.
//! - a guest from before the pool keeps its DHCP lease until the operator gives it an address
//!   on the node, then gets `ipfilter` and is known by that address.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::agent_tunnel::{both_replicas_route, tunnel_of, with_routes};

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use agent_support::*;
use bosun_agentd::ops::journal::OpStatus;
use serde_json::{Value, json};
use uuid::Uuid;

/// The pool: it starts at the node's own address (192.0.2.10) and holds 8 addresses.
const POOL: &str = "[addresses]\nbridge = \"vmbr0\"\nipv4_first = \"192.0.2.10\"\n\
                    ipv4_last = \"192.0.2.17\"\nipv4_prefix = 24\nipv4_gateway = \"192.0.2.1\"\n";
const NODE: &str = "192.0.2.10";

fn append_config(files: &AgentFiles, text: &str) {
    let mut config = std::fs::read_to_string(&files.config_path).unwrap();
    config.push_str(text);
    std::fs::write(&files.config_path, config).unwrap();
}

fn net0(sim: &bosun_pvesim::SimHandle, vmid: u32) -> String {
    sim.guest_config(vmid).unwrap()["net0"].clone()
}

fn part<'a>(net: &'a str, key: &str) -> Option<&'a str> {
    net.split(',')
        .find_map(|p| p.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// The static address `net0` gives the guest.
fn address_of(sim: &bosun_pvesim::SimHandle, vmid: u32) -> IpAddr {
    let net = net0(sim, vmid);
    let ip = part(&net, "ip").unwrap_or_else(|| panic!("no ip= in {net}"));
    ip.split_once('/')
        .unwrap_or_else(|| panic!("{ip} is not static"))
        .0
        .parse()
        .unwrap()
}

fn ipfilter_on(sim: &bosun_pvesim::SimHandle, vmid: u32) -> bool {
    let firewall = sim.guest_firewall(vmid).unwrap();
    firewall.get("enable").map(String::as_str) == Some("1")
        && firewall.get("ipfilter").map(String::as_str) == Some("1")
}

async fn reported_addresses(hub: &RealHub, host: Uuid, guest: Uuid) -> Vec<String> {
    hub.host(host).await["last_report"]["guests"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["guest_id"] == json!(guest))
        .and_then(|g| g["addresses"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect()
}

fn with_guest(
    base: &Value,
    sim: &bosun_pvesim::SimHandle,
    id: Uuid,
    name: &str,
    network: Value,
) -> Value {
    let mut doc = base.clone();
    let mut guest = desired(sim, &[(id, name)], "running")["guests"][0].clone();
    guest["network"] = network;
    doc["guests"].as_array_mut().unwrap().push(guest);
    doc
}

/// `bosunctl status` as it prints.
async fn status_text(hub: &RealHub) -> String {
    let client = bosunctl::client::HubClient::new(bosunctl::config::Settings {
        url: hub.url.parse().unwrap(),
        fingerprint: hub.fingerprint.clone(),
        token: secrecy::SecretString::from(hub.admin.clone()),
        allowed_signers: None,
    })
    .unwrap();
    let fleet = bosunctl::status::FleetStatus::fetch(&client, 10)
        .await
        .unwrap();
    bosunctl::status::render(&fleet).join("\n")
}

/// The provisionings of `guest` the journal rolled back, with their errors.
async fn refused_provisions(agent: &InProcessAgent, guest: Uuid) -> Vec<String> {
    agent
        .handles
        .journal
        .recent_operations(500)
        .await
        .unwrap()
        .into_iter()
        .map(|(operation, _steps)| operation)
        .filter(|o| o.guest_id.as_deref() == Some(guest.to_string().as_str()))
        .filter(|o| o.status == OpStatus::Compensated)
        .filter_map(|o| o.error)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_guest_gets_an_assigned_address_and_ipfilter_holds_it_there() {
    let (sim, hub, files) = enrolled_stack().await;
    sim.set_datacenter_firewall(true);
    let (_dir, config_file, _credentials, stand_in) = tunnel_of(&files).await;
    append_config(&files, POOL);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;

    // Two guests provisioned by default: no network in desired state.
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let base = desired(&sim, &[(a, "shop"), (b, "blog")], "running");
    hub.put_desired(host, &base).await;
    let vmid_a = running_vmid(&agent.handles.reconcile, a).await;
    let vmid_b = running_vmid(&agent.handles.reconcile, b).await;
    let (addr_a, addr_b) = (address_of(&sim, vmid_a), address_of(&sim, vmid_b));
    let node: IpAddr = NODE.parse().unwrap();
    assert_ne!(addr_a, addr_b, "two guests got one address");
    for (vmid, addr) in [(vmid_a, addr_a), (vmid_b, addr_b)] {
        assert_ne!(addr, node, "the pool handed out the node's own address");
        let net = net0(&sim, vmid);
        assert_eq!(part(&net, "gw"), Some("192.0.2.1"), "{net}");
        assert_eq!(part(&net, "firewall"), Some("1"), "{net}");
        assert!(ipfilter_on(&sim, vmid), "guest {vmid} has no ipfilter");
        assert_eq!(sim.guest_may_send_from(vmid, addr), Some(true));
    }
    let mut given = [addr_a, addr_b];
    given.sort();
    assert_eq!(
        given,
        [
            "192.0.2.11".parse::<IpAddr>().unwrap(),
            "192.0.2.12".parse().unwrap()
        ],
        "the pool's first free addresses, the node's skipped"
    );
    // The report shows them where it shows the guest, and the local API is handed them: each
    // guest known by its own address alone.
    for (guest, addr) in [(a, addr_a), (b, addr_b)] {
        eventually(
            Duration::from_secs(30),
            "the report shows the address",
            || async { reported_addresses(&hub, host, guest).await == [addr.to_string()] },
        )
        .await;
        assert_eq!(
            agent
                .handles
                .reconcile
                .borrow()
                .addresses
                .get(&guest.to_string()),
            Some(&vec![addr])
        );
    }
    let ctl = status_text(&hub).await;
    assert!(
        ctl.contains(&addr_a.to_string()) && ctl.contains(&addr_b.to_string()),
        "bosunctl status shows each guest's address:\n{ctl}"
    );

    // The tunnel routes each hostname to its guest's assigned address.
    let signed = with_routes(
        &base,
        host,
        &[("shop.example.com", a, 80), ("blog.example.com", b, 8080)],
    );
    hub.put_desired_unplanned(host, &signed).await;
    let both = BTreeMap::from([
        ("shop.example.com".to_owned(), format!("http://{addr_a}:80")),
        (
            "blog.example.com".to_owned(),
            format!("http://{addr_b}:8080"),
        ),
    ]);
    both_replicas_route(&stand_in, &both).await;

    // The blog's root sets the shop's address on its interface: ipfilter drops what it sends
    // from there, the local API still knows the shop by it alone, and both hostnames stay.
    assert!(sim.set_guest_own_address(
        vmid_b,
        Some(match addr_a {
            IpAddr::V4(v4) => v4,
            IpAddr::V6(_) => unreachable!("an IPv4 pool"),
        })
    ));
    assert_eq!(
        sim.guest_may_send_from(vmid_b, addr_a),
        Some(false),
        "ipfilter lets the blog speak as the shop"
    );
    let interfaces =
        bosun_pve::Pve::ct_interfaces(&root_client(&sim), bosun_pve::Vmid::new(vmid_b).unwrap())
            .await
            .unwrap();
    assert!(
        interfaces
            .iter()
            .any(|i| i.inet.as_deref() == Some(format!("{addr_a}/24").as_str())),
        "Proxmox reads the claimed address from the blog's interface"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        stand_in.routes(0),
        both,
        "a claimed address moved a hostname"
    );
    assert_eq!(
        stand_in.routes(1),
        both,
        "a claimed address moved a hostname"
    );
    let text = std::fs::read_to_string(&config_file).unwrap();
    assert_eq!(
        text.matches(&format!("service: http://{addr_a}:")).count(),
        1,
        "only the shop's hostname reaches the shop's address: {text}"
    );
    {
        let status = agent.handles.reconcile.borrow();
        assert_eq!(status.addresses.get(&a.to_string()), Some(&vec![addr_a]));
        assert_eq!(status.addresses.get(&b.to_string()), Some(&vec![addr_b]));
    }

    // A hostile hub. A new guest named with the shop's address, the node's, one outside the
    // pool or another bridge is never built.
    let (c, d, e, f) = (
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
    );
    let mut hostile = with_guest(
        &signed,
        &sim,
        c,
        "thief",
        json!({ "ipv4": { "cidr": format!("{addr_a}/24") } }),
    );
    hostile = with_guest(
        &hostile,
        &sim,
        d,
        "node",
        json!({ "ipv4": { "cidr": format!("{NODE}/24") } }),
    );
    hostile = with_guest(
        &hostile,
        &sim,
        e,
        "away",
        json!({ "ipv4": { "cidr": "198.51.100.7/24" } }),
    );
    hostile = with_guest(&hostile, &sim, f, "mgmt", json!({ "bridge": "vmbr9" }));
    // A guest from an archive the host never built: refused after its address was chosen.
    let h = Uuid::new_v4();
    hostile = with_guest(&hostile, &sim, h, "planted", json!({}));
    let last = hostile["guests"].as_array().unwrap().len() - 1;
    hostile["guests"][last]["golden"] =
        json!({ "volid": "local:backup/planted.tar.zst", "sha256": "0".repeat(64) });
    // And it moves the running blog onto a free address of the pool.
    hostile["guests"][1]["network"] = json!({ "ipv4": { "cidr": "192.0.2.16/24" } });
    sim.clear_requests();
    hub.put_desired_unplanned(host, &hostile).await;
    let restores = 0;
    for (guest, why) in [
        (c, format!("address {addr_a} is held by guest {a}")),
        (
            d,
            format!("address {NODE} is held by the node or another container"),
        ),
        (
            e,
            "198.51.100.7 is outside the host's pool prefix".to_owned(),
        ),
        (f, "bridge vmbr9 is not the one".to_owned()),
    ] {
        eventually(
            Duration::from_secs(30),
            &format!("guest {guest} refused: {why}"),
            || async {
                refused_provisions(&agent, guest)
                    .await
                    .iter()
                    .any(|r| r.contains(&why))
            },
        )
        .await;
    }
    eventually(
        Duration::from_secs(30),
        "the planted guest is rolled back",
        || async { !refused_provisions(&agent, h).await.is_empty() },
    )
    .await;
    // None of them holds an address of the pool: the rolled-back one gave its back.
    for guest in [c, d, e, f, h] {
        assert_eq!(
            agent
                .handles
                .journal
                .addresses_of(guest.to_string())
                .await
                .unwrap(),
            [],
            "refused guest {guest} holds an address"
        );
    }
    eventually(
        Duration::from_secs(30),
        "the blog's move is refused in the report",
        || async {
            hub.host(host).await["last_report"]["refused"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["name"] == "blog" && r["field"] == "network")
        },
    )
    .await;
    assert_eq!(
        agent_restores(&sim).len(),
        restores,
        "a refused guest was built"
    );
    assert_eq!(address_of(&sim, vmid_a), addr_a);
    assert_eq!(
        address_of(&sim, vmid_b),
        addr_b,
        "an address moved from a running guest"
    );
    assert!(
        !sim.requests().iter().any(|r| r.method != "GET"
            && (r.path.contains(&format!("/lxc/{vmid_a}/"))
                || r.path.contains(&format!("/lxc/{vmid_b}/")))),
        "the hostile generation changed a running guest"
    );

    // The journal keeps which address went to whom: after a restart, with the shop's container
    // gone behind the agent's back (lost, waiting for the operator's restore), a new guest by
    // default gets neither the shop's address nor the blog's, but the next free one (the
    // planted guest's, given back).
    agent.stop().await;
    destroy_behind_its_back(&sim, vmid_a).await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let g = Uuid::new_v4();
    let mut next = with_guest(&signed, &sim, g, "next", json!({}));
    next["dr_policy"] = json!("manual");
    hub.put_desired_unplanned(host, &next).await;
    let vmid_g = running_vmid(&agent.handles.reconcile, g).await;
    assert_eq!(
        address_of(&sim, vmid_g),
        "192.0.2.13".parse::<IpAddr>().unwrap(),
        "a restart handed out an address the journal gave another guest"
    );
    assert!(ipfilter_on(&sim, vmid_g));

    agent.stop().await;
    stand_in.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dhcp_guest_from_before_the_pool_is_moved_only_by_the_operator() {
    let (sim, hub, files) = enrolled_stack().await;
    sim.set_datacenter_firewall(true);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let old = Uuid::new_v4();
    let base = desired(&sim, &[(old, "legacy")], "running");
    hub.put_desired(host, &base).await;
    let vmid = running_vmid(&agent.handles.reconcile, old).await;
    assert_eq!(part(&net0(&sim, vmid), "ip"), Some("dhcp"), "no pool: DHCP");
    assert!(
        !ipfilter_on(&sim, vmid),
        "ipfilter on a DHCP guest cuts it off"
    );
    agent.stop().await;

    // The pool arrives: the running DHCP guest is left as it is.
    append_config(&files, POOL);
    let agent = InProcessAgent::start(&files.config_path).await;
    running_vmid(&agent.handles.reconcile, old).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        part(&net0(&sim, vmid), "ip"),
        Some("dhcp"),
        "the agent moved a DHCP guest"
    );

    // The operator's step: a static address on the node (`pct set … --net0 …,ip=…`).
    let client = root_client(&sim);
    let config = bosun_pve::Pve::ct_config(&client, bosun_pve::Vmid::new(vmid).unwrap())
        .await
        .unwrap();
    let mut net = bosun_pve::NetConfig::parse(&config.get_str("net0").unwrap()).unwrap();
    net.ip = Some(bosun_pve::Ipv4Config::Static("192.0.2.11/24".to_owned()));
    let mut set = bosun_pve::CtOptions::default();
    set.net.insert(0, net);
    bosun_pve::Pve::update_ct_config(
        &client,
        bosun_pve::Vmid::new(vmid).unwrap(),
        &bosun_pve::ConfigUpdate {
            set,
            ..bosun_pve::ConfigUpdate::default()
        },
    )
    .await
    .unwrap();
    eventually(
        Duration::from_secs(30),
        "the guard turns ipfilter on",
        || async { ipfilter_on(&sim, vmid) },
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "the guest is known by its address",
        || async {
            agent
                .handles
                .reconcile
                .borrow()
                .addresses
                .get(&old.to_string())
                == Some(&vec!["192.0.2.11".parse::<IpAddr>().unwrap()])
        },
    )
    .await;
    // And the pool never hands that address to a new guest: it is the first free one, but a
    // container's config holds it.
    let new = Uuid::new_v4();
    let doc = desired(&sim, &[(old, "legacy"), (new, "fresh")], "running");
    hub.put_desired(host, &doc).await;
    let vmid_new = running_vmid(&agent.handles.reconcile, new).await;
    assert_eq!(
        address_of(&sim, vmid_new),
        "192.0.2.12".parse::<IpAddr>().unwrap()
    );
    eventually(
        Duration::from_secs(30),
        "the report shows the operator's address",
        || async { reported_addresses(&hub, host, old).await == ["192.0.2.11"] },
    )
    .await;
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
