//! Test harness: a real hub on 127.0.0.1:0 with a manual clock, and a pinned client.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use bosun_hubd::clock::ManualClock;
use bosun_hubd::store::StoreLocation;
use bosun_hubd::{Hub, HubConfig, HubError};
use bosun_proto::report::{HostMetrics, StateReport, Versions};
use bosun_testkit::pg_cluster;
use reqwest::{Method, Response, StatusCode};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use uuid::Uuid;

pub struct TestHub {
    pub hub: Hub,
    pub url: String,
    pub admin: String,
    pub client: reqwest::Client,
    pub clock: ManualClock,
    pub dir: TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), HubError>>>,
}

/// Config with the automatic sweeper off (tests sweep by hand).
pub fn config(dir: &TempDir) -> HubConfig {
    let mut config = HubConfig::new(dir.path(), "127.0.0.1:0".parse().unwrap());
    config.dead_man.sweep_interval = None;
    config.store = test_store(dir);
    config
}

/// Where a test hub keeps its state: SQLite in `dir`, or with `BOSUN_TEST_STORE=postgres`
/// (`scripts/with-postgres` sets it) a PostgreSQL database of its own named after `dir`, on
/// the cluster whose socket is in `BOSUN_TEST_PG_SOCKET`. The same suite runs on both stores.
pub fn test_store(dir: &TempDir) -> StoreLocation {
    if std::env::var("BOSUN_TEST_STORE").as_deref() != Ok("postgres") {
        return StoreLocation::Sqlite;
    }
    let socket = std::env::var_os("BOSUN_TEST_PG_SOCKET").expect(
        "BOSUN_TEST_STORE=postgres needs BOSUN_TEST_PG_SOCKET (run under scripts/with-postgres)",
    );
    let name = format!(
        "t_{}",
        hex::encode(dir.path().file_name().unwrap().as_encoded_bytes())
    );
    static CREATED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut created = CREATED.lock().unwrap();
    let socket = std::path::Path::new(&socket);
    if !created.contains(&name) {
        pg_cluster::create_database_on(socket, &name).unwrap();
        created.push(name.clone());
    }
    StoreLocation::Postgres(pg_cluster::url(socket, &name))
}

/// A PostgreSQL database of its own: on `scripts/with-postgres`'s cluster when there is one,
/// else on a throwaway cluster this value owns.
pub struct PgDatabase {
    pub url: String,
    _cluster: Option<pg_cluster::PgCluster>,
}

impl PgDatabase {
    pub fn create() -> Self {
        let name = format!("r_{}", Uuid::new_v4().simple());
        match std::env::var_os("BOSUN_TEST_PG_SOCKET") {
            Some(socket) => Self {
                url: pg_cluster::create_database_on(std::path::Path::new(&socket), &name).unwrap(),
                _cluster: None,
            },
            None => {
                let cluster = pg_cluster::PgCluster::start().unwrap();
                Self {
                    url: cluster.create_database(&name).unwrap(),
                    _cluster: Some(cluster),
                }
            }
        }
    }

    pub fn location(&self) -> StoreLocation {
        StoreLocation::Postgres(self.url.clone())
    }
}

/// The first column (an integer) of the rows `sql` (`?1` its one parameter) gives in the
/// store of the test hub whose data directory was `dir` ([`test_store`]).
pub async fn store_integers(dir: &TempDir, sql: &str, param: String) -> Vec<i64> {
    match test_store(dir) {
        StoreLocation::Sqlite => {
            let conn = rusqlite::Connection::open(dir.path().join("hub.sqlite")).unwrap();
            conn.prepare(sql)
                .unwrap()
                .query_map([param], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        }
        StoreLocation::Postgres(url) => {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            client
                .query(&sql.replace("?1", "$1"), &[&param])
                .await
                .unwrap()
                .iter()
                .map(|row| row.get(0))
                .collect()
        }
    }
}

/// Everything the store of the test hub whose data directory was `dir` holds, as bytes to
/// scan: the SQLite files, or a `pg_dump` of the PostgreSQL database. (name, bytes).
pub fn store_contents(dir: &TempDir) -> Vec<(String, Vec<u8>)> {
    match test_store(dir) {
        StoreLocation::Sqlite => std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| {
                path.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("hub.sqlite")
            })
            .filter_map(|path| Some((path.display().to_string(), std::fs::read(&path).ok()?)))
            .collect(),
        StoreLocation::Postgres(url) => {
            let out = std::process::Command::new(pg_cluster::server_bin().unwrap().join("pg_dump"))
                .args(["--data-only", "--dbname", &url])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            vec![("pg_dump".to_owned(), out.stdout)]
        }
    }
}

