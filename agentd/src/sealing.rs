//! The host's age X25519 identity: what operators seal storage credentials to.
//!
//! Created once, on the agent's first start (enrollment), as `storage-identity.age` in the
//! state directory (0600, the agent's user); its public half, the recipient (`age1…`), goes
//! to the hub in every full report. `bosunctl secret seal --host` encrypts to it, desired
//! state carries only the ciphertext, and only this file opens it: the hub stores and
//! forwards secrets it cannot read. Opened secrets are zeroized when dropped and never
//! logged.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use age::secrecy::ExposeSecret;
use bosun_proto::secret::SealedSecret;
use zeroize::Zeroizing;

/// The identity's file name in the state directory.
pub const IDENTITY_FILE: &str = "storage-identity.age";

/// Why the identity could not be loaded or a secret opened.
#[derive(Debug, thiserror::Error)]
pub enum SealingError {
    /// Reading or writing the identity file failed.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no age X25519 identity.
    #[error("{path} holds no age X25519 identity")]
    Malformed {
        /// The file.
        path: PathBuf,
    },
    /// The identity file is readable by others than its owner.
    #[error("{path} is mode {mode:o}; it must be 0600")]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// The secret was not sealed to this host, or is damaged.
    #[error("the sealed secret does not open with this host's identity")]
    Open {
        /// Cause.
        #[source]
        source: age::DecryptError,
    },
}

/// The host's identity, loaded.
pub struct StorageIdentity {
    identity: age::x25519::Identity,
}

impl std::fmt::Debug for StorageIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageIdentity")
            .field("recipient", &self.recipient())
            .finish_non_exhaustive()
    }
}

impl StorageIdentity {
    /// Loads `state_dir/storage-identity.age`, creating it (0600) when absent.
    pub fn load_or_create(state_dir: &Path) -> Result<Self, SealingError> {
        let path = state_dir.join(IDENTITY_FILE);
        match std::fs::metadata(&path) {
            Ok(meta) => {
                let mode = meta.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    return Err(SealingError::Exposed { path, mode });
                }
                let text = Zeroizing::new(std::fs::read_to_string(&path).map_err(|source| {
                    SealingError::Io {
                        what: "reading",
                        path: path.clone(),
                        source,
                    }
                })?);
                let line = text
                    .lines()
                    .map(str::trim)
                    .find(|l| l.starts_with("AGE-SECRET-KEY-"))
                    .ok_or_else(|| SealingError::Malformed { path: path.clone() })?;
                let identity = age::x25519::Identity::from_str(line)
                    .map_err(|_| SealingError::Malformed { path: path.clone() })?;
                Ok(Self { identity })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::create(&path),
            Err(source) => Err(SealingError::Io {
                what: "reading",
                path,
                source,
            }),
        }
    }

    fn create(path: &Path) -> Result<Self, SealingError> {
        let identity = age::x25519::Identity::generate();
        let io = |what, source| SealingError::Io {
            what,
            path: path.to_owned(),
            source,
        };
        // create_new: a second agent racing this one cannot overwrite the first's key.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| io("creating", e))?;
        let secret = identity.to_string();
        let text = Zeroizing::new(format!(
            "# bosun host storage identity; recipient {}\n{}\n",
            identity.to_public(),
            secret.expose_secret()
        ));
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| io("writing", e))?;
        tracing::info!(recipient = %identity.to_public(), "host storage identity created");
        Ok(Self { identity })
    }

    /// The public half, `age1…`.
    pub fn recipient(&self) -> String {
        self.identity.to_public().to_string()
    }

    /// Opens a secret sealed to this host; the plaintext is zeroized when dropped.
    pub fn open(&self, sealed: &SealedSecret) -> Result<Zeroizing<Vec<u8>>, SealingError> {
        age::decrypt(&self.identity, sealed.armored().as_bytes())
            .map(Zeroizing::new)
            .map_err(|source| SealingError::Open { source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal(recipient: &str, plaintext: &[u8]) -> SealedSecret {
        let recipient = age::x25519::Recipient::from_str(recipient).unwrap();
        let armored = age::encrypt_and_armor(&recipient, plaintext).unwrap();
        SealedSecret::try_from(armored).unwrap()
    }

    #[test]
    fn the_identity_is_made_once_0600_and_opens_what_was_sealed_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let first = StorageIdentity::load_or_create(dir.path()).unwrap();
        let path = dir.path().join(IDENTITY_FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = StorageIdentity::load_or_create(dir.path()).unwrap();
        assert_eq!(
            first.recipient(),
            again.recipient(),
            "loaded, not made again"
        );
        assert!(bosun_proto::secret::is_age_recipient(&first.recipient()));
        assert!(!format!("{first:?}").contains("AGE-SECRET-KEY"));

        let sealed = seal(&first.recipient(), b"pbs-password-4711");
        assert_eq!(
            again.open(&sealed).unwrap().as_slice(),
            b"pbs-password-4711"
        );

        let other = tempfile::tempdir().unwrap();
        let stranger = StorageIdentity::load_or_create(other.path()).unwrap();
        assert!(matches!(
            stranger.open(&sealed),
            Err(SealingError::Open { .. })
        ));
    }

    #[test]
    fn an_exposed_or_damaged_identity_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        StorageIdentity::load_or_create(dir.path()).unwrap();
        let path = dir.path().join(IDENTITY_FILE);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            StorageIdentity::load_or_create(dir.path()),
            Err(SealingError::Exposed { mode: 0o644, .. })
        ));
        std::fs::write(&path, "not a key\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            StorageIdentity::load_or_create(dir.path()),
            Err(SealingError::Malformed { .. })
        ));
    }
}
