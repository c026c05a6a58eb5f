//! A compromised hub against the signed data plan (DESIGN §5): the hub holds its TLS key and
//! database and answers polls with anything, but not the operator's SSH key. Each attack runs
//! against the real agent over real TLS, with the simulator's request log counting what
//! reached Proxmox and its remote servers showing what landed where:
//!
//! - the operator's sealed PBS password copied onto a PBS target naming the hub's server;
//! - an NFS target on the hub's server named a further tier (unencrypted archives);
//! - a `local-dir` target inside a guest's root filesystem;
//! - the namespace of the plan's PBS tier moved to another host's on a shared datastore;
//! - the hub's own PBS made tier 0 (a planted archive for disaster recovery);
//! - a hub-set schedule every 5 s (a disk-fill and load lever);
//! - the longest quiesce grace (a day) on a plan backing up every 5 s, and restore tests
//!   turned off under a plan that names their cadence (decision 0051);
//! - a plan signed by a stranger, for another host, or replayed below the serial in force.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::{Duration, Instant};

use agent_support::hostile_hub::HostileHub;
use agent_support::signing::{OperatorKey, plan_of, signed_plan};
use agent_support::*;
use bosun_agentd::data::storage::naming::storage_id;
use bosun_proto::desired::StorageTarget;
use bosun_proto::report::{TargetReason, TargetStatus};
use bosun_pve::Pve;
use bosun_pvesim::{RemoteSpec, SimConfig, SimHandle};
use bosun_pvesim::{RemoteStore, StoredBackup, StoredNamespace};
use serde_json::{Value, json};
use uuid::Uuid;

const FP: &str = "12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0";
const EVIL_FP: &str = "AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99";
const REAL_PBS: &str = "pbs.operator.example";
const EVIL_PBS: &str = "pbs.hub.example";
const EVIL_NAS: &str = "nas.hub.example";
const DATASTORE: &str = "shared";
const OTHER_NAMESPACE: &str = "hosts/other";

/// The operator's PBS target, in its own namespace on a datastore other hosts share.
fn real_pbs(credentials: &str) -> Value {
    json!({
        "type": "pbs",
        "durable_id": format!("backup@pbs!bosun@{REAL_PBS}:{DATASTORE}#{FP}"),
        "class": "slow",
        "role": "pbs-offsite",
        "policy": { "schedule": "03:00", "retention": { "keep_last": 1 } },
        "state": "attached",
        "namespace": "hosts/this",
        "credentials": credentials,
    })
}

/// Five backups of another host's guest in its namespace on the shared datastore.
fn other_hosts_backups(password: &str) -> RemoteStore {
    let backups = (0..5)
        .map(|i| StoredBackup {
            volid: format!("backup/ct/100/2026-11-0{}T02:00:00Z", i + 1),
            content: "backup".into(),
            format: "pbs-ct".into(),
            size: 1 << 20,
            ctime: 1_793_500_000 + i64::from(i) * 86_400,
            vmid: Some(100),
            notes: None,
            protected: false,
            encrypted: None,
            archive: None,
        })
        .collect();
    RemoteStore {
        spec: Some(RemoteSpec::Pbs {
            fingerprint: FP.into(),
            datastores: vec![DATASTORE.into()],
            username: None,
            password: password.into(),
        }),
        namespaces: vec![StoredNamespace {
            datastore: DATASTORE.into(),
            namespace: OTHER_NAMESPACE.into(),
            backups,
        }],
    }
}

/// The other host's backups still on the shared datastore.
fn other_hosts_backup_count(sim: &SimHandle) -> usize {
    let store = sim.export_remote(REAL_PBS).unwrap();
    store
        .namespaces
        .iter()
        .filter(|n| n.namespace == OTHER_NAMESPACE)
        .map(|n| n.backups.len())
        .sum()
}

/// Requests that registered or changed a storage naming `needle` in any parameter.
fn storage_requests_naming(sim: &SimHandle, needle: &str) -> Vec<bosun_pvesim::LoggedRequest> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method != "GET" && r.path.starts_with("/storage"))
        .filter(|r| r.params.iter().any(|(_, v)| v.contains(needle)))
        .collect()
}

/// vzdumps the simulator ran (their `storage` parameter).
fn vzdump_storages(sim: &SimHandle) -> Vec<String> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/vzdump"))
        .map(|r| {
            r.params
                .iter()
                .find(|(k, _)| k == "storage")
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        })
        .collect()
}

