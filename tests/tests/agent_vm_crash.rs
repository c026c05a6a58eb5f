//! Crash safety of a VM provisioning (decision 0114), as `agent_crash` holds a container's:
//! the agent runs as a child process with a failpoint armed at one journal step of
//! `provision_vm`, which aborts it on the spot (what SIGKILL leaves). The harness restarts it
//! and asserts convergence: every desired VM exists exactly once, runs, holds its bootstrap,
//! no operation is left unfinished and the journal names each guest once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::path::Path;
use std::time::Duration;

use agent_support::crash::*;
use agent_support::vm::{BOOTSTRAP, append_config, vm_golden};
use agent_support::*;
use serde_json::{Value, json};
use uuid::Uuid;

/// A pool wider than the shared one: one VM per killed step.
const POOL: &str = "[addresses]\nbridge = \"vmbr0\"\nipv4_first = \"192.0.2.20\"\n\
                    ipv4_last = \"192.0.2.99\"\nipv4_prefix = 24\nipv4_gateway = \"192.0.2.1\"\n";

const POINTS: &[&str] = &[
    "provision_vm.assign_address.done",
    "provision_vm.check_golden.done",
    "provision_vm.next_id.done",
    "provision_vm.restore_vm.intent",
    "provision_vm.restore_vm.sent",
    "provision_vm.restore_vm.done",
    "provision_vm.check_vm_identity.intent",
    "provision_vm.check_vm_identity.done",
    "provision_vm.guard_firewall.intent",
    "provision_vm.guard_firewall.done",
    "provision_vm.start_vm.intent",
    "provision_vm.start_vm.sent",
    "provision_vm.start_vm.done",
    "provision_vm.agent_ping.done",
    "provision_vm.write_bootstrap.intent",
    "provision_vm.write_bootstrap.done",
];

fn desired_vms(golden: &Value, guests: &[(Uuid, String)]) -> Value {
    json!({
        "schema": "bosun.desired/v1",
        "guests": guests.iter().map(|(id, name)| json!({
            "guest_id": id,
            "kind": "qemu",
            "hostname": name,
            "customer": { "customer_id": "acme", "display_name": "Acme" },
            "resources": { "cores": 2, "memory_mib": 1024, "rootfs_gib": 10 },
            "power": "running",
            "golden": golden,
        })).collect::<Vec<_>>(),
        "backup_policy": { "schedule": "daily", "retention": {} },
        "restore_test_policy": { "enabled": false, "interval_days": 7, "timeout_minutes": 30 },
    })
}

/// Waits until every guest of `names` is exactly one running, unlocked VM holding its
/// bootstrap, and no other VM exists.
async fn converged(sim: &bosun_pvesim::SimHandle, config: &Path, names: &[String], point: &str) {
    let mut expected: Vec<String> = names.to_vec();
    expected.sort();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let ids = sim.vm_ids();
        let mut seen: Vec<String> = ids
            .iter()
            .filter_map(|v| sim.vm_config(*v).and_then(|c| c.get("name").cloned()))
            .collect();
        seen.sort();
        let whole = ids.iter().all(|v| {
            sim.vm_running(*v) == Some(true)
                && sim.vm_config(*v).is_some_and(|c| !c.contains_key("lock"))
                && sim.vm_file(*v, BOOTSTRAP).is_some()
        });
        if seen == expected && whole && ids.len() == expected.len() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{point}: not converged: vms {ids:?} named {seen:?}, want {expected:?}; the agent's log ends:\n{}",
            log_tail(config, 80)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_vm_provision_step_converges_without_duplicates() {
    let (sim, hub, files) = enrolled_stack().await;
    append_config(&files, POOL);
    files.use_local_api(0, "");
    let (_, _, golden) = vm_golden(&sim, &files);
    let mut child = spawn_agent(&files.config_path, None);
    let host = host_id(&files.state_dir).await;
    let mut guests: Vec<(Uuid, String)> = Vec::new();
    for (i, point) in POINTS.iter().enumerate() {
        guests.push((Uuid::new_v4(), format!("vm{i}")));
        kill(&mut child);
        child = spawn_agent(&files.config_path, Some(point));
        hub.put_desired(host, &desired_vms(&golden, &guests)).await;
        assert_tripped(&mut child, &files.config_path, point).await;
        child = spawn_agent(&files.config_path, None);
        let names: Vec<String> = guests.iter().map(|(_, n)| n.clone()).collect();
        converged(&sim, &files.config_path, &names, point).await;
        journal_settles(&files.state_dir).await;
        assert_no_unfinished(&files.state_dir, point);
        let provenance = journal(&files.state_dir).all_provenance().unwrap();
        assert_eq!(
            provenance.len(),
            guests.len(),
            "{point}: provenance {provenance:?}"
        );
    }
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}
