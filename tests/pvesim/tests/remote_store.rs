//! A Proxmox Backup Server that outlives the node: its store exported from one simulator and
//! imported into another (over the admin endpoint and through `SimHandle`), where a storage
//! on the same server, datastore and namespace lists the same backups and restores the same
//! guests; documents that do not describe a store are refused without a change.

use crate::common;

use bosun_pvesim::{RemoteStore, SimError, export_remote_store, import_remote_store};
use common::{Resp, Sim, start};
use serde_json::{Value, json};

const SERVER: &str = "pbs.example.net";
const FP: &str = "aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99";
const PASSWORD: &str = "pbs-secret-hunter2";
const KEY_FP: &str = "12:34:56:78:9a:bc:de:f0:12:34:56:78:9a:bc:de:f0:12:34:56:78:9a:bc:de:f0:12:34:56:78:9a:bc:de:f0";
const MARKER: &str = "/root/bosun-marker";

fn key_file() -> String {
    json!({
        "kdf": null,
        "created": "2026-01-01T00:00:00+00:00",
        "modified": "2026-01-01T00:00:00+00:00",
        "data": "c2VjcmV0LWtleS1tYXRlcmlhbC10aGF0LW11c3Qtbm90LWxlYWs=",
        "fingerprint": KEY_FP,
    })
    .to_string()
}

/// Declares the PBS server and adds storage `sid` on it (datastore `offsite`, namespace
/// `host-a`, encrypted with the test key).
async fn add_pbs(sim: &Sim, sid: &str, password: &str) -> Resp {
    let key = key_file();
    sim.call(
        "POST",
        "/storage",
        &[
            ("storage", sid),
            ("type", "pbs"),
            ("server", SERVER),
            ("datastore", "offsite"),
            ("namespace", "host-a"),
            ("username", "bosun@pbs!agent"),
            ("password", password),
            ("fingerprint", FP),
            ("encryption-key", &key),
        ],
    )
    .await
}

/// CT `vmid` restored from the golden archive, running, with a file root pushed into it.
async fn guest_with_marker(sim: &Sim, vmid: u32, marker: &[u8]) {
    sim.restore_golden(vmid).await;
    sim.start_ct(vmid).await;
    let id = vmid.to_string();
    let out = sim
        .handle
        .cli(
            "pct",
            &["push", &id, "/staging/m", MARKER, "--perms", "0600"],
            Some(marker),
        )
        .await
        .expect("valid usage");
    assert_eq!(out.exit, 0, "{out:?}");
}

/// `vzdump <vmid> --storage <sid>` with notes and protection; the new backup's volid.
async fn back_up(sim: &Sim, vmid: u32, sid: &str) -> String {
    let id = vmid.to_string();
    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[
                ("vmid", &id),
                ("storage", sid),
                ("notes-template", "{{guestname}} nightly\\nkept offsite"),
                ("protected", "1"),
            ],
        )
        .await;
    let upid = r.upid();
    assert_eq!(
        sim.wait(&upid).await,
        "OK",
        "{:?}",
        sim.handle.task_log(&upid)
    );
    sim.handle
        .storage_volumes(sid)
        .last()
        .cloned()
        .expect("a backup")
}

async fn content(sim: &Sim, sid: &str) -> Vec<Value> {
    let r = sim
        .call("GET", &format!("/nodes/pve/storage/{sid}/content"), &[])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    r.data().as_array().cloned().unwrap_or_default()
}

/// Restores `volid` to `vmid` and returns the CT's config and every file.
async fn restored(sim: &Sim, volid: &str, vmid: u32) -> (Value, Vec<Value>) {
    let r = sim.restore(&vmid.to_string(), volid, &[]).await;
    let upid = r.upid();
    assert_eq!(
        sim.wait(&upid).await,
        "OK",
        "{:?}",
        sim.handle.task_log(&upid)
    );
    let conf = sim.handle.guest_config(vmid).expect("restored");
    let files = sim
        .handle
        .guest_paths(vmid, "/")
        .iter()
        .map(|p| serde_json::to_value(sim.handle.guest_file(vmid, p)).expect("json"))
        .collect();
    (serde_json::to_value(conf).expect("json"), files)
}

