//! Raw TLS connections to the local API from a chosen loopback source address (each
//! `127.0.0.x` stands for one guest on the bridge), for tests that misbehave below HTTP.

#![allow(dead_code, reason = "each test binary uses the helpers it needs")]

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A TLS client for the leaf whose SHA-256 is `fingerprint`.
pub fn connector(fingerprint: &str) -> TlsConnector {
    let config = bosun_pin::client_config(fingerprint).expect("a valid fingerprint");
    TlsConnector::from(Arc::new(config))
}

/// A TCP connection from `source` to `server`.
pub async fn tcp_from(source: IpAddr, server: SocketAddr) -> io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(source, 0))?;
    tokio::time::timeout(Duration::from_secs(5), socket.connect(server))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))?
}

/// A TLS connection from `source` to `server`, handshake done.
pub async fn tls_from(
    connector: &TlsConnector,
    source: IpAddr,
    server: SocketAddr,
) -> io::Result<TlsStream<TcpStream>> {
    let tcp = tcp_from(source, server).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("an ip name");
    tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "handshake timed out"))?
}

/// Whether the server has closed `stream`: it reads end of stream or an error within `wait`.
/// Bytes the server sent before closing (an answer) are returned with `true`.
pub async fn closed_within(stream: &mut TlsStream<TcpStream>, wait: Duration) -> (bool, String) {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let mut buf = [0u8; 4096];
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return (false, String::from_utf8_lossy(&seen).into_owned()),
            Ok(Ok(0)) | Ok(Err(_)) => return (true, String::from_utf8_lossy(&seen).into_owned()),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// Sends `bytes` and flushes.
pub async fn send(stream: &mut TlsStream<TcpStream>, bytes: &[u8]) {
    stream.write_all(bytes).await.expect("bytes sent");
    stream.flush().await.expect("bytes flushed");
}

/// A reqwest client pinned to `fingerprint` whose connections come from `source`.
pub fn client_from(fingerprint: &str, source: IpAddr) -> reqwest::Client {
    let config = bosun_pin::client_config(fingerprint).expect("a valid fingerprint");
    reqwest::Client::builder()
        .tls_backend_preconfigured(config)
        .local_address(source)
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client builds")
}
