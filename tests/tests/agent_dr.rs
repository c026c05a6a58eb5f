//! Guest-loss disaster recovery through the real agent, hub and TLS: a guest destroyed
//! behind the agent's back comes back by itself (DR policy `auto`) from the fastest tier
//! that still holds its backup — the local tier, or PBS when the local target is lost too —
//! with its data (a file written before the backup) and its MAC; the hub raises
//! `guest_restored` with RPO and RTO. Under `manual` nothing is restored until a signed
//! `restore-now`, which without an archive takes the fastest tier's newest backup.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent_support;

use std::time::{Duration, Instant};

use agent_support::jobs::{job_result, submit};
use agent_support::signing::OperatorKey;
use agent_support::*;
use bosun_agentd::pve::Pve;
use bosun_agentd::storage::naming::storage_id_of;
use bosun_proto::desired::StorageType;
use bosun_pvesim::SimHandle;
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

const MARKER: &str = "/root/bosun-dr-marker";
const FP: &str = "12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0";
const NAS: &str = "nas.example:/export/backups";

struct Stack {
    sim: SimHandle,
    hub: RealHub,
    files: AgentFiles,
    operator: OperatorKey,
    agent: InProcessAgent,
    host: Uuid,
    guest: Uuid,
}

impl Stack {
    /// An enrolled agent with one running guest under `desired` (edited by `shape`).
    async fn start(shape: impl FnOnce(&SimHandle, &mut Value, Uuid, &str)) -> (Self, u32) {
        let (sim, hub, files) = enrolled_stack().await;
        let operator = files.trusted_operator();
        let agent = InProcessAgent::start(&files.config_path).await;
        let host = agent.handles.host_id;
        let guest = Uuid::new_v4();
        let mut desired = desired(&sim, &[(guest, "customer")], "running");
        let recipient = hub_recipient(&hub, host).await;
        shape(&sim, &mut desired, host, &recipient);
        hub.put_desired(host, &desired).await;
        let vmid = running_vmid(&agent.handles.reconcile, guest).await;
        let stack = Self {
            sim,
            hub,
            files,
            operator,
            agent,
            host,
            guest,
        };
        (stack, vmid)
    }

    /// A signed `force-backup` of the guest to `storage` (the first tier's if `None`);
    /// gives the archive.
    async fn back_up(&self, vmid: u32, storage: Option<&str>) -> String {
        let (host, guest, vmid) = (
            self.host.to_string(),
            self.guest.to_string(),
            vmid.to_string(),
        );
        let param = storage.map(|s| format!("storage={s}"));
        let mut args = vec![
            "--kind",
            "force-backup",
            "--host",
            &host,
            "--guest",
            &guest,
            "--vmid",
            &vmid,
        ];
        if let Some(param) = &param {
            args.extend(["--param", param.as_str()]);
        }
        let job = submit(&self.hub, &self.operator, self.files.dir.path(), &args).await;
        let result = job_result(&self.hub, self.host, job).await;
        assert_eq!(result["outcome"], "succeeded", "{result}");
        result["output"]["volid"].as_str().unwrap().to_owned()
    }

