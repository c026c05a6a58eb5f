//! Storages on remote servers (PBS, NFS, CIFS), their activation and reachability, the storage
//! config API (create, update, read, list), secrets, PBS namespaces and encryption, dir
//! storages that must be mount points, and the settable clock.

use crate::common;

use common::{Resp, Sim, start};
use serde_json::Value;

const FP: &str = "aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99";
const PASSWORD: &str = "pbs-secret-hunter2";
const KEY_FP: &str = "12:34:56:78:9a:bc:de:f0:12:34:56:78:9a:bc:de:f0:12:34:56:78:9a:bc:de:f0:12:34:56:78:9a:bc:de:f0";
const KEY_DATA: &str = "c2VjcmV0LWtleS1tYXRlcmlhbC10aGF0LW11c3Qtbm90LWxlYWs=";

fn key_file() -> String {
    serde_json::json!({
        "kdf": null,
        "created": "2026-01-01T00:00:00+00:00",
        "modified": "2026-01-01T00:00:00+00:00",
        "data": KEY_DATA,
        "fingerprint": KEY_FP,
    })
    .to_string()
}

async fn add_pbs(sim: &Sim, sid: &str, extra: &[(&str, &str)]) -> Resp {
    let mut params = vec![
        ("storage", sid),
        ("type", "pbs"),
        ("server", "pbs.example.net"),
        ("datastore", "offsite"),
        ("username", "bosun@pbs!agent"),
        ("password", PASSWORD),
        ("fingerprint", FP),
    ];
    for (k, v) in extra {
        params.retain(|(pk, _)| pk != k);
        params.push((k, v));
    }
    sim.call("POST", "/storage", &params).await
}

async fn vzdump(
    sim: &Sim,
    vmid: &str,
    storage: &str,
    extra: &[(&str, &str)],
) -> (String, Vec<String>) {
    let mut params = vec![("vmid", vmid), ("storage", storage)];
    params.extend_from_slice(extra);
    let r = sim.call("POST", "/nodes/pve/vzdump", &params).await;
    let upid = r.upid();
    let exit = sim.wait(&upid).await;
    (exit, sim.handle.task_log(&upid).expect("log"))
}

async fn status(sim: &Sim, sid: &str) -> Value {
    let r = sim
        .call("GET", &format!("/nodes/pve/storage/{sid}/status"), &[])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    r.data().clone()
}

fn pbs_sim(sim: &Sim) {
    sim.handle
        .add_pbs_remote("pbs.example.net", &FP.to_uppercase(), "offsite", PASSWORD);
}

