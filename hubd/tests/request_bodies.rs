//! Bodies the hub does not take, seen by a client on a raw keep-alive TLS connection: a body
//! over the limit is answered 413 (not a reset), and a body an endpoint does not read (a GET
//! with a body, a refused POST) leaves the connection usable, or the answer that ends it says
//! `Connection: close`. A client never loses a request on a connection the hub did not
//! announce closing. A body that never arrives whole is answered 408 and its connection closed.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bosun_tests::raw_http::{Probe, RawConn, code, run_rounds};

use common::TestHub;

/// The name the client connects as (the server's certificate names it).
const HOST: &str = "localhost";

fn address(hub: &TestHub) -> SocketAddr {
    hub.url.trim_start_matches("https://").parse().unwrap()
}

#[tokio::test]
async fn a_body_an_endpoint_does_not_read_never_costs_the_next_request() {
    let hub = TestHub::start().await;
    let addr = address(&hub);
    let fingerprint = hub.hub.fingerprint().to_owned();
    let probes = [
        Probe {
            method: "GET",
            path: "/v1/health".to_owned(),
            token: None,
            body: b"abc".to_vec(),
        },
        // Refused before the body is read: no admin token.
        Probe {
            method: "POST",
            path: "/v1/admin/enrollment-tokens".to_owned(),
            token: None,
            body: br#"{"ttl_seconds": 600}"#.to_vec(),
        },
    ];
    let mut tallies = Vec::new();
    for probe in probes {
        let tally = tokio::task::spawn_blocking({
            let fingerprint = fingerprint.clone();
            let probe = probe.clone();
            move || run_rounds(addr, HOST, &fingerprint, &probe, 40)
        })
        .await
        .unwrap();
        eprintln!("{} {}: {tally:?}", probe.method, probe.path);
        tallies.push((probe, tally));
    }
    for (probe, tally) in tallies {
        assert_eq!(
            (tally.lost, tally.answered),
            (0, 40),
            "{} {}: requests lost on connections the hub closed unannounced: {tally:?}",
            probe.method,
            probe.path
        );
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_answered_413_not_reset() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-big-body").await;
    let addr = address(&hub);
    let fingerprint = hub.hub.fingerprint().to_owned();
    let big = vec![b' '; 5_000_000];
    let probes = [
        Probe {
            method: "POST",
            path: "/v1/admin/enrollment-tokens".to_owned(),
            token: Some(hub.admin.clone()),
            body: big.clone(),
        },
        Probe {
            method: "PUT",
            path: format!("/v1/hosts/{host}/escrow"),
            token: Some(key.clone()),
            body: big,
        },
    ];
    for probe in probes {
        let (answer, next) = tokio::task::spawn_blocking({
            let fingerprint = fingerprint.clone();
            let probe = probe.clone();
            move || {
                let mut conn = RawConn::open(addr, HOST, &fingerprint).unwrap();
                let answer = conn
                    .send(
                        probe.method,
                        &probe.path,
                        probe.token.as_deref(),
                        &probe.body,
                    )
                    .and_then(|()| conn.answer());
                // The connection is either still good for a small request or was announced
                // closing.
                let next = match &answer {
                    Ok(a) if !a.close => Some(
                        conn.send("GET", "/v1/health", None, b"")
                            .and_then(|()| conn.answer())
                            .map(|a| a.status),
                    ),
                    _ => None,
                };
                (answer, next)
            }
        })
        .await
        .unwrap();
        let answer = answer.unwrap_or_else(|e| {
            panic!(
                "{} {}: no answer to a 5 MB body, the connection broke: {e}",
                probe.method, probe.path
            )
        });
        assert_eq!(
            (answer.status, code(&answer).as_str()),
            (413, "body_too_large"),
            "{} {}: {answer:?}",
            probe.method,
            probe.path
        );
        if let Some(next) = next {
            assert_eq!(
                next.unwrap_or_else(|e| panic!(
                    "{} {}: the 413 kept the connection open but the next request on it failed: {e}",
                    probe.method, probe.path
                )),
                200
            );
        }
    }
}

#[tokio::test]
async fn a_body_too_long_to_drain_is_answered_with_connection_close() {
    let hub = TestHub::start().await;
    let addr = address(&hub);
    let fingerprint = hub.hub.fingerprint().to_owned();
    let (answer, ended) = tokio::task::spawn_blocking(move || {
        let mut conn = RawConn::open(addr, HOST, &fingerprint).unwrap();
        // 20 MB announced, none sent: more than the hub drains to keep a connection.
        conn.send_head("GET", "/v1/health", None, 20_000_000)
            .unwrap();
        let answer = conn.answer().unwrap();
        (answer, conn.ends())
    })
    .await
    .unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(
        answer.close,
        "the answer must announce the close: {answer:?}"
    );
    assert!(ended, "the hub keeps a connection it said it would close");
}

#[tokio::test]
async fn a_body_that_never_arrives_whole_is_answered_408_and_its_connection_closed() {
    let within = Duration::from_secs(1);
    let hub = TestHub::start_with(|config| config.body_timeout = within).await;
    let addr = address(&hub);
    let fingerprint = hub.hub.fingerprint().to_owned();
    // Enrollment and the dashboard's login read their bodies before any credential: 1,000
    // bytes announced, a few sent, the rest never.
    let head = |path: &str, content_type: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nhost: {HOST}\r\norigin: https://{HOST}\r\n\
             content-type: {content_type}\r\ncontent-length: 1000\r\n\r\n"
        )
    };
    let attempts = [
        (
            "enroll",
            head("/v1/enroll", "application/json") + r#"{"token": "#,
        ),
        (
            "login",
            head("/ui/login", "application/x-www-form-urlencoded") + "token=",
        ),
    ];
    for (name, sent) in attempts {
        let fingerprint = fingerprint.clone();
        let started = Instant::now();
        let (answer, ended) = tokio::task::spawn_blocking(move || {
            let mut conn = RawConn::open(addr, HOST, &fingerprint).unwrap();
            conn.write_raw(sent.as_bytes()).unwrap();
            let answer = conn.answer().unwrap();
            (answer, conn.ends())
        })
        .await
        .unwrap();
        assert_eq!(answer.status, 408, "{name}: {answer:?}");
        if name == "enroll" {
            assert_eq!(code(&answer), "body_timeout", "{answer:?}");
        }
        assert!(
            started.elapsed() >= within,
            "{name}: {:?}",
            started.elapsed()
        );
        assert!(
            answer.close,
            "{name}: the answer announces the close: {answer:?}"
        );
        assert!(
            ended,
            "{name}: the hub keeps a connection it said it would close"
        );
    }
}
