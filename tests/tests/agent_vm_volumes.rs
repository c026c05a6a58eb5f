//! A VM's hot and bulk volumes (decision 0124), run the way the agent meets them: the real
//! agent and hub over TLS, the simulator, a VM provisioned from a base signed for VMs. Each
//! volume is a disk whose serial is its name: the hot one with `backup=1` on the storage the
//! signed plan classes `fast`, the bulk one with `backup=0` on its bulk target's storage. The
//! VM's tier backup holds the hot disk and leaves the bulk one out; the bulk volume is reported
//! and audited as not archived because it is a VM's disk, never skipped in silence. Killed
//! around each disk's step, the agent ends with each disk once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::path::Path;
use std::time::Duration;

use agent_support::crash::*;
use agent_support::signing::{plan_of, signed_plan};
use agent_support::storage::alerts;
use agent_support::vm::{append_config, desired_of, part, vm_archives, vm_golden};
use agent_support::*;
use bosun_proto::data_plan::{NodeStorage, PlanBulkBackup};
use bosun_proto::desired::{GuestKind, StorageClass};
use serde_json::{Value, json};
use uuid::Uuid;

/// A pool wide enough for one VM per killed step.
const POOL: &str = "[addresses]\nbridge = \"vmbr0\"\nipv4_first = \"192.0.2.20\"\n\
                    ipv4_last = \"192.0.2.99\"\nipv4_prefix = 24\nipv4_gateway = \"192.0.2.1\"\n";

fn local_dir(path: &Path, role: &str) -> Value {
    json!({
        "type": "local-dir",
        "durable_id": path.display().to_string(),
        "class": "slow",
        "role": role,
        "policy": {},
        "state": "attached",
    })
}

/// The directories the host's targets live in: `bulk` (a `bulk-data` target) and `backup` (a
/// `vzdump-target`), allowed to the agent as local directories.
fn roots(files: &AgentFiles) -> tempfile::TempDir {
    let roots = tempfile::tempdir().unwrap();
    for name in ["bulk", "backup"] {
        std::fs::create_dir_all(roots.path().join(name)).unwrap();
    }
    files.allow_local_dirs(&[roots.path().to_str().unwrap()]);
    roots
}

/// `desired` with both targets and, for every guest, hot volume `db` and bulk volume `media`
/// whose desired decision is a backup to `backup`.
fn with_volumes(desired: &mut Value, roots: &Path) {
    let backup = roots.join("backup").display().to_string();
    desired["storage"] = json!([
        local_dir(&roots.join("bulk"), "bulk-data"),
        local_dir(&roots.join("backup"), "vzdump-target"),
    ]);
    for guest in desired["guests"].as_array_mut().unwrap() {
        guest["hot_volumes"] = json!([{ "name": "db", "size_gib": 2, "path": "/var/lib/db" }]);
        guest["bulk_volumes"] = json!([{
            "name": "media", "size_gib": 4, "path": "/srv/media", "class": "slow",
            "backup": { "kind": "target", "target": backup },
        }]);
    }
}

/// `desired` under the operator's plan: `local-lvm` classed fast, and every guest's `media`
/// archived to `backup` (what the plan would do for a container's volume).
fn signed(desired: &Value, host: Uuid, roots: &Path) -> Value {
    let mut plan = plan_of(desired, host);
    plan.node_storages = vec![NodeStorage {
        storage: "local-lvm".to_owned(),
        class: StorageClass::Fast,
    }];
    plan.bulk_backups = desired["guests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| PlanBulkBackup {
            guest_id: g["guest_id"].as_str().unwrap().parse().unwrap(),
            volume: "media".into(),
            path: "/srv/media".into(),
            target: roots.join("backup").display().to_string(),
            schedule: "*:*:0/5".into(),
            keep_last: 3,
        })
        .collect();
    let mut out = desired.clone();
    out["data_plan"] = signed_plan(&plan);
    out
}

/// VM `vmid`'s disks whose serial is `serial`, as `(key, value)`.
fn disks(sim: &bosun_pvesim::SimHandle, vmid: u32, serial: &str) -> Vec<(String, String)> {
    sim.vm_config(vmid)
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, v)| bosun_pve::VmDisk::is_bus_slot(k) && part(v, "serial") == Some(serial))
        .collect()
}

/// The volume of a drive (`local-lvm:vm-100-disk-1`) and its storage.
fn volume_of(drive: &str) -> (String, String) {
    let volume = drive.split(',').next().unwrap().to_owned();
    let storage = volume.split(':').next().unwrap().to_owned();
    (volume, storage)
}

