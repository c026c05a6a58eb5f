//! TLS trust for the PVE endpoint: pin the node certificate's SHA-256 fingerprint (PVE's
//! default certificate is self-signed), or verify the chain against a CA file.
//!
//! There is deliberately no way to accept any certificate.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::error::PveError;

/// How the client decides to trust the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsTrust {
    /// Accept exactly the leaf certificate with this SHA-256 fingerprint (colon-hex, as PVE
    /// shows it; case and colons are ignored). The handshake signature is still verified.
    PinnedSha256(String),
    /// Verify the chain and the host name against the CA certificates in this PEM file.
    CaFile(PathBuf),
}

fn setup_error(what: impl Into<String>) -> PveError {
    PveError::Setup {
        what: what.into(),
        source: None,
    }
}

/// Parses a fingerprint in colon-hex (or plain hex) form into 32 bytes.
pub fn parse_fingerprint(text: &str) -> Result<[u8; 32], PveError> {
    let hex_digits: String = text.chars().filter(|c| *c != ':').collect();
    let bytes = hex::decode(&hex_digits)
        .map_err(|_| setup_error(format!("fingerprint {text:?} is not hex")))?;
    bytes
        .try_into()
        .map_err(|_| setup_error(format!("fingerprint {text:?} is not 32 bytes (SHA-256)")))
}

/// Formats a SHA-256 digest the way PVE shows certificate fingerprints.
pub fn format_fingerprint(digest: &[u8]) -> String {
    digest
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Builds the rustls client config for `trust` with the ring provider.
pub fn client_config(trust: &TlsTrust) -> Result<rustls::ClientConfig, PveError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| PveError::Setup {
            what: "tls protocol versions".into(),
            source: Some(Box::new(e)),
        })?;
    let config = match trust {
        TlsTrust::PinnedSha256(text) => {
            // Checked here first for PVE's own wording of a bad fingerprint.
            parse_fingerprint(text)?;
            let verifier = bosun_pin::PinSet::leaf(text, provider)
                .map_err(|err| setup_error(err.to_string()))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth()
        }
        TlsTrust::CaFile(path) => {
            let mut roots = rustls::RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(path).map_err(|e| PveError::Setup {
                what: format!("reading CA file {}", path.display()),
                source: Some(Box::new(e)),
            })?;
            for cert in certs {
                let cert = cert.map_err(|e| PveError::Setup {
                    what: format!("parsing CA file {}", path.display()),
                    source: Some(Box::new(e)),
                })?;
                roots.add(cert).map_err(|e| PveError::Setup {
                    what: format!("adding a CA from {}", path.display()),
                    source: Some(Box::new(e)),
                })?;
            }
            if roots.is_empty() {
                return Err(setup_error(format!(
                    "CA file {} holds no certificate",
                    path.display()
                )));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    Ok(config)
}
