//! A signed `restore-bulk` (decision 0108) killed at each of its journal steps: the agent runs
//! as a child process with a failpoint armed; the job trips it; the harness restarts the agent,
//! which resumes the job from its `accepted` step (the journal's record of the archive) and asks
//! the helper once more unless the `restore_bulk` step had ended well. Every kill ends with the
//! job succeeded once and the volume exactly its archive.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::crash::*;
use agent_support::signing::{envelope, job_doc, plan_of, signed_plan};
use agent_support::*;
use bosun_proto::data_plan::PlanBulkBackup;
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

const POINTS: &[&str] = &[
    "restore_bulk_job.accepted.intent",
    "restore_bulk_job.accepted.done",
    "restore_bulk_job.restore_bulk.intent",
    "restore_bulk_job.restore_bulk.done",
];

/// The volume `/srv/media` of guest `vmid`: every path below it, with a file's bytes.
fn volume(sim: &bosun_pvesim::SimHandle, vmid: u32) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = sim
        .guest_paths(vmid, "/srv/media")
        .into_iter()
        .map(|p| {
            let content = sim.guest_file(vmid, &p).unwrap().content;
            (p, content)
        })
        .collect();
    out.sort();
    out
}

/// Writes `bytes` to `path` in guest `vmid`, once the guest runs.
async fn put(sim: &bosun_pvesim::SimHandle, vmid: u32, path: &str, bytes: &[u8]) {
    let vmid = vmid.to_string();
    let args = ["push", vmid.as_str(), "/host/file", path];
    eventually(
        Duration::from_secs(60),
        "the guest takes a file",
        || async { sim.cli("pct", &args, Some(bytes)).await.unwrap().exit == 0 },
    )
    .await;
}

/// The job's outcome at the hub, once it has one.
async fn outcome(hub: &RealHub, host: Uuid, job: &str) -> Option<String> {
    let (_, jobs) = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}/jobs"), None)
        .await;
    jobs.as_array()?
        .iter()
        .find(|j| j["job_id"] == job)
        .and_then(|j| j["result"]["outcome"].as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_restore_bulk_step_restores_once_and_leaves_the_archive() {
    let (sim, hub, files) = enrolled_stack().await;
    let roots = tempfile::tempdir().unwrap();
    for name in ["bulk", "backup"] {
        std::fs::create_dir_all(roots.path().join(name)).unwrap();
    }
    files.allow_local_dirs(&[roots.path().to_str().unwrap()]);
    files.use_sim_pct(&sim);
    let operator = files.trusted_operator();
    let mut text = std::fs::read_to_string(&files.config_path).unwrap();
    text.push_str("[backup]\nbulk_check_ms = 1000\n");
    std::fs::write(&files.config_path, text).unwrap();
    let mut child = spawn_agent(&files.config_path, None);
    let host = host_id(&files.state_dir).await;
    let guest = Uuid::new_v4();
    let dir = |name: &str| roots.path().join(name).display().to_string();
    let target = |name: &str, role: &str| {
        json!({"type": "local-dir", "durable_id": dir(name), "class": "slow", "role": role,
               "policy": {}, "state": "attached"})
    };
    let mut desired = desired(&sim, &[(guest, "media-box")], "running");
    desired["storage"] = json!([
        target("bulk", "bulk-data"),
        target("backup", "vzdump-target")
    ]);
    desired["guests"][0]["bulk_volumes"] = json!([{
        "name": "media", "size_gib": 1, "path": "/srv/media", "class": "slow",
        "backup": { "kind": "target", "target": dir("backup") },
    }]);
    let with_plan = |bulk: Vec<PlanBulkBackup>| {
        let mut plan = plan_of(&desired, host);
        plan.bulk_backups = bulk;
        let mut out = desired.clone();
        out["data_plan"] = signed_plan(&plan);
        out
    };
    hub.put_desired(host, &with_plan(Vec::new())).await;
    eventually(Duration::from_secs(90), "the guest exists", || async {
        !sim.guest_ids().is_empty()
    })
    .await;
    let vmid = sim.guest_ids()[0];
    let vmid_s = vmid.to_string();
    let mkdir = [
        "exec",
        vmid_s.as_str(),
        "--",
        "/usr/bin/mkdir",
        "-p",
        "/srv/media",
    ];
    eventually(Duration::from_secs(60), "the guest runs", || async {
        sim.cli("pct", &mkdir, None).await.unwrap().exit == 0
    })
    .await;
    put(
        &sim,
        vmid,
        "/srv/media/notes.txt",
        b"the customer's notes\n",
    )
    .await;
    put(&sim, vmid, "/srv/media/film.mkv", &[7u8; 30_000]).await;
    let archived = volume(&sim, vmid);
    let entry = PlanBulkBackup {
        guest_id: guest,
        volume: "media".into(),
        path: "/srv/media".into(),
        target: dir("backup"),
        schedule: "daily".into(),
        keep_last: 2,
    };
    hub.put_desired(host, &with_plan(vec![entry])).await;
    let archives = roots
        .path()
        .join("backup/bosun-bulk")
        .join(guest.to_string())
        .join("media");
    eventually(
        Duration::from_secs(60),
        "the volume is archived",
        || async { std::fs::read_dir(&archives).is_ok_and(|mut d| d.next().is_some()) },
    )
    .await;
    // The journal records the archive after the helper answered: give it the moment.
    tokio::time::sleep(Duration::from_secs(2)).await;

    for point in POINTS {
        put(&sim, vmid, "/srv/media/notes.txt", point.as_bytes()).await;
        put(&sim, vmid, "/srv/media/stray.txt", b"not in the archive").await;
        assert_ne!(volume(&sim, vmid), archived, "{point}");
        kill(&mut child);
        child = spawn_agent(&files.config_path, Some(point));
        let doc = job_doc(
            "restore-bulk",
            host,
            guest,
            vmid,
            json!({"volume": "media"}),
            1,
        );
        let job = doc["job_id"].as_str().unwrap().to_owned();
        let bytes = serde_json::to_vec(&doc).unwrap();
        let signature = operator.sign(&bytes, "bosun-job@v1");
        let (status, body): (u16, Value) = hub
            .admin(
                Method::POST,
                &format!("/v1/admin/hosts/{host}/jobs"),
                Some(envelope(&bytes, &signature)),
            )
            .await;
        assert!((200..300).contains(&status), "{status} {body}");
        assert_tripped(&mut child, &files.config_path, point).await;
        child = spawn_agent(&files.config_path, None);
        eventually(Duration::from_secs(90), point, || async {
            outcome(&hub, host, &job).await.is_some()
        })
        .await;
        assert_eq!(
            outcome(&hub, host, &job).await.as_deref(),
            Some("succeeded"),
            "{point}: {}",
            log_tail(&files.config_path, 40)
        );
        assert_eq!(volume(&sim, vmid), archived, "{point}");
        journal_settles(&files.state_dir).await;
        assert_no_unfinished(&files.state_dir, point);
        let run = journal(&files.state_dir)
            .job_run(&job)
            .unwrap()
            .expect("claimed once");
        assert_eq!(
            run.outcome,
            Some(bosun_agentd::ops::journal::JobOutcome::Succeeded),
            "{point}"
        );
    }
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}
