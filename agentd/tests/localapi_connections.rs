//! A hostile guest against the local API's connections: it opens a thousand idle TLS
//! connections without a token, sends half a request head, stalls a body. The per-peer cap
//! keeps it to its share, a rate-limited warning says so, the timeouts close what it holds,
//! and another guest is served throughout.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;

use crate::raw_tls;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_agentd::guests::localapi::{ConnectionLimits, LocalApiConfig};
use localapi_support::{Harness, Options};

const HOSTILE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));
const NEIGHBOUR: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 3));

/// Log lines at WARN and above, as the agent writes them.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn install() -> Self {
        let captured = Self::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        captured
    }

    fn lines_with(&self, needle: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

fn server_addr(h: &Harness) -> SocketAddr {
    h.base.trim_start_matches("https://").parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_holding_a_thousand_idle_connections_gets_its_share_and_loses_them() {
    let logs = Captured::install();
    let limits = ConnectionLimits {
        max_per_peer: 8,
        max_per_guest: 8,
        max_unattributed: 64,
        max_total: 64,
        handshake_timeout: Duration::from_secs(2),
        header_read_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_secs(10),
        body_timeout: Duration::from_millis(500),
    };
    let h = Harness::start_with(Options {
        config: LocalApiConfig {
            rate_per_s: 1000,
            burst: 1000,
            connections: limits,
            ..LocalApiConfig::default()
        },
        ..Options::default()
    })
    .await;
    let server = server_addr(&h);
    let tls = raw_tls::connector(&h.fingerprint);

    // The hostile guest opens a thousand TLS connections and sends nothing.
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..1000 {
        match raw_tls::tls_from(&tls, HOSTILE, server).await {
            Ok(stream) => held.push(stream),
            Err(_) => refused += 1,
        }
    }
    assert_eq!(held.len(), 8, "the per-peer cap admits exactly its share");
    assert_eq!(refused, 992);

    // The refusals are logged once, not a thousand times, naming the peer and the cap.
    let cap_lines = logs.lines_with("connection cap reached");
    assert_eq!(cap_lines.len(), 1, "one rate-limited line: {cap_lines:#?}");
    assert!(
        cap_lines[0].contains("peer=127.0.0.2") && cap_lines[0].contains("cap=\"per_peer\""),
        "{}",
        cap_lines[0]
    );

    // Another guest is served meanwhile, on connections of its own.
    let neighbour = raw_tls::client_from(&h.fingerprint, NEIGHBOUR);
    for _ in 0..5 {
        let resp = neighbour
            .get(h.url("/v1/storage"))
            .bearer_auth(&h.guest(1).token)
            .send()
            .await
            .expect("the neighbour's request is answered");
        assert_eq!(resp.status(), 200);
    }

    // Half a request head on one held connection: closed by the header-read timeout, well
    // before the idle timeout closes the rest.
    let mut half_head = held.pop().unwrap();
    raw_tls::send(
        &mut half_head,
        b"GET /v1/storage HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthoriz",
    )
    .await;
    let started = tokio::time::Instant::now();
    let (closed, answer) = raw_tls::closed_within(&mut half_head, Duration::from_secs(10)).await;
    assert!(closed, "a half-sent head is not held open");
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "closed by the header-read timeout, not the idle one: {:?}",
        started.elapsed()
    );
    assert!(!answer.contains("200 OK"), "{answer}");

    // A body that stops: 408 after the body timeout, the connection closed, no snapshot.
    let mut stalled = raw_tls::tls_from(&tls, NEIGHBOUR, server).await.unwrap();
    let head = format!(
        "POST /v1/snapshot HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{{\"name\":",
        h.guest(1).token
    );
    raw_tls::send(&mut stalled, head.as_bytes()).await;
    let (closed, answer) = raw_tls::closed_within(&mut stalled, Duration::from_secs(10)).await;
    assert!(closed, "a stalled body is not waited for forever");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
    assert!(
        !h.sim_calls_for(h.guest(1).vmid)
            .iter()
            .any(|c| c.contains("snapshot")),
        "a stalled request reaches no Proxmox call"
    );

    // The idle ones are closed by the idle timeout, which frees the hostile guest's share.
    for stream in &mut held {
        let (closed, _) = raw_tls::closed_within(stream, Duration::from_secs(15)).await;
        assert!(closed, "an idle connection is closed");
    }
    drop(held);
    let mut again = None;
    for _ in 0..50 {
        if let Ok(stream) = raw_tls::tls_from(&tls, HOSTILE, server).await {
            again = Some(stream);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        again.is_some(),
        "closed connections no longer count against the peer"
    );

    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_total_cap_bounds_connections_across_guests() {
    let limits = ConnectionLimits {
        max_per_peer: 4,
        max_total: 10,
        ..ConnectionLimits::default()
    };
    let h = Harness::start_with(Options {
        config: LocalApiConfig {
            rate_per_s: 1000,
            burst: 1000,
            connections: limits,
            ..LocalApiConfig::default()
        },
        ..Options::default()
    })
    .await;
    let server = server_addr(&h);
    let tls = raw_tls::connector(&h.fingerprint);
    let mut held = Vec::new();
    for last in 10..14u8 {
        for _ in 0..4 {
            if let Ok(stream) =
                raw_tls::tls_from(&tls, IpAddr::from([127, 0, 0, last]), server).await
            {
                held.push(stream);
            }
        }
    }
    assert_eq!(
        held.len(),
        10,
        "no more than the total cap across four peers"
    );
    // One freed slot is taken by the next peer to ask.
    drop(held.pop());
    let mut admitted = false;
    for _ in 0..50 {
        if raw_tls::tls_from(&tls, NEIGHBOUR, server).await.is_ok() {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(admitted, "a freed slot is reusable");
    h.shutdown().await;
}

/// A guest with a token floods from 64 addresses (each `127.0.1.x` one of its addresses on the
/// bridge, as a guest without `ipfilter` may use): it authenticates once from each, keeps those
/// connections, then tries to hold 8 more idle TLS connections per address — 576 in all, more
/// than the 512 slots. Its addresses count for it (32 per guest) or for the pool of addresses
/// no guest is known by (64), never for the reservations of the others: a neighbour known by
/// its earlier requests and one known only by its Proxmox address are served on fresh
/// connections throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_flooding_from_64_addresses_leaves_the_other_guests_their_slots() {
    let h = Harness::start_with(Options {
        guests: 3,
        ..Options::default()
    })
    .await;
    let limits = ConnectionLimits::default();
    assert_eq!((limits.max_total, limits.max_per_peer), (512, 32));
    let server = server_addr(&h);
    let tls = raw_tls::connector(&h.fingerprint);
    let configured = IpAddr::from([127, 0, 0, 4]);
    h.api.slots().set_addresses(
        &[(h.guest(2).guest_id.clone(), vec![configured])]
            .into_iter()
            .collect(),
    );
    let fresh_request = |guest: usize, from: IpAddr| {
        let client = raw_tls::client_from(&h.fingerprint, from);
        let request = client
            .get(h.url("/v1/storage"))
            .bearer_auth(&h.guest(guest).token)
            .send();
        async move { request.await.map(|r| r.status().as_u16()) }
    };
    // The neighbour has spoken before: its address is known from that.
    assert_eq!(fresh_request(1, NEIGHBOUR).await.unwrap(), 200);

    let flood: Vec<IpAddr> = (1..=64u8).map(|n| IpAddr::from([127, 0, 1, n])).collect();
    let mut flooder_clients = Vec::new();
    for addr in &flood {
        let client = raw_tls::client_from(&h.fingerprint, *addr);
        let resp = client
            .get(h.url("/v1/storage"))
            .bearer_auth(&h.guest(0).token)
            .send()
            .await
            .expect("the flooding guest's own request");
        assert_eq!(resp.status(), 200);
        flooder_clients.push(client);
    }
    let mut held = Vec::new();
    for addr in &flood {
        for _ in 0..8 {
            if let Ok(stream) = raw_tls::tls_from(&tls, *addr, server).await {
                held.push(stream);
            }
        }
    }
    // Its own account and the unknown addresses' pool are full, and that is all it holds.
    assert_eq!(
        h.api.slots().open_for(&h.guest(0).guest_id),
        (limits.max_per_guest, limits.max_unattributed)
    );

    // Both other guests are served on fresh connections while the flood holds its share.
    for round in 0..20 {
        assert_eq!(
            fresh_request(1, NEIGHBOUR).await.unwrap(),
            200,
            "round {round}"
        );
        assert_eq!(
            fresh_request(2, configured).await.unwrap(),
            200,
            "round {round}"
        );
    }
    // The flood cannot push further while they are served.
    for addr in flood.iter().take(8) {
        assert!(raw_tls::tls_from(&tls, *addr, server).await.is_err());
    }
    drop(held);
    drop(flooder_clients);
    h.shutdown().await;
}

/// The unit's file limit holds the largest total cap the config accepts plus the agent's
/// other sockets and files: the syscall filter keeps the agent from raising it itself.
#[test]
fn the_unit_file_limit_fits_the_largest_connection_cap() {
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/bosun-agentd.service"),
    )
    .unwrap();
    let limit: usize = unit
        .lines()
        .find_map(|l| l.strip_prefix("LimitNOFILE="))
        .expect("the unit sets LimitNOFILE")
        .trim()
        .parse()
        .expect("a number");
    let largest = bosun_agentd::config::MAX_LOCAL_API_CONNECTIONS;
    assert!(
        limit >= largest + 1024,
        "LimitNOFILE={limit} leaves too little above max_connections={largest}"
    );
}
