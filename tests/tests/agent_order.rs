//! Guests come up and go down in an order (decision 0099), end to end: the simulator, a real
//! hub over TLS and the real agent. A chain db ← app ← web (listed web first) is provisioned
//! link by link — each guest's restore reaches Proxmox only after what it requires started —
//! and every guest carries its place in Proxmox's own `startup` option; after a node reboot
//! (every guest down, the agent restarted) they start db, app, web; torn down (desired
//! stopped) they shut down web, app, db; `bosunctl explain --order` prints the order.
//!
//! A hostile hub's order starves nothing: a cycle and a requirement nobody provides are
//! refused with their reasons in the report and the audit log, the generation is not applied,
//! and every guest keeps running (one that goes down is started again at once).
//!
//! Needs the workspace's binaries built (`cargo build --workspace --bins`; `make test` does).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use agent_support::*;
use bosun_pvesim::SimHandle;
use serde_json::{Value, json};
use uuid::Uuid;

/// db ← app ← web, all `power`, listed web first: the order is the requirements'.
fn chain(sim: &SimHandle, ids: &BTreeMap<&str, Uuid>, power: &str) -> Value {
    let guests: Vec<(Uuid, &str)> = ["web", "app", "db"]
        .iter()
        .map(|name| (ids[name], *name))
        .collect();
    let mut doc = desired(sim, &guests, power);
    doc["guests"][0]["requires"] = json!(["app"]);
    doc["guests"][1]["provides"] = json!(["app"]);
    doc["guests"][1]["requires"] = json!(["db"]);
    doc["guests"][2]["provides"] = json!(["db"]);
    doc
}

/// The vmids the agent's requests of `kind` (`restore`, `start`, `shutdown`) named, in the
/// order they reached the simulator.
fn sent(sim: &SimHandle, kind: &str) -> Vec<u32> {
    let agent = sim.endpoint().tokens.agent.id.clone();
    sim.requests()
        .into_iter()
        .filter(|r| r.token_id.as_deref() == Some(agent.as_str()) && r.method == "POST")
        .filter_map(|r| match kind {
            "restore" if r.path.ends_with("/lxc") => r
                .params
                .iter()
                .find(|(k, _)| k == "vmid")
                .and_then(|(_, v)| v.parse().ok()),
            "start" | "shutdown" if r.path.ends_with(&format!("/status/{kind}")) => {
                r.path.split('/').nth(4).and_then(|v| v.parse().ok())
            }
            _ => None,
        })
        .collect()
}

/// The guests' vmids by name, from the agent's report.
fn vmids(agent: &InProcessAgent, ids: &BTreeMap<&str, Uuid>) -> BTreeMap<String, u32> {
    let status = agent.handles.reconcile.borrow();
    ids.iter()
        .filter_map(|(name, id)| {
            status
                .guests
                .iter()
                .find(|g| g.guest_id == Some(*id))
                .map(|g| ((*name).to_owned(), g.vmid))
        })
        .collect()
}

fn names(vmids: &BTreeMap<String, u32>, sent: &[u32]) -> Vec<String> {
    sent.iter()
        .map(|v| {
            vmids
                .iter()
                .find(|(_, vmid)| *vmid == v)
                .map_or_else(|| v.to_string(), |(n, _)| n.clone())
        })
        .collect()
}

async fn all_report(agent: &InProcessAgent, ids: &BTreeMap<&str, Uuid>, status: &str) {
    let want = status.to_owned();
    eventually(
        Duration::from_secs(90),
        &format!("every guest {status}"),
        || {
            let ok = ids.values().all(|id| {
                agent
                    .handles
                    .reconcile
                    .borrow()
                    .guests
                    .iter()
                    .any(|g| g.guest_id == Some(*id) && json!(g.status) == json!(want))
            });
            async move { ok }
        },
    )
    .await;
}

