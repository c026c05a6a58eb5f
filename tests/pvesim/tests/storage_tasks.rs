//! Storage, content visibility, task API and effective permissions.

use crate::common;

use common::start;

#[tokio::test]
async fn storages_and_status() {
    let sim = start().await;
    let r = sim.call("GET", "/nodes/pve/storage", &[]).await;
    let items = r.data().as_array().expect("array").clone();
    let local = items
        .iter()
        .find(|s| s["storage"] == "local")
        .expect("local");
    assert_eq!(local["type"], "dir");
    assert_eq!(local["content"], "backup,iso,vztmpl");
    let lvm = items
        .iter()
        .find(|s| s["storage"] == "local-lvm")
        .expect("local-lvm");
    assert_eq!(lvm["type"], "lvmthin");
    assert_eq!(lvm["content"], "images,rootdir");
    let r = sim
        .call("GET", "/nodes/pve/storage", &[("content", "backup")])
        .await;
    assert_eq!(r.data().as_array().map(Vec::len), Some(1));
    let r = sim
        .call("GET", "/nodes/pve/storage/local/status", &[])
        .await;
    assert!(r.data()["total"].as_u64().is_some_and(|t| t > 0));
    assert!(
        r.data()["used"].as_u64().is_some_and(|u| u > 0),
        "the golden archive uses space"
    );
    let r = sim
        .call("GET", "/nodes/pve/storage/nope/content", &[])
        .await;
    assert_eq!(r.message(), "storage 'nope' does not exist\n");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn content_listing_drops_backups_the_caller_may_not_see() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", "101"), ("storage", "local")],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    // a token with AllocateSpace on storage and VM.Backup only on /vms/101
    sim.handle
        .add_role("Space", &["Datastore.AllocateSpace", "Datastore.Audit"])
        .expect("role");
    sim.handle
        .add_role("Backup", &["VM.Backup", "VM.Audit"])
        .expect("role");
    let t = sim
        .handle
        .create_token("bosun@pve", "scoped", true)
        .expect("token");
    sim.handle
        .grant("/storage", &t.id, "Space", true)
        .expect("grant");
    sim.handle
        .grant("/vms/101", &t.id, "Backup", false)
        .expect("grant");
    let r = sim
        .call_as(
            &t,
            "GET",
            "/nodes/pve/storage/local/content",
            &[("content", "backup")],
        )
        .await;
    let vmids: Vec<u64> = r
        .data()
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|i| i["vmid"].as_u64())
        .collect();
    assert_eq!(vmids, vec![101], "golden (9000) is silently dropped");
    let all = sim
        .call(
            "GET",
            "/nodes/pve/storage/local/content",
            &[("content", "backup")],
        )
        .await;
    assert_eq!(all.data().as_array().map(Vec::len), Some(2));
    // lxc listing is filtered by VM.Audit too
    sim.restore_golden(102).await;
    let r = sim.call_as(&t, "GET", "/nodes/pve/lxc", &[]).await;
    assert_eq!(r.data().as_array().map(Vec::len), Some(1));
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn delete_content_runs_imgdel_and_refuses_protected_archives() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", "101"), ("storage", "local"), ("protected", "1")],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    let volid = sim
        .handle
        .storage_volumes("local")
        .into_iter()
        .find(|v| v.contains("-101-"))
        .expect("archive");
    let listing = sim
        .call(
            "GET",
            "/nodes/pve/storage/local/content",
            &[("vmid", "101")],
        )
        .await;
    assert_eq!(listing.data()[0]["protected"], 1);
    let r = sim
        .call(
            "DELETE",
            &format!("/nodes/pve/storage/local/content/{volid}"),
            &[],
        )
        .await;
    let upid = r.upid();
    assert!(upid.contains(":imgdel:101@local:"));
    let name = volid.trim_start_matches("local:backup/");
    assert_eq!(
        sim.wait(&upid).await,
        format!("cannot remove protected archive '/var/lib/vz/dump/{name}'")
    );
    let golden = sim.handle.endpoint().golden_volid.clone();
    let r = sim
        .call(
            "DELETE",
            &format!("/nodes/pve/storage/local/content/{golden}"),
            &[("delay", "5")],
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(r.data().is_null(), "finished within delay: null");
    assert!(!sim.handle.storage_volumes("local").contains(&golden));
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn task_status_log_and_list() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let upid = sim
        .call("POST", "/nodes/pve/lxc/101/status/start", &[])
        .await
        .upid();
    sim.wait(&upid).await;
    let r = sim
        .call("GET", &format!("/nodes/pve/tasks/{upid}/status"), &[])
        .await;
    let d = r.data();
    assert_eq!(d["status"], "stopped");
    assert_eq!(d["exitstatus"], "OK");
    assert_eq!(d["user"], "bosun@pve");
    assert_eq!(d["tokenid"], "agent");
    assert_eq!(d["type"], "vzstart");
    assert_eq!(d["id"], "101");
    assert_eq!(d["node"], "pve");
    let parts: Vec<&str> = upid.split(':').collect();
    assert_eq!(parts.len(), 9);
    assert_eq!(parts[2].len(), 8);
    assert_eq!(
        i64::from_str_radix(parts[4], 16).ok(),
        d["starttime"].as_i64()
    );
    // log paging with total
    let restore = sim
        .call("GET", "/nodes/pve/tasks", &[("typefilter", "vzrestore")])
        .await;
    let rupid = restore.data()[0]["upid"].as_str().expect("upid").to_owned();
    let r = sim
        .call(
            "GET",
            &format!("/nodes/pve/tasks/{rupid}/log"),
            &[("start", "1"), ("limit", "2")],
        )
        .await;
    assert_eq!(r.data().as_array().map(Vec::len), Some(2));
    assert_eq!(r.data()[0]["n"], 2);
    let total = r.body["total"].as_u64().expect("total");
    let full = sim
        .call(
            "GET",
            &format!("/nodes/pve/tasks/{rupid}/log"),
            &[("limit", "0")],
        )
        .await;
    assert_eq!(full.data().as_array().map(|a| a.len() as u64), Some(total));
    let last = usize::try_from(total - 1).expect("fits");
    assert_eq!(full.data()[last]["t"], "TASK OK");
    // bad and unknown UPIDs
    let r = sim
        .call("GET", "/nodes/pve/tasks/nonsense/status", &[])
        .await;
    assert_eq!(r.error("upid"), "unable to parse worker upid\n");
    let unknown = upid.replace(":vzstart:", ":vzstop:");
    let r = sim
        .call("GET", &format!("/nodes/pve/tasks/{unknown}/status"), &[])
        .await;
    assert_eq!(r.error("upid"), "no such task\n");
    // another token without Sys.Audit sees neither the list entries nor the status
    let other = sim.narrow_token("PowerOnly", &["VM.PowerMgmt"], "other");
    let r = sim
        .call_as(&other, "GET", "/nodes/pve/tasks", &[("source", "all")])
        .await;
    assert_eq!(r.data().as_array().map(Vec::len), Some(0));
    let r = sim
        .call_as(
            &other,
            "GET",
            &format!("/nodes/pve/tasks/{upid}/status"),
            &[],
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.message(),
        "Permission check failed (/nodes/pve, Sys.Audit)\n"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn effective_permissions_are_the_privsep_intersection() {
    let sim = start().await;
    let r = sim
        .call("GET", "/access/permissions", &[("path", "/")])
        .await;
    let root = &r.data()["/"];
    assert_eq!(root["VM.PowerMgmt"], 1);
    assert_eq!(root["SDN.Use"], 1);
    assert!(root.get("Sys.Modify").is_none());
    let t = sim.narrow_token("AuditOnly", &["VM.Audit", "Sys.Modify"], "audit");
    let r = sim
        .call_as(&t, "GET", "/access/permissions", &[("path", "/vms/100")])
        .await;
    let p = r.data()["/vms/100"].as_object().expect("object").clone();
    assert_eq!(
        p.keys().cloned().collect::<Vec<_>>(),
        vec!["VM.Audit".to_owned()],
        "Sys.Modify is not the user's"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn restricted_token_gets_403_naming_the_missing_privilege() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let t = sim.narrow_token("NoPower", &["VM.Audit"], "ro");
    for (m, p, privilege) in [
        ("POST", "/nodes/pve/lxc/101/status/start", "VM.PowerMgmt"),
        ("POST", "/nodes/pve/lxc/101/snapshot", "VM.Snapshot"),
        ("DELETE", "/nodes/pve/lxc/101", "VM.Allocate"),
    ] {
        let r = sim.call_as(&t, m, p, &[("snapname", "x")]).await;
        assert_eq!(r.status, 403, "{m} {p}");
        assert_eq!(
            r.message(),
            format!("Permission check failed (/vms/101, {privilege})\n")
        );
    }
    let r = sim
        .call_as(&t, "PUT", "/nodes/pve/lxc/101/config", &[("cores", "2")])
        .await;
    assert_eq!(r.status, 403);
    sim.handle.shutdown().await;
}
