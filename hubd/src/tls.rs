//! TLS: the hub's certificate (operator-provided or a persisted self-signed one), its
//! fingerprint and key pin, and a client configuration that pins one of them, for agents,
//! tests and the benchmark.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use secrecy::{ExposeSecret as _, SecretString};

use crate::store::hub_keys::KeyMaterial;

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
    /// A certificate or key file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
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
///
/// The certificate is what says the pair exists: each file is written whole beside its name
/// and renamed into place, the key first, the certificate last. A hub killed at any point
/// leaves either no certificate, and `init` makes both again (a key without its certificate
/// was never served), or the two whole files.
pub fn create_self_signed(data_dir: &Path, names: Vec<String>) -> Result<String, TlsError> {
    let (cert_path, key_path) = self_signed_paths(data_dir);
    let dir = data_dir.join("tls");
    std::fs::create_dir_all(&dir).map_err(|source| TlsError::Write {
        path: dir.clone(),
        source,
    })?;
    let certified = rcgen::generate_simple_self_signed(names).map_err(TlsError::Generate)?;
    write_whole(
        &key_path,
        certified.signing_key.serialize_pem().as_bytes(),
        0o600,
    )?;
    write_whole(&cert_path, certified.cert.pem().as_bytes(), 0o644)?;
    std::fs::File::open(&dir)
        .and_then(|dir| dir.sync_all())
        .map_err(|source| TlsError::Write { path: dir, source })?;
    Ok(bosun_proto::fingerprint::cert_sha256(certified.cert.der()))
}

/// Writes `bytes` as `path` with `mode`, replacing what is there: to `.NAME.tmp` beside it
/// (any leftover of a cut-short run removed first), synced, then renamed over `path`.
fn write_whole(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let fail = |path: &Path| {
        let path = path.to_owned();
        move |source| TlsError::Write { path, source }
    };
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(fail(&tmp)(e)),
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(fail(&tmp))?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    drop(file);
    let renamed = written.and_then(|()| std::fs::rename(&tmp, path));
    if let Err(source) = renamed {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(path)(source));
    }
    Ok(())
}

/// Loads the server identity.
pub fn load(source: &TlsSource, data_dir: &Path) -> Result<ServerIdentity, TlsError> {
    let (cert_path, key_path) = paths(source, data_dir);
    let chain = read_chain(&cert_path)?;
    let key =
        PrivateKeyDer::from_pem_file(&key_path).map_err(read_err("private key", &key_path))?;
    build(chain, key, &cert_path)
}

/// The certificate and key files `source` names.
fn paths(source: &TlsSource, data_dir: &Path) -> (PathBuf, PathBuf) {
    match source {
        TlsSource::SelfSigned => self_signed_paths(data_dir),
        TlsSource::Files { cert, key } => (cert.clone(), key.clone()),
    }
}

fn read_err(
    what: &'static str,
    path: &Path,
) -> impl FnOnce(rustls::pki_types::pem::Error) -> TlsError {
    let path = path.to_owned();
    move |source| TlsError::ReadPem { what, path, source }
}

fn read_chain(cert_path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    CertificateDer::pem_file_iter(cert_path)
        .map_err(read_err("certificate", cert_path))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_err("certificate", cert_path))
}

