//! The node's self-signed certificate (rcgen) and the rustls server configuration.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

use crate::SimError;

/// A certificate with its key, PEM-encoded.
#[derive(Clone)]
pub(crate) struct CertPair {
    pub(crate) cert_pem: String,
    key_pem: String,
}

impl std::fmt::Debug for CertPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertPair")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

const CERT_FILE: &str = "pve-ssl.pem";
const KEY_FILE: &str = "pve-ssl.key";

/// Loads the certificate from `dir` or creates (and stores) a new one.
pub(crate) fn load_or_create(dir: Option<&Path>, node: &str) -> Result<CertPair, SimError> {
    if let Some(dir) = dir {
        let cert_path = dir.join(CERT_FILE);
        let key_path = dir.join(KEY_FILE);
        if cert_path.exists() && key_path.exists() {
            let read = |p: &Path| {
                std::fs::read_to_string(p).map_err(|source| SimError::DataFile {
                    path: p.to_path_buf(),
                    source,
                })
            };
            return Ok(CertPair {
                cert_pem: read(&cert_path)?,
                key_pem: read(&key_path)?,
            });
        }
        let pair = generate(node)?;
        write_private(&cert_path, &pair.cert_pem, 0o644)?;
        write_private(&key_path, &pair.key_pem, 0o600)?;
        return Ok(pair);
    }
    generate(node)
}

fn generate(node: &str) -> Result<CertPair, SimError> {
    let mut sans = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    if !sans.iter().any(|s| s == node) {
        sans.push(node.to_owned());
    }
    let key = rcgen::KeyPair::generate().map_err(SimError::GenerateCertificate)?;
    let mut params = rcgen::CertificateParams::new(sans).map_err(SimError::GenerateCertificate)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{node}.bosun-sim"));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "PVE Cluster Node");
    let cert = params
        .self_signed(&key)
        .map_err(SimError::GenerateCertificate)?;
    Ok(CertPair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Writes a file with the given mode (created with it, so a key is never world-readable).
pub(crate) fn write_private(path: &Path, contents: &str, mode: u32) -> Result<(), SimError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| SimError::DataFile {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(err)?;
    f.write_all(contents.as_bytes()).map_err(err)?;
    Ok(())
}

impl CertPair {
    pub(crate) fn cert_der(&self) -> Result<CertificateDer<'static>, SimError> {
        CertificateDer::from_pem_slice(self.cert_pem.as_bytes()).map_err(|_| {
            SimError::StoredCertificate {
                path: CERT_FILE.into(),
            }
        })
    }

    /// SHA-256 of the DER, `AB:CD:…` uppercase.
    pub(crate) fn fingerprint(&self) -> Result<String, SimError> {
        let der = self.cert_der()?;
        Ok(fingerprint_of(der.as_ref()))
    }

    /// A rustls server config serving HTTP/1.1 only (as pveproxy does).
    pub(crate) fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, SimError> {
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).map_err(|_| {
            SimError::StoredCertificate {
                path: KEY_FILE.into(),
            }
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(SimError::TlsConfig)?
            .with_no_client_auth()
            .with_single_cert(vec![self.cert_der()?], key)
            .map_err(SimError::TlsConfig)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Colon-separated uppercase SHA-256 hex of `der`.
pub(crate) fn fingerprint_of(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}
