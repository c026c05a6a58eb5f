//! The controller inside guests, end to end (DESIGN §5, §11): the real hub, the agent as a
//! child process (so it can be killed at every journal step), the simulator, and
//! `bosun-guest`'s controller loop standing in for the controller in the guest.
//!
//! - A signed `controller-update` job snapshots the guest, announces the digest over the
//!   local API, waits for the controller's healthy report and commits it; an activation that
//!   fails is rolled back to that snapshot and raises `controller_rolled_back` at the hub.
//! - The hub alone cannot choose a digest: desired state has no `controller_version` (the
//!   hub refuses one), and a job signed by a key outside `allowed_signers` is rejected.
//! - A controller gone silent is restarted in place through the helper (never a destroy), a
//!   bounded number of times, then `broken` with an alert.
//! - A controller silent through a rollout's window (what a connection flood produces) never
//!   costs the customer's data: the digest is reverted and the controller restarted in place,
//!   `broken` and alerted, but the guest is not rolled back to the rollout's snapshot.
//! - Killed at every step of a rollout, the agent converges: committed, or rolled back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::path::PathBuf;
use std::time::Duration;

use agent_support::crash::*;
use agent_support::fake_helper::FakeHelper;
use agent_support::jobs::{job_result, submit};
use agent_support::signing::OperatorKey;
use agent_support::*;
use bosun_guest::{ControllerConfig, ControllerLoop, LocalApiClient};
use bosun_proto::bootstrap::Bootstrap;
use reqwest::Method;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const CONFIG: &str = "[backup]\nstorage = \"local\"\n[controller]\nhealth_window_ms = 15000\nreport_interval_ms = 1000\nheal_after_ms = 2500\nmax_restarts = 2\n";

/// [`CONFIG`] with a 4 s health window, for rollouts no controller ever answers: each waits
/// the whole window, and no report has to fit in it.
const SILENT_CONFIG: &str = "[backup]\nstorage = \"local\"\n[controller]\nhealth_window_ms = 4000\nreport_interval_ms = 1000\nheal_after_ms = 2500\nmax_restarts = 2\n";

/// A digest the test controller switches to.
fn good(n: u8) -> String {
    format!("sha256:{}", format!("{n:02x}").repeat(32))
}

/// A digest whose activation fails in the test controller.
fn bad(n: u8) -> String {
    format!("sha256:bad{n:02x}{}", "0".repeat(59))
}

/// A digest whose activation hangs in the test controller: it never reports on it.
fn mute(n: u8) -> String {
    format!("sha256:dead{n:02x}{}", "0".repeat(58))
}

/// The controller in the guest: `bosun-guest`'s loop, switching with a script that refuses
/// the `bad…` digests and hangs on the `dead…` ones, its state file in `dir`.
struct Controller {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    state: PathBuf,
}

impl Controller {
    fn start(boot: &Bootstrap, dir: &std::path::Path) -> Self {
        let client = LocalApiClient::from_bootstrap(boot).unwrap();
        let state = dir.join("controller.digest");
        let script = "case \"$1\" in sha256:bad*) echo 'image failed its start-up check' >&2; exit 1;; sha256:dead*) exec sleep 120;; esac";
        let config = ControllerConfig {
            activate: vec!["sh".into(), "-c".into(), script.into(), "activate".into()],
            health: None,
            state_file: state.clone(),
            placed_file: None,
            // Longer than the health window: a hung activation is silence, not a verdict.
            command_timeout: Duration::from_secs(60),
        };
        let stop = CancellationToken::new();
        let looped = ControllerLoop::new(client, config);
        let token = stop.clone();
        let task = tokio::spawn(async move { looped.run(&token).await });
        Self { stop, task, state }
    }

    /// Crashes it: no more reports.
    async fn crash(self) -> PathBuf {
        self.stop.cancel();
        let _ = self.task.await;
        self.state
    }

    /// Kills it, mid-activation if need be (its hook's process dies with it).
    async fn kill(self) {
        self.stop.cancel();
        self.task.abort();
        let _ = self.task.await;
    }

    fn running(&self) -> Option<String> {
        std::fs::read_to_string(&self.state)
            .ok()
            .map(|s| s.trim().to_owned())
    }
}

struct Stack {
    sim: bosun_pvesim::SimHandle,
    hub: RealHub,
    files: AgentFiles,
    helper: FakeHelper,
    child: AgentChild,
    host: Uuid,
    guest: Uuid,
    vmid: u32,
    boot: Bootstrap,
    operator: OperatorKey,
}

