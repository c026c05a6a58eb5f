//! A hub link that loses answers on purpose. It terminates TLS with the hub's own certificate
//! (the agent's pin still matches), forwards each request to the hub on a connection of its
//! own, reads the whole answer, and — while a test has armed it — keeps from the agent the
//! answers its rule picks: the hub acted on the request, the agent never hears back, which is
//! what a connection lost at the wrong moment does.
//!
//! One request per connection (the tap asks the hub to close after each answer), so every
//! answer is judged whole.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::RealHub;

/// Largest request head, request body or answer the tap handles.
const MAX_BYTES: usize = 32 * 1024 * 1024;

/// One request and the hub's answer to it, as the rule sees them.
#[derive(Debug)]
pub struct Exchange<'a> {
    /// The request line and headers.
    pub head: &'a str,
    /// The request body.
    pub body: &'a [u8],
    /// The hub's answer, status line to the last byte.
    pub answer: &'a [u8],
}

impl Exchange<'_> {
    /// The bearer token the request presented.
    pub fn bearer(&self) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("authorization")
                .then(|| value.trim().strip_prefix("Bearer "))
                .flatten()
        })
    }

    /// Whether the request is a poll.
    pub fn is_poll(&self) -> bool {
        self.head
            .lines()
            .next()
            .is_some_and(|line| line.starts_with("POST ") && line.contains("/poll"))
    }

    /// Whether the request body, or the answer, holds `text`.
    pub fn mentions(&self, text: &str) -> bool {
        let find = |bytes: &[u8]| bytes.windows(text.len()).any(|w| w == text.as_bytes());
        find(self.body) || find(self.answer)
    }
}

type Rule = Box<dyn Fn(&Exchange<'_>) -> bool + Send + Sync>;

/// What the tap does with the answers its rule picks.
struct Armed {
    rule: Rule,
    /// Drop only the first answer picked, then forward everything again.
    once: bool,
}

/// The tap: its URL replaces the hub's in the agent's config.
pub struct LossyTap {
    pub url: String,
    armed: Arc<Mutex<Option<Armed>>>,
    dropped: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl LossyTap {
    /// A tap in front of `hub` on a loopback port.
    pub async fn start(hub: &RealHub) -> Self {
        let acceptor = super::tap::as_the_hub(hub);
        let connector = tokio_rustls::TlsConnector::from(Arc::new(
            bosun_hubd::tls::pinned_client_config(&hub.fingerprint).unwrap(),
        ));
        let upstream = hub.url.trim_start_matches("https://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "https://localhost:{}",
            listener.local_addr().unwrap().port()
        );
        let armed: Arc<Mutex<Option<Armed>>> = Arc::new(Mutex::new(None));
        let dropped = Arc::new(AtomicUsize::new(0));
        let (rules, counted) = (Arc::clone(&armed), Arc::clone(&dropped));
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, connector, upstream, rules, counted) = (
                    acceptor.clone(),
                    connector.clone(),
                    upstream.clone(),
                    Arc::clone(&rules),
                    Arc::clone(&counted),
                );
                tokio::spawn(async move {
                    let Ok(mut down) = acceptor.accept(socket).await else {
                        return;
                    };
                    let Some((head, body)) = read_request(&mut down).await else {
                        return;
                    };
                    let Ok(tcp) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let name = ServerName::try_from("localhost").unwrap();
                    let Ok(mut up) = connector.connect(name, tcp).await else {
                        return;
                    };
                    let forwarded = close_after(&head);
                    if up.write_all(forwarded.as_bytes()).await.is_err()
                        || up.write_all(&body).await.is_err()
                    {
                        return;
                    }
                    let mut answer = Vec::new();
                    let _ = (&mut up)
                        .take(MAX_BYTES as u64)
                        .read_to_end(&mut answer)
                        .await;
                    let exchange = Exchange {
                        head: &head,
                        body: &body,
                        answer: &answer,
                    };
                    let lose = {
                        let mut armed = rules.lock();
                        let picked = armed.as_ref().is_some_and(|a| (a.rule)(&exchange));
                        if picked && armed.as_ref().is_some_and(|a| a.once) {
                            *armed = None;
                        }
                        picked
                    };
                    if lose {
                        counted.fetch_add(1, Ordering::SeqCst);
                        // The connection goes without a word: the agent's request failed
                        // after the hub acted on it.
                        return;
                    }
                    let _ = down.write_all(&answer).await;
                    let _ = down.shutdown().await;
                });
            }
        });
        Self {
            url,
            armed,
            dropped,
            task,
        }
    }

    /// Loses the first answer `rule` picks, then forwards everything again.
    pub fn lose_next(&self, rule: impl Fn(&Exchange<'_>) -> bool + Send + Sync + 'static) {
        *self.armed.lock() = Some(Armed {
            rule: Box::new(rule),
            once: true,
        });
    }

    /// Loses every answer `rule` picks until [`LossyTap::heal`].
    pub fn lose_all(&self, rule: impl Fn(&Exchange<'_>) -> bool + Send + Sync + 'static) {
        *self.armed.lock() = Some(Armed {
            rule: Box::new(rule),
            once: false,
        });
    }

    /// Forwards every answer again.
    pub fn heal(&self) {
        *self.armed.lock() = None;
    }

    /// How many answers were lost so far.
    pub fn lost(&self) -> usize {
        self.dropped.load(Ordering::SeqCst)
    }
}

impl Drop for LossyTap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one request: its head (as text) and its body (by `content-length`).
async fn read_request(stream: &mut (impl AsyncRead + Unpin)) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if buf.len() > MAX_BYTES {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..end].to_vec()).ok()?;
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())
                .flatten()
        })
        .unwrap_or(0);
    if length > MAX_BYTES {
        return None;
    }
    let mut body = buf[end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    Some((head, body))
}

/// The request head with `connection: close` in place of any connection header.
fn close_after(head: &str) -> String {
    let mut lines: Vec<&str> = head
        .trim_end_matches("\r\n")
        .split("\r\n")
        .filter(|line| {
            !line
                .split_once(':')
                .is_some_and(|(name, _)| name.eq_ignore_ascii_case("connection"))
        })
        .collect();
    lines.push("connection: close");
    format!("{}\r\n\r\n", lines.join("\r\n"))
}
