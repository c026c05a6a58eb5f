//! What a reconcile pass reads of Proxmox (decision 0110), against the real hub and the
//! simulated node: with 20 steady guests a pass lists the containers and reads a fourth of
//! their configs (and those guests' firewall options), not all of them; a change made behind
//! the agent's back is still seen: one the listing shows at the next pass, one it does not
//! (an interface's `firewall=1`, the guest's firewall options) within
//! [`REFRESH_PASSES`] passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::collections::BTreeSet;
use std::time::Duration;

use agent_support::*;
use bosun_agentd::guests::reconcile::config_cache::REFRESH_PASSES;
use bosun_pve::{ConfigUpdate, CtOptions, NetConfig, Pve, Vmid};
use bosun_pvesim::SimHandle;
use uuid::Uuid;

const GUESTS: usize = 20;

/// An agent keeping `GUESTS` running guests, each with its network guard, every pass settled.
async fn steady() -> (SimHandle, RealHub, InProcessAgent) {
    let (sim, hub, files) = enrolled_stack().await;
    let text = std::fs::read_to_string(&files.config_path)
        .unwrap()
        .replace("max_parallel = 8", "max_parallel = 20");
    std::fs::write(&files.config_path, text).unwrap();
    let agent = InProcessAgent::start(&files.config_path).await;
    let guests: Vec<(Uuid, String)> = (0..GUESTS)
        .map(|i| (Uuid::new_v4(), format!("steady{i}")))
        .collect();
    let list: Vec<(Uuid, &str)> = guests.iter().map(|(g, n)| (*g, n.as_str())).collect();
    hub.put_desired(agent.handles.host_id, &desired(&sim, &list, "running"))
        .await;
    eventually(
        Duration::from_secs(300),
        "every guest running and guarded, the generation applied",
        || {
            let (sim, status) = (sim.clone(), agent.handles.reconcile.clone());
            async move {
                let ids = sim.guest_ids();
                let s = status.borrow().clone();
                ids.len() == GUESTS
                    && ids
                        .iter()
                        .all(|v| sim.guest_running(*v) == Some(true) && guarded(&sim, *v))
                    && s.generation > 0
                    && s.applied_generation == s.generation
            }
        },
    )
    .await;
    (sim, hub, agent)
}

/// Whether `vmid`'s `net0` carries `firewall=1` and its own firewall is on.
fn guarded(sim: &SimHandle, vmid: u32) -> bool {
    let net0 = sim
        .guest_config(vmid)
        .and_then(|c| c.get("net0").cloned())
        .unwrap_or_default();
    net0.split(',').any(|p| p == "firewall=1")
        && sim
            .guest_firewall(vmid)
            .is_some_and(|f| f.get("enable").map(String::as_str) == Some("1"))
}

fn passes(agent: &InProcessAgent) -> u64 {
    agent.handles.reconcile.borrow().passes
}

/// The reconcile's reads the simulator saw: the container lists, and the vmids whose config
/// and whose firewall options were read, one entry a read.
fn reads(sim: &SimHandle) -> (usize, Vec<u32>, Vec<u32>) {
    let node = &sim.endpoint().node;
    let list = format!("/nodes/{node}/lxc");
    let vmid_of = |path: &str, tail: &str| -> Option<u32> {
        path.strip_prefix(&format!("{list}/"))?
            .strip_suffix(tail)?
            .parse()
            .ok()
    };
    let (mut lists, mut configs, mut firewalls) = (0, Vec::new(), Vec::new());
    for r in sim.requests().into_iter().filter(|r| r.method == "GET") {
        if r.path == list {
            lists += 1;
        } else if let Some(vmid) = vmid_of(&r.path, "/config") {
            configs.push(vmid);
        } else if let Some(vmid) = vmid_of(&r.path, "/firewall/options") {
            firewalls.push(vmid);
        }
    }
    (lists, configs, firewalls)
}

