//! The pins the agent trusts the hub by, across the hub's key rotations and the agent's
//! restarts.
//!
//! While the hub rotates its key its poll answers announce the pins to trust (the staged,
//! active and retiring keys), over a channel the key the agent already trusts authenticates.
//! The agent takes them ([`HubPins::adopt`]) only when they keep at least one key it trusts
//! already (a rotation overlaps: the staged key is announced beside the active one, the
//! retiring one beside the new), and journals them before trusting them (`hub-pins.json` in the state directory, beside the pins
//! `agent.toml` gave when they were taken), so a restart trusts what the hub last announced.
//! An operator who changes the configured pins is obeyed: the journal counts only while the
//! configuration still gives the pins it was taken from. The agent tells the hub which pins it
//! trusts on its first poll and whenever they change ([`HubPins::to_send`]), so the operator
//! sees who holds the next key before switching to it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bosun_pin::{Pin, PinSet};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// The journal's file name in the state directory.
pub const FILE: &str = "hub-pins.json";

/// Largest journal read, in bytes (eight pins take well under 1 KiB).
const MAX_FILE_BYTES: u64 = 16 * 1024;

/// What the journal holds.
#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    /// The configured pins the announced ones were taken under.
    configured: Vec<String>,
    /// The pins the hub announced last.
    pins: Vec<String>,
}

/// Why the pins could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum PinsError {
    /// The journal could not be read or written.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The journal is not what the agent writes.
    #[error("{path} is damaged: {reason}")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// Why announced pins were not taken.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The announcement keeps none of the keys trusted now.
    #[error("the announced pins keep none of the keys this agent trusts")]
    Unrelated,
    /// The announcement is not a pin set.
    #[error("the announced pins are not a usable set: {0}")]
    Unusable(String),
}

/// The agent's trust in the hub's pins.
#[derive(Debug)]
pub struct HubPins {
    set: Arc<PinSet>,
    path: PathBuf,
    configured: Vec<String>,
    /// The pins the hub acknowledged receiving (a poll carrying them was answered).
    acknowledged: Mutex<Option<Vec<String>>>,
}

fn texts(pins: &[Pin]) -> Vec<String> {
    let mut texts: Vec<String> = pins.iter().map(Pin::to_string).collect();
    texts.sort();
    texts
}

impl HubPins {
    /// Trusts what the journal in `state_dir` holds when it was taken under `configured`, and
    /// `configured` otherwise; `set` is the verifier's set the pins go into.
    pub fn open(state_dir: &Path, configured: &[Pin], set: Arc<PinSet>) -> Result<Self, PinsError> {
        let path = state_dir.join(FILE);
        let configured = texts(configured);
        let pins = Self {
            set,
            path,
            configured,
            acknowledged: Mutex::new(None),
        };
        if let Some(journal) = pins.read()? {
            if journal.configured == pins.configured {
                let taken = parse(&journal.pins).map_err(|reason| PinsError::Damaged {
                    path: pins.path.clone(),
                    reason,
                })?;
                pins.set.replace(taken).map_err(|e| PinsError::Damaged {
                    path: pins.path.clone(),
                    reason: e.to_string(),
                })?;
                tracing::info!(pins = ?journal.pins, "trusting the hub's keys it announced last");
            } else {
                tracing::info!(
                    "the configured hub pins changed since the hub last announced its keys; trusting the configured pins"
                );
            }
        }
        Ok(pins)
    }

    fn read(&self) -> Result<Option<Journal>, PinsError> {
        use std::io::Read as _;
        let file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(PinsError::Io {
                    what: "opening",
                    path: self.path.clone(),
                    source,
                });
            }
        };
        let mut text = String::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|source| PinsError::Io {
                what: "reading",
                path: self.path.clone(),
                source,
            })?;
        if u64::try_from(text.len()).unwrap_or(u64::MAX) > MAX_FILE_BYTES {
            return Err(PinsError::Damaged {
                path: self.path.clone(),
                reason: format!("larger than {MAX_FILE_BYTES} bytes"),
            });
        }
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| PinsError::Damaged {
                path: self.path.clone(),
                reason: e.to_string(),
            })
    }

    /// The pins trusted now, sorted.
    pub fn trusted(&self) -> Vec<String> {
        texts(&self.set.pins())
    }

    /// The pins to tell the hub in the next poll: the trusted ones until a poll carrying them
    /// is answered, nothing after.
    pub fn to_send(&self) -> Vec<String> {
        let trusted = self.trusted();
        if self.acknowledged.lock().as_ref() == Some(&trusted) {
            Vec::new()
        } else {
            trusted
        }
    }

    /// A poll carrying `sent` was answered.
    pub fn answered(&self, sent: &[String]) {
        if !sent.is_empty() {
            *self.acknowledged.lock() = Some(sent.to_vec());
        }
    }

    /// Takes the pins a poll answer announced; whether the trusted set changed. Refused when
    /// they keep none of the keys trusted now: a rotation always overlaps, so such a set is a
    /// mistake that would cut the agent off at its next connection. (The key of the connection
    /// the answer came over need not be among them: a connection opened before the switch
    /// carries the answer that retires its key.) Journals them before trusting them.
    pub fn adopt(&self, announced: &[String]) -> Result<bool, AdoptError> {
        if announced.is_empty() {
            return Ok(false);
        }
        let pins = parse(announced).map_err(|e| AdoptError::Refused(Refused::Unusable(e)))?;
        let trusted = self.set.pins();
        if !pins
            .iter()
            .any(|pin| trusted.contains(pin) || self.presented_by(pin))
        {
            return Err(AdoptError::Refused(Refused::Unrelated));
        }
        let taken = texts(&pins);
        if taken == self.trusted() {
            return Ok(false);
        }
        self.write(&Journal {
            configured: self.configured.clone(),
            pins: taken,
        })?;
        self.set
            .replace(pins)
            .map_err(|e| AdoptError::Refused(Refused::Unusable(e.to_string())))?;
        Ok(true)
    }

    /// Whether `pin` names the key of the last leaf the hub presented (a configured certificate
    /// fingerprint trusts that key too).
    fn presented_by(&self, pin: &Pin) -> bool {
        self.set.last_accepted_key().as_ref() == Some(pin)
    }

    /// Writes the journal: a temporary file, synced, renamed over the old one.
    fn write(&self, journal: &Journal) -> Result<(), PinsError> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let io = |what| {
            let path = self.path.clone();
            move |source| PinsError::Io { what, path, source }
        };
        let tmp = self.path.with_extension("json.tmp");
        let text = serde_json::to_vec(journal).map_err(|e| PinsError::Damaged {
            path: tmp.clone(),
            reason: e.to_string(),
        })?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io("creating"))?;
        file.write_all(&text).map_err(io("writing"))?;
        file.sync_all().map_err(io("syncing"))?;
        std::fs::rename(&tmp, &self.path).map_err(io("renaming"))?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io("syncing the directory of"))?;
        }
        Ok(())
    }
}

/// Why announced pins were not taken.
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    /// They were refused.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// They could not be journaled (and are not trusted).
    #[error("journaling the hub's announced pins")]
    Journal(#[from] PinsError),
}

fn parse(texts: &[String]) -> Result<Vec<Pin>, String> {
    if texts.len() > bosun_pin::MAX_PINS {
        return Err(format!(
            "{} pins, more than {}",
            texts.len(),
            bosun_pin::MAX_PINS
        ));
    }
    texts
        .iter()
        .map(|t| Pin::parse(t).map_err(|e| e.to_string()))
        .collect()
}

#[cfg(test)]
mod tests;
