//! `bosun-hubd cert`: the hub's key rotation, run beside a serving hub (or with none running)
//! against its store. The store is the one record of the rotation: every serving replica reads
//! it within two seconds, announces the staged key to its agents, and serves the active one.
//!
//! 1. `stage` makes a new key (or takes an operator's) and records it as staged; the first
//!    rotation records the key the hub serves from its files as the active one first.
//! 2. Agents learn the staged key's pin from their next poll answer, journal it and say so in
//!    the poll after; `status` counts the live hosts that hold it.
//! 3. `activate` serves the staged key, once every live host holds it (`--force` otherwise);
//!    the old key keeps being announced, so an agent that has not polled since still trusts
//!    the hub on its next poll.
//! 4. `retire` stops announcing the old key and drops its private key. Hosts that never
//!    learned the new key (offline through the whole rotation) are listed: they refuse the
//!    hub's new key, as they must, and have to be enrolled again.
//!
//! Agents take a key only on the operator's word (decision 0049): `stage` (and `retire`, and
//! `document` at any time) writes the unsigned `bosun.hub-pins/v1` naming the keys to trust
//! and the next serial; the operator signs it with `ssh-keygen -Y sign -n bosun-policy@v1`
//! and `publish` stores the signed bytes, which every replica carries in its poll answers. The
//! hub never signs: agents learn the staged key once the operator published the set naming it.

use std::path::Path;

use bosun_proto::hub_pins::{HUB_PINS_SCHEMA, HubPinsDocument, MAX_HUB_PINS_DOCUMENT};
use bosun_proto::signed::MAX_SIGNATURE;
use uuid::Uuid;

use crate::clock::{Clock as _, SystemClock};
use crate::store::hub_keys::{KeyRotation, SignedPins};
use crate::{HubConfig, HubError, tls};

/// Why a pin set could not be written or published.
#[derive(Debug, thiserror::Error)]
pub enum PinSetError {
    /// The document could not be written or read.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The document is not a pin set agents would take.
    #[error("the document is not a bosun.hub-pins/v1 agents would take: {reason}")]
    Invalid {
        /// Why.
        reason: String,
    },
    /// The signature is not an armored SSH signature.
    #[error(
        "the signature is not an armored SSH signature (ssh-keygen -Y sign -n bosun-policy@v1)"
    )]
    NotASignature,
    /// The hub's store or key.
    #[error("reading the hub's keys")]
    Hub(#[source] Box<HubError>),
}

/// Where a staged key comes from.
#[derive(Debug)]
pub enum NewKey<'a> {
    /// A new self-signed certificate for these names (`localhost` and `127.0.0.1` added).
    SelfSigned(Vec<String>),
    /// An operator's certificate chain and key files.
    Files {
        /// The chain, leaf first (PEM).
        cert: &'a Path,
        /// Its private key (PEM).
        key: &'a Path,
    },
}

fn open(config: &HubConfig) -> Result<std::sync::Arc<dyn crate::store::Store>, HubError> {
    config.store.open(&config.data_dir).map_err(HubError::Store)
}

/// The rotation as it stands, and the key the hub's files hold.
pub fn status(config: &HubConfig) -> Result<(KeyRotation, String), HubError> {
    let store = open(config)?;
    let rotation = store.key_rotation().map_err(HubError::Store)?;
    let files = tls::load(&config.tls, &config.data_dir).map_err(HubError::Tls)?;
    Ok((rotation, files.key_pin))
}

/// Stages a new key; returns its pin.
pub fn stage(config: &HubConfig, new: NewKey<'_>) -> Result<String, HubError> {
    let store = open(config)?;
    let serving = tls::material(&config.tls, &config.data_dir).map_err(HubError::Tls)?;
    let next = match new {
        NewKey::SelfSigned(mut names) => {
            names.extend(["localhost".to_owned(), "127.0.0.1".to_owned()]);
            names.sort();
            names.dedup();
            tls::generate(names).map_err(HubError::Tls)?
        }
        NewKey::Files { cert, key } => tls::material(
            &tls::TlsSource::Files {
                cert: cert.to_owned(),
                key: key.to_owned(),
            },
            &config.data_dir,
        )
        .map_err(HubError::Tls)?,
    };
    let pin = next.pin.clone();
    store
        .stage_hub_key(&serving, &next, SystemClock.now_ms())
        .map_err(HubError::Store)?;
    Ok(pin)
}

