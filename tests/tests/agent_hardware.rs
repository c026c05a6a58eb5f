//! Per-guest thresholds and the node's hardware end to end: the agent process (the real
//! `bosun-agentd` when `BOSUN_AGENTD_BIN` names it, else this suite re-executed as one), the
//! simulator (whose disks, pools and guest load a test sets) and a real hub.
//!
//! - a guest with thresholds in desired state opens `guest_cpu_high` after the host's
//!   `samples` readings past its own high threshold, once, and recovers at its low one; bad
//!   thresholds are refused by the hub with the field named and the last good document kept;
//! - with no configuration, every disk of the node and the thin pool are reported from
//!   Proxmox's disk API; a disk the simulator degrades opens `disk_failing` and `disk_worn`,
//!   a thin pool's metadata filling opens `pool_fill_high`, and all recover when healed;
//!   the temperature sensors of `hwmon_dir` are reported, and one that reaches its chip's own
//!   `max` opens `temperature_high` and recovers as it cools.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::process::AgentProcess;
use agent_support::*;
use bosun_pvesim::{DiskDegrade, GuestLoad, Hardware};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

async fn alerts(hub: &RealHub, kind: &str) -> Vec<Value> {
    let (status, body) = hub
        .admin(Method::GET, "/v1/admin/alerts?limit=1000", None)
        .await;
    assert_eq!(status, 200, "{body}");
    body.as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a["kind"] == kind)
        .collect()
}

async fn alerted(hub: &RealHub, kind: &str, count: usize) -> Vec<Value> {
    eventually(
        Duration::from_secs(60),
        &format!("{count} `{kind}` alert(s)"),
        || async { alerts(hub, kind).await.len() >= count },
    )
    .await;
    let found = alerts(hub, kind).await;
    assert_eq!(found.len(), count, "{kind}: {found:?}");
    found
}

