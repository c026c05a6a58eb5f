//! The key the hub serves and the pins it announces, kept in step with the store's rotation
//! (`store::hub_keys`) by [`run`]: every [`CHECK_INTERVAL`] the hub reads which key is active
//! and which are announced; when another process (`bosun-hubd cert rotate activate`, or a
//! replica's operator) made a new key active, the hub serves it from the next handshake on,
//! without a restart and without dropping the connections open under the old one.

use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use parking_lot::RwLock;

use crate::Hub;
use crate::store::hub_keys::{Announced, KeyMaterial, SignedPins};
use crate::tls::{ServerIdentity, TlsError};
use bosun_proto::signed::SignedDocument;

/// How often the hub looks for a change of its keys.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// What the hub presents now.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Presented {
    fingerprint: String,
    key_pin: String,
}

/// The served key, shared by every listener, the announced pins and the operator's signed pin
/// set.
#[derive(Debug)]
pub(crate) struct ServedKey {
    tls: RustlsConfig,
    presented: RwLock<Presented>,
    announced: RwLock<Arc<Vec<String>>>,
    signed: RwLock<Option<Arc<SignedPins>>>,
}

impl ServedKey {
    /// Serves `identity`, announcing `announced`.
    pub(crate) fn new(identity: &ServerIdentity, announced: &Announced) -> Self {
        Self {
            tls: RustlsConfig::from_config(identity.config.clone()),
            presented: RwLock::new(Presented {
                fingerprint: identity.fingerprint.clone(),
                key_pin: identity.key_pin.clone(),
            }),
            announced: RwLock::new(Arc::new(announced.pins.clone())),
            signed: RwLock::new(announced.signed.clone().map(Arc::new)),
        }
    }

    /// The TLS configuration every listener serves (a new key replaces it in place).
    pub(crate) fn tls(&self) -> RustlsConfig {
        self.tls.clone()
    }

    /// SHA-256 of the served certificate.
    pub(crate) fn fingerprint(&self) -> String {
        self.presented.read().fingerprint.clone()
    }

    /// The served key's pin.
    pub(crate) fn key_pin(&self) -> String {
        self.presented.read().key_pin.clone()
    }

    /// The pins agents are told to trust (empty before the first rotation).
    pub(crate) fn announced(&self) -> Vec<String> {
        self.announced.read().as_ref().clone()
    }

    /// The operator's signed pin set, as poll answers carry it.
    pub(crate) fn signed(&self) -> Option<SignedDocument> {
        self.signed
            .read()
            .as_ref()
            .map(|pins| SignedDocument::new(&pins.document, &pins.signature))
    }

    /// Whether the store's active key is not the one served.
    pub(crate) fn behind(&self, store: &Announced) -> bool {
        store
            .active
            .as_ref()
            .is_some_and(|active| *active != self.presented.read().key_pin)
    }

    /// Follows the store: announces its pins, and serves `material`, its active key, when
    /// the hub is [`behind`](Self::behind). Returns the pin switched to, if any.
    pub(crate) fn follow(
        &self,
        store: &Announced,
        material: Option<KeyMaterial>,
    ) -> Result<Option<String>, TlsError> {
        if self.announced.read().as_slice() != store.pins.as_slice() {
            *self.announced.write() = Arc::new(store.pins.clone());
        }
        if self.signed.read().as_deref() != store.signed.as_ref() {
            *self.signed.write() = store.signed.clone().map(Arc::new);
        }
        let Some(material) = material.filter(|_| self.behind(store)) else {
            return Ok(None);
        };
        let identity = crate::tls::from_material(&material)?;
        self.tls.reload_from_config(identity.config.clone());
        *self.presented.write() = Presented {
            fingerprint: identity.fingerprint,
            key_pin: identity.key_pin.clone(),
        };
        Ok(Some(identity.key_pin))
    }
}

/// Why the hub could not follow the store's keys.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The store could not be read.
    #[error("reading the hub's keys")]
    Store(#[source] crate::store::StoreError),
    /// The stored active key cannot be served.
    #[error("the stored active key cannot be served")]
    Tls(#[source] TlsError),
}

/// Follows the store's keys until the hub stops.
pub(crate) async fn run(hub: Hub) {
    let mut ticks = tokio::time::interval(CHECK_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = hub.shutdown_token().cancelled() => return,
            _ = ticks.tick() => {}
        }
        match follow_once(&hub).await {
            Ok(Some(pin)) => tracing::info!(key_pin = %pin, "serving the hub's new key"),
            Ok(None) => {}
            Err(err) => tracing::warn!(
                error = %bosun_errchain::error_chain(&err),
                "cannot follow the hub's key rotation; serving the key as before"
            ),
        }
    }
}

/// One look at the store's keys; the private key is read only when the hub is behind.
async fn follow_once(hub: &Hub) -> Result<Option<String>, FollowError> {
    let announced = hub
        .store_call(|store| store.announced_hub_keys())
        .await
        .map_err(FollowError::Store)?;
    let material = if hub.served_key().behind(&announced) {
        hub.store_call(|store| store.active_hub_key())
            .await
            .map_err(FollowError::Store)?
    } else {
        None
    };
    hub.served_key()
        .follow(&announced, material)
        .map_err(FollowError::Tls)
}
