//! Shared harness of the agent suites: a simulator, a real hub (or a hostile
//! one), an agent config in a temp dir, and the agent run in-process or as the
//! real binary.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod consent;
pub mod crash;
#[path = "../../../agentd/tests/localapi_support/fake_helper.rs"]
pub mod fake_helper;
pub mod hostile_hub;
pub mod hubd_binary;
pub mod jobs;
pub mod lossy_tap;
pub mod pbs_stack;
pub mod process;
pub mod signing;
pub mod storage;
pub mod tap;
pub mod vm;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bosun_agentd::{AgentHandles, RunOptions};
use bosun_hubd::{Hub, HubConfig};
use bosun_pvesim::{SimConfig, SimHandle, Simulator};
use reqwest::Method;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // `BOSUN_TEST_LOG=info` shows the agent's logs.
    if let Ok(filter) = std::env::var("BOSUN_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

pub async fn start_sim(config: SimConfig) -> SimHandle {
    install_crypto();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    // Backups are files the (fake) helper hashes with the real verb.
    let config = SimConfig {
        archive_files: true,
        ..config
    };
    Simulator::start(config, listener).await.unwrap()
}

/// A real hub on loopback.
pub struct RealHub {
    pub hub: Hub,
    pub url: String,
    pub admin: String,
    pub fingerprint: String,
    pub client: reqwest::Client,
    pub dir: TempDir,
    /// How long the hub holds a poll that has nothing new (its `long_poll`).
    hold: Duration,
    /// The poll interval it gives new hosts (`None`: the hub's default).
    interval: Option<Duration>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

/// How long the harness's hubs hold a poll: short, so the suites move on quickly.
pub const TEST_HOLD: Duration = Duration::from_secs(5);

impl RealHub {
    pub async fn start() -> Self {
        Self::start_holding(TEST_HOLD).await
    }

    /// A real hub that holds a poll with nothing new for `hold` (production's default is
    /// 25 s), for figures of an agent polling at a production pace.
    pub async fn start_holding(hold: Duration) -> Self {
        Self::fresh(Arc::new(bosun_hubd::clock::SystemClock), hold, None).await
    }

    /// A real hub that gives new hosts `interval` as their poll interval (the agent paces its
    /// host-key rotations at no less than ten of them).
    pub async fn start_polling_every(interval: Duration) -> Self {
        Self::fresh(
            Arc::new(bosun_hubd::clock::SystemClock),
            TEST_HOLD,
            Some(interval),
        )
        .await
    }

    /// A real hub whose policy time (last seen, the dead-man's switch) is `clock`'s: a test
    /// moves it to see what the sweeps make of hours of silence.
    pub async fn start_with_clock(clock: Arc<dyn bosun_hubd::clock::Clock>) -> Self {
        Self::fresh(clock, TEST_HOLD, None).await
    }

    async fn fresh(
        clock: Arc<dyn bosun_hubd::clock::Clock>,
        hold: Duration,
        interval: Option<Duration>,
    ) -> Self {
        install_crypto();
        let dir = tempfile::tempdir().unwrap();
        let report = bosun_hubd::init(dir.path(), vec!["localhost".into()], false).unwrap();
        let admin = report.admin_token.expose().to_owned();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        Self::open_with(dir, admin, listener, clock, (hold, interval)).await
    }

    /// Stops the hub, keeping its data and port for [`PausedHub::resume`] (another server may
    /// take the port meanwhile).
    pub async fn pause(mut self) -> PausedHub {
        let port = self.url.rsplit(':').next().unwrap().parse::<u16>().unwrap();
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
        }
        let RealHub {
            dir,
            admin,
            hold,
            interval,
            ..
        } = self;
        PausedHub {
            dir,
            admin,
            hold,
            interval,
            port,
        }
    }

    async fn open_with(
        dir: TempDir,
        admin: String,
        listener: std::net::TcpListener,
        clock: Arc<dyn bosun_hubd::clock::Clock>,
        (hold, interval): (Duration, Option<Duration>),
    ) -> Self {
        let mut config = HubConfig::new(dir.path(), "127.0.0.1:0".parse().unwrap());
        config.dead_man.sweep_interval = None;
        config.long_poll = hold;
        if let Some(interval) = interval {
            config.poll_interval = interval;
        }
        let hub = Hub::open(config, clock).await.unwrap();
        let url = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        );
        let stop = CancellationToken::new();
        let server = hub.clone();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let _ = server
                .serve(listener, async move { stopped.cancelled().await })
                .await;
        });
        let client = reqwest::Client::builder()
            .use_preconfigured_tls(
                bosun_hubd::tls::pinned_client_config(&hub.fingerprint())
                    .expect("a valid fingerprint"),
            )
            .timeout(Duration::from_secs(90))
            .build()
            .unwrap();
        let fingerprint = hub.fingerprint();
        Self {
            hub,
            url,
            admin,
            fingerprint,
            client,
            dir,
            hold,
            interval,
            stop,
            task: Some(task),
        }
    }

    pub async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.admin);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.json::<Value>().await.unwrap_or(Value::Null);
        (status, body)
    }

    pub async fn enroll_token(&self) -> String {
        let (status, body) = self
            .admin(
                Method::POST,
                "/v1/admin/enrollment-tokens",
                Some(json!({ "ttl_seconds": 600, "require_approval": false })),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body["token"].as_str().unwrap().to_owned()
    }

    /// Sets `desired` as the operator does: with a data plan the harness's plan signer signs
    /// for exactly the storage targets and tiers it names (none added when it names none or
    /// carries a plan of its own). [`RealHub::put_desired_unplanned`] sets it as it is.
    pub async fn put_desired(&self, host_id: Uuid, desired: &Value) {
        let names_storage = desired["storage"].as_array().is_some_and(|s| !s.is_empty())
            || desired["backup_policy"]["target"].is_string();
        let desired = if names_storage && desired.get("data_plan").is_none() {
            signing::with_plan(desired.clone(), host_id)
        } else {
            desired.clone()
        };
        self.put_desired_unplanned(host_id, &desired).await;
    }

    /// Sets `desired` as it is, as a hub (or a compromised one) may.
    pub async fn put_desired_unplanned(&self, host_id: Uuid, desired: &Value) {
        let (status, body) = self
            .admin(
                Method::PUT,
                &format!("/v1/admin/hosts/{host_id}/desired"),
                Some(desired.clone()),
            )
            .await;
        assert!((200..300).contains(&status), "{status} {body}");
    }

    pub async fn host(&self, host_id: Uuid) -> Value {
        self.admin(Method::GET, &format!("/v1/admin/hosts/{host_id}"), None)
            .await
            .1
    }

    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
        }
    }
}

