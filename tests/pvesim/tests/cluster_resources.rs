//! What PVE 9.1 serves that the agent's next features read: `GET /cluster/resources` (every
//! guest, storage and node the caller may audit, narrowed by `type`) and the node status's
//! `memory.available`, which the 9.1 schema requires and 8.4 does not have.

mod common;

use bosun_pvesim::{PveVersion, SimConfig};
use common::{start, start_with};

#[tokio::test]
async fn cluster_resources_list_what_the_caller_may_audit() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let all = sim.call("GET", "/cluster/resources", &[]).await;
    assert_eq!(all.status, 200);
    let items = all.data().as_array().unwrap().clone();
    let guest = items
        .iter()
        .find(|i| i["id"] == "lxc/101")
        .unwrap_or_else(|| panic!("the guest is listed: {items:?}"));
    assert_eq!(guest["type"], "lxc");
    assert_eq!(guest["vmid"], 101);
    assert_eq!(guest["node"], "pve");
    assert!(items.iter().any(|i| i["id"] == "node/pve"), "{items:?}");
    assert!(
        items.iter().any(|i| i["id"] == "storage/pve/local-lvm"),
        "{items:?}"
    );

    let vms = sim
        .call("GET", "/cluster/resources", &[("type", "vm")])
        .await;
    let vms = vms.data().as_array().unwrap().clone();
    assert!(
        !vms.is_empty() && vms.iter().all(|i| i["type"] == "lxc"),
        "{vms:?}"
    );
    let bad = sim
        .call("GET", "/cluster/resources", &[("type", "pool")])
        .await;
    assert_eq!(bad.status, 400, "a type the schema does not list");

    // A token that may audit no guest sees none.
    let narrow = sim.narrow_token("NodeOnly", &["Sys.Audit"], "nodeonly");
    let seen = sim.call_as(&narrow, "GET", "/cluster/resources", &[]).await;
    assert_eq!(seen.status, 200);
    let seen = seen.data().as_array().unwrap().clone();
    assert!(seen.iter().all(|i| i["type"] == "node"), "{seen:?}");
    assert_eq!(seen.len(), 1);
}

#[tokio::test]
async fn node_memory_has_available_in_9_1_only() {
    for (version, has) in [(PveVersion::V8_4, false), (PveVersion::V9_1, true)] {
        let sim = start_with(SimConfig {
            pve_version: version,
            ..SimConfig::fast()
        })
        .await;
        let status = sim.call("GET", "/nodes/pve/status", &[]).await;
        let memory = &status.data()["memory"];
        assert_eq!(
            memory.get("available").is_some(),
            has,
            "{version:?}: {memory}"
        );
        if has {
            assert_eq!(memory["available"], memory["free"]);
        }
    }
}