fn suffix(volid: &str) -> &str {
    volid.split_once(':').map_or(volid, |(_, name)| name)
}

#[tokio::test]
async fn a_new_node_lists_and_restores_the_backups_of_the_pbs_the_old_node_used() {
    let a = start().await;
    a.handle.add_pbs_remote(SERVER, FP, "offsite", PASSWORD);
    assert_eq!(add_pbs(&a, "offsite", PASSWORD).await.status, 200);
    a.handle
        .set_time("2026-03-01T02:30:00Z".parse().expect("time"));
    guest_with_marker(&a, 101, b"only on node a\n").await;
    let volid = back_up(&a, 101, "offsite").await;
    let listed_a = content(&a, "offsite").await;
    assert_eq!(listed_a.len(), 1, "{listed_a:?}");
    assert_eq!(listed_a[0]["encrypted"], KEY_FP);
    let attrs_a = a
        .call(
            "GET",
            &format!("/nodes/pve/storage/offsite/content/{volid}"),
            &[],
        )
        .await;
    let (conf_a, files_a) = restored(&a, &volid, 201).await;
    assert!(
        files_a
            .iter()
            .any(|f| f["path"] == MARKER && f["content"] == hex::encode("only on node a\n")),
        "{files_a:?}"
    );
    let store = a.handle.export_remote(SERVER).expect("known server");
    a.handle.shutdown().await;

    let b = start().await;
    b.handle.import_remote(SERVER, store).expect("imported");
    // The same credentials work: the spec came with its password.
    let r = add_pbs(&b, "recovered", PASSWORD).await;
    assert_eq!(r.status, 200, "{r:?}");
    let listed_b = content(&b, "recovered").await;
    assert_eq!(listed_b.len(), 1, "{listed_b:?}");
    let (item_a, item_b) = (&listed_a[0], &listed_b[0]);
    let volid_b = item_b["volid"].as_str().expect("volid");
    assert_eq!(format!("recovered:{}", suffix(&volid)), volid_b);
    for field in [
        "ctime",
        "notes",
        "encrypted",
        "format",
        "size",
        "vmid",
        "protected",
    ] {
        assert_eq!(item_a[field], item_b[field], "{field}");
    }
    assert!(
        item_b["notes"]
            .as_str()
            .is_some_and(|n| n.ends_with(" nightly")),
        "{item_b}"
    );
    let attrs_b = b
        .call(
            "GET",
            &format!("/nodes/pve/storage/recovered/content/{volid_b}"),
            &[],
        )
        .await;
    assert_eq!(attrs_a.data()["notes"], attrs_b.data()["notes"]);
    assert!(
        attrs_b.data()["notes"]
            .as_str()
            .is_some_and(|n| n.ends_with("nightly\nkept offsite")),
        "{attrs_b:?}"
    );

    let (conf_b, files_b) = restored(&b, volid_b, 201).await;
    assert_eq!(conf_a, conf_b);
    assert_eq!(files_a, files_b);
    b.handle.shutdown().await;
}

