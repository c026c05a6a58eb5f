//! Latency of `GET /v1/backup/due` under an open-loop load of 1,000 requests per second over
//! TLS keep-alive (ten guests' tokens at 100 req/s each, within their rate limits), against
//! the simulator. Latency is measured from each request's *scheduled* send time, so a stall
//! is not hidden by the generator waiting for it.
//!
//! `cargo bench -p bosun-agentd --bench localapi_due [-- SECONDS RATE [THREADS]]`
//!
//! By default everything runs on one current-thread runtime, as `bosun-agentd` runs its
//! local API in production, with the load generator and its TLS client on that same thread:
//! a conservative figure. `THREADS` > 1 gives a multi-thread runtime with that many workers.

#![allow(
    clippy::unwrap_used,
    reason = "a benchmark harness: a panic is a failed run"
)]
#![allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "statistics over durations"
)]

#[path = "../tests/localapi_support/mod.rs"]
mod localapi_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun_agentd::guests::localapi::LocalApiConfig;
use localapi_support::{Harness, Options, daily_policy};
use parking_lot::Mutex;

const GUESTS: u32 = 10;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let seconds: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(10);
    let rate: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let threads: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let rt = if threads > 1 {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
    .unwrap();
    println!("runtime: {threads} thread(s), {rate} req/s for {seconds} s");
    rt.block_on(run(seconds, rate));
}

async fn run(seconds: u64, rate: u64) {
    let h = Arc::new(
        Harness::start_with(Options {
            guests: GUESTS,
            config: LocalApiConfig {
                rate_per_s: 200,
                burst: 400,
                ..LocalApiConfig::default()
            },
            ..Options::default()
        })
        .await,
    );
    h.policy.send_replace(Some(daily_policy("02:00", 30)));
    // Warm up: every guest's last backup is read once from the storage, connections open.
    for n in 0..GUESTS as usize {
        let (status, _) = h.get(n, "/v1/backup/due").await;
        assert_eq!(status, 200);
    }
    let _ = fire(&h, 2, rate).await;
    let (latencies, errors, elapsed) = fire(&h, seconds, rate).await;
    let mut sorted = latencies.clone();
    sorted.sort_unstable();
    let pct = |p: f64| {
        let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
        sorted[i]
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "requests={} errors={} achieved_rps={:.0} p50_ms={:.3} p90_ms={:.3} p99_ms={:.3} p999_ms={:.3} max_ms={:.3}",
        sorted.len(),
        errors,
        sorted.len() as f64 / elapsed.as_secs_f64(),
        ms(pct(0.50)),
        ms(pct(0.90)),
        ms(pct(0.99)),
        ms(pct(0.999)),
        ms(*sorted.last().unwrap()),
    );
    match Arc::try_unwrap(h) {
        Ok(h) => h.shutdown().await,
        Err(_) => eprintln!("harness still shared; not shutting down cleanly"),
    }
}

/// Sends `rate` requests per second for `seconds`, open loop; returns latencies from the
/// scheduled send time, the count of non-200 answers and the wall time.
async fn fire(h: &Arc<Harness>, seconds: u64, rate: u64) -> (Vec<Duration>, u64, Duration) {
    let total = seconds * rate;
    let interval = Duration::from_nanos(1_000_000_000 / rate);
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(total as usize)));
    let errors = Arc::new(Mutex::new(0u64));
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        let scheduled = start + interval * u32::try_from(i).unwrap();
        tokio::time::sleep_until(scheduled).await;
        let h = h.clone();
        let latencies = latencies.clone();
        let errors = errors.clone();
        tasks.push(tokio::spawn(async move {
            let n = (i % u64::from(GUESTS)) as usize;
            let resp = h
                .client
                .get(h.url("/v1/backup/due"))
                .bearer_auth(&h.guest(n).token)
                .send()
                .await;
            let ok = match resp {
                Ok(r) => r.status() == 200 && r.bytes().await.is_ok(),
                Err(_) => false,
            };
            let waited = Instant::now() - scheduled.into_std();
            if ok {
                latencies.lock().push(waited);
            } else {
                *errors.lock() += 1;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = start.elapsed();
    let latencies = std::mem::take(&mut *latencies.lock());
    let errors = *errors.lock();
    (latencies, errors, elapsed)
}
