//! Crash safety of a VM's DR restore (decision 0121), as `agent_vm_crash` holds a VM
//! provisioning's: the agent runs as a child process with a failpoint armed at one journal
//! step of `dr_restore_vm`, which aborts it on the spot (what SIGKILL leaves), while it
//! restores the VM destroyed behind its back. The harness restarts it and asserts convergence:
//! exactly one VM, the guest's, restored from its archive and running, unlocked, in Bosun's
//! pool, with its bootstrap; no operation left unfinished; the journal names the guest once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::path::Path;
use std::time::Duration;

use agent_support::crash::*;
use agent_support::vm::*;
use agent_support::*;
use bosun_proto::desired::GuestKind;
use uuid::Uuid;

const POINTS: &[&str] = &[
    "dr_restore_vm.choose_source.done",
    "dr_restore_vm.check_bootstrap.done",
    "dr_restore_vm.restore_vm.intent",
    "dr_restore_vm.restore_vm.sent",
    "dr_restore_vm.restore_vm.done",
    "dr_restore_vm.read_config.done",
    "dr_restore_vm.reset_identity.intent",
    "dr_restore_vm.reset_identity.done",
    "dr_restore_vm.guard_firewall.intent",
    "dr_restore_vm.guard_firewall.done",
    "dr_restore_vm.start_vm.intent",
    "dr_restore_vm.start_vm.sent",
    "dr_restore_vm.start_vm.done",
];

/// Waits until exactly one VM exists: the guest's, running, unlocked, in the pool, its MAC
/// `mac`, holding its bootstrap; gives its vmid.
async fn converged(sim: &bosun_pvesim::SimHandle, config: &Path, mac: &str, point: &str) -> u32 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let ids = sim.vm_ids();
        if let [vmid] = ids.as_slice() {
            let vmid = *vmid;
            let whole = sim.vm_running(vmid) == Some(true)
                && sim.vm_config(vmid).is_some_and(|c| {
                    !c.contains_key("lock")
                        && c.get("name").map(String::as_str) == Some("vm-shop")
                        && c.get("tags").is_some_and(|t| t.starts_with("bosun-"))
                })
                && vm_mac(sim, vmid).as_deref() == Some(mac)
                && sim.pool_members("bosun").contains(&vmid)
                && sim.vm_file(vmid, BOOTSTRAP).is_some();
            if whole {
                return vmid;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{point}: not converged: vms {ids:?}; the agent's log ends:\n{}",
            log_tail(config, 80)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_vm_dr_step_converges_to_exactly_one_vm() {
    let (sim, hub, files) = enrolled_stack().await;
    append_config(&files, POOL);
    files.use_local_api(0, LOCAL_BACKUPS);
    let (_, _, golden) = vm_golden(&sim, &files);
    let mut child = spawn_agent(&files.config_path, None);
    let host = host_id(&files.state_dir).await;
    let guest = Uuid::new_v4();
    let mut desired = desired_of(&[(guest, "vm-shop", GuestKind::Qemu, golden)]);
    hub.put_desired(host, &desired).await;
    eventually(Duration::from_secs(60), "the vm runs", || {
        let ids = sim.vm_ids();
        let running = ids.len() == 1
            && sim.vm_running(ids[0]) == Some(true)
            && sim.vm_file(ids[0], BOOTSTRAP).is_some();
        async move { running }
    })
    .await;
    let mut vmid = sim.vm_ids()[0];
    let archives = backed_up(&hub, host, &mut desired, (&sim, &[vmid], 1), vm_archives).await;
    let archive = archives[0].last().unwrap().clone();
    let mac = vm_mac(&sim, vmid).unwrap();
    for point in POINTS {
        kill(&mut child);
        sim.clear_requests();
        destroy_vm_behind_its_back(&sim, vmid).await;
        child = spawn_agent(&files.config_path, Some(point));
        assert_tripped(&mut child, &files.config_path, point).await;
        child = spawn_agent(&files.config_path, None);
        vmid = converged(&sim, &files.config_path, &mac, point).await;
        journal_settles(&files.state_dir).await;
        assert_no_unfinished(&files.state_dir, point);
        let provenance = journal(&files.state_dir).all_provenance().unwrap();
        assert_eq!(provenance.len(), 1, "{point}: provenance {provenance:?}");
        assert_eq!(provenance[0].vmid(), vmid, "{point}");
        // Only the guest's archive was ever restored, as a VM.
        for (path, _, restored) in agent_restores_of_any_kind(&sim) {
            assert_eq!(
                (path.as_str(), restored.as_str()),
                ("/nodes/pve/qemu", archive.as_str()),
                "{point}"
            );
        }
    }
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}
