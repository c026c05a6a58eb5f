//! A VM's name, share and place in the node's order in the reconcile loop (decisions 0099,
//! 0100, 0125), against the real hub and agent over TLS and the simulator's QEMU guests: what
//! the guest's class and order say reaches the VM's config as Proxmox stores it; a name,
//! weight, CPU limit, network rate and `startup` changed behind the agent's back are corrected
//! on a later pass, the network device keeping its MAC, bridge and firewall; a hub changing the
//! guest's class changes the VM within the signed plan's bounds, and one that starves the VM or
//! lets it loose gets the plan's floors and ceilings instead, reported refused, the VM neither
//! stopped nor destroyed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::vm::{VmStack, part, vm_mac, vm_restores};
use agent_support::*;
use bosun_proto::share::ShareBounds;
use bosun_pve::{PveQemu, StartupOrder, VmConfigUpdate, VmNet, VmOptions, Vmid};
use serde_json::{Value, json};

/// The operator's signed bounds: weight 20..=400, CPU a quarter core to 4 cores, rate
/// 2..=200 MB/s.
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

/// The stack's desired state with its VM in class `shop` (`class`), providing `db` (so it takes
/// place 1 in the node's order), under a signed plan with [`bounds`].
fn classed(stack: &VmStack, class: Value) -> Value {
    let mut d = stack.desired.clone();
    d["guests"][0]["share_class"] = json!("shop");
    d["guests"][0]["provides"] = json!(["db"]);
    let mut class = class;
    class["name"] = json!("shop");
    d["share_classes"] = json!([class]);
    let mut plan = signing::plan_of(&d, stack.host);
    plan.guest_share = Some(bounds());
    d["data_plan"] = signing::signed_plan(&plan);
    d
}

/// What VM `vmid`'s config holds: its name, `cpuunits`, `cpulimit`, `net0`'s `rate=` and
/// `startup`, as the simulator stores them.
type Held = [Option<String>; 5];

fn held(sim: &bosun_pvesim::SimHandle, vmid: u32) -> Held {
    let conf = sim.vm_config(vmid).unwrap_or_default();
    let rate = conf
        .get("net0")
        .and_then(|n| part(n, "rate").map(str::to_owned));
    [
        conf.get("name").cloned(),
        conf.get("cpuunits").cloned(),
        conf.get("cpulimit").cloned(),
        rate,
        conf.get("startup").cloned(),
    ]
}

/// Waits until VM `vmid` holds `want` (name, weight, limit, rate; `startup` is place 1).
async fn until_held(
    sim: &bosun_pvesim::SimHandle,
    vmid: u32,
    what: &str,
    [name, weight, limit, rate]: [&str; 4],
) {
    let want: Held = [
        Some(name.to_owned()),
        Some(weight.to_owned()),
        Some(limit.to_owned()),
        Some(rate.to_owned()),
        Some("order=1,up=0,down=60".to_owned()),
    ];
    eventually(Duration::from_secs(60), what, || {
        let ok = held(sim, vmid) == want;
        async move { ok }
    })
    .await;
}

