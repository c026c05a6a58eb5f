//! The hub's settings, as `serve` and the tests hand them to [`crate::Hub::open`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::{alerts, deadman, store, tls};

/// Hub settings.
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// Data directory (database, self-signed certificate).
    pub data_dir: PathBuf,
    /// Address [`run`](crate::run()) serves the agent API on (and everything else when `admin_listen` is
    /// `None`).
    pub listen: SocketAddr,
    /// Address [`run`](crate::run()) serves the admin API, dashboard and metrics on, when they are kept
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
    /// The time a request body has to arrive whole (an artifact upload has its own).
    pub body_timeout: Duration,
    /// How long a connection is kept without a request in flight: after its last answer, and
    /// from the first byte of a request head to its end.
    pub connection_timeouts: bosun_httpkit::conn::Timeouts,
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
            body_timeout: Duration::from_secs(30),
            connection_timeouts: crate::hub::conn_cap::TIMEOUTS,
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
