//! The pins the agent trusts the hub by, across the hub's key rotations and the agent's
//! restarts (decisions 0042 and 0049).
//!
//! A set of hub keys is the operator's signed decision, like the data plan: the agent takes a
//! new set only from a `bosun.hub-pins/v1` document signed by a key in its `allowed_signers`
//! under the policy namespace, bound to this host or fleet-wide, with a serial above the one it
//! holds ([`HubPins::adopt`]); the hub carries the signed bytes in its poll answers. Pins a hub
//! announces unsigned are ignored (the agent says so once per set, [`HubPins::unsigned`]):
//! holding the hub's key must never buy a way in that outlives it.
//!
//! The agent trusts the pins `agent.toml` gives **and** those of the newest signed set, so the
//! real hub with the configured key always gets back in, and so does a hub presenting any key
//! the operator signed. The signed set is journaled (`hub-pins.json` in the state directory:
//! the exact bytes and signature) before it is trusted, and checked against `allowed_signers`
//! again at every start: a set whose signer the operator removed is trusted no more, and its
//! serial still counts. A journal from before signed sets (unsigned pins) is not trusted. The
//! agent tells the hub which pins it trusts on its first poll and whenever they change
//! ([`HubPins::to_send`]), so the operator sees who holds the next key before switching to it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bosun_pin::{Pin, PinSet};
use bosun_proto::hub_pins::{HUB_PINS_NAMESPACE, HubPinsDocument, MAX_HUB_PINS_DOCUMENT};
use bosun_proto::signed::SignedDocument;
use jiff::Timestamp;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::trust::signing::{AllowedSigners, RefusedDocuments, verify_signature};

/// The journal's file name in the state directory.
pub const FILE: &str = "hub-pins.json";

/// Largest journal read, in bytes (a signed set of eight pins takes well under 4 KiB).
const MAX_FILE_BYTES: u64 = 16 * 1024;

/// What the journal holds: the newest signed set taken. A journal written before signed sets
/// (`configured` and `pins`, no document) reads as none.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Journal {
    /// The set's serial.
    #[serde(default)]
    serial: u64,
    /// The signed bytes, standard base64.
    #[serde(default)]
    document: Option<String>,
    /// The armored signature.
    #[serde(default)]
    signature: Option<String>,
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

/// Why a signed set was not taken.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The document is not a usable pin set.
    #[error("the signed pin set is not usable: {0}")]
    Unusable(String),
    /// The set is bound to another host.
    #[error("the signed pin set is for host {0}, not this one")]
    OtherHost(Uuid),
    /// Its serial is not above the set held.
    #[error(
        "serial {offered} is not above the pin set held (serial {held}): a replayed or re-used serial"
    )]
    Stale {
        /// The offered serial.
        offered: u64,
        /// The held one.
        held: u64,
    },
    /// The signature does not verify against `allowed_signers`.
    #[error("the signed pin set's signature is refused: {0}")]
    Signature(String),
    /// Refused before (not audited again).
    #[error("refused before")]
    RefusedBefore,
}

/// What became of an offered signed set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adopted {
    /// Verified and journaled: trusted from the next connection on.
    Taken {
        /// Its serial.
        serial: u64,
        /// The signer's key fingerprint.
        signer: String,
    },
    /// The set held already.
    Current,
}

/// The signed set held.
#[derive(Debug, Clone)]
struct Held {
    serial: u64,
    document: Vec<u8>,
    pins: Vec<Pin>,
}

/// The agent's trust in the hub's pins.
#[derive(Debug)]
pub struct HubPins {
    set: Arc<PinSet>,
    path: PathBuf,
    configured: Vec<Pin>,
    signers: PathBuf,
    held: Mutex<Option<Held>>,
    /// The serial of the newest set ever journaled (also when it no longer verifies).
    floor: Mutex<u64>,
    refused: RefusedDocuments,
    /// The last unsigned announcement seen, so it is reported once.
    unsigned_seen: Mutex<Option<Vec<String>>>,
    /// The pins the hub acknowledged receiving (a poll carrying them was answered).
    acknowledged: Mutex<Option<Vec<String>>>,
}

