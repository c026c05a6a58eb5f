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
//! makes it current again and starts a new rotation as soon as the pacing allows, so the old
//! key does not stay in use. Only when the hub refuses every key the agent holds is the host
//! locked out (revoked, or its key expired).
//!
//! **Rotations are paced by the agent** ([`Pace`]): a new key is made no sooner than the
//! configured least interval (an hour by default, never below ten of the hub's poll intervals)
//! after the last rotation completed, however often the hub asks. When it completed is written
//! into `host.json` with the new key, so a restart does not reset the pace. A request that
//! comes too early (an operator's `bosunctl hosts rotate-key`, or a hub asking in every answer)
//! is remembered and served at the first answer after the allowed moment, never dropped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jiff::Timestamp;
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
    /// When the last rotation completed (kept in `host.json`).
    rotated_at: Option<Timestamp>,
    /// A rotation was asked for (or is owed after a fall-back) before the pace allowed one:
    /// made at the first answer after the allowed moment.
    wanted: bool,
}

struct Next {
    key: SecretString,
    /// SHA-256 of `key`, lowercase hex: what the hub is told.
    hash: String,
    /// An answer named `hash`: the hub holds it, so the agent presents `key`.
    confirmed: bool,
    /// How often an answer named it since it was made (a hub that names it, then refuses it,
    /// then names it again gets the next poll at the usual pace, not at once).
    confirmations: u32,
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
    /// taken before that rotation): it is current again, and a new key is made as soon as the
    /// pace allows (at once when it does).
    FellBack,
    /// The hub asked for a new key before the pace allows one: the request is remembered and
    /// served at `until` (reported once per request, not once per answer).
    Deferred {
        /// The first moment a new key may be made.
        until: Timestamp,
    },
}

impl KeyStep {
    /// Whether the agent should poll again at once to carry the rotation on.
    pub fn carries_on(self) -> bool {
        matches!(self, Self::Made | Self::Confirmed | Self::FellBack)
    }
}

/// When a new key may be made: `now`, and the least time after the last completed rotation.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// The agent's clock.
    pub now: Timestamp,
    /// The least time between two rotations.
    pub min_interval: Duration,
}

impl Pace {
    /// The pace for a configured least interval and the hub's current poll interval: never
    /// below ten poll intervals.
    pub fn new(now: Timestamp, configured: Duration, poll_interval: Duration) -> Self {
        Self {
            now,
            min_interval: configured.max(poll_interval.saturating_mul(10)),
        }
    }

    /// The first moment a rotation may start after one that completed at `last`.
    fn next_allowed(&self, last: Option<Timestamp>) -> Option<Timestamp> {
        let last = last?;
        let span = jiff::SignedDuration::try_from(self.min_interval).ok()?;
        let at = last.checked_add(span).ok()?;
        (at > self.now).then_some(at)
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
                rotated_at: None,
                wanted: false,
            })),
            state_dir: None,
        }
    }

    /// The key `host.json` holds (and the one before it), with the next key a rotation under
    /// way left in
    /// `state_dir` (a next-key file holding the current key is what a kill after the
    /// rotation's last write leaves: it is removed); `rotated_at` is when the last rotation
    /// completed.
    pub(super) fn open(
        state_dir: &Path,
        current: SecretString,
        previous: Option<SecretString>,
        rotated_at: Option<Timestamp>,
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
                        confirmations: 0,
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
                rotated_at,
                wanted: false,
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

    /// When the last rotation completed, if one did.
    pub fn rotated_at(&self) -> Option<Timestamp> {
        self.keys.lock().rotated_at
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
    /// answer's `rotate_host_key` and `next_host_key_sha256`; `pace` says whether a new key may
    /// be made now. Every step is written before it counts.
    pub fn answered(
        &self,
        presented: &SecretString,
        rotate: bool,
        named: Option<&str>,
        pace: Pace,
    ) -> Result<Option<KeyStep>, IdentityError> {
        let mut keys = self.keys.lock();
        if let Some(next) = &keys.next
            && next.key.expose_secret() == presented.expose_secret()
        {
            // The hub took the new key: it is the host's key now, the old one kept as the
            // previous, and the pace counts from now.
            let key = next.key.clone();
            let previous = keys.current.clone();
            if let Some(dir) = &self.state_dir {
                identity::replace_key(
                    dir,
                    key.expose_secret(),
                    Some(previous.expose_secret()),
                    Some(pace.now),
                )?;
                remove(&dir.join(NEXT_FILE))?;
            }
            keys.current = key;
            keys.previous = Some(previous);
            keys.next = None;
            keys.on_previous = false;
            keys.rotated_at = Some(pace.now);
            keys.wanted = false;
            return Ok(Some(KeyStep::Rotated));
        }
        if keys.on_previous
            && let Some(previous) = keys.previous.clone()
            && previous.expose_secret() == presented.expose_secret()
        {
            // A hub from before the last rotation: the previous key is current again, and a
            // new one is made as soon as the pace allows, so it does not stay in use.
            if let Some(dir) = &self.state_dir {
                identity::replace_key(dir, previous.expose_secret(), None, None)?;
            }
            keys.current = previous;
            keys.previous = None;
            keys.on_previous = false;
            keys.wanted = true;
            self.make_if_allowed(&mut keys, pace)?;
            return Ok(Some(KeyStep::FellBack));
        }
        match (&keys.next, named) {
            (Some(next), Some(named)) if next.hash == named => {
                if next.confirmed {
                    return Ok(None);
                }
                let key = next.key.clone();
                self.keep_next(&key, true)?;
                let mut first = false;
                if let Some(next) = &mut keys.next {
                    next.confirmed = true;
                    next.confirmations = next.confirmations.saturating_add(1);
                    first = next.confirmations == 1;
                }
                // Named again after a refusal: presented from the next poll, at the usual pace.
                Ok(first.then_some(KeyStep::Confirmed))
            }
            // Asked for a key while none is under way, or the hub holds a next key this agent
            // does not (lost with a damaged state directory), or a request was owed: make one
            // when the pace allows; sent, it replaces the hub's.
            (None, _) if rotate || named.is_some() || keys.wanted => {
                let newly = !keys.wanted;
                keys.wanted = true;
                match self.make_if_allowed(&mut keys, pace)? {
                    None => Ok(Some(KeyStep::Made)),
                    Some(until) if newly => Ok(Some(KeyStep::Deferred { until })),
                    Some(_) => Ok(None),
                }
            }
            _ => Ok(None),
        }
    }

    /// Makes and keeps a next key for an owed rotation when `pace` allows; otherwise gives the
    /// first moment it will.
    fn make_if_allowed(
        &self,
        keys: &mut Keys,
        pace: Pace,
    ) -> Result<Option<Timestamp>, IdentityError> {
        if let Some(until) = pace.next_allowed(keys.rotated_at) {
            return Ok(Some(until));
        }
        let key = mint();
        self.keep_next(&key, false)?;
        keys.next = Some(Next {
            hash: key_hash(&key),
            key,
            confirmed: false,
            confirmations: 0,
        });
        keys.wanted = false;
        Ok(None)
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
mod tests;
