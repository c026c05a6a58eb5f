//! A fleet rollout by selector, end to end (decision 0086): one real hub, three agents as
//! processes of their own (each on its own simulated node, with the local API on, one
//! customer guest each and `bosun-guest`'s controller loop in it), all labelled `tier=web`.
//! The real `bosunctl fleet rollout --kind controller-update --label tier=web` resolves the
//! selector at the hub, signs one `controller-update` job for each host's guest with the
//! operator's key and runs the waves one host at a time. The second host's controller refuses
//! the new image, so its job fails (rolled back to the rollout's snapshot): the rollout stops
//! there, exits 14, and its report says the canary is done, the second host failed and the
//! third was not reached. The third host never gets a job.
//!
//! Then the hub lies about the selector (decision 0093): the operator put one host in
//! `ring=canary`, the hub says every host is there. Without a bound and without a terminal to
//! confirm on, with `--max-hosts 1`, with `--max-hosts 2` and with `--hosts` naming the canary,
//! `bosunctl` signs nothing and exits 4; the hub holds no job of the rollout's kind. Once the
//! hub answers the truth, `--hosts` signs for the canary alone and reports a listed host the
//! hub did not name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_support::jobs::ctl;
use agent_support::process::AgentProcess;
use agent_support::signing::{OperatorKey, harness_signer_lines};
use agent_support::*;
use bosun_guest::{ControllerConfig, ControllerLoop, LocalApiClient};
use bosun_proto::bootstrap::Bootstrap;
use reqwest::Method;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const CONFIG: &str = "[backup]\nstorage = \"local\"\n[controller]\nhealth_window_ms = 15000\nreport_interval_ms = 1000\nheal_after_ms = 60000\nmax_restarts = 2\n";

/// The digest the rollout installs.
fn digest() -> String {
    format!("sha256:{}", "5e".repeat(32))
}

/// The digest the guests' controllers run before the rollout.
fn earlier() -> String {
    format!("sha256:{}", "0e".repeat(32))
}

/// The controller in a guest: `bosun-guest`'s loop, its activation hook `script`.
struct Controller {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Controller {
    fn start(boot: &Bootstrap, dir: &Path, script: &str) -> Self {
        let client = LocalApiClient::from_bootstrap(boot).unwrap();
        let config = ControllerConfig {
            activate: vec!["sh".into(), "-c".into(), script.into(), "activate".into()],
            health: None,
            state_file: dir.join("controller.digest"),
            placed_file: None,
            command_timeout: Duration::from_secs(60),
        };
        // It runs a controller already (a rollout signs only for guests that run one).
        std::fs::write(&config.state_file, format!("{}\n", earlier())).unwrap();
        let stop = CancellationToken::new();
        let looped = ControllerLoop::new(client, config);
        let token = stop.clone();
        let task = tokio::spawn(async move { looped.run(&token).await });
        Self { stop, task }
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.abort();
        let _ = self.task.await;
    }
}

/// One enrolled host: its simulator, files, agent process and guest.
struct Host {
    sim: bosun_pvesim::SimHandle,
    files: AgentFiles,
    agent: AgentProcess,
    id: Uuid,
    guest: Uuid,
}

/// Starts an agent on a simulator of its own, trusting `operator`; gives it once the hub
/// lists it.
async fn enroll(hub: &RealHub, operator: &OperatorKey, known: &[Uuid]) -> Host {
    let sim = start_sim(bosun_pvesim::SimConfig::fast()).await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
    std::fs::write(
        &files.signers_path,
        format!(
            "{}{}\n",
            harness_signer_lines(),
            operator.allowed_line("op@example")
        ),
    )
    .unwrap();
    files.use_local_api(fixed_port(), CONFIG);
    let agent = AgentProcess::start(&files.config_path);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let id = loop {
        let (_, body) = hub.admin(Method::GET, "/v1/admin/hosts", None).await;
        let new = body
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| h["host_id"].as_str()?.parse::<Uuid>().ok())
            .find(|id| !known.contains(id));
        if let Some(id) = new {
            break id;
        }
        assert!(tokio::time::Instant::now() < deadline, "the host enrolled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    Host {
        sim,
        files,
        agent,
        id,
        guest: Uuid::new_v4(),
    }
}

/// Provisions the host's guest and waits for its bootstrap and for the hub to see it run.
async fn provision(hub: &RealHub, host: &Host) -> Bootstrap {
    hub.put_desired(
        host.id,
        &desired(&host.sim, &[(host.guest, "web")], "running"),
    )
    .await;
    let helper = host.files.helper.clone();
    let sim = &host.sim;
    eventually(Duration::from_secs(60), "the bootstrap is pushed", || {
        let ids = sim.guest_ids();
        let helper = &helper;
        async move { ids.len() == 1 && helper.bootstrap_path(ids[0]).exists() }
    })
    .await;
    let guest = host.guest.to_string();
    eventually(
        Duration::from_secs(60),
        "the hub sees the guest run",
        || {
            let guest = guest.clone();
            async move {
                let detail = hub.host(host.id).await;
                detail["last_report"]["guests"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|g| g["guest_id"] == guest.as_str() && g["status"] == "running")
            }
        },
    )
    .await;
    helper.read_bootstrap(sim.guest_ids()[0])
}

async fn controller_jobs(hub: &RealHub, host: Uuid) -> Vec<Value> {
    let (_, jobs) = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}/jobs"), None)
        .await;
    jobs.as_array()
        .into_iter()
        .flatten()
        .filter(|j| j["kind"] == "controller-update")
        .cloned()
        .collect()
}

