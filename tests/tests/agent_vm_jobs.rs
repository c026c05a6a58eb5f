//! Signed jobs on QEMU guests (decision 0119), run the way an operator and a hostile hub
//! run them: the real hub, jobs authored with `bosunctl job new|sign` and submitted with
//! `bosunctl job submit`, the agent against the simulator's QEMU guests, and the
//! simulator's request log counting every destructive request that reached Proxmox.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use agent_support::vm::{POOL, append_config, desired_of, foreign_vm, vm_golden, vm_restores};

use std::time::Duration;

use agent_support::jobs::{job_result, submit};
use agent_support::signing::OperatorKey;
use agent_support::*;
use bosun_proto::desired::GuestKind;
use bosun_pvesim::SimHandle;
use serde_json::Value;
use uuid::Uuid;

/// A simulator, a hub and an enrolled agent trusting one operator key, with one customer
/// VM provisioned from a signed VM base and running, and a foreign VM at 4321.
struct OneVm {
    sim: SimHandle,
    hub: RealHub,
    files: AgentFiles,
    operator: OperatorKey,
    agent: InProcessAgent,
    host: Uuid,
    guest: Uuid,
    vmid: u32,
    golden: Value,
}

/// The foreign VM's vmid.
const FOREIGN: u32 = 4321;

impl OneVm {
    async fn start() -> Self {
        let (sim, hub, files) = enrolled_stack().await;
        append_config(&files, POOL);
        let operator = files.trusted_operator();
        let (volid, _sha, golden) = vm_golden(&sim, &files);
        foreign_vm(&sim, &volid, FOREIGN).await;
        let agent = InProcessAgent::start(&files.config_path).await;
        let host = agent.handles.host_id;
        let guest = Uuid::new_v4();
        hub.put_desired(
            host,
            &desired_of(&[(guest, "vm-shop", GuestKind::Qemu, golden.clone())]),
        )
        .await;
        let vmid = running_vmid(&agent.handles.reconcile, guest).await;
        Self {
            sim,
            hub,
            files,
            operator,
            agent,
            host,
            guest,
            vmid,
            golden,
        }
    }

    async fn decommission(&self, guest: Uuid, vmid: u32) -> Value {
        let (host, guest, vmid) = (self.host.to_string(), guest.to_string(), vmid.to_string());
        let args = [
            "--kind",
            "decommission",
            "--host",
            &host,
            "--guest",
            &guest,
            "--vmid",
            &vmid,
        ];
        let job = submit(&self.hub, &self.operator, self.files.dir.path(), &args).await;
        job_result(&self.hub, self.host, job).await
    }

    async fn stop(self) {
        self.agent.stop().await;
        self.hub.stop().await;
        self.sim.shutdown().await;
    }
}

