//! `bosun-hubd`: the hub. It holds desired state per host, queues operator-signed jobs it
//! cannot forge, stores escrow blobs it cannot open, and notices when a box goes silent.
//! Boxes always call the hub, never the other way round.
//!
//! ```text
//!  agents ──TLS──► axum router ──► api::agent ─┐        ┌─► HostSignals (watch per host)
//!  bosunctl ─TLS─►   (request ids,  api::admin ─┼─► Hub ─┤      wakes held long-polls
//!                    body limit)               │        ├─► Store (SQLite, blocking pool)
//!                                              │        └─► AlertSink ─► log, /metrics,
//!  sweeper_task (every sweep_interval) ────────┘                 └─mpsc─► webhook_task
//!    (dead-man's switch; backup sweep of the hosts due: overdue backups and restore tests)
//!  polls and sweeps judge the merged report and desired state: report_alerts (storage_lost,
//!    backup_failed, backup_overdue, restore_test_failed, restore_test_overdue,
//!    escrow_missing, the last also judged by an escrow PUT), opened and resolved in the
//!    store, history in the event log; each opening and recovery is an alert like any other,
//!    delivered through AlertSink; audit entries a poll carries raise golden_refused and
//!    guest_restored once each (report_alerts::audit)
//!  api::agent::enroll with a restore-mode token: a new box takes over a revoked host's id
//!    (Store::enroll; the host-key cache forgets the old key, the poll's transaction checks
//!    the key again)
//!  watchdog_task (WATCHDOG_USEC / 2): a store read, then WATCHDOG=1 to systemd
//!  api::agent::poll ─mpsc─► poll_writer_task (one thread, group commit) ─► Store
//!  flush_task (every second, and once after serving): makes durable the heartbeats the
//!    poll writer committed without waiting for the disk
//! ```
//!
//! [`run`] binds the configured address; tests use [`Hub::open`] + [`Hub::serve`] with a
//! port-0 listener and a [`clock::ManualClock`].

pub mod actor;
pub mod alerts;
pub mod api;
pub mod auth_limit;
pub mod cert;
pub mod cli;
pub mod clock;
pub mod config_file;
pub mod config_page;
pub mod deadman;
pub mod flush_task;
pub mod hub;
pub mod hub_backup;
pub mod metrics;
pub mod poll_writer_task;
pub mod report_alerts;
pub mod secret;
mod served_key;
pub mod signals;
pub mod store;
pub mod sweeper_task;
pub mod tls;
pub mod ui;
pub mod watchdog_task;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bosun_proto::secret::SecretToken;

pub use crate::hub::Hub;
use crate::store::StoreError;

/// Hub settings.
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// Data directory (database, self-signed certificate).
    pub data_dir: PathBuf,
    /// Address [`run`] serves the agent API on (and everything else when `admin_listen` is
    /// `None`).
    pub listen: SocketAddr,
    /// Address [`run`] serves the admin API, dashboard and metrics on, when they are kept
    /// off the agents' address.
    pub admin_listen: Option<SocketAddr>,
    /// Certificate source.
    pub tls: tls::TlsSource,
    /// Poll interval given to newly enrolled hosts.
    pub poll_interval: Duration,
    /// The `wait` agents are told to use.
    pub long_poll: Duration,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Dead-man's switch.
    pub dead_man: deadman::DeadManConfig,
    /// Optional alert webhook.
    pub webhook: Option<alerts::WebhookConfig>,
    /// The daily window in which agents may update themselves (given in the poll config;
    /// `None`: only a signed job with `override_window` updates an agent).
    pub update_window: Option<bosun_proto::poll::UpdateWindow>,
    /// Where the hub's state is: SQLite in the data directory (the default), or PostgreSQL
    /// shared by any number of replicas.
    pub store: store::StoreLocation,
    /// The migrations the hub brings to a PostgreSQL store (its own; see
    /// [`store::postgres::schema::PgSchema`]).
    pub pg_schema: store::postgres::schema::PgSchema,
    /// How long the hub keeps its audit trail, events, alert history, finished jobs,
    /// idempotency keys and spent enrollment tokens.
    pub retention: store::RetentionConfig,
    /// How long a host's key lives: when it is rotated, when it is refused.
    pub host_keys: store::host_key_rotation::KeyLifetime,
}

impl HubConfig {
    /// Defaults for a data directory and listen address.
    pub fn new(data_dir: impl Into<PathBuf>, listen: SocketAddr) -> Self {
        Self {
            data_dir: data_dir.into(),
            listen,
            admin_listen: None,
            tls: tls::TlsSource::SelfSigned,
            poll_interval: Duration::from_secs(30),
            long_poll: Duration::from_secs(25),
            max_body_bytes: 1024 * 1024,
            dead_man: deadman::DeadManConfig::default(),
            webhook: None,
            update_window: None,
            store: store::StoreLocation::Sqlite,
            pg_schema: store::postgres::schema::PgSchema::default(),
            retention: store::RetentionConfig::default(),
            host_keys: store::host_key_rotation::KeyLifetime::default(),
        }
    }
}

