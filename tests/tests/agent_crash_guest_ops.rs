//! Crash safety of what a guest's controller starts through the local API — snapshot,
//! rollback, backup — killed at every journal step (DESIGN §9: one protocol, a
//! kill-at-every-step test for every journaled operation).
//!
//! The agent runs as a child process with a failpoint armed at one step; the controller's
//! request trips it; the harness restarts the agent and asserts that the operation was
//! closed with what really happened in Proxmox (`done` only where the snapshot, rollback or
//! archive exists), that nothing is left `running` or locked, and that the guest runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::path::Path;
use std::time::Duration;

use agent_support::crash::*;
use agent_support::fake_helper::FakeHelper;
use agent_support::*;
use bosun_proto::bootstrap::Bootstrap;
use serde_json::{Value, json};
use uuid::Uuid;

const SNAPSHOT_POINTS: &[(&str, &str)] = &[
    ("localapi.snapshot.snapshot.intent", "failed"),
    ("localapi.snapshot.snapshot.sent", "done"),
    ("localapi.snapshot.snapshot.done", "done"),
];

const ROLLBACK_POINTS: &[(&str, &str)] = &[
    ("localapi.rollback.check_bootstrap.intent", "failed"),
    ("localapi.rollback.check_bootstrap.done", "failed"),
    ("localapi.rollback.rollback.intent", "failed"),
    ("localapi.rollback.rollback.sent", "done"),
    ("localapi.rollback.rollback.done", "done"),
];

const BACKUP_POINTS: &[(&str, &str)] = &[
    ("backup.vzdump.intent", "failed"),
    ("backup.vzdump.sent", "done"),
    ("backup.vzdump.done", "done"),
];

/// A simulator, a hub, and an agent child process with the helper and the local API on a
/// fixed loopback port (so the guest's bootstrap stays valid across restarts), with one
/// running guest whose bootstrap was pushed.
struct GuestStack {
    sim: bosun_pvesim::SimHandle,
    hub: RealHub,
    files: AgentFiles,
    _helper: FakeHelper,
    child: AgentChild,
    vmid: u32,
    boot: Bootstrap,
}

impl GuestStack {
    async fn start() -> Self {
        let (sim, hub, files) = enrolled_stack().await;
        let helper = files.helper.clone();
        files.use_local_api(fixed_port(), "[backup]\nstorage = \"local\"\n");
        let child = spawn_agent(&files.config_path, None);
        let host = host_id(&files.state_dir).await;
        let guest = Uuid::new_v4();
        hub.put_desired(host, &desired(&sim, &[(guest, "customer")], "running"))
            .await;
        eventually(Duration::from_secs(60), "the bootstrap is pushed", || {
            let ids = sim.guest_ids();
            let helper = &helper;
            async move { ids.len() == 1 && helper.bootstrap_path(ids[0]).exists() }
        })
        .await;
        // The provisioning ends once the token is journaled: a kill before that leaves the
        // guest tokenless, and the next start hands it a new token the file here lacks.
        journal_settles(&files.state_dir).await;
        let vmid = sim.guest_ids()[0];
        let boot = helper.read_bootstrap(vmid);
        Self {
            sim,
            hub,
            files,
            _helper: helper,
            child,
            vmid,
            boot,
        }
    }

    /// The controller's request; `None` when the connection died with the agent.
    async fn call(&self, path: &str, body: Value) -> Option<(u16, Value)> {
        let tls = bosun_pin::client_config(&self.boot.local_api.fingerprint).unwrap();
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let answer = client
            .post(format!("{}{path}", self.boot.local_api.url))
            .bearer_auth(self.boot.local_api.token.expose())
            .json(&body)
            .send()
            .await
            .ok()?;
        let status = answer.status().as_u16();
        Some((status, answer.json().await.unwrap_or(Value::Null)))
    }

    /// Restarts the agent with `point` armed, sends the request that trips it, restarts the
    /// agent without it and waits until the journal settles and the guest runs unlocked.
    async fn crash_at(&mut self, point: &str, path: &str, body: Value) {
        kill(&mut self.child);
        self.child = spawn_agent(&self.files.config_path, Some(point));
        self.wait_local_api(point).await;
        let answer = self.call(path, body).await;
        eprintln!("{point}: the request was answered {answer:?}");
        assert_tripped(&mut self.child, &self.files.config_path, point).await;
        self.child = spawn_agent(&self.files.config_path, None);
        journal_settles(&self.files.state_dir).await;
        assert_no_unfinished(&self.files.state_dir, point);
        let (sim, vmid) = (&self.sim, self.vmid);
        eventually(
            Duration::from_secs(60),
            "the guest runs unlocked",
            || async move {
                sim.guest_running(vmid) == Some(true)
                    && sim
                        .guest_config(vmid)
                        .is_some_and(|c| !c.contains_key("lock"))
            },
        )
        .await;
        assert_eq!(
            self.sim.guest_ids(),
            vec![self.vmid],
            "{point}: guests changed"
        );
    }

