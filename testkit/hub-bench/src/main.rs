//! Load generator: N simulated hosts polling a real `bosun-hubd` on loopback at an interval,
//! then the hub's and a bare axum hello-world's maximum request rates over the same TLS.
//!
//! `cargo run --release -p bosun-hub-bench -- --hosts 10000 --interval 30`
//! (`--reports delta`: as real agents, a full report per host first, then change-only deltas).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bosun_hubd::clock::{Clock as _, SystemClock};
use bosun_hubd::secret::{self, SecretKind};
use bosun_hubd::{Hub, HubConfig};
use clap::Parser;
use uuid::Uuid;

mod agents;
mod cpu;
mod pg_stats;

use agents::{Fleet, Host, Reports};

#[derive(Debug, Parser)]
#[command(about = "Bosun hub load generator")]
struct Args {
    /// Simulated hosts.
    #[arg(long, default_value_t = 10_000)]
    hosts: usize,
    /// Poll interval of each host, seconds.
    #[arg(long, default_value_t = 30.0)]
    interval: f64,
    /// Length of the fleet phase, seconds.
    #[arg(long, default_value_t = 20)]
    duration: u64,
    /// Length of each maximum-rate phase, seconds.
    #[arg(long, default_value_t = 8)]
    saturate: u64,
    /// Worker threads of the hub's runtime, or with `--store` of each replica's (default: one a
    /// core, as `bosun-hubd` runs); the load generator keeps one a core.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    hub_threads: Option<u16>,
    /// Concurrent requests in the maximum-rate phases (HTTP/1.1 keep-alive connections).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// What each poll carries: `full` sends the whole report every time; `delta` sends each
    /// host's full report once (before the timed phases) and then change-only deltas
    /// numbered per host, as real agents do.
    #[arg(long, value_enum, default_value_t = Reports::Full)]
    reports: Reports,
    /// Send no report before the timed phases, so nearly every poll of the fleet phase is a
    /// host's first (100,000 hosts adopted within one interval: each first report stores its
    /// host's report and opens its alerts). By default every host reports once before, as the
    /// hosts of a running or restarted hub have.
    #[arg(long)]
    first_contact: bool,
    /// Run `--replicas` `bosun-hubd` processes over this PostgreSQL database (an empty one)
    /// and spread the hosts across them; only the fleet phase runs.
    #[arg(long, value_name = "postgres://…")]
    store: Option<String>,
    /// Hub replicas over `--store`.
    #[arg(long, default_value_t = 3, requires = "store")]
    replicas: usize,
    /// Kill replica 0 this many seconds into the fleet phase (needs `--store`).
    #[arg(long, value_name = "SECS", requires = "store")]
    kill_after: Option<u64>,
    /// This percentage of the hosts goes silent at once (needs `--store`): the fleet phase
    /// reports the others' polls while the hub's sweep finds the silent ones overdue.
    #[arg(long, value_name = "PERCENT", requires = "store", value_parser = clap::value_parser!(u8).range(1..100))]
    silent: Option<u8>,
    /// Write every host's history bucket this many seconds into the fleet phase, as the hub
    /// does when a five-minute bucket ends while the fleet polls, instead of after the
    /// maximum-rate phase; the worst poll of each second shows what the write held back (and
    /// the fleet's CPU per poll then includes the write's).
    #[arg(long, value_name = "SECS", conflicts_with = "store")]
    history_at: Option<u64>,
}

mod replicas;
mod silent;

fn main() -> anyhow::Result<()> {
    bosun_hubd::install_crypto_provider();
    let args = Args::parse();
    // The hub on its own runtime (its threads' CPU time is measured apart from the load
    // generator's); its blocking threads live for the whole run so none of their time is lost.
    let mut hub_runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.hub_threads {
        hub_runtime.worker_threads(usize::from(threads));
    }
    let hub_runtime = hub_runtime
        .enable_all()
        .thread_name(cpu::HUB_THREADS)
        .thread_keep_alive(Duration::from_secs(24 * 3600))
        .build()
        .context("starting the hub's tokio runtime")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("bench-client")
        .build()
        .context("starting tokio")?;
    runtime.block_on(bench(args, hub_runtime.handle().clone()))
}

async fn bench(args: Args, hub_runtime: tokio::runtime::Handle) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("hub-bench-{}", Uuid::new_v4()));
    let outcome = match &args.store {
        Some(url) => replicas::run(&args, url, (&dir, &hub_runtime)).await,
        None => run_phases(&args, &dir, &hub_runtime).await,
    };
    if let Err(err) = std::fs::remove_dir_all(&dir) {
        eprintln!("warning: could not remove {}: {err}", dir.display());
    }
    outcome
}