#[tokio::test]
async fn the_admin_endpoint_moves_a_store_and_the_new_server_holds_exactly_it() {
    let a = start().await;
    a.handle.add_pbs_remote(SERVER, FP, "offsite", PASSWORD);
    assert_eq!(add_pbs(&a, "offsite", PASSWORD).await.status, 200);
    guest_with_marker(&a, 101, b"a\n").await;
    let volid = back_up(&a, 101, "offsite").await;

    let ep = a.handle.endpoint().clone();
    let url = format!("{}/remotes/{SERVER}/store", ep.admin_url);
    let unauthorized = a.client.get(&url).send().await.expect("answered");
    assert_eq!(unauthorized.status(), 401);
    let r = a
        .client
        .get(&url)
        .bearer_auth(&ep.admin_token)
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 200);
    let doc: Value = r.json().await.expect("json");
    assert_eq!(doc["spec"]["type"], "pbs");
    assert_eq!(doc["spec"]["fingerprint"], FP);
    assert_eq!(doc["spec"]["password"], PASSWORD);
    assert_eq!(doc["namespaces"].as_array().map(Vec::len), Some(1), "{doc}");
    let ns = &doc["namespaces"][0];
    assert_eq!(
        (ns["datastore"].as_str(), ns["namespace"].as_str()),
        (Some("offsite"), Some("host-a"))
    );
    let backup = &ns["backups"][0];
    assert_eq!(backup["volid"], suffix(&volid));
    assert_eq!(backup["content"], "backup");
    assert_eq!(backup["format"], "pbs-ct");
    assert_eq!(backup["vmid"], 101);
    assert_eq!(backup["protected"], true);
    assert_eq!(backup["encrypted"], KEY_FP);
    assert!(backup["ctime"].as_i64().is_some() && backup["size"].as_u64().is_some());
    assert!(
        backup["archive"]["conf"]["hostname"].is_string(),
        "{backup}"
    );
    assert_eq!(backup["archive"]["unreadable"], false);
    let files = backup["archive"]["files"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(files.first().map(|f| f["path"].clone()), Some(json!("/")));
    assert!(files.iter().any(|f| f["path"] == MARKER), "{files:?}");
    // The client helper reads the same document.
    let typed = export_remote_store(&a.client, &ep, SERVER)
        .await
        .expect("exported")
        .expect("known");
    assert_eq!(serde_json::to_value(&typed).expect("json"), doc);

    // Node B's server already holds a backup of its own; the import replaces it.
    let b = start().await;
    b.handle
        .add_pbs_remote(SERVER, "11:22", "offsite", "another-password");
    b.handle.set_remote_reachable(SERVER, false);
    let before = b.handle.export_remote(SERVER).expect("declared");
    assert!(before.namespaces.is_empty());
    let stale: RemoteStore = serde_json::from_value(json!({
        "spec": null,
        "namespaces": [{"datastore": "offsite", "namespace": "host-a", "backups": [
            {"volid": "backup/ct/150/2020-01-01T00:00:00Z", "content": "backup", "format": "pbs-ct",
             "size": 1, "ctime": 1_577_836_800, "vmid": 150, "notes": null, "protected": false,
             "encrypted": null, "archive": null}
        ]}, {"datastore": "other", "namespace": "", "backups": []}],
    }))
    .expect("a store");
    b.handle.import_remote(SERVER, stale).expect("imported");
    let ep_b = b.handle.endpoint().clone();
    let r = b
        .client
        .put(format!("{}/remotes/{SERVER}/store", ep_b.admin_url))
        .bearer_auth(&ep_b.admin_token)
        .json(&doc)
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 204, "{:?}", r.text().await);
    assert_eq!(b.handle.export_remote(SERVER).expect("imported"), typed);
    let info = b.handle.remotes();
    assert!(
        info.iter().any(|r| r.server == SERVER && r.reachable),
        "{info:?}"
    );
    assert_eq!(add_pbs(&b, "recovered", PASSWORD).await.status, 200);
    let listed = b.handle.storage_volumes("recovered");
    assert_eq!(listed, vec![format!("recovered:{}", suffix(&volid))]);
    assert_eq!(
        b.handle.archive_file(&listed[0], MARKER).map(|f| f.content),
        Some(b"a\n".to_vec())
    );

    // Through the client helper, a store round-trips again.
    import_remote_store(&b.client, &ep_b, "pbs2.example.net", &typed)
        .await
        .expect("imported");
    assert_eq!(
        b.handle.export_remote("pbs2.example.net").expect("known"),
        typed
    );
    a.handle.shutdown().await;
    b.handle.shutdown().await;
}

