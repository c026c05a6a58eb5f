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

use std::path::Path;

use crate::clock::{Clock as _, SystemClock};
use crate::store::hub_keys::KeyRotation;
use crate::{HubConfig, HubError, tls};

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
