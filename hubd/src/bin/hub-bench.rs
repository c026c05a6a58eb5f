//! Load generator: N simulated hosts polling a real `bosun-hubd` on loopback at an interval,
//! then the hub's and a bare axum hello-world's maximum request rates over the same TLS.
//!
//! `cargo run --release -p bosun-hubd --bin hub-bench -- --hosts 10000 --interval 30`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bosun_hubd::clock::{Clock as _, SystemClock};
use bosun_hubd::secret::{self, SecretHash, SecretKind};
use bosun_hubd::store::{Enrollment, NewEnrollToken};
use bosun_hubd::{Hub, HubConfig};
use clap::Parser;
use uuid::Uuid;

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
    /// Concurrent requests in the maximum-rate phases (HTTP/1.1 keep-alive connections).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
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
}

#[path = "hub_bench/replicas.rs"]
mod replicas;

fn main() -> anyhow::Result<()> {
    bosun_hubd::install_crypto_provider();
    let args = Args::parse();
    let runtime = tokio::runtime::Runtime::new().context("starting tokio")?;
    runtime.block_on(bench(args))
}

struct Host {
    id: Uuid,
    key: String,
}

async fn bench(args: Args) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("hub-bench-{}", Uuid::new_v4()));
    let outcome = match &args.store {
        Some(url) => replicas::run(&args, url, &dir).await,
        None => run_phases(&args, &dir).await,
    };
    if let Err(err) = std::fs::remove_dir_all(&dir) {
        eprintln!("warning: could not remove {}: {err}", dir.display());
    }
    outcome
}

async fn run_phases(args: &Args, dir: &std::path::Path) -> anyhow::Result<()> {
    bosun_hubd::init(dir, vec!["localhost".into()], false).context("initializing the hub")?;
    let hub = Hub::open(
        HubConfig::new(dir, "127.0.0.1:0".parse()?),
        Arc::new(SystemClock),
    )
    .await?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let url = format!("https://127.0.0.1:{}", listener.local_addr()?.port());
    let server = hub.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(async move {
        server
            .serve(listener, async move {
                let _ = stopped.await;
            })
            .await
    });

    let started = Instant::now();
    let hosts = enroll(&hub, args.hosts).await?;
    println!(
        "enrolled {} hosts in {:.1}s",
        hosts.len(),
        started.elapsed().as_secs_f64()
    );
    let hosts = Arc::new(hosts);
    let client = client(hub.fingerprint())?;
    let body = bytes::Bytes::from(poll_body()?.into_bytes());

    // Phase 1: the fleet at its interval (open loop, a poll every interval/N seconds).
    let rate = args.hosts as f64 / args.interval;
    let fleet_latencies = {
        let (client, hosts, body, url) = (client.clone(), hosts.clone(), body.clone(), url.clone());
        let next = AtomicU64::new(0);
        open_loop(rate, Duration::from_secs(args.duration), move || {
            let n =
                usize::try_from(next.fetch_add(1, Ordering::Relaxed)).unwrap_or(0) % hosts.len();
            client
                .post(format!("{url}/v1/hosts/{}/poll", hosts[n].id))
                .bearer_auth(&hosts[n].key)
                .body(body.clone())
        })
        .await
    };
    println!(
        "fleet: {} hosts polling every {}s",
        args.hosts, args.interval
    );
    report_latencies("hub polls", rate, args.duration, fleet_latencies);

    // Phase 2: the hub's maximum poll rate (closed loop).
    let hub_rate = {
        let client = client.clone();
        let hosts = hosts.clone();
        let body = body.clone();
        let url = url.clone();
        let next = Arc::new(AtomicU64::new(0));
        saturate(
            args.concurrency,
            Duration::from_secs(args.saturate),
            move || {
                let n = usize::try_from(next.fetch_add(1, Ordering::Relaxed)).unwrap_or(0)
                    % hosts.len();
                let host = &hosts[n];
                client
                    .post(format!("{url}/v1/hosts/{}/poll", host.id))
                    .bearer_auth(&host.key)
                    .body(body.clone())
            },
        )
        .await
    };
    let _ = stop.send(());
    served.await??;

    // Phase 3: a bare axum hello-world over the same TLS configuration.
    let identity = bosun_hubd::tls::load(&bosun_hubd::tls::TlsSource::SelfSigned, dir)?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let hello_url = format!("https://127.0.0.1:{}/hello", listener.local_addr()?.port());
    let handle = axum_server::Handle::new();
    let app = axum::Router::new().route("/hello", axum::routing::get(|| async { "hello" }));
    let tls = axum_server::tls_rustls::RustlsConfig::from_config(identity.config);
    let hello_server = tokio::spawn(
        axum_server::from_tcp_rustls(listener, tls)?
            .handle(handle.clone())
            .serve(app.into_make_service()),
    );
    // The same open-loop fleet rate against hello-world: the latency floor of this machine,
    // this TLS stack and this load generator.
    let hello_latencies = {
        let client = client.clone();
        let url = hello_url.clone();
        open_loop(rate, Duration::from_secs(args.duration), move || {
            client.get(&url)
        })
        .await
    };
    report_latencies("hello", rate, args.duration, hello_latencies);
    let hello_rate = {
        let client = client.clone();
        saturate(
            args.concurrency,
            Duration::from_secs(args.saturate),
            move || client.get(&hello_url),
        )
        .await
    };
    handle.graceful_shutdown(Some(Duration::from_secs(1)));
    hello_server.await??;
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

/// Enrolls hosts straight through the store (the API path is exercised by the tests).
async fn enroll(hub: &Hub, count: usize) -> anyhow::Result<Vec<Host>> {
    let now_ms = SystemClock.now_ms();
    let hub = hub.clone();
    let hosts = hub
        .store_call(move |store| {
            let mut hosts = Vec::with_capacity(count);
            for n in 0..count {
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
                    hostname: format!("pve-{n:05}"),
                    agent_version: "0.1.0".into(),
                    pve_version: None,
                    poll_interval_s: 30,
                    now_ms,
                })?;
                hosts.push(Host {
                    id,
                    key: key.expose().to_owned(),
                });
            }
            Ok(hosts)
        })
        .await?;
    Ok(hosts)
}