/// The `bosunctl` binary built beside this suite.
fn bosunctl() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let built = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .join("bosunctl");
    assert!(
        built.is_file(),
        "{} is missing: build it first (`cargo build -p bosunctl --bins`)",
        built.display()
    );
    built
}

/// A hub, the operator's key and three hosts each running one guest whose controller runs
/// `scripts[n]` on activation, by host id.
struct Fleet {
    hub: RealHub,
    operator: OperatorKey,
    hosts: Vec<Host>,
    controllers: Vec<Controller>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Fleet {
    async fn start(scripts: [&str; 3]) -> Self {
        let hub = RealHub::start().await;
        let operator = OperatorKey::new("op@example");
        let mut hosts: Vec<Host> = Vec::new();
        for _ in 0..3 {
            let known: Vec<Uuid> = hosts.iter().map(|h| h.id).collect();
            hosts.push(enroll(&hub, &operator, &known).await);
        }
        // The rollout reaches hosts by hostname, then id; these share the machine's hostname.
        hosts.sort_by_key(|h| h.id);
        let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut controllers = Vec::new();
        for (n, host) in hosts.iter().enumerate() {
            let boot = provision(&hub, host).await;
            controllers.push(Controller::start(&boot, dirs[n].path(), scripts[n]));
        }
        for host in &hosts {
            let guest = host.guest.to_string();
            eventually(
                Duration::from_secs(60),
                "the hub sees the guest's controller",
                || {
                    let (guest, hub) = (guest.clone(), &hub);
                    async move {
                        let detail = hub.host(host.id).await;
                        detail["last_report"]["guests"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|g| {
                                g["guest_id"] == guest.as_str()
                                    && g["controller_digest"] == earlier().as_str()
                            })
                    }
                },
            )
            .await;
        }
        // A snapshot taken in the second the token was minted would hold a stale bootstrap.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        Self {
            hub,
            operator,
            hosts,
            controllers,
            _dirs: dirs,
        }
    }

