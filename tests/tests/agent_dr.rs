//! Guest-loss disaster recovery through the real agent, hub and TLS: a guest destroyed
//! behind the agent's back comes back by itself (DR policy `auto`) from the fastest tier
//! that still holds its backup — the local tier, or PBS when the local target is lost too —
//! with its data (a file written before the backup), its MAC, its machine id and its SSH
//! host keys; the hub raises `guest_restored` with RPO and RTO. Under `manual` nothing is
//! restored until a signed `restore-now`, which without an archive takes the fastest tier's
//! newest backup.
//!
//! When the source may still run (the guest's vmid holds a container without the agent's
//! identity, still running with the guest's identity), the guest comes back at another vmid
//! with a fresh MAC, an empty machine id and no SSH host keys (its next boot makes its own;
//! nothing boots in the simulator), its links up at the end and never up before the reset
//! (decision 0027); a reset that cannot be done leaves no restored guest behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::{Duration, Instant};

use agent_support::jobs::{job_result, submit};
use agent_support::signing::OperatorKey;
use agent_support::*;
use bosun_agentd::data::storage::naming::storage_id_of;
use bosun_proto::desired::StorageType;
use bosun_pve::{ConfigUpdate, Pve, Vmid};
use bosun_pvesim::SimHandle;
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

const MARKER: &str = "/root/bosun-dr-marker";
const MACHINE_ID: &str = "/etc/machine-id";
const HOST_KEY: &str = "/etc/ssh/ssh_host_ed25519_key";
const HOST_KEY_PUB: &str = "/etc/ssh/ssh_host_ed25519_key.pub";
/// What the guest's first boot wrote (the golden archive carries neither).
const FIRST_BOOT_ID: &str = "5f0c1e9a2b7d4c3e8a6f1b0d2c4e6a8b\n";
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

/// What the guest's first boot makes (systemd's machine id, `ssh-keygen -A`'s host keys):
/// the simulator boots nothing, so the test writes them into the running guest.
async fn first_boot(sim: &SimHandle, vmid: u32) {
    write_in_guest(sim, vmid, MACHINE_ID, FIRST_BOOT_ID).await;
    write_in_guest(sim, vmid, HOST_KEY, "-----BEGIN OPENSSH PRIVATE KEY-----\n").await;
    write_in_guest(
        sim,
        vmid,
        HOST_KEY_PUB,
        "ssh-ed25519 AAAAC3Nz root@customer\n",
    )
    .await;
}

/// The SSH host key files in guest `vmid`'s `/etc/ssh`.
fn host_keys(sim: &SimHandle, vmid: u32) -> Vec<String> {
    sim.guest_paths(vmid, "/etc/ssh")
        .into_iter()
        .filter(|p| p.starts_with("/etc/ssh/ssh_host_"))
        .collect()
}

/// Takes the agent's identity off the container at `vmid` (root's `pct set --delete tags`,
/// as an administrator may, or a copy of the guest restored there by hand would be): it
/// keeps running with the guest's MAC, machine id and host keys, and to the agent the guest
/// is lost while its source may still run.
async fn disown(sim: &SimHandle, vmid: u32) {
    let update = ConfigUpdate {
        delete: vec!["tags".to_owned()],
        ..ConfigUpdate::default()
    };
    root_client(sim)
        .update_ct_config(Vmid::new(vmid).unwrap(), &update)
        .await
        .unwrap();
}

