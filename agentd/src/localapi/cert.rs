//! The local API's TLS leaf: a self-signed certificate generated once and persisted, so the
//! SHA-256 fingerprint every bootstrap pins survives restarts. [`LocalApiCert::rotate`] is
//! the only way to change it (and every bootstrap must then be re-issued).

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};

/// The certificate file inside the state directory.
pub const CERT_FILE: &str = "localapi-cert.pem";
/// The private key file inside the state directory (mode 0600).
pub const KEY_FILE: &str = "localapi-key.pem";

/// What can go wrong loading or creating the leaf.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// Reading a file failed.
    #[error("failed to read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Writing a file failed.
    #[error("failed to write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The key file is readable by others than its owner.
    #[error("{path} has mode {mode:o}; the key must be 0600")]
    KeyMode {
        /// The file.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
    /// A stored file does not parse.
    #[error("{path} holds no valid PEM {what}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What was expected.
        what: &'static str,
    },
    /// Only one of the two files exists.
    #[error("found only one of {cert} and {key}; restore the other or rotate")]
    HalfPresent {
        /// The certificate path.
        cert: PathBuf,
        /// The key path.
        key: PathBuf,
    },
    /// Generating the certificate failed.
    #[error("failed to generate the local api certificate")]
    Generate(#[source] rcgen::Error),
    /// rustls refused the certificate or key.
    #[error("rustls refused the local api certificate")]
    Rustls(#[source] rustls::Error),
}

/// The persisted leaf certificate and its key.
#[derive(Clone)]
pub struct LocalApiCert {
    cert_der: CertificateDer<'static>,
    key_pem: SecretString,
    fingerprint: String,
}

impl std::fmt::Debug for LocalApiCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalApiCert")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

impl LocalApiCert {
    /// Loads the leaf from `dir`, or generates and stores one for `names` (IP addresses or
    /// DNS names) when neither file exists.
    pub fn load_or_create(dir: &Path, names: &[String]) -> Result<Self, CertError> {
        let (cert_path, key_path) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
        match (cert_path.exists(), key_path.exists()) {
            (true, true) => Self::load(&cert_path, &key_path),
            (false, false) => {
                let cert = Self::generate(names)?;
                cert.store(&cert_path, &key_path)?;
                tracing::info!(fingerprint = %cert.fingerprint, "generated the local api certificate");
                Ok(cert)
            }
            _ => Err(CertError::HalfPresent {
                cert: cert_path,
                key: key_path,
            }),
        }
    }

    /// Replaces the stored leaf with a new one. Every issued bootstrap pins the old
    /// fingerprint, so the caller must re-issue them (see `credentials::back_half`).
    pub fn rotate(dir: &Path, names: &[String]) -> Result<Self, CertError> {
        let cert = Self::generate(names)?;
        cert.store(&dir.join(CERT_FILE), &dir.join(KEY_FILE))?;
        tracing::info!(fingerprint = %cert.fingerprint, "rotated the local api certificate");
        Ok(cert)
    }

    /// SHA-256 of the certificate (DER), 64 lowercase hex digits: what controllers pin.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The certificate in DER.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// A rustls server configuration (ring provider) serving this leaf.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, CertError> {
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.expose_secret().as_bytes()).map_err(
            |_| CertError::Pem {
                path: PathBuf::from(KEY_FILE),
                what: "private key",
            },
        )?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(CertError::Rustls)?
            .with_no_client_auth()
            .with_single_cert(vec![self.cert_der.clone()], key)
            .map_err(CertError::Rustls)?;
        // HTTP/1.1 only: the connection timeouts and caps (`conn.rs`) are written for it.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    fn generate(names: &[String]) -> Result<Self, CertError> {
        let mut names = names.to_vec();
        if names.is_empty() {
            names.push("localhost".to_owned());
        }
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(names).map_err(CertError::Generate)?;
        let cert_der = cert.der().clone();
        Ok(Self {
            fingerprint: fingerprint_of(&cert_der),
            cert_der,
            key_pem: SecretString::from(signing_key.serialize_pem()),
        })
    }

    fn load(cert_path: &Path, key_path: &Path) -> Result<Self, CertError> {
        let meta = std::fs::metadata(key_path).map_err(|source| CertError::Read {
            path: key_path.to_path_buf(),
            source,
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(CertError::KeyMode {
                path: key_path.to_path_buf(),
                mode,
            });
        }
        let cert_pem = std::fs::read(cert_path).map_err(|source| CertError::Read {
            path: cert_path.to_path_buf(),
            source,
        })?;
        let key_pem = std::fs::read_to_string(key_path).map_err(|source| CertError::Read {
            path: key_path.to_path_buf(),
            source,
        })?;
        let cert_der = CertificateDer::from_pem_slice(&cert_pem).map_err(|_| CertError::Pem {
            path: cert_path.to_path_buf(),
            what: "certificate",
        })?;
        if PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).is_err() {
            return Err(CertError::Pem {
                path: key_path.to_path_buf(),
                what: "private key",
            });
        }
        Ok(Self {
            fingerprint: fingerprint_of(&cert_der),
            cert_der,
            key_pem: SecretString::from(key_pem),
        })
    }

    fn store(&self, cert_path: &Path, key_path: &Path) -> Result<(), CertError> {
        let cert_pem = pem_encode("CERTIFICATE", self.cert_der.as_ref());
        write_atomic(key_path, self.key_pem.expose_secret().as_bytes(), 0o600)?;
        write_atomic(cert_path, cert_pem.as_bytes(), 0o644)
    }
}

/// SHA-256 of a DER certificate as 64 lowercase hex digits.
pub fn fingerprint_of(der: &[u8]) -> String {
    hex::encode(Sha256::digest(der))
}

fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Writes `bytes` to a temporary sibling created with `mode`, syncs it and renames it over
/// `path`, so a crash leaves either the old or the new file.
fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), CertError> {
    let err = |source| CertError::Write {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(err)?;
    file.write_all(bytes).map_err(err)?;
    file.sync_all().map_err(err)?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(err)?;
    if let Some(dir) = path.parent()
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_survives_a_reload_and_changes_on_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["127.0.0.1".to_owned()];
        let first = LocalApiCert::load_or_create(dir.path(), &names).unwrap();
        let again = LocalApiCert::load_or_create(dir.path(), &names).unwrap();
        assert_eq!(first.fingerprint(), again.fingerprint());
        assert_eq!(first.fingerprint().len(), 64);
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let rotated = LocalApiCert::rotate(dir.path(), &names).unwrap();
        assert_ne!(rotated.fingerprint(), first.fingerprint());
        let reloaded = LocalApiCert::load_or_create(dir.path(), &names).unwrap();
        assert_eq!(reloaded.fingerprint(), rotated.fingerprint());
        reloaded.server_config().unwrap();
    }

    #[test]
    fn a_loose_key_mode_or_a_missing_half_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["localhost".to_owned()];
        LocalApiCert::load_or_create(dir.path(), &names).unwrap();
        let key = dir.path().join(KEY_FILE);
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            LocalApiCert::load_or_create(dir.path(), &names),
            Err(CertError::KeyMode { .. })
        ));
        std::fs::remove_file(&key).unwrap();
        assert!(matches!(
            LocalApiCert::load_or_create(dir.path(), &names),
            Err(CertError::HalfPresent { .. })
        ));
    }
}