async fn run_phases(
    args: &Args,
    dir: &std::path::Path,
    hub_runtime: &tokio::runtime::Handle,
) -> anyhow::Result<()> {
    anyhow::ensure!(args.hosts > 0, "--hosts must be at least 1");
    bosun_hubd::init(dir, vec!["localhost".into()], false).context("initializing the hub")?;
    let started = Instant::now();
    let hosts = enroll(dir, args.hosts).context("enrolling the hosts")?;
    println!(
        "enrolled {} hosts in {:.1}s",
        hosts.len(),
        started.elapsed().as_secs_f64()
    );
    let config = HubConfig::new(dir, "127.0.0.1:0".parse()?);
    let hub = hub_runtime
        .spawn(Hub::open(config, Arc::new(SystemClock)))
        .await??;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let url = format!("https://127.0.0.1:{}", listener.local_addr()?.port());
    let server = hub.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = hub_runtime.spawn(async move {
        server
            .serve(listener, async move {
                let _ = stopped.await;
            })
            .await
    });

    let client = client(&hub.fingerprint())?;
    let fleet = Arc::new(Fleet::new(hosts, args.reports, client.clone(), vec![url])?);
    if !args.first_contact {
        prime(&fleet, args.concurrency, args.interval).await?;
    }

    // Phase 1: the fleet at its interval (open loop, a poll every interval/N seconds).
    let rate = args.hosts as f64 / args.interval;
    let cpu_before = cpu::now();
    let history_during = args.history_at.map(|after| {
        let (hub, runtime) = (hub.clone(), hub_runtime.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(after)).await;
            report_history(&hub, &runtime).await
        })
    });
    let fleet_latencies = {
        let fleet = fleet.clone();
        let next = AtomicU64::new(0);
        open_loop(rate, Duration::from_secs(args.duration), move || {
            let n = usize::try_from(next.fetch_add(1, Ordering::Relaxed)).unwrap_or(0);
            fleet.clone().poll(n)
        })
        .await
    };
    let fleet_cpu = cpu::now().since(&cpu_before);
    if let Some(during) = history_during {
        during.await??;
    }
    println!(
        "fleet: {} hosts polling every {}s",
        args.hosts, args.interval
    );
    let polls = fleet_latencies.len();
    report_worst_each_second("hub polls", rate, &fleet_latencies);
    report_latencies("hub polls", rate, args.duration, fleet_latencies);
    report_cpu("hub polls", fleet_cpu, polls, args.duration);

    // Phase 2: the hub's maximum poll rate (closed loop).
    let hub_rate = {
        let fleet = fleet.clone();
        let next = Arc::new(AtomicU64::new(0));
        saturate(
            "hub polls",
            args.concurrency,
            Duration::from_secs(args.saturate),
            move || {
                let n = usize::try_from(next.fetch_add(1, Ordering::Relaxed)).unwrap_or(0);
                fleet.clone().poll(n)
            },
        )
        .await
    };
    // Every host's history bucket, written as the flush writes them when a bucket ends.
    if args.history_at.is_none() {
        report_history(&hub, hub_runtime).await?;
    }
    let _ = stop.send(());
    served.await??;

    // Phase 3: a bare axum hello-world over the same TLS configuration, on the hub's runtime.
    let hello = hello_world(&client, rate, args, args.saturate, (dir, hub_runtime)).await?;
    let hello_rate = hello.max_rate;
    println!(
        "max rate: hub polls {hub_rate:.0}/s, bare axum hello {hello_rate:.0}/s, ratio {:.2}",
        hub_rate / hello_rate.max(1.0)
    );
    println!(
        "headroom: the hub sustains {:.1}x the fleet's {rate:.0} polls/s",
        hub_rate / rate.max(1.0)
    );
    Ok(())
}

/// Writes every host's open history bucket, as the hub's flush does for the whole fleet
/// each time a bucket ends (on the hub's runtime, so its threads do the work), and prints
/// what it took and how long it held the store at once.
async fn report_history(hub: &Hub, hub_runtime: &tokio::runtime::Handle) -> anyhow::Result<()> {
    let cpu_before = cpu::now();
    let started = Instant::now();
    let writer = hub.clone();
    let written = hub_runtime
        .spawn(async move { bosun_hubd::flush_task::write_history(&writer, true).await })
        .await?;
    let took = started.elapsed();
    let cpu = cpu::now().since(&cpu_before);
    #[allow(clippy::cast_precision_loss)] // bucket counts: far below 2^52
    let per_bucket_us = took.as_secs_f64() * 1e6 / written.buckets.max(1) as f64;
    println!(
        "history: {} buckets (one a host) written in {:.0} ms, {per_bucket_us:.1} us a bucket; \
         {} transactions, the longest {:.1} ms; hub CPU {} ms{}",
        written.buckets,
        took.as_secs_f64() * 1e3,
        written.chunks,
        written.longest.as_secs_f64() * 1e3,
        cpu.hub.as_millis(),
        if written.kept > 0 {
            format!(", {} NOT WRITTEN", written.kept)
        } else {
            String::new()
        }
    );
    Ok(())
}