/// What was done to guest `vmid`, in order, as Proxmox saw it: its links taken down or
/// brought up, its starts, shutdowns and stops, and the programs run inside it.
fn lifecycle(sim: &SimHandle, vmid: u32) -> Vec<String> {
    let base = format!("/nodes/pve/lxc/{vmid}");
    let param = |r: &bosun_pvesim::LoggedRequest, key: &str| {
        r.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    sim.requests()
        .into_iter()
        .filter_map(|r| {
            if r.path == "pct exec" {
                let ours = param(&r, "vmid") == Some(vmid.to_string());
                return ours.then(|| format!("exec {}", param(&r, "extra-args").unwrap()));
            }
            if r.method == "PUT" && r.path == format!("{base}/config") {
                let nets: Vec<&String> = r
                    .params
                    .iter()
                    .filter(|(k, _)| k.starts_with("net"))
                    .map(|(_, v)| v)
                    .collect();
                if nets.is_empty() {
                    return None;
                }
                let down = nets
                    .iter()
                    .all(|n| n.split(',').any(|p| p == "link_down=1"));
                return Some(if down { "links down" } else { "links up" }.to_owned());
            }
            match (r.method.as_str(), r.path.strip_prefix(&base)?) {
                ("POST", "/status/start") => Some("start".to_owned()),
                ("POST", "/status/shutdown") => Some("shutdown".to_owned()),
                ("POST", "/status/stop") => Some("stop".to_owned()),
                _ => None,
            }
        })
        .collect()
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
async fn a_destroyed_guest_comes_back_from_the_local_tier_with_its_data_and_identity() {
    let (stack, vmid) = Stack::start(|_, _, _, _| {}).await;
    first_boot(&stack.sim, vmid).await;
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
    // Nothing else holds them: the machine id and SSH host keys the customer knows stay.
    assert_eq!(
        guest_text(&stack.sim, vmid, MACHINE_ID).as_deref(),
        Some(FIRST_BOOT_ID)
    );
    assert_eq!(
        host_keys(&stack.sim, vmid),
        vec![HOST_KEY.to_owned(), HOST_KEY_PUB.to_owned()]
    );
    assert!(stack.files.helper.identity_resets().is_empty());
    assert!(
        !stack.sim.requests().iter().any(|r| r.path == "pct exec"),
        "nothing ran inside the guest"
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_whose_source_may_still_run_comes_back_with_its_own_mac_machine_id_and_host_keys() {
    let (stack, vmid) = Stack::start(|_, _, _, _| {}).await;
    stack.files.use_sim_pct(&stack.sim);
    first_boot(&stack.sim, vmid).await;
    write_in_guest(&stack.sim, vmid, MARKER, "before the backup").await;
    let archive = stack.back_up(vmid, None).await;
    let mac = guest_mac(&stack.sim, vmid);
    stack.sim.clear_requests();

    disown(&stack.sim, vmid).await;
    eventually(
        Duration::from_secs(60),
        "guest_restored at the hub",
        || async { !stack.restored_alerts().await.is_empty() },
    )
    .await;
    let restored = stack
        .agent
        .handles
        .reconcile
        .borrow()
        .guests
        .iter()
        .find(|g| g.guest_id == Some(stack.guest))
        .map(|g| g.vmid)
        .unwrap();
    assert_ne!(restored, vmid, "the source's vmid is not free");
    assert_eq!(
        agent_restores(&stack.sim),
        vec![(restored.to_string(), archive)]
    );
    assert_eq!(
        marker(&stack.sim, restored).as_deref(),
        Some("before the backup")
    );
    // Nothing that would collide with the source is kept: the guest's next boot makes a
    // machine id and host keys of its own.
    assert_ne!(guest_mac(&stack.sim, restored), mac);
    assert_eq!(
        guest_text(&stack.sim, restored, MACHINE_ID).as_deref(),
        Some("")
    );
    assert_eq!(host_keys(&stack.sim, restored), Vec::<String>::new());
    assert_eq!(stack.files.helper.identity_resets(), vec![restored]);
    // Connected in the end, and never before its identity was its own: restored with
    // onboot off, started only with every link down until the reset was done.
    let config = stack.sim.guest_config(restored).unwrap();
    assert!(!config["net0"].contains("link_down"), "{config:?}");
    assert_eq!(config.get("onboot").map(String::as_str), Some("1"));
    assert_eq!(stack.sim.guest_running(restored), Some(true));
    let restore = stack
        .sim
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path == "/nodes/pve/lxc")
        .unwrap();
    assert!(
        restore
            .params
            .contains(&("onboot".to_owned(), "0".to_owned())),
        "{:?}",
        restore.params
    );
    assert_eq!(
        lifecycle(&stack.sim, restored),
        vec![
            "links down",
            "start",
            "exec /usr/bin/find",
            "exec /usr/bin/truncate",
            "shutdown",
            "links up",
            "start"
        ]
    );
    // The container at the old vmid is never touched.
    assert_eq!(stack.sim.guest_running(vmid), Some(true));
    assert_eq!(guest_mac(&stack.sim, vmid), mac);
    assert_eq!(
        guest_text(&stack.sim, vmid, MACHINE_ID).as_deref(),
        Some(FIRST_BOOT_ID)
    );
    assert_eq!(host_keys(&stack.sim, vmid).len(), 2);
    assert_eq!(lifecycle(&stack.sim, vmid), Vec::<String>::new());
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_reset_inside_the_guest_fails_no_second_guest_is_left_or_connected() {
    // The helper cannot run `pct` here: every reset fails.
    let (stack, vmid) = Stack::start(|_, _, _, _| {}).await;
    first_boot(&stack.sim, vmid).await;
    stack.back_up(vmid, None).await;
    stack.sim.clear_requests();

    disown(&stack.sim, vmid).await;
    let journal = stack.agent.handles.journal.clone();
    eventually(
        Duration::from_secs(60),
        "a DR rolled back at the reset, and only the source left",
        || async {
            let operations = journal.recent_operations(50).await.unwrap();
            let rolled_back = operations.iter().any(|(o, _)| {
                o.kind == "dr_restore"
                    && o.status == bosun_agentd::ops::journal::OpStatus::Compensated
                    && o.error
                        .as_deref()
                        .is_some_and(|e| e.contains("reset_guest_identity"))
            });
            let open = operations
                .iter()
                .any(|(o, _)| o.status == bosun_agentd::ops::journal::OpStatus::Running);
            rolled_back && !open && stack.sim.guest_ids() == vec![vmid]
        },
    )
    .await;
    let attempts = agent_restores(&stack.sim);
    assert!(!attempts.is_empty());
    for (restored, _) in attempts {
        let restored: u32 = restored.parse().unwrap();
        assert_ne!(restored, vmid);
        let seen = lifecycle(&stack.sim, restored);
        assert_eq!(
            seen.first().map(String::as_str),
            Some("links down"),
            "{seen:?}"
        );
        assert!(!seen.iter().any(|e| e == "links up"), "{seen:?}");
    }
    assert!(!stack.files.helper.identity_resets().is_empty());
    // The guest stays lost (as the pass that rolled the DR back publishes it, once it ends),
    // the source untouched.
    let mut reconcile = stack.agent.handles.reconcile.clone();
    tokio::time::timeout(
        Duration::from_secs(30),
        reconcile.wait_for(|s| {
            s.guests.iter().any(|g| {
                g.guest_id == Some(stack.guest)
                    && g.status == bosun_proto::report::GuestStatus::Lost
            })
        }),
    )
    .await
    .expect("the guest is reported lost")
    .unwrap();
    assert_eq!(stack.sim.guest_running(vmid), Some(true));
    assert_eq!(
        guest_text(&stack.sim, vmid, MACHINE_ID).as_deref(),
        Some(FIRST_BOOT_ID)
    );
    stack.stop().await;
}