/// Errors starting or running the hub.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// Creating the data directory failed.
    #[error("creating data directory {path}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The store failed.
    #[error("hub store")]
    Store(#[source] StoreError),
    /// TLS setup failed.
    #[error("hub TLS")]
    Tls(#[source] tls::TlsError),
    /// Binding or serving the listener failed.
    #[error("serving on {addr}")]
    Serve {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Building the webhook client failed.
    #[error("building the webhook HTTP client")]
    WebhookClient(#[source] reqwest::Error),
    /// A blocking task panicked or was cancelled.
    #[error("blocking task for {what} failed")]
    Blocking {
        /// What it was doing.
        what: &'static str,
        /// Why.
        #[source]
        source: tokio::task::JoinError,
    },
}

/// Installs the ring crypto provider as the process default (idempotent).
pub fn install_crypto_provider() {
    // A second call finds a provider already installed; that is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// What `init` created.
#[derive(Debug)]
pub struct InitReport {
    /// The admin token, shown once.
    pub admin_token: SecretToken,
    /// Fingerprint of the generated self-signed certificate (when no operator certificate).
    pub fingerprint: Option<String>,
    /// The key pin of that certificate (`spki:…`), which outlives a renewal of the same key.
    pub key_pin: Option<String>,
    /// The database file.
    pub database: PathBuf,
}

/// Creates the database, the admin token and (unless `operator_cert`) a self-signed
/// certificate for `names`. Fails if the hub is already initialized.
pub fn init(
    data_dir: &Path,
    names: Vec<String>,
    operator_cert: bool,
) -> Result<InitReport, HubError> {
    init_store(
        data_dir,
        names,
        operator_cert,
        &store::StoreLocation::Sqlite,
    )
}

/// [`init`] with the state kept in `store` (the data directory still holds the certificate,
/// which every replica of a PostgreSQL-backed hub serves).
pub fn init_store(
    data_dir: &Path,
    names: Vec<String>,
    operator_cert: bool,
    location: &store::StoreLocation,
) -> Result<InitReport, HubError> {
    std::fs::create_dir_all(data_dir).map_err(|source| HubError::DataDir {
        path: data_dir.to_owned(),
        source,
    })?;
    // The certificate first: the admin token is the commit point, so a failure before it
    // leaves a directory `init` can simply be run on again.
    let pins = if operator_cert {
        None
    } else {
        let (cert, _) = tls::self_signed_paths(data_dir);
        if !cert.exists() {
            tls::create_self_signed(data_dir, names).map_err(HubError::Tls)?;
        }
        let identity = tls::load(&tls::TlsSource::SelfSigned, data_dir).map_err(HubError::Tls)?;
        Some((identity.fingerprint, identity.key_pin))
    };
    let (admin_token, hash) = secret::mint(secret::SecretKind::Operator);
    // On a thread of its own: `init` may be called from async code, and the PostgreSQL store
    // blocks on a runtime of its own.
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let store = location.open(data_dir)?;
                store.init_admin(hash, jiff::Timestamp::now().as_millisecond())
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
    .map_err(HubError::Store)?;
    let (fingerprint, key_pin) = pins.unzip();
    Ok(InitReport {
        admin_token,
        fingerprint,
        key_pin,
        database: PathBuf::from(location.describe(data_dir)),
    })
}

/// Runs the hub on `config.listen` (and `config.admin_listen`) until `shutdown` resolves.
pub async fn run(
    config: HubConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), HubError> {
    let bind = |addr: SocketAddr| {
        std::net::TcpListener::bind(addr).map_err(|source| HubError::Serve {
            addr: addr.to_string(),
            source,
        })
    };
    let listeners = hub::Listeners {
        agent: bind(config.listen)?,
        admin: config.admin_listen.map(bind).transpose()?,
    };
    let hub = Hub::open(config, Arc::new(clock::SystemClock)).await?;
    tracing::info!(fingerprint = hub.fingerprint(), "tls certificate");
    notify_systemd(sd_notify::NotifyState::Ready);
    let outcome = hub.serve(listeners, shutdown).await;
    notify_systemd(sd_notify::NotifyState::Stopping);
    outcome
}

/// Tells systemd about a state change when running under it (`NOTIFY_SOCKET` set).
fn notify_systemd(state: sd_notify::NotifyState<'_>) {
    if std::env::var_os("NOTIFY_SOCKET").is_some()
        && let Err(err) = sd_notify::notify(&[state])
    {
        tracing::warn!(error = %err, "could not notify systemd");
    }
}