    /// The hub's `guest_restored` alerts for the host.
    async fn restored_alerts(&self) -> Vec<String> {
        let (_, alerts) = self
            .hub
            .admin(Method::GET, "/v1/admin/alerts?limit=1000", None)
            .await;
        alerts
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["kind"] == "guest_restored" && a["host_id"] == self.host.to_string())
            .map(|a| a["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    async fn stop(self) {
        self.agent.stop().await;
        self.hub.stop().await;
        self.sim.shutdown().await;
    }
}

fn marker(sim: &SimHandle, vmid: u32) -> Option<String> {
    guest_text(sim, vmid, MARKER)
}

/// Waits until the guest runs again at `vmid` with the agent's identity on it.
async fn back_at(stack: &Stack, vmid: u32) {
    eventually(Duration::from_secs(60), "the guest runs again", || async {
        stack.sim.guest_running(vmid) == Some(true)
            && stack
                .agent
                .handles
                .reconcile
                .borrow()
                .guests
                .iter()
                .any(|g| g.guest_id == Some(stack.guest) && g.vmid == vmid)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destroyed_guest_comes_back_from_the_local_tier_with_its_data_and_mac() {
    let (stack, vmid) = Stack::start(|_, _, _, _| {}).await;
    write_in_guest(&stack.sim, vmid, MARKER, "before the backup").await;
    let archive = stack.back_up(vmid, None).await;
    assert!(archive.starts_with("local:"), "{archive}");
    let mac = guest_mac(&stack.sim, vmid);
    stack.sim.clear_requests();

    let lost_at = Instant::now();
    destroy_behind_its_back(&stack.sim, vmid).await;
    back_at(&stack, vmid).await;
    eprintln!(
        "guest destroyed → running again after {:?}",
        lost_at.elapsed()
    );

    assert_eq!(
        agent_restores(&stack.sim),
        vec![(vmid.to_string(), archive.clone())]
    );
    assert_eq!(
        marker(&stack.sim, vmid).as_deref(),
        Some("before the backup")
    );
    assert_eq!(guest_mac(&stack.sim, vmid), mac, "DR keeps the MAC");
    let hostname = stack.sim.guest_config(vmid).unwrap()["hostname"].clone();
    assert_eq!(hostname, "customer");
    eventually(
        Duration::from_secs(20),
        "guest_restored at the hub",
        || async { !stack.restored_alerts().await.is_empty() },
    )
    .await;
    let alerts = stack.restored_alerts().await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    for part in ["RPO", "RTO", archive.as_str()] {
        assert!(alerts[0].contains(part), "{part} missing: {}", alerts[0]);
    }
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_local_target_lost_too_the_guest_comes_back_from_pbs() {
    let password = format!("pbs-{}", Uuid::new_v4().simple());
    let pbs_durable = format!("backup@pbs!bosun@pbs.example:store1#{FP}");
    let (stack, vmid) = Stack::start(|sim, desired, host, recipient| {
        sim.add_nfs_remote("nas.example", "/export/backups");
        sim.add_pbs_remote("pbs.example", FP, "store1", &password);
        let mut offsite = json!({
            "type": "pbs", "durable_id": pbs_durable, "class": "slow", "role": "pbs-offsite",
            "policy": { "schedule": "03:00", "retention": {} }, "state": "attached",
            "namespace": format!("host-{}", host.simple()),
        });
        offsite["credentials"] = json!(seal_for(recipient, host, &offsite, &password));
        desired["storage"] = json!([
            {
                "type": "nfs", "durable_id": NAS, "class": "slow", "role": "vzdump-target",
                "policy": { "schedule": "02:00", "retention": {} }, "state": "attached",
            },
            offsite
        ]);
        desired["backup_policy"]["target"] = json!(NAS);
        desired["backup_policy"]["further_tiers"] = json!([pbs_durable]);
    })
    .await;
    let nas = storage_id_of(StorageType::Nfs, NAS);
    let pbs = pbs_storage(&pbs_durable, &format!("host-{}", stack.host.simple()));
    write_in_guest(&stack.sim, vmid, MARKER, "offsite").await;
    let local = stack.back_up(vmid, Some(nas.as_str())).await;
    let offsite = stack.back_up(vmid, Some(pbs.as_str())).await;
    assert!(local.starts_with(nas.as_str()) && offsite.starts_with(pbs.as_str()));
    stack.sim.clear_requests();

    // The NAS drops off the network, and the guest is destroyed.
    stack.sim.set_remote_reachable("nas.example", false);
    destroy_behind_its_back(&stack.sim, vmid).await;
    back_at(&stack, vmid).await;
    assert_eq!(
        agent_restores(&stack.sim),
        vec![(vmid.to_string(), offsite.clone())]
    );
    assert_eq!(marker(&stack.sim, vmid).as_deref(), Some("offsite"));
    eventually(
        Duration::from_secs(20),
        "guest_restored at the hub",
        || async {
            stack
                .restored_alerts()
                .await
                .iter()
                .any(|m| m.contains(pbs.as_str()))
        },
    )
    .await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_manual_dr_a_lost_guest_waits_for_a_signed_restore_now() {
    let (stack, vmid) = Stack::start(|_, desired, _, _| {
        desired["dr_policy"] = json!("manual");
    })
    .await;
    write_in_guest(&stack.sim, vmid, MARKER, "manual").await;
    let archive = stack.back_up(vmid, None).await;
    stack.sim.clear_requests();
    destroy_behind_its_back(&stack.sim, vmid).await;
    eventually(Duration::from_secs(20), "reported lost", || async {
        stack
            .agent
            .handles
            .reconcile
            .borrow()
            .guests
            .iter()
            .any(|g| {
                g.guest_id == Some(stack.guest)
                    && g.status == bosun_proto::report::GuestStatus::Lost
            })
    })
    .await;
    // Several passes (one a second): nothing is restored unasked.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        agent_restores(&stack.sim).is_empty(),
        "{:?}",
        agent_restores(&stack.sim)
    );

    // restore-now names no archive: the fastest tier's newest backup of the guest.
    let (host, guest, vmid_s) = (
        stack.host.to_string(),
        stack.guest.to_string(),
        vmid.to_string(),
    );
    let job = submit(
        &stack.hub,
        &stack.operator,
        stack.files.dir.path(),
        &[
            "--kind",
            "restore-now",
            "--host",
            &host,
            "--guest",
            &guest,
            "--vmid",
            &vmid_s,
        ],
    )
    .await;
    let result = job_result(&stack.hub, stack.host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(result["output"]["backup"], archive.as_str(), "{result}");
    back_at(&stack, vmid).await;
    assert_eq!(
        agent_restores(&stack.sim),
        vec![(vmid.to_string(), archive)]
    );
    assert_eq!(marker(&stack.sim, vmid).as_deref(), Some("manual"));
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_guest_without_any_backup_stays_lost_and_is_never_provisioned_blank() {
    let (stack, vmid) = Stack::start(|_, _, _, _| {}).await;
    stack.sim.clear_requests();
    destroy_behind_its_back(&stack.sim, vmid).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        agent_restores(&stack.sim).is_empty(),
        "{:?}",
        agent_restores(&stack.sim)
    );
    assert!(stack.sim.guest_ids().is_empty());
    let pve = root_client(&stack.sim);
    assert!(pve.list_cts().await.unwrap().is_empty());
    stack.stop().await;
}
