//! The host's key at the hub, and its rotation over the authenticated channel (decision 0044).
//!
//! The hub asks for a new key (`rotate_host_key`: the key is old, or an operator asked). The
//! agent makes one, writes it to `STATE_DIR/host-key-next.json` (mode 0600) **before** telling
//! the hub anything, then sends only its SHA-256 with the next poll, presented with the current
//! key. Once an answer names that hash back (the hub holds it), the agent presents the new key;
//! the first request that does makes it the hub's current key and retires the old one, and the
//! agent then writes it into `host.json` and drops the next-key file.
//!
//! A lost answer or a kill at any step leaves a key both sides accept: the agent keeps the old
//! key until the hub accepted the new one, and the hub keeps the old key until the new one is
//! presented. When the hub refuses the key presented while a rotation is under way, the agent
//! tries the other one ([`HostKey::refused`]).
//!
//! The key a rotation replaced stays in `host.json` (`previous_host_key`): the live hub refuses
//! it, but a hub restored from a backup taken before that rotation knows only it. Refused with
//! its current key and no rotation under way, the agent tries the previous one; accepted, it
//! makes it current again and starts a new rotation at once, so the old key does not stay in
//! use. Only when the hub refuses every key the agent holds is the host locked out (revoked, or
//! its key expired).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use parking_lot::Mutex;
use rand::RngCore as _;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::identity::{self, IdentityError};

/// The next key's file under the state directory, present only while a rotation is under way.
pub const NEXT_FILE: &str = "host-key-next.json";

/// The host's key (and, while it rotates, the next one): cloned into every part of the agent
/// that calls the hub, so all present the same key.
#[derive(Clone)]
pub struct HostKey {
    keys: Arc<Mutex<Keys>>,
    /// Where the keys are kept (`None`: in memory only, for a one-shot client).
    state_dir: Option<Arc<PathBuf>>,
}

impl std::fmt::Debug for HostKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = self.keys.lock();
        f.debug_struct("HostKey")
            .field("rotating", &keys.next.is_some())
            .field(
                "presenting_next",
                &keys.next.as_ref().is_some_and(|n| n.confirmed),
            )
            .finish_non_exhaustive()
    }
}

struct Keys {
    current: SecretString,
    next: Option<Next>,
    /// The key the last rotation replaced.
    previous: Option<SecretString>,
    /// The hub refused the current key: the previous one is presented instead (not kept on
    /// disk: after a restart the current key is tried first again).
    on_previous: bool,
}

struct Next {
    key: SecretString,
    /// SHA-256 of `key`, lowercase hex: what the hub is told.
    hash: String,
    /// An answer named `hash`: the hub holds it, so the agent presents `key`.
    confirmed: bool,
}

#[derive(Serialize, Deserialize)]
struct NextOnDisk {
    key: String,
    confirmed: bool,
}

/// What an answered poll did to the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyStep {
    /// The hub asked for a new key: one was made and kept; its hash goes with the next poll.
    Made,
    /// The hub holds the new key's hash: the new key is presented from now on.
    Confirmed,
    /// The hub accepted the new key: it is the host's key, the old one is gone.
    Rotated,
    /// The hub accepted only the key the last rotation replaced (it was restored from a backup
    /// taken before that rotation): it is current again, and a new key was made at once.
    FellBack,
}

impl KeyStep {
    /// Whether the agent should poll again at once to carry the rotation on.
    pub fn carries_on(self) -> bool {
        matches!(self, Self::Made | Self::Confirmed | Self::FellBack)
    }
}

/// SHA-256 of a key, as polls carry it (lowercase hex).
pub fn key_hash(key: &SecretString) -> String {
    hex::encode(Sha256::digest(key.expose_secret().as_bytes()))
}

/// A new host key, as the hub mints them: `bsh_` and 256 random bits.
fn mint() -> SecretString {
    let mut raw = [0u8; 32];
    rand::rng().fill_bytes(&mut raw);
    SecretString::from(format!("bsh_{}", URL_SAFE_NO_PAD.encode(raw)))
}

impl HostKey {
    /// A key kept in memory only (a rotation is not written anywhere).
    pub fn in_memory(current: SecretString) -> Self {
        Self {
            keys: Arc::new(Mutex::new(Keys {
                current,
                next: None,
                previous: None,
                on_previous: false,
            })),
            state_dir: None,
        }
    }

