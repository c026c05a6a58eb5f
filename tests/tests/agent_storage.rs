//! The storage manifest end to end: the simulator, a real hub and the agent. A PBS target
//! with credentials sealed to the host is registered with the host's encryption key K (the
//! hub sees neither), reported `mounted`, and watched: the PBS going unreachable reaches the
//! hub as a `storage_lost` alert within seconds, and its return as `storage_recovered`.
//! Settings an administrator changed are put back in place; a hub that drops the target
//! from desired state gets it reported as left registered, never detached.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::{Duration, Instant};

use agent_support::storage::*;
use agent_support::*;
use bosun_agentd::data::storage::naming::storage_id_of;
use bosun_proto::desired::StorageType;
use bosun_pve::{Pve, StorageUpdate};
use serde_json::json;
use uuid::Uuid;

const FP: &str = "12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pbs_target_is_registered_encrypted_watched_and_never_detached_by_the_hub() {
    let (sim, hub, files) = enrolled_stack().await;
    let password = format!("pbs-{}", Uuid::new_v4().simple());
    sim.set_strict_remotes(true);
    sim.add_pbs_remote("pbs.example", FP, "store1", &password);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let recipient = hub_recipient(&hub, host).await;
    let durable = format!("backup@pbs!bosun@pbs.example:store1#{FP}");
    let storage = pbs_storage(&durable, &format!("host-{}", host.simple()));
    let mut target = json!({
        "type": "pbs",
        "durable_id": durable,
        "class": "slow",
        "role": "pbs-offsite",
        "policy": { "schedule": "03:00", "retention": { "keep_daily": 7 } },
        "state": "attached",
        "namespace": format!("host-{}", host.simple()),
    });
    target["credentials"] = json!(seal_for(&recipient, host, &target, &password));
    let mut desired = desired(&sim, &[], "running");
    desired["storage"] = json!([target]);
    desired["backup_policy"]["further_tiers"] = json!([durable]);
    hub.put_desired(host, &desired).await;

    // Registered with K and reported mounted, under its durable id.
    eventually(Duration::from_secs(30), "the target is mounted", || async {
        target_report(&hub, host, &durable)
            .await
            .is_some_and(|t| t["status"] == "mounted")
    })
    .await;
    let reported = target_report(&hub, host, &durable).await.unwrap();
    assert_eq!(reported["storage_id"], storage.as_str());
    assert_eq!(reported["role"], "pbs-offsite");
    let root = root_client(&sim);
    let config = root.storage_config(&storage).await.unwrap();
    let key = bosun_agentd::trust::keys::pbs_key::PbsKey::load_or_create(&files.state_dir).unwrap();
    assert_eq!(
        config["encryption-key"]
            .as_str()
            .map(str::to_ascii_lowercase),
        Some(key.fingerprint().to_ascii_lowercase()),
        "Proxmox holds K: {config:?}"
    );
    assert_eq!(config["namespace"], format!("host-{}", host.simple()));
    // The tier is reported with the retention the signed plan names.
    let tiers = hub.host(host).await["last_report"]["tiers"].clone();
    assert_eq!(tiers[1]["target"], durable, "{tiers}");
    assert_eq!(tiers[1]["applied"]["keep_daily"], 7, "{tiers}");
    assert!(tiers[1]["held"].is_null(), "{tiers}");

    // The PBS drops off the network: noticed, reported and alerted within 5 s.
    sim.set_remote_reachable("pbs.example", false);
    let lost_at = Instant::now();
    eventually(
        Duration::from_secs(10),
        "storage_lost at the hub",
        || async { !alerts(&hub, host, "storage_lost").await.is_empty() },
    )
    .await;
    let took = lost_at.elapsed();
    eprintln!("PBS unreachable → storage_lost at the hub after {took:?}");
    assert!(took < Duration::from_secs(5), "the hub knew after {took:?}");
    assert_eq!(
        target_report(&hub, host, &durable).await.unwrap()["status"],
        "unreachable"
    );
    sim.set_remote_reachable("pbs.example", true);
    eventually(Duration::from_secs(10), "storage_recovered", || async {
        !alerts(&hub, host, "storage_recovered").await.is_empty()
    })
    .await;
    assert_eq!(alerts(&hub, host, "storage_lost").await.len(), 1);

    // An administrator points the storage at another namespace; a new generation puts it
    // back.
    root.update_storage(
        &storage,
        &StorageUpdate {
            namespace: Some("someone-else".into()),
            ..StorageUpdate::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("admin update: {e}"));
    desired["backup_policy"]["quiesce_grace_minutes"] = json!(5);
    hub.put_desired(host, &desired).await;
    let namespace = format!("host-{}", host.simple());
    eventually(Duration::from_secs(30), "namespace put back", || {
        let (root, storage, namespace) = (&root, storage.clone(), namespace.clone());
        async move {
            root.storage_config(&storage)
                .await
                .is_ok_and(|c| c["namespace"] == namespace.as_str())
        }
    })
    .await;

    // The hub alone drops the target: the signed plan keeps it, mounted and a tier.
    desired["storage"] = json!([]);
    desired["backup_policy"]["further_tiers"] = json!([]);
    let mut unplanned = desired.clone();
    unplanned["backup_policy"]["quiesce_grace_minutes"] = json!(6);
    hub.put_desired_unplanned(host, &unplanned).await;
    eventually(
        Duration::from_secs(30),
        "the new generation acted on",
        || async {
            hub.host(host).await["last_report"]["tiers"]
                .as_array()
                .is_some_and(|t| t.len() == 2)
                && target_report(&hub, host, &durable)
                    .await
                    .is_some_and(|t| t["status"] == "mounted")
        },
    )
    .await;
    // The operator signs a plan without it: reported as left registered; no storage is ever
    // deleted.
    let planned = signing::with_plan(desired.clone(), host);
    hub.put_desired(host, &planned).await;
    eventually(
        Duration::from_secs(30),
        "reported as left registered",
        || async {
            target_report(&hub, host, &durable)
                .await
                .is_some_and(|t| t["status"] == "detached" && t["reason"] == "left_plan")
        },
    )
    .await;
    assert!(
        root.storage_config(&storage).await.is_ok(),
        "still registered"
    );
    let deletes: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.path.starts_with("/storage"))
        .collect();
    assert!(deletes.is_empty(), "{deletes:?}");
    // The password went to Proxmox only: the hub never had it.
    agent.stop().await;
    assert!(
        !hub_files_contain(&hub, password.as_bytes()),
        "the plaintext is at the hub"
    );
    hub.stop().await;
    sim.shutdown().await;
}