#[tokio::test]
async fn a_pbs_storage_on_a_declared_remote_is_added_and_its_secrets_are_never_shown() {
    let sim = start().await;
    pbs_sim(&sim);
    let key = key_file();
    let r = add_pbs(
        &sim,
        "offsite",
        &[("encryption-key", &key), ("namespace", "host-a")],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.data()["storage"], "offsite");
    assert_eq!(r.data()["type"], "pbs");

    let conf = sim.call("GET", "/storage/offsite", &[]).await;
    assert_eq!(conf.status, 200, "{conf:?}");
    let c = conf.data();
    assert_eq!(c["server"], "pbs.example.net");
    assert_eq!(c["datastore"], "offsite");
    assert_eq!(c["namespace"], "host-a");
    assert_eq!(c["fingerprint"], FP);
    assert_eq!(c["username"], "bosun@pbs!agent");
    assert_eq!(
        c["encryption-key"], KEY_FP,
        "the config keeps the key's fingerprint"
    );
    assert_eq!(c["content"], "backup");
    assert!(c["password"].is_null());
    assert_eq!(c["digest"].as_str().map(str::len), Some(40));

    sim.restore_golden(101).await;
    let (exit, _) = vzdump(&sim, "101", "offsite", &[]).await;
    assert_eq!(exit, "OK");
    let st = status(&sim, "offsite").await;
    assert_eq!(st["active"], 1);
    assert!(st["used"].as_u64().unwrap_or_default() > 0, "{st}");

    let mut everything = Vec::new();
    for path in [
        "/storage",
        "/storage/offsite",
        "/nodes/pve/storage",
        "/nodes/pve/storage/offsite/status",
        "/nodes/pve/storage/offsite/content",
    ] {
        let r = sim.call("GET", path, &[]).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
        everything.push(r.body.to_string());
    }
    for text in &everything {
        assert!(!text.contains(PASSWORD), "password shown: {text}");
        assert!(!text.contains(KEY_DATA), "key shown: {text}");
    }
    let listed = sim.call("GET", "/storage", &[("type", "pbs")]).await;
    assert_eq!(
        listed.data().as_array().map(Vec::len),
        Some(1),
        "{listed:?}"
    );
    let remotes = serde_json::to_string(&sim.handle.remotes()).expect("json");
    assert!(!remotes.contains(PASSWORD), "{remotes}");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn a_pbs_storage_the_remote_refuses_is_not_kept() {
    let sim = start().await;
    pbs_sim(&sim);
    let wrong = FP.replace("aa:bb", "00:00");
    let r = add_pbs(&sim, "offsite", &[("fingerprint", &wrong)]).await;
    assert_eq!(r.status, 500, "{r:?}");
    assert_eq!(
        r.message(),
        format!(
            "create storage failed: offsite: error fetching datastores - fingerprint '{}' not verified, abort!\n",
            FP.to_uppercase()
        )
    );
    let gone = sim.call("GET", "/storage/offsite", &[]).await;
    assert_eq!(gone.status, 500);
    assert_eq!(gone.message(), "storage 'offsite' does not exist\n");

    let r = add_pbs(&sim, "offsite", &[("password", "wrong")]).await;
    assert_eq!(
        r.message(),
        "create storage failed: offsite: error fetching datastores - Unauthorized\n"
    );
    let r = add_pbs(
        &sim,
        "offsite",
        &[("password", "wrong"), ("username", "bosun@pbs")],
    )
    .await;
    assert_eq!(
        r.message(),
        "create storage failed: offsite: error fetching datastores - 401 Unauthorized\n"
    );
    let r = add_pbs(&sim, "offsite", &[("datastore", "nope")]).await;
    assert_eq!(
        r.message(),
        "create storage failed: offsite: Cannot find datastore 'nope', check permissions and existence!\n"
    );
    sim.handle.set_remote_reachable("pbs.example.net", false);
    let r = add_pbs(&sim, "offsite", &[]).await;
    assert_eq!(
        r.message(),
        "create storage failed: offsite: error fetching datastores - Can't connect to pbs.example.net:8007 (No route to host)\n"
    );
    // A disabled storage is not activated, so it is kept.
    let r = add_pbs(&sim, "offsite", &[("disable", "1")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = add_pbs(&sim, "offsite", &[]).await;
    assert_eq!(
        r.message(),
        "create storage failed: storage ID 'offsite' already defined\n"
    );
    sim.handle.set_strict_remotes(true);
    let r = add_pbs(&sim, "other", &[("server", "ghost.example.net")]).await;
    assert_eq!(
        r.message(),
        "create storage failed: other: error fetching datastores - Can't connect to ghost.example.net:8007 (Name or service not known)\n"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn an_unreachable_remote_makes_the_storage_inactive_and_backups_fail_until_it_returns() {
    let sim = start().await;
    pbs_sim(&sim);
    assert_eq!(add_pbs(&sim, "offsite", &[]).await.status, 200);
    sim.restore_golden(101).await;
    let (exit, _) = vzdump(&sim, "101", "offsite", &[]).await;
    assert_eq!(exit, "OK");
    let volid = sim.handle.storage_volumes("offsite")[0].clone();

    sim.handle.set_remote_reachable("pbs.example.net", false);
    let st = status(&sim, "offsite").await;
    assert_eq!(st["active"], 0, "{st}");
    assert_eq!(st["total"], 0);
    assert_eq!(st["used"], 0);
    assert_eq!(st["avail"], 0);
    assert!(st.get("used_fraction").is_none(), "{st}");
    let list = sim.call("GET", "/nodes/pve/storage", &[]).await;
    let item = list
        .data()
        .as_array()
        .and_then(|a| a.iter().find(|s| s["storage"] == "offsite"))
        .cloned()
        .expect("listed");
    assert_eq!(item["active"], 0);
    assert_eq!(item["enabled"], 1);

    let unreachable = "offsite: error fetching datastores - Can't connect to pbs.example.net:8007 (No route to host)";
    let content = sim
        .call("GET", "/nodes/pve/storage/offsite/content", &[])
        .await;
    assert_eq!(content.status, 500);
    assert_eq!(content.message(), format!("{unreachable}\n"));

    let (exit, log) = vzdump(&sim, "101", "offsite", &[]).await;
    let expected = format!("could not activate storage 'offsite': {unreachable}");
    assert_eq!(exit, expected);
    assert_eq!(log.last(), Some(&format!("TASK ERROR: {expected}")));

    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc",
            &[
                ("vmid", "102"),
                ("ostemplate", &volid),
                ("restore", "1"),
                ("storage", "local-lvm"),
            ],
        )
        .await;
    assert_eq!(r.status, 500, "{r:?}");
    assert_eq!(r.message(), format!("{unreachable}\n"));

    sim.handle.set_remote_reachable("pbs.example.net", true);
    assert_eq!(status(&sim, "offsite").await["active"], 1);
    let (exit, _) = vzdump(&sim, "101", "offsite", &[]).await;
    assert_eq!(exit, "OK");
    assert_eq!(sim.handle.storage_volumes("offsite").len(), 2);
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn an_update_corrects_settings_and_refuses_fixed_and_unknown_ones() {
    let sim = start().await;
    pbs_sim(&sim);
    assert_eq!(add_pbs(&sim, "offsite", &[]).await.status, 200);
    // The remote's certificate and password change: the storage stops working.
    sim.handle
        .add_pbs_remote("pbs.example.net", "11:22", "offsite", "new-secret");
    assert_eq!(status(&sim, "offsite").await["active"], 0);
    let digest = sim.call("GET", "/storage/offsite", &[]).await.data()["digest"]
        .as_str()
        .expect("digest")
        .to_owned();
    let r = sim
        .call(
            "PUT",
            "/storage/offsite",
            &[
                ("fingerprint", "11:22"),
                ("password", "new-secret"),
                ("namespace", "host-b"),
                ("prune-backups", "keep-daily=7"),
                ("digest", &digest),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.data()["type"], "pbs");
    assert_eq!(status(&sim, "offsite").await["active"], 1);
    let c = sim.call("GET", "/storage/offsite", &[]).await;
    assert_eq!(c.data()["namespace"], "host-b");
    assert_eq!(c.data()["prune-backups"], "keep-daily=7");

    let stale = sim
        .call(
            "PUT",
            "/storage/offsite",
            &[("disable", "1"), ("digest", &digest)],
        )
        .await;
    assert_eq!(
        stale.message(),
        "update storage failed: detected modified configuration - file changed by other user? Try again.\n"
    );
    let r = sim
        .call(
            "PUT",
            "/storage/offsite",
            &[("delete", "namespace,prune-backups"), ("disable", "1")],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let c = sim.call("GET", "/storage/offsite", &[]).await;
    assert!(c.data()["namespace"].is_null(), "{c:?}");
    assert!(c.data()["prune-backups"].is_null());
    assert_eq!(c.data()["disable"], 1);
    let st = status(&sim, "offsite").await;
    assert_eq!(
        (st["active"].clone(), st["enabled"].clone()),
        (0.into(), 0.into())
    );

    let r = sim
        .call("PUT", "/storage/offsite", &[("server", "elsewhere")])
        .await;
    assert_eq!(
        r.message(),
        "update storage failed: can't change value of fixed parameter 'server'\n"
    );
    let r = sim
        .call("PUT", "/storage/offsite", &[("delete", "datastore")])
        .await;
    assert_eq!(
        r.message(),
        "update storage failed: unable to delete fixed option 'datastore'\n"
    );
    let r = sim
        .call(
            "PUT",
            "/storage/offsite",
            &[("delete", "fingerprint"), ("fingerprint", "11:22")],
        )
        .await;
    assert_eq!(
        r.message(),
        "update storage failed: cannot set and delete property 'fingerprint' at the same time!\n"
    );
    let r = sim.call("PUT", "/storage/nope", &[("disable", "0")]).await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "update storage failed: storage 'nope' does not exist\n"
    );
    let r = sim
        .call("PUT", "/storage/offsite", &[("is_mountpoint", "yes")])
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(
        r.error("is_mountpoint").contains("not defined in schema"),
        "{r:?}"
    );

    // Without Datastore.Allocate on /storage an update is refused.
    let narrow = sim.narrow_token("Audit", &["Datastore.Audit"], "audit");
    let r = sim
        .call_as(&narrow, "PUT", "/storage/offsite", &[("disable", "0")])
        .await;
    assert_eq!(r.status, 403, "{r:?}");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn namespaces_isolate_and_the_same_triple_sees_the_same_encrypted_backups() {
    let sim = start().await;
    pbs_sim(&sim);
    let key = key_file();
    assert_eq!(
        add_pbs(
            &sim,
            "host-a",
            &[("namespace", "a"), ("encryption-key", &key)]
        )
        .await
        .status,
        200
    );
    assert_eq!(
        add_pbs(&sim, "host-b", &[("namespace", "b")]).await.status,
        200
    );
    sim.restore_golden(101).await;
    let (exit, _) = vzdump(&sim, "101", "host-a", &[]).await;
    assert_eq!(exit, "OK");
    assert_eq!(sim.handle.storage_volumes("host-a").len(), 1);
    assert!(sim.handle.storage_volumes("host-b").is_empty());

    // A replacement host adds a storage on the same server, datastore and namespace.
    assert_eq!(
        add_pbs(
            &sim,
            "recovered",
            &[("namespace", "a"), ("encryption-key", &key)]
        )
        .await
        .status,
        200
    );
    let content = sim
        .call("GET", "/nodes/pve/storage/recovered/content", &[])
        .await;
    let items = content.data().as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "{content:?}");
    let item = &items[0];
    let volid = item["volid"].as_str().expect("volid");
    assert!(
        volid.starts_with("recovered:backup/ct/101/") && volid.ends_with('Z'),
        "{volid}"
    );
    assert_eq!(item["format"], "pbs-ct");
    assert_eq!(item["encrypted"], KEY_FP);
    assert!(item.get("verification").is_none());
    let plain = sim
        .call("GET", "/nodes/pve/storage/host-b/content", &[])
        .await;
    assert_eq!(plain.data().as_array().map(Vec::len), Some(0));

    // Removing it through one storage removes it for the other.
    let r = sim
        .call(
            "DELETE",
            &format!("/nodes/pve/storage/recovered/content/{volid}"),
            &[],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    assert!(sim.handle.storage_volumes("host-a").is_empty());
    sim.handle.shutdown().await;
}

/// A second key file (a rotated K).
const NEXT_KEY_FP: &str = "ab:cd:ef:01:23:45:67:89:ab:cd:ef:01:23:45:67:89:ab:cd:ef:01:23:45:67:89:ab:cd:ef:01:23:45:67:89";

fn next_key_file() -> String {
    serde_json::json!({
        "kdf": null,
        "created": "2026-06-01T00:00:00+00:00",
        "modified": "2026-06-01T00:00:00+00:00",
        "data": "bmV4dC1rZXktbWF0ZXJpYWwtdGhhdC1tdXN0LW5vdC1sZWFrISE=",
        "fingerprint": NEXT_KEY_FP,
    })
    .to_string()
}

#[tokio::test]
async fn a_backup_is_restored_only_through_a_storage_holding_its_key() {
    let sim = start().await;
    pbs_sim(&sim);
    let key = key_file();
    let a = [("namespace", "a"), ("encryption-key", key.as_str())];
    assert_eq!(add_pbs(&sim, "host-a", &a).await.status, 200);
    sim.restore_golden(101).await;
    sim.handle
        .set_time(jiff::Timestamp::from_second(1_800_000_000).unwrap());
    let (exit, _) = vzdump(&sim, "101", "host-a", &[]).await;
    assert_eq!(exit, "OK");
    let old = sim.handle.storage_volumes("host-a");
    assert_eq!(old.len(), 1);
    let old = old[0].clone();

    // The storage's key changes (a rotation): backups from now on are made with it.
    let next = next_key_file();
    let r = sim
        .call("PUT", "/storage/host-a", &[("encryption-key", &next)])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    sim.handle.advance_time(jiff::SignedDuration::from_hours(1));
    let (exit, _) = vzdump(&sim, "101", "host-a", &[]).await;
    assert_eq!(exit, "OK");
    let content = sim
        .call("GET", "/nodes/pve/storage/host-a/content", &[])
        .await;
    let keys: Vec<(String, String)> = content
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["volid"].as_str().unwrap().to_owned(),
                i["encrypted"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.contains(&(old.clone(), KEY_FP.to_owned())), "{keys:?}");
    let new = keys
        .iter()
        .find(|(_, k)| k == NEXT_KEY_FP)
        .map(|(v, _)| v.clone())
        .expect("a backup with the new key");

    let restore = |vmid: &'static str, volid: String| {
        let sim = &sim;
        async move {
            let r = sim.restore(vmid, &volid, &[]).await;
            assert_eq!(r.status, 200, "{r:?}");
            let upid = r.upid();
            let exit = sim.wait(&upid).await;
            (exit, sim.handle.task_log(&upid).expect("log"))
        }
    };

    // The old backup through the storage that now holds the new key: PBS refuses it as it
    // recovers the config, and nothing is left behind.
    let (exit, log) = restore("120", old.clone()).await;
    let name = old.split_once(':').unwrap().1;
    let snapshot = name.strip_prefix("backup/").unwrap();
    assert_eq!(
        exit,
        format!(
            "unable to restore CT 120 - command '/usr/bin/proxmox-backup-client restore \
             '--crypt-mode=encrypt' '--keyfd=10' {snapshot} pct.conf - --repository \
             bosun@pbs!agent@pbs.example.net:offsite --ns a' failed: exit code 255"
        ),
        "{log:#?}"
    );
    assert!(
        log.contains(
            &"Error: wrong key - manifest's key 12:34:56:78:9a:bc:de:f0 does not match provided \
              key ab:cd:ef:01:23:45:67:89"
                .to_owned()
        ),
        "{log:#?}"
    );
    assert!(sim.handle.guest_config(120).is_none());

    // A storage on the same datastore and namespace without a key: the key is missing.
    assert_eq!(
        add_pbs(&sim, "host-a-plain", &[("namespace", "a")])
            .await
            .status,
        200
    );
    let (exit, log) = restore("121", format!("host-a-plain:{name}")).await;
    assert!(exit.ends_with("failed: exit code 255"), "{exit}");
    assert!(
        log.iter()
            .any(|l| l.starts_with("Error: missing key - manifest was created with key 12:34:56")),
        "{log:#?}"
    );

    // A storage holding the old key reads the old backup; the new one reads through the
    // storage holding the new key.
    assert_eq!(add_pbs(&sim, "host-a-old", &a).await.status, 200);
    let (exit, log) = restore("122", format!("host-a-old:{name}")).await;
    assert_eq!(exit, "OK", "{log:#?}");
    let (exit, log) = restore("123", new).await;
    assert_eq!(exit, "OK", "{log:#?}");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn autogen_returns_the_new_key_once_and_the_config_keeps_its_fingerprint() {
    let sim = start().await;
    pbs_sim(&sim);
    let r = add_pbs(&sim, "offsite", &[("encryption-key", "autogen")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let file: Value = serde_json::from_str(
        r.data()["config"]["encryption-key"]
            .as_str()
            .expect("the generated key file"),
    )
    .expect("json");
    let fp = file["fingerprint"]
        .as_str()
        .expect("fingerprint")
        .to_owned();
    let conf = sim.call("GET", "/storage/offsite", &[]).await;
    assert_eq!(conf.data()["encryption-key"], fp.as_str());
    let data = file["data"].as_str().expect("data");
    assert!(!conf.body.to_string().contains(data));
    let bad = add_pbs(&sim, "other", &[("encryption-key", "{\"kdf\":null}")]).await;
    assert_eq!(
        bad.message(),
        "create storage failed: Value does not seems like a valid, JSON formatted encryption key!\n"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn nfs_and_cifs_storages_need_their_export_share_and_credentials() {
    let sim = start().await;
    sim.handle.add_nfs_remote("nas.lan", "/srv/backup");
    sim.handle
        .add_cifs_remote("smb.lan", "backup", Some("smb-pass"));
    let nfs = |export: &'static str| {
        [
            ("storage", "nas"),
            ("type", "nfs"),
            ("server", "nas.lan"),
            ("export", export),
            ("content", "backup"),
            ("options", "vers=4.2"),
        ]
    };
    let r = sim.call("POST", "/storage", &nfs("/srv/other")).await;
    assert_eq!(
        r.message(),
        "create storage failed: mount error: mount.nfs: access denied by server while mounting nas.lan:/srv/other\n"
    );
    let r = sim.call("POST", "/storage", &nfs("/srv/backup")).await;
    assert_eq!(r.status, 200, "{r:?}");
    let c = sim.call("GET", "/storage/nas", &[]).await;
    assert_eq!(c.data()["path"], "/mnt/pve/nas");
    assert_eq!(c.data()["options"], "vers=4.2");
    assert_eq!(c.data()["shared"], 1);
    sim.restore_golden(101).await;
    let (exit, log) = vzdump(&sim, "101", "nas", &[("compress", "zstd")]).await;
    assert_eq!(exit, "OK");
    assert!(
        log.iter()
            .any(|l| l
                .starts_with("INFO: creating vzdump archive '/mnt/pve/nas/dump/vzdump-lxc-101-")),
        "{log:#?}"
    );
    sim.handle.set_remote_reachable("nas.lan", false);
    assert_eq!(status(&sim, "nas").await["active"], 0);
    let (exit, _) = vzdump(&sim, "101", "nas", &[]).await;
    assert_eq!(
        exit,
        "could not activate storage 'nas': storage 'nas' is not online"
    );

    let cifs = |password: &'static str| {
        [
            ("storage", "smb"),
            ("type", "cifs"),
            ("server", "smb.lan"),
            ("share", "backup"),
            ("username", "backup"),
            ("password", password),
            ("smbversion", "3.0"),
            ("content", "backup"),
        ]
    };
    let r = sim.call("POST", "/storage", &cifs("wrong")).await;
    assert_eq!(
        r.message(),
        "create storage failed: connection check for storage 'smb' failed - session setup failed: NT_STATUS_LOGON_FAILURE\n"
    );
    let r = sim.call("POST", "/storage", &cifs("smb-pass")).await;
    assert_eq!(r.status, 200, "{r:?}");
    let c = sim.call("GET", "/storage/smb", &[]).await;
    assert_eq!(c.data()["smbversion"], "3.0");
    assert!(!c.body.to_string().contains("smb-pass"));
    assert_eq!(status(&sim, "smb").await["active"], 1);
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn a_dir_storage_that_must_be_a_mount_point_is_inactive_while_it_is_not_one() {
    let sim = start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_str().expect("utf-8").to_owned();
    let r = sim
        .call(
            "POST",
            "/storage",
            &[
                ("storage", "usb"),
                ("type", "dir"),
                ("path", &path),
                ("content", "backup"),
                ("is_mountpoint", "yes"),
            ],
        )
        .await;
    assert_eq!(
        r.message(),
        format!(
            "create storage failed: unable to activate storage 'usb' - directory is expected to be a mount point but is not mounted: '{path}'\n"
        )
    );
    // /proc is a mount point wherever the tests run.
    let r = sim
        .call(
            "POST",
            "/storage",
            &[
                ("storage", "usb"),
                ("type", "dir"),
                ("path", &path),
                ("content", "backup"),
                ("is_mountpoint", "/proc"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(status(&sim, "usb").await["active"], 1);
    let r = sim
        .call("PUT", "/storage/usb", &[("is_mountpoint", "1")])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(status(&sim, "usb").await["active"], 0);
    sim.restore_golden(101).await;
    let (exit, _) = vzdump(&sim, "101", "usb", &[]).await;
    assert_eq!(
        exit,
        format!(
            "could not activate storage 'usb': unable to activate storage 'usb' - directory is expected to be a mount point but is not mounted: '{path}'"
        )
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn a_fixed_clock_names_a_week_of_daily_backups_and_prune_keeps_the_last_days() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let start: jiff::Timestamp = "2026-03-01T02:30:00Z".parse().expect("time");
    sim.handle.set_time(start);
    for _ in 0..8 {
        let (exit, _) = vzdump(&sim, "101", "local", &[("prune-backups", "keep-daily=3")]).await;
        assert_eq!(exit, "OK");
        sim.handle
            .advance_time(jiff::SignedDuration::from_hours(24));
    }
    let content = sim
        .call(
            "GET",
            "/nodes/pve/storage/local/content",
            &[("vmid", "101")],
        )
        .await;
    let mut ctimes: Vec<i64> = content
        .data()
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|v| v["ctime"].as_i64())
        .collect();
    ctimes.sort_unstable();
    let day = 86_400;
    let first = start.as_second();
    assert_eq!(
        ctimes,
        vec![first + 5 * day, first + 6 * day, first + 7 * day]
    );
    let names = sim.handle.storage_volumes("local");
    let last = jiff::Timestamp::from_second(first + 7 * day)
        .expect("time")
        .to_zoned(jiff::tz::TimeZone::system())
        .strftime("vzdump-lxc-101-%Y_%m_%d-%H_%M_%S.tar")
        .to_string();
    assert!(names.iter().any(|n| n.ends_with(&last)), "{names:?} {last}");

    let tasks = sim
        .call("GET", "/nodes/pve/tasks", &[("typefilter", "vzdump")])
        .await;
    let starts: Vec<i64> = tasks
        .data()
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["starttime"].as_i64())
        .collect();
    assert!(
        starts.contains(&first) && starts.contains(&(first + 7 * day)),
        "{starts:?}"
    );
    let upid = tasks.data()[0]["upid"].as_str().expect("upid").to_owned();
    let hex = format!("{:08X}", starts[0]);
    assert!(upid.contains(&hex), "{upid} {hex}");

    sim.handle.use_wall_clock();
    let now = jiff::Timestamp::now().as_second();
    assert!((sim.handle.now().as_second() - now).abs() < 5);
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn the_admin_endpoint_declares_remotes_flips_reachability_and_sets_the_clock() {
    let sim = start().await;
    let ep = sim.handle.endpoint().clone();
    let admin = |m: reqwest::Method, path: &str| {
        sim.client
            .request(m, format!("{}{path}", ep.admin_url))
            .bearer_auth(&ep.admin_token)
    };
    let body = serde_json::json!({
        "type": "pbs",
        "fingerprint": FP,
        "datastores": ["offsite"],
        "password": PASSWORD,
    });
    let r = admin(reqwest::Method::PUT, "/remotes/pbs.example.net")
        .json(&body)
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 200);
    let listed = r.text().await.expect("body");
    assert!(listed.contains("\"datastores\":[\"offsite\"]"), "{listed}");
    assert!(!listed.contains(PASSWORD), "{listed}");
    let unauthorized = sim
        .client
        .get(format!("{}/remotes", ep.admin_url))
        .send()
        .await
        .expect("answered");
    assert_eq!(unauthorized.status(), 401);
    assert_eq!(add_pbs(&sim, "offsite", &[]).await.status, 200);

    let r = admin(reqwest::Method::POST, "/remotes/pbs.example.net/reachable")
        .json(&serde_json::json!({ "reachable": false }))
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 200);
    assert_eq!(status(&sim, "offsite").await["active"], 0);
    let list: Value = admin(reqwest::Method::GET, "/remotes")
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("json");
    assert_eq!(list[0]["server"], "pbs.example.net");
    assert_eq!(list[0]["reachable"], false);

    let r = admin(reqwest::Method::POST, "/clock")
        .json(&serde_json::json!({ "now": "2026-05-01T10:00:00Z" }))
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 200);
    assert_eq!(sim.handle.now().to_string(), "2026-05-01T10:00:00Z");
    let r = admin(reqwest::Method::DELETE, "/clock")
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 204);
    assert_ne!(sim.handle.now().to_string(), "2026-05-01T10:00:00Z");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn the_node_status_reports_the_root_filesystem_with_its_configured_size() {
    let sim = start().await;
    sim.handle.set_rootfs_size(32 << 30);
    let r = sim.call("GET", "/nodes/pve/status", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let rootfs = &r.data()["rootfs"];
    assert_eq!(rootfs["total"], 32u64 << 30);
    let used = rootfs["used"].as_u64().expect("used");
    assert!(used > 0);
    assert_eq!(rootfs["avail"].as_u64(), Some((32u64 << 30) - used));
    assert_eq!(rootfs["free"], rootfs["avail"]);
    assert_eq!(status(&sim, "local").await["total"], 32u64 << 30);
    sim.handle.shutdown().await;
}
