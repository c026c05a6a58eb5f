//! Only the customer's own, unchanged backup comes back into their guest, through the real
//! agent, hub, TLS and the helper's own hashing verb. Someone who can write the backup
//! storage (the NFS server's owner, a leaked share password) puts another guest's archive
//! under this guest's newest archive name: a DR restore refuses it (`archive_rejected` at the
//! hub) and restores the guest's own older backup instead; a signed `restore-now` that names
//! it fails without anything reaching Proxmox. A restored guest keeps the archive's MAC only
//! when it is the MAC the journal recorded for the guest. On PBS, whoever holds the datastore
//! (same K) puts another guest's snapshot content under this guest's newest snapshot, keeping
//! its path, notes and key fingerprint: DR refuses it by the config inside (decision 0052).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::jobs::{job_result, submit};
use agent_support::signing::OperatorKey;
use agent_support::storage::alerts;
use agent_support::*;
use bosun_pvesim::SimHandle;
use uuid::Uuid;

const MARKER: &str = "/root/bosun-proof-marker";
const FP: &str = "12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0";

struct Stack {
    sim: SimHandle,
    hub: RealHub,
    files: AgentFiles,
    operator: OperatorKey,
    agent: InProcessAgent,
    host: Uuid,
}

impl Stack {
    /// An enrolled agent with the running guests `guests`; gives their vmids in order.
    async fn start(guests: &[(Uuid, &str)]) -> (Self, Vec<u32>) {
        Self::start_shaped(guests, |_, _, _, _| {}).await
    }

    /// As [`Stack::start`], with the desired state edited by `shape` (given the simulator,
    /// the host and its sealing recipient) first.
    async fn start_shaped(
        guests: &[(Uuid, &str)],
        shape: impl FnOnce(&SimHandle, &mut serde_json::Value, Uuid, &str),
    ) -> (Self, Vec<u32>) {
        let (sim, hub, files) = enrolled_stack().await;
        let operator = files.trusted_operator();
        let agent = InProcessAgent::start(&files.config_path).await;
        let host = agent.handles.host_id;
        let mut state = desired(&sim, guests, "running");
        let recipient = hub_recipient(&hub, host).await;
        shape(&sim, &mut state, host, &recipient);
        hub.put_desired(host, &state).await;
        let mut vmids = Vec::new();
        for (guest, _) in guests {
            vmids.push(running_vmid(&agent.handles.reconcile, *guest).await);
        }
        let stack = Self {
            sim,
            hub,
            files,
            operator,
            agent,
            host,
        };
        (stack, vmids)
    }

    /// Submits a signed job of `kind` for `guest` at `vmid` with `params`; gives its result.
    async fn job(&self, kind: &str, guest: Uuid, vmid: u32, params: &[&str]) -> serde_json::Value {
        let (host, guest, vmid) = (self.host.to_string(), guest.to_string(), vmid.to_string());
        let mut args = vec![
            "--kind", kind, "--host", &host, "--guest", &guest, "--vmid", &vmid,
        ];
        for param in params {
            args.extend(["--param", param]);
        }
        let job = submit(&self.hub, &self.operator, self.files.dir.path(), &args).await;
        job_result(&self.hub, self.host, job).await
    }

    /// A signed `force-backup` of `guest` (the agent's local storage); gives the archive.
    async fn back_up(&self, guest: Uuid, vmid: u32) -> String {
        self.back_up_to(guest, vmid, &[]).await
    }

    /// A signed `force-backup` of `guest` with `params` (e.g. `storage=…`); gives the archive.
    async fn back_up_to(&self, guest: Uuid, vmid: u32, params: &[&str]) -> String {
        let result = self.job("force-backup", guest, vmid, params).await;
        assert_eq!(result["outcome"], "succeeded", "{result}");
        result["output"]["volid"].as_str().unwrap().to_owned()
    }

    /// Waits until the simulator's clock is in a later second than now, so the next
    /// archive of a guest gets a name of its own (vzdump names archives by the second).
    async fn next_second(&self) {
        let now = self.sim.now().as_second();
        eventually(Duration::from_secs(3), "the next second", || async {
            self.sim.now().as_second() > now
        })
        .await;
    }