/// What the bare hello-world measured: its CPU per 1,000 requests at the fleet's rate, and
/// its maximum rate (0 without `--saturate`).
pub(crate) struct HelloFigures {
    /// The hub runtime's CPU per 1,000 answered requests at the fleet's rate, in ms.
    pub cpu_per_1k_ms: f64,
    /// Requests a second at most, closed loop.
    pub max_rate: f64,
}

/// A bare axum hello-world over the hub's TLS identity in `dir`, on the hub's runtime, at the
/// fleet's open-loop `rate` for the run's duration and then for `saturate` seconds as fast as
/// it goes: the floor a poll's CPU and latency are compared with, printed as `hello` lines.
pub(crate) async fn hello_world(
    client: &reqwest::Client,
    rate: f64,
    args: &Args,
    saturate_s: u64,
    (dir, hub_runtime): (&std::path::Path, &tokio::runtime::Handle),
) -> anyhow::Result<HelloFigures> {
    let identity = bosun_hubd::tls::load(&bosun_hubd::tls::TlsSource::SelfSigned, dir)?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let hello_url = format!("https://127.0.0.1:{}/hello", listener.local_addr()?.port());
    let handle = axum_server::Handle::new();
    let app = axum::Router::new().route("/hello", axum::routing::get(|| async { "hello" }));
    let tls = axum_server::tls_rustls::RustlsConfig::from_config(identity.config);
    let hello_server = {
        let _entered = hub_runtime.enter();
        hub_runtime.spawn(
            axum_server::from_tcp_rustls(listener, tls)?
                .handle(handle.clone())
                .serve(app.into_make_service()),
        )
    };
    // The same open-loop fleet rate against hello-world: the latency floor of this machine,
    // this TLS stack and this load generator.
    let cpu_before = cpu::now();
    let hello_latencies = {
        let client = client.clone();
        let url = hello_url.clone();
        open_loop(rate, Duration::from_secs(args.duration), move || {
            get(client.get(&url))
        })
        .await
    };
    let hello_cpu = cpu::now().since(&cpu_before);
    let requests = hello_latencies.len();
    report_latencies("hello", rate, args.duration, hello_latencies);
    report_cpu("hello", hello_cpu, requests, args.duration);
    let max_rate = if saturate_s > 0 {
        let client = client.clone();
        saturate(
            "hello",
            args.concurrency,
            Duration::from_secs(saturate_s),
            move || get(client.get(&hello_url)),
        )
        .await
    } else {
        0.0
    };
    handle.graceful_shutdown(Some(Duration::from_secs(1)));
    hello_server.await??;
    Ok(HelloFigures {
        cpu_per_1k_ms: cpu::per_thousand(hello_cpu.hub, requests),
        max_rate,
    })
}

