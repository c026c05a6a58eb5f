//! Shared harness of the local-API tests: a fast `bosun-pvesim`, running guests restored from
//! its golden archive, a real journal and queue, and the local API served over TLS on
//! 127.0.0.1:0 with a client that pins the leaf's SHA-256.

#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(clippy::unwrap_used, reason = "test harness: a panic is a failed test")]

pub mod fake_helper;

use std::sync::Arc;
use std::time::Duration;

use bosun_agentd::clock::SystemClock;
use bosun_agentd::data::backup::{BackupConfig, BackupService};
use bosun_agentd::data::storage::StorageFacts;
use bosun_agentd::guests::controller::ControllerBoard;
use bosun_agentd::guests::credentials::cert::LocalApiCert;
use bosun_agentd::guests::credentials::token::mint_token;
use bosun_agentd::guests::localapi::{
    self, LocalApi, LocalApiConfig, LocalApiParts, LocalApiTls, RestoreTestBoard,
};
use bosun_agentd::guests::queue::GuestQueue;
use bosun_agentd::ops::journal::{JournalHandle, TokenHash};
use bosun_proto::desired::{BackupPolicy, Retention};
use bosun_pve::{
    ContentType, GuestOps, Op, Pve, PveClient, PveConfig, PveOps, RestoreRequest, RetryPolicy,
    StorageCreate, StorageId, StorageKind, TlsTrust, Vmid, VolumeId,
};
use bosun_pvesim::{SimConfig, SimHandle, Simulator};
use secrecy::ExposeSecret;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// One guest with its token.
#[derive(Debug, Clone)]
pub struct TestGuest {
    pub guest_id: String,
    pub vmid: u32,
    pub token: String,
}

pub struct Harness {
    pub sim: SimHandle,
    pub pve: Arc<PveClient>,
    pub journal: JournalHandle,
    pub queue: GuestQueue,
    pub api: LocalApi,
    pub backups: BackupService,
    pub board: RestoreTestBoard,
    pub controllers: ControllerBoard,
    pub tls: LocalApiTls,
    pub policy: watch::Sender<Option<BackupPolicy>>,
    /// The desired state held to the plan, as the plan gate would publish it: what
    /// `GET /v1/protection` judges against.
    pub desired: watch::Sender<Option<Arc<bosun_agentd::data::desired::DesiredSnapshot>>>,
    /// What the storage watcher would publish: the classes `GET /v1/storage` answers with.
    pub storage: watch::Sender<StorageFacts>,
    pub base: String,
    pub fingerprint: String,
    pub client: reqwest::Client,
    pub guests: Vec<TestGuest>,
    pub dir: tempfile::TempDir,
    /// Proves and checks archives as the agent does: files read by the real helper's verb
    /// beneath the simulator's files, PBS archives bound with a K of the harness's own.
    pub prover: bosun_agentd::data::backup::ArchiveProver,
    /// That K.
    pub pbs_key: bosun_agentd::trust::keys::pbs_key::PbsKeySource,
    stop: CancellationToken,
    server: tokio::task::JoinHandle<()>,
}

/// Reads archive files as the helper does, with the real verb, beneath `roots`.
#[derive(Debug)]
pub struct VerbReader {
    pub roots: Vec<std::path::PathBuf>,
}

impl bosun_agentd::data::backup::ArchiveReader for VerbReader {
    fn hash<'a>(
        &'a self,
        dir: &'a bosun_proto::helper::DumpDir,
        name: &'a bosun_proto::helper::ArchiveName,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = Result<(String, u64), bosun_agentd::data::backup::ArchiveReadError>,
                > + Send
                + 'a,
        >,
    > {
        Box::pin(async move {
            let config = bosun_helper::config::Config {
                backup_roots: self.roots.clone(),
                ..bosun_helper::config::Config::default()
            };
            let request =
                bosun_proto::helper::Request::HashArchive(bosun_proto::helper::HashArchive {
                    archive: name.clone(),
                    dir: Some(dir.clone()),
                    rate_mib_s: None,
                });
            match bosun_helper::verbs::act(&request, &config) {
                Ok(bosun_proto::helper::Output::ArchiveHashed { sha256, size, .. }) => {
                    Ok((sha256, size))
                }
                Ok(other) => Err(bosun_agentd::data::backup::ArchiveReadError::Answer {
                    answer: format!("{other:?}"),
                }),
                Err(e) => Err(bosun_agentd::data::backup::ArchiveReadError::Reader(
                    Box::new(e),
                )),
            }
        })
    }
}

