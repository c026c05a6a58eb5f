//! A rolling upgrade of hub replicas over one PostgreSQL database, with two binaries whose
//! schemas differ: `bosun-hubd` (version N) and `bosun-hubd-next` (N+1, one migration more).
//! Hosts poll every replica in turn all along, over real TLS, and not one poll fails:
//!
//! 1. two N replicas serve; hosts enroll and poll;
//! 2. an N+1 replica starts beside them and migrates the database once;
//! 3. the N replicas keep serving over the newer schema: polls, a desired state written on one
//!    and seen through the N+1 replica, a host enrolled through an N replica;
//! 4. an N replica that restarts refuses the newer schema and says so, and stays down;
//! 5. it comes back as N+1, and the last N replica is replaced the same way.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_proto::poll::{PollRequest, REQUEST_SCHEMA};
use bosun_proto::report::StateReport;
use bosun_testkit::pg_cluster::PgCluster;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const NEXT: &str = env!("CARGO_BIN_EXE_bosun-hubd-next");

/// Hosts polling the replicas.
const HOSTS: usize = 8;

/// `bosun-hubd`, built beside `bosun-hubd-next` by `cargo build --workspace --bins`.
fn current() -> PathBuf {
    let path = Path::new(NEXT).with_file_name("bosun-hubd");
    assert!(
        path.is_file(),
        "{} is missing: build the workspace's binaries first (`cargo build --workspace --bins`)",
        path.display()
    );
    path
}

/// The value of the `name` line a command printed.
fn field<'a>(printed: &'a str, name: &str) -> &'a str {
    printed
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .unwrap_or_else(|| panic!("no `{name}` in {printed}"))
        .trim()
}

/// A serving replica, killed when dropped; its log is collected on a thread.
struct Replica {
    child: Child,
    addr: String,
    log: Arc<Mutex<String>>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The options every replica serves with: the database, its own data directory, the shared
/// certificate and key.
fn serve_args(command: &mut Command, url: &str, data: &Path, tls: &Path) {
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--store", url, "--data"])
        .arg(data)
        .arg("--tls-cert")
        .arg(tls.join("cert.pem"))
        .arg("--tls-key")
        .arg(tls.join("key.pem"))
        .env("BOSUN_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
}

/// Starts `program` serving; returns once it listens.
fn start(program: &Path, url: &str, data: &Path, tls: &Path) -> Replica {
    let mut command = Command::new(program);
    serve_args(&mut command, url, data, tls);
    let mut child = command.spawn().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let (listening, ready) = std::sync::mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let kept = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if let Some(addr) = line
                .split("addr=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
            {
                let _ = listening.send(addr.to_owned());
            }
            let mut log = kept.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    let addr = ready
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| {
            panic!(
                "{} never listened: {}",
                program.display(),
                log.lock().unwrap()
            )
        });
    Replica { child, addr, log }
}

/// The hub's API over TLS pinned to the shared certificate.
#[derive(Clone)]
struct Api {
    client: reqwest::Client,
    admin_token: String,
}

impl Api {
    async fn call(
        &self,
        addr: &str,
        method: reqwest::Method,
        path: &str,
        bearer: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.client.request(method, format!("https://{addr}{path}"));
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                (status, response.json().await.unwrap_or(Value::Null))
            }
            Err(err) => (0, json!({ "error": err.to_string() })),
        }
    }

    async fn admin(
        &self,
        addr: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let token = self.admin_token.clone();
        self.call(addr, method, path, Some(&token), body).await
    }

    /// Enrolls a host through the replica at `addr`: (host id, key).
    async fn enroll(&self, addr: &str, name: &str) -> (Uuid, String) {
        let (status, token) = self
            .admin(
                addr,
                reqwest::Method::POST,
                "/v1/admin/enrollment-tokens",
                Some(json!({ "ttl_seconds": 600, "require_approval": false })),
            )
            .await;
        assert_eq!(status, 201, "{token}");
        let (status, enrolled) = self
            .call(
                addr,
                reqwest::Method::POST,
                "/v1/enroll",
                None,
                Some(json!({
                    "schema": "bosun.enroll/v1",
                    "token": token["token"],
                    "hostname": name,
                    "agent_version": "0.1.0",
                })),
            )
            .await;
        assert_eq!(status, 201, "{enrolled}");
        (
            enrolled["host_id"].as_str().unwrap().parse().unwrap(),
            enrolled["host_key"].as_str().unwrap().to_owned(),
        )
    }

    async fn poll(&self, addr: &str, host: Uuid, key: &str) -> (u16, Value) {
        let request = PollRequest {
            capabilities: None,
            schema: REQUEST_SCHEMA.to_owned(),
            known_generation: 0,
            applied_generation: 0,
            acked_jobs: Vec::new(),
            report: Some(report()),
            delta: None,
            operations: Vec::new(),
            stopping: false,
            hub_pins: Vec::new(),
            next_host_key_sha256: None,
        };
        self.call(
            addr,
            reqwest::Method::POST,
            &format!("/v1/hosts/{host}/poll?wait=0"),
            Some(key),
            Some(serde_json::to_value(&request).unwrap()),
        )
        .await
    }
}

fn report() -> StateReport {
    StateReport::empty(1, "0.1.0")
}