    /// The key `host.json` holds (and the one before it), with the next key a rotation under
    /// way left in
    /// `state_dir` (a next-key file holding the current key is what a kill after the
    /// rotation's last write leaves: it is removed).
    pub(super) fn open(
        state_dir: &Path,
        current: SecretString,
        previous: Option<SecretString>,
    ) -> Result<Self, IdentityError> {
        let path = state_dir.join(NEXT_FILE);
        let next = match identity::read_private(&path)? {
            None => None,
            Some(text) => {
                let disk: NextOnDisk =
                    serde_json::from_str(&text).map_err(|source| IdentityError::Malformed {
                        path: path.clone(),
                        source,
                    })?;
                if disk.key == current.expose_secret() {
                    remove(&path)?;
                    None
                } else {
                    let key = SecretString::from(disk.key);
                    Some(Next {
                        hash: key_hash(&key),
                        key,
                        confirmed: disk.confirmed,
                    })
                }
            }
        };
        Ok(Self {
            keys: Arc::new(Mutex::new(Keys {
                current,
                next,
                previous,
                on_previous: false,
            })),
            state_dir: Some(Arc::new(state_dir.to_owned())),
        })
    }

    /// The key to present: the next one once the hub holds it, else the current one.
    pub fn presented(&self) -> SecretString {
        let keys = self.keys.lock();
        match (&keys.next, &keys.previous) {
            (Some(next), _) if next.confirmed => next.key.clone(),
            (None, Some(previous)) if keys.on_previous => previous.clone(),
            _ => keys.current.clone(),
        }
    }

    /// The key the last rotation replaced, if the host holds it.
    pub fn previous(&self) -> Option<SecretString> {
        self.keys.lock().previous.clone()
    }

    /// The host's current key (what `host.json` holds).
    pub fn current(&self) -> SecretString {
        self.keys.lock().current.clone()
    }

    /// The next key's hash to send with a poll, until the hub names it back.
    pub fn next_to_send(&self) -> Option<String> {
        let keys = self.keys.lock();
        keys.next
            .as_ref()
            .filter(|next| !next.confirmed)
            .map(|next| next.hash.clone())
    }

    /// Takes an answered poll, sent presenting `presented`: `rotate` and `named` are the
    /// answer's `rotate_host_key` and `next_host_key_sha256`. Every step is written before it
    /// counts.
    pub fn answered(
        &self,
        presented: &SecretString,
        rotate: bool,
        named: Option<&str>,
    ) -> Result<Option<KeyStep>, IdentityError> {
        let mut keys = self.keys.lock();
        if let Some(next) = &keys.next
            && next.key.expose_secret() == presented.expose_secret()
        {
            // The hub took the new key: it is the host's key now, the old one kept as the
            // previous.
            let key = next.key.clone();
            let previous = keys.current.clone();
            if let Some(dir) = &self.state_dir {
                identity::replace_key(dir, key.expose_secret(), Some(previous.expose_secret()))?;
                remove(&dir.join(NEXT_FILE))?;
            }
            keys.current = key;
            keys.previous = Some(previous);
            keys.next = None;
            keys.on_previous = false;
            return Ok(Some(KeyStep::Rotated));
        }
        if keys.on_previous
            && let Some(previous) = keys.previous.clone()
            && previous.expose_secret() == presented.expose_secret()
        {
            // A hub from before the last rotation: the previous key is current again, and a
            // new one is made at once so it does not stay in use.
            if let Some(dir) = &self.state_dir {
                identity::replace_key(dir, previous.expose_secret(), None)?;
            }
            keys.current = previous;
            keys.previous = None;
            keys.on_previous = false;
            let key = mint();
            self.keep_next(&key, false)?;
            keys.next = Some(Next {
                hash: key_hash(&key),
                key,
                confirmed: false,
            });
            return Ok(Some(KeyStep::FellBack));
        }
        match (&keys.next, named) {
            (Some(next), Some(named)) if next.hash == named => {
                if next.confirmed {
                    return Ok(None);
                }
                let key = next.key.clone();
                self.keep_next(&key, true)?;
                if let Some(next) = &mut keys.next {
                    next.confirmed = true;
                }
                Ok(Some(KeyStep::Confirmed))
            }
            // Asked for a key while none is under way, or the hub holds a next key this agent
            // does not (lost with a damaged state directory): make one; sent, it replaces the
            // hub's.
            (None, _) if rotate || named.is_some() => {
                let key = mint();
                self.keep_next(&key, false)?;
                keys.next = Some(Next {
                    hash: key_hash(&key),
                    key,
                    confirmed: false,
                });
                Ok(Some(KeyStep::Made))
            }
            _ => Ok(None),
        }
    }