/// With 20 steady guests a pass lists the node's containers and reads a
/// [`REFRESH_PASSES`]th of the configs and firewall options (11 reads a pass, where every
/// config and every guest's firewall options were read each pass: 41), and every guest's
/// config is still read within [`REFRESH_PASSES`] passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_pass_reads_a_share_of_the_configs() {
    let (sim, hub, agent) = steady().await;
    // Passes settle once the last guest's bootstrap and guard are done.
    tokio::time::sleep(Duration::from_secs(3)).await;
    sim.clear_requests();
    let from = passes(&agent);
    let watched = 3 * REFRESH_PASSES;
    eventually(Duration::from_secs(120), "passes go by", || {
        std::future::ready(passes(&agent) >= from + watched)
    })
    .await;
    let seen = sim.requests();
    let (lists, configs, firewalls) = reads(&sim);
    let changes: Vec<String> = seen
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(changes.is_empty(), "a steady agent changed {changes:?}");
    let total = lists + configs.len() + firewalls.len();
    println!(
        "{lists} passes: {} config reads, {} firewall reads, {:.1} reads a pass",
        configs.len(),
        firewalls.len(),
        total as f64 / lists as f64
    );
    // A pass at each end of the window may be cut: its reads count, its list may not (the
    // first pass counted may have listed before the requests were cleared).
    assert!(
        lists + 1 >= usize::try_from(watched).unwrap(),
        "{lists} lists"
    );
    let share = GUESTS.div_ceil(usize::try_from(REFRESH_PASSES).unwrap());
    assert!(
        total <= lists * (1 + 2 * share) + 2 * 2 * share,
        "{total} reads in {lists} passes: more than a list and a share of the configs each"
    );
    let read: BTreeSet<u32> = configs.iter().copied().collect();
    let guarded: BTreeSet<u32> = firewalls.iter().copied().collect();
    let all: BTreeSet<u32> = sim.guest_ids().into_iter().collect();
    assert_eq!(read, all, "every guest's config read within the window");
    assert_eq!(
        guarded, all,
        "every guest's firewall options read within the window"
    );
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// Waits for `check` and gives how many passes ended from `from` until it held.
async fn passes_until(
    agent: &InProcessAgent,
    from: u64,
    what: &str,
    mut check: impl FnMut() -> bool,
) -> u64 {
    eventually(
        Duration::from_secs(60),
        what,
        || std::future::ready(check()),
    )
    .await;
    passes(agent) - from
}

/// Changes made behind the agent's back, by the node's administrator: one the container list
/// shows (`cores`) is corrected at the next pass; the guest's firewall switched off and an
/// interface's `firewall=1` dropped, which only the guest's own reads show, within
/// [`REFRESH_PASSES`] passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_behind_the_agents_back_is_still_seen() {
    let (sim, hub, agent) = steady().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let root = root_client(&sim);
    let ids = sim.guest_ids();

    // Cores: the listing's `cpus` moves.
    let vmid = Vmid::new(ids[3]).unwrap();
    let set = CtOptions {
        cores: Some(4),
        ..CtOptions::default()
    };
    root.update_ct_config(
        vmid,
        &ConfigUpdate {
            set,
            ..ConfigUpdate::default()
        },
    )
    .await
    .unwrap();
    let from = passes(&agent);
    let took = passes_until(&agent, from, "cores back to 2", || {
        sim.guest_config(vmid.get())
            .is_some_and(|c| c.get("cores").map(String::as_str) == Some("2"))
    })
    .await;
    assert!(took <= 2, "cores corrected after {took} passes");

    // The guest's own firewall switched off in its firewall file: no listing shows it.
    let vmid = ids[7];
    let mut options = sim.guest_firewall(vmid).unwrap();
    options.insert("enable".into(), "0".into());
    assert!(sim.set_guest_firewall(vmid, options));
    let from = passes(&agent);
    let took = passes_until(&agent, from, "the guest's firewall on again", || {
        guarded(&sim, vmid)
    })
    .await;
    assert!(
        took <= REFRESH_PASSES + 1,
        "firewall on again after {took} passes"
    );

    // `firewall=1` dropped from an interface: the config's digest moves, the listing does not.
    let vmid = Vmid::new(ids[12]).unwrap();
    let config = root.ct_config(vmid).await.unwrap();
    let mut net = NetConfig::parse(&config.get_str("net0").unwrap()).unwrap();
    net.firewall = Some(false);
    let mut set = CtOptions::default();
    set.net.insert(0, net);
    root.update_ct_config(
        vmid,
        &ConfigUpdate {
            set,
            ..ConfigUpdate::default()
        },
    )
    .await
    .unwrap();
    assert!(!guarded(&sim, vmid.get()));
    let from = passes(&agent);
    let took = passes_until(&agent, from, "firewall=1 back on net0", || {
        guarded(&sim, vmid.get())
    })
    .await;
    assert!(
        took <= REFRESH_PASSES + 1,
        "firewall=1 back after {took} passes"
    );
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
