//! Guests come up in an order (decision 0099): a customer's shop of three guests, web on app on
//! db, is added to the host's desired state listed web first, each naming what it `provides`
//! and `requires`. The agent restores and starts db, then app, then web (read back from the
//! simulator's request log), and each carries its place in Proxmox's own `startup` option
//! (read back from its config), so a node's boot and shutdown keep the order too. `bosunctl
//! explain --order` prints the order, what waits on what and what holds a guest now. The step
//! prints the bring-up's time, from the desired state stored to all three running.
//!
//! A hub then closes the chain into a cycle (db requires what web provides): the agent refuses
//! each requirement of the cycle with its reason (the report, `explain --order`), waits on none
//! of them and keeps every guest running; the operator's fixed document is applied again.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bosun_pve::{Pve as _, Vmid};
use serde_json::{Value, json};
use uuid::Uuid;

use super::children::Children;
use super::labels::ctl_plain;
use super::scenario::{CONVERGE, applied, check, converge, observed, vmid_of, write_json};
use super::sim::{self, SimEndpoint};
use super::{DemoError, Narrator, backup_tiers};
use bosunctl::client::HubClient;
use bosunctl::status::FleetStatus;

/// The shop's guests, first up first: name, what it provides, what it requires.
pub const CHAIN: [(&str, &str, Option<&str>); 3] = [
    ("db", "db", None),
    ("app", "app", Some("db")),
    ("web", "web", Some("app")),
];

/// What the step established.
#[derive(Debug, Clone, Default)]
pub struct OrderOutcome {
    /// The shop's guests by name, with their vmids.
    pub vmids: BTreeMap<String, u32>,
    /// The guests' restores, in the order they reached Proxmox.
    pub restores: Vec<String>,
    /// The guests' starts, in the order they reached Proxmox.
    pub starts: Vec<String>,
    /// Each guest's `startup` as Proxmox stores it, first up first.
    pub startup: Vec<(String, String)>,
    /// From the desired state stored to all three running (the hub's view).
    pub bring_up: Duration,
    /// What `bosunctl explain --order` printed for the chain.
    pub explained: String,
    /// The report's refusals of the cycle, each as every view prints it.
    pub cycle_refused: Vec<String>,
    /// What `bosunctl explain --order` printed for the cycle.
    pub cycle_explained: String,
    /// Whether every guest of the shop ran throughout the cycle.
    pub ran_through_cycle: bool,
}

/// The host's desired state as the hub holds it.
pub(super) fn current_desired(fleet: &FleetStatus) -> Result<Value, DemoError> {
    fleet
        .hosts
        .first()
        .and_then(|h| h.desired.as_ref())
        .map(serde_json::to_value)
        .transpose()
        .map_err(|e| DemoError::Check(format!("the host's desired state: {e}")))?
        .ok_or_else(|| DemoError::Check("the host has no desired state".to_owned()))
}

/// The shop's guests (web, app, db: listed against their order), each made like guest alpha
/// (its size and golden archive; none of its pins, volumes, thresholds or address), for one
/// customer.
fn shop(document: &Value, ids: &BTreeMap<&str, Uuid>) -> Result<Vec<Value>, DemoError> {
    let alpha = document["guests"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["hostname"] == "alpha")
        .ok_or_else(|| DemoError::Check("guest alpha is not in desired state".to_owned()))?;
    let mut guests = Vec::new();
    for (name, provides, requires) in CHAIN.iter().rev() {
        let mut guest = alpha.clone();
        if let Some(spec) = guest.as_object_mut() {
            for own in [
                "vmid",
                "bulk_volumes",
                "hot_volumes",
                "thresholds",
                "share_class",
                "network",
            ] {
                spec.remove(own);
            }
        }
        guest["guest_id"] = json!(ids[name]);
        guest["hostname"] = json!(name);
        guest["customer"] = json!({ "customer_id": "cust-shop", "display_name": "Customer shop" });
        guest["provides"] = json!([provides]);
        guest["requires"] = json!(requires.iter().collect::<Vec<_>>());
        guests.push(guest);
    }
    Ok(guests)
}

/// `document` with `guests` in place of the shop's guests it holds (added when it holds none).
fn with_shop(mut document: Value, guests: &[Value]) -> Value {
    let ids: Vec<&Value> = guests.iter().map(|g| &g["guest_id"]).collect();
    if let Some(list) = document["guests"].as_array_mut() {
        list.retain(|g| !ids.contains(&&g["guest_id"]));
        list.extend(guests.iter().cloned());
    }
    document
}

