//! `bosun-pin`: the rustls client configurations Bosun's clients trust a server by.
//!
//! Every server Bosun talks to presents a self-signed leaf by default: Proxmox VE's default
//! certificate, the hub's, the agent's local API and the simulator's. Clients pin that server
//! instead of trusting a CA, by one of two kinds of [`Pin`]:
//!
//! - a **key pin** (`spki:` and the SHA-256 of the certificate's SubjectPublicKeyInfo): any
//!   certificate for that key passes, so a renewal that keeps the key changes nothing;
//! - a **leaf pin** (the SHA-256 of the whole certificate, what `bosun-hubd init` and Proxmox
//!   print as the fingerprint): exactly that certificate passes.
//!
//! [`PinSet`] accepts a leaf any of its pins names, whatever its issuer, names or dates, and
//! still checks the handshake signature with the ring provider, so only the holder of a
//! pinned key can complete the handshake. Its set can be replaced while connections use it
//! (the agent learns the hub's next key that way). There is no way to build one without a pin:
//! no accept-any switch exists. [`Trust::Ca`] is the other way to trust a server: a CA (the
//! system's roots or a named CA file) and the server's name, optionally *and* pins.

use std::path::PathBuf;
use std::sync::Arc;

use bosun_proto::fingerprint::{cert_sha256, normalize};
use parking_lot::{Mutex, RwLock};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use sha2::{Digest as _, Sha256};

/// The prefix of a key pin's text.
pub const KEY_PIN_PREFIX: &str = "spki:";

/// What every refusal of a server's certificate by a [`PinSet`] says, for callers that tell a
/// key they do not trust from a network fault.
pub const UNTRUSTED_KEY: &str = "matches none of the pinned";

/// Most pins one set holds: the pins an agent's configuration gives (at most eight) and those
/// of the operator's signed set (at most eight).
pub const MAX_PINS: usize = 16;

/// A pin that is not a SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{input}` is not a pin: a certificate's SHA-256 (64 hex digits, colons allowed) or `spki:` and the SHA-256 of its public key"
)]
pub struct BadFingerprint {
    /// What was given.
    pub input: String,
}

/// What names a trusted server.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pin {
    /// The SHA-256 of the whole certificate (64 lowercase hex digits).
    Leaf(String),
    /// The SHA-256 of the certificate's SubjectPublicKeyInfo (64 lowercase hex digits).
    Key(String),
}

impl Pin {
    /// Parses a pin: `spki:` and 64 hex digits for a key pin, or a certificate fingerprint
    /// (upper or lower case, with or without `:`, optional `sha256:` prefix) for a leaf pin.
    pub fn parse(text: &str) -> Result<Self, BadFingerprint> {
        let bad = || BadFingerprint {
            input: text.to_owned(),
        };
        let trimmed = text.trim();
        match trimmed.strip_prefix(KEY_PIN_PREFIX) {
            Some(key) => normalize(key).map(Self::Key).ok_or_else(bad),
            None => normalize(trimmed).map(Self::Leaf).ok_or_else(bad),
        }
    }

    /// The key pin of a certificate; `None` when it cannot be parsed.
    pub fn of_key(cert: &CertificateDer<'_>) -> Option<Self> {
        let parsed = webpki::EndEntityCert::try_from(cert).ok()?;
        let spki = parsed.subject_public_key_info();
        Some(Self::Key(hex::encode(Sha256::digest(spki.as_ref()))))
    }

    /// The leaf pin of a certificate.
    pub fn of_leaf(cert: &CertificateDer<'_>) -> Self {
        Self::Leaf(cert_sha256(cert))
    }

    /// Whether `cert` is what this pin names.
    pub fn matches(&self, cert: &CertificateDer<'_>) -> bool {
        match self {
            Self::Leaf(hex) => *hex == cert_sha256(cert),
            Self::Key(_) => Self::of_key(cert).as_ref() == Some(self),
        }
    }
}

impl std::fmt::Display for Pin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Leaf(hex) => f.write_str(hex),
            Self::Key(hex) => write!(f, "{KEY_PIN_PREFIX}{hex}"),
        }
    }
}

