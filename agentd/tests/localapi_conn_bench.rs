//! Local-API figures for `docs/benchmarks.md` (ignored by default; run with
//! `cargo test -p bosun-agentd --test integration -- --ignored --nocapture localapi_conn_bench::
//! --test-threads 1`): another guest's latency while one guest tries to hold 1,000 idle TLS
//! connections from one address, and every other guest's latency while one guest, with its
//! token, opens connections from 64 addresses.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    reason = "benchmark code: prints its figures; a panic is a failed run"
)]

use crate::localapi_support;

use crate::raw_tls;

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
    guest_round(h, 1, NEIGHBOUR, count).await
}

/// Guest `n`'s `count` requests from `from` on one keep-alive client, then `count / 5` each
/// on a fresh connection.
async fn guest_round(
    h: &Harness,
    n: usize,
    from: IpAddr,
    count: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    let client = raw_tls::client_from(&h.fingerprint, from);
    let token = h.guest(n).token.clone();
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
        let client = raw_tls::client_from(&h.fingerprint, from);
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
        bosun_agentd::config::local_api::ConnectionLimits::default().max_per_peer
    );
    println!("{}", line("under attack, keep-alive", kept));
    println!("{}", line("under attack, new connection each", fresh));
    h.shutdown().await;
}

/// CPU seconds (user + system) in `/proc/<which>/stat`: `self` for the process,
/// `thread-self` for the calling thread.
fn cpu_seconds(which: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{which}/stat")).unwrap();
    // The fields after the command name (which may hold spaces) follow its `)`.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u32 = fields[11].parse::<u32>().unwrap() + fields[12].parse::<u32>().unwrap();
    f64::from(ticks) / 100.0
}

/// The guests besides the flooding one (guest 0), each at its own address: the first two
/// known by their requests, the last two by their Proxmox address only.
const OTHERS: [(usize, [u8; 4]); 4] = [
    (1, [127, 0, 0, 3]),
    (2, [127, 0, 0, 4]),
    (3, [127, 0, 0, 5]),
    (4, [127, 0, 0, 6]),
];

/// Every other guest's rounds, one guest after another; all their samples together.
async fn others_round(h: &Harness, count: usize) -> (Vec<Duration>, Vec<Duration>) {
    let (mut kept, mut fresh) = (Vec::new(), Vec::new());
    for (n, addr) in OTHERS {
        let (k, f) = guest_round(h, n, IpAddr::from(addr), count).await;
        kept.extend(k);
        fresh.extend(f);
    }
    (kept, fresh)
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "benchmark"]
async fn other_guests_under_a_64_address_flood_one_thread() {
    println!("current-thread runtime");
    other_guests_while_one_guest_floods_from_64_addresses().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn other_guests_under_a_64_address_flood_two_workers() {
    println!("multi-thread runtime, 2 workers");
    other_guests_while_one_guest_floods_from_64_addresses().await;
}

async fn other_guests_while_one_guest_floods_from_64_addresses() {
    let h = Harness::start_with(Options {
        guests: 5,
        ..Options::default()
    })
    .await;
    let server: SocketAddr = h.base.trim_start_matches("https://").parse().unwrap();
    let limits = bosun_agentd::config::local_api::ConnectionLimits::default();
    h.api.slots().set_addresses(
        &OTHERS[2..]
            .iter()
            .map(|(n, addr)| (h.guest(*n).guest_id.clone(), vec![IpAddr::from(*addr)]))
            .collect(),
    );
    for (n, addr) in &OTHERS[..2] {
        guest_round(&h, *n, IpAddr::from(*addr), 1).await;
    }

    let (kept, fresh) = others_round(&h, 250).await;
    println!("{}", line("baseline, keep-alive (4 guests)", kept));
    println!(
        "{}",
        line("baseline, new connection each (4 guests)", fresh)
    );

    // Guest 0 authenticates once from each of 64 addresses and keeps those connections, then
    // keeps trying to hold 16 idle TLS connections per address (1,024 in all, twice the
    // total cap), opening again whatever is refused or closed every 20 ms. It runs on a
    // thread and runtime of its own, as a guest runs on its own CPUs, not on the agent's
    // (the machine's two cores are still shared by everything).
    let flood: Vec<IpAddr> = (1..=64u8).map(|n| IpAddr::from([127, 0, 1, n])).collect();
    let mut flooder_clients = Vec::new();
    for addr in &flood {
        let client = raw_tls::client_from(&h.fingerprint, *addr);
        let resp = client
            .get(h.url(PATH))
            .bearer_auth(&h.guest(0).token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        flooder_clients.push(client);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let held_now = Arc::new(AtomicUsize::new(0));
    let attempts = Arc::new(AtomicUsize::new(0));
    let attacker = {
        let stop = Arc::clone(&stop);
        let held_now = Arc::clone(&held_now);
        let attempts = Arc::clone(&attempts);
        let tls = raw_tls::connector(&h.fingerprint);
        let flood = flood.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        std::thread::spawn(move || {
            runtime.block_on(async move {
                let mut held: Vec<Vec<_>> = flood.iter().map(|_| Vec::new()).collect();
                while !stop.load(Ordering::Relaxed) {
                    for (addr, mine) in flood.iter().zip(held.iter_mut()) {
                        while mine.len() < 16 && !stop.load(Ordering::Relaxed) {
                            attempts.fetch_add(1, Ordering::Relaxed);
                            match raw_tls::tls_from(&tls, *addr, server).await {
                                Ok(stream) => mine.push(stream),
                                Err(_) => break,
                            }
                        }
                    }
                    held_now.store(held.iter().map(Vec::len).sum(), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let held = held.iter().map(Vec::len).sum::<usize>();
                (held, cpu_seconds("thread-self"))
            })
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (cpu_before, began) = (cpu_seconds("self"), Instant::now());
    let (kept, fresh) = others_round(&h, 250).await;
    let (cpu, wall) = (cpu_seconds("self") - cpu_before, began.elapsed());
    let (flooder, unattributed) = h.api.slots().open_for(&h.guest(0).guest_id);
    stop.store(true, Ordering::Relaxed);
    let (held, attacker_cpu) = tokio::task::spawn_blocking(move || attacker.join().unwrap())
        .await
        .unwrap();
    println!(
        "flooding guest: 64 authenticated connections kept, {} idle connection attempts, holds \
         {held} idle (counted: {flooder} as its own, cap {}; {unattributed} unattributed, cap {})",
        attempts.load(Ordering::Relaxed),
        limits.max_per_guest,
        limits.max_unattributed,
    );
    println!(
        "while measured: {:.2} s wall, {cpu:.2} s CPU in the process; the flooding guest's \
         thread used {attacker_cpu:.2} s CPU in all",
        wall.as_secs_f64()
    );
    println!("{}", line("under flood, keep-alive (4 guests)", kept));
    println!(
        "{}",
        line("under flood, new connection each (4 guests)", fresh)
    );
    drop(flooder_clients);
    h.shutdown().await;
}
