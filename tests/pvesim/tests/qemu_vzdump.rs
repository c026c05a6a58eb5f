//! vzdump of QEMU guests as `PVE::VZDump::QemuServer` takes them: a running VM whose agent
//! answers is frozen for the start of the backup job and thawed after it; one whose agent does
//! not answer is backed up unfrozen; a stopped VM in `stop` mode; the archive is a
//! `vzdump-qemu-…vma.zst` whose config `extractconfig` reads back.

use crate::common;

use std::time::Duration;

use bosun_pvesim::{SimConfig, TaskDurations};
use common::{Sim, start_with};

fn quick() -> SimConfig {
    SimConfig {
        time_scale: 0.01,
        auth_failure_delay: Duration::ZERO,
        durations: TaskDurations {
            vzdump: Duration::from_secs(10),
            ..TaskDurations::default()
        },
        ..SimConfig::default()
    }
}

async fn restore_vm(sim: &Sim, vmid: u32) {
    let archive = sim.handle.add_vm_golden();
    let id = vmid.to_string();
    let params = [
        ("vmid", id.as_str()),
        ("archive", archive.as_str()),
        ("storage", "local-lvm"),
        ("unique", "1"),
        ("pool", "bosun"),
    ];
    let r = sim
        .call_as(&sim.agent(), "POST", "/nodes/pve/qemu", &params)
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
}

async fn start_vm(sim: &Sim, vmid: u32) {
    let r = sim
        .call("POST", &format!("/nodes/pve/qemu/{vmid}/status/start"), &[])
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
}

/// Backs `vmid` up to `local` in `mode`; the exit and the log.
async fn vzdump(sim: &Sim, vmid: u32, mode: &str) -> (String, Vec<String>) {
    let id = vmid.to_string();
    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[
                ("vmid", id.as_str()),
                ("storage", "local"),
                ("mode", mode),
                ("compress", "zstd"),
            ],
        )
        .await;
    let upid = r.upid();
    let exit = sim.wait(&upid).await;
    (exit, sim.handle.task_log(&upid).expect("log"))
}

fn position(log: &[String], line: &str) -> usize {
    log.iter()
        .position(|l| l.contains(line))
        .unwrap_or_else(|| panic!("no {line:?} in {log:#?}"))
}

/// The newest VM backup volids of `vmid` on `local`.
async fn backups(sim: &Sim, vmid: u32) -> Vec<String> {
    let r = sim
        .call(
            "GET",
            "/nodes/pve/storage/local/content",
            &[("content", "backup")],
        )
        .await;
    r.data()
        .as_array()
        .expect("a list")
        .iter()
        .filter(|v| v["vmid"].as_u64() == Some(u64::from(vmid)))
        .filter_map(|v| v["volid"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_running_vm_is_frozen_for_the_start_of_its_backup_and_thawed_after() {
    let sim = start_with(quick()).await;
    restore_vm(&sim, 360).await;
    start_vm(&sim, 360).await;
    let (exit, log) = vzdump(&sim, 360, "snapshot").await;
    assert_eq!(exit, "OK", "{log:#?}");
    position(&log, "INFO: Starting Backup of VM 360 (qemu)");
    let mode = position(&log, "INFO: backup mode: snapshot");
    let freeze = position(&log, "INFO: issuing guest-agent 'fs-freeze' command");
    let job = position(&log, "INFO: started backup task '");
    let thaw = position(&log, "INFO: issuing guest-agent 'fs-thaw' command");
    assert!(mode < freeze && freeze < job && job < thaw, "{log:#?}");
    assert!(!log.iter().any(|l| l.starts_with("ERROR")), "{log:#?}");
    assert_eq!(sim.handle.vm_backup_freezes(360).len(), 1);
    assert_eq!(sim.handle.vm_frozen(360), Some(false));
    assert!(!sim.handle.vm_config(360).expect("vm").contains_key("lock"));
    let volids = backups(&sim, 360).await;
    assert_eq!(volids.len(), 1, "{volids:?}");
    assert!(
        volids[0].starts_with("local:backup/vzdump-qemu-360-") && volids[0].ends_with(".vma.zst"),
        "{volids:?}"
    );
    // The archive holds the VM's config: extractconfig reads it back.
    let r = sim
        .call(
            "GET",
            "/nodes/pve/vzdump/extractconfig",
            &[("volume", volids[0].as_str())],
        )
        .await;
    let text = r.data().as_str().expect("the config").to_owned();
    assert!(text.lines().any(|l| l.starts_with("agent: ")), "{text}");
    assert!(!text.contains("lock:"), "{text}");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn an_agent_that_does_not_answer_is_skipped_and_a_stopped_vm_is_not_frozen() {
    let sim = start_with(quick()).await;
    restore_vm(&sim, 361).await;
    start_vm(&sim, 361).await;
    assert!(sim.handle.set_vm_agent(361, false));
    let (exit, log) = vzdump(&sim, 361, "snapshot").await;
    assert_eq!(exit, "OK", "{log:#?}");
    position(
        &log,
        "INFO: skipping guest-agent 'fs-freeze', agent configured but not running?",
    );
    assert!(
        !log.iter().any(|l| l.contains("issuing guest-agent")),
        "{log:#?}"
    );
    assert!(sim.handle.vm_backup_freezes(361).is_empty());

    restore_vm(&sim, 362).await;
    let (exit, log) = vzdump(&sim, 362, "snapshot").await;
    assert_eq!(exit, "OK", "{log:#?}");
    position(&log, "INFO: status = stopped");
    position(&log, "INFO: backup mode: stop");
    position(&log, "INFO: starting kvm to execute backup task");
    assert!(!log.iter().any(|l| l.contains("fs-freeze")), "{log:#?}");
    assert!(sim.handle.vm_backup_freezes(362).is_empty());
    assert_eq!(backups(&sim, 362).await.len(), 1);
    sim.handle.shutdown().await;
}
