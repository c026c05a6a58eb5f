//! The running hub: shared state, the HTTPS server and its background tasks.

use std::sync::Arc;

use bosun_proto::admin::Alert;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::alerts::AlertSink;
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::poll_writer_task::PollWriterHandle;
use crate::secret::SecretHash;
use crate::served_key::ServedKey;
use crate::signals::HostSignals;
use crate::store::{HostCredentials, KeyMatch, Store, StoreError, WatchChange};
use crate::{HubConfig, HubError};

pub mod conn_cap;
pub mod serve;

/// A cheaply cloneable handle on the hub.
#[derive(Debug, Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: HubConfig,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    served_key: ServedKey,
    signals: Arc<HostSignals>,
    key_hashes: parking_lot::RwLock<std::collections::HashMap<uuid::Uuid, HostCredentials>>,
    poll_writer: PollWriterHandle,
    metrics: Arc<Metrics>,
    history: crate::history::History,
    alerts: AlertSink,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

impl Hub {
    /// Opens an initialized data directory and starts the webhook task (if configured).
    pub async fn open(config: HubConfig, clock: Arc<dyn Clock>) -> Result<Self, HubError> {
        crate::tls::install_crypto_provider();
        let dir = config.data_dir.clone();
        let tls_source = config.tls.clone();
        let location = config.store.clone();
        let pg_schema = config.pg_schema;
        let (store, served_key) = tokio::task::spawn_blocking(move || {
            let store = location
                .open_with(&dir, pg_schema)
                .map_err(HubError::Store)?;
            store.check_initialized().map_err(HubError::Store)?;
            let files = crate::tls::load(&tls_source, &dir).map_err(HubError::Tls)?;
            // Once a rotation recorded the hub's keys, the store's active key is served (every
            // replica the same); before, the key of the files.
            let announced = store.announced_hub_keys().map_err(HubError::Store)?;
            let identity = match store.active_hub_key().map_err(HubError::Store)? {
                Some(material) => crate::tls::from_material(&material).map_err(HubError::Tls)?,
                None => files,
            };
            let served_key = ServedKey::new(&identity, &announced);
            Ok::<_, HubError>((store, served_key))
        })
        .await
        .map_err(|source| HubError::Blocking {
            what: "open",
            source,
        })??;
        let metrics = Arc::new(Metrics::new());
        let shutdown = CancellationToken::new();
        let tasks = TaskTracker::new();
        let webhook = match &config.webhook {
            Some(webhook) => {
                // No Bosun client follows a redirect: an alert goes where the operator
                // configured it, or counts as a failed delivery.
                let client = reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .connect_timeout(std::time::Duration::from_secs(5))
                    .timeout(std::time::Duration::from_secs(15))
                    .build()
                    .map_err(HubError::WebhookClient)?;
                let (queue, rx) = mpsc::channel::<Alert>(1024);
                tasks.spawn(crate::alerts::webhook_task(
                    webhook.clone(),
                    client,
                    rx,
                    metrics.clone(),
                    shutdown.clone(),
                ));
                Some(queue)
            }
            None => None,
        };
        // Writes other replicas make wake the polls this one holds.
        let signals = Arc::new(HostSignals::default());
        let woken = signals.clone();
        store.watch_wakeups(Arc::new(move |host| match host {
            Some(host_id) => woken.notify(host_id),
            None => woken.notify_all(),
        }));
        let poll_writer =
            PollWriterHandle::spawn(store.clone()).map_err(|source| HubError::Serve {
                addr: "poll writer thread".to_owned(),
                source,
            })?;
        let history = crate::history::History::new(clock.now_ms());
        Ok(Self {
            inner: Arc::new(Inner {
                alerts: AlertSink::new(metrics.clone(), webhook),
                history,
                config,
                store,
                key_hashes: parking_lot::RwLock::default(),
                poll_writer,
                clock,
                served_key,
                signals,
                metrics,
                shutdown,
                tasks,
            }),
        })
    }