async fn host_id(hub: &RealHub) -> Uuid {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = hub.admin(Method::GET, "/v1/admin/hosts", None).await;
        if let Some(id) = body
            .as_array()
            .and_then(|a| a.first())
            .and_then(|h| h["host_id"].as_str())
            .and_then(|s| Uuid::parse_str(s).ok())
        {
            return id;
        }
        assert!(tokio::time::Instant::now() < deadline, "the host enrolled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn health(hub: &RealHub, host: Uuid) -> Value {
    hub.host(host).await["last_report"]["host_health"].clone()
}

fn append_config(files: &AgentFiles, text: &str) {
    let mut config = std::fs::read_to_string(&files.config_path).unwrap();
    config.push_str(text);
    std::fs::write(&files.config_path, config).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_past_its_own_threshold_opens_one_alert_and_recovers_at_its_low_one() {
    let (sim, hub, files) = enrolled_stack().await;
    append_config(&files, "[health]\ninterval_ms = 100\nsamples = 3\n");
    let agent = AgentProcess::start(&files.config_path);
    let host = host_id(&hub).await;
    let guest = Uuid::new_v4();
    let mut doc = desired(&sim, &[(guest, "shop")], "running");
    doc["guests"][0]["thresholds"] = json!({
        "cpu": { "high_percent": 80, "low_percent": 50 },
        "memory": { "high_percent": 95, "low_percent": 90 },
    });
    hub.put_desired(host, &doc).await;

    // Bad thresholds: refused with the field named; the last good document stays.
    let mut bad = doc.clone();
    bad["guests"][0]["thresholds"]["cpu"] = json!({ "high_percent": 50, "low_percent": 60 });
    let (status, body) = hub
        .admin(
            Method::PUT,
            &format!("/v1/admin/hosts/{host}/desired"),
            Some(bad),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body.to_string()
            .contains("guests[0].thresholds.cpu.low_percent"),
        "{body}"
    );
    let typo = {
        let mut t = doc.clone();
        t["guests"][0]["thresholds"] = json!({ "cpus": { "high_percent": 90, "low_percent": 50 } });
        t
    };
    let (status, body) = hub
        .admin(
            Method::PUT,
            &format!("/v1/admin/hosts/{host}/desired"),
            Some(typo),
        )
        .await;
    assert!(
        (400..500).contains(&status) && body.to_string().contains("cpus"),
        "a typo fails loudly: {status} {body}"
    );
    let kept = hub.host(host).await["desired"]["guests"][0]["thresholds"].clone();
    assert_eq!(kept["cpu"]["high_percent"], 80, "{kept}");

    eventually(Duration::from_secs(60), "the guest is watched", || {
        let hub = &hub;
        async move {
            let g = health(hub, host).await["guests"][0].clone();
            g["guest_id"] == json!(guest) && g["cpu"]["raised"] == false
        }
    })
    .await;
    let watched = health(&hub, host).await["guests"][0].clone();
    let vmid = u32::try_from(watched["vmid"].as_u64().unwrap()).unwrap();
    assert_eq!(watched["cpu"]["high"], 0.8, "{watched}");
    assert!(
        watched["memory"].is_object() && watched.get("disk").is_none(),
        "{watched}"
    );

    sim.set_guest_load(
        vmid,
        GuestLoad {
            cpu: Some(0.93),
            ..GuestLoad::default()
        },
    )
    .unwrap();
    let raised = alerted(&hub, "guest_cpu_high", 1).await;
    let message = raised[0]["message"].as_str().unwrap();
    assert!(
        message.contains("93%") && message.contains(&format!("vmid {vmid}")),
        "{message}"
    );
    // Between the thresholds it stays open; no second alert.
    sim.set_guest_load(
        vmid,
        GuestLoad {
            cpu: Some(0.6),
            ..GuestLoad::default()
        },
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(alerts(&hub, "guest_cpu_high").await.len(), 1);
    assert!(alerts(&hub, "guest_usage_recovered").await.is_empty());
    let (_, open) = hub.admin(Method::GET, "/v1/admin/alerts/open", None).await;
    assert!(
        open.as_array()
            .unwrap()
            .iter()
            .any(|a| a["kind"] == "guest_cpu_high" && a["subject"] == json!(guest.to_string())),
        "{open}"
    );
    sim.set_guest_load(
        vmid,
        GuestLoad {
            cpu: Some(0.3),
            ..GuestLoad::default()
        },
    )
    .unwrap();
    alerted(&hub, "guest_usage_recovered", 1).await;
    assert_eq!(alerts(&hub, "guest_cpu_high").await.len(), 1);
    agent.stop();
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodes_disks_and_pools_are_read_without_configuration_and_raise_when_they_degrade() {
    let (sim, hub, files) = enrolled_stack().await;
    let hwmon = files.dir.path().join("hwmon");
    std::fs::create_dir_all(hwmon.join("hwmon0")).unwrap();
    std::fs::write(hwmon.join("hwmon0/name"), "coretemp\n").unwrap();
    std::fs::write(hwmon.join("hwmon0/temp1_input"), "47000\n").unwrap();
    std::fs::write(hwmon.join("hwmon0/temp1_label"), "Package id 0\n").unwrap();
    std::fs::write(hwmon.join("hwmon0/temp1_max"), "90000\n").unwrap();
    std::fs::write(hwmon.join("hwmon0/temp1_crit"), "100000\n").unwrap();
    append_config(
        &files,
        &format!(
            "[health]\ninterval_ms = 100\nsamples = 2\nsmart_interval_ms = 100\nhwmon_dir = {:?}\n",
            hwmon.display().to_string()
        ),
    );
    let agent = AgentProcess::start(&files.config_path);
    let host = host_id(&hub).await;
    eventually(
        Duration::from_secs(30),
        "disks, pool and sensor reported",
        || {
            let hub = &hub;
            async move {
                let h = health(hub, host).await;
                h["disks"].as_array().is_some_and(|d| d.len() == 2)
                    && h["pools"][0]["name"] == "pve/data"
                    && h["temperatures"][0]["sensor"] == "coretemp/Package id 0"
            }
        },
    )
    .await;
    let h = health(&hub, host).await;
    let sda = h["disks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["device"] == "/dev/sda")
        .unwrap()
        .clone();
    assert_eq!(sda["state"], "passed", "{sda}");
    assert_eq!(sda["wear_used_percent"], 3, "{sda}");
    assert_eq!(sda["temperature_c"], 34.0, "{sda}");
    assert_eq!(h["pools"][0]["kind"], "lvmthin");
    assert_eq!(h["pools"][0]["data"]["usage"], 0.25, "{h}");
    assert!(alerts(&hub, "disk_failing").await.is_empty());

    sim.degrade_disk(&DiskDegrade {
        devpath: "/dev/sda".into(),
        wearout: Some(12),
        failing_attribute: Some("Reallocated_Sector_Ct".into()),
        ..DiskDegrade::default()
    })
    .unwrap();
    let failing = alerted(&hub, "disk_failing", 1).await;
    assert!(
        failing[0]["message"]
            .as_str()
            .unwrap()
            .contains("Reallocated_Sector_Ct: FAILING_NOW"),
        "{failing:?}"
    );
    let worn = alerted(&hub, "disk_worn", 1).await;
    assert!(
        worn[0]["message"]
            .as_str()
            .unwrap()
            .contains("88% of its life used")
    );

    let mut hw = sim.hardware();
    hw.thin_pools[0].metadata_used = hw.thin_pools[0].metadata_size / 100 * 96;
    sim.set_hardware(hw).unwrap();
    let filling = alerted(&hub, "pool_fill_high", 1).await;
    assert!(
        filling[0]["message"]
            .as_str()
            .unwrap()
            .contains("metadata 96%"),
        "{filling:?}"
    );

    // The CPU package reaches its chip's own limit.
    assert!(alerts(&hub, "temperature_high").await.is_empty());
    std::fs::write(hwmon.join("hwmon0/temp1_input"), "93000\n").unwrap();
    let hot = alerted(&hub, "temperature_high", 1).await;
    assert!(
        hot[0]["message"].as_str().unwrap().contains(
            "coretemp/Package id 0 on host vm reads 93 °C (raised at 90 °C or more, clears at 85 °C or less; the chip's critical point is 100 °C)"
        ),
        "{hot:?}"
    );

    // Healed: a new disk, the pool's metadata extended, the CPU cooled.
    sim.set_hardware(Hardware::default()).unwrap();
    std::fs::write(hwmon.join("hwmon0/temp1_input"), "61000\n").unwrap();
    alerted(&hub, "disk_recovered", 2).await;
    alerted(&hub, "pool_fill_recovered", 1).await;
    alerted(&hub, "temperature_recovered", 1).await;
    assert_eq!(
        alerts(&hub, "disk_failing").await.len(),
        1,
        "one alert while it held"
    );
    agent.stop();
    hub.stop().await;
    sim.shutdown().await;
}