/// The step; see the module documentation.
pub(super) async fn ordered_bring_up(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    host_id: Uuid,
) -> Result<OrderOutcome, DemoError> {
    let host_arg = host_id.to_string();
    let ids: BTreeMap<&str, Uuid> = CHAIN.iter().map(|(n, ..)| (*n, Uuid::new_v4())).collect();
    let document = current_desired(&FleetStatus::fetch(client, 50).await?)?;
    let guests = shop(&document, &ids)?;
    let document = with_shop(document, &guests);
    let file = out.join("operator/desired-shop.json");
    write_json(&file, &document)?;
    // The simulator's log so far: a vmid the chain takes may have been another guest's before.
    let before = sim::sim_requests(sim).await?.len();
    let asked = Instant::now();
    backup_tiers::set_desired(bins, out, &host_arg, &file).await?;
    n.detail("$ bosunctl desired set --host … desired-shop.json   (guests web, app, db listed in that order; web \"requires\": [\"app\"], app \"provides\": [\"app\"], \"requires\": [\"db\"], db \"provides\": [\"db\"])");
    let fleet = converge(children, client, "db, app and web running", |f| {
        ids.values().all(|id| observed(f, *id) == "running")
    })
    .await?;
    let bring_up = asked.elapsed();
    let mut vmids = BTreeMap::new();
    for (name, id) in &ids {
        vmids.insert((*name).to_owned(), vmid_of(&fleet, *id)?);
    }
    n.detail(format!(
        "bring-up: desired state stored → db, app and web running, as the hub shows it: {:.1} s",
        bring_up.as_secs_f64()
    ));

    // The simulator's log: each restore and start of the shop, in the order they came.
    let by_vmid = |vmid: u32| {
        vmids
            .iter()
            .find(|(_, v)| **v == vmid)
            .map(|(n, _)| n.clone())
    };
    let log: Vec<_> = sim::sim_requests(sim)
        .await?
        .into_iter()
        .skip(before)
        .collect();
    let restores: Vec<String> = log
        .iter()
        .filter(|r| r.creates_container())
        .filter_map(|r| r.param("vmid")?.parse().ok().and_then(by_vmid))
        .collect();
    let starts: Vec<String> = log
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/status/start"))
        .filter_map(|r| r.path.split('/').nth(4)?.parse().ok().and_then(by_vmid))
        .collect();
    let order: Vec<String> = CHAIN.iter().map(|(n, ..)| (*n).to_owned()).collect();
    check(restores == order && starts == order, || {
        format!("the simulator saw restores {restores:?} and starts {starts:?}, not {order:?}")
    })?;
    n.detail(format!(
        "simulator log: restored {}; started {} (each only once what it requires ran)",
        restores.join(", "),
        starts.join(", ")
    ));

    let startup = startup_of(n, sim, &vmids).await?;
    let explained = ctl_plain(bins, out, &["explain", "--host", &host_arg, "--order"]).await?;
    n.detail(format!("$ bosunctl explain --host {host_arg} --order"));
    for line in explained.lines() {
        n.detail(format!("  {line}"));
    }
    let places: Vec<Option<usize>> = ["1. db", "2. app", "3. web"]
        .iter()
        .map(|p| explained.find(p))
        .collect();
    check(
        places
            .windows(2)
            .all(|w| matches!((w[0], w[1]), (Some(a), Some(b)) if a < b))
            && explained.contains("waits on db")
            && explained.contains("waits on app")
            && !explained.contains("refused"),
        || format!("`explain --order` printed:\n{explained}"),
    )?;

    let (cycle_refused, cycle_explained, ran_through_cycle) = cycle(
        n,
        children,
        client,
        (bins, out),
        &host_arg,
        (&document, &guests, &ids),
    )
    .await?;
    n.conclude(format!(
        "db, app, web up in {:.1} s, startup order=1..3; a cycle refused ({} requirements), then fixed",
        bring_up.as_secs_f64(),
        cycle_refused.len()
    ));
    Ok(OrderOutcome {
        vmids,
        restores,
        starts,
        startup,
        bring_up,
        explained,
        cycle_refused,
        cycle_explained,
        ran_through_cycle,
    })
}