    /// The hub refused `presented`. While a rotation is under way the other key is tried next
    /// (the hub may have promoted the new key, or forgotten it); otherwise the previous key and
    /// the current one take turns (a hub restored from an older backup knows the previous
    /// one). `false` when there is no other key, and the host is locked out.
    pub fn refused(&self, presented: &SecretString) -> Result<bool, IdentityError> {
        let mut keys = self.keys.lock();
        let Some(next) = &keys.next else {
            // No rotation under way: the previous key, if the host holds one, is what a hub
            // restored from an older backup knows.
            if keys.previous.is_none() {
                return Ok(false);
            }
            keys.on_previous = !keys.on_previous;
            return Ok(true);
        };
        let was_next = next.key.expose_secret() == presented.expose_secret();
        let key = next.key.clone();
        // Presenting the next key was refused: go back to the current one (and send the next
        // key's hash again); presenting the current one was refused: the hub took the next.
        let confirmed = !was_next;
        self.keep_next(&key, confirmed)?;
        if let Some(next) = &mut keys.next {
            next.confirmed = confirmed;
        }
        Ok(true)
    }

    /// Writes the next-key file (mode 0600, replaced atomically).
    fn keep_next(&self, key: &SecretString, confirmed: bool) -> Result<(), IdentityError> {
        let Some(dir) = &self.state_dir else {
            return Ok(());
        };
        let path = dir.join(NEXT_FILE);
        let body = serde_json::to_vec(&NextOnDisk {
            key: key.expose_secret().to_owned(),
            confirmed,
        })
        .map_err(|source| IdentityError::Malformed {
            path: path.clone(),
            source,
        })?;
        identity::replace_private(&path, &body).map_err(|source| IdentityError::Io { path, source })
    }
}