/// The share fields the hub's last report says were refused, with how often each.
async fn refused_fields(hub: &RealHub, host: uuid::Uuid) -> Vec<String> {
    let refused = hub.host(host).await["last_report"]["refused"].clone();
    refused
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["field"].as_str().map(str::to_owned))
        .filter(|f| f.starts_with("share_class."))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vms_name_share_and_order_are_kept_and_a_hostile_hub_gets_the_plans_bounds() {
    let mut stack = VmStack::running().await;
    let (sim, vmid, host) = (stack.sim.clone(), stack.vmid, stack.host);
    let id = Vmid::new(vmid).unwrap();
    let mac = vm_mac(&sim, vmid).expect("the vm's mac");

    // The class and the order reach the VM's config, as Proxmox stores them.
    let shop =
        json!({ "cpu_weight": 300, "cpu_limit_millicores": 1500, "net_rate_mbytes_per_s": 10 });
    let desired = classed(&stack, shop);
    stack.put_desired(desired).await;
    until_held(
        &sim,
        vmid,
        "the class and order applied",
        ["vm-shop", "300", "1.5", "10"],
    )
    .await;
    let net0 = sim.vm_config(vmid).unwrap()["net0"].clone();
    assert_eq!(vm_mac(&sim, vmid).as_deref(), Some(mac.as_str()), "{net0}");
    assert_eq!(part(&net0, "bridge"), Some("vmbr0"), "{net0}");
    assert_eq!(part(&net0, "firewall"), Some("1"), "{net0}");
    let typed = root_client(&sim).vm_config(id).await.unwrap();
    assert_eq!(typed.get_u64("cpuunits"), Some(300), "a number");
    assert_eq!(
        typed.get_str("cpulimit").as_deref(),
        Some("1.5"),
        "a string"
    );

    // Behind the agent's back, as root: renamed, weighted up, unlimited, its rate taken off and
    // moved to the front of the node's start order. Each is corrected, the MAC kept.
    let root = root_client(&sim);
    let mut device = VmNet::parse(&net0).unwrap();
    device.rate = None;
    root.update_vm_config(
        id,
        &VmConfigUpdate {
            set: VmOptions {
                name: Some("renamed".into()),
                cpuunits: Some(10_000),
                startup: Some(StartupOrder {
                    order: 9,
                    up: None,
                    down: None,
                }),
                net: [(0, device)].into_iter().collect(),
                ..VmOptions::default()
            },
            delete: vec!["cpulimit".into()],
            digest: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        held(&sim, vmid),
        [
            Some("renamed".into()),
            Some("10000".into()),
            None,
            None,
            Some("order=9".into())
        ]
    );
    until_held(
        &sim,
        vmid,
        "the drift corrected",
        ["vm-shop", "300", "1.5", "10"],
    )
    .await;
    let net0 = sim.vm_config(vmid).unwrap()["net0"].clone();
    assert_eq!(
        vm_mac(&sim, vmid).as_deref(),
        Some(mac.as_str()),
        "the mac is kept: {net0}"
    );
    assert_eq!(part(&net0, "bridge"), Some("vmbr0"), "{net0}");
    assert_eq!(part(&net0, "firewall"), Some("1"), "{net0}");

    // The hub moves the guest to a tighter class within the bounds: the VM follows.
    let tighter =
        json!({ "cpu_weight": 50, "cpu_limit_millicores": 500, "net_rate_mbytes_per_s": 20 });
    let desired = classed(&stack, tighter);
    stack.put_desired(desired).await;
    until_held(
        &sim,
        vmid,
        "the new class applied",
        ["vm-shop", "50", "0.5", "20"],
    )
    .await;

    // A hostile hub lets the VM loose on its neighbours (the most validation takes): held at
    // the plan's ceilings. Then it starves it (the least): held at the plan's floors.
    let loose = json!({ "cpu_weight": 10000, "cpu_limit_millicores": 8192000, "net_rate_mbytes_per_s": 100000 });
    let desired = classed(&stack, loose);
    stack.hub.put_desired_unplanned(host, &desired).await;
    until_held(
        &sim,
        vmid,
        "loosening held at the ceilings",
        ["vm-shop", "400", "4", "200"],
    )
    .await;
    let starve = json!({ "cpu_weight": 1, "cpu_limit_millicores": 10, "net_rate_mbytes_per_s": 1 });
    let desired = classed(&stack, starve);
    stack.hub.put_desired_unplanned(host, &desired).await;
    until_held(
        &sim,
        vmid,
        "starving held at the floors",
        ["vm-shop", "20", "0.25", "2"],
    )
    .await;
    eventually(
        Duration::from_secs(60),
        "the refusals reported to the hub",
        || {
            let hub = &stack.hub;
            async move {
                let mut fields = refused_fields(hub, host).await;
                fields.sort();
                fields
                    == [
                        "share_class.cpu_limit_millicores",
                        "share_class.cpu_weight",
                        "share_class.net_rate_mbytes_per_s",
                    ]
            }
        },
    )
    .await;

    // Nothing but config writes: the VM runs, is the one restore made, keeps its MAC.
    assert!(destructive(&sim).is_empty(), "{:?}", destructive(&sim));
    assert_eq!(sim.vm_running(vmid), Some(true));
    assert_eq!(sim.vm_ids(), [vmid]);
    assert_eq!(vm_restores(&sim).len(), 1);
    assert_eq!(vm_mac(&sim, vmid).as_deref(), Some(mac.as_str()));
    stack.stop().await;
}
