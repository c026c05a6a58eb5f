//! A fair share for every guest (decision 0100), against the real hub and the simulated node:
//! each guest's share class reaches Proxmox's config as Proxmox stores it (`cpuunits` a number,
//! `cpulimit` a string, `rate=` inside each `netN`); a change made behind the agent's back is
//! corrected; and a hub that starves one guest or lets another loose gets the signed plan's
//! bounds applied instead, reported refused, with no guest stopped or destroyed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::*;
use bosun_proto::share::ShareBounds;
use bosun_pve::{ConfigUpdate, CtOptions, NetConfig, Pve, Vmid};
use serde_json::{Value, json};
use uuid::Uuid;

/// The operator's bounds: weight 20..=400, CPU a quarter core to 4 cores, rate 2..=200 MB/s.
fn bounds() -> ShareBounds {
    ShareBounds {
        cpu_weight_min: Some(20),
        cpu_weight_max: Some(400),
        cpu_limit_min_millicores: Some(250),
        cpu_limit_max_millicores: Some(4000),
        net_rate_min_mbytes_per_s: Some(2),
        net_rate_max_mbytes_per_s: Some(200),
    }
}

/// Two running guests, `noisy` in class `capped` and `quiet` in `default`, under a signed plan
/// with [`bounds`].
fn desired_with(
    sim: &bosun_pvesim::SimHandle,
    host: Uuid,
    guests: [(Uuid, &str); 2],
    classes: Value,
) -> Value {
    let mut d = desired(sim, &guests, "running");
    d["guests"][0]["share_class"] = "capped".into();
    d["share_classes"] = classes;
    let mut plan = signing::plan_of(&d, host);
    plan.guest_share = Some(bounds());
    d["data_plan"] = signing::signed_plan(&plan);
    d
}

/// `vmid`'s config as the simulator holds it, and its `net0`'s `rate=` (None: none).
fn share_of(
    sim: &bosun_pvesim::SimHandle,
    vmid: u32,
) -> (Option<String>, Option<String>, Option<String>) {
    let conf = sim.guest_config(vmid).unwrap_or_default();
    let rate = conf.get("net0").and_then(|n| {
        n.split(',')
            .find_map(|p| p.strip_prefix("rate="))
            .map(str::to_owned)
    });
    (
        conf.get("cpuunits").cloned(),
        conf.get("cpulimit").cloned(),
        rate,
    )
}

async fn until_share(
    sim: &bosun_pvesim::SimHandle,
    vmid: u32,
    what: &str,
    want: (Option<&str>, Option<&str>, Option<&str>),
) {
    eventually(Duration::from_secs(60), what, || {
        let sim = sim.clone();
        async move {
            let (units, limit, rate) = share_of(&sim, vmid);
            (units.as_deref(), limit.as_deref(), rate.as_deref()) == want
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_reach_proxmox_drift_is_corrected_and_a_hostile_hub_gets_the_plans_bounds() {
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let (noisy, quiet) = (Uuid::new_v4(), Uuid::new_v4());
    let guests = [(noisy, "noisy"), (quiet, "quiet")];
    let classes = json!([
        { "name": "capped", "cpu_weight": 50, "cpu_limit_millicores": 500, "net_rate_mbytes_per_s": 10 },
        { "name": "default", "cpu_weight": 300, "net_rate_mbytes_per_s": 100 },
    ]);
    hub.put_desired(host, &desired_with(&sim, host, guests, classes))
        .await;
    let status = agent.handles.reconcile.clone();
    let noisy_vmid = running_vmid(&status, noisy).await;
    let quiet_vmid = running_vmid(&status, quiet).await;

    // What each class says reaches the config, as Proxmox stores it.
    until_share(
        &sim,
        noisy_vmid,
        "noisy capped",
        (Some("50"), Some("0.5"), Some("10")),
    )
    .await;
    // The default class names no CPU limit: the plan's ceiling is the limit.
    until_share(
        &sim,
        quiet_vmid,
        "quiet at default",
        (Some("300"), Some("4"), Some("100")),
    )
    .await;
    let pve = root_client(&sim);
    let typed = pve.ct_config(Vmid::new(noisy_vmid).unwrap()).await.unwrap();
    assert_eq!(typed.get_u64("cpuunits"), Some(50));
    assert_eq!(typed.get_str("cpulimit").as_deref(), Some("0.5"));

    // Behind the agent's back: the noisy guest unlimited and weighted up. Corrected.
    let vmid = Vmid::new(noisy_vmid).unwrap();
    let config = pve.ct_config(vmid).await.unwrap();
    let mut net0 = NetConfig::parse(&config.get_str("net0").unwrap()).unwrap();
    net0.rate = None;
    let mut set = CtOptions {
        cpuunits: Some(10_000),
        ..CtOptions::default()
    };
    set.net.insert(0, net0);
    pve.update_ct_config(
        vmid,
        &ConfigUpdate {
            set,
            delete: vec!["cpulimit".into()],
            digest: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        share_of(&sim, noisy_vmid),
        (Some("10000".into()), None, None)
    );
    until_share(
        &sim,
        noisy_vmid,
        "drift corrected",
        (Some("50"), Some("0.5"), Some("10")),
    )
    .await;

    // A hostile hub starves the quiet guest (the least of everything validation takes) and
    // lets the noisy one loose (the most): each is held at the plan's bound.
    let hostile = json!([
        { "name": "capped", "cpu_weight": 10000, "cpu_limit_millicores": 8192000, "net_rate_mbytes_per_s": 100000 },
        { "name": "default", "cpu_weight": 1, "cpu_limit_millicores": 10, "net_rate_mbytes_per_s": 1 },
    ]);
    sim.clear_requests();
    hub.put_desired_unplanned(host, &desired_with(&sim, host, guests, hostile))
        .await;
    until_share(
        &sim,
        quiet_vmid,
        "starving held at the floor",
        (Some("20"), Some("0.25"), Some("2")),
    )
    .await;
    until_share(
        &sim,
        noisy_vmid,
        "loosening held at the ceiling",
        (Some("400"), Some("4"), Some("200")),
    )
    .await;
    eventually(
        Duration::from_secs(60),
        "the refusals reported to the hub",
        || {
            let hub = &hub;
            async move {
                let refused = hub.host(host).await["last_report"]["refused"].clone();
                let fields: Vec<String> = refused
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r["field"].as_str().map(str::to_owned))
                    .collect();
                let count = |f: &str| fields.iter().filter(|x| *x == f).count();
                // Each field refused for both guests: one at its floor, one at its ceiling.
                count("share_class.cpu_weight") == 2
                    && count("share_class.cpu_limit_millicores") == 2
                    && count("share_class.net_rate_mbytes_per_s") == 2
            }
        },
    )
    .await;
    assert!(destructive(&sim).is_empty(), "{:?}", destructive(&sim));
    for vmid in [noisy_vmid, quiet_vmid] {
        assert_eq!(sim.guest_running(vmid), Some(true), "{vmid} still runs");
    }
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
