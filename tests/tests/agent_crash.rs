//! Crash safety: the agent runs as a child process with a failpoint armed at
//! one journal step of provisioning or of a signed restore; the failpoint
//! aborts the process on the spot (what SIGKILL leaves). The harness restarts
//! the agent and asserts convergence: every desired guest exists exactly once
//! and runs, no operation is left unfinished, every job ran at most once and
//! reported success.
//!
//! The child is this test binary itself (`agent_support::crash`), so the agent
//! code under test is the library built with the `failpoints` feature.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::path::Path;
use std::time::Duration;

use agent_support::crash::*;
use agent_support::signing::{OperatorKey, envelope, job_doc};
use agent_support::*;
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

/// Restarts the agent with `point` armed, asks for `guests` (the newest one is what trips the
/// failpoint), waits for the crash, starts the agent again and waits until every guest runs.
async fn crash_at(
    point: &str,
    child: &mut AgentChild,
    sim: &bosun_pvesim::SimHandle,
    hub: &RealHub,
    files: &AgentFiles,
    host: Uuid,
    guests: &[(Uuid, String)],
) {
    kill(child);
    *child = spawn_agent(&files.config_path, Some(point));
    let list: Vec<(Uuid, &str)> = guests.iter().map(|(g, n)| (*g, n.as_str())).collect();
    hub.put_desired(host, &desired(sim, &list, "running")).await;
    assert_tripped(child, &files.config_path, point).await;
    *child = spawn_agent(&files.config_path, None);
    let names: Vec<String> = guests.iter().map(|(_, n)| n.clone()).collect();
    converged(sim, &files.config_path, &names, point).await;
}

