//! Failover: three `bosun-hubd` replicas (the real binary) over one PostgreSQL database under a
//! steady load of long-polling hosts and queued jobs; one replica is killed (SIGKILL) in the
//! middle. Every poll that got a 200 is in the database, every job reaches its host and is
//! acknowledged, no job is delivered again after its acknowledgement was answered, and the
//! hosts whose long-polls the dead replica held carry on through the others.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{PgDatabase, field};
use parking_lot::Mutex;
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

const HUBD: &str = env!("CARGO_BIN_EXE_bosun-hubd");
const HOSTS: usize = 24;
const REPLICAS: usize = 3;
const JOBS: usize = 48;

struct Replica {
    child: Child,
    url: String,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `bosun-hubd serve` on the shared database; waits for its address.
fn serve(data: &Path, store: &str, log: &Path) -> Replica {
    let child = Command::new(HUBD)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--silence-window",
            "3600",
            "--data",
        ])
        .arg(data)
        .args(["--store", store])
        .env("BOSUN_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut replica = Replica {
        child,
        url: String::new(),
    };
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(rest) = text.split("addr=").nth(1) {
            let addr = rest.split_whitespace().next().unwrap().to_owned();
            replica.url = format!("https://{addr}");
            return replica;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "replica did not start: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What the simulated hosts saw.
#[derive(Default)]
struct Seen {
    /// Audit sequence numbers of the polls answered 200, per host.
    answered: HashMap<Uuid, Vec<u64>>,
    /// Jobs whose acknowledgement a 200 answered.
    acked: HashSet<Uuid>,
    /// Jobs delivered after their acknowledgement was answered.
    redelivered: Vec<Uuid>,
    /// Jobs delivered at all.
    delivered: HashSet<Uuid>,
    /// Hosts answered by another replica after the kill, among those the dead one served.
    moved: HashSet<Uuid>,
}

fn poll_body(seq: u64, acked: &[Uuid]) -> Value {
    let mut report = serde_json::to_value(common::report()).unwrap();
    report["seq"] = seq.into();
    report["audit"] = json!([{
        "seq": seq, "at": "2026-11-23T00:00:00Z", "action": "load.poll", "detail": {}
    }]);
    json!({
        "schema": "bosun.poll/v1",
        "known_generation": 0,
        "applied_generation": 0,
        "acked_jobs": acked,
        "report": report,
    })
}

#[allow(clippy::too_many_arguments)]
async fn run_host(
    client: reqwest::Client,
    urls: Arc<Vec<String>>,
    dead: Arc<Mutex<Option<usize>>>,
    host: Uuid,
    key: String,
    first: usize,
    seen: Arc<Mutex<Seen>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut replica = first;
    let mut seq = 0u64;
    let mut to_ack: Vec<Uuid> = Vec::new();
    let mut unanswered_acks: Vec<Uuid> = Vec::new();
    loop {
        if stop.is_cancelled() && to_ack.is_empty() && unanswered_acks.is_empty() {
            return;
        }
        seq += 1;
        let acking: Vec<Uuid> = to_ack.iter().chain(&unanswered_acks).copied().collect();
        let wait = if stop.is_cancelled() { 0 } else { 2 };
        let resp = client
            .post(format!(
                "{}/v1/hosts/{host}/poll?wait={wait}",
                urls[replica]
            ))
            .bearer_auth(&key)
            .json(&poll_body(seq, &acking))
            .timeout(Duration::from_secs(20))
            .send()
            .await;
        let answer = match resp {
            Ok(resp) if resp.status() == StatusCode::OK => resp.json::<Value>().await.ok(),
            _ => None,
        };
        let Some(answer) = answer else {
            // The replica is gone (or the answer was lost): as a load balancer would, go to
            // another one. The acknowledgements go again.
            unanswered_acks = acking;
            to_ack.clear();
            replica = (replica + 1) % urls.len();
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let mut seen = seen.lock();
        seen.answered.entry(host).or_default().push(seq);
        if dead.lock().is_some_and(|d| d == first && replica != first) {
            seen.moved.insert(host);
        }
        seen.acked.extend(acking.iter().copied());
        unanswered_acks.clear();
        to_ack.clear();
        for job in answer["jobs"].as_array().into_iter().flatten() {
            let document = base64::Engine::decode(
                &base64::engine::general_purpose::STANDARD,
                job["document"].as_str().unwrap(),
            )
            .unwrap();
            let document: Value = serde_json::from_slice(&document).unwrap();
            let job_id: Uuid = document["job_id"].as_str().unwrap().parse().unwrap();
            if seen.acked.contains(&job_id) {
                seen.redelivered.push(job_id);
            }
            seen.delivered.insert(job_id);
            to_ack.push(job_id);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_under_load_loses_no_poll_and_no_job() {
    let db = PgDatabase::create();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = Command::new(HUBD)
        .args(["init", "--data"])
        .arg(&data)
        .args(["--store", &db.url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let fingerprint = field(&text, "fingerprint:").to_owned();
    let admin = field(&text, "admin token:").to_owned();
    let mut replicas: Vec<Option<Replica>> = (0..REPLICAS)
        .map(|i| {
            Some(serve(
                &data,
                &db.url,
                &dir.path().join(format!("replica{i}.log")),
            ))
        })
        .collect();
    let urls: Arc<Vec<String>> = Arc::new(
        replicas
            .iter()
            .map(|r| r.as_ref().unwrap().url.clone())
            .collect(),
    );
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(bosun_hubd::tls::pinned_client_config(&fingerprint).unwrap())
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();

    // Hosts enroll through the replicas in turn.
    let mut hosts = Vec::new();
    for i in 0..HOSTS {
        let url = &urls[i % REPLICAS];
        let token: Value = client
            .post(format!("{url}/v1/admin/enrollment-tokens"))
            .bearer_auth(&admin)
            .json(&json!({ "ttl_seconds": 600, "require_approval": false }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let enrolled: Value = client
            .post(format!("{url}/v1/enroll"))
            .json(
                &json!({ "schema": "bosun.enroll/v1", "token": token["token"],
                           "hostname": format!("pve{i}"), "agent_version": "0.1.0" }),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        hosts.push((
            enrolled["host_id"]
                .as_str()
                .unwrap()
                .parse::<Uuid>()
                .unwrap(),
            enrolled["host_key"].as_str().unwrap().to_owned(),
        ));
    }

    let seen = Arc::new(Mutex::new(Seen::default()));
    let dead = Arc::new(Mutex::new(None::<usize>));
    let stop = tokio_util::sync::CancellationToken::new();
    let mut tasks = Vec::new();
    for (i, (host, key)) in hosts.iter().enumerate() {
        tasks.push(tokio::spawn(run_host(
            client.clone(),
            urls.clone(),
            dead.clone(),
            *host,
            key.clone(),
            i % REPLICAS,
            seen.clone(),
            stop.clone(),
        )));
    }

    // Jobs are queued through whichever replica is up, while replica 1 is killed midway.
    let victim = 1;
    let mut queued = Vec::new();
    for n in 0..JOBS {
        if n == JOBS / 2 {
            // Long-polls are held on it right now: hosts wait up to 2 s per poll.
            replicas[victim].take();
            *dead.lock() = Some(victim);
        }
        let (host, _) = hosts[n % HOSTS];
        let job = Uuid::new_v4();
        let mut replica = n % REPLICAS;
        loop {
            if *dead.lock() == Some(replica) {
                replica = (replica + 1) % REPLICAS;
            }
            let resp = client
                .post(format!("{}/v1/admin/hosts/{host}/jobs", urls[replica]))
                .bearer_auth(&admin)
                .json(&common::signed_job(host, job))
                .send()
                .await;
            match resp {
                Ok(resp) if resp.status().is_success() => break,
                _ => replica = (replica + 1) % REPLICAS,
            }
        }
        queued.push((host, job));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.cancel();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("hosts settle")
            .unwrap();
    }

    let seen = std::mem::take(&mut *seen.lock());
    // No job lost, none delivered again once its acknowledgement was answered.
    for (host, job) in &queued {
        assert!(
            seen.delivered.contains(job),
            "job {job} for {host} never delivered"
        );
        assert!(seen.acked.contains(job), "job {job} never acknowledged");
    }
    assert!(
        seen.redelivered.is_empty(),
        "delivered after their ack: {:?}",
        seen.redelivered
    );
    // The hosts the dead replica served carried on through the others.
    let served_by_victim: Vec<Uuid> = hosts
        .iter()
        .enumerate()
        .filter(|(i, _)| i % REPLICAS == victim)
        .map(|(_, (h, _))| *h)
        .collect();
    for host in &served_by_victim {
        assert!(
            seen.moved.contains(host),
            "host {host} did not reconnect elsewhere"
        );
    }

    // Every poll answered 200 is in the database (its audit entry), and every job is acked.
    let (pg, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut answered_total = 0;
    for (host, _) in &hosts {
        // A row stands for its entry and the repeats counted on it (decision 0106).
        let rows = pg
            .query(
                "SELECT seq, COALESCE(last_seq, seq) FROM audit WHERE host_id = $1",
                &[&host.to_string()],
            )
            .await
            .unwrap();
        let stored: Vec<(i64, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        for seq in &seen.answered[host] {
            answered_total += 1;
            let seq = i64::try_from(*seq).unwrap();
            assert!(
                stored
                    .iter()
                    .any(|(first, last)| (*first..=*last).contains(&seq)),
                "host {host}: poll {seq} was answered 200 but is not stored"
            );
        }
    }
    let states = pg
        .query("SELECT state, COUNT(*) FROM jobs GROUP BY state", &[])
        .await
        .unwrap();
    let states: HashMap<String, i64> = states.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        states.get("acked").copied(),
        Some(i64::try_from(JOBS).unwrap()),
        "{states:?}"
    );
    assert!(
        answered_total > HOSTS * 4,
        "the hosts kept polling: {answered_total}"
    );
    println!(
        "failover: {answered_total} polls answered, {} jobs delivered and acked, {} hosts moved",
        queued.len(),
        seen.moved.len()
    );
    drop(replicas);
}