/// The `storage.refused` audit entries the agent sent, as (durable_id, reason, tier).
fn refusals(hub: &HostileHub) -> Vec<(String, String, bool)> {
    hub.audit()
        .into_iter()
        .filter(|(action, _)| action == "storage.refused")
        .map(|(_, d)| {
            let d = &d["detail"];
            (
                d["durable_id"].as_str().unwrap_or_default().to_owned(),
                d["reason"].as_str().unwrap_or_default().to_owned(),
                d["tier"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

/// The storage part of the agent's last full report.
fn reported_targets(hub: &HostileHub) -> Vec<bosun_proto::report::TargetReport> {
    hub.script
        .lock()
        .polls
        .iter()
        .rev()
        .find_map(|p| p.report.as_ref().map(|r| r.storage.clone()))
        .or_else(|| {
            hub.script
                .lock()
                .polls
                .iter()
                .rev()
                .find_map(|p| p.delta.as_ref().and_then(|d| d.storage.clone()))
        })
        .unwrap_or_default()
}

struct Stage {
    sim: SimHandle,
    hub: HostileHub,
    /// Kept for the agent's configuration and state directory.
    _files: AgentFiles,
    agent: InProcessAgent,
    host: Uuid,
    sealed: String,
}

/// A simulator with the operator's PBS (holding another host's backups) and the hub's own
/// servers, the hostile hub and an enrolled agent with one guest running.
async fn stage() -> (Stage, Value) {
    stage_with("").await
}

/// [`stage`] with `extra` lines at the end of the agent's configuration.
async fn stage_with(extra: &str) -> (Stage, Value) {
    let sim = start_sim(SimConfig::fast()).await;
    let password = format!("pbs-{}", Uuid::new_v4().simple());
    sim.import_remote(REAL_PBS, other_hosts_backups(&password))
        .unwrap();
    // The hub's own servers accept anything it is sent.
    sim.declare_remote(
        EVIL_PBS,
        RemoteSpec::Pbs {
            fingerprint: EVIL_FP.into(),
            datastores: vec!["loot".into()],
            username: None,
            password: password.clone(),
        },
    );
    sim.add_nfs_remote(EVIL_NAS, "/exfil");
    sim.set_strict_remotes(true);
    let hub = HostileHub::start().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some("hostile-enroll"));
    vm::append_config(&files, extra);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = hub.host_id;
    let guest = Uuid::new_v4();
    let mut desired = desired(&sim, &[(guest, "alpha")], "running");
    hub.set_desired(desired.clone());
    let status = agent.handles.reconcile.clone();
    running_vmid(&status, guest).await;
    // The operator seals the PBS password to this host (the recipient the agent reported).
    let recipient = eventually_recipient(&hub).await;
    let mut unsealed = real_pbs("");
    unsealed.as_object_mut().unwrap().remove("credentials");
    let identity = serde_json::from_value::<StorageTarget>(unsealed)
        .unwrap()
        .identity();
    let credential = bosun_proto::sealed_credential::SealedCredential::new(
        host,
        identity,
        jiff::Timestamp::now(),
        bosun_proto::secret::SecretToken::new(password.clone()),
    );
    let sealed = agent_support::signing::seal_signed(&recipient, &credential);
    desired["storage"] = json!([real_pbs(&sealed)]);
    desired["backup_policy"]["further_tiers"] = json!([desired["storage"][0]["durable_id"]]);
    (
        Stage {
            sim,
            hub,
            _files: files,
            agent,
            host,
            sealed,
        },
        desired,
    )
}

async fn eventually_recipient(hub: &HostileHub) -> String {
    let mut recipient = None;
    eventually(Duration::from_secs(30), "the host's recipient", || {
        let found = hub
            .script
            .lock()
            .polls
            .iter()
            .find_map(|p| p.report.as_ref()?.storage_recipient.clone());
        recipient = found.clone();
        async move { found.is_some() }
    })
    .await;
    recipient.unwrap()
}

/// The operator signs `desired`'s storage and tiers for the host; the hub publishes it.
async fn operator_plans(stage: &Stage, desired: &Value) -> Value {
    let plan = plan_of(desired, stage.host);
    let mut planned = desired.clone();
    planned["data_plan"] = signed_plan(&plan);
    stage.hub.set_desired(planned.clone());
    let durable = desired["storage"][0]["durable_id"]
        .as_str()
        .unwrap()
        .to_owned();
    eventually(Duration::from_secs(30), "the plan's PBS mounted", || {
        let mounted = reported_targets(&stage.hub)
            .iter()
            .any(|t| t.durable_id == durable && t.status == TargetStatus::Mounted);
        async move { mounted }
    })
    .await;
    planned
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_cannot_add_a_target_move_one_or_take_its_credentials() {
    let (stage, desired) = stage().await;
    let planned = operator_plans(&stage, &desired).await;
    let sim = &stage.sim;
    let real: StorageTarget = serde_json::from_value(desired["storage"][0].clone()).unwrap();
    let real_storage = storage_id(&real.identity());
    assert_eq!(
        storage_requests_naming(sim, REAL_PBS).len(),
        1,
        "registered once"
    );

    // The hub's document: the operator's sealed password on a PBS target naming the hub's
    // server (1), an NFS target on the hub's server as a further tier (2), a local-dir
    // target inside the guest's root filesystem (3), and the plan's PBS moved to another
    // host's namespace on the shared datastore (4).
    let vmid = stage.agent.handles.reconcile.borrow().guests[0].vmid;
    let rootfs = format!("/var/lib/lxc/{vmid}/rootfs/var/backups");
    let mut hostile = planned.clone();
    let mut moved = real_pbs(&stage.sealed);
    moved["namespace"] = json!(OTHER_NAMESPACE);
    hostile["storage"] = json!([
        moved,
        {
            "type": "pbs",
            "durable_id": format!("backup@pbs!bosun@{EVIL_PBS}:loot#{EVIL_FP}"),
            "class": "slow", "role": "pbs-offsite",
            "policy": { "schedule": "03:00", "retention": {} }, "state": "attached",
            "namespace": "hosts/this",
            "credentials": stage.sealed,
        },
        {
            "type": "nfs", "durable_id": format!("{EVIL_NAS}:/exfil"),
            "class": "slow", "role": "vzdump-target",
            "policy": { "schedule": "03:00", "retention": {} }, "state": "attached",
        },
        {
            "type": "local-dir", "durable_id": rootfs,
            "class": "fast", "role": "vzdump-target",
            "policy": { "schedule": "03:00", "retention": {} }, "state": "attached",
        },
    ]);
    hostile["backup_policy"]["further_tiers"] = json!([format!("{EVIL_NAS}:/exfil")]);
    let since = sim.requests().len();
    stage.hub.set_desired(hostile);

    eventually(
        Duration::from_secs(30),
        "every hostile target refused",
        || {
            let refused = refusals(&stage.hub);
            async move { refused.len() >= 5 }
        },
    )
    .await;
    let refused = refusals(&stage.hub);
    let reason = |id: &str, tier: bool| {
        refused
            .iter()
            .find(|(d, _, t)| d.contains(id) && *t == tier)
            .map(|(_, r, _)| r.clone())
    };
    assert_eq!(reason(EVIL_PBS, false).as_deref(), Some("not_in_plan"));
    assert_eq!(reason(EVIL_NAS, false).as_deref(), Some("not_in_plan"));
    assert_eq!(reason(EVIL_NAS, true).as_deref(), Some("not_in_plan"));
    assert_eq!(
        reason("/var/lib/lxc", false).as_deref(),
        Some("not_in_plan")
    );
    assert_eq!(
        reason(REAL_PBS, false).as_deref(),
        Some("identity_mismatch")
    );
    // Refused once, not at every pass: the watcher looks every second.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(refusals(&stage.hub).len(), refused.len(), "audited once");

    // Nothing of it reached Proxmox: no storage registered on the hub's servers or in the
    // guest's root filesystem, no setting of the plan's storage changed, no vzdump but to
    // the plan's storages.
    for needle in [EVIL_PBS, EVIL_NAS, "/var/lib/lxc", OTHER_NAMESPACE] {
        assert_eq!(
            storage_requests_naming(sim, needle),
            vec![],
            "a request naming {needle} reached Proxmox"
        );
    }
    let changed: Vec<_> = sim.requests()[since..]
        .iter()
        .filter(|r| r.method == "PUT" && r.path.starts_with("/storage"))
        .cloned()
        .collect();
    assert_eq!(changed, vec![], "the plan's storage was changed");
    assert!(
        vzdump_storages(sim)
            .iter()
            .all(|s| s == "local" || s == real_storage.as_str()),
        "{:?}",
        vzdump_storages(sim)
    );
    let config = root_client(sim)
        .storage_config(&real_storage)
        .await
        .unwrap();
    assert_eq!(config["namespace"], "hosts/this");
    assert_eq!(other_hosts_backup_count(sim), 5, "another host's backups");
    // The agent reports them refused, in the fixed vocabulary, and keeps the plan's PBS.
    eventually(Duration::from_secs(10), "refusals reported", || {
        let targets = reported_targets(&stage.hub);
        async move {
            targets
                .iter()
                .filter(|t| t.status == TargetStatus::Refused)
                .count()
                == 4
        }
    })
    .await;
    let targets = reported_targets(&stage.hub);
    assert!(targets.iter().all(|t| t.detail.is_none()), "{targets:?}");
    assert!(
        targets
            .iter()
            .filter(|t| t.status == TargetStatus::Refused)
            .all(|t| matches!(
                t.reason,
                Some(TargetReason::NotInPlan | TargetReason::IdentityMismatch)
            ))
    );
    assert!(
        targets
            .iter()
            .any(|t| t.durable_id == real.durable_id && t.status == TargetStatus::Mounted)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_newest_plan_the_operator_signed_for_this_host_counts() {
    let (stage, desired) = stage().await;
    let planned = operator_plans(&stage, &desired).await;
    let accepted = |hub: &HostileHub| {
        hub.audit()
            .iter()
            .filter(|(a, _)| a == "data_plan.accepted")
            .count()
    };
    assert_eq!(accepted(&stage.hub), 1);
    let plan_refusals = |hub: &HostileHub| {
        hub.audit()
            .into_iter()
            .filter(|(a, _)| a == "data_plan.refused")
            .map(|(_, d)| {
                d["detail"]["reason"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect::<Vec<_>>()
    };

    // The hub's own plan (its key is no operator's), naming its PBS as tier 0.
    let stranger = OperatorKey::new("hub@evil");
    let mut evil = desired.clone();
    evil["storage"] = json!([{
        "type": "pbs",
        "durable_id": format!("backup@pbs!bosun@{EVIL_PBS}:loot#{EVIL_FP}"),
        "class": "fast", "role": "pbs-offsite",
        "policy": { "schedule": "03:00", "retention": {} }, "state": "attached",
        "namespace": "hosts/this",
    }]);
    evil["backup_policy"]["target"] = evil["storage"][0]["durable_id"].clone();
    evil["backup_policy"]["further_tiers"] = json!([]);
    let mut plan = plan_of(&evil, stage.host);
    plan.serial += 1_000;
    let bytes = serde_json::to_vec(&plan).unwrap();
    let signature = stranger.sign(&bytes, bosun_proto::data_plan::PLAN_NAMESPACE);
    evil["data_plan"] =
        serde_json::to_value(bosun_proto::signed::SignedDocument::new(&bytes, &signature)).unwrap();
    stage.hub.set_desired(evil);
    eventually(Duration::from_secs(20), "the hub's plan refused", || {
        let refused = plan_refusals(&stage.hub);
        async move { !refused.is_empty() }
    })
    .await;

    // A plan the operator signed for another host, and the operator's first plan again
    // after a newer one: both refused.
    let mut other = planned.clone();
    other["data_plan"] = signed_plan(&plan_of(&desired, Uuid::new_v4()));
    stage.hub.set_desired(other);
    let newer = planned.clone();
    let mut newer_doc = newer.clone();
    newer_doc["data_plan"] = signed_plan(&plan_of(&desired, stage.host));
    eventually(
        Duration::from_secs(20),
        "the other host's plan refused",
        || {
            let refused = plan_refusals(&stage.hub);
            async move { refused.len() >= 2 }
        },
    )
    .await;
    stage.hub.set_desired(newer_doc);
    eventually(Duration::from_secs(20), "the newer plan accepted", || {
        let n = accepted(&stage.hub);
        async move { n == 2 }
    })
    .await;
    stage.hub.set_desired(planned);
    eventually(Duration::from_secs(20), "the replayed plan refused", || {
        let refused = plan_refusals(&stage.hub);
        async move { refused.len() >= 3 }
    })
    .await;
    let refused = plan_refusals(&stage.hub);
    assert!(
        refused[0].contains("unknown") || refused[0].contains("signer"),
        "{refused:?}"
    );
    assert!(refused[1].contains("not this one"), "{refused:?}");
    assert!(refused[2].contains("not above"), "{refused:?}");
    assert_eq!(
        storage_requests_naming(&stage.sim, EVIL_PBS),
        vec![],
        "the hub's PBS reached Proxmox"
    );
    let planned: StorageTarget = serde_json::from_value(desired["storage"][0].clone()).unwrap();
    let planned = storage_id(&planned.identity());
    let vzdumps = vzdump_storages(&stage.sim);
    assert!(
        vzdumps
            .iter()
            .all(|s| s == "local" || s == planned.as_str()),
        "a vzdump went to a storage the plan does not name: {vzdumps:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_schedule_every_five_seconds_is_held_to_the_least_interval() {
    let (stage, mut desired) = stage().await;
    // No plan: the agent's own least interval holds (15 minutes by default).
    desired["storage"] = json!([]);
    desired["backup_policy"]["further_tiers"] = json!([]);
    desired["backup_policy"]["schedule"] = json!("*:*:0/5");
    let before = vzdump_storages(&stage.sim).len();
    stage.hub.set_desired(desired);
    let started = Instant::now();
    eventually(
        Duration::from_secs(20),
        "the first scheduled backup",
        || {
            let n = vzdump_storages(&stage.sim).len();
            async move { n > before }
        },
    )
    .await;
    // Another 20 s of a schedule that fires every 5 s.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let runs = vzdump_storages(&stage.sim).len() - before;
    eprintln!(
        "hub schedule every 5 s: {runs} vzdump(s) in {:?}",
        started.elapsed()
    );
    assert_eq!(
        runs, 1,
        "the least interval did not hold the hub's schedule"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_quiesce_grace_a_hub_can_set_keeps_the_plans_cadence() {
    let (stage, mut desired) = stage().await;
    // The operator signs tier 0 on the configured storage every 5 s.
    desired["storage"] = json!([]);
    desired["backup_policy"]["further_tiers"] = json!([]);
    desired["backup_policy"]["schedule"] = json!("*:*:0/5");
    let plan = plan_of(&desired, stage.host);
    desired["data_plan"] = signed_plan(&plan);
    // The hub gives the controller the longest grace desired state allows: a day.
    desired["backup_policy"]["quiesce_grace_minutes"] = json!(1440);
    let before = vzdump_storages(&stage.sim).len();
    stage.hub.set_desired(desired);
    eventually(
        Duration::from_secs(20),
        "the first scheduled backup",
        || {
            let n = vzdump_storages(&stage.sim).len();
            async move { n > before }
        },
    )
    .await;
    let counted_from = vzdump_storages(&stage.sim).len();
    // Six intervals of the plan.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let storages = vzdump_storages(&stage.sim);
    let runs = storages.len() - counted_from;
    eprintln!("grace 1440 min on a signed 5 s schedule: {runs} vzdump(s) in 30 s (6 intervals)");
    assert!(
        storages[counted_from..].iter().all(|s| s == "local"),
        "{storages:?}"
    );
    assert!(
        (5..=7).contains(&runs),
        "the plan's cadence did not hold under the hub's grace: {runs} backups in 6 intervals"
    );
    stage.agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_that_turns_restore_tests_off_still_gets_the_plans() {
    // The restore tester looks again every policy minute: a second here, not a real minute.
    let (stage, mut desired) = stage_with("[backup]\nrestore_test_minute_ms = 1000\n").await;
    desired["storage"] = json!([]);
    desired["backup_policy"]["further_tiers"] = json!([]);
    desired["backup_policy"]["schedule"] = json!("*:*:0/5");
    // The operator signs restore tests at least daily.
    let mut plan = plan_of(&desired, stage.host);
    plan.backup.restore_test_days = Some(1);
    desired["data_plan"] = signed_plan(&plan);
    // The hub turns them off (and would space them a year apart).
    desired["restore_test_policy"] =
        json!({ "enabled": false, "interval_days": 365, "timeout_minutes": 30 });
    let vmid = running_vmid(&stage.agent.handles.reconcile, desired_guest(&desired)).await;
    stage.hub.set_desired(desired);
    eventually(
        Duration::from_secs(120),
        "a restore test of the guest's backup",
        || {
            let scratch = agent_restores(&stage.sim)
                .into_iter()
                .filter(|(at, _)| *at != vmid.to_string())
                .count();
            async move { scratch > 0 }
        },
    )
    .await;
    let scratch: Vec<_> = agent_restores(&stage.sim)
        .into_iter()
        .filter(|(at, _)| *at != vmid.to_string())
        .collect();
    eprintln!("restore tests with the hub's policy off: {scratch:?}");
    assert!(
        scratch
            .iter()
            .all(|(_, archive)| archive.contains(&format!("vzdump-lxc-{vmid}-"))),
        "a restore test restores the guest's own backup: {scratch:?}"
    );
}

/// The first guest of a desired-state document.
fn desired_guest(desired: &Value) -> Uuid {
    desired["guests"][0]["guest_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}