/// How a harness is built.
#[derive(Debug, Clone)]
pub struct Options {
    pub guests: u32,
    /// Guests whose root disk lives on a dir storage that cannot snapshot.
    pub dir_guests: u32,
    pub config: LocalApiConfig,
    /// The storage facts the API starts with.
    pub storage: StorageFacts,
    pub sim: SimConfig,
    /// The journal's clock (default: the system's).
    pub journal_clock: Option<bosun_agentd::clock::SharedClock>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            guests: 2,
            dir_guests: 0,
            config: LocalApiConfig {
                rate_per_s: 1000,
                burst: 1000,
                ..LocalApiConfig::default()
            },
            storage: StorageFacts::default(),
            sim: SimConfig::fast(),
            journal_clock: None,
        }
    }
}

pub fn guest_id(n: u32) -> String {
    format!("0195a0e0-0000-7000-8000-{n:012}")
}

pub fn daily_policy(schedule: &str, grace: u32) -> BackupPolicy {
    BackupPolicy {
        schedule: schedule.to_owned(),
        retention: Retention::default(),
        quiesce_grace_minutes: grace,
        target: None,
        further_tiers: Vec::new(),
        floor: None,
    }
}

impl Harness {
    pub async fn start() -> Self {
        Self::start_with(Options::default()).await
    }