/// Serves the staged key; returns its pin.
pub fn activate(config: &HubConfig, force: bool) -> Result<String, HubError> {
    open(config)?
        .activate_hub_key(force, SystemClock.now_ms())
        .map_err(HubError::Store)
}

/// Retires the old key; returns the rotation after it.
pub fn retire(config: &HubConfig) -> Result<KeyRotation, HubError> {
    open(config)?
        .retire_hub_key(SystemClock.now_ms())
        .map_err(HubError::Store)
}

/// The unsigned pin set naming the keys the hub announces now (staged, active and retiring; the
/// key of its files before any rotation), under the serial after the published one, for `host`
/// or the whole fleet.
pub fn pins_document(config: &HubConfig, host: Option<Uuid>) -> Result<HubPinsDocument, HubError> {
    let store = open(config)?;
    let announced = store.announced_hub_keys().map_err(HubError::Store)?;
    let pins = if announced.pins.is_empty() {
        vec![
            tls::load(&config.tls, &config.data_dir)
                .map_err(HubError::Tls)?
                .key_pin,
        ]
    } else {
        announced.pins
    };
    Ok(HubPinsDocument {
        schema: HUB_PINS_SCHEMA.to_owned(),
        serial: announced.signed.map_or(0, |s| s.serial) + 1,
        issued_at: jiff::Timestamp::from_millisecond(SystemClock.now_ms())
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        host_id: host,
        pins,
    })
}

/// Writes [`pins_document`] to `path` (pretty JSON, the exact bytes the operator signs).
pub fn write_pins_document(
    config: &HubConfig,
    host: Option<Uuid>,
    path: &Path,
) -> Result<HubPinsDocument, PinSetError> {
    let doc = pins_document(config, host).map_err(|e| PinSetError::Hub(Box::new(e)))?;
    let mut bytes = serde_json::to_vec_pretty(&doc).map_err(|e| PinSetError::Invalid {
        reason: e.to_string(),
    })?;
    bytes.push(b'\n');
    std::fs::write(path, bytes).map_err(|source| PinSetError::Io {
        what: "writing",
        path: path.to_owned(),
        source,
    })?;
    Ok(doc)
}

/// Publishes the operator's signed pin set: `document` as signed, `signature` the armored
/// `ssh-keygen -Y sign -n bosun-policy@v1` output. The hub checks it is a pin set agents would
/// decode and that its serial rises; the signature itself only agents can judge (against their
/// `allowed_signers`). Returns the serial.
pub fn publish(config: &HubConfig, document: &[u8], signature: &str) -> Result<u64, PinSetError> {
    if document.len() > MAX_HUB_PINS_DOCUMENT {
        return Err(PinSetError::Invalid {
            reason: format!("longer than {MAX_HUB_PINS_DOCUMENT} bytes"),
        });
    }
    let doc = bosun_proto::signed::SignedDocument::new(document, signature)
        .hub_pins()
        .map_err(|e| PinSetError::Invalid {
            reason: e.to_string(),
        })?;
    let armored = signature.trim();
    if armored.len() > MAX_SIGNATURE
        || !armored.starts_with("-----BEGIN SSH SIGNATURE-----")
        || !armored.ends_with("-----END SSH SIGNATURE-----")
    {
        return Err(PinSetError::NotASignature);
    }
    let store = open(config).map_err(|e| PinSetError::Hub(Box::new(e)))?;
    store
        .publish_hub_pins(
            &SignedPins {
                serial: doc.serial,
                document: document.to_vec(),
                signature: signature.to_owned(),
            },
            SystemClock.now_ms(),
        )
        .map_err(|e| PinSetError::Hub(Box::new(HubError::Store(e))))?;
    Ok(doc.serial)
}