    /// The hosts' history this hub gathers and has not written yet.
    pub fn history(&self) -> &crate::history::History {
        &self.inner.history
    }

    /// SHA-256 of the served leaf certificate.
    pub fn fingerprint(&self) -> String {
        self.inner.served_key.fingerprint()
    }

    /// The served key's pin (`spki:…`).
    pub fn key_pin(&self) -> String {
        self.inner.served_key.key_pin()
    }

    /// The key pins agents are told to trust, while the hub rotates its key (empty before the
    /// first rotation).
    pub fn announced_pins(&self) -> Vec<String> {
        self.inner.served_key.announced()
    }

    /// The operator's signed pin set the hub carries in its poll answers, if one was
    /// published.
    pub fn signed_pins(&self) -> Option<bosun_proto::signed::SignedDocument> {
        self.inner.served_key.signed()
    }

    /// The served key.
    pub(crate) fn served_key(&self) -> &ServedKey {
        &self.inner.served_key
    }

    /// The configuration.
    pub fn config(&self) -> &HubConfig {
        &self.inner.config
    }

    /// The clock.
    pub fn clock(&self) -> &dyn Clock {
        self.inner.clock.as_ref()
    }

    /// Long-poll wake-ups.
    pub(crate) fn signals(&self) -> &HostSignals {
        &self.inner.signals
    }

    /// The group-commit writer for polls.
    pub(crate) fn poll_writer(&self) -> &PollWriterHandle {
        &self.inner.poll_writer
    }

    /// Which of the host's keys `presented` is (`Ok(None)`: neither); `Err(UnknownHost)`: not
    /// enrolled. A key past its lifetime is neither. Credentials are cached; a presented key
    /// that matches neither cached key is checked against the store, since a restore-mode
    /// enrollment or a key rotation (on this hub or another replica) may have changed them. A
    /// cached match can be stale the same way, so the poll's transaction checks the key again
    /// ([`crate::store::PollRecord::key_hash`]). The host's status is not cached either: the
    /// poll writer checks it in the poll's transaction.
    ///
    /// Presenting the next key completes the host's key rotation here (the old key stops
    /// authenticating), whichever request presents it first.
    pub(crate) async fn host_key_matches(
        &self,
        host_id: uuid::Uuid,
        presented: SecretHash,
    ) -> Result<Option<KeyMatch>, StoreError> {
        let now_ms = self.clock().now_ms();
        let lifetime = self.inner.config.host_keys;
        let judge = |credentials: &HostCredentials| {
            if lifetime.expired(credentials.key_issued_ms, now_ms) {
                None
            } else {
                credentials.matches(&presented)
            }
        };
        let cached = self.inner.key_hashes.read().get(&host_id).copied();
        let found = match cached.as_ref().and_then(judge) {
            Some(found) => found,
            None => {
                let credentials = self
                    .store_call(move |store| store.host_credentials(host_id))
                    .await?;
                let mut cache = self.inner.key_hashes.write();
                let Some(credentials) = credentials else {
                    cache.remove(&host_id);
                    return Err(StoreError::UnknownHost { host_id });
                };
                cache.insert(host_id, credentials);
                if lifetime.expired(credentials.key_issued_ms, now_ms) {
                    tracing::warn!(%host_id, "host key expired: the host must be enrolled again");
                }
                match judge(&credentials) {
                    Some(found) => found,
                    None => return Ok(None),
                }
            }
        };
        if found == KeyMatch::Next {
            let promoted = self
                .store_call(move |store| store.promote_host_key(host_id, presented, now_ms))
                .await?;
            self.forget_host_key(host_id);
            if !promoted {
                // Another request promoted it first, or an operator dropped it: judge again
                // against what the store holds now.
                let credentials = self
                    .store_call(move |store| store.host_credentials(host_id))
                    .await?;
                return Ok(credentials.as_ref().and_then(judge));
            }
            tracing::info!(%host_id, "host key rotated; the old key no longer authenticates");
            self.signals().notify(host_id);
        }
        Ok(Some(found))
    }

