//! Wiping a storage target end to end: the simulator, a real hub and the agent. Only a job
//! signed by a key in `allowed_signers` wipes, only a storage this agent named for a target
//! desired state no longer attaches, and only the archives the agent's journal recorded
//! writing there: an archive someone else put on the same storage stays. Each recorded
//! archive reaches Proxmox as exactly one `DELETE …/content/{volume}`, whether its answer is
//! lost or the agent is killed at any step of the wipe.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::collections::BTreeMap;
use std::time::Duration;

use agent_support::crash::*;
use agent_support::jobs::{job_result, submit};
use agent_support::signing::OperatorKey;
use agent_support::storage::target_report;
use agent_support::*;
use bosun_agentd::data::storage::naming::storage_id_of;
use bosun_proto::desired::StorageType;
use bosun_pvesim::{EndpointFault, FaultConfig, SimHandle};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

/// Desired state: `guest` running, and one `local-dir` target per directory in `state`.
fn desired_with(sim: &SimHandle, guest: Uuid, dirs: &[String], state: &str) -> Value {
    let mut desired = desired(sim, &[(guest, "customer")], "running");
    desired["storage"] = dirs
        .iter()
        .map(|dir| {
            json!({
                "type": "local-dir",
                "durable_id": dir,
                "class": "slow",
                "role": "vzdump-target",
                "policy": { "schedule": "03:00", "retention": { "keep_daily": 7 } },
                "state": state,
            })
        })
        .collect();
    desired
}

fn storage_of(dir: &str) -> String {
    storage_id_of(StorageType::LocalDir, dir)
        .as_str()
        .to_owned()
}

/// The `DELETE …/storage/{storage}/content/…` requests the simulator saw.
fn content_deletes(sim: &SimHandle, storage: &str) -> Vec<bosun_pvesim::LoggedRequest> {
    let prefix = format!("/nodes/pve/storage/{storage}/content/");
    sim.requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.path.starts_with(&prefix))
        .collect()
}

/// The backup archives the simulator holds on `storage`.
fn archives(sim: &SimHandle, storage: &str) -> Vec<String> {
    let mut volumes = sim.storage_volumes(storage);
    volumes.retain(|v| v.contains(":backup/"));
    volumes.sort();
    volumes
}

/// A signed `force-backup` of `vmid` to `storage`, run to success.
async fn backup_to(
    hub: &RealHub,
    key: &OperatorKey,
    dir: &std::path::Path,
    (host, guest, vmid): (Uuid, Uuid, u32),
    storage: &str,
) {
    let (host_s, guest_s, vmid_s) = (host.to_string(), guest.to_string(), vmid.to_string());
    let param = format!("storage={storage}");
    let args = [
        "--kind",
        "force-backup",
        "--host",
        &host_s,
        "--guest",
        &guest_s,
        "--vmid",
        &vmid_s,
        "--param",
        &param,
    ];
    let job = submit(hub, key, dir, &args).await;
    let result = job_result(hub, host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
}

async fn wipe(
    hub: &RealHub,
    key: &OperatorKey,
    dir: &std::path::Path,
    host: Uuid,
    target: &str,
) -> Uuid {
    let host_s = host.to_string();
    let durable = format!("durable_id={target}");
    let args = [
        "--kind",
        "storage-wipe",
        "--host",
        &host_s,
        "--param",
        &durable,
    ];
    submit(hub, key, dir, &args).await
}

/// Waits until the hub heard that every target in `dirs` is `status`.
async fn targets_are(hub: &RealHub, host: Uuid, dirs: &[String], status: &str) {
    eventually(Duration::from_secs(60), status, || async {
        for dir in dirs {
            let report = target_report(hub, host, dir).await;
            if report.is_none_or(|r| r["status"] != status) {
                return false;
            }
        }
        true
    })
    .await;
}

/// The one guest the simulator runs, once it does.
async fn the_guest(sim: &SimHandle) -> u32 {
    eventually(Duration::from_secs(60), "the guest runs", || async {
        sim.guest_ids()
            .first()
            .is_some_and(|v| sim.guest_running(*v) == Some(true))
    })
    .await;
    sim.guest_ids()[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_signed_wipe_deletes_and_only_the_archives_this_host_recorded() {
    let (sim, hub, files) = enrolled_stack().await;
    let root = files.dir.path().display().to_string();
    files.allow_local_dirs(&[&root]);
    let operator = files.trusted_operator();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    let target = format!("{root}/wipe");
    let dirs = [target.clone()];
    let storage = storage_of(&target);
    let dir = files.dir.path();
    hub.put_desired(host, &desired_with(&sim, guest, &dirs, "attached"))
        .await;
    let vmid = running_vmid(&agent.handles.reconcile, guest).await;
    targets_are(&hub, host, &dirs, "mounted").await;

    // Two backups the agent takes and records; one archive someone else puts beside them.
    for _ in 0..2 {
        backup_to(&hub, &operator, dir, (host, guest, vmid), &storage).await;
    }
    let recorded = archives(&sim, &storage);
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    let foreign = sim.add_backup(&storage, vmid, BTreeMap::new()).unwrap();

    // A hub cannot sign: a stranger's wipe is refused.
    let stranger = OperatorKey::new("hub@example");
    let job = wipe(&hub, &stranger, dir, host, &target).await;
    let result = job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "rejected", "{result}");
    // Signed, but the target is still attached: refused, nothing deleted.
    let job = wipe(&hub, &operator, dir, host, &target).await;
    let result = job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "rejected", "{result}");
    assert_eq!(result["output"]["code"], "still_attached", "{result}");
    assert!(content_deletes(&sim, &storage).is_empty());

    hub.put_desired(host, &desired_with(&sim, guest, &dirs, "disconnected"))
        .await;
    targets_are(&hub, host, &dirs, "detached").await;

    // Every delete's answer is lost: the agent finds each task and follows it.
    sim.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            method: Some("DELETE".to_owned()),
            path: "/nodes/{node}/storage/{storage}/content/{volume}".to_owned(),
            drop_after_rate: 1.0,
            ..EndpointFault::default()
        }],
        ..FaultConfig::default()
    });
    let job = wipe(&hub, &operator, dir, host, &target).await;
    let result = job_result(&hub, host, job).await;
    sim.set_faults(FaultConfig::default());
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(result["output"]["recorded"], 2, "{result}");
    assert_eq!(result["output"]["deleted"], 2, "{result}");
    assert_eq!(result["output"]["left"], 1, "{result}");
    let deletes = content_deletes(&sim, &storage);
    assert_eq!(
        deletes.len(),
        2,
        "one DELETE per recorded archive: {deletes:?}"
    );
    assert!(
        deletes.iter().all(|d| d.status == 0),
        "answers dropped: {deletes:?}"
    );
    eventually(Duration::from_secs(30), "the deletes end", || async {
        archives(&sim, &storage) == [foreign.clone()]
    })
    .await;

    // A second wipe finds nothing of its own left and deletes nothing.
    let job = wipe(&hub, &operator, dir, host, &target).await;
    let result = job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(result["output"]["deleted"], 0, "{result}");
    assert_eq!(content_deletes(&sim, &storage).len(), 2);
    let audit = agent.handles.journal.audit_since(0, 10_000).await.unwrap();
    let wiped = audit
        .iter()
        .filter(|e| e.event.event == "storage.wiped")
        .count();
    assert_eq!(wiped, 2, "each wipe is audited");
    assert_eq!(archives(&sim, &storage), [foreign]);

    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