/// Waits for each guest's `startup` to carry its place; gives them, first up first.
async fn startup_of(
    n: &mut Narrator,
    sim: &SimEndpoint,
    vmids: &BTreeMap<String, u32>,
) -> Result<Vec<(String, String)>, DemoError> {
    let pve = sim::pve_client(sim)?;
    let mut seen = Vec::new();
    for (place, (name, ..)) in CHAIN.iter().enumerate() {
        let vmid = vmids[*name];
        let id = Vmid::new(vmid).map_err(|e| DemoError::Check(format!("vmid {vmid}: {e}")))?;
        let want = format!("order={},up=0,down=60", place + 1);
        let deadline = Instant::now() + CONVERGE;
        let startup = loop {
            let config = pve.ct_config(id).await.map_err(|source| DemoError::Pve {
                what: "GET config",
                source,
            })?;
            let startup = config.get_str("startup").unwrap_or_default();
            if startup == want {
                break startup;
            }
            if Instant::now() >= deadline {
                return Err(DemoError::Check(format!(
                    "{name} (CT {vmid}) has startup {startup:?}, not {want}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        n.detail(format!(
            "proxmox: CT {vmid} ({name}) startup: {startup}   (pct config {vmid}; a node's boot starts by order, its shutdown stops in reverse)"
        ));
        seen.push(((*name).to_owned(), startup));
    }
    Ok(seen)
}

/// The hub's cycle, refused and reported, then the operator's fixed document applied again.
/// Gives the refusals' lines, what `explain --order` printed and whether every guest ran
/// throughout.
async fn cycle(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    host_arg: &str,
    (document, guests, ids): (&Value, &[Value], &BTreeMap<&str, Uuid>),
) -> Result<(Vec<String>, String, bool), DemoError> {
    let mut looped = guests.to_vec();
    for guest in &mut looped {
        match guest["hostname"].as_str() {
            Some("db") => guest["requires"] = json!(["web"]),
            Some("web") => guest["provides"] = json!(["web"]),
            _ => {}
        }
    }
    let file = out.join("operator/desired-shop-cycle.json");
    write_json(&file, &with_shop(document.clone(), &looped))?;
    backup_tiers::set_desired(bins, out, host_arg, &file).await?;
    n.detail("$ bosunctl desired set --host … desired-shop-cycle.json   (the hub closes the chain: db \"requires\": [\"web\"], web \"provides\": [\"web\"])");
    let order_refusals = |f: &FleetStatus| -> Vec<String> {
        backup_tiers::report(f)
            .map(|r| r.refused.as_slice())
            .unwrap_or_default()
            .iter()
            .filter(|r| {
                r.field
                    .as_deref()
                    .is_some_and(|x| x.starts_with("requires."))
            })
            .map(bosun_proto::refused::Refused::line)
            .collect()
    };
    let fleet = converge(children, client, "the cycle's refusals reported", |f| {
        order_refusals(f).len() == 3
    })
    .await?;
    let refused = order_refusals(&fleet);
    for line in &refused {
        n.detail(format!("agent refuses: {line}"));
    }
    check(
        refused
            .iter()
            .all(|l| l.contains("closes a cycle through app, db, web")),
        || format!("the refusals: {refused:?}"),
    )?;
    let running = |f: &FleetStatus| ids.values().all(|id| observed(f, *id) == "running");
    let ran = running(&fleet);
    let explained = ctl_plain(bins, out, &["explain", "--host", host_arg, "--order"]).await?;
    n.detail(format!("$ bosunctl explain --host {host_arg} --order"));
    // The refusals, each with the lines it wraps onto.
    for line in explained
        .lines()
        .skip_while(|l| !l.starts_with("refused: "))
    {
        n.detail(format!("  {line}"));
    }
    check(explained.matches("refused: ").count() == 3, || {
        format!("`explain --order` printed:\n{explained}")
    })?;
    check(ran, || {
        "a guest of the shop stopped under the cycle".to_owned()
    })?;
    n.detail("hub: db, app and web still running: the agent waits on no refused requirement");

    let file = out.join("operator/desired-shop-fixed.json");
    write_json(&file, document)?;
    backup_tiers::set_desired(bins, out, host_arg, &file).await?;
    n.detail(
        "$ bosunctl desired set --host … desired-shop-fixed.json   (the operator's chain again)",
    );
    let fixed = converge(children, client, "the fixed order applied", |f| {
        let generation = f.hosts.first().map_or(0, |h| h.summary.desired_generation);
        applied(f, generation) && order_refusals(f).is_empty()
    })
    .await?;
    let ran = ran && running(&fixed);
    n.detail(
        "hub: the order refuses nothing, the generation is applied, every guest of the shop runs",
    );
    Ok((refused, explained, ran))
}
