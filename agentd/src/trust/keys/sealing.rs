//! The host's age X25519 identity: what operators seal storage credentials to.
//!
//! Created once, on the agent's first start (enrollment), as `storage-identity.age` in the
//! state directory (0600, the agent's user); its public half, the recipient (`age1…`), goes
//! to the hub in every full report. `bosunctl secret seal --host` encrypts to it, desired
//! state carries only the ciphertext, and only this file opens it: the hub stores and
//! forwards secrets it cannot read. Opened secrets are zeroized when dropped and never
//! logged.
//!
//! Sealing to this host says only who may open a secret, not who made it nor what it is for:
//! the recipient is public, so anyone can seal to it. What a sealed credential is for, and
//! whether the operator made it, is checked by [`super::credentials`] on every open.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use age::secrecy::ExposeSecret;
use bosun_proto::secret::SealedSecret;
use zeroize::Zeroizing;

/// The identity's file name in the state directory.
pub const IDENTITY_FILE: &str = "storage-identity.age";

/// Why the identity could not be loaded.
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
        match Self::load(state_dir)? {
            Some(identity) => Ok(identity),
            None => Self::create(&state_dir.join(IDENTITY_FILE)),
        }
    }

    /// Loads `state_dir/storage-identity.age` when it exists (the agent makes it on its first
    /// start); never creates it. What `bosun-agentctl status` shows the operator, to compare
    /// with the recipient `bosunctl` pins.
    pub fn load(state_dir: &Path) -> Result<Option<Self>, SealingError> {
        let path = state_dir.join(IDENTITY_FILE);
        let meta = match std::fs::metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(SealingError::Io {
                    what: "reading",
                    path,
                    source,
                });
            }
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(SealingError::Exposed { path, mode });
        }
        let text =
            Zeroizing::new(
                std::fs::read_to_string(&path).map_err(|source| SealingError::Io {
                    what: "reading",
                    path: path.clone(),
                    source,
                })?,
            );
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("AGE-SECRET-KEY-"))
            .ok_or_else(|| SealingError::Malformed { path: path.clone() })?;
        let identity = age::x25519::Identity::from_str(line)
            .map_err(|_| SealingError::Malformed { path: path.clone() })?;
        Ok(Some(Self { identity }))
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

    /// The plaintext of `sealed`, zeroized when dropped. Only [`super::credentials`] opens
    /// what it decrypts, checking the operator's signature and what it is for.
    pub(crate) fn decrypt(
        &self,
        sealed: &SealedSecret,
    ) -> Result<Zeroizing<Vec<u8>>, age::DecryptError> {
        age::decrypt(&self.identity, sealed.armored().as_bytes()).map(Zeroizing::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

        let recipient = age::x25519::Recipient::from_str(&first.recipient()).unwrap();
        let armored = age::encrypt_and_armor(&recipient, b"sealed-4711").unwrap();
        let sealed = SealedSecret::try_from(armored).unwrap();
        assert_eq!(again.decrypt(&sealed).unwrap().as_slice(), b"sealed-4711");

        let other = tempfile::tempdir().unwrap();
        let stranger = StorageIdentity::load_or_create(other.path()).unwrap();
        assert!(stranger.decrypt(&sealed).is_err());
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
