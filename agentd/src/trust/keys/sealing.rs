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

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use age::secrecy::ExposeSecret;
use bosun_proto::secret::SealedSecret;
use zeroize::Zeroizing;

/// The identity's file name in the state directory.
pub const IDENTITY_FILE: &str = "storage-identity.age";

/// Where a new identity is written before it is linked into place.
const IDENTITY_FILE_TMP: &str = ".storage-identity.age.tmp";

/// Whether `path` is a file with nothing in it.
fn is_empty(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.len() == 0)
}

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
        match Self::load(state_dir) {
            Ok(Some(identity)) => return Ok(identity),
            Ok(None) => {}
            Err(SealingError::Malformed { path }) if is_empty(&path) => {
                // Agents before the file was linked into place whole created it and then
                // wrote it: one killed between the two left it empty. It never held a key,
                // so nothing was sealed to it.
                tracing::warn!(path = %path.display(), "the host storage identity file is empty (an earlier start was cut short); making the identity again");
                std::fs::remove_file(&path).map_err(|source| SealingError::Io {
                    what: "removing",
                    path,
                    source,
                })?;
            }
            Err(e) => return Err(e),
        }
        Self::create(state_dir)
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

    /// Makes a new identity and writes it whole ([`super::new_file`]); when another process
    /// wrote one first, that one is loaded instead.
    fn create(state_dir: &Path) -> Result<Self, SealingError> {
        let identity = age::x25519::Identity::generate();
        let secret = identity.to_string();
        let text = Zeroizing::new(format!(
            "# bosun host storage identity; recipient {}\n{}\n",
            identity.to_public(),
            secret.expose_secret()
        ));
        let written = super::new_file::write_new(
            state_dir,
            IDENTITY_FILE_TMP,
            IDENTITY_FILE,
            text.as_bytes(),
        )
        .map_err(|e| SealingError::Io {
            what: e.what,
            path: e.path,
            source: e.source,
        })?;
        match written {
            super::new_file::Written::New => {
                tracing::info!(recipient = %identity.to_public(), "host storage identity created");
                Ok(Self { identity })
            }
            super::new_file::Written::AlreadyThere => {
                Self::load(state_dir)?.ok_or_else(|| SealingError::Malformed {
                    path: state_dir.join(IDENTITY_FILE),
                })
            }
        }
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

    #[test]
    fn an_empty_identity_file_a_cut_short_start_left_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(IDENTITY_FILE);
        // What an agent killed between creating the file and writing it left behind, beside
        // a temporary file a later one was killed while writing.
        std::fs::write(&path, "").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(dir.path().join(IDENTITY_FILE_TMP), "AGE-SECRET-KEY-1HALF").unwrap();
        let made = StorageIdentity::load_or_create(dir.path()).unwrap();
        let again = StorageIdentity::load_or_create(dir.path()).unwrap();
        assert_eq!(made.recipient(), again.recipient());
        assert!(!dir.path().join(IDENTITY_FILE_TMP).exists());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