impl Stack {
    async fn start() -> Self {
        Self::start_with(CONFIG).await
    }

    /// [`Stack::start`] with the agent's `config` lines.
    async fn start_with(config: &str) -> Self {
        let (sim, hub, files) = enrolled_stack().await;
        let operator = files.trusted_operator();
        let helper = files.helper.clone();
        files.use_local_api(fixed_port(), config);
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
        journal_settles(&files.state_dir).await;
        let vmid = sim.guest_ids()[0];
        let boot = helper.read_bootstrap(vmid);
        // A snapshot taken in the second the token was minted would hold a bootstrap a
        // rollback must treat as stale: the first rollout starts a second later.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        Self {
            sim,
            hub,
            files,
            helper,
            child,
            host,
            guest,
            vmid,
            boot,
            operator,
        }
    }

    /// Signs (with `key`) and submits a `controller-update` for the guest; gives the job id.
    async fn update(&self, key: &OperatorKey, digest: &str) -> Uuid {
        let (guest, vmid, param) = (
            self.guest.to_string(),
            self.vmid.to_string(),
            format!("digest={digest}"),
        );
        let host = self.host.to_string();
        submit(
            &self.hub,
            key,
            self.files.dir.path(),
            &[
                "--kind",
                "controller-update",
                "--host",
                &host,
                "--guest",
                &guest,
                "--vmid",
                &vmid,
                "--param",
                &param,
            ],
        )
        .await
    }

    /// What the local API tells the guest's controller.
    async fn desired(&self) -> Value {
        let tls = bosun_pin::client_config(&self.boot.local_api.fingerprint).unwrap();
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .build()
            .unwrap();
        client
            .get(format!("{}/v1/controller", self.boot.local_api.url))
            .bearer_auth(self.boot.local_api.token.expose())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    fn rollbacks(&self) -> Vec<String> {
        self.sim
            .requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/rollback") && r.status == 200)
            .map(|r| r.path.clone())
            .collect()
    }

    async fn alerts(&self, kind: &str) -> Vec<Value> {
        let (_, alerts) = self.hub.admin(Method::GET, "/v1/admin/alerts", None).await;
        // Oldest first, as the callers read them (the API lists newest first).
        alerts
            .as_array()
            .into_iter()
            .flatten()
            .rev()
            .filter(|a| a["kind"] == kind)
            .cloned()
            .collect()
    }

    async fn wait_alert(&self, kind: &str) -> Value {
        for _ in 0..300 {
            if let Some(alert) = self.alerts(kind).await.pop() {
                return alert;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no {kind} alert at the hub");
    }

    /// `(digest, state, restarts)` the journal holds for the guest's controller.
    fn record(&self) -> Option<(Option<String>, String, u32)> {
        let db = rusqlite::Connection::open(self.files.state_dir.join("journal.sqlite")).unwrap();
        db.query_row(
            "SELECT digest, state, restarts FROM controllers WHERE guest_id = ?1",
            [self.guest.to_string()],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .ok()
    }

    async fn stop(mut self) {
        kill(&mut self.child);
        self.hub.stop().await;
        self.sim.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_digest_is_committed_when_healthy_and_rolled_back_when_not() {
    let stack = Stack::start().await;
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(stack.desired().await["status"], "unmanaged");
    let controller = Controller::start(&stack.boot, dir.path());

    // A healthy digest: snapshot first, then committed.
    let first = good(1);
    let job = stack.update(&stack.operator, &first).await;
    let result = job_result(&stack.hub, stack.host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(result["output"]["digest"], first.as_str());
    let snapshot = result["output"]["snapshot"].as_str().unwrap().to_owned();
    assert!(snapshot.starts_with("bosun-ctl-"), "{snapshot}");
    assert!(stack.sim.snapshot_names(stack.vmid).contains(&snapshot));
    assert_eq!(controller.running().as_deref(), Some(first.as_str()));
    let desired = stack.desired().await;
    assert_eq!(desired["digest"], first.as_str());
    assert_eq!(desired["status"], "running");
    assert!(stack.rollbacks().is_empty());
    // The report names the digest each guest runs, and the host's when all run one.
    eventually(Duration::from_secs(30), "the digest reported", || async {
        let report = stack.hub.host(stack.host).await["last_report"].clone();
        report["guests"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g["controller_digest"] == first.as_str()))
            && report["versions"]["controller"] == first.as_str()
    })
    .await;

    // The hub alone cannot choose code for the guest: desired state has no
    // controller_version (refused), and a job signed by a key the host does not trust is
    // rejected.
    let mut unsigned = agent_support::desired(&stack.sim, &[(stack.guest, "customer")], "running");
    unsigned["controller_version"] = Value::String("evil".into());
    let (status, _) = stack
        .hub
        .admin(
            Method::PUT,
            &format!("/v1/admin/hosts/{}/desired", stack.host),
            Some(unsigned),
        )
        .await;
    assert_eq!(
        status, 400,
        "a controller version is no desired-state field"
    );
    let mallory = OperatorKey::new("mallory@example");
    let forged = stack.update(&mallory, &good(0xee)).await;
    let refused = job_result(&stack.hub, stack.host, forged).await;
    assert_eq!(refused["outcome"], "rejected", "{refused}");
    assert_eq!(stack.desired().await["digest"], first.as_str());

    // An image that fails its activation: reported unhealthy, rolled back to the snapshot
    // this rollout took, the previous digest served again, and the hub alerted.
    let second = bad(2);
    let job = stack.update(&stack.operator, &second).await;
    let result = job_result(&stack.hub, stack.host, job).await;
    assert_eq!(result["outcome"], "failed", "{result}");
    let detail = result["detail"].as_str().unwrap();
    assert!(detail.starts_with("rolled_back:"), "{detail}");
    assert!(
        detail.contains("activate hook of app controller exited"),
        "{detail}"
    );
    let rollbacks = stack.rollbacks();
    assert_eq!(rollbacks.len(), 1, "{rollbacks:?}");
    assert!(
        !rollbacks[0].contains(&snapshot),
        "the new rollout's own snapshot, not the first"
    );
    assert!(
        rollbacks[0].contains("/snapshot/bosun-ctl-"),
        "{rollbacks:?}"
    );
    let desired = stack.desired().await;
    assert_eq!(desired["digest"], first.as_str());
    assert_eq!(desired["status"], "rolled_back");
    let alert = stack.wait_alert("controller_rolled_back").await;
    let message = alert["message"].as_str().unwrap();
    assert!(
        message.contains(&second) && message.contains("rolled back"),
        "{message}"
    );
    assert!(destructive(&stack.sim).is_empty(), "no guest was destroyed");
    assert_eq!(stack.sim.guest_ids(), vec![stack.vmid]);
    controller.crash().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_controller_is_restarted_in_place_then_broken() {
    let stack = Stack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let controller = Controller::start(&stack.boot, dir.path());
    let job = stack.update(&stack.operator, &good(3)).await;
    let result = job_result(&stack.hub, stack.host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");

    // It crashes: the agent restarts it in place; the test, as the guest's systemd,
    // starts it again and the restart count clears once it reports healthy.
    controller.crash().await;
    let helper = stack.helper.clone();
    eventually(Duration::from_secs(30), "an in-place restart", || {
        let helper = helper.clone();
        async move { !helper.controller_restarts().is_empty() }
    })
    .await;
    assert_eq!(stack.helper.controller_restarts(), vec![stack.vmid]);
    let controller = Controller::start(&stack.boot, dir.path());
    eventually(Duration::from_secs(30), "healthy again", || async {
        stack
            .record()
            .is_some_and(|(_, state, restarts)| state == "running" && restarts == 0)
    })
    .await;

    // Silent for good: max_restarts (2) restarts, then broken and alerted; no destroy.
    controller.crash().await;
    let alert = stack.wait_alert("controller_broken").await;
    assert!(
        alert["message"]
            .as_str()
            .unwrap()
            .contains("in-place restarts"),
        "{alert}"
    );
    let (_, state, restarts) = stack.record().unwrap();
    assert_eq!((state.as_str(), restarts), ("broken", 2));
    assert_eq!(
        stack.helper.controller_restarts().len(),
        3,
        "1 healed + 2 before broken"
    );
    assert_eq!(stack.desired().await["status"], "broken");
    assert!(destructive(&stack.sim).is_empty(), "healing never destroys");
    assert_eq!(stack.sim.guest_ids(), vec![stack.vmid]);
    assert_eq!(stack.sim.guest_running(stack.vmid), Some(true));
    stack.stop().await;
}

/// What the customer wrote in the guest after the rollout's snapshot.
const CUSTOMER_DATA: &str = "/root/orders-after-the-snapshot";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_silent_through_its_rollout_is_never_rolled_back() {
    let stack = Stack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let controller = Controller::start(&stack.boot, dir.path());
    let first = good(4);
    let job = stack.update(&stack.operator, &first).await;
    let result = job_result(&stack.hub, stack.host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let snapshots_before = stack.sim.snapshot_names(stack.vmid);

    // The new controller never reports (as when a flood keeps it from the local API); the
    // customer keeps writing after the rollout's snapshot.
    let silent = mute(5);
    let job = stack.update(&stack.operator, &silent).await;
    let sim = &stack.sim;
    let vmid = stack.vmid;
    eventually(Duration::from_secs(30), "the rollout's snapshot", || {
        let before = snapshots_before.clone();
        async move { sim.snapshot_names(vmid).len() > before.len() }
    })
    .await;
    let snapshot = stack
        .sim
        .snapshot_names(stack.vmid)
        .into_iter()
        .find(|s| !snapshots_before.contains(s))
        .unwrap();
    write_in_guest(&stack.sim, stack.vmid, CUSTOMER_DATA, "order 1042").await;
    let result = job_result(&stack.hub, stack.host, job).await;

    // Silence is no verdict on the guest: no rollback reached Proxmox and the write is there.
    assert_eq!(result["outcome"], "failed", "{result}");
    let detail = result["detail"].as_str().unwrap();
    assert!(detail.starts_with("broken:"), "{detail}");
    assert_eq!(stack.rollbacks(), Vec::<String>::new(), "no rollback");
    let kept = stack.sim.guest_file(stack.vmid, CUSTOMER_DATA);
    assert_eq!(
        kept.map(|f| f.content),
        Some(b"order 1042".to_vec()),
        "the customer's write survives"
    );
    assert!(
        stack.sim.snapshot_names(stack.vmid).contains(&snapshot),
        "the snapshot is kept for the operator"
    );
    // The digest is reverted, the controller healed in place, the guest marked broken.
    let desired = stack.desired().await;
    assert_eq!(desired["digest"], first.as_str());
    assert_eq!(desired["status"], "broken");
    let (recorded, state, _) = stack.record().unwrap();
    assert_eq!(
        (recorded.as_deref(), state.as_str()),
        (Some(first.as_str()), "broken")
    );
    assert_eq!(stack.helper.controller_restarts(), vec![stack.vmid]);
    // The operator is told, and told the guest was not rolled back.
    let alert = stack.wait_alert("controller_broken").await;
    let message = alert["message"].as_str().unwrap();
    for part in [silent.as_str(), snapshot.as_str(), "not rolled back"] {
        assert!(message.contains(part), "`{part}` missing from: {message}");
    }
    assert!(stack.alerts("controller_rolled_back").await.is_empty());
    assert!(destructive(&stack.sim).is_empty(), "no guest was destroyed");
    assert_eq!(stack.sim.guest_running(stack.vmid), Some(true));
    controller.kill().await;
    stack.stop().await;
}

const COMMIT_POINTS: &[&str] = &[
    "controller_update_job.accepted.done",
    "controller_update_job.snapshot.intent",
    "controller_update_job.snapshot.sent",
    "controller_update_job.snapshot.done",
    "controller_update_job.announce.intent",
    "controller_update_job.announce.done",
    "controller_update_job.place.intent",
    "controller_update_job.place.done",
    "controller_update_job.await_health.intent",
    "controller_update_job.await_health.done",
    "controller_update_job.commit.intent",
    "controller_update_job.commit.done",
];

const ROLLBACK_POINTS: &[&str] = &[
    "controller_update_job.revert.intent",
    "controller_update_job.revert.done",
    "controller_update_job.check_bootstrap.intent",
    "controller_update_job.check_bootstrap.done",
    "controller_update_job.rollback.intent",
    "controller_update_job.rollback.sent",
    "controller_update_job.rollback.done",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_rollout_step_the_rollout_converges() {
    let mut stack = Stack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let controller = Controller::start(&stack.boot, dir.path());
    let points = COMMIT_POINTS
        .iter()
        .map(|p| (*p, true))
        .chain(ROLLBACK_POINTS.iter().map(|p| (*p, false)));
    let mut last_good = None;
    for (n, (point, healthy)) in (10u8..).zip(points) {
        let digest = if healthy { good(n) } else { bad(n) };
        // A lost answer's task is looked up by type and start second (one second of slack):
        // the previous iteration's rollback must be older than that.
        tokio::time::sleep(Duration::from_millis(2100)).await;
        let rollbacks_before = stack.rollbacks().len();
        kill(&mut stack.child);
        stack.child = spawn_agent(&stack.files.config_path, Some(point));
        let job = stack.update(&stack.operator, &digest).await;
        assert_tripped(&mut stack.child, &stack.files.config_path, point).await;
        stack.child = spawn_agent(&stack.files.config_path, None);
        let result = job_result(&stack.hub, stack.host, job).await;
        journal_settles(&stack.files.state_dir).await;
        assert_no_unfinished(&stack.files.state_dir, point);
        let (recorded, state, _) = stack.record().unwrap();
        let rollbacks = stack.rollbacks().len() - rollbacks_before;
        eprintln!(
            "{point}: {} ({}), {rollbacks} rollback(s)",
            result["outcome"], result["detail"]
        );
        if healthy {
            assert_eq!(result["outcome"], "succeeded", "{point}: {result}");
            assert_eq!(
                (recorded.as_deref(), state.as_str()),
                (Some(digest.as_str()), "running"),
                "{point}"
            );
            assert_eq!(rollbacks, 0, "{point}");
            last_good = Some(digest);
        } else {
            assert_eq!(result["outcome"], "failed", "{point}: {result}");
            assert!(
                result["detail"]
                    .as_str()
                    .unwrap()
                    .starts_with("rolled_back:"),
                "{point}: {result}"
            );
            assert_eq!(
                (recorded, state.as_str()),
                (last_good.clone(), "rolled_back"),
                "{point}"
            );
            assert_eq!(rollbacks, 1, "{point}: rolled back exactly once");
        }
        let (sim, vmid) = (&stack.sim, stack.vmid);
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
            stack.sim.guest_ids(),
            vec![stack.vmid],
            "{point}: guests changed"
        );
    }
    controller.crash().await;
    stack.stop().await;
}

/// Where a rollout whose controller stayed silent may be cut short: after the expired wait is
/// journaled and at every step of keeping the guest as it is.
const SILENT_POINTS: &[&str] = &[
    "controller_update_job.await_health.done",
    "controller_update_job.revert.intent",
    "controller_update_job.revert.done",
    "controller_update_job.heal.intent",
    "controller_update_job.heal.done",
    "controller_update_job.break.intent",
    "controller_update_job.break.done",
];

/// The kill points after a silent wait, in two halves run side by side (each point restarts
/// the agent twice and waits out a health window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_a_silent_wait_the_resumed_rollout_never_rolls_back() {
    killed_after_a_silent_wait(&SILENT_POINTS[..4]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_late_after_a_silent_wait_the_resumed_rollout_never_rolls_back() {
    killed_after_a_silent_wait(&SILENT_POINTS[4..]).await;
}

/// Kills the agent at each of `points` of a rollout whose controller stays silent; the
/// resumed rollout ends `broken`, never rolled back, and the customer's write survives.
async fn killed_after_a_silent_wait(points: &[&str]) {
    // No controller runs in the guest: every rollout's wait expires.
    let mut stack = Stack::start_with(SILENT_CONFIG).await;
    for (n, point) in (0x40u8..).zip(points.iter().copied()) {
        let digest = mute(n);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        kill(&mut stack.child);
        stack.child = spawn_agent(&stack.files.config_path, Some(point));
        let job = stack.update(&stack.operator, &digest).await;
        assert_tripped(&mut stack.child, &stack.files.config_path, point).await;
        // Written after the rollout's snapshot, while the agent is down.
        let text = format!("written before {point}");
        write_in_guest(&stack.sim, stack.vmid, CUSTOMER_DATA, &text).await;
        stack.child = spawn_agent(&stack.files.config_path, None);
        let result = job_result(&stack.hub, stack.host, job).await;
        journal_settles(&stack.files.state_dir).await;
        assert_no_unfinished(&stack.files.state_dir, point);
        eprintln!("{point}: {} ({})", result["outcome"], result["detail"]);
        assert_eq!(result["outcome"], "failed", "{point}: {result}");
        assert!(
            result["detail"].as_str().unwrap().starts_with("broken:"),
            "{point}: {result}"
        );
        assert_eq!(
            stack.rollbacks(),
            Vec::<String>::new(),
            "{point}: rolled back"
        );
        assert_eq!(
            stack
                .sim
                .guest_file(stack.vmid, CUSTOMER_DATA)
                .map(|f| f.content),
            Some(text.into_bytes()),
            "{point}: the customer's write is lost"
        );
        let (recorded, state, _) = stack.record().unwrap();
        assert_eq!((recorded, state.as_str()), (None, "broken"), "{point}");
        assert!(
            stack.helper.controller_restarts().len() > usize::from(n - 0x40),
            "{point}: healed in place"
        );
    }
    assert_eq!(stack.sim.guest_ids(), vec![stack.vmid]);
    assert!(destructive(&stack.sim).is_empty(), "no guest was destroyed");
    stack.stop().await;
}
