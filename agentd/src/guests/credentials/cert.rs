//! The local API's TLS leaf: a self-signed certificate generated once and persisted, so the
//! SHA-256 fingerprint every bootstrap pins survives restarts. [`LocalApiCert::rotate`] is
//! the only way to change it (and every bootstrap must then be re-issued).
//!
//! A new pair is written beside the current one (`*.next`, key first), then renamed over it
//! key first: the certificate's `.next` file existing is the commit point, so a crash at any
//! moment leaves the old pair, the new pair, or a committed pair the next start finishes
//! ([`LocalApiCert::load_or_create`]). A key without its certificate was never served (the
//! certificate, whose fingerprint bootstraps pin, is always stored last) and is replaced.

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
    /// The certificate exists without its key (bootstraps may pin it, so it is not replaced
    /// silently).
    #[error("found {cert} without its key {key}; restore the key or rotate")]
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
        finish_store(&cert_path, &key_path)?;
        match (cert_path.exists(), key_path.exists()) {
            (true, true) => Self::load(&cert_path, &key_path),
            (false, key_left) => {
                if key_left {
                    tracing::warn!(path = %key_path.display(), "a key without its certificate was left by an interrupted generation; it was never served and is replaced");
                }
                let cert = Self::generate(names)?;
                cert.store(&cert_path, &key_path)?;
                tracing::info!(fingerprint = %cert.fingerprint, "generated the local api certificate");
                Ok(cert)
            }
            (true, false) => Err(CertError::HalfPresent {
                cert: cert_path,
                key: key_path,
            }),
        }
    }

    /// Replaces the stored leaf with a new one. Every issued bootstrap pins the old
    /// fingerprint, so the caller must re-issue them (see `credentials::bootstrap`).
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
        write_atomic(
            &next_of(key_path),
            self.key_pem.expose_secret().as_bytes(),
            0o600,
        )?;
        // The commit point: from here the new pair replaces the old one, even after a crash.
        write_atomic(&next_of(cert_path), cert_pem.as_bytes(), 0o644)?;
        finish_store(cert_path, key_path)
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

/// Where a new pair's file waits beside `path` until the pair replaces the current one.
fn next_of(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".next");
    path.with_file_name(name)
}

/// Ends an interrupted [`LocalApiCert::store`]: a committed new pair (its certificate's
/// `.next` file exists) is renamed over the current one, key first; a new key whose
/// certificate never got written is dropped.
fn finish_store(cert_path: &Path, key_path: &Path) -> Result<(), CertError> {
    let (cert_next, key_next) = (next_of(cert_path), next_of(key_path));
    let rename = |from: &Path, to: &Path| {
        std::fs::rename(from, to).map_err(|source| CertError::Write {
            path: to.to_path_buf(),
            source,
        })
    };
    if cert_next.exists() {
        if key_next.exists() {
            rename(&key_next, key_path)?;
        }
        rename(&cert_next, cert_path)?;
    } else if key_next.exists() {
        std::fs::remove_file(&key_next).map_err(|source| CertError::Write {
            path: key_next.clone(),
            source,
        })?;
    } else {
        return Ok(());
    }
    if let Some(dir) = cert_path.parent()
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
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

    /// Every point a crash can interrupt a store at: before the commit the old pair (or
    /// none) stands, after it the new pair is finished at the next start.
    #[test]
    fn a_store_interrupted_anywhere_leaves_a_working_pair() {
        let names = vec!["localhost".to_owned()];
        let cert_of = |d: &Path| (d.join(CERT_FILE), d.join(KEY_FILE));
        let new = LocalApiCert::generate(&names).unwrap();
        let new_cert = pem_encode("CERTIFICATE", new.cert_der.as_ref());
        let new_key = new.key_pem.expose_secret().as_bytes().to_vec();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        };
        for existing in [false, true] {
            // 1. Killed after the new key, before the commit: the old pair (or a fresh one).
            let dir = tempfile::tempdir().unwrap();
            let (cert, key) = cert_of(dir.path());
            let old = existing.then(|| LocalApiCert::load_or_create(dir.path(), &names).unwrap());
            std::fs::write(next_of(&key), &new_key).unwrap();
            mode(&next_of(&key), 0o600);
            let loaded = LocalApiCert::load_or_create(dir.path(), &names).unwrap();
            match &old {
                Some(old) => assert_eq!(loaded.fingerprint(), old.fingerprint()),
                None => assert_ne!(loaded.fingerprint(), new.fingerprint()),
            }
            assert!(!next_of(&key).exists());
            loaded.server_config().unwrap();
            // 2. Killed after the commit, before either rename; 3. between the renames.
            for renamed_key in [false, true] {
                std::fs::write(next_of(&cert), &new_cert).unwrap();
                if renamed_key {
                    std::fs::write(&key, &new_key).unwrap();
                } else {
                    std::fs::write(next_of(&key), &new_key).unwrap();
                    mode(&next_of(&key), 0o600);
                }
                mode(&key, 0o600);
                let loaded = LocalApiCert::load_or_create(dir.path(), &names).unwrap();
                assert_eq!(loaded.fingerprint(), new.fingerprint());
                loaded.server_config().unwrap();
                assert!(!next_of(&cert).exists() && !next_of(&key).exists());
            }
        }
        // A key alone (an older agent killed between its two writes) was never served.
        let dir = tempfile::tempdir().unwrap();
        let (_, key) = cert_of(dir.path());
        std::fs::write(&key, &new_key).unwrap();
        mode(&key, 0o600);
        let loaded = LocalApiCert::load_or_create(dir.path(), &names).unwrap();
        assert_ne!(loaded.fingerprint(), new.fingerprint());
        loaded.server_config().unwrap();
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
