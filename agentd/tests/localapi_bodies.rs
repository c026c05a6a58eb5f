//! Bodies the local API does not take, seen by a guest on a raw keep-alive TLS connection: a
//! body over the limit is answered 413 (not a reset), and a body an endpoint does not read (a
//! GET with a body, a request refused before its body is read) leaves the connection usable,
//! or the answer that ends it says `Connection: close`. A controller never loses a request
//! on a connection the agent did not announce closing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;

use std::net::SocketAddr;
use std::time::Duration;

use bosun_tests::raw_http::{Probe, RawConn, code, run_rounds};

use localapi_support::{Harness, Options};

/// The name the client connects as (the server's certificate names it).
const HOST: &str = "127.0.0.1";

fn address(harness: &Harness) -> SocketAddr {
    harness.base.trim_start_matches("https://").parse().unwrap()
}

fn one_guest() -> Options {
    Options {
        guests: 1,
        ..Options::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_an_endpoint_does_not_read_never_costs_the_next_request() {
    let harness = Harness::start_with(one_guest()).await;
    let addr = address(&harness);
    let fingerprint = harness.fingerprint.clone();
    let probes = [
        Probe {
            method: "GET",
            path: "/v1/health".to_owned(),
            token: None,
            body: b"abc".to_vec(),
        },
        Probe {
            method: "GET",
            path: "/v1/backup/status".to_owned(),
            token: Some(harness.guest(0).token.clone()),
            body: b"abc".to_vec(),
        },
        // Refused before the body is read: no token.
        Probe {
            method: "POST",
            path: "/v1/snapshot".to_owned(),
            token: None,
            body: br#"{"name": "x"}"#.to_vec(),
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
            "{} {}: requests lost on connections the agent closed unannounced: {tally:?}",
            probe.method,
            probe.path
        );
    }
    harness.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_answered_413_not_reset() {
    let harness = Harness::start_with(one_guest()).await;
    let addr = address(&harness);
    let fingerprint = harness.fingerprint.clone();
    let token = harness.guest(0).token.clone();
    let (answer, next) = tokio::task::spawn_blocking(move || {
        let mut conn = RawConn::open(addr, HOST, &fingerprint).unwrap();
        let answer = conn
            .send("POST", "/v1/snapshot", Some(&token), &vec![b' '; 5_000_000])
            .and_then(|()| conn.answer());
        // The connection is either still good for a small request or was announced closing.
        let next = match &answer {
            Ok(a) if !a.close => Some(
                conn.send("GET", "/v1/health", None, b"")
                    .and_then(|()| conn.answer())
                    .map(|a| a.status),
            ),
            _ => None,
        };
        (answer, next)
    })
    .await
    .unwrap();
    let answer =
        answer.unwrap_or_else(|e| panic!("no answer to a 5 MB body, the connection broke: {e}"));
    assert_eq!(
        (answer.status, code(&answer).as_str()),
        (413, "payload_too_large"),
        "{answer:?}"
    );
    if let Some(next) = next {
        assert_eq!(
            next.unwrap_or_else(|e| panic!(
                "the 413 kept the connection open but the next request on it failed: {e}"
            )),
            200
        );
    }
    harness.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_too_long_or_too_slow_to_drain_is_answered_with_connection_close() {
    let mut options = one_guest();
    options.config.connections.body_timeout = Duration::from_millis(500);
    let harness = Harness::start_with(options).await;
    let addr = address(&harness);
    let fingerprint = harness.fingerprint.clone();
    let answers = tokio::task::spawn_blocking(move || {
        let mut answers = Vec::new();
        // 20 MB announced, none sent: more than the agent drains to keep a connection.
        let mut conn = RawConn::open(addr, HOST, &fingerprint).unwrap();
        conn.send_head("GET", "/v1/health", None, 20_000_000)
            .unwrap();
        answers.push(("too long", conn.answer().unwrap(), conn.ends()));
        // 100 bytes announced, 10 sent, then nothing: the rest does not come within the
        // body timeout.
        let mut conn = RawConn::open(addr, HOST, &fingerprint).unwrap();
        conn.send_head("GET", "/v1/health", None, 100).unwrap();
        conn.write_raw(b"0123456789").unwrap();
        answers.push(("stalled", conn.answer().unwrap(), conn.ends()));
        answers
    })
    .await
    .unwrap();
    for (case, answer, ended) in answers {
        assert_eq!(answer.status, 200, "{case}: {answer:?}");
        assert!(
            answer.close,
            "{case}: the answer must announce the close: {answer:?}"
        );
        assert!(
            ended,
            "{case}: the agent keeps a connection it said it would close"
        );
    }
    harness.shutdown().await;
}
