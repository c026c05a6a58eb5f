//! `hub-bench --store postgres://… --replicas N`: N `bosun-hubd serve` processes over one
//! PostgreSQL database, the simulated hosts spread across them (host n polls replica n mod N,
//! as a TCP load balancer would spread connections), and the CPU the replicas and the
//! PostgreSQL server spent per 1000 polls. Polls carry full reports or, with `--reports delta`,
//! deltas as real agents send them (after one full report per host). With `--kill-after S`
//! replica 0 is killed (SIGKILL) S seconds into the fleet phase: its hosts go to the next
//! replica, a poll it failed is sent again there once, and jobs queued before the kill must
//! all reach their hosts.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bosun_hubd::clock::{Clock as _, SystemClock};
use bosun_hubd::secret::{self, SecretHash, SecretKind};
use bosun_hubd::store::{Enrollment, NewEnrollToken, StoreLocation};
use uuid::Uuid;

use super::agents::Fleet;
use super::{Args, Host};

/// Jobs queued before the kill in a failover run.
const FAILOVER_JOBS: usize = 100;

/// Most untimed rounds [`settle`] polls.
const MOST_SETTLING_ROUNDS: usize = 10;

/// Polls every host once a round, untimed and as fast as `concurrency` allows, until a round's
/// share of heap-only host-row updates is within a point of the round before's: the rows have
/// settled on the pages they stay on. Until then an update that finds no room on its row's
/// page moves the row, writes its index entries and more WAL, and a timed phase that starts
/// there pays for the priming (the stalls of its first seconds). What settles the table is how
/// many times each row was rewritten, not the time, so the rounds need not keep the interval
/// (a running fleet gets there in hours).
async fn settle(fleet: &Arc<Fleet>, url: &str, concurrency: usize) -> anyhow::Result<()> {
    let mut last: Option<f64> = None;
    for round in 1..=MOST_SETTLING_ROUNDS {
        let before = super::pg_stats::ServerStats::read(url).await?;
        let started = Instant::now();
        let next = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..concurrency.max(1) {
            let (fleet, next, failed) = (fleet.clone(), next.clone(), failed.clone());
            workers.spawn(async move {
                loop {
                    let n =
                        usize::try_from(next.fetch_add(1, Ordering::Relaxed)).unwrap_or(usize::MAX);
                    if n >= fleet.hosts.len() {
                        return;
                    }
                    if fleet.clone().poll(n).await.is_none() {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        while workers.join_next().await.is_some() {}
        let took = started.elapsed();
        // Backends report their counts at most once a second.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let share = super::pg_stats::ServerStats::read(url)
            .await?
            .heap_only_share(&before);
        println!(
            "settling: round {round}, every host once in {:.1}s untimed ({} failed): {share:.1} % of host-row updates heap-only",
            took.as_secs_f64(),
            failed.load(Ordering::Relaxed),
        );
        if last.is_some_and(|last| (share - last).abs() < 1.0) {
            return Ok(());
        }
        last = Some(share);
    }
    println!("settling: still moving after {MOST_SETTLING_ROUNDS} rounds; timing anyway");
    Ok(())
}

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

pub(crate) async fn run(
    args: &Args,
    url: &str,
    (dir, hub_runtime): (&Path, &tokio::runtime::Handle),
) -> anyhow::Result<()> {
    let location = StoreLocation::parse(url).map_err(anyhow::Error::msg)?;
    let report = bosun_hubd::init_store(dir, vec!["localhost".into()], false, &location)
        .context("initializing the hub (the database must be empty)")?;
    let admin = report.admin_token.expose().to_owned();
    let fingerprint = report
        .fingerprint
        .context("a self-signed certificate was made")?;
    let hubd = std::env::current_exe()?.with_file_name("bosun-hubd");
    anyhow::ensure!(
        hubd.exists(),
        "{} is missing: build it with the bench (cargo build --release -p bosun-hubd -p bosun-hub-bench)",
        hubd.display()
    );
    let mut replicas = Vec::new();
    for n in 0..args.replicas.max(1) {
        replicas.push(Some(serve(
            &hubd,
            (dir, url),
            &dir.join(format!("replica{n}.log")),
            args.hub_threads,
        )?));
    }
    let urls: Arc<Vec<String>> =
        Arc::new(replicas.iter().flatten().map(|r| r.url.clone()).collect());
    println!(
        "store: {} with {} replicas",
        location.describe(dir),
        urls.len()
    );

    let started = Instant::now();
    let hosts = enroll(location, dir, args.hosts).await?;
    println!(
        "enrolled {} hosts in {:.1}s",
        hosts.len(),
        started.elapsed().as_secs_f64()
    );
    let client = super::client(&fingerprint)?;
    // The failover check's polls: a full report each.
    let body = bytes::Bytes::from(super::agents::full_poll_body()?.into_bytes());

    let failover = args.kill_after.is_some();
    let mut jobs = Vec::new();
    if failover {
        // Queued before the kill, for hosts of every replica: each must still be delivered.
        for n in 0..FAILOVER_JOBS.min(hosts.len()) {
            let host = &hosts[(n * 7919) % hosts.len()];
            let job = Uuid::new_v4();
            let resp = client
                .post(format!("{}/v1/admin/hosts/{}/jobs", urls[0], host.id))
                .bearer_auth(&admin)
                .json(&job_envelope(host.id, job))
                .send()
                .await?;
            anyhow::ensure!(
                resp.status().is_success(),
                "queueing a job: {}",
                resp.status()
            );
            jobs.push((host.id, host.key.clone(), job));
        }
    }
    let ids: Vec<Uuid> = hosts.iter().map(|h| h.id).collect();
    let fleet = Arc::new(Fleet::new(
        hosts,
        args.reports,
        client.clone(),
        urls.to_vec(),
    )?);
    if !args.first_contact {
        super::prime(&fleet, args.concurrency, args.interval).await?;
        settle(&fleet, url, args.concurrency).await?;
    }

    if let Some(percent) = args.silent {
        let phase = Duration::from_secs(args.duration);
        return super::silent::run(fleet, &ids, url, percent, args.interval, phase).await;
    }

    // The enrolling store's connections close on a thread of their own: let them go before
    // the server's CPU is counted (an exited backend's CPU leaves the sum).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let postgres = PostgresCpu::find(url).await;
    let pg_before = postgres.as_ref().map(PostgresCpu::seconds);
    // The replicas that live through the run (replica 0 is killed in a failover run).
    let survivors: Vec<u32> = replicas
        .iter()
        .flatten()
        .skip(usize::from(failover))
        .map(|r| r.child.id())
        .collect();
    let replicas_before = cpu_seconds(&survivors);
    let stats_before = super::pg_stats::ServerStats::read(url).await?;

    let rate = args.hosts as f64 / args.interval;
    println!("timing: the fleet for {}s", args.duration);
    let fleet_latencies = {
        let killer = args.kill_after.map(|after| {
            let mut victim = replicas[0].take();
            let fleet = fleet.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(after)).await;
                if let Some(victim) = victim.as_mut() {
                    let _ = victim.child.kill();
                }
                fleet.take_down_first();
                println!("failover: replica 0 killed {after}s into the fleet phase");
                drop(victim);
            })
        });
        let next = AtomicU64::new(0);
        let polling = fleet.clone();
        let latencies = super::open_loop(rate, Duration::from_secs(args.duration), move || {
            let n = usize::try_from(next.fetch_add(1, Ordering::Relaxed)).unwrap_or(0);
            polling.clone().poll(n)
        })
        .await;
        if let Some(killer) = killer {
            killer.await?;
        }
        latencies
    };
    let polls_ok = fleet_latencies.iter().filter(|l| l.is_some()).count();
    let failed = fleet_latencies.len() - polls_ok;
    println!(
        "fleet: {} hosts polling every {}s across {} replicas",
        args.hosts,
        args.interval,
        urls.len()
    );
    super::report_worst_each_second("hub polls", rate, &fleet_latencies);
    super::report_latencies("hub polls", rate, args.duration, fleet_latencies);
    let replicas_cpu = cpu_seconds(&survivors) - replicas_before;
    let stats = super::pg_stats::ServerStats::read(url).await?;
    let per_1k = |seconds: f64| seconds * 1000.0 * 1000.0 / polls_ok.max(1) as f64;
    let what = if failover {
        "the surviving replicas"
    } else {
        "replicas"
    };
    match (postgres.as_ref(), pg_before) {
        (Some(pg), Some(before)) => {
            let pg_cpu = pg.seconds() - before;
            let total = per_1k(replicas_cpu + pg_cpu);
            println!(
                "cpu per 1k polls: {what} {:.0} ms, postgres {:.0} ms, total {total:.0} ms ({polls_ok} polls)",
                per_1k(replicas_cpu),
                per_1k(pg_cpu),
            );
            if !failover {
                // The floor in the same run: a bare hello-world at the fleet's rate.
                let hello = super::hello_world(&client, rate, args, 0, (dir, hub_runtime)).await?;
                println!(
                    "ratio: replicas + postgres {total:.0} ms per 1k polls, {:.1}x the hello-world's {:.0} ms per 1k requests",
                    total / hello.cpu_per_1k_ms.max(f64::MIN_POSITIVE),
                    hello.cpu_per_1k_ms
                );
            }
        }
        _ => println!(
            "cpu per 1k polls: {what} {:.0} ms (the PostgreSQL server is not on this machine)",
            per_1k(replicas_cpu)
        ),
    }
    println!("{}", stats.since(&stats_before, polls_ok));
    if failover {
        // Every job queued before the kill reaches its host through a live replica.
        let mut delivered = 0;
        for (host, key, job) in &jobs {
            let answer: serde_json::Value = client
                .post(format!("{}/v1/hosts/{host}/poll", urls[1 % urls.len()]))
                .bearer_auth(key)
                .body(body.clone())
                .send()
                .await?
                .json()
                .await?;
            let job_text = job.to_string();
            if answer["jobs"].as_array().into_iter().flatten().any(|j| {
                j["document"].as_str().is_some_and(|d| {
                    base64::Engine::decode(&base64::engine::general_purpose::STANDARD, d)
                        .is_ok_and(|bytes| String::from_utf8_lossy(&bytes).contains(&job_text))
                })
            }) {
                delivered += 1;
            }
        }
        println!(
            "failover: {} polls answered 200, {} sent again to the next replica, {failed} lost; jobs: {} queued, {delivered} delivered after the kill, {} lost",
            polls_ok,
            fleet.retried(),
            jobs.len(),
            jobs.len() - delivered
        );
    }
    drop(replicas);
    Ok(())
}

/// A signed-job envelope (the hub stores and forwards it; the bench's hosts never run it).
fn job_envelope(host: Uuid, job: Uuid) -> serde_json::Value {
    let now = jiff::Timestamp::now();
    let document = serde_json::json!({
        "schema": "bosun.job/v1", "job_id": job, "kind": "force-backup",
        "target": { "vmid": 101, "host_id": host, "guest_id": Uuid::new_v4() },
        "params": {}, "nonce": job.simple().to_string(),
        "not_before": now - jiff::SignedDuration::from_hours(1),
        "expires_at": now + jiff::SignedDuration::from_hours(24),
    })
    .to_string();
    serde_json::to_value(bosun_proto::job::SignedJob::new(
        document.as_bytes(),
        "-----BEGIN SSH SIGNATURE-----\nU1NIU0lHAAAAAQ==\n-----END SSH SIGNATURE-----\n",
    ))
    .unwrap_or_default()
}

/// Starts one replica of the hub over `url`, with `threads` runtime workers when given (tokio
/// reads `TOKIO_WORKER_THREADS`; by default one a core).
fn serve(
    hubd: &Path,
    (dir, url): (&Path, &str),
    log: &Path,
    threads: Option<u16>,
) -> anyhow::Result<Replica> {
    let mut command = Command::new(hubd);
    if let Some(threads) = threads {
        command.env("TOKIO_WORKER_THREADS", threads.to_string());
    }
    let child = command
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir)
        .args(["--store", url])
        .env("BOSUN_LOG", "warn,bosun_hubd::hub=info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .spawn()
        .with_context(|| format!("starting {}", hubd.display()))?;
    let mut replica = Replica {
        child,
        url: String::new(),
    };
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(rest) = text.split("addr=").nth(1) {
            let addr = rest.split_whitespace().next().unwrap_or_default();
            replica.url = format!("https://{addr}");
            return Ok(replica);
        }
        if let Some(status) = replica.child.try_wait()? {
            anyhow::bail!("replica exited ({status}): {text}");
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "replica did not start: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Enrolls hosts straight through a store of the bench's own, on eight threads.
async fn enroll(location: StoreLocation, dir: &Path, count: usize) -> anyhow::Result<Vec<Host>> {
    let dir: PathBuf = dir.to_owned();
    tokio::task::spawn_blocking(move || {
        let store = location.open(&dir)?;
        let now_ms = SystemClock.now_ms();
        let threads = 8;
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let store = store.clone();
                    scope.spawn(move || {
                        let mut hosts = Vec::new();
                        for n in (t..count).step_by(threads) {
                            let (token, token_hash) = secret::mint(SecretKind::Enrollment);
                            store.create_enroll_token(NewEnrollToken {
                                hash: token_hash,
                                created_ms: now_ms,
                                expires_ms: now_ms + 3_600_000,
                                require_approval: false,
                                note: None,
                                restore_host: None,
                            })?;
                            let (key, key_hash) = secret::mint(SecretKind::HostKey);
                            let id = Uuid::new_v4();
                            store.enroll(Enrollment {
                                token_hash: SecretHash::of(token.expose()),
                                host_id: id,
                                key_hash,
                                hostname: format!("pve-{n:06}"),
                                agent_version: "0.1.0".into(),
                                pve_version: None,
                                poll_interval_s: 30,
                                now_ms,
                            })?;
                            hosts.push((n, Host::new(id, key.expose().to_owned())));
                        }
                        Ok::<_, anyhow::Error>(hosts)
                    })
                })
                .collect();
            let mut all = Vec::with_capacity(count);
            for worker in workers {
                all.extend(
                    worker
                        .join()
                        .map_err(|_| anyhow::anyhow!("an enrolling thread panicked"))??,
                );
            }
            all.sort_by_key(|(n, _)| *n);
            Ok(all.into_iter().map(|(_, host)| host).collect())
        })
    })
    .await?
}

/// User + system CPU seconds of processes (clock ticks of 1/100 s, Linux's USER_HZ).
fn cpu_seconds(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|pid| stat(*pid)).map(|s| s.1).sum()
}

/// (parent pid, CPU seconds) of a process, from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(u32, f64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: count fields after it.
    let rest = text.get(text.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((ppid, (utime + stime) / 100.0))
}

/// The PostgreSQL server's processes, when it runs on this machine: the postmaster (the
/// parent of a backend of ours) and its children.
struct PostgresCpu {
    postmaster: u32,
}

impl PostgresCpu {
    async fn find(url: &str) -> Option<Self> {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .ok()?;
        let driver = tokio::spawn(connection);
        let backend: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .ok()?
            .get(0);
        let postmaster = stat(u32::try_from(backend).ok()?)?.0;
        drop(client);
        driver.abort();
        Some(Self { postmaster })
    }

    fn seconds(&self) -> f64 {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return 0.0;
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| Some((pid, stat(pid)?)))
            .filter(|(pid, (ppid, _))| *pid == self.postmaster || *ppid == self.postmaster)
            .map(|(_, (_, cpu))| cpu)
            .sum()
    }
}
