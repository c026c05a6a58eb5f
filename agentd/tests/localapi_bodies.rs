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

mod localapi_support;

use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use localapi_support::{Harness, Options};
use rustls::{ClientConnection, StreamOwned};
use serde_json::Value;

/// One HTTP/1.1 answer as read off the wire.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// The answer said `Connection: close`.
    close: bool,
    body: Vec<u8>,
}

/// A raw TLS connection that sends requests by hand and reads answers one by one.
struct RawConn {
    stream: StreamOwned<ClientConnection, TcpStream>,
    buf: Vec<u8>,
}

impl RawConn {
    fn open(addr: SocketAddr, fingerprint: &str) -> io::Result<Self> {
        let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(Duration::from_secs(20)))?;
        tcp.set_write_timeout(Some(Duration::from_secs(20)))?;
        let config = Arc::new(bosun_pin::client_config(fingerprint).unwrap());
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let conn = ClientConnection::new(config, name).map_err(io::Error::other)?;
        Ok(Self {
            stream: StreamOwned::new(conn, tcp),
            buf: Vec::new(),
        })
    }

    /// Writes the head, then the body in pieces of at most 64 KiB, as clients do: the body
    /// does not arrive in the head's TLS record.
    fn send(
        &mut self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &[u8],
    ) -> io::Result<()> {
        self.send_head(method, path, token, body.len())?;
        // The body follows a moment later, as on a slower link: the server has the head alone.
        std::thread::sleep(Duration::from_millis(5));
        for piece in body.chunks(64 * 1024) {
            self.stream.write_all(piece)?;
        }
        self.stream.flush()
    }

    /// Writes a request head that announces a body of `content_length` bytes.
    fn send_head(
        &mut self,
        method: &str,
        path: &str,
        token: Option<&str>,
        content_length: usize,
    ) -> io::Result<()> {
        let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{auth}content-type: application/json\r\ncontent-length: {content_length}\r\n\r\n"
        );
        self.stream.write_all(head.as_bytes())?;
        self.stream.flush()
    }

    /// Whether the server ends the connection (end of stream or an error) rather than send
    /// more.
    fn ends(&mut self) -> bool {
        self.fill().is_err()
    }

    /// Reads one answer (`Content-Length` or chunked); end of stream before it is whole is
    /// an error.
    fn answer(&mut self) -> io::Result<Answer> {
        let head_end = loop {
            if let Some(at) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            self.fill()?;
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).to_lowercase();
        self.buf.drain(..head_end);
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io::Error::other(format!("bad status line: {head}")))?;
        let header = |name: &str| {
            head.lines()
                .filter_map(|line| line.split_once(':'))
                .find(|(n, _)| n.trim() == name)
                .map(|(_, v)| v.trim().to_owned())
        };
        let close = header("connection").is_some_and(|v| v.contains("close"));
        let body = if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            self.chunked()?
        } else {
            let len: usize =
                header("content-length").map_or(Ok(0), |v| v.parse().map_err(io::Error::other))?;
            self.exactly(len)?
        };
        Ok(Answer {
            status,
            close,
            body,
        })
    }

    fn chunked(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                    break at;
                }
                self.fill()?;
            };
            let size =
                usize::from_str_radix(String::from_utf8_lossy(&self.buf[..line_end]).trim(), 16)
                    .map_err(io::Error::other)?;
            self.buf.drain(..line_end + 2);
            let chunk = self.exactly(size + 2)?;
            if size == 0 {
                return Ok(body);
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }

    fn exactly(&mut self, len: usize) -> io::Result<Vec<u8>> {
        while self.buf.len() < len {
            self.fill()?;
        }
        Ok(self.buf.drain(..len).collect())
    }

    fn fill(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 16 * 1024];
        match self.stream.read(&mut chunk)? {
            0 => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed",
            )),
            n => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
        }
    }
}

fn address(harness: &Harness) -> SocketAddr {
    harness.base.trim_start_matches("https://").parse().unwrap()
}

fn code(answer: &Answer) -> String {
    let body: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
    body["code"].as_str().unwrap_or_default().to_owned()
}

/// One request a client sends on a kept-alive connection.
#[derive(Debug, Clone)]
struct Probe {
    method: &'static str,
    path: String,
    token: Option<String>,
    body: Vec<u8>,
}

/// What `rounds` sends of `probe`, one after another on kept-alive connections, came to.
#[derive(Debug, Default)]
struct Tally {
    /// Answered in full.
    answered: usize,
    /// Lost: the connection broke without the server having said `Connection: close`.
    lost: usize,
    /// Answers that said `Connection: close` (a new connection follows).
    announced_closes: usize,
    statuses: std::collections::BTreeMap<u16, usize>,
}

/// Sends `probe` `rounds` times on one connection, opening a new one only after an answer
/// that said `Connection: close` or after a loss.
fn run_rounds(addr: SocketAddr, fingerprint: &str, probe: &Probe, rounds: usize) -> Tally {
    let mut tally = Tally::default();
    let mut conn = RawConn::open(addr, fingerprint).unwrap();
    for _ in 0..rounds {
        let sent = conn.send(
            probe.method,
            &probe.path,
            probe.token.as_deref(),
            &probe.body,
        );
        match sent.and_then(|()| conn.answer()) {
            Ok(answer) => {
                tally.answered += 1;
                *tally.statuses.entry(answer.status).or_default() += 1;
                if answer.close {
                    tally.announced_closes += 1;
                    conn = RawConn::open(addr, fingerprint).unwrap();
                }
            }
            Err(_) => {
                tally.lost += 1;
                conn = RawConn::open(addr, fingerprint).unwrap();
            }
        }
    }
    tally
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
            move || run_rounds(addr, &fingerprint, &probe, 40)
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
        let mut conn = RawConn::open(addr, &fingerprint).unwrap();
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
        let mut conn = RawConn::open(addr, &fingerprint).unwrap();
        conn.send_head("GET", "/v1/health", None, 20_000_000)
            .unwrap();
        answers.push(("too long", conn.answer().unwrap(), conn.ends()));
        // 100 bytes announced, 10 sent, then nothing: the rest does not come within the
        // body timeout.
        let mut conn = RawConn::open(addr, &fingerprint).unwrap();
        conn.send_head("GET", "/v1/health", None, 100).unwrap();
        conn.stream.write_all(b"0123456789").unwrap();
        conn.stream.flush().unwrap();
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