impl std::str::FromStr for Pin {
    type Err = BadFingerprint;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

/// A set of pins that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadPinSet {
    /// No pin at all: nothing would be trusted.
    #[error("no pin given: a server is trusted only by a pin or a CA")]
    Empty,
    /// More than [`MAX_PINS`].
    #[error("{count} pins, more than the {MAX_PINS} a set holds")]
    TooMany {
        /// How many were given.
        count: usize,
    },
}

/// A certificate verifier that accepts a leaf named by any pin of its set. The set can be
/// replaced while the verifier is in use; the key of the last leaf it accepted is kept.
#[derive(Debug)]
pub struct PinSet {
    pins: RwLock<Vec<Pin>>,
    last_accepted: Mutex<Option<Pin>>,
    provider: Arc<CryptoProvider>,
}

impl PinSet {
    /// A verifier trusting `pins`; handshake signatures are checked with `provider`'s
    /// algorithms.
    pub fn new(pins: Vec<Pin>, provider: Arc<CryptoProvider>) -> Result<Self, BadPinSet> {
        let pins = checked(pins)?;
        Ok(Self {
            pins: RwLock::new(pins),
            last_accepted: Mutex::new(None),
            provider,
        })
    }

    /// The pins trusted now, sorted.
    pub fn pins(&self) -> Vec<Pin> {
        self.pins.read().clone()
    }

    /// Trusts `pins` from the next handshake on (connections already open stay as they are).
    pub fn replace(&self, pins: Vec<Pin>) -> Result<(), BadPinSet> {
        *self.pins.write() = checked(pins)?;
        Ok(())
    }

    /// The key pin of the last leaf this verifier accepted, if any.
    pub fn last_accepted_key(&self) -> Option<Pin> {
        self.last_accepted.lock().clone()
    }

    /// Checks a leaf against the set (what [`ServerCertVerifier::verify_server_cert`] does).
    fn check(&self, leaf: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        let key = Pin::of_key(leaf);
        let pins = self.pins.read();
        let accepted = pins.iter().any(|pin| match pin {
            Pin::Leaf(_) => pin.matches(leaf),
            Pin::Key(_) => key.as_ref() == Some(pin),
        });
        if accepted {
            *self.last_accepted.lock() = key;
            return Ok(());
        }
        let trusted: Vec<String> = pins.iter().map(Pin::to_string).collect();
        Err(rustls::Error::General(format!(
            "the server's certificate (fingerprint {}, key {}) {UNTRUSTED_KEY} {}",
            cert_sha256(leaf),
            key.map_or_else(|| "unreadable".to_owned(), |k| k.to_string()),
            trusted.join(", ")
        )))
    }
}

impl PinSet {
    /// A verifier trusting exactly the certificate `fingerprint` names (upper or lower case,
    /// with or without `:`, optional `sha256:` prefix), for servers pinned by their
    /// certificate (Proxmox VE's).
    pub fn leaf(fingerprint: &str, provider: Arc<CryptoProvider>) -> Result<Self, BadFingerprint> {
        let expected = normalize(fingerprint).ok_or_else(|| BadFingerprint {
            input: fingerprint.to_owned(),
        })?;
        Ok(Self::new(vec![Pin::Leaf(expected)], provider).expect("one pin is a valid set"))
    }
}

/// Sorted, without duplicates, within bounds.
fn checked(mut pins: Vec<Pin>) -> Result<Vec<Pin>, BadPinSet> {
    pins.sort();
    pins.dedup();
    match pins.len() {
        0 => Err(BadPinSet::Empty),
        count if count > MAX_PINS => Err(BadPinSet::TooMany { count }),
        _ => Ok(pins),
    }
}

impl ServerCertVerifier for PinSet {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check(end_entity)
            .map(|()| ServerCertVerified::assertion())
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

/// Where a CA-trusting client finds its roots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaRoots {
    /// The system's trust store (what `rustls-native-certs` finds, e.g. Debian's
    /// `/etc/ssl/certs`).
    System,
    /// The CA certificates in one PEM file.
    File(PathBuf),
}

