//! `bosun-pin`: a rustls client configuration that trusts exactly one server certificate,
//! named by the SHA-256 of its DER encoding.
//!
//! Every server Bosun talks to presents a self-signed leaf: Proxmox VE's default certificate,
//! the hub's, the agent's local API and the simulator's. Clients pin that leaf instead of
//! trusting a CA: [`PinnedLeaf`] accepts the one certificate whose fingerprint was configured
//! (whatever its issuer, names or dates) and still checks the handshake signature with the
//! ring provider, so only the holder of the pinned key can complete the handshake. There is
//! no way to build it without a fingerprint: no accept-any switch exists.

use std::sync::Arc;

use bosun_proto::fingerprint::{cert_sha256, normalize};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// A fingerprint that is not a SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not a SHA-256 fingerprint (64 hex digits, colons allowed)")]
pub struct BadFingerprint {
    /// What was given.
    pub input: String,
}

/// A certificate verifier that accepts exactly the leaf whose SHA-256 is the pinned one.
#[derive(Debug)]
pub struct PinnedLeaf {
    /// 64 lowercase hex digits.
    expected: String,
    provider: Arc<CryptoProvider>,
}

impl PinnedLeaf {
    /// Pins `fingerprint` (upper or lower case, with or without `:`, optional `sha256:`
    /// prefix); handshake signatures are checked with `provider`'s algorithms.
    pub fn new(fingerprint: &str, provider: Arc<CryptoProvider>) -> Result<Self, BadFingerprint> {
        let expected = normalize(fingerprint).ok_or_else(|| BadFingerprint {
            input: fingerprint.to_owned(),
        })?;
        Ok(Self { expected, provider })
    }

    /// The pinned fingerprint, 64 lowercase hex digits.
    pub fn fingerprint(&self) -> &str {
        &self.expected
    }
}

impl ServerCertVerifier for PinnedLeaf {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let seen = cert_sha256(end_entity);
        if seen == self.expected {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "certificate fingerprint {seen} does not match the pinned {}",
                self.expected
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
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
        rustls::crypto::verify_tls13_signature(
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

/// A client configuration (ring provider, rustls' safe default protocol versions, no client
/// certificate, no ALPN) that trusts only the leaf with this fingerprint. Callers that want
/// HTTP/2 set `alpn_protocols` on the result.
pub fn client_config(fingerprint: &str) -> Result<rustls::ClientConfig, BadFingerprint> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(PinnedLeaf::new(fingerprint, Arc::clone(&provider))?);
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports rustls' default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf() -> CertificateDer<'static> {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
            .expect("a self-signed certificate");
        cert.cert.der().clone()
    }

    fn verify(pin: &PinnedLeaf, cert: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        let name = ServerName::try_from("localhost").expect("a valid name");
        pin.verify_server_cert(cert, &[], &name, &[], UnixTime::now())
            .map(|_| ())
    }

    fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    #[test]
    fn accepts_the_pinned_leaf_in_any_spelling() {
        let cert = leaf();
        let hex = cert_sha256(&cert);
        let colon_upper = hex
            .as_bytes()
            .chunks(2)
            .map(|pair| String::from_utf8_lossy(pair).to_ascii_uppercase())
            .collect::<Vec<_>>()
            .join(":");
        for spelling in [hex.clone(), colon_upper, format!("sha256:{hex}")] {
            let pin = PinnedLeaf::new(&spelling, provider()).expect("a valid fingerprint");
            assert_eq!(pin.fingerprint(), hex);
            verify(&pin, &cert).expect("the pinned leaf is accepted");
        }
    }

    #[test]
    fn refuses_any_other_leaf() {
        let pinned = leaf();
        let other = leaf();
        let pin = PinnedLeaf::new(&cert_sha256(&pinned), provider()).expect("valid");
        let err = verify(&pin, &other).expect_err("another leaf is refused");
        assert!(
            err.to_string().contains("does not match the pinned"),
            "{err}"
        );
    }

    #[test]
    fn refuses_what_is_not_a_sha256() {
        for bad in ["", "abc", &"0".repeat(63), &"g".repeat(64), &"0".repeat(66)] {
            let err = client_config(bad).expect_err("not a fingerprint");
            assert_eq!(err.input, bad);
        }
    }
}
