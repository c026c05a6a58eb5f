//! Damaged archives as a restore test meets them: an unreadable one fails its restore and
//! leaves nothing behind, one without `/sbin/init` restores but does not start.

use crate::common;

use std::collections::BTreeMap;

use bosun_pvesim::{ArchiveDamage, DEBIAN_TEMPLATE, SimError, damage_archive_remote};
use common::{Sim, start};
use serde_json::Value;

const PBS_FP: &str = "AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99";
const PBS_PASSWORD: &str = "pbs-secret";

/// The task's exit status and log.
async fn finished(sim: &Sim, upid: &str) -> (String, Vec<String>) {
    let exit = sim.wait(upid).await;
    (exit, sim.handle.task_log(upid).expect("log"))
}

/// `POST …/status/start` with `extra` parameters; the task's exit status and log.
async fn start_task(sim: &Sim, vmid: u32, extra: &[(&str, &str)]) -> (String, Vec<String>) {
    let upid = sim
        .call(
            "POST",
            &format!("/nodes/pve/lxc/{vmid}/status/start"),
            extra,
        )
        .await
        .upid();
    finished(sim, &upid).await
}

async fn status(sim: &Sim, vmid: u32) -> String {
    let r = sim
        .call("GET", &format!("/nodes/pve/lxc/{vmid}/status/current"), &[])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    r.data()["status"].as_str().unwrap_or_default().to_owned()
}