/// `bosun_hubd::init` on the suite's store ([`test_store`]).
pub fn init(
    dir: &TempDir,
    names: Vec<String>,
    operator_cert: bool,
) -> Result<bosun_hubd::InitReport, HubError> {
    bosun_hubd::init_store(dir.path(), names, operator_cert, &test_store(dir))
}

impl TestHub {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(configure: impl FnOnce(&mut HubConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let report = init(&dir, vec!["localhost".into()], false).unwrap();
        let admin = report.admin_token.expose().to_owned();
        let mut config = config(&dir);
        configure(&mut config);
        Self::start_in(dir, admin, config).await
    }

    /// A hub on `location`, initialized there.
    pub async fn start_on(location: StoreLocation) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let report =
            bosun_hubd::init_store(dir.path(), vec!["localhost".into()], false, &location).unwrap();
        let mut config = config(&dir);
        config.store = location;
        Self::start_in(dir, report.admin_token.expose().to_owned(), config).await
    }

    /// Another replica of this hub: the same store and certificate, its own listener.
    pub async fn start_replica(&self) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = bosun_hubd::tls::self_signed_paths(self.dir.path());
        let (to_cert, to_key) = bosun_hubd::tls::self_signed_paths(dir.path());
        std::fs::create_dir_all(to_cert.parent().unwrap()).unwrap();
        std::fs::copy(cert, to_cert).unwrap();
        std::fs::copy(key, to_key).unwrap();
        let mut config = config(&dir);
        config.store = self.hub.config().store.clone();
        Self::start_in(dir, self.admin.clone(), config).await
    }

    pub async fn start_in(dir: TempDir, admin: String, config: HubConfig) -> Self {
        let clock = ManualClock::new(jiff::Timestamp::now());
        let hub = Hub::open(config, Arc::new(clock.clone())).await.unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let server = hub.clone();
        let task = tokio::spawn(async move {
            server
                .serve(listener, async move {
                    let _ = stopped.await;
                })
                .await
        });
        let client = reqwest::Client::builder()
            .use_preconfigured_tls(
                bosun_hubd::tls::pinned_client_config(&hub.fingerprint())
                    .expect("a valid fingerprint"),
            )
            .timeout(Duration::from_secs(90))
            .build()
            .unwrap();
        Self {
            hub,
            url,
            admin,
            client,
            clock,
            dir,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops the server and hands back the data directory and admin token.
    pub async fn stop(mut self) -> (TempDir, String) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(15), task)
                .await
                .expect("hub stops within 15s")
                .unwrap()
                .unwrap();
        }
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        (dir, self.admin.clone())
    }

    pub async fn request(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Response {
        self.request_from(&self.client, method, path, token, body)
            .await
    }

    /// The text of the hub's `/metrics`.
    pub async fn metrics(&self) -> String {
        self.request(Method::GET, "/metrics", None, None)
            .await
            .text()
            .await
            .unwrap()
    }

    /// A client pinned to the hub whose connections leave from `source` (any address of
    /// 127.0.0.0/8): a source of its own for the hub's allowance of failed authentications,
    /// which is per address (decision 0055).
    pub fn client_from(&self, source: std::net::Ipv4Addr) -> reqwest::Client {
        reqwest::Client::builder()
            .use_preconfigured_tls(
                bosun_hubd::tls::pinned_client_config(&self.hub.fingerprint())
                    .expect("a valid fingerprint"),
            )
            .local_address(std::net::IpAddr::V4(source))
            .timeout(Duration::from_secs(90))
            .build()
            .unwrap()
    }

    /// [`Self::request`] through `client`.
    pub async fn request_from(
        &self,
        client: &reqwest::Client,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Response {
        let mut req = client.request(method, format!("{}{path}", self.url));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body);
        }
        req.send().await.unwrap()
    }

    pub async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> Response {
        let admin = self.admin.clone();
        self.request(
            method,
            path,
            Some(&admin),
            body.map(|b| b.to_string().into_bytes()),
        )
        .await
    }

    pub async fn enroll_token(&self, ttl_seconds: u32, require_approval: bool) -> String {
        let resp = self
            .admin(
                Method::POST,
                "/v1/admin/enrollment-tokens",
                Some(json!({ "ttl_seconds": ttl_seconds, "require_approval": require_approval })),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::CREATED);
        resp.json::<Value>().await.unwrap()["token"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    pub async fn try_enroll(&self, token: &str, hostname: &str) -> Response {
        let body = json!({ "schema": "bosun.enroll/v1", "token": token, "hostname": hostname, "agent_version": "0.1.0" });
        self.request(
            Method::POST,
            "/v1/enroll",
            None,
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    /// Enrolls an active host: (host_id, host_key).
    pub async fn enroll(&self, hostname: &str) -> (Uuid, String) {
        let token = self.enroll_token(600, false).await;
        let resp = self.try_enroll(&token, hostname).await;
        assert_eq!(resp.status(), StatusCode::CREATED);
        let body: Value = resp.json().await.unwrap();
        (
            body["host_id"].as_str().unwrap().parse().unwrap(),
            body["host_key"].as_str().unwrap().to_owned(),
        )
    }

    pub async fn poll(
        &self,
        host: Uuid,
        key: &str,
        known_generation: u64,
        acked: &[Uuid],
        wait: u32,
    ) -> Response {
        let body = poll_body(known_generation, acked);
        self.request(
            Method::POST,
            &format!("/v1/hosts/{host}/poll?wait={wait}"),
            Some(key),
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    pub async fn poll_json(&self, host: Uuid, key: &str, known_generation: u64) -> Value {
        let resp = self.poll(host, key, known_generation, &[], 0).await;
        assert_eq!(resp.status(), StatusCode::OK);
        resp.json().await.unwrap()
    }
}

pub fn report() -> StateReport {
    StateReport {
        schema: bosun_proto::report::SCHEMA.to_owned(),
        seq: 1,
        host: Some(HostMetrics {
            cpu_count: 4,
            cpu_usage: 0.1,
            memory_total_mib: 16_384,
            memory_used_mib: 2_048,
            disk_total_gib: 500,
            disk_used_gib: 50,
        }),
        guests: Vec::new(),
        storage: Vec::new(),
        last_backups: Vec::new(),
        last_restore_test: None,
        tunnel: None,
        versions: Versions {
            agent: "0.1.0".into(),
            controller: Some("1.4.2".into()),
            pve: Some("8.2.4".into()),
        },
        audit: Vec::new(),
        storage_recipient: None,
        pbs_key_fingerprint: None,
        tiers: Vec::new(),
        bulk_volumes: Vec::new(),
        restore_tests: Vec::new(),
        verifications: Vec::new(),
        host_health: None,
        data_plan: None,
        refused: Vec::new(),
        golden: None,
    }
}

pub fn poll_body(known_generation: u64, acked: &[Uuid]) -> Value {
    json!({
        "schema": "bosun.poll/v1",
        "known_generation": known_generation,
        "applied_generation": known_generation,
        "acked_jobs": acked,
        "report": report(),
    })
}

/// Sends a raw poll body; returns the status and the answer.
pub async fn poll_with(hub: &TestHub, host: Uuid, key: &str, body: &Value) -> (StatusCode, Value) {
    let resp = hub
        .request(
            Method::POST,
            &format!("/v1/hosts/{host}/poll?wait=0"),
            Some(key),
            Some(body.to_string().into_bytes()),
        )
        .await;
    let status = resp.status();
    (status, resp.json().await.unwrap())
}

pub fn desired() -> Value {
    serde_json::from_str(include_str!("../../../docs/proto/desired.json")).unwrap()
}

/// A job document for `host` as exact bytes (odd spacing and key order on purpose).
/// When the test's jobs were signed: the test's first call, whole seconds, so every job of one
/// test (one process) has the same validity and the same job's bytes never change.
fn signed_at() -> jiff::Timestamp {
    static AT: std::sync::LazyLock<jiff::Timestamp> = std::sync::LazyLock::new(|| {
        jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap()
    });
    *AT
}

/// A job document's bytes, valid from an hour before the test began to a day after (the hub
/// refuses an expired job at submission).
pub fn job_bytes(host: Uuid, job_id: Uuid) -> Vec<u8> {
    let at = signed_at();
    let (not_before, expires_at) = (
        at - jiff::SignedDuration::from_hours(1),
        at + jiff::SignedDuration::from_hours(24),
    );
    format!(
        "{{\"kind\":\"force-backup\",  \"schema\":\"bosun.job/v1\",\n \"job_id\":\"{job_id}\",\"target\":{{\"vmid\":101,\"host_id\":\"{host}\",\"guest_id\":\"0b6f4f2e-6c1a-4d6e-9a51-2f0c8d3e7a10\"}},\
         \"params\":{{}},\"nonce\":\"n0nce-{}\",\"not_before\":\"{not_before}\",\"expires_at\":\"{expires_at}\"}}\n",
        job_id.simple()
    )
    .into_bytes()
}

pub const SIGNATURE: &str =
    "-----BEGIN SSH SIGNATURE-----\nU1NIU0lHAAAAAQ==\n-----END SSH SIGNATURE-----\n";

pub fn signed_job(host: Uuid, job_id: Uuid) -> Value {
    serde_json::to_value(bosun_proto::job::SignedJob::new(
        &job_bytes(host, job_id),
        SIGNATURE,
    ))
    .unwrap()
}

pub async fn error_code(resp: Response) -> (StatusCode, String) {
    let status = resp.status();
    let body: Value = resp.json().await.unwrap();
    (status, body["code"].as_str().unwrap_or_default().to_owned())
}

/// A poll carrying `report` whole.
pub fn full(report: &StateReport) -> Value {
    json!({ "schema": "bosun.poll/v1", "report": report })
}

/// Sends poll `body` for `host` and asserts the hub took it without asking for a full report.
pub async fn send(hub: &TestHub, host: Uuid, key: &str, body: &Value) {
    let (status, answer) = poll_with(hub, host, key, body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["full_report"], false, "{answer}");
}

/// Sends what changed from `base` to `next` as a delta poll.
pub async fn send_delta(
    hub: &TestHub,
    host: Uuid,
    key: &str,
    base: &StateReport,
    next: &StateReport,
) {
    let delta = bosun_proto::delta::ReportDelta::between(base, base.seq, next, next.seq);
    send(
        hub,
        host,
        key,
        &json!({ "schema": "bosun.poll/v1", "delta": delta }),
    )
    .await;
}

/// The host's events, oldest first, as (kind, detail).
pub async fn host_events(hub: &TestHub, host: Uuid) -> Vec<(String, Value)> {
    let events: Vec<Value> = hub
        .admin(
            Method::GET,
            &format!("/v1/admin/events?host={host}&limit=1000"),
            None,
        )
        .await
        .json()
        .await
        .unwrap();
    // The API lists newest first; the tests read the host's story in order.
    events
        .into_iter()
        .rev()
        .map(|e| (e["kind"].as_str().unwrap().to_owned(), e["detail"].clone()))
        .collect()
}

/// The host's alerts of `GET /v1/admin/alerts`, oldest first, as (kind, message).
pub async fn host_alerts(hub: &TestHub, host: Uuid) -> Vec<(String, String)> {
    let alerts: Vec<Value> = hub
        .admin(Method::GET, "/v1/admin/alerts?limit=1000", None)
        .await
        .json()
        .await
        .unwrap();
    // The API lists newest first; the tests read the host's story in order.
    alerts
        .into_iter()
        .rev()
        .filter(|a| a["host_id"] == host.to_string())
        .map(|a| {
            (
                a["kind"].as_str().unwrap().to_owned(),
                a["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Asserts `message` names every one of `parts`.
pub fn names(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "`{part}` missing from: {message}");
    }
}

/// A webhook receiver on loopback: the bodies it got, in order.
#[derive(Clone, Default)]
pub struct Hook {
    bodies: Arc<parking_lot::Mutex<Vec<Value>>>,
}

impl Hook {
    /// Listens on 127.0.0.1:0; gives the receiver and its URL.
    pub async fn start() -> (Self, String) {
        let hook = Self::default();
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(Self::accept))
            .with_state(hook.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (hook, url)
    }

    async fn accept(
        axum::extract::State(hook): axum::extract::State<Hook>,
        axum::Json(body): axum::Json<Value>,
    ) -> axum::http::StatusCode {
        hook.bodies.lock().push(body);
        axum::http::StatusCode::NO_CONTENT
    }

    /// Waits until `count` bodies arrived (10 s at most), then gives them.
    pub async fn received(&self, count: usize) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let bodies = self.bodies.lock().clone();
            if bodies.len() >= count {
                return bodies;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "webhook received {} of {count}: {bodies:?}",
                bodies.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The value `bosun-hubd init` or `serve` printed after `name` (e.g. `fingerprint:`).
pub fn field<'a>(output: &'a str, name: &str) -> &'a str {
    output
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no `{name}` in {output}"))
}
