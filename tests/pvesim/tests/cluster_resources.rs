//! What PVE 9.1 serves that the agent's next features read: `GET /cluster/resources` (every
//! guest, storage and node the caller may audit, narrowed by `type`) and the node status's
//! `memory.available`, which the 9.1 schema requires and 8.4 does not have.

use crate::common;

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

/// A node of a cluster: `GET /cluster/status` names the cluster and its nodes (the node alone
/// while standalone); a guest migrated to another node is listed there by
/// `GET /cluster/resources` with its tags, leaves this node's list, and its vmid stays taken
/// cluster-wide: `nextid` skips it and a create with it fails as PVE's does.
#[tokio::test]
async fn a_guest_migrated_to_another_node_is_listed_there_and_its_vmid_stays_taken() {
    let sim = start().await;
    let standalone = sim.call("GET", "/cluster/status", &[]).await;
    assert_eq!(standalone.status, 200);
    let items = standalone.data().as_array().unwrap().clone();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["type"], "node");
    assert_eq!(items[0]["local"], 1);

    sim.restore_golden(100).await;
    sim.handle.join_cluster("lab", &["pve2"]);
    let status = sim.call("GET", "/cluster/status", &[]).await;
    let items = status.data().as_array().unwrap().clone();
    let cluster = items.iter().find(|i| i["type"] == "cluster").unwrap();
    assert_eq!(
        (cluster["name"].clone(), cluster["nodes"].clone()),
        ("lab".into(), 2.into())
    );
    assert_eq!(cluster["quorate"], 1);
    assert_eq!(items.iter().filter(|i| i["type"] == "node").count(), 2);
    // Membership needs Sys.Audit on /.
    let narrow = sim.narrow_token("VmsOnly", &["VM.Audit"], "vmsonly");
    assert_eq!(
        sim.call_as(&narrow, "GET", "/cluster/status", &[])
            .await
            .status,
        403
    );

    assert!(
        sim.handle.migrate_guest(100, "pve9").is_err(),
        "no such node"
    );
    assert!(
        sim.handle.migrate_guest(555, "pve2").is_err(),
        "no such guest"
    );
    sim.handle.migrate_guest(100, "pve2").unwrap();
    let vms = sim
        .call("GET", "/cluster/resources", &[("type", "vm")])
        .await;
    let vms = vms.data().as_array().unwrap().clone();
    let moved = vms.iter().find(|i| i["vmid"] == 100).unwrap();
    assert_eq!(moved["node"], "pve2", "{vms:?}");
    let here = sim.call("GET", "/nodes/pve/lxc", &[]).await;
    assert!(
        here.data()
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["vmid"] != 100),
        "{:?}",
        here.data()
    );
    let next = sim.call("GET", "/cluster/nextid", &[]).await;
    assert_eq!(next.data(), "101");
    let taken = sim.call("GET", "/cluster/nextid", &[("vmid", "100")]).await;
    assert_eq!(taken.status, 400);
    let golden = sim.handle.endpoint().golden_volid.clone();
    let create = sim.restore("100", &golden, &[]).await;
    assert_eq!(create.status, 500);
    assert!(
        create
            .message()
            .contains("CT 100 already exists on node 'pve2'"),
        "{}",
        create.message()
    );

    sim.handle.migrate_guest_back(100).unwrap();
    let next = sim.call("GET", "/cluster/nextid", &[]).await;
    assert_eq!(next.data(), "101");
    assert!(sim.handle.guest_ids().contains(&100));
}