/// The served identity of a chain (leaf first) and its key; `origin` names where they came
/// from in errors.
fn build(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    origin: &Path,
) -> Result<ServerIdentity, TlsError> {
    let leaf = chain.first().ok_or_else(|| TlsError::NoCertificate {
        path: origin.to_owned(),
    })?;
    let fingerprint = bosun_proto::fingerprint::cert_sha256(leaf);
    let key_pin = bosun_pin::Pin::of_key(leaf)
        .ok_or_else(|| TlsError::Unreadable {
            path: origin.to_owned(),
        })?
        .to_string();
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

/// The served identity of a key the store keeps (`hub_keys`), from its PEM texts.
pub fn from_material(material: &KeyMaterial) -> Result<ServerIdentity, TlsError> {
    let origin = PathBuf::from(format!("the hub's stored key {}", material.pin));
    let pem_err = |what| {
        let path = origin.clone();
        move |source| TlsError::ReadPem { what, path, source }
    };
    let chain = CertificateDer::pem_slice_iter(material.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem_err("certificate"))?;
    let key = PrivateKeyDer::from_pem_slice(material.key_pem.expose_secret().as_bytes())
        .map_err(pem_err("private key"))?;
    let identity = build(chain, key, &origin)?;
    if identity.key_pin != material.pin {
        return Err(TlsError::Unreadable { path: origin });
    }
    Ok(identity)
}

/// The certificate and key the hub serves from its files, as the store keeps a key.
pub fn material(source: &TlsSource, data_dir: &Path) -> Result<KeyMaterial, TlsError> {
    let (cert_path, key_path) = paths(source, data_dir);
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })
    };
    let cert_pem = read(&cert_path)?;
    let key_pem = SecretString::from(read(&key_path)?);
    let identity = load(source, data_dir)?;
    Ok(KeyMaterial {
        pin: identity.key_pin,
        cert_pem,
        key_pem,
    })
}

/// A new self-signed certificate for `names` over a new key, as the store keeps a key.
pub fn generate(names: Vec<String>) -> Result<KeyMaterial, TlsError> {
    let certified = rcgen::generate_simple_self_signed(names).map_err(TlsError::Generate)?;
    let pin = bosun_pin::Pin::of_key(certified.cert.der())
        .ok_or_else(|| TlsError::Unreadable {
            path: PathBuf::from("a generated certificate"),
        })?
        .to_string();
    Ok(KeyMaterial {
        pin,
        cert_pem: certified.cert.pem(),
        key_pem: SecretString::from(certified.signing_key.serialize_pem()),
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

/// Installs the ring crypto provider as the process default (idempotent).
pub fn install_crypto_provider() {
    // A second call finds a provider already installed; that is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_self_signed_pair_is_made_again_over_what_a_cut_short_init_left() {
        let data = tempfile::tempdir().unwrap();
        let (cert, key) = self_signed_paths(data.path());
        std::fs::create_dir_all(key.parent().unwrap()).unwrap();
        // Killed after the key's temporary file was made, and (an older build) with the key
        // created but not yet written; no certificate, so nothing was ever served.
        std::fs::write(key.with_file_name(".key.pem.tmp"), b"-----BEGIN PRIV").unwrap();
        std::fs::write(&key, b"").unwrap();

        let fingerprint = create_self_signed(data.path(), vec!["localhost".into()]).unwrap();

        let identity = load(&TlsSource::SelfSigned, data.path()).unwrap();
        assert_eq!(identity.fingerprint, fingerprint);
        assert_eq!(mode(&key), 0o600);
        // Readable by others unless the umask says otherwise.
        assert_eq!(mode(&cert) & 0o600, 0o600, "{:o}", mode(&cert));
        let mut left: Vec<_> = std::fs::read_dir(key.parent().unwrap())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["cert.pem", "key.pem"]);
    }

    #[test]
    fn a_key_it_cannot_write_is_named_and_no_certificate_is_left() {
        let data = tempfile::tempdir().unwrap();
        let tls = data.path().join("tls");
        // A directory where the key's temporary file goes: removing it fails, as root too.
        std::fs::create_dir_all(tls.join(".key.pem.tmp")).unwrap();
        let err = create_self_signed(data.path(), vec!["localhost".into()]).unwrap_err();
        assert!(
            matches!(&err, TlsError::Write { path, .. } if path.ends_with("tls/.key.pem.tmp")),
            "{err:?}"
        );
        assert!(!tls.join("cert.pem").exists());
        assert!(!tls.join("key.pem").exists());
    }
}