    async fn wait_local_api(&self, point: &str) {
        let url = self
            .boot
            .local_api
            .url
            .trim_start_matches("https://")
            .to_owned();
        eventually(Duration::from_secs(30), point, || {
            let url = url.clone();
            async move { tokio::net::TcpStream::connect(url).await.is_ok() }
        })
        .await;
    }

    async fn stop(mut self) {
        kill(&mut self.child);
        self.hub.stop().await;
        self.sim.shutdown().await;
    }
}

/// `(status, error)` of every operation of `kind`, oldest first.
fn operations(state_dir: &Path, kind: &str) -> Vec<(String, Option<String>)> {
    let db = rusqlite::Connection::open(state_dir.join("journal.sqlite")).unwrap();
    let mut statement = db
        .prepare("SELECT status, error FROM operations WHERE kind = ?1 ORDER BY started_ms")
        .unwrap();
    statement
        .query_map([kind], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The status the newest operation of `kind` ended with.
fn last_status(state_dir: &Path, kind: &str, point: &str) -> String {
    let all = operations(state_dir, kind);
    let (status, error) = all.last().unwrap_or_else(|| panic!("{point}: no {kind}"));
    eprintln!("{point}: {kind} ended {status} ({error:?})");
    status.clone()
}

fn api_snapshots(sim: &bosun_pvesim::SimHandle, vmid: u32) -> usize {
    sim.requests()
        .iter()
        .filter(|r| {
            r.method == "POST"
                && r.path == format!("/nodes/pve/lxc/{vmid}/snapshot")
                && r.status == 200
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_snapshot_step_closes_it_with_what_proxmox_did() {
    let mut stack = GuestStack::start().await;
    for (point, want) in SNAPSHOT_POINTS {
        let before = api_snapshots(&stack.sim, stack.vmid);
        stack.crash_at(point, "/v1/snapshot", json!({})).await;
        let taken = api_snapshots(&stack.sim, stack.vmid) - before;
        let status = last_status(&stack.files.state_dir, "localapi.snapshot", point);
        assert_eq!(&status, want, "{point}");
        assert_eq!(
            taken,
            usize::from(status == "done"),
            "{point}: a snapshot exists exactly when the operation is done"
        );
    }
    let done = operations(&stack.files.state_dir, "localapi.snapshot")
        .iter()
        .filter(|(s, _)| s == "done")
        .count();
    let (status, listed) = stack.call_list().await;
    assert_eq!(status, 200);
    assert_eq!(listed, done, "one snapshot per done operation");
    stack.stop().await;
}

impl GuestStack {
    /// The guest's snapshots taken through the API, as its controller lists them.
    async fn call_list(&self) -> (u16, usize) {
        let tls = bosun_pin::client_config(&self.boot.local_api.fingerprint).unwrap();
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .build()
            .unwrap();
        let answer = client
            .get(format!("{}/v1/snapshot", self.boot.local_api.url))
            .bearer_auth(self.boot.local_api.token.expose())
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        let body: Value = answer.json().await.unwrap();
        let count = body["snapshots"].as_array().map_or(0, |s| {
            s.iter().filter(|s| s["taken_through_api"] == true).count()
        });
        (status, count)
    }

    /// Takes a snapshot through the API with the agent running normally; gives its name.
    async fn snapshot(&self) -> String {
        let (status, body) = self.call("/v1/snapshot", json!({})).await.unwrap();
        assert_eq!(status, 201, "{body}");
        body["name"].as_str().unwrap().to_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_rollback_step_closes_it_with_what_proxmox_did() {
    let mut stack = GuestStack::start().await;
    // A snapshot taken in the second its token was minted would carry a bootstrap the
    // rollback must treat as stale (and revoke): take it a second later.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let snapshot = stack.snapshot().await;
    let rollbacks = |sim: &bosun_pvesim::SimHandle, vmid: u32| {
        sim.requests()
            .iter()
            .filter(|r| {
                r.method == "POST"
                    && r.path
                        .starts_with(&format!("/nodes/pve/lxc/{vmid}/snapshot/"))
                    && r.path.ends_with("/rollback")
            })
            .count()
    };
    for (point, want) in ROLLBACK_POINTS {
        let before = rollbacks(&stack.sim, stack.vmid);
        stack
            .crash_at(point, "/v1/rollback", json!({ "snapshot": snapshot }))
            .await;
        let sent = rollbacks(&stack.sim, stack.vmid) - before;
        let status = last_status(&stack.files.state_dir, "localapi.rollback", point);
        assert_eq!(&status, want, "{point}");
        assert_eq!(
            sent,
            usize::from(status == "done"),
            "{point}: a rollback reached Proxmox exactly when the operation is done"
        );
    }
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_backup_step_closes_it_with_what_proxmox_did() {
    let mut stack = GuestStack::start().await;
    let archives = |sim: &bosun_pvesim::SimHandle, vmid: u32| {
        sim.storage_volumes("local")
            .into_iter()
            .filter(|v| v.contains(&format!("vzdump-lxc-{vmid}-")))
            .count()
    };
    for (point, want) in BACKUP_POINTS {
        let before = archives(&stack.sim, stack.vmid);
        stack
            .crash_at(point, "/v1/backup", json!({ "quiesced": false }))
            .await;
        let made = archives(&stack.sim, stack.vmid) - before;
        let status = last_status(&stack.files.state_dir, "backup", point);
        assert_eq!(&status, want, "{point}");
        assert_eq!(
            made,
            usize::from(status == "done"),
            "{point}: an archive exists exactly when the backup is done"
        );
    }
    stack.stop().await;
}

/// The window no failpoint reaches: Proxmox took the snapshot but the agent died before
/// the UPID reached the journal (the step still says `intent`). At the next start the step
/// is looked up in the node's task list, found, and the operation closes `done` — not
/// `failed` for a snapshot that exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_sent_but_not_journaled_is_found_in_the_task_list() {
    let mut stack = GuestStack::start().await;
    let point = "localapi.snapshot.snapshot.sent";
    kill(&mut stack.child);
    stack.child = spawn_agent(&stack.files.config_path, Some(point));
    stack.wait_local_api(point).await;
    let _ = stack.call("/v1/snapshot", json!({})).await;
    assert_tripped(&mut stack.child, &stack.files.config_path, point).await;
    // Forget the UPID, as if the kill came between the answer and its journal write.
    let db = rusqlite::Connection::open(stack.files.state_dir.join("journal.sqlite")).unwrap();
    let forgotten = db
        .execute(
            "UPDATE op_steps SET state = 'intent', upid = NULL, sent_ms = NULL
             WHERE name = 'snapshot' AND state = 'sent'",
            [],
        )
        .unwrap();
    assert_eq!(forgotten, 1);
    drop(db);
    stack.child = spawn_agent(&stack.files.config_path, None);
    journal_settles(&stack.files.state_dir).await;
    let all = operations(&stack.files.state_dir, "localapi.snapshot");
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].0, "done", "{:?}", all[0].1);
    let listed = stack
        .sim
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path == "/nodes/pve/tasks")
        .count();
    assert!(listed >= 1, "the agent looked in the task list");
    stack.stop().await;
}

/// A snapshot Proxmox takes but whose answer is lost (the connection drops after the task
/// started) is looked up in the task list at once: the controller gets its snapshot (201),
/// not a 502 for a snapshot that exists, and nothing is sent twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_whose_answer_was_lost_is_found_and_answered() {
    let stack = GuestStack::start().await;
    let path = format!("/nodes/{{node}}/lxc/{}/snapshot", stack.vmid);
    stack.sim.set_faults(bosun_pvesim::FaultConfig {
        endpoints: vec![bosun_pvesim::EndpointFault {
            method: Some("POST".to_owned()),
            path: path.replace(&stack.vmid.to_string(), "{vmid}"),
            drop_after_rate: 1.0,
            ..bosun_pvesim::EndpointFault::default()
        }],
        ..bosun_pvesim::FaultConfig::default()
    });
    let (status, body) = stack.call("/v1/snapshot", json!({})).await.unwrap();
    assert_eq!(status, 201, "{body}");
    let sent = stack
        .sim
        .requests()
        .iter()
        .filter(|r| {
            r.method == "POST" && r.path == format!("/nodes/pve/lxc/{}/snapshot", stack.vmid)
        })
        .map(|r| r.status)
        .collect::<Vec<_>>();
    assert_eq!(sent, [0], "one snapshot call, its answer dropped");
    let all = operations(&stack.files.state_dir, "localapi.snapshot");
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].0, "done", "{:?}", all[0].1);
    stack.stop().await;
}
