//! A connection that holds its place without a request is closed: a head sent a byte at a
//! time, an HTTP/2 client that only pings, a connection silent after its handshake or after
//! its answer. A long-poll held past both timeouts is still answered.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun_httpkit::conn::Timeouts;
use reqwest::{Method, StatusCode};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::common::{TestHub, desired};

/// The longest any connection here may stay open past its timeout: a bound for the test, not
/// a figure.
const BOUND: Duration = Duration::from_secs(20);

async fn hub_with(timeouts: Timeouts) -> TestHub {
    TestHub::start_with(|config| config.connection_timeouts = timeouts).await
}

/// A TLS connection to `hub` offering only `alpn`.
async fn connect(hub: &TestHub, alpn: &[u8]) -> TlsStream<TcpStream> {
    let mut config = bosun_hubd::tls::pinned_client_config(&hub.hub.fingerprint()).unwrap();
    config.alpn_protocols = vec![alpn.to_vec()];
    let addr = hub.url.trim_start_matches("https://");
    let tcp = TcpStream::connect(addr).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// Reads until the hub closes the connection, every `every` writing `keep_up` (when not
/// empty) as a client that keeps talking would; how long it stayed open after `since`.
async fn open_for(
    mut tls: TlsStream<TcpStream>,
    keep_up: &[u8],
    every: Duration,
    since: Instant,
) -> Duration {
    let mut buf = [0u8; 4096];
    let closed = tokio::time::timeout(BOUND, async {
        loop {
            tokio::select! {
                read = tls.read(&mut buf) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                },
                () = tokio::time::sleep(every), if !keep_up.is_empty() => {
                    if tls.write_all(keep_up).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "the hub keeps the connection past {BOUND:?}"
    );
    since.elapsed()
}

#[tokio::test]
async fn a_head_sent_a_byte_at_a_time_and_an_http2_client_that_only_pings_are_closed() {
    // The idle timeout is far off: only the header-read timeout closes these in time.
    let timeouts = Timeouts {
        header_read: Duration::from_secs(1),
        idle: Duration::from_secs(300),
    };
    let hub = hub_with(timeouts).await;

    let mut slow = connect(&hub, b"http/1.1").await;
    let started = Instant::now();
    slow.write_all(b"POST /v1/enroll HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    let open = open_for(slow, b"X", Duration::from_millis(200), started).await;
    assert!(open >= timeouts.header_read, "closed after {open:?}");

    let mut pinging = connect(&hub, b"h2").await;
    assert_eq!(pinging.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let started = Instant::now();
    // The client preface and an empty SETTINGS frame, then a PING every 200 ms.
    pinging
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00bosunpng";
    let open = open_for(pinging, ping, Duration::from_millis(200), started).await;
    assert!(open >= timeouts.header_read, "closed after {open:?}");

    // The hub still answers, and counts both.
    let health = hub.request(Method::GET, "/v1/health", None, None).await;
    assert_eq!(health.status(), StatusCode::OK);
    assert!(timed_out(&hub, "header_read").await >= 2);
}

/// The connections the hub's one listener closed on `timeout`, from its metrics (the test's
/// own client's connections may add to them).
async fn timed_out(hub: &TestHub, timeout: &str) -> u64 {
    let metrics = hub.metrics().await;
    let series = format!(
        "bosun_hub_connections_timed_out_total{{listener=\"both\",timeout=\"{timeout}\"}} "
    );
    let line = metrics.lines().find(|l| l.starts_with(&series));
    line.and_then(|l| l[series.len()..].parse().ok())
        .unwrap_or_else(|| panic!("no {series}in {metrics}"))
}

#[tokio::test]
async fn a_silent_connection_is_closed_and_a_long_poll_held_past_the_timeouts_is_answered() {
    let timeouts = Timeouts {
        header_read: Duration::from_secs(1),
        idle: Duration::from_secs(1),
    };
    let hub = hub_with(timeouts).await;

    // Silent from its handshake on.
    let silent = connect(&hub, b"http/1.1").await;
    let open = open_for(silent, b"", Duration::ZERO, Instant::now()).await;
    assert!(open >= timeouts.idle, "closed after {open:?}");

    // Answered once, then silent: the idle time counts from the answer.
    let mut answered = connect(&hub, b"http/1.1").await;
    answered
        .write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    answered.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let open = open_for(answered, b"", Duration::ZERO, Instant::now()).await;
    assert!(
        open >= timeouts.idle - Duration::from_millis(50),
        "closed after {open:?}"
    );

    // A poll held for three seconds, three times the idle timeout, is answered.
    let (host, key) = hub.enroll("pve-held").await;
    let put = format!("/v1/admin/hosts/{host}/desired");
    let stored = hub.admin(Method::PUT, &put, Some(desired())).await;
    assert_eq!(stored.status(), StatusCode::OK);
    assert_eq!(hub.poll_json(host, &key, 0).await["generation"], 1);
    let started = Instant::now();
    let held = hub.poll(host, &key, 1, &[], 3).await;
    assert_eq!(held.status(), StatusCode::OK);
    assert!(
        started.elapsed() >= Duration::from_millis(2_900),
        "the poll was held: {:?}",
        started.elapsed()
    );
    let _answer: serde_json::Value = held.json().await.unwrap();
    assert!(timed_out(&hub, "idle").await >= 2);
    assert_eq!(timed_out(&hub, "write_stall").await, 0);
}