/// Runs the real `bosunctl explain --host HOST --order` against `hub`; gives its stdout.
async fn explain_order(hub: &RealHub, host: Uuid) -> String {
    let exe = std::env::current_exe().unwrap();
    let bosunctl = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("bosunctl");
    assert!(
        bosunctl.is_file(),
        "{} is missing: build the workspace's binaries first",
        bosunctl.display()
    );
    let home = tempfile::tempdir().unwrap();
    let child = tokio::process::Command::new(bosunctl)
        .args(["--hub-url", &hub.url, "--fingerprint", &hub.fingerprint])
        .args(["explain", "--host", &host.to_string(), "--order"])
        .env_clear()
        .env("HOME", home.path())
        .env("BOSUN_ADMIN_TOKEN", &hub.admin)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("bosunctl finishes within a minute")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_comes_up_after_a_reboot_and_goes_down_in_order_with_proxmox_startup_set() {
    let (sim, hub, files) = enrolled_stack().await;
    let mut agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let ids: BTreeMap<&str, Uuid> = ["db", "app", "web"]
        .into_iter()
        .map(|n| (n, Uuid::new_v4()))
        .collect();

    // Bring-up: each guest is restored only once what it requires has started.
    let asked = Instant::now();
    hub.put_desired(host, &chain(&sim, &ids, "running")).await;
    all_report(&agent, &ids, "running").await;
    let bring_up = asked.elapsed();
    eprintln!(
        "figure: a three-guest ordered bring-up on the simulator took {} ms (desired state stored to all three running)",
        bring_up.as_millis()
    );
    let vmids = vmids(&agent, &ids);
    let restores = names(&vmids, &sent(&sim, "restore"));
    let starts = names(&vmids, &sent(&sim, "start"));
    assert_eq!(restores, ["db", "app", "web"], "restores: {restores:?}");
    assert_eq!(starts, ["db", "app", "web"], "starts: {starts:?}");
    let log = sim.requests();
    let at = |kind: &str, name: &str| {
        let agent_id = sim.endpoint().tokens.agent.id.clone();
        log.iter()
            .position(|r| {
                r.token_id.as_deref() == Some(agent_id.as_str())
                    && r.method == "POST"
                    && match kind {
                        "restore" => {
                            r.path.ends_with("/lxc")
                                && r.params
                                    .iter()
                                    .any(|(k, v)| k == "vmid" && *v == vmids[name].to_string())
                        }
                        _ => r
                            .path
                            .ends_with(&format!("/lxc/{}/status/start", vmids[name])),
                    }
            })
            .unwrap()
    };
    assert!(
        at("start", "db") < at("restore", "app"),
        "app before db ran"
    );
    assert!(
        at("start", "app") < at("restore", "web"),
        "web before app ran"
    );

    // Proxmox's own order: a node's start at boot and stop at shutdown follow it.
    for (name, place) in [("db", 1), ("app", 2), ("web", 3)] {
        let want = format!("order={place},up=0,down=60");
        eventually(
            Duration::from_secs(30),
            &format!("{name} carries startup {want}"),
            || {
                let got = sim
                    .guest_config(vmids[name])
                    .and_then(|c| c.get("startup").cloned());
                let ok = got.as_deref() == Some(want.as_str());
                async move { ok }
            },
        )
        .await;
    }
    let explained = explain_order(&hub, host).await;
    let db = explained.find("1. db").expect(&explained);
    let app = explained.find("2. app").expect(&explained);
    let web = explained.find("3. web").expect(&explained);
    assert!(db < app && app < web, "{explained}");
    assert!(explained.contains("waits on db"), "{explained}");
    assert!(!explained.contains("refused"), "{explained}");

    // A node reboot: every guest down (none is onboot), the agent started again. They come
    // back db, app, web.
    agent.stop().await;
    for vmid in vmids.values() {
        assert!(sim.stop_guest(*vmid));
    }
    sim.clear_requests();
    agent = InProcessAgent::start(&files.config_path).await;
    all_report(&agent, &ids, "running").await;
    let starts = names(&vmids, &sent(&sim, "start"));
    assert_eq!(starts, ["db", "app", "web"], "after the reboot: {starts:?}");

    // Torn down: web, then app, then db.
    sim.clear_requests();
    hub.put_desired(host, &chain(&sim, &ids, "stopped")).await;
    all_report(&agent, &ids, "stopped").await;
    let shutdowns = names(&vmids, &sent(&sim, "shutdown"));
    assert_eq!(shutdowns, ["web", "app", "db"], "teardown: {shutdowns:?}");
    assert!(destructive(&sim).is_empty(), "{:?}", destructive(&sim));
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_and_a_requirement_nobody_provides_are_refused_and_starve_no_guest() {
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let ids: BTreeMap<&str, Uuid> = ["db", "app", "web"]
        .into_iter()
        .map(|n| (n, Uuid::new_v4()))
        .collect();
    hub.put_desired(host, &chain(&sim, &ids, "running")).await;
    all_report(&agent, &ids, "running").await;
    let vmids = vmids(&agent, &ids);

    // The hub closes the chain into a cycle (db requires web) and has web require what
    // nobody provides.
    sim.clear_requests();
    let mut hostile = chain(&sim, &ids, "running");
    hostile["guests"][0]["provides"] = json!(["web"]);
    hostile["guests"][0]["requires"] = json!(["app", "queue"]);
    hostile["guests"][2]["requires"] = json!(["web"]);
    hub.put_desired(host, &hostile).await;
    let refused = || async {
        hub.host(host).await["last_report"]["refused"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    eventually(
        Duration::from_secs(30),
        "the order's refusals are reported",
        || async { refused().await.len() == 4 },
    )
    .await;
    let reported = refused().await;
    let by_field: BTreeMap<(String, String), String> = reported
        .iter()
        .map(|r| {
            (
                (
                    r["name"].as_str().unwrap().to_owned(),
                    r["field"].as_str().unwrap().to_owned(),
                ),
                r["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let cycle = "closes a cycle through app, db, web";
    for at in [
        ("web", "requires.app"),
        ("app", "requires.db"),
        ("db", "requires.web"),
    ] {
        let key = (at.0.to_owned(), at.1.to_owned());
        let reason = by_field
            .get(&key)
            .unwrap_or_else(|| panic!("{at:?} in {reported:?}"));
        assert!(reason.contains(cycle), "{reason}");
    }
    let nobody = &by_field[&("web".to_owned(), "requires.queue".to_owned())];
    assert!(
        nobody.contains("no guest of the desired state provides queue"),
        "{nobody}"
    );
    // Audited with the same reason.
    let audited = agent
        .handles
        .journal
        .audit_since(0, 10_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.event.event == "guest.order_refused")
        .count();
    assert_eq!(audited, 4);
    // The generation is not applied while any of it is refused.
    let generation = agent.handles.reconcile.borrow().generation;
    assert!(agent.handles.reconcile.borrow().applied_generation < generation);

    // Nothing was stopped, and a guest that goes down is started again at once: the cycle
    // holds nobody back.
    assert!(sent(&sim, "shutdown").is_empty(), "{:?}", mutations(&sim));
    assert!(sim.stop_guest(vmids["db"]));
    eventually(
        Duration::from_secs(30),
        "db is started again despite the cycle",
        || {
            let up = sim.guest_running(vmids["db"]) == Some(true);
            async move { up }
        },
    )
    .await;
    assert_eq!(sent(&sim, "start"), [vmids["db"]]);
    assert!(destructive(&sim).is_empty(), "{:?}", destructive(&sim));
    let explained = explain_order(&hub, host).await;
    assert!(
        explained
            .contains("refused: web requires queue: no guest of the desired state provides queue"),
        "{explained}"
    );
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