    /// Waits until `guest` runs again at `vmid` under the agent.
    async fn back_at(&self, guest: Uuid, vmid: u32) {
        eventually(Duration::from_secs(90), "the guest runs again", || async {
            self.sim.guest_running(vmid) == Some(true)
                && self
                    .agent
                    .handles
                    .reconcile
                    .borrow()
                    .guests
                    .iter()
                    .any(|g| g.guest_id == Some(guest) && g.vmid == vmid)
        })
        .await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_archive_is_refused_and_dr_restores_the_guests_own_older_backup() {
    let (customer, other) = (Uuid::new_v4(), Uuid::new_v4());
    let (stack, vmids) = Stack::start(&[(customer, "customer"), (other, "other")]).await;
    let (vmid, other_vmid) = (vmids[0], vmids[1]);
    write_in_guest(&stack.sim, vmid, MARKER, "the customer's data").await;
    let older = stack.back_up(customer, vmid).await;
    write_in_guest(&stack.sim, other_vmid, MARKER, "another customer's data").await;
    let others = stack.back_up(other, other_vmid).await;
    stack.next_second().await;
    let newest = stack.back_up(customer, vmid).await;
    assert_ne!(newest, older);

    // Whoever can write the share puts the other guest's archive under the newest name.
    stack.sim.plant_archive(&newest, &others).unwrap();
    stack.sim.clear_requests();
    destroy_behind_its_back(&stack.sim, vmid).await;
    stack.back_at(customer, vmid).await;

    assert_eq!(
        agent_restores(&stack.sim),
        vec![(vmid.to_string(), older.clone())],
        "only the guest's own, unchanged archive is restored"
    );
    assert_eq!(
        marker(&stack.sim, vmid).as_deref(),
        Some("the customer's data")
    );
    eventually(
        Duration::from_secs(20),
        "archive_rejected at the hub",
        || async {
            alerts(&stack.hub, stack.host, "archive_rejected")
                .await
                .iter()
                .any(|a| a["message"].as_str().unwrap_or_default().contains(&newest))
        },
    )
    .await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_restore_now_naming_a_changed_archive_fails_and_reaches_nothing() {
    let (customer, other) = (Uuid::new_v4(), Uuid::new_v4());
    let (stack, vmids) = Stack::start(&[(customer, "customer"), (other, "other")]).await;
    let (vmid, other_vmid) = (vmids[0], vmids[1]);
    write_in_guest(&stack.sim, vmid, MARKER, "the customer's data").await;
    let own = stack.back_up(customer, vmid).await;
    let others = stack.back_up(other, other_vmid).await;
    stack.sim.plant_archive(&own, &others).unwrap();
    stack.sim.clear_requests();

    let param = format!("backup={own}");
    let result = stack.job("restore-now", customer, vmid, &[&param]).await;
    assert_eq!(result["outcome"], "failed", "{result}");
    let detail = result["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("failed its check"), "{detail}");
    let reached: Vec<_> = stack
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET" && r.path.contains("/lxc"))
        .collect();
    assert!(reached.is_empty(), "nothing changes the guest: {reached:?}");
    assert_eq!(
        marker(&stack.sim, vmid).as_deref(),
        Some("the customer's data")
    );
    // An archive never backed up for this guest (the other guest's) is refused as well.
    let param = format!("backup={others}");
    let result = stack.job("restore-now", customer, vmid, &[&param]).await;
    assert_eq!(result["outcome"], "failed", "{result}");
    assert!(agent_restores(&stack.sim).is_empty());
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_guest_keeps_only_the_mac_the_journal_recorded_for_it() {
    let customer = Uuid::new_v4();
    let (stack, vmids) = Stack::start(&[(customer, "customer")]).await;
    let vmid = vmids[0];
    let archive = stack.back_up(customer, vmid).await;
    let archived_mac = guest_mac(&stack.sim, vmid);

    // The journal records another MAC for the guest than the one its archive carries (as
    // when the archive came from elsewhere): the restored guest must not take the archive's.
    let Stack {
        sim,
        hub,
        files,
        operator,
        agent,
        host,
    } = stack;
    agent.stop().await;
    let journal = bosun_agentd::ops::journal::JournalHandle::open(
        &files.state_dir.join("journal.sqlite"),
        bosun_agentd::clock::SystemClock::shared(),
    )
    .await
    .unwrap();
    journal
        .record_mac(customer.to_string(), "BC:24:11:00:00:01".to_owned())
        .await
        .unwrap();
    journal.close().await.unwrap();
    let agent = InProcessAgent::start(&files.config_path).await;
    let stack = Stack {
        sim,
        hub,
        files,
        operator,
        agent,
        host,
    };
    stack.sim.clear_requests();
    destroy_behind_its_back(&stack.sim, vmid).await;
    stack.back_at(customer, vmid).await;
    assert_eq!(
        agent_restores(&stack.sim),
        vec![(vmid.to_string(), archive)]
    );
    let restored_mac = guest_mac(&stack.sim, vmid);
    assert_ne!(
        restored_mac, archived_mac,
        "a MAC the journal did not record is not kept"
    );
    assert_ne!(restored_mac, "BC:24:11:00:00:01");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reshuffled_pbs_snapshot_is_refused_and_dr_restores_the_guests_own_older_one() {
    let (alpha, bravo) = (Uuid::new_v4(), Uuid::new_v4());
    let password = format!("pbs-{}", Uuid::new_v4().simple());
    let durable = format!("backup@pbs!bosun@pbs.example:store1#{FP}");
    let (stack, vmids) = Stack::start_shaped(
        &[(alpha, "alpha"), (bravo, "bravo")],
        |sim, desired, host, recipient| {
            sim.add_pbs_remote("pbs.example", FP, "store1", &password);
            let mut offsite = serde_json::json!({
                "type": "pbs", "durable_id": durable, "class": "slow", "role": "pbs-offsite",
                "policy": { "schedule": "03:00", "retention": {} }, "state": "attached",
                "namespace": format!("host-{}", host.simple()),
            });
            offsite["credentials"] =
                serde_json::json!(seal_for(recipient, host, &offsite, &password));
            desired["storage"] = serde_json::json!([offsite]);
            desired["backup_policy"]["further_tiers"] = serde_json::json!([durable]);
        },
    )
    .await;
    let (vmid, bravo_vmid) = (vmids[0], vmids[1]);
    let pbs = pbs_storage(&durable, &format!("host-{}", stack.host.simple()));
    let to_pbs = format!("storage={pbs}");
    write_in_guest(&stack.sim, vmid, MARKER, "alpha's data").await;
    let older = stack.back_up_to(alpha, vmid, &[&to_pbs]).await;
    write_in_guest(&stack.sim, bravo_vmid, MARKER, "bravo's data").await;
    let bravos = stack.back_up_to(bravo, bravo_vmid, &[&to_pbs]).await;
    stack.next_second().await;
    write_in_guest(&stack.sim, vmid, MARKER, "alpha's newer data").await;
    let newest = stack.back_up_to(alpha, vmid, &[&to_pbs]).await;
    assert!(older.starts_with(pbs.as_str()) && newest.starts_with(pbs.as_str()));
    assert_ne!(newest, older);

    // The datastore's holder (same K) puts bravo's snapshot content under alpha's newest
    // snapshot, keeping its path, notes and key fingerprint.
    stack.sim.plant_archive(&newest, &bravos).unwrap();
    stack.sim.clear_requests();
    destroy_behind_its_back(&stack.sim, vmid).await;
    stack.back_at(alpha, vmid).await;

    let restored = agent_restores(&stack.sim);
    eprintln!("restores after the reshuffle: {restored:?}");
    assert_eq!(
        restored,
        vec![(vmid.to_string(), older.clone())],
        "only alpha's own snapshot is restored"
    );
    assert_eq!(marker(&stack.sim, vmid).as_deref(), Some("alpha's data"));
    eventually(
        Duration::from_secs(20),
        "archive_rejected at the hub",
        || async {
            alerts(&stack.hub, stack.host, "archive_rejected")
                .await
                .iter()
                .any(|a| a["message"].as_str().unwrap_or_default().contains(&newest))
        },
    )
    .await;
    stack.stop().await;
}