/// Every host sends its first (full) report before the timed phases, as a fleet that has
/// been running a while has. When that took longer than the hub's dead-man grace window
/// (`interval` × its grace factor), the first hosts are silent past it and the hub's sweeps
/// mark them overdue, which no running fleet is: the fleet then polls one `interval` at its
/// rate, untimed, so every host has polled within the last interval when the timed phases
/// start (a PostgreSQL hub's replicas take longer than 90 s to prime 100,000 hosts on two
/// cores).
pub(crate) async fn prime(
    fleet: &Arc<Fleet>,
    concurrency: usize,
    interval: f64,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (fleet, next) = (fleet.clone(), next.clone());
        workers.spawn(async move {
            loop {
                let n = usize::try_from(next.fetch_add(1, Ordering::Relaxed)).unwrap_or(usize::MAX);
                if n >= fleet.hosts.len() {
                    return;
                }
                // A failed first poll is retried, as the agent does.
                for _ in 0..3 {
                    if fleet.clone().poll(n).await.is_some() && fleet.reported(n) {
                        break;
                    }
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
    let unacked = (0..fleet.hosts.len())
        .filter(|&n| !fleet.reported(n))
        .count();
    anyhow::ensure!(
        unacked == 0,
        "{unacked} hosts have no acknowledged full report after priming"
    );
    let primed_in = started.elapsed();
    println!(
        "primed {} hosts with a full report each in {:.1}s",
        fleet.hosts.len(),
        primed_in.as_secs_f64()
    );
    let grace = interval * f64::from(bosun_hubd::deadman::DeadManConfig::default().grace_factor);
    if primed_in.as_secs_f64() > grace {
        let next = AtomicU64::new(0);
        let polling = fleet.clone();
        let polls = open_loop(
            fleet.hosts.len() as f64 / interval,
            Duration::from_secs_f64(interval),
            move || {
                let n = usize::try_from(next.fetch_add(1, Ordering::Relaxed)).unwrap_or(0);
                polling.clone().poll(n)
            },
        )
        .await;
        println!(
            "warmed up: priming outlasted the hub's {grace:.0}s grace window, so the fleet polled {:.0}s untimed ({} polls, {} failed)",
            interval,
            polls.len(),
            polls.iter().filter(|p| p.is_none()).count()
        );
    }
    Ok(())
}

/// Sends a request; its latency when it succeeded (answer read whole).
async fn get(request: reqwest::RequestBuilder) -> Option<Duration> {
    let started = Instant::now();
    match request.send().await {
        Ok(resp) if resp.status().is_success() => {
            resp.bytes().await.ok().map(|_| started.elapsed())
        }
        _ => None,
    }
}

fn report_cpu(what: &str, used: cpu::Cpu, requests: usize, duration: u64) {
    let seconds = duration.max(1) as f64;
    println!(
        "cpu: {what}: hub {:.0} ms per 1k requests ({:.0}% of a core), load generator {:.0} ms per 1k ({:.0}% of a core)",
        cpu::per_thousand(used.hub, requests),
        used.hub.as_secs_f64() * 100.0 / seconds,
        cpu::per_thousand(used.generator, requests),
        used.generator.as_secs_f64() * 100.0 / seconds,
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The value below which `per_mille`/1000 of the sorted samples fall.
fn percentile(sorted: &[Duration], per_mille: usize) -> Duration {
    match sorted.len() {
        0 => Duration::ZERO,
        len => sorted[((len - 1) * per_mille / 1000).min(len - 1)],
    }
}

/// Enrolls hosts straight into the new hub's database in one transaction, before the hub
/// opens it: active, as the store's enrollment leaves them. (Enrollment through the API and
/// the store is exercised by the tests; 200,000 durable transactions through the store took
/// over 8 minutes for 100,000 hosts on the benchmark machine.)
fn enroll(dir: &std::path::Path, count: usize) -> anyhow::Result<Vec<Host>> {
    let now_ms = SystemClock.now_ms();
    let mut conn = rusqlite::Connection::open(dir.join(bosun_hubd::store::sqlite::DB_FILE))?;
    let tx = conn.transaction()?;
    let mut hosts = Vec::with_capacity(count);
    {
        let mut insert = tx.prepare(
            "INSERT INTO hosts (host_id, hostname, key_hash, status, enrolled_ms, poll_interval_s,
                                agent_version)
             VALUES (?1, ?2, ?3, 'active', ?4, 30, '0.1.0')",
        )?;
        for n in 0..count {
            let (key, key_hash) = secret::mint(SecretKind::HostKey);
            let id = Uuid::new_v4();
            insert.execute(rusqlite::params![
                id.to_string(),
                format!("pve-{n:05}"),
                key_hash.0.as_slice(),
                now_ms
            ])?;
            hosts.push(Host::new(id, key.expose().to_owned()));
        }
    }
    tx.commit()?;
    Ok(hosts)
}

fn client(fingerprint: &str) -> anyhow::Result<reqwest::Client> {
    let mut tls = bosun_hubd::tls::pinned_client_config(fingerprint)?;
    // One connection per in-flight request, as a fleet of agents would have.
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .http1_only()
        .timeout(Duration::from_secs(30))
        .build()?)
}

/// Most requests in flight at once in the open loop. A fleet's agents each hold their own
/// connection, but here both ends of every connection are in this one process, whose
/// open-file limit (20,000 on the benchmark machine) a stalled hub would otherwise exhaust
/// with connection errors; past the cap a request waits for a slot, and the wait counts in
/// its latency.
const MAX_IN_FLIGHT: usize = 8_000;

/// Open loop: starts one request every 1/rate seconds for `duration`; returns each
/// request's latency from the moment it was due (`None` for a failure).
pub(crate) async fn open_loop<F, R>(rate: f64, duration: Duration, make: F) -> Vec<Option<Duration>>
where
    F: Fn() -> R,
    R: Future<Output = Option<Duration>> + Send + 'static,
{
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let capped = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + duration;
    let mut tasks = tokio::task::JoinSet::new();
    let mut sent = 0;
    while Instant::now() < deadline {
        ticker.tick().await;
        let due = Instant::now();
        let request = make();
        let (slots, capped) = (slots.clone(), capped.clone());
        let index = sent;
        sent += 1;
        tasks.spawn(async move {
            let latency = async {
                let _slot = match slots.clone().try_acquire_owned() {
                    Ok(slot) => slot,
                    Err(_) => {
                        capped.fetch_add(1, Ordering::Relaxed);
                        slots.acquire_owned().await.ok()?
                    }
                };
                request.await.map(|_| due.elapsed())
            };
            (index, latency.await)
        });
    }
    // In the order they were sent: request n was due n / rate seconds in.
    let mut out = vec![None; sent];
    while let Some(result) = tasks.join_next().await {
        if let Ok((index, latency)) = result {
            out[index] = latency;
        }
    }
    let capped = capped.load(Ordering::Relaxed);
    if capped > 0 {
        eprintln!(
            "note: {capped} requests waited for one of the {MAX_IN_FLIGHT} in-flight slots (their wait is in their latency)"
        );
    }
    out
}

pub(crate) fn report_latencies(
    what: &str,
    rate: f64,
    duration: u64,
    latencies: Vec<Option<Duration>>,
) {
    let errors = latencies.iter().filter(|l| l.is_none()).count();
    let mut ok: Vec<Duration> = latencies.into_iter().flatten().collect();
    ok.sort();
    println!(
        "{what}: {rate:.0} req/s for {duration}s: {} ok, {errors} errors, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ok.len(),
        ms(percentile(&ok, 500)),
        ms(percentile(&ok, 990)),
        ms(ok.last().copied().unwrap_or_default()),
    );
}

/// Prints the slowest answered poll of each second of an [`open_loop`] run at `rate`
/// (`latencies` in the order sent), so a stall is placed in time.
pub(crate) fn report_worst_each_second(what: &str, rate: f64, latencies: &[Option<Duration>]) {
    let mut worst: Vec<Duration> = Vec::new();
    for (n, latency) in latencies.iter().enumerate() {
        let due = Duration::try_from_secs_f64(n as f64 / rate).unwrap_or_default();
        let second = usize::try_from(due.as_secs()).unwrap_or(0);
        if worst.len() <= second {
            worst.resize(second + 1, Duration::ZERO);
        }
        if let Some(latency) = latency {
            worst[second] = worst[second].max(*latency);
        }
    }
    let worst: Vec<String> = worst.iter().map(|l| format!("{:.0}", ms(*l))).collect();
    println!(
        "{what}: worst poll of each second (ms): {}",
        worst.join(" ")
    );
}

/// Closed loop: `concurrency` workers send back-to-back for `duration`; returns requests/s
/// and prints the CPU the hub's threads (its poll writer's apart) and the load generator used
/// while it was timed, as a `cpu: max rate …` line named `what`.
async fn saturate<F, R>(what: &str, concurrency: usize, duration: Duration, make: F) -> f64
where
    F: Fn() -> R + Send + Sync + 'static,
    R: Future<Output = Option<Duration>> + Send + 'static,
{
    let make = Arc::new(make);
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let warmup = Duration::from_secs(1);
    let start = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (make, done, failed) = (make.clone(), done.clone(), failed.clone());
        workers.spawn(async move {
            while start.elapsed() < warmup + duration {
                let ok = make().await.is_some();
                if start.elapsed() >= warmup {
                    if ok {
                        done.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    tokio::time::sleep(warmup).await;
    let cpu_before = cpu::now();
    while workers.join_next().await.is_some() {}
    let used = cpu::now().since(&cpu_before);
    let failures = failed.load(Ordering::Relaxed);
    if failures > 0 {
        eprintln!("warning: {failures} failed requests during saturation");
    }
    let requests = done.load(Ordering::Relaxed);
    let counted = usize::try_from(requests).unwrap_or(usize::MAX);
    let seconds = duration.as_secs_f64().max(f64::EPSILON);
    let share = |time: Duration| time.as_secs_f64() * 100.0 / seconds;
    println!(
        "cpu: max rate {what}: hub {:.0} ms per 1k ({:.0}% of a core; its poll writer {:.0}%), load generator {:.0} ms per 1k ({:.0}%), {} cores",
        cpu::per_thousand(used.hub, counted),
        share(used.hub),
        share(used.writer),
        cpu::per_thousand(used.generator, counted),
        share(used.generator),
        std::thread::available_parallelism().map_or(0, usize::from),
    );
    requests as f64 / seconds
}
