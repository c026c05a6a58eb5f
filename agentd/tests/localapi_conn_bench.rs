//! Local-API figures for `docs/benchmarks.md` (ignored by default; run with
//! `cargo test -p bosun-agentd --test localapi_conn_bench -- --ignored --nocapture`):
//! another guest's latency while one guest tries to hold 1,000 idle TLS connections.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    reason = "benchmark code: prints its figures; a panic is a failed run"
)]

mod localapi_support;

#[path = "localapi_support/raw_tls.rs"]
mod raw_tls;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use localapi_support::{Harness, Options};

const HOSTILE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const NEIGHBOUR: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));
const PATH: &str = "/v1/restore-test/status";

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

/// `count` requests on one keep-alive client, then `count / 5` each on a fresh connection.
async fn neighbour_round(h: &Harness, count: usize) -> (Vec<Duration>, Vec<Duration>) {
    let client = raw_tls::client_from(&h.fingerprint, NEIGHBOUR);
    let token = h.guest(1).token.clone();
    let mut kept = Vec::with_capacity(count);
    for _ in 0..count {
        let start = Instant::now();
        let resp = client
            .get(h.url(PATH))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.bytes().await.unwrap();
        kept.push(start.elapsed());
    }
    let mut fresh = Vec::with_capacity(count / 5);
    for _ in 0..count / 5 {
        let client = raw_tls::client_from(&h.fingerprint, NEIGHBOUR);
        let start = Instant::now();
        let resp = client
            .get(h.url(PATH))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.bytes().await.unwrap();
        fresh.push(start.elapsed());
    }
    (kept, fresh)
}

/// One thread for server, attacker and neighbour, as `bosun-agentd` runs (conservative).
#[tokio::test(flavor = "current_thread")]
#[ignore = "benchmark"]
async fn neighbour_latency_under_idle_connections_one_thread() {
    println!("current-thread runtime");
    neighbour_latency_while_one_guest_holds_a_thousand_idle_connections().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn neighbour_latency_under_idle_connections_two_workers() {
    println!("multi-thread runtime, 2 workers");
    neighbour_latency_while_one_guest_holds_a_thousand_idle_connections().await;
}

async fn neighbour_latency_while_one_guest_holds_a_thousand_idle_connections() {
    let h = Harness::start_with(Options::default()).await;
    let server: SocketAddr = h.base.trim_start_matches("https://").parse().unwrap();

    let (kept, fresh) = neighbour_round(&h, 1000).await;
    println!("{}", line("baseline, keep-alive", kept));
    println!("{}", line("baseline, new connection each", fresh));

    // The hostile guest keeps trying to hold 1,000 idle connections: whatever is refused or
    // closed is opened again.
    let stop = Arc::new(AtomicBool::new(false));
    let held_now = Arc::new(AtomicUsize::new(0));
    let attempts = Arc::new(AtomicUsize::new(0));
    let attacker = {
        let stop = Arc::clone(&stop);
        let held_now = Arc::clone(&held_now);
        let attempts = Arc::clone(&attempts);
        let tls = raw_tls::connector(&h.fingerprint);
        tokio::spawn(async move {
            let mut held = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                while held.len() < 1000 && !stop.load(Ordering::Relaxed) {
                    attempts.fetch_add(1, Ordering::Relaxed);
                    match raw_tls::tls_from(&tls, HOSTILE, server).await {
                        Ok(stream) => held.push(stream),
                        Err(_) => break,
                    }
                }
                held_now.store(held.len(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            held.len()
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (kept, fresh) = neighbour_round(&h, 1000).await;
    stop.store(true, Ordering::Relaxed);
    let held = attacker.await.unwrap();
    println!(
        "attacker: {} connection attempts, holds {held} (cap per peer {})",
        attempts.load(Ordering::Relaxed),
        bosun_agentd::localapi::ConnectionLimits::default().max_per_peer
    );
    println!("{}", line("under attack, keep-alive", kept));
    println!("{}", line("under attack, new connection each", fresh));
    h.shutdown().await;
}