/// Whether any file the hub wrote holds `needle`.
fn hub_files_contain(hub: &RealHub, needle: &[u8]) -> bool {
    let mut stack = vec![hub.dir.path().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path)
                .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle))
            {
                return true;
            }
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usb_disk_pulled_is_reported_within_seconds_and_mounted_again_when_it_returns() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipping: loop devices and mounts need root; CI runs as root");
        return;
    }
    let (sim, hub, files) = enrolled_stack().await;
    let mount_root = files.helper.mount_root.clone();
    let mut text = std::fs::read_to_string(&files.config_path).unwrap();
    text.push_str(&format!(
        "[backup]\nmount_root = {:?}\nwatch_interval_ms = 500\n",
        mount_root
    ));
    std::fs::write(&files.config_path, text).unwrap();
    let uuid = Uuid::new_v4().to_string();
    let mut disk = UsbDisk::new(&uuid);
    // A USB stick's sysfs entry: removable, with its serial (a loop device has neither).
    let mark = |disk: &UsbDisk| {
        files
            .helper
            .mark_usb_disk(disk.device.as_deref().unwrap(), USB_SERIAL)
    };
    mark(&disk);
    let storage = usb_storage(&uuid, USB_SERIAL);
    let mount_point = mount_root.join(storage.as_str());
    let _cleanup = Unmount(mount_point.clone());
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let mut desired = desired(&sim, &[], "running");
    desired["storage"] = json!([{
        "type": "usb",
        "durable_id": uuid,
        "class": "slow",
        "role": "vzdump-target",
        "policy": {},
        "state": "attached",
        "fstype": "ext4",
        "serial": USB_SERIAL,
    }]);
    hub.put_desired(host, &desired).await;
    eventually(
        Duration::from_secs(30),
        "the USB target is mounted",
        || async {
            target_report(&hub, host, &uuid)
                .await
                .is_some_and(|t| t["status"] == "mounted")
        },
    )
    .await;
    // Mounted by UUID at the helper's mount root, registered as a dir storage that is
    // offline whenever nothing is mounted there.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        mountinfo.contains(&mount_point.display().to_string()),
        "{mountinfo}"
    );
    let config = root_client(&sim).storage_config(&storage).await.unwrap();
    assert_eq!(config["type"], "dir");
    assert_eq!(config["path"], mount_point.display().to_string());
    assert!(
        matches!(config["is_mountpoint"].as_str(), Some("yes" | "1")),
        "{config:?}"
    );

    disk.pull(&mount_point);
    let pulled = Instant::now();
    eventually(
        Duration::from_secs(10),
        "storage_lost at the hub",
        || async { !alerts(&hub, host, "storage_lost").await.is_empty() },
    )
    .await;
    let took = pulled.elapsed();
    eprintln!("USB pulled → storage_lost at the hub after {took:?}");
    assert!(took < Duration::from_secs(5), "the hub knew after {took:?}");
    assert_eq!(
        target_report(&hub, host, &uuid).await.unwrap()["status"],
        "disconnected"
    );

    // Plugged in again (another loop device, as another USB port would give): mounted by
    // its UUID once more, and the hub hears it is back.
    disk.plug();
    mark(&disk);
    eventually(
        Duration::from_secs(30),
        "storage_recovered at the hub",
        || async { !alerts(&hub, host, "storage_recovered").await.is_empty() },
    )
    .await;
    assert_eq!(
        target_report(&hub, host, &uuid).await.unwrap()["status"],
        "mounted"
    );
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_volume_is_a_backup_0_mount_point_with_its_backup_decision_reported() {
    let (sim, hub, files) = enrolled_stack().await;
    files.allow_local_dirs(&["/srv"]);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    let mut desired = desired(&sim, &[(guest, "media")], "running");
    desired["storage"] = json!([{
        "type": "local-dir",
        "durable_id": "/srv/bulk",
        "class": "slow",
        "role": "bulk-data",
        "policy": {},
        "state": "attached",
    }]);
    desired["guests"][0]["bulk_volumes"] = json!([{
        "name": "media",
        "size_gib": 20,
        "path": "/mnt/media",
        "class": "slow",
        "backup": { "kind": "none", "acknowledged_by": "ops@example 2026-11-20: re-downloadable" },
    }]);
    hub.put_desired(host, &desired).await;
    let vmid = running_vmid(&agent.handles.reconcile, guest).await;
    let storage = storage_id_of(StorageType::LocalDir, "/srv/bulk");
    let mp0 = sim
        .guest_config(vmid)
        .and_then(|c| c.get("mp0").cloned())
        .expect("mp0 exists");
    assert!(mp0.starts_with(&format!("{storage}:")), "{mp0}");
    assert!(
        mp0.contains("mp=/mnt/media") && mp0.contains("backup=0"),
        "{mp0}"
    );
    // The decision is in the report: no silent loss.
    eventually(
        Duration::from_secs(30),
        "the bulk volume is reported",
        || async {
            hub.host(host).await["last_report"]["bulk_volumes"]
                .as_array()
                .is_some_and(|v| v.len() == 1)
        },
    )
    .await;
    let reported = hub.host(host).await["last_report"]["bulk_volumes"][0].clone();
    assert_eq!(reported["guest_id"], json!(guest));
    assert_eq!(reported["target"], "/srv/bulk");
    assert_eq!(reported["storage_id"], storage.as_str());
    assert_eq!(reported["backup"]["kind"], "none");
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
