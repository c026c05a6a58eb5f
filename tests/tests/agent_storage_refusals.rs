//! A hub that sets storage targets cannot make the agent write into another guest or the
//! host, nor mount one of the host's own disks: a `local-dir` target beneath no root
//! `agent.toml` allows (a guest's root filesystem, a symlink leading out of the root, `/`,
//! `/etc/pve`) and a USB target naming a fixed disk, or no serial, are reported `refused`
//! with their reason, raise one `storage_refused` alert each, and never reach Proxmox
//! (no `POST /storage`) or the mount table.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::storage::*;
use agent_support::*;
use bosun_agentd::data::storage::naming::storage_id_of;
use bosun_proto::desired::StorageType;
use bosun_proto::helper::Request;
use serde_json::{Value, json};
use uuid::Uuid;

fn target(kind: &str, durable_id: &str) -> Value {
    json!({
        "type": kind,
        "durable_id": durable_id,
        "class": "slow",
        "role": "vzdump-target",
        "policy": {},
        "state": "attached",
    })
}

/// Waits until the hub has a report of every target in `durable_ids`; gives them.
async fn reports(hub: &RealHub, host: Uuid, durable_ids: &[String]) -> Vec<Value> {
    eventually(
        Duration::from_secs(30),
        "every target is reported",
        || async {
            let mut all = true;
            for id in durable_ids {
                all &= target_report(hub, host, id)
                    .await
                    .is_some_and(|t| t["status"] != "unknown");
            }
            all
        },
    )
    .await;
    let mut out = Vec::new();
    for id in durable_ids {
        out.push(target_report(hub, host, id).await.unwrap());
    }
    out
}

/// The storages the agent asked Proxmox to add.
fn storage_posts(sim: &bosun_pvesim::SimHandle) -> Vec<String> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == "/storage")
        .map(|r| {
            r.params
                .iter()
                .find(|(k, _)| k == "storage")
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_dir_targets_outside_the_allowed_roots_never_reach_proxmox() {
    let (sim, hub, files) = enrolled_stack().await;
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("backups");
    let customer_b = base.path().join("customer-b");
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&customer_b).unwrap();
    std::os::unix::fs::symlink(&customer_b, root.join("escape")).unwrap();
    files.allow_local_dirs(&[root.to_str().unwrap()]);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;

    let allowed = format!("{}/nightly", root.display());
    let hostile = [
        "/var/lib/lxc/101/rootfs/srv/backups".to_owned(),
        format!("{}/escape/dump", root.display()),
        "/".to_owned(),
        "/etc/pve".to_owned(),
        "/var/lib/vz/images/102".to_owned(),
        format!("{}/subvol-103-disk-0", root.display()),
    ];
    let mut desired = desired(&sim, &[], "running");
    let mut targets: Vec<Value> = hostile.iter().map(|p| target("local-dir", p)).collect();
    // The control: an allowed path is registered, so the refusals are the check's doing.
    targets.push(target("local-dir", &allowed));
    desired["storage"] = Value::Array(targets);
    hub.put_desired(host, &desired).await;

    let mut ids = hostile.to_vec();
    ids.push(allowed.clone());
    let reported = reports(&hub, host, &ids).await;
    for (id, report) in ids.iter().zip(&reported) {
        if *id == allowed {
            assert_eq!(report["status"], "mounted", "{report}");
        } else {
            assert_eq!(report["status"], "refused", "{id}: {report}");
            // `/` cannot even stand in a signed plan; the others could, and the agent's own
            // check refuses them.
            let expected = if id == "/" {
                "not_in_plan"
            } else {
                "path_not_allowed"
            };
            assert_eq!(report["reason"], expected, "{id}: {report}");
        }
    }
    // Several passes later: one alert per refused target, and Proxmox heard of the allowed
    // target only.
    tokio::time::sleep(Duration::from_secs(3)).await;
    eventually(
        Duration::from_secs(10),
        "one storage_refused alert per target",
        || async { alerts(&hub, host, "storage_refused").await.len() >= hostile.len() },
    )
    .await;
    assert_eq!(
        alerts(&hub, host, "storage_refused").await.len(),
        hostile.len()
    );
    assert_eq!(
        storage_posts(&sim),
        [storage_id_of(StorageType::LocalDir, &allowed)
            .as_str()
            .to_owned()]
    );
    assert!(
        std::fs::read_dir(&customer_b).unwrap().next().is_none(),
        "nothing was made through the symlink"
    );
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usb_target_naming_a_fixed_disk_or_no_serial_is_refused_and_nothing_is_mounted() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipping: loop devices and mounts need root; CI runs as root");
        return;
    }
    let (sim, hub, files) = enrolled_stack().await;
    let mount_root = files.helper.mount_root.clone();
    let mut text = std::fs::read_to_string(&files.config_path).unwrap();
    text.push_str(&format!(
        "[backup]\nmount_root = {mount_root:?}\nwatch_interval_ms = 500\n"
    ));
    std::fs::write(&files.config_path, text).unwrap();
    // A disk of the host's own (not removable, not on USB: a loop device as sysfs has it),
    // named with a serial; and a real USB stick whose target names no serial.
    let fixed_uuid = Uuid::new_v4().to_string();
    let _fixed = UsbDisk::new(&fixed_uuid);
    let stick_uuid = Uuid::new_v4().to_string();
    let stick = UsbDisk::new(&stick_uuid);
    files
        .helper
        .mark_usb_disk(stick.device.as_deref().unwrap(), USB_SERIAL);
    let _cleanup = [&fixed_uuid, &stick_uuid]
        .map(|u| Unmount(mount_root.join(storage_id_of(StorageType::Usb, u).as_str())));
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let mut desired = desired(&sim, &[], "running");
    let mut fixed_target = target("usb", &fixed_uuid);
    fixed_target["serial"] = json!(USB_SERIAL);
    desired["storage"] = json!([fixed_target, target("usb", &stick_uuid)]);
    hub.put_desired(host, &desired).await;

    let ids = [fixed_uuid.clone(), stick_uuid.clone()];
    eventually(Duration::from_secs(30), "both targets refused", || async {
        let mut refused = true;
        for id in &ids {
            refused &= target_report(&hub, host, id)
                .await
                .is_some_and(|t| t["status"] == "refused");
        }
        refused
    })
    .await;
    for id in &ids {
        let report = target_report(&hub, host, id).await.unwrap();
        // A USB target without a serial cannot stand in a signed plan.
        let expected = if *id == stick_uuid {
            "not_in_plan"
        } else {
            "device_not_allowed"
        };
        assert_eq!(report["reason"], expected, "{report}");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(alerts(&hub, host, "storage_refused").await.len(), 2);
    // The helper was asked about the fixed disk (and refused it); the target without a
    // serial never got that far.
    let asked: Vec<String> = files
        .helper
        .calls
        .lock()
        .iter()
        .filter_map(|r| match r {
            Request::MountByUuid(m) => Some(m.uuid.as_str().to_owned()),
            _ => None,
        })
        .collect();
    assert!(asked.contains(&fixed_uuid), "{asked:?}");
    assert!(!asked.contains(&stick_uuid), "{asked:?}");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(mount_root.to_str().unwrap()),
        "{mountinfo}"
    );
    assert!(storage_posts(&sim).is_empty(), "{:?}", storage_posts(&sim));
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