/// Whether `result` is a refusal (before or after acceptance) naming `code`.
fn refused_with(result: &Value, code: &str) -> bool {
    matches!(result["outcome"].as_str(), Some("rejected" | "failed"))
        && (result["output"]["code"] == code
            || result["detail"].as_str().is_some_and(|d| d.contains(code)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommissioned_vm_is_destroyed_alone_and_never_comes_back() {
    let stack = OneVm::start().await;
    let (sim, hub, host, guest, vmid) =
        (&stack.sim, &stack.hub, stack.host, stack.guest, stack.vmid);
    assert_ne!(vmid, FOREIGN);
    hub.put_desired(host, &desired_of(&[])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    sim.clear_requests();

    let result = stack.decommission(guest, vmid).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(result["output"]["kind"], "qemu", "{result}");
    assert_eq!(result["output"]["destroyed"], true, "{result}");
    // Exactly one destroy reached Proxmox: the VM's own, purged from pool and jobs.
    let destroys = destructive(sim);
    assert_eq!(destroys.len(), 1, "{destroys:?}");
    assert_eq!(destroys[0].method, "DELETE");
    assert_eq!(destroys[0].path, format!("/nodes/pve/qemu/{vmid}"));
    assert!(
        destroys[0]
            .params
            .iter()
            .any(|(k, v)| k == "purge" && v == "1"),
        "{destroys:?}"
    );
    assert_eq!(sim.vm_ids(), vec![FOREIGN], "only the foreign VM is left");
    assert_eq!(sim.vm_running(FOREIGN), Some(true));

    // Desired state naming the guest again does not bring it back: it is tombstoned.
    sim.clear_requests();
    hub.put_desired(
        host,
        &desired_of(&[(guest, "vm-shop", GuestKind::Qemu, stack.golden.clone())]),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        vm_restores(sim).is_empty(),
        "re-provisioned: {:?}",
        vm_restores(sim)
    );
    assert_eq!(sim.vm_ids(), vec![FOREIGN]);
    // And a second decommission of it changes nothing.
    let again = stack.decommission(guest, vmid).await;
    assert_ne!(again["outcome"], "succeeded", "{again}");
    assert!(destructive(sim).is_empty(), "{:?}", destructive(sim));
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommission_naming_a_foreign_vms_vmid_destroys_nothing() {
    let stack = OneVm::start().await;
    let (sim, guest, vmid) = (&stack.sim, stack.guest, stack.vmid);
    let foreign_before = sim.vm_config(FOREIGN).unwrap();
    sim.clear_requests();

    // The job's guest, pinned to the foreign VM's vmid.
    let redirected = stack.decommission(guest, FOREIGN).await;
    assert!(refused_with(&redirected, "target_mismatch"), "{redirected}");
    // A guest the agent never had, at the foreign VM's vmid: the journal holds no record
    // of it, and a VM holds the vmid, so it is refused, not reported gone.
    let unknown = stack.decommission(Uuid::new_v4(), FOREIGN).await;
    assert!(refused_with(&unknown, "target_mismatch"), "{unknown}");

    assert!(destructive(sim).is_empty(), "{:?}", destructive(sim));
    let mut left = sim.vm_ids();
    left.sort_unstable();
    let mut both = vec![vmid, FOREIGN];
    both.sort_unstable();
    assert_eq!(left, both, "both VMs are still there");
    assert_eq!(sim.vm_config(FOREIGN).unwrap(), foreign_before);
    assert_eq!(sim.vm_running(FOREIGN), Some(true));
    assert_eq!(sim.vm_running(vmid), Some(true));
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_now_over_a_vm_is_refused_until_vm_archives_are_proven() {
    let stack = OneVm::start().await;
    let (sim, guest, vmid) = (&stack.sim, stack.guest, stack.vmid);
    // The reconciler sizes the new VM as desired (1024 MiB, the base has 2048) first, so
    // what is compared below changes only by the job.
    eventually(
        Duration::from_secs(30),
        "the vm is sized as desired",
        || async move {
            sim.vm_config(vmid)
                .is_some_and(|c| c.get("memory").map(String::as_str) == Some("1024"))
        },
    )
    .await;
    let before = sim.vm_config(vmid).unwrap();
    sim.clear_requests();
    let (host_s, guest_s, vmid_s) = (stack.host.to_string(), guest.to_string(), vmid.to_string());
    let backup = format!("backup=local:backup/vzdump-qemu-{vmid}-2026_01_01-00_00_00.vma.zst");
    let args = [
        "--kind",
        "restore-now",
        "--param",
        &backup,
        "--host",
        &host_s,
        "--guest",
        &guest_s,
        "--vmid",
        &vmid_s,
    ];
    let job = submit(&stack.hub, &stack.operator, stack.files.dir.path(), &args).await;
    let result = job_result(&stack.hub, stack.host, job).await;
    assert_eq!(result["outcome"], "failed", "{result}");
    assert!(
        result["detail"]
            .as_str()
            .is_some_and(|d| d.contains("does not act on a VM yet")),
        "{result}"
    );
    // Nothing was overwritten, stopped or destroyed.
    assert!(destructive(sim).is_empty(), "{:?}", destructive(sim));
    let stops = format!("/nodes/pve/qemu/{vmid}/status/stop");
    assert!(
        !sim.requests().iter().any(|r| r.path == stops),
        "the VM was stopped"
    );
    assert_eq!(sim.vm_running(vmid), Some(true));
    assert_eq!(sim.vm_config(vmid).unwrap(), before);
    stack.stop().await;
}