#[tokio::test]
async fn an_unknown_server_is_not_found_and_a_bad_store_changes_nothing() {
    let sim = start().await;
    let ep = sim.handle.endpoint().clone();
    let store_url = |server: &str| format!("{}/remotes/{server}/store", ep.admin_url);
    let r = sim
        .client
        .get(store_url("ghost.example.net"))
        .bearer_auth(&ep.admin_token)
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.text().await.expect("body"),
        "cannot export remote server 'ghost.example.net': no test declared it and no storage used it\n"
    );
    assert!(matches!(
        sim.handle.export_remote("ghost.example.net"),
        Err(SimError::ExportRemote { server }) if server == "ghost.example.net"
    ));
    assert_eq!(
        export_remote_store(&sim.client, &ep, "ghost.example.net")
            .await
            .expect("answered"),
        None
    );

    sim.handle.add_pbs_remote(SERVER, FP, "offsite", PASSWORD);
    assert_eq!(add_pbs(&sim, "offsite", PASSWORD).await.status, 200);
    sim.restore_golden(101).await;
    back_up(&sim, 101, "offsite").await;
    let held = sim.handle.export_remote(SERVER).expect("known");
    let good = serde_json::to_value(&held).expect("json");
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut doc = good.clone();
        edit(&mut doc);
        doc.to_string()
    };
    let backup = "/namespaces/0/backups/0";
    let cases: Vec<(String, &str)> = vec![
        (
            "not json".to_owned(),
            "invalid remote store: expected ident",
        ),
        (String::new(), "invalid remote store: EOF while parsing"),
        (
            "42".to_owned(),
            "invalid remote store: invalid type: integer `42`, expected struct RemoteStore",
        ),
        (
            json!({"spec": null}).to_string(),
            "invalid remote store: missing field `namespaces`",
        ),
        (
            with(&|d| d["extra"] = json!(1)),
            "invalid remote store: unknown field `extra`",
        ),
        (
            with(&|d| d["spec"]["type"] = json!("ftp")),
            "invalid remote store: unknown variant `ftp`",
        ),
        (
            with(&|d| d.pointer_mut(backup).expect("backup")["size"] = json!(-1)),
            "invalid remote store: invalid value: integer `-1`",
        ),
        (
            with(&|d| {
                d.pointer_mut(backup).expect("backup")["archive"]["files"][1]["content"] =
                    json!("zz")
            }),
            "invalid remote store: Invalid character",
        ),
        (
            with(&|d| {
                d.pointer_mut(backup).expect("backup")["volid"] = json!("offsite:backup/ct/101/x")
            }),
            "cannot import the store of remote server 'pbs.example.net': datastore 'offsite' namespace 'host-a': 'offsite:backup/ct/101/x': the volid is not backup/ct/<vmid>/<YYYY-MM-DDTHH:MM:SSZ>",
        ),
        (
            with(&|d| {
                let dup = d["namespaces"][0].clone();
                d["namespaces"].as_array_mut().expect("list").push(dup);
            }),
            "cannot import the store of remote server 'pbs.example.net': datastore 'offsite' namespace 'host-a' is listed twice",
        ),
        (
            with(&|d| d.pointer_mut(backup).expect("backup")["archive"]["files"] = json!([])),
            "cannot import the store of remote server 'pbs.example.net': datastore 'offsite' namespace 'host-a': 'backup/ct/101/",
        ),
    ];
    for (body, expected) in cases {
        let r = sim
            .client
            .put(store_url(SERVER))
            .bearer_auth(&ep.admin_token)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .expect("answered");
        assert_eq!(r.status(), 400, "{body}");
        let text = r.text().await.expect("body");
        assert!(text.starts_with(expected), "{body}: {text}");
        assert!(text.ends_with('\n'), "{text}");
    }
    let unauthorized = sim
        .client
        .put(store_url(SERVER))
        .json(&good)
        .send()
        .await
        .expect("answered");
    assert_eq!(unauthorized.status(), 401);

    let mut bad = held.clone();
    bad.namespaces[0].backups[0].vmid = Some(999);
    assert!(matches!(
        sim.handle.import_remote(SERVER, bad),
        Err(SimError::ImportRemote { server, reason }) if server == SERVER
            && reason.ends_with("vmid does not match the volid's 101")
    ));
    assert_eq!(sim.handle.export_remote(SERVER).expect("known"), held);
    assert_eq!(sim.handle.storage_volumes("offsite").len(), 1);
    sim.handle.shutdown().await;
}