/// Hosts polling the live replicas in turn: each counts its answered polls and keeps every
/// failure (replica, status, body).
struct Fleet {
    live: Arc<Mutex<Vec<String>>>,
    answered: Vec<Arc<AtomicU64>>,
    failures: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Fleet {
    fn start(api: &Api, hosts: Vec<(Uuid, String)>, live: Vec<String>) -> Self {
        let live = Arc::new(Mutex::new(live));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let mut answered = Vec::new();
        let mut tasks = Vec::new();
        for (n, (host, key)) in hosts.into_iter().enumerate() {
            let count = Arc::new(AtomicU64::new(0));
            answered.push(Arc::clone(&count));
            let (api, live, failures, stop) = (
                api.clone(),
                Arc::clone(&live),
                Arc::clone(&failures),
                stop.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut turn = n;
                while !stop.is_cancelled() {
                    let addr = {
                        let live = live.lock().unwrap();
                        live[turn % live.len()].clone()
                    };
                    turn += 1;
                    let (status, body) = api.poll(&addr, host, &key).await;
                    if status == 200 {
                        count.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("{addr}: {status} {body}"));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }));
        }
        Self {
            live,
            answered,
            failures,
            stop,
            tasks,
        }
    }

    fn counts(&self) -> Vec<u64> {
        self.answered
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }

    /// Waits until every host has had two more polls answered (so each has polled every
    /// live replica at least once since `live` last changed, with two replicas live).
    async fn each_polls_again(&self) {
        let then = self.counts();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !self
            .counts()
            .iter()
            .zip(&then)
            .all(|(now, then)| *now >= then + 2)
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "hosts stopped polling: {:?}",
                self.failures.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Takes `addr` out of the rotation and waits until no poll is on its way to it.
    async fn drain(&self, addr: &str) {
        self.live.lock().unwrap().retain(|a| a != addr);
        self.each_polls_again().await;
    }

    fn add(&self, addr: &str) {
        self.live.lock().unwrap().push(addr.to_owned());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_are_upgraded_one_at_a_time_while_hosts_poll() {
    bosun_hubd::install_crypto_provider();
    let cluster = PgCluster::start().unwrap();
    let url = cluster.create_database("rolling").unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let data = |name: &str| scratch.path().join(name);

    // Version N initializes the database; every replica serves its certificate.
    let init = Command::new(current())
        .args(["init", "--store", &url, "--data"])
        .arg(data("a"))
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    let printed = String::from_utf8(init.stdout).unwrap();
    let fingerprint = field(&printed, "fingerprint:").to_owned();
    let tls = data("a").join("tls");
    let api = Api {
        client: reqwest::Client::builder()
            .use_preconfigured_tls(bosun_hubd::tls::pinned_client_config(&fingerprint).unwrap())
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        admin_token: field(&printed, "admin token:").to_owned(),
    };
    let schema_n = bosun_hubd::store::postgres::schema::MIGRATIONS.len();

    // 1. Two N replicas; the hosts enroll and poll both.
    let a = start(&current(), &url, &data("a"), &tls);
    let b = start(&current(), &url, &data("b"), &tls);
    let mut hosts = Vec::new();
    for i in 0..HOSTS {
        let via = if i % 2 == 0 { &a.addr } else { &b.addr };
        hosts.push(api.enroll(via, &format!("pve{i}")).await);
    }
    let fleet = Fleet::start(&api, hosts.clone(), vec![a.addr.clone(), b.addr.clone()]);
    fleet.each_polls_again().await;

    // 2. An N+1 replica starts beside them and migrates the database, once.
    let c = start(Path::new(NEXT), &url, &data("c"), &tls);
    let migrated = format!("version={}", schema_n + 1);
    assert!(
        c.log.lock().unwrap().contains(&migrated),
        "the N+1 replica applies its migration: {}",
        c.log.lock().unwrap()
    );
    fleet.add(&c.addr);
    fleet.each_polls_again().await;

    // 3. The N replicas serve on over the newer schema: a desired state written through one
    //    is seen through the N+1 replica, and a host enrolls through the other.
    let (host, key) = &hosts[0];
    let (status, body) = api
        .admin(
            &a.addr,
            reqwest::Method::PUT,
            &format!("/v1/admin/hosts/{host}/desired"),
            Some(serde_json::from_str(include_str!("../../../docs/proto/desired.json")).unwrap()),
        )
        .await;
    assert_eq!(
        (status, body["generation"].as_u64()),
        (200, Some(1)),
        "{body}"
    );
    let (status, answer) = api.poll(&c.addr, *host, key).await;
    assert_eq!(
        (status, answer["generation"].as_u64()),
        (200, Some(1)),
        "{answer}"
    );
    let late = api.enroll(&b.addr, "pve-late").await;
    let (status, answer) = api.poll(&c.addr, late.0, &late.1).await;
    assert_eq!(status, 200, "{answer}");

    // 4. An N replica that restarts refuses the newer schema, says why, and stays down.
    fleet.drain(&a.addr).await;
    drop(a);
    let mut again = Command::new(current());
    serve_args(&mut again, &url, &data("a"), &tls);
    let refused = again.stderr(Stdio::piped()).output().unwrap();
    assert!(
        !refused.status.success(),
        "an N replica must not serve the N+1 schema"
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains(&format!(
            "database schema version {} is newer than this hub understands ({schema_n})",
            schema_n + 1
        )),
        "{said}"
    );

    // 5. It comes back as N+1; then the last N replica is replaced the same way.
    let a = start(Path::new(NEXT), &url, &data("a"), &tls);
    assert!(
        !a.log.lock().unwrap().contains("applied database migration"),
        "the schema was migrated once"
    );
    fleet.add(&a.addr);
    fleet.each_polls_again().await;
    fleet.drain(&b.addr).await;
    drop(b);
    let b = start(Path::new(NEXT), &url, &data("b"), &tls);
    fleet.add(&b.addr);
    fleet.each_polls_again().await;

    fleet.stop.cancel();
    for task in fleet.tasks {
        task.await.unwrap();
    }
    let failures = fleet.failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "polls failed during the upgrade: {failures:?}"
    );
    drop((a, b, c));
}