/// A real hub stopped with its data and port kept.
pub struct PausedHub {
    pub dir: TempDir,
    admin: String,
    hold: Duration,
    interval: Option<Duration>,
    port: u16,
}

impl PausedHub {
    /// The hub's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts the hub again on its data and port (waiting for the port to be free).
    pub async fn resume(self) -> RealHub {
        let PausedHub {
            dir,
            admin,
            hold,
            interval,
            port,
        } = self;
        let mut tries = 0;
        let listener = loop {
            match std::net::TcpListener::bind(("127.0.0.1", port)) {
                Ok(l) => break l,
                Err(e) => {
                    tries += 1;
                    assert!(tries < 100, "port {port} stays taken: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        RealHub::open_with(
            dir,
            admin,
            listener,
            Arc::new(bosun_hubd::clock::SystemClock),
            (hold, interval),
        )
        .await
    }
}

/// Files an agent needs.
pub struct AgentFiles {
    /// The helper the agent asks for root work: here it hashes the simulator's golden
    /// archive (and pushes bootstraps once the local API is on, [`AgentFiles::use_local_api`]).
    pub helper: fake_helper::FakeHelper,
    pub dir: TempDir,
    pub config_path: PathBuf,
    pub state_dir: PathBuf,
    pub signers_path: PathBuf,
}

pub fn agent_files(
    sim: &SimHandle,
    hub_url: &str,
    hub_fingerprint: &str,
    enroll_token: Option<&str>,
) -> AgentFiles {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    let signers_path = dir.path().join("allowed_signers");
    std::fs::write(&signers_path, signing::harness_signer_lines()).unwrap();
    let helper = fake_helper::FakeHelper::start(dir.path());
    helper.set_archive(&sim.endpoint().golden_volid, &sim.endpoint().golden_sha256);
    helper.backup_roots.lock().extend(sim.files_root());
    let pve_token = dir.path().join("pve-token");
    std::fs::write(&pve_token, &sim.endpoint().tokens.agent.secret).unwrap();
    let enroll = match enroll_token {
        Some(token) => {
            let path = dir.path().join("enroll-token");
            std::fs::write(&path, token).unwrap();
            format!("enrollment_token_file = {:?}\n", path)
        }
        None => String::new(),
    };
    let text = format!(
        r#"
state_dir = {state:?}
allowed_signers = {signers:?}
[hub]
url = {hub_url:?}
fingerprint = {hub_fingerprint:?}
{enroll}
[pve]
url = {pve_url:?}
node = {node:?}
token_id = {token_id:?}
token_secret_file = {pve_token:?}
fingerprint = {pve_fp:?}
fast_retries = true
[poll]
long_poll_seconds = 5
backoff_initial_ms = 50
backoff_max_ms = 500
report_min_interval_ms = 200
[reconcile]
interval_seconds = 1
max_parallel = 8
[helper]
transport = "socket"
socket = {helper_socket:?}
[golden]
boot_stay_up_seconds = 1
"#,
        state = state_dir,
        signers = signers_path,
        pve_url = sim.endpoint().url,
        node = sim.endpoint().node,
        token_id = sim.endpoint().tokens.agent.id,
        pve_fp = sim.endpoint().fingerprint,
        helper_socket = helper.socket,
    );
    let config_path = dir.path().join("agent.toml");
    std::fs::write(&config_path, text).unwrap();
    AgentFiles {
        helper,
        dir,
        config_path,
        state_dir,
        signers_path,
    }
}

/// A fast simulator, a real hub, and an agent's files holding a fresh enrollment token.
pub async fn enrolled_stack() -> (SimHandle, RealHub, AgentFiles) {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = RealHub::start().await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
    (sim, hub, files)
}

impl AgentFiles {
    /// Makes `op@example` a trusted job signer and gives its key.
    pub fn trusted_operator(&self) -> signing::OperatorKey {
        let operator = signing::OperatorKey::new("op@example");
        std::fs::write(
            &self.signers_path,
            format!(
                "{}{}\n",
                signing::harness_signer_lines(),
                operator.allowed_line("op@example")
            ),
        )
        .unwrap();
        operator
    }

    /// Paces the agent's host-key rotations at one per `seconds` (`[poll]
    /// host_key_rotation_min_seconds`; the default is an hour).
    pub fn pace_host_keys(&self, seconds: u64) {
        let text = std::fs::read_to_string(&self.config_path).unwrap();
        let text = text.replacen(
            "[poll]\n",
            &format!("[poll]\nhost_key_rotation_min_seconds = {seconds}\n"),
            1,
        );
        std::fs::write(&self.config_path, text).unwrap();
    }

    /// Allows `local-dir` targets beneath `roots` (`[storage] local_dir_roots`).
    pub fn allow_local_dirs(&self, roots: &[&str]) {
        let mut text = std::fs::read_to_string(&self.config_path).unwrap();
        text.push_str(&format!("[storage]\nlocal_dir_roots = {roots:?}\n"));
        std::fs::write(&self.config_path, text).unwrap();
    }

    /// Gives the helper the simulator's `pct` (its stand-in `bosun-pvesim-pct`, copied here
    /// beside the endpoint file it reads): the real verbs that run `pct exec` then act on the
    /// simulated guests' files. The stand-in is built with the workspace's binaries.
    pub fn use_sim_pct(&self, sim: &SimHandle) {
        use std::os::unix::fs::PermissionsExt as _;
        let exe = std::env::current_exe().unwrap();
        let built = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("the test runs from target/<profile>/deps")
            .join("bosun-pvesim-pct");
        assert!(
            built.is_file(),
            "{} is missing: build the workspace's binaries first (`cargo build --workspace --bins`)",
            built.display()
        );
        let pct = self.dir.path().join("pct");
        std::fs::copy(&built, &pct).unwrap();
        let beside = self.dir.path().join("pct.endpoint.json");
        std::fs::write(&beside, serde_json::to_vec(sim.endpoint()).unwrap()).unwrap();
        std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o600)).unwrap();
        *self.helper.pct.lock() = Some(pct);
    }

    /// Switches on the local API on loopback `port` (0: any), so provisioned guests get
    /// their bootstrap pushed through [`AgentFiles::helper`], plus any `extra` config lines.
    pub fn use_local_api(&self, port: u16, extra: &str) {
        let mut text = std::fs::read_to_string(&self.config_path).unwrap();
        text.push_str(&format!(
            "[local_api]\nbind = \"127.0.0.1\"\nport = {port}\n{extra}"
        ));
        std::fs::write(&self.config_path, text).unwrap();
    }
}

/// Waits until the agent reports `guest` running; gives its vmid.
pub async fn running_vmid(
    status: &tokio::sync::watch::Receiver<
        bosun_agentd::guests::reconcile::reconcile_task::ReconcileStatus,
    >,
    guest: Uuid,
) -> u32 {
    let running = |s: &bosun_agentd::guests::reconcile::reconcile_task::ReconcileStatus| {
        s.guests
            .iter()
            .find(|g| {
                g.guest_id == Some(guest) && g.status == bosun_proto::report::GuestStatus::Running
            })
            .map(|g| g.vmid)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(vmid) = running(&status.borrow()) {
            return vmid;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "guest {guest} is not running after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An agent running in-process.
pub struct InProcessAgent {
    pub handles: AgentHandles,
    pub shutdown: CancellationToken,
    task: JoinHandle<Result<(), bosun_agentd::AgentError>>,
}

impl InProcessAgent {
    pub async fn start(config_path: &Path) -> Self {
        let config = bosun_agentd::config::AgentConfig::load(config_path).unwrap();
        let shutdown = CancellationToken::new();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let options = RunOptions {
            started: Some(tx),
            ..RunOptions::default()
        };
        let task = tokio::spawn(bosun_agentd::run_with(config, shutdown.clone(), options));
        let handles = tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .expect("agent starts within 30 s")
            .expect("agent started");
        Self {
            handles,
            shutdown,
            task,
        }
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        let Ok(ended) = tokio::time::timeout(Duration::from_secs(30), self.task).await else {
            panic!(
                "the agent did not stop within 30 s; still running: tasks {:?}, guest operations {:?}",
                self.handles.tasks.running(),
                self.handles.queue.busy()
            );
        };
        ended.unwrap().unwrap();
    }
}

/// A desired state with `guests` guests, all running.
pub fn desired(sim: &SimHandle, guests: &[(Uuid, &str)], power: &str) -> Value {
    json!({
        "schema": "bosun.desired/v1",
        "guests": guests.iter().map(|(id, name)| json!({
            "guest_id": id,
            "hostname": name,
            "customer": { "customer_id": "acme", "display_name": "Acme" },
            "resources": { "cores": 2, "memory_mib": 1024, "rootfs_gib": 10 },
            "power": power,
            "golden": signing::signed_golden(&sim.endpoint().golden_volid, &sim.endpoint().golden_sha256),
        })).collect::<Vec<_>>(),
        "backup_policy": { "schedule": "daily", "retention": {} },
        "restore_test_policy": { "enabled": false, "interval_days": 7, "timeout_minutes": 30 },
    })
}

/// Polls `check` every 100 ms until it is true or `limit` passes.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Mutating requests the simulator saw (everything but GET).
pub fn mutations(sim: &SimHandle) -> Vec<bosun_pvesim::LoggedRequest> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect()
}

/// Destructive requests: a DELETE of a guest (a container or a VM), or a restore with
/// `force=1`.
pub fn destructive(sim: &SimHandle) -> Vec<bosun_pvesim::LoggedRequest> {
    sim.requests()
        .into_iter()
        .filter(|r| {
            (r.method == "DELETE"
                && r.path.starts_with("/nodes/")
                && (r.path.contains("/lxc/") || r.path.contains("/qemu/")))
                || r.params.iter().any(|(k, v)| k == "force" && v == "1")
        })
        .collect()
}

/// A Proxmox client of the simulator's root@pam token: what an administrator (or anything
/// outside Bosun) does on the node.
pub fn root_client(sim: &SimHandle) -> bosun_pve::PveClient {
    let endpoint = sim.endpoint();
    bosun_pve::PveClient::new(bosun_pve::PveConfig {
        base_url: endpoint.url.parse().unwrap(),
        node: bosun_pve::NodeName::new(endpoint.node.clone()).unwrap(),
        token_id: endpoint.tokens.root.id.clone(),
        token_secret: endpoint.tokens.root.secret.clone().into(),
        trust: bosun_pve::TlsTrust::PinnedSha256(endpoint.fingerprint.clone()),
        policy: bosun_pve::RetryPolicy::fast(),
    })
    .unwrap()
}

/// The host's age recipient, once the hub has it from a report.
pub async fn hub_recipient(hub: &RealHub, host: Uuid) -> String {
    eventually(
        Duration::from_secs(30),
        "the hub knows the recipient",
        || async { hub.host(host).await["last_report"]["storage_recipient"].is_string() },
    )
    .await;
    hub.host(host).await["last_report"]["storage_recipient"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `password` sealed to `recipient` for host `host` and the storage target `target` (its JSON,
/// as desired state carries it, without `credentials`), as `bosunctl secret seal` seals it:
/// the armored ciphertext.
pub fn seal_for(recipient: &str, host: Uuid, target: &Value, password: &str) -> String {
    let target: bosun_proto::desired::StorageTarget =
        serde_json::from_value(target.clone()).expect("a storage target");
    let credential = bosun_proto::sealed_credential::SealedCredential::new(
        host,
        target.identity(),
        jiff::Timestamp::now(),
        bosun_proto::secret::SecretToken::new(password),
    );
    signing::seal_signed(recipient, &credential)
}

/// A loopback port for a listener that must keep its number across restarts (an agent's
/// local API, which guests' bootstraps name). Taken below the kernel's ephemeral range, so
/// no `bind(…:0)` of another test (a hub, a simulator) is handed it while the agent is
/// down between restarts; free when picked.
pub fn fixed_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    const LOW: u16 = 20_000;
    const SPAN: u16 = 12_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    // Parallel test processes start at different places in the range.
    let start = u16::try_from(std::process::id() % u32::from(SPAN)).unwrap();
    for _ in 0..SPAN {
        let offset = (start + NEXT.fetch_add(7, Ordering::Relaxed)) % SPAN;
        let port = LOW + offset;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {LOW}..{}", LOW + SPAN);
}

/// Writes `text` to `path` in the running guest `vmid`, as its customer would.
pub async fn write_in_guest(sim: &SimHandle, vmid: u32, path: &str, text: &str) {
    let out = sim
        .cli(
            "pct",
            &["push", &vmid.to_string(), "/tmp/marker", path],
            Some(text.as_bytes()),
        )
        .await
        .unwrap();
    assert_eq!(out.exit, 0, "{out:?}");
}

/// The text of the file at `path` in guest `vmid`, when there is one.
pub fn guest_text(sim: &SimHandle, vmid: u32, path: &str) -> Option<String> {
    sim.guest_file(vmid, path)
        .map(|f| String::from_utf8(f.content).unwrap())
}

/// Guest `vmid`'s MAC address (`net0`'s `hwaddr`).
pub fn guest_mac(sim: &SimHandle, vmid: u32) -> String {
    let net0 = sim.guest_config(vmid).unwrap()["net0"].clone();
    net0.split(',')
        .find_map(|p| p.strip_prefix("hwaddr="))
        .unwrap()
        .to_owned()
}

/// The container restores the agent sent to `sim`, as (vmid, archive).
pub fn agent_restores(sim: &SimHandle) -> Vec<(String, String)> {
    let agent = sim.endpoint().tokens.agent.id.clone();
    sim.requests()
        .into_iter()
        .filter(|r| r.token_id.as_deref() == Some(agent.as_str()))
        .filter(|r| r.method == "POST" && r.path.ends_with("/lxc"))
        .filter_map(|r| {
            let get = |k: &str| {
                r.params
                    .iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.clone())
            };
            Some((get("vmid")?, get("ostemplate")?))
        })
        .collect()
}

/// Destroys `vmid` behind the agent's back.
pub async fn destroy_behind_its_back(sim: &SimHandle, vmid: u32) {
    use bosun_pve::Pve as _;
    let root = root_client(sim);
    let vmid = bosun_pve::Vmid::new(vmid).unwrap();
    if sim.guest_running(vmid.get()) == Some(true) {
        let upid = root.stop_ct(vmid).await.unwrap();
        sim.wait_task(&upid.to_string(), Duration::from_secs(30))
            .await
            .unwrap();
    }
    let upid = root.destroy_ct(vmid, true).await.unwrap();
    sim.wait_task(&upid.to_string(), Duration::from_secs(30))
        .await
        .unwrap();
    assert!(!sim.guest_ids().contains(&vmid.get()));
}

/// Asks the local API for a backup and waits for its end; gives the final run.
pub async fn local_backup(client: &reqwest::Client, url: &str, token: &str) -> Value {
    let started = client
        .post(format!("{url}/v1/backup"))
        .bearer_auth(token)
        .json(&json!({ "quiesced": false }))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202, "{:?}", started.text().await);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status: Value = client
            .get(format!("{url}/v1/backup/status"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let phase = status["run"]["phase"].as_str().unwrap_or_default();
        if phase == "done" || phase == "failed" {
            return status["run"].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "backup never ended: {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The Proxmox storage the agent registers for the PBS target `durable` in `namespace` (a
/// storage id covers the target's whole identity).
#[allow(dead_code)]
pub fn pbs_storage(durable: &str, namespace: &str) -> bosun_pve::StorageId {
    bosun_agentd::data::storage::naming::storage_id(&bosun_proto::data_plan::TargetIdentity {
        kind: bosun_proto::desired::StorageType::Pbs,
        durable_id: durable.to_owned(),
        namespace: Some(namespace.to_owned()),
        username: None,
        serial: None,
    })
}

/// The Proxmox storage the agent registers for the USB target `uuid` with `serial`.
#[allow(dead_code)]
pub fn usb_storage(uuid: &str, serial: &str) -> bosun_pve::StorageId {
    bosun_agentd::data::storage::naming::storage_id(&bosun_proto::data_plan::TargetIdentity {
        kind: bosun_proto::desired::StorageType::Usb,
        durable_id: uuid.to_owned(),
        namespace: None,
        username: None,
        serial: Some(serial.to_owned()),
    })
}
