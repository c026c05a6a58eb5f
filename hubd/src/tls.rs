//! TLS: the hub's certificate (operator-provided or a persisted self-signed one), its
//! fingerprint and key pin, and a client configuration that pins one of them, for agents,
//! tests and the benchmark.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Where the hub's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsSource {
    /// `tls/cert.pem` + `tls/key.pem` in the data directory, created by `init`.
    SelfSigned,
    /// Operator-provided PEM files.
    Files {
        /// Certificate chain, leaf first.
        cert: PathBuf,
        /// Private key.
        key: PathBuf,
    },
}

/// TLS setup failures.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or parsed.
    #[error("reading {what} from {path}")]
    ReadPem {
        /// `certificate` or `private key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The certificate file holds no certificate.
    #[error("no certificate in {path}")]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The leaf certificate cannot be parsed.
    #[error("the certificate in {path} cannot be parsed as X.509")]
    Unreadable {
        /// The file.
        path: PathBuf,
    },
    /// rustls refused the certificate/key pair.
    #[error("building the TLS server configuration")]
    Config(#[source] rustls::Error),
    /// Generating the self-signed certificate failed.
    #[error("generating a self-signed certificate")]
    Generate(#[source] rcgen::Error),
    /// Writing the self-signed certificate failed.
    #[error("writing {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The loaded server identity.
#[derive(Debug, Clone)]
pub struct ServerIdentity {
    /// rustls server configuration (ALPN h2 + http/1.1).
    pub config: Arc<rustls::ServerConfig>,
    /// SHA-256 of the leaf certificate, 64 lowercase hex digits.
    pub fingerprint: String,
    /// The leaf's key pin (`spki:` and the SHA-256 of its public key), what a renewal of the
    /// same key keeps.
    pub key_pin: String,
}

/// Paths of the self-signed certificate inside a data directory.
pub fn self_signed_paths(data_dir: &Path) -> (PathBuf, PathBuf) {
    let dir = data_dir.join("tls");
    (dir.join("cert.pem"), dir.join("key.pem"))
}

/// Creates the persisted self-signed certificate (once; `init` calls this).
pub fn create_self_signed(data_dir: &Path, names: Vec<String>) -> Result<String, TlsError> {
    let (cert_path, key_path) = self_signed_paths(data_dir);
    let dir = data_dir.join("tls");
    std::fs::create_dir_all(&dir).map_err(|source| TlsError::Write {
        path: dir.clone(),
        source,
    })?;
    let certified = rcgen::generate_simple_self_signed(names).map_err(TlsError::Generate)?;
    write_private(&key_path, certified.signing_key.serialize_pem().as_bytes())?;
    std::fs::write(&cert_path, certified.cert.pem()).map_err(|source| TlsError::Write {
        path: cert_path.clone(),
        source,
    })?;
    Ok(bosun_proto::fingerprint::cert_sha256(certified.cert.der()))
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), TlsError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| TlsError::Write {
            path: path.to_owned(),
            source,
        })?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|source| TlsError::Write {
            path: path.to_owned(),
            source,
        })
}

/// Loads the server identity.
pub fn load(source: &TlsSource, data_dir: &Path) -> Result<ServerIdentity, TlsError> {
    let (cert_path, key_path) = match source {
        TlsSource::SelfSigned => self_signed_paths(data_dir),
        TlsSource::Files { cert, key } => (cert.clone(), key.clone()),
    };
    let read_err = |what, path: &Path| {
        let path = path.to_owned();
        move |source| TlsError::ReadPem { what, path, source }
    };
    let chain = CertificateDer::pem_file_iter(&cert_path)
        .map_err(read_err("certificate", &cert_path))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_err("certificate", &cert_path))?;
    let leaf = chain.first().ok_or_else(|| TlsError::NoCertificate {
        path: cert_path.clone(),
    })?;
    let fingerprint = bosun_proto::fingerprint::cert_sha256(leaf);
    let key_pin = bosun_pin::Pin::of_key(leaf)
        .ok_or_else(|| TlsError::Unreadable {
            path: cert_path.clone(),
        })?
        .to_string();
    let key =
        PrivateKeyDer::from_pem_file(&key_path).map_err(read_err("private key", &key_path))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(TlsError::Config)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(ServerIdentity {
        config: Arc::new(config),
        fingerprint,
        key_pin,
    })
}

/// A rustls client configuration that accepts exactly what `fingerprint` pins (a certificate's
/// SHA-256, hex, colons allowed; or a key pin, `spki:…`), whatever its issuer or names; HTTP/2
/// is offered. For agents, tests
/// and the benchmark; see [`bosun_pin`].
pub fn pinned_client_config(
    fingerprint: &str,
) -> Result<rustls::ClientConfig, bosun_pin::BadFingerprint> {
    let mut config = bosun_pin::client_config(fingerprint)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