/// Removes `path` if it is there.
pub(super) fn remove(path: &Path) -> Result<(), IdentityError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(IdentityError::Io {
            path: path.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn opened(dir: &Path, key: &str) -> HostKey {
        HostKey::open(dir, SecretString::from(key.to_owned()), None).unwrap()
    }

    fn seed(dir: &Path, key: &str) {
        let identity = identity::HostIdentity {
            host_id: uuid::Uuid::new_v4(),
            host_key: HostKey::in_memory(SecretString::from(key.to_owned())),
            replaces: None,
            enrolled_at: None,
        };
        identity.store(dir).unwrap();
    }

    fn reloaded(dir: &Path) -> HostKey {
        identity::HostIdentity::load(dir).unwrap().unwrap().host_key
    }

    #[test]
    fn a_rotation_survives_a_restart_at_every_step() {
        let dir = tempfile::tempdir().unwrap();
        seed(dir.path(), "bsh_old");
        let keys = opened(dir.path(), "bsh_old");
        let old = keys.presented();
        assert_eq!(keys.answered(&old, false, None).unwrap(), None);

        // Asked: a key is made and kept before its hash goes anywhere.
        assert_eq!(
            keys.answered(&old, true, None).unwrap(),
            Some(KeyStep::Made)
        );
        let hash = keys.next_to_send().unwrap();
        let again = reloaded(dir.path());
        assert_eq!(again.next_to_send().as_deref(), Some(hash.as_str()));
        assert_eq!(again.presented().expose_secret(), "bsh_old");
        // Asked again before the hub holds it: the same key, not another.
        assert_eq!(keys.answered(&old, true, None).unwrap(), None);
        assert_eq!(keys.next_to_send().as_deref(), Some(hash.as_str()));

        // The hub names it: present it from now on, after a restart too.
        assert_eq!(
            keys.answered(&old, false, Some(&hash)).unwrap(),
            Some(KeyStep::Confirmed)
        );
        let new = keys.presented();
        assert_ne!(new.expose_secret(), "bsh_old");
        assert_eq!(key_hash(&new), hash);
        assert_eq!(keys.next_to_send(), None);
        let again = reloaded(dir.path());
        assert_eq!(again.presented().expose_secret(), new.expose_secret());
        assert_eq!(again.current().expose_secret(), "bsh_old");

        // Accepted: host.json holds the new key, the next-key file is gone.
        assert_eq!(
            keys.answered(&new, false, None).unwrap(),
            Some(KeyStep::Rotated)
        );
        assert_eq!(keys.current().expose_secret(), new.expose_secret());
        assert!(!dir.path().join(NEXT_FILE).exists());
        let again = reloaded(dir.path());
        assert_eq!(again.presented().expose_secret(), new.expose_secret());
        assert_eq!(again.next_to_send(), None);
        assert_eq!(again.previous().unwrap().expose_secret(), "bsh_old");
    }

    #[test]
    fn a_hub_restored_from_before_the_rotation_gets_the_previous_key_then_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        seed(dir.path(), "bsh_old");
        let keys = opened(dir.path(), "bsh_old");
        let old = keys.presented();
        keys.answered(&old, true, None).unwrap();
        let hash = keys.next_to_send().unwrap();
        keys.answered(&old, false, Some(&hash)).unwrap();
        let new = keys.presented();
        keys.answered(&new, false, None).unwrap();

        // The restored hub refuses the new key: the previous one is tried, and taken back.
        assert!(keys.refused(&new).unwrap());
        assert_eq!(keys.presented().expose_secret(), "bsh_old");
        assert_eq!(
            keys.answered(&old, false, None).unwrap(),
            Some(KeyStep::FellBack)
        );
        assert_eq!(reloaded(dir.path()).current().expose_secret(), "bsh_old");
        // ...and a new rotation starts at once: a new key, not the one the live hub had.
        let fresh = keys.next_to_send().unwrap();
        assert_ne!(fresh, hash);
        assert!(keys.previous().is_none());

        // Refused with both, the keys take turns under the loop's backoff.
        let lone = HostKey::in_memory(SecretString::from("bsh_lone".to_owned()));
        assert!(!lone.refused(&lone.presented()).unwrap());
    }

    #[test]
    fn a_refused_key_falls_back_to_the_other_and_a_lone_key_does_not() {
        let keys = HostKey::in_memory(SecretString::from("bsh_old".to_owned()));
        let old = keys.presented();
        assert!(!keys.refused(&old).unwrap(), "no other key to try");
        keys.answered(&old, true, None).unwrap();
        let hash = keys.next_to_send().unwrap();
        keys.answered(&old, false, Some(&hash)).unwrap();
        let new = keys.presented();
        // The new key refused (the hub lost it): back to the old one, its hash sent again.
        assert!(keys.refused(&new).unwrap());
        assert_eq!(keys.presented().expose_secret(), "bsh_old");
        assert_eq!(keys.next_to_send().as_deref(), Some(hash.as_str()));
        // The old key refused (the hub had taken the new one): present the new one.
        assert!(keys.refused(&old).unwrap());
        assert_eq!(keys.presented().expose_secret(), new.expose_secret());
    }

    #[test]
    fn a_next_key_the_hub_forgot_or_never_had_is_sent_again() {
        let keys = HostKey::in_memory(SecretString::from("bsh_old".to_owned()));
        let old = keys.presented();
        // The hub names a next key this agent does not hold: a key is made to replace it.
        let strange = "a".repeat(64);
        assert_eq!(
            keys.answered(&old, false, Some(&strange)).unwrap(),
            Some(KeyStep::Made)
        );
        let hash = keys.next_to_send().unwrap();
        assert_ne!(hash, strange);
        // An answer to a poll sent before the hub held it changes nothing.
        assert_eq!(keys.answered(&old, true, None).unwrap(), None);
        assert_eq!(keys.next_to_send().as_deref(), Some(hash.as_str()));
        assert_eq!(
            keys.answered(&old, false, Some(&hash)).unwrap(),
            Some(KeyStep::Confirmed)
        );
        assert_eq!(key_hash(&keys.presented()), hash);
    }

    #[test]
    fn a_next_key_file_holding_the_current_key_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        seed(dir.path(), "bsh_new");
        let body = serde_json::to_vec(&NextOnDisk {
            key: "bsh_new".into(),
            confirmed: true,
        })
        .unwrap();
        identity::replace_private(&dir.path().join(NEXT_FILE), &body).unwrap();
        let keys = opened(dir.path(), "bsh_new");
        assert_eq!(keys.next_to_send(), None);
        assert_eq!(keys.presented().expose_secret(), "bsh_new");
        assert!(!dir.path().join(NEXT_FILE).exists());
    }

    #[test]
    fn debug_shows_no_key() {
        let keys = HostKey::in_memory(SecretString::from("bsh_secret".to_owned()));
        assert!(!format!("{keys:?}").contains("bsh_secret"));
    }
}