    /// `bosunctl fleet rollout --kind controller-update` against the hub, JSON out, stdin
    /// not a terminal, with `args`.
    fn rollout(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(bosunctl());
        command
            .args([
                "--hub-url",
                &self.hub.url,
                "--fingerprint",
                &self.hub.fingerprint,
            ])
            .args(["--admin-token", &self.hub.admin, "--output", "json"])
            .args(["fleet", "rollout", "--kind", "controller-update"])
            .args(args)
            .env_remove("BOSUN_CTL_CONFIG")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// The `controller-update` jobs the hub holds, all hosts together.
    async fn signed(&self) -> usize {
        let mut n = 0;
        for host in &self.hosts {
            n += controller_jobs(&self.hub, host.id).await.len();
        }
        n
    }

    async fn stop(self) {
        for controller in self.controllers {
            controller.stop().await;
        }
        for host in self.hosts {
            let Host { sim, agent, .. } = host;
            drop(agent);
            sim.shutdown().await;
        }
        self.hub.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_by_label_stops_at_the_first_failed_health_gate_and_names_the_hosts_it_skipped() {
    // The second host's controller refuses every image: its health gate fails.
    let fleet = Fleet::start([
        "exit 0",
        "echo 'image failed its start-up check' >&2; exit 1",
        "exit 0",
    ])
    .await;
    let (hub, operator, hosts) = (&fleet.hub, &fleet.operator, &fleet.hosts);
    for host in hosts {
        ctl(hub, &["hosts", "label", &host.id.to_string(), "tier=web"]).await;
    }

    let param = format!("digest={}", digest());
    let key = operator.key.display().to_string();
    let base = |args: &[&str]| fleet.rollout(args);
    // A selector that matches nothing, or none at all, is refused before anything is signed.
    for args in [
        &["--label", "tier=db", "--param", &param, "-f", &key][..],
        &["--param", &param, "-f", &key][..],
    ] {
        let out = base(args).output().await.unwrap();
        assert_eq!(out.status.code(), Some(4), "{out:?}");
    }
    // A dry run shows the waves and signs nothing.
    let mut dry = base(&[
        "--label",
        "tier=web",
        "--param",
        &param,
        "--dry-run",
        "--max-hosts",
        "3",
    ]);
    dry.args(["--output", "text", "--canary", "1", "--batch", "1"]);
    let out = dry.output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    println!("fleet rollout --dry-run:\n{text}");
    assert!(
        text.contains("3 hosts match, 3 to update in 3 waves, 0 skipped")
            && text.contains("planned"),
        "{text}"
    );
    for host in hosts {
        assert!(controller_jobs(hub, host.id).await.is_empty());
    }

    let out = tokio::time::timeout(
        Duration::from_secs(240),
        base(&[
            "--label",
            "tier=web",
            "--param",
            &param,
            "-f",
            &key,
            "--canary",
            "1",
            "--batch",
            "1",
            "--wait",
            "90s",
            "--max-hosts",
            "3",
        ])
        .output(),
    )
    .await
    .expect("the rollout ends within its bounds")
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(14), "stopped: {stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["stopped"], true, "{report}");
    let lines = report["hosts"].as_array().unwrap();
    let line = |host: &Host| {
        lines
            .iter()
            .find(|l| l["host_id"] == host.id.to_string().as_str())
            .unwrap_or_else(|| panic!("{} in {report}", host.id))
    };
    let (canary, failing, last) = (line(&hosts[0]), line(&hosts[1]), line(&hosts[2]));
    assert_eq!(canary["outcome"], "done", "{report}");
    assert_eq!(canary["wave"], 1);
    assert_eq!(failing["outcome"], "failed", "{report}");
    assert_eq!(failing["wave"], 2);
    assert!(
        failing["reason"].as_str().unwrap().contains("rolled_back"),
        "{report}"
    );
    assert_eq!(last["outcome"], "skipped", "{report}");
    assert_eq!(last["wave"], 3, "the wave it would have run in");
    let why = last["reason"].as_str().unwrap();
    assert!(
        why.starts_with("not reached") && why.contains(&hosts[1].id.to_string()),
        "{why}"
    );
    assert!(stderr.contains("not reached"), "{stderr}");
    println!(
        "fleet rollout:\n{stderr}{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // At the hub: the canary's job succeeded, the failing host's failed, the last got none.
    let states = |jobs: Vec<Value>| -> Vec<String> {
        jobs.iter()
            .map(|j| j["state"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        states(controller_jobs(hub, hosts[0].id).await),
        ["succeeded"]
    );
    assert_eq!(states(controller_jobs(hub, hosts[1].id).await), ["failed"]);
    assert!(controller_jobs(hub, hosts[2].id).await.is_empty());
    // Each job was signed for its own host and guest.
    let canary_job = &controller_jobs(hub, hosts[0].id).await[0];
    assert_eq!(canary["jobs"][0], canary_job["job_id"]);

    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_that_puts_every_host_in_the_canary_ring_gets_nothing_signed() {
    let fleet = Fleet::start(["exit 0"; 3]).await;
    let (hub, hosts) = (&fleet.hub, &fleet.hosts);
    // The operator's canary is the first host; the hub (its store changed by whoever holds it:
    // here its admin API) says all three carry the label.
    for host in hosts {
        ctl(
            hub,
            &["hosts", "label", &host.id.to_string(), "ring=canary"],
        )
        .await;
    }
    let param = format!("digest={}", digest());
    let key = fleet.operator.key.display().to_string();
    let canary = hosts[0].id.to_string();
    let (_, listed) = hub
        .admin(Method::GET, "/v1/admin/hosts?label=ring%3Dcanary", None)
        .await;
    assert_eq!(
        listed.as_array().unwrap().len(),
        3,
        "the hub claims the fleet"
    );

    let common = [
        "--label",
        "ring=canary",
        "--param",
        &param,
        "-f",
        &key,
        "--wait",
        "60s",
    ];
    let attempts: [(&str, &[&str]); 5] = [
        ("no bound, no terminal", &[]),
        ("--max-hosts 1", &["--max-hosts", "1"]),
        ("--max-hosts 2", &["--max-hosts", "2"]),
        ("--hosts <canary>", &["--hosts", &canary]),
        ("--dry-run", &["--dry-run"]),
    ];
    for (what, extra) in attempts {
        let out = tokio::time::timeout(
            Duration::from_secs(120),
            fleet.rollout(&common).args(extra).output(),
        )
        .await
        .expect("the rollout ends")
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!("{what}: exit {:?}\n{stderr}", out.status.code());
        let signed = fleet.signed().await;
        println!("hosts signed for under a hub that claims the whole fleet, {what}: {signed}");
        assert_eq!(out.status.code(), Some(4), "{what}: {stderr}");
        assert!(
            stderr.contains("nothing signed") && stderr.contains("3 hosts"),
            "{what}: {stderr}"
        );
        // What the hub claimed is shown: each host with the labels it claims.
        assert!(
            hosts.iter().all(|h| stderr.contains(&h.id.to_string())),
            "{what}: {stderr}"
        );
        assert!(stderr.contains("ring=canary"), "{what}: {stderr}");
        assert_eq!(signed, 0, "{what}: a job reached the hub");
    }

    // The hub answers the truth: only the canary carries the label. `--hosts` names the canary
    // and another host; the canary alone is signed for, the other is reported.
    for host in &hosts[1..] {
        ctl(
            hub,
            &["hosts", "label", &host.id.to_string(), "--remove", "ring"],
        )
        .await;
    }
    let listed = format!("{canary},{}", hosts[2].id);
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        fleet.rollout(&common).args(["--hosts", &listed]).output(),
    )
    .await
    .expect("the rollout ends")
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let lines = report["hosts"].as_array().unwrap();
    let line = |id: Uuid| {
        lines
            .iter()
            .find(|l| l["host_id"] == id.to_string().as_str())
            .unwrap_or_else(|| panic!("{id} in {report}"))
    };
    assert_eq!(line(hosts[0].id)["outcome"], "done", "{report}");
    let other = line(hosts[2].id);
    assert_eq!(other["outcome"], "skipped", "{report}");
    assert!(
        other["reason"]
            .as_str()
            .unwrap()
            .contains("does not name it"),
        "{report}"
    );
    assert_eq!(controller_jobs(hub, hosts[0].id).await.len(), 1);
    assert_eq!(fleet.signed().await, 1, "the canary alone");
    println!("with the hub honest, --hosts <canary>,<other>: 1 host signed for\n{stderr}");

    fleet.stop().await;
}