/// The hub's report of `guest`'s bulk volume `media`.
async fn media(hub: &RealHub, host: Uuid, guest: Uuid) -> Option<Value> {
    hub.host(host).await["last_report"]["bulk_volumes"]
        .as_array()?
        .iter()
        .find(|v| v["guest_id"] == json!(guest) && v["name"] == "media")
        .cloned()
}

/// The log of the newest vzdump task of `vmid`.
async fn vzdump_log(sim: &bosun_pvesim::SimHandle, vmid: u32) -> Vec<String> {
    let root = root_client(sim);
    let tasks = bosun_pve::Pve::list_tasks(
        &root,
        bosun_pve::TaskFilter {
            vmid: bosun_pve::Vmid::new(vmid).unwrap(),
            task_type: "vzdump",
            since: 0,
        },
    )
    .await
    .unwrap();
    let task = tasks
        .iter()
        .find(|t| t.status.as_deref() == Some("OK"))
        .expect("an ended vzdump of the vm");
    sim.task_log(&task.upid.to_string()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vms_volumes_are_disks_and_its_backup_holds_the_hot_one_only() {
    let (sim, hub, files) = enrolled_stack().await;
    append_config(&files, POOL);
    let roots = roots(&files);
    files.use_local_api(0, "[backup]\nstorage = \"local\"\nbulk_check_ms = 1000\n");
    let (_, _, golden) = vm_golden(&sim, &files);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    let mut desired = desired_of(&[(guest, "vm-media", GuestKind::Qemu, golden)]);
    with_volumes(&mut desired, roots.path());
    hub.put_desired(host, &signed(&desired, host, roots.path()))
        .await;
    let vmid = running_vmid(&agent.handles.reconcile, guest).await;

    // One disk per volume, found by its serial, where the rules put it.
    let db = disks(&sim, vmid, "db");
    let media_disk = disks(&sim, vmid, "media");
    assert_eq!(db.len(), 1, "{:?}", sim.vm_config(vmid));
    assert_eq!(media_disk.len(), 1, "{:?}", sim.vm_config(vmid));
    let (db_key, db_drive) = &db[0];
    let (media_key, media_drive) = &media_disk[0];
    assert!(db_key.starts_with("scsi") && media_key.starts_with("scsi"));
    assert_ne!(db_key, "scsi0", "the root disk keeps its slot");
    assert_ne!(media_key, "scsi0", "the root disk keeps its slot");
    let (db_volume, db_storage) = volume_of(db_drive);
    let (media_volume, media_storage) = volume_of(media_drive);
    assert_eq!(db_storage, "local-lvm", "{db_drive}");
    assert_eq!(part(db_drive, "backup"), Some("1"), "{db_drive}");
    assert_eq!(part(db_drive, "size"), Some("2G"), "{db_drive}");
    assert_eq!(part(media_drive, "backup"), Some("0"), "{media_drive}");
    assert_eq!(part(media_drive, "size"), Some("4G"), "{media_drive}");
    assert!(
        media_storage != "local-lvm" && media_storage != "local",
        "{media_drive}"
    );
    assert!(
        sim.storage_volumes(&media_storage).contains(&media_volume),
        "the bulk disk is allocated on the bulk target's storage"
    );
    assert!(sim.storage_volumes("local-lvm").contains(&db_volume));

    // Its tier backs it up: the archive holds the hot disk and leaves the bulk one out.
    desired["backup_policy"]["schedule"] = json!("*:*:0/5");
    hub.put_desired(host, &signed(&desired, host, roots.path()))
        .await;
    eventually(Duration::from_secs(60), "a backup of the vm", || {
        let found = !vm_archives(&sim, vmid).is_empty();
        async move { found }
    })
    .await;
    let log = vzdump_log(&sim, vmid).await;
    assert!(
        log.iter()
            .any(|l| l == &format!("INFO: include disk '{db_key}' '{db_volume}'")),
        "{log:#?}"
    );
    assert!(
        log.iter().any(|l| l
            == &format!("INFO: exclude disk '{media_key}' '{media_volume}' (backup=no)")),
        "{log:#?}"
    );

    // The bulk volume is not archived, and that is said: in the report, once in the audit.
    eventually(
        Duration::from_secs(30),
        "the report says the volume is not archived",
        || async {
            media(&hub, host, guest)
                .await
                .is_some_and(|m| m["not_archived"] == "vm_disk")
        },
    )
    .await;
    let reported = media(&hub, host, guest).await.unwrap();
    assert!(reported["last_archive"].is_null(), "{reported}");
    // The hub alerts on it although the plan names a target for it.
    eventually(Duration::from_secs(30), "the hub alerts", || async {
        alerts(&hub, host, "bulk_unprotected")
            .await
            .iter()
            .any(|a| {
                a["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("bulk volume media") && m.contains("vm_disk"))
            })
    })
    .await;
    let journal = agent.handles.journal.clone();
    let noted = || {
        let journal = journal.clone();
        async move {
            journal
                .audit_since(0, 10_000)
                .await
                .unwrap()
                .into_iter()
                .filter(|e| e.event.event == "bulk.not_archived")
                .map(|e| e.event)
                .collect::<Vec<_>>()
        }
    };
    eventually(Duration::from_secs(30), "the volume is audited", || async {
        !noted().await.is_empty()
    })
    .await;
    // Several looks later (one a second), still once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let audited = noted().await;
    assert_eq!(audited.len(), 1, "{audited:?}");
    assert_eq!(audited[0].guest_id, Some(guest.to_string()));
    assert_eq!(audited[0].detail["volume"], "media");
    assert_eq!(audited[0].detail["reason"], "vm_disk");
    assert_eq!(
        audited[0].detail["signed_target"],
        json!(roots.path().join("backup").display().to_string())
    );
    // Nothing was written to the plan's target for it, nor was the helper asked.
    assert!(!roots.path().join("backup").join("bosun-bulk").exists());
    // Each disk is still there once.
    assert_eq!(disks(&sim, vmid, "db").len(), 1);
    assert_eq!(disks(&sim, vmid, "media").len(), 1);
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// Where a provisioning is killed: before and after each disk's config change, and after the
/// config read the step starts from.
const POINTS: &[&str] = &[
    "provision_vm.read_config.done",
    "provision_vm.vm_volume.intent",
    "provision_vm.vm_volume.done",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_around_each_vm_volume_step_the_vm_ends_with_each_disk_once() {
    let (sim, hub, files) = enrolled_stack().await;
    append_config(&files, POOL);
    let roots = roots(&files);
    files.use_local_api(0, "");
    let (_, _, golden) = vm_golden(&sim, &files);
    let mut child = spawn_agent(&files.config_path, None);
    let host = host_id(&files.state_dir).await;
    let mut guests: Vec<(Uuid, String, GuestKind, Value)> = Vec::new();
    for (i, point) in POINTS.iter().enumerate() {
        guests.push((
            Uuid::new_v4(),
            format!("vm{i}"),
            GuestKind::Qemu,
            golden.clone(),
        ));
        kill(&mut child);
        child = spawn_agent(&files.config_path, Some(point));
        let views: Vec<(Uuid, &str, GuestKind, Value)> = guests
            .iter()
            .map(|(id, name, kind, golden)| (*id, name.as_str(), *kind, golden.clone()))
            .collect();
        let mut desired = desired_of(&views);
        with_volumes(&mut desired, roots.path());
        hub.put_desired(host, &signed(&desired, host, roots.path()))
            .await;
        assert_tripped(&mut child, &files.config_path, point).await;
        child = spawn_agent(&files.config_path, None);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        loop {
            let ids = sim.vm_ids();
            let whole = ids.len() == guests.len()
                && ids.iter().all(|v| {
                    sim.vm_running(*v) == Some(true)
                        && disks(&sim, *v, "db").len() == 1
                        && disks(&sim, *v, "media").len() == 1
                });
            if whole {
                break;
            }
            let seen: Vec<_> = ids.iter().map(|v| (v, sim.vm_config(*v))).collect();
            assert!(
                tokio::time::Instant::now() < deadline,
                "{point}: not converged: {seen:#?}; the agent's log ends:\n{}",
                log_tail(&files.config_path, 80)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        journal_settles(&files.state_dir).await;
        assert_no_unfinished(&files.state_dir, point);
        // Each disk once, and no volume of the operation's left over on either storage.
        for vmid in sim.vm_ids() {
            let config = sim.vm_config(vmid).unwrap();
            let referenced: Vec<String> = config
                .iter()
                .filter(|(k, _)| bosun_pve::VmDisk::is_bus_slot(k))
                .map(|(_, v)| volume_of(v).0)
                .collect();
            let (_, bulk) = volume_of(&disks(&sim, vmid, "media")[0].1);
            for storage in ["local-lvm", bulk.as_str()] {
                let prefix = format!("{storage}:");
                let owned: Vec<String> = sim
                    .storage_volumes(storage)
                    .into_iter()
                    .filter(|v| v.starts_with(&prefix) && v.contains(&format!("vm-{vmid}-disk-")))
                    .collect();
                for volume in &owned {
                    assert!(
                        referenced.contains(volume),
                        "{point}: {volume} of vm {vmid} is allocated but no disk holds it: {config:?}"
                    );
                }
            }
        }
    }
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}
