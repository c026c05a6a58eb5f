//! Signed jobs on QEMU guests (decision 0119), run the way an operator and a hostile hub
//! run them: the real hub, jobs authored with `bosunctl job new|sign` and submitted with
//! `bosunctl job submit`, the agent against the simulator's QEMU guests, and the
//! simulator's request log counting every destructive request that reached Proxmox.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use agent_support::vm::{
    POOL, append_config, calls, desired_of, foreign_vm, vm_golden, vm_restores,
};

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

/// The overwriting VM restores (`POST /nodes/pve/qemu` with `force=1`) that reached Proxmox,
/// as `(vmid, archive)`.
fn vm_overwrites(sim: &SimHandle) -> Vec<(String, String)> {
    sim.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/nodes/pve/qemu")
        .filter(|r| r.params.iter().any(|(k, v)| k == "force" && v == "1"))
        .map(|r| {
            let get = |key: &str| {
                r.params
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            (get("vmid"), get("archive"))
        })
        .collect()
}

impl OneVm {
    /// Runs a signed job of `kind` on `guest` at `vmid` with `params`; gives its result.
    async fn job(&self, kind: &str, guest: Uuid, vmid: u32, params: &[&str]) -> (Uuid, Value) {
        let (host, guest, vmid) = (self.host.to_string(), guest.to_string(), vmid.to_string());
        let mut args = vec![
            "--kind", kind, "--host", &host, "--guest", &guest, "--vmid", &vmid,
        ];
        for param in params {
            args.extend_from_slice(&["--param", param]);
        }
        let job = submit(&self.hub, &self.operator, self.files.dir.path(), &args).await;
        (job, job_result(&self.hub, self.host, job).await)
    }

    /// A signed `force-backup` of `guest` at `vmid`: its archive.
    async fn force_backup(&self, guest: Uuid, vmid: u32) -> String {
        let (_, result) = self.job("force-backup", guest, vmid, &[]).await;
        assert_eq!(result["outcome"], "succeeded", "{result}");
        result["output"]["volid"].as_str().unwrap().to_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_is_backed_up_by_a_signed_job_and_restored_over_itself_once() {
    let stack = OneVm::start().await;
    let (sim, guest, vmid) = (&stack.sim, stack.guest, stack.vmid);

    // force-backup: a VM archive, vzdump's freeze through the guest agent, the config
    // naming its guest before the vzdump.
    let (_, result) = stack.job("force-backup", guest, vmid, &[]).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(result["output"]["kind"], "qemu", "{result}");
    let volid = result["output"]["volid"].as_str().unwrap().to_owned();
    assert!(
        volid.starts_with(&format!("local:backup/vzdump-qemu-{vmid}-")),
        "{volid}"
    );
    assert!(
        !sim.vm_backup_freezes(vmid).is_empty(),
        "no freeze recorded"
    );
    assert_eq!(sim.vm_frozen(vmid), Some(false), "left frozen");
    let tag = format!("bosun-guest-{}", guest.simple());
    let tagged = |sim: &SimHandle| {
        sim.vm_config(vmid)
            .unwrap()
            .get("tags")
            .is_some_and(|t| t.split(';').any(|x| x == tag))
    };
    assert!(tagged(sim), "{:?}", sim.vm_config(vmid));

    // restore-now over the VM from that archive: one qmrestore with force=1 at its own vmid,
    // and it runs again, still carrying its identity and its guest's tag.
    sim.clear_requests();
    let param = format!("backup={volid}");
    let (job, result) = stack.job("restore-now", guest, vmid, &[&param]).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(result["output"]["kind"], "qemu", "{result}");
    assert_eq!(
        vm_overwrites(sim),
        vec![(vmid.to_string(), volid.clone())],
        "{:?}",
        calls(sim)
    );
    let container_restores = sim
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/nodes/pve/lxc")
        .count();
    assert_eq!(container_restores, 0);
    assert_eq!(sim.vm_running(vmid), Some(true));
    assert!(tagged(sim), "{:?}", sim.vm_config(vmid));
    let destroys: Vec<_> = destructive(sim)
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .collect();
    assert!(destroys.is_empty(), "{destroys:?}");
    // The job's steps, from the journal: stopped, checked, restored, started again.
    let audit = stack
        .agent
        .handles
        .journal
        .audit_since(0, 1000)
        .await
        .unwrap();
    let op_id = audit
        .iter()
        .find(|e| {
            e.event.event == "job.finished" && e.event.job_id.as_deref() == Some(&job.to_string())
        })
        .and_then(|e| e.event.op_id)
        .expect("the restore's operation is audited");
    let steps = stack.agent.handles.journal.steps(op_id).await.unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "accepted",
            "stop",
            "check_bootstrap",
            "restore_overwrite",
            "start"
        ]
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_now_over_a_vm_from_a_containers_or_another_vms_archive_restores_nothing() {
    let stack = OneVm::start().await;
    let (sim, hub, host, guest, vmid) =
        (&stack.sim, &stack.hub, stack.host, stack.guest, stack.vmid);
    // Another customer's VM and a container beside it, each backed up by a signed job.
    let (other, container) = (Uuid::new_v4(), Uuid::new_v4());
    let ct_golden = agent_support::signing::signed_golden(
        &sim.endpoint().golden_volid,
        &sim.endpoint().golden_sha256,
    );
    hub.put_desired(
        host,
        &desired_of(&[
            (guest, "vm-shop", GuestKind::Qemu, stack.golden.clone()),
            (other, "vm-other", GuestKind::Qemu, stack.golden.clone()),
            (container, "ct-shop", GuestKind::Lxc, ct_golden),
        ]),
    )
    .await;
    let other_vmid = running_vmid(&stack.agent.handles.reconcile, other).await;
    let ct_vmid = running_vmid(&stack.agent.handles.reconcile, container).await;
    let other_archive = stack.force_backup(other, other_vmid).await;
    let ct_archive = stack.force_backup(container, ct_vmid).await;
    assert!(ct_archive.contains("vzdump-lxc-"), "{ct_archive}");
    let before = sim.vm_config(vmid).unwrap();
    sim.clear_requests();

    for archive in [&ct_archive, &other_archive] {
        let param = format!("backup={archive}");
        let (_, result) = stack.job("restore-now", guest, vmid, &[&param]).await;
        // Not one of this guest's own journaled backups: refused before any Proxmox read.
        assert_eq!(result["outcome"], "failed", "{result}");
        assert!(
            result["detail"]
                .as_str()
                .is_some_and(|d| d.contains(archive.as_str()) && d.contains("not one of")),
            "{result}"
        );
    }
    // Nothing was restored, stopped or destroyed: the archives were refused before.
    assert!(vm_restores(sim).is_empty(), "{:?}", vm_restores(sim));
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

/// A VM's controller lives in its image: a signed `controller-update` naming a VM is refused
/// before anything is asked of Proxmox or the helper (the rollout's snapshot, placement and
/// heal are a container's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_update_naming_a_vm_is_refused_and_touches_nothing() {
    let stack = agent_support::vm::VmStack::running_with(
        "[controller]\nhealth_window_ms = 15000\nreport_interval_ms = 1000\n",
    )
    .await;
    let (sim, vmid) = (&stack.sim, stack.vmid);
    sim.clear_requests();
    let (host, guest, vmid_text) = (
        stack.host.to_string(),
        stack.guest.to_string(),
        vmid.to_string(),
    );
    let digest = format!("digest=sha256:{}", "ab".repeat(32));
    let args = [
        "--kind",
        "controller-update",
        "--host",
        &host,
        "--guest",
        &guest,
        "--vmid",
        &vmid_text,
        "--param",
        &digest,
    ];
    let operator = stack.files.trusted_operator();
    let job = submit(&stack.hub, &operator, stack.files.dir.path(), &args).await;
    let result = job_result(&stack.hub, stack.host, job).await;
    assert!(refused_with(&result, "not_for_vm"), "{result}");
    let touched: Vec<_> = mutations(sim)
        .into_iter()
        .filter(|r| r.path.contains(&format!("/{vmid}/")))
        .collect();
    assert!(touched.is_empty(), "the VM was touched: {touched:?}");
    let verbs = stack.files.helper.verbs();
    assert!(
        !verbs.contains(&"restart_controller"),
        "the helper was asked to place a controller: {verbs:?}"
    );
    assert_eq!(sim.vm_running(vmid), Some(true));
    stack.stop().await;
}
