//! TLS trust for the PVE endpoint: pin the node certificate's SHA-256 fingerprint (PVE's
//! default certificate is self-signed), or verify the chain against a CA file.
//!
//! There is deliberately no way to accept any certificate.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

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

/// A verifier that accepts only the pinned leaf certificate.
#[derive(Debug)]
struct PinnedVerifier {
    fingerprint: [u8; 32],
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let digest = Sha256::digest(end_entity.as_ref());
        if digest.as_slice() == self.fingerprint {
            Ok(ServerCertVerified::assertion())
        } else {
            tracing::warn!(
                presented = %format_fingerprint(&digest),
                "pve certificate does not match the pinned fingerprint"
            );
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
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
            let fingerprint = parse_fingerprint(text)?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(PinnedVerifier {
                    fingerprint,
                    provider,
                }))
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