const POINTS: &[&str] = &[
    "storage_wipe_job.accepted.intent",
    "storage_wipe_job.accepted.done",
    "storage_wipe_job.delete_archive.intent",
    "storage_wipe_job.delete_archive.sent",
    "storage_wipe_job.delete_archive.done",
    "job.result.queued",
];

async fn outcome(hub: &RealHub, host: Uuid, job: Uuid) -> Option<String> {
    let (_, jobs) = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}/jobs"), None)
        .await;
    jobs.as_array()?
        .iter()
        .find(|j| j["job_id"] == job.to_string())
        .and_then(|j| j["result"]["outcome"].as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_wipe_step_each_recorded_archive_is_deleted_once() {
    let (sim, hub, files) = enrolled_stack().await;
    let root = files.dir.path().display().to_string();
    files.allow_local_dirs(&[&root]);
    let operator = files.trusted_operator();
    let mut child = spawn_agent(&files.config_path, None);
    let host = host_id(&files.state_dir).await;
    let guest = Uuid::new_v4();
    let dir = files.dir.path();
    // One target per failpoint, each with two recorded archives and one foreign one.
    let dirs: Vec<String> = (0..POINTS.len())
        .map(|i| format!("{root}/wipe-{i}"))
        .collect();
    hub.put_desired(host, &desired_with(&sim, guest, &dirs, "attached"))
        .await;
    let vmid = the_guest(&sim).await;
    targets_are(&hub, host, &dirs, "mounted").await;
    let mut foreign = Vec::new();
    for target in &dirs {
        let storage = storage_of(target);
        for _ in 0..2 {
            backup_to(&hub, &operator, dir, (host, guest, vmid), &storage).await;
        }
        assert_eq!(archives(&sim, &storage).len(), 2);
        foreign.push(sim.add_backup(&storage, vmid, BTreeMap::new()).unwrap());
    }
    hub.put_desired(host, &desired_with(&sim, guest, &dirs, "disconnected"))
        .await;
    targets_are(&hub, host, &dirs, "detached").await;

    for (i, point) in POINTS.iter().enumerate() {
        let storage = storage_of(&dirs[i]);
        kill(&mut child);
        child = spawn_agent(&files.config_path, Some(point));
        let job = wipe(&hub, &operator, dir, host, &dirs[i]).await;
        assert_tripped(&mut child, &files.config_path, point).await;
        child = spawn_agent(&files.config_path, None);
        eventually(Duration::from_secs(60), point, || async {
            outcome(&hub, host, job).await.is_some()
        })
        .await;
        assert_eq!(
            outcome(&hub, host, job).await.as_deref(),
            Some("succeeded"),
            "{point}: {}",
            log_tail(&files.config_path, 40)
        );
        journal_settles(&files.state_dir).await;
        assert_no_unfinished(&files.state_dir, point);
        let deletes = content_deletes(&sim, &storage);
        assert_eq!(
            deletes.len(),
            2,
            "{point}: one DELETE per archive: {deletes:?}"
        );
        eventually(Duration::from_secs(30), point, || async {
            archives(&sim, &storage) == [foreign[i].clone()]
        })
        .await;
    }
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}
