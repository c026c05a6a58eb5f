//! Read-and-annotate endpoints real clients call: node status, pending changes, one
//! snapshot's index and config, one volume's attributes.

use crate::common;

use std::collections::BTreeMap;

use common::start;

#[tokio::test]
async fn node_status_needs_sys_audit_and_reports_the_release() {
    let sim = start().await;
    let r = sim.call("GET", "/nodes/pve/status", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let d = r.data();
    assert!(
        d["pveversion"]
            .as_str()
            .is_some_and(|v| v.starts_with("pve-manager/9.1."))
    );
    assert!(d["memory"]["total"].as_u64() > d["memory"]["used"].as_u64());
    assert!(d["rootfs"]["total"].as_u64().is_some());
    assert!(d["cpuinfo"]["cpus"].as_u64().is_some());
    let narrow = sim.narrow_token("VmOnly", &["VM.Audit"], "vmonly");
    let r = sim.call_as(&narrow, "GET", "/nodes/pve/status", &[]).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(
        r.message(),
        "Permission check failed (/nodes/pve, Sys.Audit)\n"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn pending_lists_current_pending_and_deleted_options() {
    let sim = start().await;
    sim.restore_golden(111).await;
    sim.start_ct(111).await;
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/lxc/111/config",
            &[("ostype", "ubuntu"), ("delete", "onboot")],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = sim.call("GET", "/nodes/pve/lxc/111/pending", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let items: BTreeMap<String, serde_json::Value> = r
        .data()
        .as_array()
        .expect("an array")
        .iter()
        .map(|i| (i["key"].as_str().expect("key").to_owned(), i.clone()))
        .collect();
    assert_eq!(items["ostype"]["value"], "debian");
    assert_eq!(items["ostype"]["pending"], "ubuntu");
    assert!(items["hostname"].get("pending").is_none());
    if let Some(onboot) = items.get("onboot") {
        assert_eq!(onboot["delete"], 1, "{onboot}");
    }
    let r = sim.call("GET", "/nodes/pve/lxc/999/pending", &[]).await;
    assert_eq!(r.status, 500);
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn snapshot_config_put_changes_only_the_description() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc/101/snapshot",
            &[("snapname", "before"), ("description", "first")],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");

    let idx = sim
        .call("GET", "/nodes/pve/lxc/101/snapshot/before", &[])
        .await;
    assert_eq!(idx.status, 200);
    assert_eq!(
        idx.data(),
        &serde_json::json!([{ "cmd": "rollback" }, { "cmd": "config" }])
    );

    let path = "/nodes/pve/lxc/101/snapshot/before/config";
    let before = sim.call("GET", path, &[]).await;
    assert_eq!(before.status, 200, "{before:?}");
    assert_eq!(before.data()["description"], "first");
    assert!(before.data()["snaptime"].as_i64().is_some());
    assert_eq!(before.data()["hostname"], sim_hostname(&sim, 101));

    let r = sim.call("PUT", path, &[("description", "second")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    // No other key is accepted: the schema has only `description`.
    let r = sim.call("PUT", path, &[("hostname", "evil")]).await;
    assert_eq!(r.status, 400, "{r:?}");
    let after = sim.call("GET", path, &[]).await;
    assert_eq!(after.data()["description"], "second");
    let mut a = after.data().clone();
    let mut b = before.data().clone();
    a.as_object_mut().expect("object").remove("description");
    b.as_object_mut().expect("object").remove("description");
    assert_eq!(a, b, "only the description changed");

    let r = sim
        .call("GET", "/nodes/pve/lxc/101/snapshot/nosuch/config", &[])
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "snapshot 'nosuch' does not exist\n");
    sim.handle.shutdown().await;
}

fn sim_hostname(sim: &common::Sim, vmid: u32) -> String {
    sim.handle
        .guest_config(vmid)
        .and_then(|c| c.get("hostname").cloned())
        .expect("hostname")
}

#[tokio::test]
async fn volume_attributes_read_and_set_notes_and_protection() {
    let sim = start().await;
    let mut conf = BTreeMap::new();
    conf.insert("hostname".to_owned(), "ct7000".to_owned());
    conf.insert(
        "rootfs".to_owned(),
        "local-lvm:vm-7000-disk-0,size=4G".to_owned(),
    );
    conf.insert("ostype".to_owned(), "debian".to_owned());
    conf.insert("arch".to_owned(), "amd64".to_owned());
    let volid = sim.handle.add_backup("local", 7000, conf).expect("archive");
    let path = format!("/nodes/pve/storage/local/content/{volid}");

    let r = sim.call("GET", &path, &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.data()["path"]
            .as_str()
            .is_some_and(|p| p.starts_with("/var/lib/vz/dump/vzdump-lxc-7000-")),
        "{r:?}"
    );
    assert_eq!(r.data()["protected"], 0);
    assert!(r.data()["size"].as_u64().is_some_and(|s| s > 0));

    let r = sim
        .call(
            "PUT",
            &path,
            &[("notes", "before the upgrade"), ("protected", "1")],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = sim.call("GET", &path, &[]).await;
    assert_eq!(r.data()["notes"], "before the upgrade");
    assert_eq!(r.data()["protected"], 1);
    // The listing shows the same.
    let list = sim
        .call(
            "GET",
            "/nodes/pve/storage/local/content",
            &[("content", "backup")],
        )
        .await;
    let item = list
        .data()
        .as_array()
        .expect("array")
        .iter()
        .find(|i| i["volid"] == volid.as_str())
        .expect("listed")
        .clone();
    assert_eq!(item["notes"], "before the upgrade");
    assert_eq!(item["protected"], 1);
    // A protected backup cannot be deleted.
    let r = sim.call("DELETE", &path, &[]).await;
    assert_ne!(sim.wait(&r.upid()).await, "OK");

    let r = sim
        .call(
            "GET",
            "/nodes/pve/storage/local/content/local:backup/nosuch.tar.zst",
            &[],
        )
        .await;
    assert_eq!(r.status, 500, "{r:?}");
    sim.handle.shutdown().await;
}
