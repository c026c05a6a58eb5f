//! A hand-written HTTP/1.1 client on one raw, kept-alive TLS connection (pinned to the
//! server's leaf), for tests that must see exactly what a server does with a connection: a
//! 413 read rather than a reset, an answer that says `Connection: close`, a request lost on a
//! connection the server did not announce closing.

use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::{ClientConnection, StreamOwned};
use serde_json::Value;

/// One HTTP/1.1 answer as read off the wire.
#[derive(Debug)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The answer said `Connection: close`.
    pub close: bool,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

/// A raw TLS connection that sends requests by hand and reads answers one by one.
pub struct RawConn {
    stream: StreamOwned<ClientConnection, TcpStream>,
    host: &'static str,
    buf: Vec<u8>,
}

impl std::fmt::Debug for RawConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawConn")
            .field("host", &self.host)
            .field("buffered", &self.buf.len())
            .finish_non_exhaustive()
    }
}

impl RawConn {
    /// Connects to `addr`, pinned to the leaf with SHA-256 `fingerprint`, as `host` (the TLS
    /// server name and the `Host` header).
    pub fn open(addr: SocketAddr, host: &'static str, fingerprint: &str) -> io::Result<Self> {
        let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(Duration::from_secs(20)))?;
        tcp.set_write_timeout(Some(Duration::from_secs(20)))?;
        let config = Arc::new(bosun_pin::client_config(fingerprint).map_err(io::Error::other)?);
        let name = rustls::pki_types::ServerName::try_from(host).map_err(io::Error::other)?;
        let conn = ClientConnection::new(config, name).map_err(io::Error::other)?;
        Ok(Self {
            stream: StreamOwned::new(conn, tcp),
            host,
            buf: Vec::new(),
        })
    }

    /// Writes the head, then the body in pieces of at most 64 KiB, as clients do: the body
    /// does not arrive in the head's TLS record.
    pub fn send(
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
    pub fn send_head(
        &mut self,
        method: &str,
        path: &str,
        token: Option<&str>,
        content_length: usize,
    ) -> io::Result<()> {
        let host = self.host;
        let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: {host}\r\n{auth}content-type: application/json\r\ncontent-length: {content_length}\r\n\r\n"
        );
        self.stream.write_all(head.as_bytes())?;
        self.stream.flush()
    }

    /// Writes `bytes` as they are (a body's first part, say) and flushes them.
    pub fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Whether the server ends the connection (end of stream or an error) rather than send
    /// more.
    pub fn ends(&mut self) -> bool {
        self.fill().is_err()
    }

    /// Reads one answer (`Content-Length` or chunked); end of stream before it is whole is
    /// an error.
    pub fn answer(&mut self) -> io::Result<Answer> {
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

/// The `code` of an answer's JSON error body (empty when there is none).
pub fn code(answer: &Answer) -> String {
    let body: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
    body["code"].as_str().unwrap_or_default().to_owned()
}

/// One request a client sends on a kept-alive connection.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The method.
    pub method: &'static str,
    /// The path.
    pub path: String,
    /// A bearer token.
    pub token: Option<String>,
    /// The body sent with it.
    pub body: Vec<u8>,
}

/// What `rounds` sends of `probe`, one after another on kept-alive connections, came to.
#[derive(Debug, Default)]
pub struct Tally {
    /// Answered in full.
    pub answered: usize,
    /// Lost: the connection broke without the server having said `Connection: close`.
    pub lost: usize,
    /// Answers that said `Connection: close` (a new connection follows).
    pub announced_closes: usize,
    /// How many answers of each status.
    pub statuses: std::collections::BTreeMap<u16, usize>,
}

/// Sends `probe` `rounds` times on one connection, opening a new one only after an answer
/// that said `Connection: close` or after a loss.
pub fn run_rounds(
    addr: SocketAddr,
    host: &'static str,
    fingerprint: &str,
    probe: &Probe,
    rounds: usize,
) -> Tally {
    let mut tally = Tally::default();
    let mut conn = RawConn::open(addr, host, fingerprint).expect("a connection to the server");
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
                    conn =
                        RawConn::open(addr, host, fingerprint).expect("a connection to the server");
                }
            }
            Err(_) => {
                tally.lost += 1;
                conn = RawConn::open(addr, host, fingerprint).expect("a connection to the server");
            }
        }
    }
    tally
}