/// How a client trusts a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// Any leaf one of these pins names.
    Pins(Vec<Pin>),
    /// A certificate chain to one of these roots that names the server's host, and, when
    /// `pins` is not empty, whose leaf one of them also names.
    Ca {
        /// The roots.
        roots: CaRoots,
        /// Pins the leaf must match as well (none: the CA alone decides).
        pins: Vec<Pin>,
    },
}

/// Why a [`Trust`] could not be turned into a client configuration.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// The pin set is unusable.
    #[error(transparent)]
    Pins(#[from] BadPinSet),
    /// The CA file could not be read.
    #[error("reading CA certificates from {path}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// No usable root certificate was found.
    #[error("no usable CA certificate in {what}")]
    NoRoots {
        /// The file, or "the system's trust store".
        what: String,
    },
    /// rustls refused to build the verifier.
    #[error("building the certificate verifier")]
    Verifier(#[source] rustls::client::VerifierBuilderError),
}

/// A verifier that requires both a CA-issued chain for the server's name and, when it has
/// pins, a pinned leaf.
#[derive(Debug)]
struct CaAndPins {
    ca: Arc<WebPkiServerVerifier>,
    pins: Option<PinSet>,
}

impl ServerCertVerifier for CaAndPins {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.ca.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        if let Some(pins) = &self.pins {
            pins.check(end_entity)?;
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.ca.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.ca.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.ca.supported_verify_schemes()
    }
}

fn roots(from: &CaRoots) -> Result<RootCertStore, TrustError> {
    let mut store = RootCertStore::empty();
    let what = match from {
        CaRoots::System => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            "the system's trust store".to_owned()
        }
        CaRoots::File(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
                .map_err(|source| TrustError::CaFile {
                    path: path.clone(),
                    source,
                })?;
            store.add_parsable_certificates(certs);
            path.display().to_string()
        }
    };
    if store.is_empty() {
        return Err(TrustError::NoRoots { what });
    }
    Ok(store)
}

/// The verifier a [`Trust`] describes.
#[derive(Debug, Clone)]
pub struct Verifier {
    /// What checks the server's certificate.
    pub verifier: Arc<dyn ServerCertVerifier>,
    /// The set inside it when pins alone decide (its pins may be replaced later).
    pub pin_set: Option<Arc<PinSet>>,
}

impl Verifier {
    /// A client configuration (ring provider, rustls' safe default protocol versions, no client
    /// certificate, no ALPN) with this verifier.
    pub fn client_config(&self) -> rustls::ClientConfig {
        config_with(Arc::clone(&self.verifier))
    }
}

/// The verifier a [`Trust`] describes, its handshake signatures checked with `provider`.
pub fn verifier(trust: &Trust, provider: Arc<CryptoProvider>) -> Result<Verifier, TrustError> {
    match trust {
        Trust::Pins(pins) => {
            let set = Arc::new(PinSet::new(pins.clone(), provider)?);
            Ok(Verifier {
                verifier: set.clone(),
                pin_set: Some(set),
            })
        }
        Trust::Ca { roots: from, pins } => {
            let ca = WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots(from)?),
                Arc::clone(&provider),
            )
            .build()
            .map_err(TrustError::Verifier)?;
            let pins = if pins.is_empty() {
                None
            } else {
                Some(PinSet::new(pins.clone(), provider)?)
            };
            Ok(Verifier {
                verifier: Arc::new(CaAndPins { ca, pins }),
                pin_set: None,
            })
        }
    }
}

/// A client configuration (ring provider, rustls' safe default protocol versions, no client
/// certificate, no ALPN) with `verifier`.
pub fn config_with(verifier: Arc<dyn ServerCertVerifier>) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports rustls' default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth()
}

/// A client configuration (ring provider, rustls' safe default protocol versions, no client
/// certificate, no ALPN) that trusts only what `pin` names: a certificate fingerprint, or a
/// key pin (`spki:…`). Callers that want HTTP/2 set `alpn_protocols` on the result.
pub fn client_config(pin: &str) -> Result<rustls::ClientConfig, BadFingerprint> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let set = PinSet::new(vec![Pin::parse(pin)?], provider).expect("one pin is a valid set");
    Ok(config_with(Arc::new(set)))
}

#[cfg(test)]
mod tests;