/// The backups `GET …/storage/{storage}/content` lists: volid → size.
async fn listed_backups(sim: &Sim, storage: &str) -> BTreeMap<String, u64> {
    let r = sim
        .call(
            "GET",
            &format!("/nodes/pve/storage/{storage}/content"),
            &[("content", "backup")],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    r.data()
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| {
            (
                v["volid"].as_str().unwrap_or_default().to_owned(),
                v["size"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

fn listed_guests(r: &Value) -> Vec<u64> {
    r.as_array()
        .expect("a list")
        .iter()
        .filter_map(|g| g["vmid"].as_u64())
        .collect()
}

const TAR_TAIL: [&str; 3] = [
    "tar: Unexpected EOF in archive",
    "tar: Unexpected EOF in archive",
    "tar: Error is not recoverable: exiting now",
];

#[tokio::test]
async fn an_unreadable_archive_fails_its_restore_and_leaves_no_guest_and_no_volume() {
    let sim = start().await;
    let golden = sim.handle.endpoint().golden_volid.clone();
    let before = listed_backups(&sim, "local").await;
    sim.handle
        .damage_archive(&golden, ArchiveDamage::Unreadable)
        .expect("the golden archive exists");

    let upid = sim.restore("101", &golden, &[("unique", "1")]).await.upid();
    let (exit, log) = finished(&sim, &upid).await;
    let error = "unable to restore CT 101 - command 'lxc-usernsexec -m u:0:100000:65536 -m \
                 g:0:100000:65536 -- tar xpf - --zstd --totals --one-file-system -p --sparse \
                 --numeric-owner --acls --xattrs '--xattrs-include=user.*' \
                 '--xattrs-include=security.capability' '--warning=no-file-ignored' \
                 '--warning=no-xattr-write' -C /var/lib/lxc/101/rootfs --skip-old-files \
                 --anchored --exclude './dev/*'' failed: exit code 2";
    assert_eq!(exit, error);
    let file = golden.trim_start_matches("local:backup/");
    let extracting = format!("extracting archive '/var/lib/vz/dump/{file}'");
    let at = log
        .iter()
        .position(|l| *l == extracting)
        .unwrap_or_else(|| panic!("{log:#?}"));
    let mut expected = vec!["zstd: /*stdin*\\: unexpected end of file"];
    expected.extend(TAR_TAIL);
    expected.push("  Logical volume \"vm-101-disk-0\" successfully removed.");
    let error_line = format!("TASK ERROR: {error}");
    expected.push(&error_line);
    assert_eq!(log[at + 1..], expected[..], "{log:#?}");
    assert!(
        !log.iter().any(|l| l.starts_with("Total bytes read")),
        "{log:#?}"
    );

    // Neither config nor volume is left; the archive is still listed with its size.
    assert_eq!(sim.handle.guest_config(101), None);
    assert!(sim.handle.storage_volumes("local-lvm").is_empty());
    let guests = sim.call("GET", "/nodes/pve/lxc", &[]).await;
    assert!(!listed_guests(guests.data()).contains(&101), "{guests:?}");
    let r = sim.call("GET", "/nodes/pve/lxc/101/config", &[]).await;
    assert_eq!(r.status, 500, "{r:?}");
    assert_eq!(listed_backups(&sim, "local").await, before);

    // Every restore of it fails the same way.
    let upid = sim.restore("102", &golden, &[]).await.upid();
    assert!(
        sim.wait(&upid)
            .await
            .starts_with("unable to restore CT 102 - command ")
    );
    assert_eq!(sim.handle.guest_ids(), Vec::<u32>::new());

    // An unreadable template fails its create the same way.
    sim.handle
        .damage_archive(DEBIAN_TEMPLATE, ArchiveDamage::Unreadable)
        .expect("the template exists");
    let upid = sim
        .call(
            "POST",
            "/nodes/pve/lxc",
            &[
                ("vmid", "103"),
                ("ostemplate", DEBIAN_TEMPLATE),
                ("storage", "local-lvm"),
            ],
        )
        .await
        .upid();
    let (exit, log) = finished(&sim, &upid).await;
    assert!(
        exit.starts_with(
            "unable to create CT 103 - command 'lxc-usernsexec -m u:0:100000:65536 -m \
             g:0:100000:65536 -- tar xpf - --zstd --totals "
        ),
        "{exit}"
    );
    let cache = "extracting archive \
                 '/var/lib/vz/template/cache/debian-12-standard_12.7-1_amd64.tar.zst'";
    assert!(log.iter().any(|l| l == cache), "{log:#?}");
    assert_eq!(sim.handle.guest_ids(), Vec::<u32>::new());
    assert!(sim.handle.storage_volumes("local-lvm").is_empty());
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn an_unreadable_archive_restored_over_an_existing_guest_takes_the_guest_with_it() {
    let sim = start().await;
    sim.restore_golden(103).await;
    let old_volumes = sim.handle.storage_volumes("local-lvm");
    assert_eq!(old_volumes, ["local-lvm:vm-103-disk-0"]);
    let conf: BTreeMap<String, String> = [
        ("arch", "amd64"),
        ("hostname", "privileged"),
        ("rootfs", "local-lvm:vm-103-disk-0,size=2G"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    let archive = sim.handle.add_backup("local", 103, conf).expect("added");
    sim.handle
        .damage_archive(&archive, ArchiveDamage::Unreadable)
        .expect("exists");

    // As root: the archive is of a privileged CT, so tar runs without lxc-usernsexec.
    let root = sim.root();
    let upid = sim
        .restore_as(&root, "103", &archive, &[("force", "1")])
        .await
        .upid();
    let (exit, log) = finished(&sim, &upid).await;
    assert!(
        exit.starts_with("unable to restore CT 103 - command 'tar xpf - --zstd --totals "),
        "{exit}"
    );
    assert!(exit.ends_with("' failed: exit code 2"), "{exit}");
    assert!(log.iter().any(|l| l == TAR_TAIL[2]), "{log:#?}");
    // PVE destroys the old CT's volumes once the new ones exist, so nothing of it is left.
    assert_eq!(sim.handle.guest_config(103), None);
    assert!(sim.handle.storage_volumes("local-lvm").is_empty());
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn an_unreadable_pbs_backup_fails_in_the_backup_client() {
    let sim = start().await;
    sim.handle
        .add_pbs_remote("pbs.example.net", PBS_FP, "offsite", PBS_PASSWORD);
    let r = sim
        .call(
            "POST",
            "/storage",
            &[
                ("storage", "offsite"),
                ("type", "pbs"),
                ("server", "pbs.example.net"),
                ("datastore", "offsite"),
                ("username", "bosun@pbs!agent"),
                ("password", PBS_PASSWORD),
                ("fingerprint", PBS_FP),
                ("namespace", "site-a"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    sim.restore_golden(101).await;
    let upid = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", "101"), ("storage", "offsite")],
        )
        .await
        .upid();
    assert_eq!(sim.wait(&upid).await, "OK");
    let backup = sim.handle.storage_volumes("offsite").remove(0);
    let snapshot = backup.trim_start_matches("offsite:backup/").to_owned();
    assert!(snapshot.starts_with("ct/101/"), "{backup}");
    sim.handle
        .damage_archive(&backup, ArchiveDamage::Unreadable)
        .expect("exists");
    assert!(listed_backups(&sim, "offsite").await.contains_key(&backup));

    let upid = sim.restore("102", &backup, &[]).await.upid();
    let (exit, log) = finished(&sim, &upid).await;
    assert_eq!(
        exit,
        format!(
            "unable to restore CT 102 - command 'lxc-usernsexec -m u:0:100000:65536 -m \
             g:0:100000:65536 -- /usr/bin/proxmox-backup-client restore '--crypt-mode=none' \
             {snapshot} root.pxar /var/lib/lxc/102/rootfs --allow-existing-dirs --repository \
             bosun@pbs!agent@pbs.example.net:offsite --ns site-a' failed: exit code 255"
        )
    );
    assert!(
        log.iter().any(|l| l
            == "Error: error extracting archive - encountered unexpected error during \
                extraction: error at entry \"libc.so.6\": failed to extract file: failed to \
                copy file contents: detected chunk with wrong digest."),
        "{log:#?}"
    );
    assert!(!log.iter().any(|l| l.starts_with("extracting archive")));
    assert_eq!(sim.handle.guest_config(102), None);
    assert_eq!(
        sim.handle.storage_volumes("local-lvm"),
        ["local-lvm:vm-101-disk-0"]
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn an_archive_without_init_restores_but_its_guest_does_not_start() {
    let sim = start().await;
    let golden = sim.handle.endpoint().golden_volid.clone();
    assert!(sim.handle.archive_file(&golden, "/sbin/init").is_some());
    sim.handle
        .damage_archive(&golden, ArchiveDamage::NoInit)
        .expect("exists");
    assert_eq!(sim.handle.archive_file(&golden, "/sbin/init"), None);

    sim.restore_golden(104).await;
    assert_eq!(sim.handle.guest_file(104, "/sbin/init"), None);
    let (exit, log) = start_task(&sim, 104, &[]).await;
    assert_eq!(exit, "startup for container '104' failed");
    assert_eq!(
        log,
        [
            "sync_wait: 34 An error occurred in another process (expected sequence number 7)",
            "__lxc_start: 2119 Failed to spawn container \"104\"",
            "TASK ERROR: startup for container '104' failed",
        ]
    );
    assert_eq!(status(&sim, 104).await, "stopped");
    assert_eq!(sim.handle.guest_running(104), Some(false));

    // With debug, lxc-start's own log names the init it could not exec.
    let (exit, log) = start_task(&sim, 104, &[("debug", "1")]).await;
    assert_eq!(exit, "startup for container '104' failed");
    assert!(
        log.iter().any(|l| l
            == "ERROR    start - ../src/lxc/start.c:start:2209 - No such file or directory - \
                Failed to exec \"/sbin/init\""),
        "{log:#?}"
    );
    assert_eq!(status(&sim, 104).await, "stopped");

    // With start=1 the restore ends OK and its start fails as a task of its own.
    let upid = sim.restore("105", &golden, &[("start", "1")]).await.upid();
    assert_eq!(sim.wait(&upid).await, "OK");
    let tasks = sim
        .call(
            "GET",
            "/nodes/pve/tasks",
            &[
                ("vmid", "105"),
                ("typefilter", "vzstart"),
                ("source", "all"),
            ],
        )
        .await;
    let starts = tasks.data().as_array().expect("a list");
    assert_eq!(starts.len(), 1, "{tasks:?}");
    let start_upid = starts[0]["upid"].as_str().expect("upid").to_owned();
    assert_eq!(
        sim.wait(&start_upid).await,
        "startup for container '105' failed"
    );
    assert_eq!(status(&sim, 105).await, "stopped");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn an_archive_with_corrupt_data_restores_and_starts_with_the_damaged_file() {
    let sim = start().await;
    let golden = sim.handle.endpoint().golden_volid.clone();
    let before = sim
        .handle
        .archive_file(&golden, "/etc/os-release")
        .expect("in the archive");
    sim.handle
        .damage_archive(
            &golden,
            ArchiveDamage::CorruptData {
                path: "/etc/os-release".to_owned(),
            },
        )
        .expect("exists");
    let after = sim
        .handle
        .archive_file(&golden, "/etc/os-release")
        .expect("still there");
    assert_ne!(after.content, before.content);
    assert_eq!(after.content.len(), before.content.len());
    assert_eq!((after.mode, after.uid), (before.mode, before.uid));

    sim.restore_golden(106).await;
    let (exit, _) = start_task(&sim, 106, &[]).await;
    assert_eq!(exit, "OK", "init is whole: the guest starts");
    assert_eq!(status(&sim, 106).await, "running");
    assert_eq!(
        sim.handle
            .guest_file(106, "/etc/os-release")
            .map(|f| f.content),
        Some(after.content)
    );
    // Only a regular file can be corrupted; over the admin endpoint the damage names it.
    let missing = sim.handle.damage_archive(
        &golden,
        ArchiveDamage::CorruptData {
            path: "/srv/nothing".to_owned(),
        },
    );
    assert!(
        matches!(missing, Err(SimError::DamageData { ref path, .. }) if path == "/srv/nothing"),
        "{missing:?}"
    );
    let endpoint = sim.handle.endpoint().clone();
    damage_archive_remote(
        &sim.client,
        &endpoint,
        &golden,
        ArchiveDamage::CorruptData {
            path: "/etc/hostname".to_owned(),
        },
    )
    .await
    .expect("damaged");
    let err = damage_archive_remote(
        &sim.client,
        &endpoint,
        &golden,
        ArchiveDamage::CorruptData {
            path: "/etc".to_owned(),
        },
    )
    .await
    .expect_err("a directory");
    assert_eq!(err.status().map(|s| s.as_u16()), Some(404));
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn the_admin_endpoint_damages_archives_and_refuses_unknown_ones() {
    let sim = start().await;
    let endpoint = sim.handle.endpoint().clone();
    let golden = endpoint.golden_volid.clone();
    let url = format!("{}/archives/damage", endpoint.admin_url);
    let post = |body: Value, token: Option<&str>| {
        let mut req = sim.client.post(&url).json(&body);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        req.send()
    };
    let admin = Some(endpoint.admin_token.as_str());

    let r = post(
        serde_json::json!({"volid": golden, "damage": "unreadable"}),
        None,
    )
    .await
    .expect("answered");
    assert_eq!(r.status(), 401);
    let r = post(
        serde_json::json!({"volid": golden, "damage": "scratched"}),
        admin,
    )
    .await
    .expect("answered");
    assert_eq!(r.status(), 400);
    let r = post(
        serde_json::json!({"volid": "local:backup/vzdump-lxc-1-2020_01_01-00_00_00.tar.zst", "damage": "no_init"}),
        admin,
    )
    .await
    .expect("answered");
    assert_eq!(r.status(), 404);
    assert!(
        r.text().await.expect("body").contains("no backup archive"),
        "names the volid"
    );
    let err = damage_archive_remote(
        &sim.client,
        &endpoint,
        "local-lvm:vm-999-disk-0",
        ArchiveDamage::Unreadable,
    )
    .await
    .expect_err("no such archive");
    assert_eq!(err.status().map(|s| s.as_u16()), Some(404));
    // Nothing was damaged by the refused calls.
    sim.restore_golden(109).await;
    assert!(sim.handle.archive_file(&golden, "/sbin/init").is_some());

    damage_archive_remote(&sim.client, &endpoint, &golden, ArchiveDamage::NoInit)
        .await
        .expect("damaged");
    assert_eq!(sim.handle.archive_file(&golden, "/sbin/init"), None);
    damage_archive_remote(&sim.client, &endpoint, &golden, ArchiveDamage::Unreadable)
        .await
        .expect("damaged");
    let upid = sim.restore("110", &golden, &[]).await.upid();
    assert!(sim.wait(&upid).await.contains("failed: exit code 2"));

    let unknown = sim
        .handle
        .damage_archive("local:backup/nothing.tar.zst", ArchiveDamage::NoInit);
    assert!(
        matches!(unknown, Err(SimError::DamageArchive { ref volid }) if volid == "local:backup/nothing.tar.zst"),
        "{unknown:?}"
    );
    sim.handle.shutdown().await;
}