    pub async fn start_with(options: Options) -> Self {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let mut sim_config = options.sim.clone();
        sim_config.archive_files = true;
        let sim = Simulator::start(sim_config, listener)
            .await
            .expect("simulator starts");
        let endpoint = sim.endpoint().clone();
        let pve = Arc::new(
            PveClient::new(PveConfig {
                base_url: endpoint.url.parse().expect("sim url"),
                node: bosun_pve::NodeName::new(endpoint.node.clone()).expect("node"),
                token_id: endpoint.tokens.agent.id.clone(),
                token_secret: endpoint.tokens.agent.secret.clone().into(),
                trust: TlsTrust::PinnedSha256(endpoint.fingerprint.clone()),
                policy: RetryPolicy::fast(),
            })
            .expect("pve client"),
        );
        if options.dir_guests > 0 {
            pve.create_storage(&StorageCreate {
                storage: StorageId::new("slowdir").unwrap(),
                kind: StorageKind::Dir {
                    path: "/srv/slowdir".to_owned(),
                    content: vec![ContentType::Rootdir, ContentType::Backup],
                    is_mountpoint: false,
                },
            })
            .await
            .expect("dir storage");
        }
        let mut guests = Vec::new();
        let dir = tempfile::tempdir().expect("tempdir");
        let journal_clock = options
            .journal_clock
            .clone()
            .unwrap_or_else(SystemClock::shared);
        let journal = JournalHandle::open(&dir.path().join("journal.db"), journal_clock)
            .await
            .expect("journal opens");
        let total = options.guests + options.dir_guests;
        for n in 0..total {
            let vmid = 101 + n;
            let storage = if n < options.guests {
                "local-lvm"
            } else {
                "slowdir"
            };
            let mut request = RestoreRequest::new(
                Vmid::new(vmid).unwrap(),
                VolumeId::new(endpoint.golden_volid.clone()).unwrap(),
                StorageId::new(storage).unwrap(),
            );
            request.start = true;
            request.unique = true;
            let upid = pve.restore_ct(&request).await.expect("restore starts");
            pve.wait_task(Op::RestoreCt, &upid)
                .await
                .expect("restore ends");
            if sim.guest_running(vmid) != Some(true) {
                let upid = pve.start_ct(Vmid::new(vmid).unwrap()).await.expect("start");
                pve.wait_task(Op::StartCt, &upid).await.expect("started");
            }
            let token = mint_token();
            journal
                .store_token_hash(guest_id(n + 1), vmid, TokenHash::of(&token))
                .await
                .expect("token stored");
            guests.push(TestGuest {
                guest_id: guest_id(n + 1),
                vmid,
                token: token.expose_secret().to_owned(),
            });
        }
        let ops: Arc<dyn GuestOps> = PveOps::shared(pve.clone());
        let pbs_key = bosun_agentd::trust::keys::pbs_key::PbsKeySource::new(dir.path(), true);
        let reader = VerbReader {
            roots: sim.files_root().into_iter().collect(),
        };
        let prover = bosun_agentd::data::backup::ArchiveProver::new(
            ops.clone(),
            Some(Arc::new(reader)),
            Some(pbs_key.clone()),
            journal.clone(),
        );
        let queue = GuestQueue::new(4);
        let clock = SystemClock::shared();
        let mut backup_config = BackupConfig::new(StorageId::new("local").unwrap());
        backup_config.poll_interval = Duration::from_millis(10);
        backup_config.time_zone = jiff::tz::TimeZone::UTC;
        let backups = BackupService::new(
            ops.clone(),
            journal.clone(),
            queue.clone(),
            clock.clone(),
            backup_config,
        );
        let (policy, policy_rx) = watch::channel(None);
        let (desired, desired_rx) = watch::channel(None);
        let (storage, storage_rx) = watch::channel(options.storage.clone());
        let board = RestoreTestBoard::new();
        let controllers = ControllerBoard::new();
        let api = LocalApi::new(LocalApiParts {
            ops,
            journal: journal.clone(),
            queue: queue.clone(),
            backups: backups.clone(),
            policy: policy_rx,
            desired: desired_rx,
            storage: storage_rx,
            restore_tests: board.clone(),
            controllers: controllers.clone(),
            consent: bosun_agentd::trust::break_glass::consent::ConsentBook::open(
                dir.path().join("consent.json"),
                journal.clone(),
                clock.clone(),
            )
            .await,
            clock,
            config: options.config.clone(),
        });
        let cert = LocalApiCert::load_or_create(dir.path(), &["127.0.0.1".to_owned()])
            .expect("certificate");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let base = format!("https://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        let tls = LocalApiTls::new(&cert).expect("tls configuration");
        let server = {
            let api = api.clone();
            let tls = tls.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                localapi::serve(listener, &tls, api, stop.cancelled_owned())
                    .await
                    .expect("local api serves");
            })
        };
        let fingerprint = cert.fingerprint().to_owned();
        let client = pinned_client(&fingerprint);
        Self {
            sim,
            pve,
            journal,
            queue,
            api,
            backups,
            board,
            controllers,
            tls,
            policy,
            desired,
            storage,
            base,
            fingerprint,
            client,
            guests,
            dir,
            prover,
            pbs_key,
            stop,
            server,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn guest(&self, n: usize) -> &TestGuest {
        &self.guests[n]
    }

    /// A GET with guest `n`'s token.
    pub async fn get(&self, n: usize, path: &str) -> (u16, serde_json::Value) {
        let resp = self
            .client
            .get(self.url(path))
            .bearer_auth(&self.guests[n].token)
            .send()
            .await
            .expect("request sent");
        read(resp).await
    }

    /// A POST of `body` with guest `n`'s token.
    pub async fn post(
        &self,
        n: usize,
        path: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let resp = self
            .client
            .post(self.url(path))
            .bearer_auth(&self.guests[n].token)
            .json(&body)
            .send()
            .await
            .expect("request sent");
        read(resp).await
    }

    /// A DELETE of `path` with guest `n`'s token.
    pub async fn delete(&self, n: usize, path: &str) -> (u16, serde_json::Value) {
        let resp = self
            .client
            .delete(self.url(path))
            .bearer_auth(&self.guests[n].token)
            .send()
            .await
            .expect("request sent");
        read(resp).await
    }

    /// Requests that reached the simulator for `vmid`'s paths.
    pub fn sim_calls_for(&self, vmid: u32) -> Vec<String> {
        let needle = format!("/{vmid}");
        self.sim
            .requests()
            .into_iter()
            .filter(|r| {
                r.path.contains(&format!("/lxc{needle}"))
                    || r.params
                        .iter()
                        .any(|(k, v)| k == "vmid" && *v == vmid.to_string())
            })
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }

    /// Polls `/v1/backup/status` until the phase is terminal; returns every phase seen.
    pub async fn follow_backup(&self, n: usize) -> (Vec<String>, serde_json::Value) {
        let mut phases: Vec<String> = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = self.get(n, "/v1/backup/status").await;
            assert_eq!(status, 200, "{body}");
            let phase = body["run"]["phase"].as_str().unwrap_or("none").to_owned();
            if phases.last() != Some(&phase) {
                phases.push(phase.clone());
            }
            if phase == "done" || phase == "failed" {
                return (phases, body["run"].clone());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "backup never ended: {phases:?}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Stops the local API server (the simulator and the journal stay up).
    pub fn stop_api(&self) {
        self.stop.cancel();
    }

    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.server).await;
        self.queue.close();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.queue.wait_idle()).await;
        self.sim.shutdown().await;
    }
}

pub async fn read(resp: reqwest::Response) -> (u16, serde_json::Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (status, body)
}

