//! A wiretap in front of the hub: terminates TLS with the hub's own certificate (so the
//! agent's pin still matches), forwards every connection to the hub over TLS, and keeps
//! every byte the agents sent in plaintext. What the hub received is exactly what the tap
//! holds, so a test can prove a secret never reached the hub; it keeps the hub's answers too
//! ([`HubTap::answered`]), so a test can see what an agent was told.

use std::sync::Arc;

use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::RealHub;

/// The tap: its URL replaces the hub's in the agent's config.
pub struct HubTap {
    pub url: String,
    received: Arc<Mutex<Vec<u8>>>,
    answered: Arc<Mutex<Vec<u8>>>,
    task: JoinHandle<()>,
}

impl HubTap {
    /// A tap in front of `hub` on a loopback port.
    pub async fn start(hub: &RealHub) -> Self {
        let acceptor = as_the_hub(hub);
        let mut client = rustls::ClientConfig::builder()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert))
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let upstream = hub.url.trim_start_matches("https://").to_owned();

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "https://localhost:{}",
            listener.local_addr().unwrap().port()
        );
        let received = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&received);
        let answered = Arc::new(Mutex::new(Vec::new()));
        let told = Arc::clone(&answered);
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, connector, upstream, kept, told) = (
                    acceptor.clone(),
                    connector.clone(),
                    upstream.clone(),
                    Arc::clone(&kept),
                    Arc::clone(&told),
                );
                tokio::spawn(async move {
                    let Ok(down) = acceptor.accept(socket).await else {
                        return;
                    };
                    let Ok(tcp) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let name = ServerName::try_from("localhost").unwrap();
                    let Ok(up) = connector.connect(name, tcp).await else {
                        return;
                    };
                    let (mut down_r, mut down_w) = tokio::io::split(down);
                    let (mut up_r, mut up_w) = tokio::io::split(up);
                    let to_hub = async {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            match down_r.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => {
                                    kept.lock().extend_from_slice(&buf[..n]);
                                    if up_w.write_all(&buf[..n]).await.is_err() {
                                        break;
                                    }
                                }
                            }
                        }
                        let _ = up_w.shutdown().await;
                    };
                    let to_agent = async {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            match up_r.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => {
                                    told.lock().extend_from_slice(&buf[..n]);
                                    if down_w.write_all(&buf[..n]).await.is_err() {
                                        break;
                                    }
                                }
                            }
                        }
                        let _ = down_w.shutdown().await;
                    };
                    tokio::join!(to_hub, to_agent);
                });
            }
        });
        Self {
            url,
            received,
            answered,
            task,
        }
    }

    /// Every byte the agents sent to the hub so far, decrypted.
    pub fn received(&self) -> Vec<u8> {
        self.received.lock().clone()
    }

    /// Every byte the hub answered the agents so far, decrypted.
    pub fn answered(&self) -> Vec<u8> {
        self.answered.lock().clone()
    }
}

impl Drop for HubTap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A TLS server with the hub's own certificate and key (an agent's pin matches it), speaking
/// HTTP/1.1 only, so the bytes a tap sees are the requests as written.
pub(super) fn as_the_hub(hub: &RealHub) -> tokio_rustls::TlsAcceptor {
    let tls_dir = hub.dir.path().join("tls");
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(tls_dir.join("cert.pem"))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
    let key = PrivateKeyDer::from_pem_file(tls_dir.join("key.pem")).unwrap();
    let mut server = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsAcceptor::from(Arc::new(server))
}

/// The tap's upstream is the test's own hub on loopback.
#[derive(Debug)]
pub(super) struct AnyCert;

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