fn texts(pins: &[Pin]) -> Vec<String> {
    let mut texts: Vec<String> = pins.iter().map(Pin::to_string).collect();
    texts.sort();
    texts
}

impl HubPins {
    /// Trusts `configured` and the signed set the journal in `state_dir` holds, when it still
    /// verifies against the `allowed_signers` file at `signers` at time `now`; `set` is the
    /// verifier's set the pins go into.
    pub fn open(
        state_dir: &Path,
        configured: &[Pin],
        set: Arc<PinSet>,
        signers: &Path,
        now: Timestamp,
    ) -> Result<Self, PinsError> {
        let pins = Self {
            set,
            path: state_dir.join(FILE),
            configured: configured.to_vec(),
            signers: signers.to_owned(),
            held: Mutex::new(None),
            floor: Mutex::new(0),
            refused: RefusedDocuments::default(),
            unsigned_seen: Mutex::new(None),
            acknowledged: Mutex::new(None),
        };
        let Some(journal) = pins.read()? else {
            return Ok(pins);
        };
        *pins.floor.lock() = journal.serial;
        let (Some(document), Some(signature)) = (journal.document, journal.signature) else {
            tracing::warn!(
                "the journaled hub pins are unsigned (taken before pin sets were signed); trusting the configured pins only"
            );
            return Ok(pins);
        };
        let signed = SignedDocument {
            document,
            signature,
        };
        match pins.verify(&signed, now) {
            Ok((doc, bytes, _)) => {
                let held = Held {
                    serial: doc.serial,
                    document: bytes,
                    pins: parse(&doc.pins).map_err(|reason| PinsError::Damaged {
                        path: pins.path.clone(),
                        reason,
                    })?,
                };
                pins.trust(&held.pins)
                    .map_err(|reason| PinsError::Damaged {
                        path: pins.path.clone(),
                        reason,
                    })?;
                tracing::info!(serial = held.serial, pins = ?pins.trusted(), "trusting the configured hub pins and the operator's signed set");
                *pins.held.lock() = Some(held);
            }
            Err(reason) => tracing::warn!(
                %reason,
                "the journaled signed hub pins no longer verify; trusting the configured pins only"
            ),
        }
        Ok(pins)
    }

    /// The pins of `client` widened as the daemon widens them: `config`'s own and the signed
    /// set journaled in its state directory, verified again against its `allowed_signers` at
    /// `now`. The daemon and `bosun-agentctl` both open the hub this way, so after a hub key
    /// rotation the agent followed the operator's tools on the node still reach the hub. `None`
    /// when a CA, not pins, decides.
    pub fn for_client(
        client: &super::client::HubClient,
        config: &crate::config::AgentConfig,
        now: Timestamp,
    ) -> Result<Option<Self>, PinsError> {
        client
            .pins()
            .map(|set| {
                Self::open(
                    &config.state_dir,
                    &config.hub.pins,
                    Arc::clone(set),
                    &config.allowed_signers,
                    now,
                )
            })
            .transpose()
    }

    /// The pins trusted now, sorted.
    pub fn trusted(&self) -> Vec<String> {
        texts(&self.set.pins())
    }

