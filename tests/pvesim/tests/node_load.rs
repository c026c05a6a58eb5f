//! The node's load as a test sets it (`/_sim/node/load`, `SimHandle::set_node_load`), seen in
//! `GET /nodes` and `GET /nodes/{node}/status`.

use crate::common;

use bosun_pvesim::NodeLoad;
use common::start;
use serde_json::json;

#[tokio::test]
async fn a_set_load_shows_in_the_node_status_and_the_node_list() {
    let sim = start().await;
    let before = sim.call("GET", "/nodes/pve/status", &[]).await;
    assert_eq!(before.status, 200);
    let total = before.data()["rootfs"]["total"].as_u64().unwrap();
    assert!(
        before.data()["cpu"].as_f64().unwrap() < 0.5,
        "a quiet node by default"
    );

    let ep = sim.handle.endpoint().clone();
    let url = format!("{}/node/load", ep.admin_url);
    let unauthorized = sim
        .client
        .post(&url)
        .json(&json!({"cpu": 0.5}))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status().as_u16(), 401);
    let set = sim
        .client
        .post(&url)
        .bearer_auth(&ep.admin_token)
        .json(&json!({"cpu": 0.97, "memory_used": 60u64 << 30, "rootfs_used": total / 2, "loadavg": [15.5, 12.0, 8.25]}))
        .send()
        .await
        .unwrap();
    assert_eq!(set.status().as_u16(), 200);
    let status = sim.call("GET", "/nodes/pve/status", &[]).await;
    let data = status.data();
    assert_eq!(data["cpu"], 0.97);
    assert_eq!(data["memory"]["used"], 60u64 << 30);
    assert_eq!(data["memory"]["free"], (64u64 << 30) - (60u64 << 30));
    assert_eq!(data["rootfs"]["used"], total / 2);
    assert_eq!(
        data["loadavg"],
        json!(["15.50", "12.00", "8.25"]),
        "strings, as PVE sends them"
    );
    let nodes = sim.call("GET", "/nodes", &[]).await;
    assert_eq!(nodes.data()[0]["cpu"], 0.97);
    assert_eq!(nodes.data()[0]["disk"], total / 2);

    // Values the node cannot have are refused and change nothing.
    for bad in [
        json!({"cpu": 1.5}),
        json!({"rootfs_used": total + 1}),
        json!({"memory_used": 65u64 << 30}),
        json!({"bogus": 1}),
        json!({"cpu": "high"}),
    ] {
        let r = sim
            .client
            .post(&url)
            .bearer_auth(&ep.admin_token)
            .json(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{bad}");
    }
    assert!(
        sim.handle
            .set_node_load(NodeLoad {
                cpu: Some(-0.1),
                ..NodeLoad::default()
            })
            .is_err()
    );
    assert_eq!(
        sim.call("GET", "/nodes/pve/status", &[]).await.data()["cpu"],
        0.97
    );

    // Unset again: the simulator's own values.
    sim.handle.set_node_load(NodeLoad::default()).unwrap();
    let after = sim.call("GET", "/nodes/pve/status", &[]).await;
    assert_eq!(after.data()["cpu"], before.data()["cpu"]);
    assert_eq!(
        after.data()["rootfs"]["used"],
        before.data()["rootfs"]["used"]
    );
    sim.handle.shutdown().await;
}