/// Waits until every guest of `guests` exists exactly once in Proxmox, runs,
/// and no other guest exists.
/// On failure it shows the end of the agent's log.
async fn converged(sim: &bosun_pvesim::SimHandle, config: &Path, names: &[String], point: &str) {
    let mut expected: Vec<String> = names.to_vec();
    expected.sort();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let ids = sim.guest_ids();
        let mut seen: Vec<String> = ids
            .iter()
            .filter_map(|v| {
                sim.guest_config(*v)
                    .and_then(|c| c.get("hostname").cloned())
            })
            .collect();
        seen.sort();
        let running = ids.iter().all(|v| sim.guest_running(*v) == Some(true));
        let unlocked = ids.iter().all(|v| {
            sim.guest_config(*v)
                .is_some_and(|c| !c.contains_key("lock"))
        });
        if seen == expected && running && unlocked && ids.len() == expected.len() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{point}: not converged: guests {ids:?} named {seen:?}, want {expected:?}; the agent's log ends:\n{}",
            log_tail(config, 80)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const PROVISION_POINTS: &[&str] = &[
    "provision.next_id.intent",
    "provision.next_id.done",
    "provision.restore.intent",
    "provision.restore.sent",
    "provision.restore.done",
    "provision.read_config.intent",
    "provision.read_config.done",
    "provision.reset_identity.intent",
    "provision.reset_identity.done",
    "provision.guard_net.intent",
    "provision.guard_net.done",
    "provision.read_firewall.intent",
    "provision.read_firewall.done",
    "provision.guard_firewall.intent",
    "provision.guard_firewall.done",
    "provision.size.intent",
    "provision.size.done",
    "provision.resize_rootfs.intent",
    "provision.resize_rootfs.sent",
    "provision.resize_rootfs.done",
    "provision.start.intent",
    "provision.start.sent",
    "provision.start.done",
];

pub(crate) const RESTORE_POINTS: &[&str] = &[
    "restore_job.accepted.intent",
    "restore_job.accepted.done",
    "restore_job.stop.intent",
    "restore_job.stop.sent",
    "restore_job.stop.done",
    "restore_job.check_bootstrap.intent",
    "restore_job.check_bootstrap.done",
    "restore_job.restore_overwrite.intent",
    "restore_job.restore_overwrite.sent",
    "restore_job.restore_overwrite.done",
    "restore_job.start.intent",
    "restore_job.start.sent",
    "restore_job.start.done",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_provision_step_converges_without_duplicates() {
    let (sim, hub, files) = enrolled_stack().await;
    let mut child = spawn_agent(&files.config_path, None);
    let host = host_id(&files.state_dir).await;
    let mut guests: Vec<(Uuid, String)> = Vec::new();
    for (i, point) in PROVISION_POINTS.iter().enumerate() {
        guests.push((Uuid::new_v4(), format!("guest{i}")));
        crash_at(point, &mut child, &sim, &hub, &files, host, &guests).await;
        journal_settles(&files.state_dir).await;
        assert_no_unfinished(&files.state_dir, point);
        // Provenance names each guest once.
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

async fn job_outcome(hub: &RealHub, host: Uuid, job: &str) -> Option<String> {
    let (_, jobs) = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}/jobs"), None)
        .await;
    jobs.as_array()?
        .iter()
        .find(|j| j["job_id"] == job)
        .and_then(|j| j["result"]["outcome"].as_str().map(str::to_owned))
}

async fn submit_job(hub: &RealHub, host: Uuid, key: &OperatorKey, doc: &Value) -> String {
    let bytes = serde_json::to_vec(doc).unwrap();
    let sig = key.sign(&bytes, "bosun-job@v1");
    let (status, body) = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/jobs"),
            Some(envelope(&bytes, &sig)),
        )
        .await;
    assert!((200..300).contains(&status), "{status} {body}");
    doc["job_id"].as_str().unwrap().to_owned()
}

async fn wait_job(hub: &RealHub, host: Uuid, job: &str, point: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(outcome) = job_outcome(hub, host, job).await {
            return outcome;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{point}: no job result"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Simulator, hub and an agent child process that trusts `op@example`, with one running
/// guest: what the job crash tests start from.
struct JobStack {
    sim: bosun_pvesim::SimHandle,
    hub: RealHub,
    files: AgentFiles,
    operator: OperatorKey,
    child: AgentChild,
    host: Uuid,
    guest: Uuid,
    vmid: u32,
}

impl JobStack {
    async fn start() -> Self {
        let (sim, hub, files) = enrolled_stack().await;
        let operator = files.trusted_operator();
        let child = spawn_agent(&files.config_path, None);
        let host = host_id(&files.state_dir).await;
        let guest = Uuid::new_v4();
        hub.put_desired(host, &desired(&sim, &[(guest, "customer")], "running"))
            .await;
        let names = vec!["customer".to_owned()];
        converged(&sim, &files.config_path, &names, "setup").await;
        let vmid = sim.guest_ids()[0];
        Self {
            sim,
            hub,
            files,
            operator,
            child,
            host,
            guest,
            vmid,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_restore_step_runs_the_job_once_and_converges() {
    let JobStack {
        sim,
        hub,
        files,
        operator,
        mut child,
        host,
        guest,
        vmid,
    } = JobStack::start().await;
    let backup = job_doc("force-backup", host, guest, vmid, json!({}), 1);
    let backup_id = submit_job(&hub, host, &operator, &backup).await;
    assert_eq!(
        wait_job(&hub, host, &backup_id, "backup").await,
        "succeeded"
    );
    let volid = sim
        .storage_volumes("local")
        .into_iter()
        .find(|v| v.contains(&format!("vzdump-lxc-{vmid}-")))
        .expect("the backup archive");

    for point in RESTORE_POINTS {
        kill(&mut child);
        child = spawn_agent(&files.config_path, Some(point));
        let doc = job_doc(
            "restore-now",
            host,
            guest,
            vmid,
            json!({ "backup": volid }),
            1,
        );
        let job = submit_job(&hub, host, &operator, &doc).await;
        assert_tripped(&mut child, &files.config_path, point).await;
        child = spawn_agent(&files.config_path, None);
        assert_eq!(
            wait_job(&hub, host, &job, point).await,
            "succeeded",
            "{point}"
        );
        converged(&sim, &files.config_path, &["customer".to_owned()], point).await;
        assert_eq!(
            sim.guest_ids(),
            vec![vmid],
            "{point}: the guest was replaced"
        );
        journal_settles(&files.state_dir).await;
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

/// The back half's journal steps: it runs after `start`, once the guest runs.
const BACK_HALF_POINTS: &[&str] = &[
    "provision.check_token.intent",
    "provision.check_token.done",
    "provision.push_bootstrap.intent",
    "provision.push_bootstrap.done",
    "provision.store_token.intent",
    "provision.store_token.done",
];

/// The token the bootstrap pushed into guest `vmid` carries belongs to `guest` in the
/// journal: the file and the token table agree.
fn assert_bootstrap_token(
    state_dir: &Path,
    helper: &agent_support::fake_helper::FakeHelper,
    vmid: u32,
    guest: Uuid,
    point: &str,
) {
    let doc = helper.read_bootstrap(vmid);
    let hash = bosun_agentd::ops::journal::TokenHash::of(&secrecy::SecretString::from(
        doc.local_api.token.expose().to_owned(),
    ));
    let owner = journal(state_dir).token_owner(&hash).unwrap();
    assert_eq!(
        owner.map(|o| o.guest_id),
        Some(guest.to_string()),
        "{point}: the pushed token is not the journal's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_back_half_step_converges_with_a_working_bootstrap() {
    let (sim, hub, files) = enrolled_stack().await;
    let helper = files.helper.clone();
    files.use_local_api(0, "");
    let mut child = spawn_agent(&files.config_path, None);
    let host = host_id(&files.state_dir).await;
    let mut guests: Vec<(Uuid, String)> = Vec::new();
    for (i, point) in BACK_HALF_POINTS.iter().enumerate() {
        guests.push((Uuid::new_v4(), format!("boot{i}")));
        crash_at(point, &mut child, &sim, &hub, &files, host, &guests).await;
        // Every guest ends up with one bootstrap whose token the journal knows.
        for (guest, _) in &guests {
            eventually(Duration::from_secs(60), "the guest holds a token", || {
                let dir = files.state_dir.clone();
                let guest = *guest;
                async move {
                    journal(&dir)
                        .token_of_guest(&guest.to_string())
                        .unwrap()
                        .is_some()
                }
            })
            .await;
            let vmid = journal(&files.state_dir)
                .token_of_guest(&guest.to_string())
                .unwrap()
                .unwrap()
                .vmid;
            assert_bootstrap_token(&files.state_dir, &helper, vmid, *guest, point);
        }
        journal_settles(&files.state_dir).await;
        assert_no_unfinished(&files.state_dir, point);
    }
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}

/// A job result not yet delivered when the agent dies stays in the journal's
/// outbox and goes out after the restart; the job itself does not run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_not_delivered_before_a_crash_is_sent_after_the_restart() {
    let JobStack {
        sim,
        hub,
        files,
        operator,
        mut child,
        host,
        guest,
        vmid,
    } = JobStack::start().await;

    kill(&mut child);
    child = spawn_agent(&files.config_path, Some("job.result.queued"));
    let backup = job_doc("force-backup", host, guest, vmid, json!({}), 1);
    let job = submit_job(&hub, host, &operator, &backup).await;
    assert_tripped(&mut child, &files.config_path, "job.result.queued").await;
    assert_eq!(
        job_outcome(&hub, host, &job).await,
        None,
        "the hub has no result yet"
    );
    let pending = journal(&files.state_dir).undelivered_job_results().unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].job_id, job);
    let dumps = |sim: &bosun_pvesim::SimHandle| {
        sim.requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/vzdump"))
            .count()
    };
    assert_eq!(dumps(&sim), 1, "the backup ran once before the crash");

    child = spawn_agent(&files.config_path, None);
    assert_eq!(
        wait_job(&hub, host, &job, "after restart").await,
        "succeeded"
    );
    eventually(Duration::from_secs(30), "the outbox empties", || {
        let dir = files.state_dir.clone();
        async move { journal(&dir).undelivered_job_results().unwrap().is_empty() }
    })
    .await;
    // The hub sends the unacknowledged job again; the journal refuses it as
    // already run, so it neither runs nor replaces the delivered result.
    eventually(Duration::from_secs(30), "the job is acknowledged", || {
        let hub = &hub;
        let job = job.clone();
        async move {
            let (_, jobs) = hub
                .admin(Method::GET, &format!("/v1/admin/hosts/{host}/jobs"), None)
                .await;
            jobs.as_array().is_some_and(|jobs| {
                jobs.iter()
                    .any(|j| j["job_id"] == job.as_str() && j["state"] != "queued")
            })
        }
    })
    .await;
    assert_eq!(dumps(&sim), 1, "the backup did not run twice");
    assert_eq!(
        job_outcome(&hub, host, &job).await.as_deref(),
        Some("succeeded")
    );
    let run = journal(&files.state_dir).job_run(&job).unwrap().unwrap();
    assert_eq!(
        run.outcome,
        Some(bosun_agentd::ops::journal::JobOutcome::Succeeded)
    );
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}

/// Item 11 of the soak: Proxmox carries out a provisioning restore but its answer is
/// lost, and the agent is killed while the restore task still runs (the guest holds
/// only `lock: create`, no tag yet). After the restart the agent waits for the restore,
/// recognises the guest as its own and finishes it: one guest, running, recorded —
/// never a half-built orphan next to a second copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_answer_lost_then_killed_mid_restore_leaves_no_orphan() {
    let mut config = bosun_pvesim::SimConfig::fast();
    // 4 s at the fast time scale: long enough to kill the agent mid-restore.
    config.durations.vzrestore = Duration::from_secs(400);
    let sim = start_sim(config).await;
    let hub = RealHub::start().await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
    let mut child = spawn_agent(&files.config_path, None);
    let host = host_id(&files.state_dir).await;
    sim.set_faults(bosun_pvesim::FaultConfig {
        endpoints: vec![bosun_pvesim::EndpointFault {
            method: Some("POST".to_owned()),
            path: "/nodes/{node}/lxc".to_owned(),
            drop_after_rate: 1.0,
            ..bosun_pvesim::EndpointFault::default()
        }],
        ..bosun_pvesim::FaultConfig::default()
    });
    let guest = Uuid::new_v4();
    hub.put_desired(host, &desired(&sim, &[(guest, "lost-answer")], "running"))
        .await;
    eventually(
        Duration::from_secs(30),
        "a restore whose answer was dropped",
        || async {
            sim.requests()
                .iter()
                .any(|r| r.method == "POST" && r.path == "/nodes/pve/lxc" && r.status == 0)
        },
    )
    .await;
    sim.set_faults(bosun_pvesim::FaultConfig::default());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ids = sim.guest_ids();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let vmid = ids[0];
    assert_eq!(
        sim.guest_config(vmid).and_then(|c| c.get("lock").cloned()),
        Some("create".to_owned()),
        "the restore still runs when the agent is killed"
    );
    kill(&mut child);
    child = spawn_agent(&files.config_path, None);
    converged(
        &sim,
        &files.config_path,
        &["lost-answer".to_owned()],
        "restore answer lost",
    )
    .await;
    assert_eq!(
        sim.guest_ids(),
        [vmid],
        "the first restore's guest was kept"
    );
    let creates = sim
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/nodes/pve/lxc")
        .count();
    assert_eq!(creates, 1, "no second restore");
    // The guest runs before the agent journals its last step: let it finish first.
    journal_settles(&files.state_dir).await;
    kill(&mut child);
    let rows = journal(&files.state_dir).all_provenance().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].vmid(), vmid);
    assert_eq!(rows[0].guest_id(), Some(guest.to_string().as_str()));
    assert_no_unfinished(&files.state_dir, "restore answer lost");
    hub.stop().await;
    sim.shutdown().await;
}

const DR_POINTS: &[&str] = &[
    "dr_restore.choose_source.intent",
    "dr_restore.choose_source.done",
    "dr_restore.check_bootstrap.intent",
    "dr_restore.check_bootstrap.done",
    "dr_restore.restore.intent",
    "dr_restore.restore.sent",
    "dr_restore.restore.done",
    "dr_restore.read_config.intent",
    "dr_restore.read_config.done",
    "dr_restore.reset_identity.intent",
    "dr_restore.reset_identity.done",
    "dr_restore.read_firewall.intent",
    "dr_restore.read_firewall.done",
    "dr_restore.guard_firewall.intent",
    "dr_restore.guard_firewall.done",
    "dr_restore.size.intent",
    "dr_restore.size.done",
    "dr_restore.start.intent",
    "dr_restore.start.sent",
    "dr_restore.start.done",
];

/// A guest destroyed behind the agent's back is restored by DR; the agent is killed at each
/// DR step in turn, started again, and every time the guest ends up back exactly once, at
/// its vmid, with the data of its backup, no operation left open and no lost note left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_dr_step_the_lost_guest_comes_back_once() {
    let JobStack {
        sim,
        hub,
        files,
        operator,
        mut child,
        host,
        guest,
        vmid,
    } = JobStack::start().await;
    let out = sim
        .cli(
            "pct",
            &["push", &vmid.to_string(), "/tmp/m", "/root/marker"],
            Some(b"kept"),
        )
        .await
        .unwrap();
    assert_eq!(out.exit, 0, "{out:?}");
    let doc = job_doc("force-backup", host, guest, vmid, json!({}), 1);
    let job = submit_job(&hub, host, &operator, &doc).await;
    assert_eq!(wait_job(&hub, host, &job, "backup").await, "succeeded");
    let names = vec!["customer".to_owned()];
    for point in DR_POINTS {
        kill(&mut child);
        child = spawn_agent(&files.config_path, Some(point));
        destroy_behind_its_back(&sim, vmid).await;
        assert_tripped(&mut child, &files.config_path, point).await;
        child = spawn_agent(&files.config_path, None);
        converged(&sim, &files.config_path, &names, point).await;
        assert_eq!(sim.guest_ids(), vec![vmid], "{point}: back at its vmid");
        let marker = sim.guest_file(vmid, "/root/marker").map(|f| f.content);
        assert_eq!(marker.as_deref(), Some(&b"kept"[..]), "{point}");
        // Settled: nothing open, the lost note cleared, still the one guest, running.
        let dir = files.state_dir.clone();
        eventually(Duration::from_secs(30), point, || {
            let dir = dir.clone();
            let sim = sim.clone();
            async move {
                let journal = journal(&dir);
                journal.unfinished_operations().unwrap().is_empty()
                    && journal.lost_guests().unwrap().is_empty()
                    && sim.guest_ids() == vec![vmid]
                    && sim.guest_running(vmid) == Some(true)
            }
        })
        .await;
    }
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}

/// The steps only a DR whose source may still run takes (decision 0027), and the restore
/// and final start around them.
const DR_RESET_POINTS: &[&str] = &[
    "dr_restore.next_id.done",
    "dr_restore.restore.sent",
    "dr_restore.reset_identity.done",
    "dr_restore.start_isolated.intent",
    "dr_restore.start_isolated.sent",
    "dr_restore.start_isolated.done",
    "dr_restore.reset_guest_identity.intent",
    "dr_restore.reset_guest_identity.done",
    "dr_restore.shutdown_isolated.intent",
    "dr_restore.shutdown_isolated.sent",
    "dr_restore.shutdown_isolated.done",
    "dr_restore.links_up.intent",
    "dr_restore.links_up.done",
    "dr_restore.start.sent",
];

/// The guest's vmid is taken from it behind the agent's back (the container there loses the
/// agent's identity and keeps running: the source may still run), and the agent is killed at
/// each step of the DR that follows, started again, and every time the guest ends up back
/// exactly once, at a fresh vmid, running connected, with the data of its backup and none of
/// the identity it shares with its source; nothing is left open or half-built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_step_of_a_dr_whose_source_may_still_run_the_guest_comes_back_once() {
    use bosun_pve::{ConfigUpdate, Pve, Vmid};
    let JobStack {
        sim,
        hub,
        files,
        operator,
        mut child,
        host,
        guest,
        vmid,
    } = JobStack::start().await;
    files.use_sim_pct(&sim);
    for (path, text) in [
        ("/root/marker", &b"kept"[..]),
        ("/etc/machine-id", b"5f0c1e9a2b7d4c3e8a6f1b0d2c4e6a8b\n"),
        ("/etc/ssh/ssh_host_ed25519_key", b"private\n"),
    ] {
        let out = sim
            .cli(
                "pct",
                &["push", &vmid.to_string(), "/tmp/m", path],
                Some(text),
            )
            .await
            .unwrap();
        assert_eq!(out.exit, 0, "{out:?}");
    }
    let doc = job_doc("force-backup", host, guest, vmid, json!({}), 1);
    let job = submit_job(&hub, host, &operator, &doc).await;
    assert_eq!(wait_job(&hub, host, &job, "backup").await, "succeeded");
    let root = root_client(&sim);
    let mut current = vmid;
    for (round, point) in DR_RESET_POINTS.iter().enumerate() {
        kill(&mut child);
        child = spawn_agent(&files.config_path, Some(point));
        let disown = ConfigUpdate {
            delete: vec!["tags".to_owned()],
            ..ConfigUpdate::default()
        };
        root.update_ct_config(Vmid::new(current).unwrap(), &disown)
            .await
            .unwrap();
        assert_tripped(&mut child, &files.config_path, point).await;
        child = spawn_agent(&files.config_path, None);
        let dir = files.state_dir.clone();
        let guest_id = guest.to_string();
        let back = || {
            let (dir, sim, guest_id) = (dir.clone(), sim.clone(), guest_id.clone());
            async move {
                let journal = journal(&dir);
                if !journal.unfinished_operations().unwrap().is_empty()
                    || !journal.lost_guests().unwrap().is_empty()
                {
                    return None;
                }
                let at = journal
                    .all_provenance()
                    .unwrap()
                    .into_iter()
                    .find(|p| p.guest_id() == Some(guest_id.as_str()))?
                    .vmid();
                let config = sim.guest_config(at)?;
                let connected = !config.get("net0")?.contains("link_down");
                (sim.guest_running(at) == Some(true) && connected).then_some(at)
            }
        };
        eventually(Duration::from_secs(90), point, || async {
            back().await.is_some()
        })
        .await;
        let at = back().await.unwrap();
        assert_ne!(at, current, "{point}: back at a fresh vmid");
        // Every container so far: the original, disowned each round, and the guest now.
        assert_eq!(
            sim.guest_ids().len(),
            round + 2,
            "{point}: {:?}",
            sim.guest_ids()
        );
        let file = |path: &str| sim.guest_file(at, path).map(|f| f.content);
        assert_eq!(
            file("/root/marker").as_deref(),
            Some(&b"kept"[..]),
            "{point}"
        );
        assert_eq!(
            file("/etc/machine-id").as_deref(),
            Some(&b""[..]),
            "{point}"
        );
        assert_eq!(file("/etc/ssh/ssh_host_ed25519_key"), None, "{point}");
        assert_eq!(
            sim.guest_running(current),
            Some(true),
            "{point}: the source runs on"
        );
        current = at;
    }
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}
