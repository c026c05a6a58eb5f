//! The real `bosun-hubd` binary, as an operator runs it: its one-shot commands (`init`,
//! `backup`, `restore`, `cert …`) and `serve`, with what each printed, and the key a served
//! hub presents to a TLS client that trusts anything.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bosun_pin::Pin;
use rustls::pki_types::ServerName;

/// `target/<profile>/NAME`, built by `cargo build --workspace --bins`.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the workspace's binaries first (`cargo build --workspace --bins`)",
        path.display()
    );
    path
}

/// Runs `bosun-hubd ARGS --data DATA`, which must succeed; returns what it printed.
pub fn hubd(args: &[&str], data: &Path) -> String {
    let out = Command::new(binary("bosun-hubd"))
        .args(args)
        .arg("--data")
        .arg(data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bosun-hubd {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The value of the `name` line `bosun-hubd` printed.
pub fn field<'a>(printed: &'a str, name: &str) -> &'a str {
    printed
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .unwrap_or_else(|| panic!("no `{name}` in {printed}"))
        .trim()
}

/// `bosun-hubd serve`, killed when dropped (SIGKILL: the hub is lost, not stopped).
pub struct Served {
    child: Child,
    /// What it printed before it listened: `fingerprint:` and `key pin:` lines.
    pub printed: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serves `data` on `port` and waits until it listens. Its log is drained on a thread.
pub fn serve(data: &Path, port: u16) -> Served {
    let mut child = Command::new(binary("bosun-hubd"))
        // A 1 s poll interval for new hosts: agents pace host-key rotations at ten of them.
        .args([
            "serve",
            "--poll-interval",
            "1",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data",
        ])
        .arg(data)
        .env("BOSUN_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (listening, ready) = std::sync::mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if line.contains("addr=") {
                let _ = listening.send(());
            }
        }
    });
    let (said, lines) = std::sync::mpsc::channel();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            let _ = said.send(line);
        }
    });
    ready
        .recv_timeout(Duration::from_secs(30))
        .expect("the hub logs its address");
    // Printed before it answers: both lines are there once it listens.
    let printed = (0..2)
        .map(|_| lines.recv_timeout(Duration::from_secs(5)).unwrap() + "\n")
        .collect();
    Served { child, printed }
}

/// A free port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The key pin of the certificate the TLS server on `127.0.0.1:port` presents, read from a
/// real handshake by a client that trusts any certificate.
pub async fn presented_key(port: u16) -> Pin {
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .dangerous()
    .with_custom_certificate_verifier(Arc::new(super::tap::AnyCert))
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .expect("the hub presents a certificate")
        .clone();
    Pin::of_key(&leaf).expect("the hub's certificate has a readable key")
}
