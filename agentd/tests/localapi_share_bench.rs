//! The local-API figure of decision 0100 (ignored by default; run with
//! `cargo test -p bosun-agentd --test integration -- --ignored --nocapture
//! localapi_share_bench:: --test-threads 1`): a neighbour's latency while one guest floods the
//! local API with requests over keep-alive connections, unpaced and paced at what the smallest
//! network rate limit (`rate=1`, 1 MB/s from the guest, Proxmox's policer on its veth) lets
//! through. The simulator runs no cgroups or tc, so the limit is applied to the flooder's
//! requests as the policer would: at most 1 MB/s of what it sends.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    reason = "benchmark code: prints its figures; a panic is a failed run"
)]

use crate::localapi_support;

use crate::raw_tls;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use localapi_support::{Harness, Options};

const FLOODER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const NEIGHBOUR: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));
const PATH: &str = "/v1/restore-test/status";
/// Keep-alive connections the flooder keeps busy (within the per-peer cap).
const CONNECTIONS: usize = 8;
/// The neighbour's requests per round.
const SAMPLES: usize = 300;
/// What one request costs the guest's link: the HTTP request with its bearer token in one TLS
/// record (about 260 bytes), TCP/IP headers, and the ACK of the answer (about 100).
const BYTES_PER_REQUEST: u64 = 360;

fn percentile(sorted: &[Duration], percent: usize) -> Duration {
    let index = (sorted.len() * percent).div_ceil(100).saturating_sub(1);
    sorted[index.min(sorted.len() - 1)]
}

fn line(what: &str, mut samples: Vec<Duration>) -> String {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "{what}: n={} p50={:.2} ms p99={:.2} ms max={:.2} ms",
        samples.len(),
        ms(percentile(&samples, 50)),
        ms(percentile(&samples, 99)),
        ms(*samples.last().unwrap())
    )
}

/// The neighbour's `count` requests on one keep-alive client, one every 60 ms: within the
/// production per-token rate (20/s), as a controller polling its due backup stays.
async fn neighbour(h: &Harness, count: usize) -> Vec<Duration> {
    let client = raw_tls::client_from(&h.fingerprint, NEIGHBOUR);
    let token = h.guest(1).token.clone();
    let mut out = Vec::with_capacity(count);
    let mut tick = tokio::time::interval(Duration::from_millis(60));
    for _ in 0..count {
        tick.tick().await;
        let start = Instant::now();
        let resp = client
            .get(h.url(PATH))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.bytes().await.unwrap();
        out.push(start.elapsed());
    }
    out
}

/// Guest 0 floods from [`FLOODER`] until `stop`, at most `bytes_per_s` (None: unpaced).
fn flood(
    h: &Harness,
    bytes_per_s: Option<u64>,
    stop: &Arc<AtomicBool>,
    sent: &Arc<AtomicUsize>,
    refused: &Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let per_connection = bytes_per_s.map(|b| {
        let per_s = (b / BYTES_PER_REQUEST).max(1) as f64 / CONNECTIONS as f64;
        Duration::from_secs_f64(1.0 / per_s)
    });
    (0..CONNECTIONS)
        .map(|_| {
            let client = raw_tls::client_from(&h.fingerprint, FLOODER);
            let token = h.guest(0).token.clone();
            let url = h.url(PATH);
            let (stop, sent, refused) = (Arc::clone(stop), Arc::clone(sent), Arc::clone(refused));
            tokio::spawn(async move {
                let start = Instant::now();
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    if let Some(gap) = per_connection {
                        let due = start + gap * n;
                        tokio::time::sleep_until(due.into()).await;
                    }
                    n += 1;
                    sent.fetch_add(1, Ordering::Relaxed);
                    match client.get(&url).bearer_auth(&token).send().await {
                        Ok(resp) => {
                            if resp.status() != 200 {
                                refused.fetch_add(1, Ordering::Relaxed);
                            }
                            let _ = resp.bytes().await;
                        }
                        Err(_) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect()
}

async fn round(h: &Harness, what: &str, bytes_per_s: Option<u64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let flooders = flood(h, bytes_per_s, &stop, &sent, &refused);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let (s0, r0) = (
        sent.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    let samples = neighbour(h, SAMPLES).await;
    let seconds = started.elapsed().as_secs_f64();
    let (s1, r1) = (
        sent.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.await.unwrap();
    }
    println!(
        "{what}: flooder sent {:.0} req/s, {:.0} refused/s",
        (s1 - s0) as f64 / seconds,
        (r1 - r0) as f64 / seconds
    );
    println!("{}", line(&format!("{what}, neighbour"), samples));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn neighbour_latency_while_one_guest_floods_requests_with_and_without_its_rate_limit() {
    // The production per-token rate (agent.toml's default), not the suite's generous one.
    let options = Options::default();
    let options = Options {
        config: bosun_agentd::guests::localapi::LocalApiConfig {
            rate_per_s: bosun_agentd::config::DEFAULT_LOCAL_API_RATE,
            burst: bosun_agentd::config::DEFAULT_LOCAL_API_BURST,
            ..options.config
        },
        ..options
    };
    println!(
        "per-token rate {}/s, burst {}; {CONNECTIONS} flooding connections",
        options.config.rate_per_s, options.config.burst
    );
    let h = Harness::start_with(options).await;
    println!(
        "{}",
        line("no flood, neighbour", neighbour(&h, SAMPLES).await)
    );
    round(&h, "unpaced flood", None).await;
    round(&h, "flood at rate=1 (1 MB/s)", Some(1024 * 1024)).await;
    round(&h, "flood at rate=0.1 (100 KB/s)", Some(100 * 1024)).await;
    h.shutdown().await;
}