/// A client that accepts exactly the leaf whose SHA-256 is `fingerprint` (64 hex digits).
pub fn pinned_client(fingerprint: &str) -> reqwest::Client {
    let config = bosun_pin::client_config(fingerprint).expect("a valid fingerprint");
    reqwest::Client::builder()
        .tls_backend_preconfigured(config)
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client builds")
}

/// The golden check of a host whose helper built the simulator's golden archive: journaled
/// with its hash, and hashed again through the fake helper before each restore.
pub async fn golden_check(
    h: &Harness,
    helper: &fake_helper::FakeHelper,
) -> Arc<bosun_agentd::guests::reconcile::golden::GoldenCheck> {
    let endpoint = h.sim.endpoint();
    helper.set_archive(&endpoint.golden_volid, &endpoint.golden_sha256);
    h.journal
        .record_golden(
            endpoint.golden_volid.clone(),
            endpoint.golden_sha256.clone(),
            bosun_agentd::ops::journal::GoldenSource::Built,
        )
        .await
        .unwrap();
    h.journal
        .mark_golden_verified(endpoint.golden_volid.clone(), 1_000, serde_json::json!({}))
        .await
        .unwrap();
    Arc::new(bosun_agentd::guests::reconcile::golden::GoldenCheck::new(
        h.journal.clone(),
        Some(bosun_agentd::links::helper::HelperClient::socket(
            &helper.socket,
        )),
        h.dir.path().join("allowed_signers"),
        uuid::Uuid::new_v4(),
        SystemClock::shared(),
    ))
}

/// Records `vmid` in the journal as the guest `guest_id` this agent created (one finished
/// provision operation), as provisioning would have.
pub async fn record_own_guest(journal: &JournalHandle, guest_id: &str, vmid: u32) {
    use bosun_agentd::ops::journal::{NewOperation, OpStatus};
    use bosun_agentd::ops::operation::OpKind;
    let op = journal
        .begin_operation(NewOperation {
            kind: OpKind::Provision,
            guest_id: Some(guest_id.to_owned()),
            vmid: Some(vmid),
            job_id: None,
            request_id: None,
        })
        .await
        .unwrap();
    journal
        .record_created(
            op,
            vmid,
            Some(guest_id.to_owned()),
            bosun_proto::desired::GuestKind::Lxc,
        )
        .await
        .unwrap();
    journal
        .finish_operation(op, OpStatus::Done, None)
        .await
        .unwrap();
}

/// A real vzdump of `vmid` to `storage`, journaled as the agent's own successful backup of
/// `guest_id`; gives the archive.
pub async fn journaled_backup(
    pve: &PveClient,
    journal: &JournalHandle,
    prover: &bosun_agentd::data::backup::ArchiveProver,
    guest_id: &str,
    vmid: u32,
    storage: &str,
) -> String {
    use bosun_agentd::ops::journal::{BackupOutcome, NewOperation};
    use bosun_agentd::ops::operation::OpKind;
    // Every run of the agent's tags the guest's config before its vzdump (decision 0052), so
    // the archive's content names its guest.
    let ops = PveOps::shared(Arc::new(pve.clone()));
    bosun_agentd::data::backup::content::mark(
        ops.as_ref(),
        guest_id,
        Vmid::new(vmid).unwrap(),
        bosun_proto::desired::GuestKind::Lxc,
    )
    .await
    .expect("the guest's config is tagged");
    let request =
        bosun_pve::VzdumpRequest::new(Vmid::new(vmid).unwrap(), StorageId::new(storage).unwrap());
    let volid = pve.backup_ct(&request).await.unwrap().volid;
    let listed = pve
        .list_content(
            &StorageId::new(storage).unwrap(),
            bosun_pve::ContentFilter {
                content: Some(ContentType::Backup),
                vmid: Some(Vmid::new(vmid).unwrap()),
            },
        )
        .await
        .unwrap();
    let item = listed.iter().find(|i| i.volid == volid);
    let proof = prover
        .prove(guest_id, Vmid::new(vmid).unwrap(), &volid, item)
        .await
        .expect("the archive is proven");
    let op = journal
        .begin_operation(NewOperation {
            kind: OpKind::Backup,
            guest_id: Some(guest_id.to_owned()),
            vmid: Some(vmid),
            job_id: None,
            request_id: None,
        })
        .await
        .unwrap();
    journal
        .finish_backup(
            op,
            BackupOutcome {
                storage: storage.to_owned(),
                ok: true,
                archive: Some(volid.clone()),
                proof: Some(proof),
                ..BackupOutcome::default()
            },
            None,
        )
        .await
        .unwrap();
    volid
}