    /// Drops a host's cached credentials (its key was replaced).
    pub(crate) fn forget_host_key(&self, host_id: uuid::Uuid) {
        self.inner.key_hashes.write().remove(&host_id);
    }

    /// Metrics.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Alert delivery.
    pub(crate) fn alerts(&self) -> &AlertSink {
        &self.inner.alerts
    }

    /// Cancelled when the hub shuts down (held polls answer at once).
    pub(crate) fn shutdown_token(&self) -> &CancellationToken {
        &self.inner.shutdown
    }

    /// The background tasks the hub waits for when it stops serving.
    pub(crate) fn tasks(&self) -> &TaskTracker {
        &self.inner.tasks
    }

    /// Runs `f` against the store on the blocking pool, as the operator token the calling
    /// task acts for ([`crate::actor`]), if any.
    pub async fn store_call<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&dyn Store) -> Result<R, StoreError> + Send + 'static,
    {
        let store = self.inner.store.clone();
        let actor = crate::actor::current();
        tokio::task::spawn_blocking(move || crate::actor::on_thread(actor, || f(store.as_ref())))
            .await
            .map_err(|source| StoreError::Worker { source })?
    }

    /// Runs one dead-man's-switch sweep now and delivers its alerts.
    pub async fn sweep_once(&self) -> Result<Vec<Alert>, StoreError> {
        let now_ms = self.inner.clock.now_ms();
        let config = self.inner.config.dead_man.clone();
        let alerts = self
            .store_call(move |store| store.sweep(now_ms, &config))
            .await?;
        for alert in &alerts {
            self.inner.alerts.raise(alert);
        }
        Ok(alerts)
    }

    /// Judges every host's stored report now for storage, backup and restore-test alerts
    /// (backups and restore tests turn overdue on the hub's clock) and delivers what changed.
    pub async fn sweep_backups_once(&self) -> Result<Vec<WatchChange>, StoreError> {
        let now_ms = self.inner.clock.now_ms();
        let changes = self
            .store_call(move |store| store.sweep_backups(now_ms))
            .await?;
        for change in &changes {
            self.inner.alerts.watch(change);
        }
        Ok(changes)
    }

    /// One step of a retention prune ([`crate::store::retention`]) from `from`, at most about
    /// [`PRUNE_STEP`](crate::store::retention::PRUNE_STEP); says where the pass goes on.
    pub async fn prune_step(
        &self,
        from: crate::store::PruneCursor,
    ) -> Result<crate::store::PruneStep, StoreError> {
        let now_ms = self.inner.clock.now_ms();
        let config = self.inner.config.retention;
        let step = self
            .store_call(move |store| {
                store.prune(now_ms, &config, from, crate::store::retention::PRUNE_STEP)
            })
            .await?;
        let pruned = step.pruned;
        if pruned.total() > 0 {
            tracing::info!(
                audit = pruned.audit,
                replaced_audit = pruned.replaced_audit,
                events = pruned.events,
                alerts = pruned.alerts,
                jobs = pruned.jobs,
                idempotency = pruned.idempotency,
                enroll_tokens = pruned.enroll_tokens,
                done = step.next.is_none(),
                "pruned rows past their retention bound"
            );
        }
        Ok(step)
    }

    /// A whole retention prune now, step after step.
    pub async fn prune_once(&self) -> Result<crate::store::Pruned, StoreError> {
        let mut pruned = crate::store::Pruned::default();
        let mut from = crate::store::PruneCursor::default();
        loop {
            let step = self.prune_step(from).await?;
            pruned.absorb(step.pruned);
            match step.next {
                Some(next) => from = next,
                None => return Ok(pruned),
            }
        }
    }
}