fn client(fingerprint: &str) -> anyhow::Result<reqwest::Client> {
    let mut tls = bosun_hubd::tls::pinned_client_config(fingerprint)?;
    // One connection per in-flight request, as a fleet of agents would have.
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .http1_only()
        .pool_max_idle_per_host(1024)
        .timeout(Duration::from_secs(30))
        .build()?)
}

fn poll_body() -> anyhow::Result<String> {
    let report: serde_json::Value =
        serde_json::from_str(include_str!("../../../docs/proto/report.json"))?;
    Ok(serde_json::json!({
        "schema": "bosun.poll/v1",
        "known_generation": 0,
        "applied_generation": 0,
        "acked_jobs": [],
        "report": report,
    })
    .to_string())
}

/// Open loop: starts one request every 1/rate seconds for `duration`; returns each
/// request's latency (`None` for a failure).
async fn open_loop<F>(rate: f64, duration: Duration, make: F) -> Vec<Option<Duration>>
where
    F: Fn() -> reqwest::RequestBuilder,
{
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let deadline = Instant::now() + duration;
    let mut tasks = tokio::task::JoinSet::new();
    while Instant::now() < deadline {
        ticker.tick().await;
        let request = make();
        tasks.spawn(async move {
            let started = Instant::now();
            match request.send().await {
                Ok(resp) if resp.status().is_success() => {
                    resp.bytes().await.ok().map(|_| started.elapsed())
                }
                _ => None,
            }
        });
    }
    let mut out = Vec::new();
    while let Some(result) = tasks.join_next().await {
        out.push(result.ok().flatten());
    }
    out
}

fn report_latencies(what: &str, rate: f64, duration: u64, latencies: Vec<Option<Duration>>) {
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

/// Closed loop: `concurrency` workers send back-to-back for `duration`; returns requests/s.
async fn saturate<F>(concurrency: usize, duration: Duration, make: F) -> f64
where
    F: Fn() -> reqwest::RequestBuilder + Send + Sync + 'static,
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
                let ok = match make().send().await {
                    Ok(resp) => resp.status().is_success() && resp.bytes().await.is_ok(),
                    Err(_) => false,
                };
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
    while workers.join_next().await.is_some() {}
    let failures = failed.load(Ordering::Relaxed);
    if failures > 0 {
        eprintln!("warning: {failures} failed requests during saturation");
    }
    done.load(Ordering::Relaxed) as f64 / duration.as_secs_f64()
}