    /// The serial of the signed set held, if any.
    pub fn serial(&self) -> Option<u64> {
        self.held.lock().as_ref().map(|h| h.serial)
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

    /// A hub announced `announced` unsigned: ignored. Whether this set is new since the last
    /// one ignored (and so is to be reported; the same set in every answer is reported once).
    pub fn unsigned(&self, announced: &[String]) -> bool {
        if announced.is_empty() {
            return false;
        }
        let mut sorted = announced.to_vec();
        sorted.sort();
        let mut seen = self.unsigned_seen.lock();
        if seen.as_ref() == Some(&sorted) {
            return false;
        }
        *seen = Some(sorted);
        true
    }

    /// Offers the operator's signed set from a poll answer, for host `host` at time `now`.
    /// Taken only when it decodes, is for this host (or the fleet), has a serial above the one
    /// held and verifies against `allowed_signers`; journaled before it is trusted. A set
    /// refused once is refused again at once ([`Refused::RefusedBefore`]).
    pub fn adopt(
        &self,
        signed: &SignedDocument,
        host: Uuid,
        now: Timestamp,
    ) -> Result<Adopted, AdoptError> {
        let digest = RefusedDocuments::digest(signed);
        if self.refused.contains(&digest) {
            return Err(Refused::RefusedBefore.into());
        }
        match self.admit(signed, host, now) {
            Err(AdoptError::Refused(refused)) => {
                self.refused.remember(digest);
                Err(refused.into())
            }
            other => other,
        }
    }

    fn admit(
        &self,
        signed: &SignedDocument,
        host: Uuid,
        now: Timestamp,
    ) -> Result<Adopted, AdoptError> {
        let doc = signed
            .hub_pins()
            .map_err(|e| Refused::Unusable(e.to_string()))?;
        if !doc.is_for(host) {
            return Err(Refused::OtherHost(doc.host_id.unwrap_or_default()).into());
        }
        let bytes = signed
            .bytes_within("hub_pins_signed", MAX_HUB_PINS_DOCUMENT)
            .map_err(|e| Refused::Unusable(e.to_string()))?;
        if let Some(held) = self.held.lock().as_ref()
            && held.serial == doc.serial
            && held.document == bytes
        {
            return Ok(Adopted::Current);
        }
        let floor = *self.floor.lock();
        if doc.serial <= floor {
            return Err(Refused::Stale {
                offered: doc.serial,
                held: floor,
            }
            .into());
        }
        let (doc, bytes, signer) = self.verify(signed, now).map_err(Refused::Signature)?;
        let pins = parse(&doc.pins).map_err(Refused::Unusable)?;
        self.check_room(&pins).map_err(Refused::Unusable)?;
        self.write(&Journal {
            serial: doc.serial,
            document: Some(signed.document.clone()),
            signature: Some(signed.signature.clone()),
        })?;
        *self.floor.lock() = doc.serial;
        self.trust(&pins).map_err(Refused::Unusable)?;
        *self.held.lock() = Some(Held {
            serial: doc.serial,
            document: bytes,
            pins,
        });
        Ok(Adopted::Taken {
            serial: doc.serial,
            signer,
        })
    }

    /// Decodes `signed` and checks its signature; gives the document, its bytes and the
    /// signer's fingerprint.
    fn verify(
        &self,
        signed: &SignedDocument,
        now: Timestamp,
    ) -> Result<(HubPinsDocument, Vec<u8>, String), String> {
        let doc = signed.hub_pins().map_err(|e| e.to_string())?;
        let bytes = STANDARD
            .decode(signed.document.as_bytes())
            .map_err(|e| e.to_string())?;
        let signers = AllowedSigners::load(&self.signers).map_err(|e| e.to_string())?;
        let signer = verify_signature(&signers, HUB_PINS_NAMESPACE, &bytes, &signed.signature, now)
            .map_err(|e| e.to_string())?;
        Ok((doc, bytes, signer.fingerprint().to_owned()))
    }

    /// The configured pins and `signed`, as one set.
    fn union(&self, signed: &[Pin]) -> Vec<Pin> {
        let mut all = self.configured.clone();
        all.extend(signed.iter().cloned());
        all
    }

    fn check_room(&self, signed: &[Pin]) -> Result<(), String> {
        let mut all = self.union(signed);
        all.sort();
        all.dedup();
        if all.len() > bosun_pin::MAX_PINS {
            return Err(format!(
                "{} pins with the configured ones, more than {}",
                all.len(),
                bosun_pin::MAX_PINS
            ));
        }
        Ok(())
    }

    /// Trusts the configured pins and `signed` from the next handshake on.
    fn trust(&self, signed: &[Pin]) -> Result<(), String> {
        self.set
            .replace(self.union(signed))
            .map_err(|e| e.to_string())
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

/// Why a signed set was not taken.
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    /// It was refused.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// It could not be journaled (and is not trusted).
    #[error("journaling the operator's signed hub pins")]
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
