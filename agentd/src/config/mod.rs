//! The agent's configuration file, `/etc/bosun/agent.toml` by default.
//!
//! ```toml
//! state_dir = "/var/lib/bosun"
//! allowed_signers = "/etc/bosun/allowed_signers"
//!
//! [hub]
//! url = "https://hub.example:7443"
//! fingerprint = "…64 hex digits…"          # printed by `bosun-hubd init`
//! enrollment_token_file = "/etc/bosun/enroll-token"   # first start only
//!
//! [pve]
//! url = "https://127.0.0.1:8006/api2/json"
//! node = "pve"
//! token_id = "bosun@pve!agent"
//! token_secret_file = "/etc/bosun/pve-token"
//! fingerprint = "AB:CD:…"                   # or ca_file = "/etc/pve/pve-root-ca.pem"
//! storage = "local-lvm"                     # where provisioned guests' volumes go
//!
//! [helper]                                  # absent: no guest bootstraps
//! transport = "socket"                      # or "sudo"
//! socket = "/run/bosun/helper.sock"
//!
//! [local_api]                               # absent or enabled = false: not served
//! bind = "10.0.0.1"                         # the guests' bridge address
//! port = 8443                               # 0 picks a free port (tests)
//! max_body_bytes = 16384                    # larger request bodies get 413 (1 KiB–1 MiB)
//! rate_per_s = 20                           # sustained requests per second per token
//! burst = 40                                # requests at once before the rate applies
//! shutdown_grace_ms = 5000                  # in-flight requests' time to finish on stop
//! max_connections = 512                     # open connections in all (1–4096)
//! max_connections_per_peer = 32             # open connections per guest address
//! max_connections_per_guest = 32            # per guest, over all its addresses
//! max_unattributed_connections = 64         # from addresses no guest is known by, in all
//! handshake_timeout_ms = 10000              # TLS handshake (100 ms–300 s, like all below)
//! header_read_timeout_ms = 10000            # a request head, from its first byte
//! idle_timeout_ms = 30000                   # no request in flight and nothing received
//! body_timeout_ms = 10000                   # a request body, in full (408 after)
//!
//! [metrics]                                 # absent or enabled = false: not served
//! listen = "127.0.0.1:9101"                 # plain HTTP; never a wildcard or the local api's bind
//!
//! [backup]
//! storage = "local"                         # the first tier's storage when the policy names no target
//! mount_root = "/var/lib/bosun-helper/mnt"  # where the helper mounts USB targets (its own mount_root)
//! watch_interval_ms = 1000                  # how often storage targets are looked at (200–5000)
//! min_interval_seconds = 900                # before a signed data plan: the least time between
//!                                           # two scheduled backups of a guest (10–604800)
//! storage_call_timeout_ms = 5000            # the longest one Proxmox call of the storage watcher may take (500–30000)
//! restore_test_stay_up_ms = 30000           # a scratch guest must stay running this long (1 s–10 min)
//! restore_test_min_free_mib = 1024          # memory kept free beyond a scratch guest's own
//! restore_test_max_tasks = 8                # no restore test while the node runs this many tasks (1–64)
//! restore_test_minute_ms = 60000            # one minute of the policy's timeout (100–60000; tests shorten it)
//!
//! [storage]
//! local_dir_roots = ["/srv/bosun"]          # where local-dir targets may live (default: none allowed)
//!
//! [bootstrap]                               # what bootstrap.json tells guests
//! hub_url = "https://hub.example:7443"      # default: hub.url
//! hub_fingerprint = "…64 hex digits…"       # default: hub.fingerprint
//!
//! [poll]
//! long_poll_seconds = 25
//! backoff_initial_ms = 1000
//! backoff_max_ms = 60000
//! report_min_interval_ms = 5000
//! pending_interval_ms = 60000               # polls while the hub awaits an operator's approval (1 s–5 min)
//! host_key_rotation_min_seconds = 3600      # at most one host-key rotation this often (≥ 10 s, and ≥ 10 poll intervals)
//!
//! [reconcile]
//! interval_seconds = 30
//! max_parallel = 8
//! swap_mib = 512
//! restart_attempts = 5
//!
//! [controller]                              # rollouts and healing: crate::config::controller
//! health_window_ms = 300000
//!
//! [health]                                  # thresholds, SMART disks (see crate::config::health)
//! cpu_high_percent = 90
//! smart_devices = ["/dev/sda"]
//!
//! [tunnel]                                  # absent: no tunnel watched
//! readiness_url = "http://127.0.0.1:20241/ready"
//!
//! [golden]                                  # see crate::config::golden
//! builder_vmid = 9000
//! storage = "local"                         # default: backup.storage
//!
//! [update]                                  # agent self-update (needs [helper])
//! slots_root = "/var/lib/bosun-helper/slots" # the helper's slots_root; the gate's record is read here
//!
//! [break_glass]                             # what break-glass sessions ran (decision 0035)
//! spool = "/var/lib/bosun-breakglass/commands.jsonl"
//! scan_interval_seconds = 10                # 1 s to 5 min, where the spool's directory
//!                                           # cannot be watched (read when it changes otherwise)
//! ```
//!
//! Secrets are read from files named here, never written in the file itself,
//! and are held as [`SecretString`].

pub mod controller;
pub mod error;
pub mod golden;
pub mod health;
pub mod local_api;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_pve::PveSettings;
use secrecy::SecretString;
use serde::Deserialize;
use url::Url;

pub use error::ConfigError;

use crate::links::helper::{DEFAULT_SOCKET, DEFAULT_SUDO, HelperTransport};

/// Where the agent looks for its configuration by default.
pub const DEFAULT_PATH: &str = "/etc/bosun/agent.toml";

/// The least time between two reports an observed change prompts (`[poll]
/// report_min_interval_ms`) when the file names none: actions still report at once.
pub const DEFAULT_REPORT_MIN_INTERVAL: Duration = Duration::from_secs(5);

/// The pause between polls while the hub says the host waits for an operator's approval
/// (`[poll] pending_interval_ms`) when the file names none.
pub const DEFAULT_PENDING_INTERVAL: Duration = Duration::from_secs(60);

/// The least time between two host-key rotations (`[poll] host_key_rotation_min_seconds`) when
/// the file names none: however often the hub asks, a host rotates its key at most once an
/// hour (decision 0044).
pub const DEFAULT_HOST_KEY_ROTATION_MIN: Duration = Duration::from_secs(3600);

/// The least `[poll] host_key_rotation_min_seconds` accepted: ten of the shortest poll interval
/// a hub may set. The agent also never rotates more often than ten of the hub's current poll
/// intervals, whatever is configured.
pub const HOST_KEY_ROTATION_MIN_FLOOR: Duration = Duration::from_secs(10);

/// The range `[poll] pending_interval_ms` must be in: slow enough to spare a hub full of
/// unapproved boxes, never slower than the longest poll interval a hub may set
/// (`MAX_POLL_INTERVAL_SECONDS`, five minutes).
pub const PENDING_INTERVAL_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(300);

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Journal, host identity, local API certificate.
    pub state_dir: PathBuf,
    /// The operators' OpenSSH `allowed_signers` file.
    pub allowed_signers: PathBuf,
    /// The hub.
    pub hub: HubSettings,
    /// How to reach Proxmox VE (`[pve]`).
    pub pve: PveSettings,
    /// `pve.storage`: the storage provisioned guests' volumes go to.
    pub guest_storage: String,
    /// How to reach `bosun-helper`; `None` leaves provisioning at the front half.
    pub helper: Option<HelperTransport>,
    /// Where the local API listens; `None` when it is not served.
    pub local_api: Option<LocalApiSettings>,
    /// Where `/metrics` is served; `None` when it is not.
    pub metrics: Option<MetricsSettings>,
    /// Backups taken through the local API.
    pub backup: BackupSettings,
    /// Where storage targets may live.
    pub storage: StorageSettings,
    /// The hub endpoint written into guests' `bootstrap.json`.
    pub bootstrap_hub: BootstrapHub,
    /// Polling and reporting.
    pub poll: PollSettings,
    /// Reconciling.
    pub reconcile: ReconcileSettings,
    /// Controller rollouts and healing.
    pub controller: crate::config::controller::ControllerSettings,
    /// Host-health sampling and thresholds.
    pub health: crate::config::health::HealthSettings,
    /// The tunnel's readiness endpoint, when one is watched.
    pub tunnel: Option<crate::config::health::TunnelSettings>,
    /// How the helper builds golden images for signed recipes (`[golden]`).
    pub golden: crate::config::golden::GoldenSettings,
    /// Where the A/B slots and the update record are (the helper's `slots_root`).
    pub slots_root: PathBuf,
    /// The break-glass support shell's spool, read into the audit trail.
    pub break_glass_spool: PathBuf,
    /// How often the spool is read where its directory cannot be watched.
    pub break_glass_scan_interval: Duration,
}

/// The hub.
#[derive(Debug, Clone)]
pub struct HubSettings {
    /// Base URL, `https://host:port`.
    pub url: Url,
    /// How the hub is trusted: by the configured pins (`fingerprint` and `pins`), or by a CA
    /// and the hub's name, optionally and those pins.
    pub trust: bosun_pin::Trust,
    /// The configured pins, `fingerprint` first (empty: the CA alone decides). The agent
    /// replaces them with the keys the hub announces while it rotates its key, and goes back
    /// to them when they are changed here.
    pub pins: Vec<bosun_pin::Pin>,
    /// A one-time enrollment token, when the agent has not enrolled yet.
    pub enrollment_token: Option<SecretString>,
}

/// Where the local API listens, and its limits.
#[derive(Debug, Clone, Copy)]
pub struct LocalApiSettings {
    /// The bridge IP.
    pub bind: IpAddr,
    /// The port.
    pub port: u16,
    /// Largest request body accepted (413 above).
    pub max_body_bytes: usize,
    /// Sustained requests per second per token.
    pub rate_per_s: u32,
    /// Requests a token may send at once before the rate applies.
    pub burst: u32,
    /// How long in-flight requests get to finish on shutdown.
    pub shutdown_grace: Duration,
    /// Connection caps and timeouts.
    pub connections: crate::config::local_api::ConnectionLimits,
}

/// Where the agent serves `/metrics` (plain HTTP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsSettings {
    /// The address: loopback by default; a management address if a Prometheus elsewhere
    /// scrapes the host. Never a wildcard and never the local API's bridge address, which
    /// guests reach.
    pub listen: SocketAddr,
}

/// Default of `metrics.listen`.
pub const DEFAULT_METRICS_LISTEN: SocketAddr =
    SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9101);

/// Largest `local_api.max_connections`; `LimitNOFILE` in `bosun-agentd.service` leaves room
/// above it for the journal, Proxmox, hub and helper sockets.
pub const MAX_LOCAL_API_CONNECTIONS: usize = 4096;

/// Default of `local_api.max_body_bytes`.
pub const DEFAULT_LOCAL_API_BODY_BYTES: usize = 16 * 1024;
/// Default of `local_api.rate_per_s`.
pub const DEFAULT_LOCAL_API_RATE: u32 = 20;
/// Default of `local_api.burst`.
pub const DEFAULT_LOCAL_API_BURST: u32 = 40;
/// Default of `local_api.shutdown_grace_ms`.
pub const DEFAULT_LOCAL_API_GRACE_MS: u64 = 5000;

/// Backups taken through the local API.
#[derive(Debug, Clone)]
pub struct BackupSettings {
    /// The Proxmox storage vzdump writes to.
    pub storage: String,
    /// Where the helper mounts USB targets (`<mount_root>/<storage id>`).
    pub mount_root: PathBuf,
    /// How often storage targets are looked at.
    pub watch_interval: Duration,
    /// Before a signed data plan sets its own: the least time between two scheduled backups
    /// of one guest on one tier, in seconds.
    pub min_interval_seconds: u32,
    /// The longest one Proxmox call of the storage watcher may take; a target whose calls
    /// take longer is unreachable.
    pub storage_call_timeout: Duration,
    /// How long a restore test's scratch guest must stay running.
    pub restore_test_stay_up: Duration,
    /// Memory a restore test leaves free beyond its scratch guest's own, in MiB.
    pub restore_test_min_free_mib: u64,
    /// A restore test waits while the node runs this many tasks or more.
    pub restore_test_max_tasks: usize,
    /// How long one minute of the restore-test policy's timeout lasts.
    pub restore_test_minute: Duration,
}

/// Where storage targets may live on this host.
#[derive(Debug, Clone, Default)]
pub struct StorageSettings {
    /// Directories beneath which `local-dir` targets may live (none: no `local-dir` target
    /// is registered). Never `/`, a system path or inside a guest's volume
    /// ([`crate::data::storage::local_dir`]).
    pub local_dir_roots: Vec<PathBuf>,
}

/// The hub as guests see it in `bootstrap.json`.
#[derive(Debug, Clone)]
pub struct BootstrapHub {
    /// Base URL guests use.
    pub url: String,
    /// The pin guests trust the hub by: a certificate's SHA-256 (64 lowercase hex digits) or
    /// a key pin (`spki:…`).
    pub fingerprint: String,
}

/// Polling and reporting.
#[derive(Debug, Clone, Copy)]
pub struct PollSettings {
    /// The `wait` asked of the hub (the hub's own setting wins once known).
    pub long_poll: Duration,
    /// First pause after a failed poll.
    pub backoff_initial: Duration,
    /// Longest pause after failed polls.
    pub backoff_max: Duration,
    /// At most one unprompted report this often.
    pub report_min_interval: Duration,
    /// The pause between polls while the host waits for an operator's approval.
    pub pending_interval: Duration,
    /// The least time between two host-key rotations (the agent also waits ten of the hub's
    /// poll intervals, when that is longer).
    pub host_key_rotation_min: Duration,
}

/// Reconciling.
#[derive(Debug, Clone, Copy)]
pub struct ReconcileSettings {
    /// A full pass at least this often, even without a change.
    pub interval: Duration,
    /// Guests mutated at once.
    pub max_parallel: usize,
    /// Swap given to provisioned guests, MiB.
    pub swap_mib: u64,
    /// Failed starts before a guest is reported broken.
    pub restart_attempts: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    state_dir: PathBuf,
    allowed_signers: PathBuf,
    hub: RawHub,
    pve: RawPve,
    #[serde(default)]
    helper: Option<RawHelper>,
    #[serde(default)]
    local_api: Option<RawLocalApi>,
    #[serde(default)]
    metrics: Option<RawMetrics>,
    #[serde(default)]
    backup: RawBackup,
    #[serde(default)]
    storage: RawStorage,
    #[serde(default)]
    bootstrap: RawBootstrap,
    #[serde(default)]
    poll: RawPoll,
    #[serde(default)]
    reconcile: RawReconcile,
    #[serde(default)]
    controller: crate::config::controller::RawControllerSettings,
    #[serde(default)]
    health: crate::config::health::RawHealth,
    #[serde(default)]
    tunnel: Option<crate::config::health::RawTunnel>,
    #[serde(default)]
    golden: crate::config::golden::RawGolden,
    #[serde(default)]
    update: RawUpdate,
    #[serde(default)]
    break_glass: RawBreakGlass,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawBreakGlass {
    #[serde(default)]
    spool: Option<PathBuf>,
    #[serde(default)]
    scan_interval_seconds: Option<u64>,
}

impl RawBreakGlass {
    fn scan_interval(&self) -> Result<Duration, ConfigError> {
        match self.scan_interval_seconds {
            None => Ok(crate::trust::break_glass::spool::DEFAULT_SCAN_INTERVAL),
            Some(s @ 1..=300) => Ok(Duration::from_secs(s)),
            Some(s) => Err(invalid(
                "break_glass.scan_interval_seconds",
                format!("must be 1 to 300 seconds, not {s}"),
            )),
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawUpdate {
    #[serde(default)]
    slots_root: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHub {
    url: String,
    #[serde(default)]
    fingerprint: Option<String>,
    #[serde(default)]
    pins: Vec<String>,
    #[serde(default)]
    ca: Option<String>,
    #[serde(default)]
    enrollment_token_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPve {
    url: String,
    node: String,
    token_id: String,
    token_secret_file: PathBuf,
    #[serde(default)]
    fingerprint: Option<String>,
    #[serde(default)]
    ca_file: Option<PathBuf>,
    #[serde(default = "default_storage")]
    storage: String,
    #[serde(default)]
    fast_retries: bool,
}

fn default_storage() -> String {
    "local-lvm".to_owned()
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHelper {
    #[serde(default)]
    transport: Option<String>,
    #[serde(default)]
    socket: Option<PathBuf>,
    #[serde(default)]
    sudo: Option<PathBuf>,
    #[serde(default)]
    helper: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLocalApi {
    #[serde(default = "default_enabled")]
    enabled: bool,
    #[serde(default = "default_bind")]
    bind: IpAddr,
    #[serde(default = "default_port")]
    port: u16,
    max_body_bytes: Option<usize>,
    rate_per_s: Option<u32>,
    burst: Option<u32>,
    shutdown_grace_ms: Option<u64>,
    max_connections: Option<usize>,
    max_connections_per_peer: Option<usize>,
    max_connections_per_guest: Option<usize>,
    max_unattributed_connections: Option<usize>,
    handshake_timeout_ms: Option<u64>,
    header_read_timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    body_timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    #[serde(default = "default_enabled")]
    enabled: bool,
    #[serde(default)]
    listen: Option<SocketAddr>,
}

impl RawMetrics {
    /// The settings, refusing an address guests could reach: a wildcard (it includes the
    /// bridge) or the local API's own bridge address (unless that is loopback).
    fn settings(
        &self,
        local_api: Option<&LocalApiSettings>,
    ) -> Result<MetricsSettings, ConfigError> {
        let listen = self.listen.unwrap_or(DEFAULT_METRICS_LISTEN);
        if listen.ip().is_unspecified() {
            return Err(invalid(
                "metrics.listen",
                "must be one address (loopback, or a management address), not a wildcard: a wildcard includes the guests' bridge",
            ));
        }
        // A loopback local API (tests, a lab box) is out of guests' reach, so sharing it is fine.
        if local_api.is_some_and(|api| api.bind == listen.ip() && !api.bind.is_loopback()) {
            return Err(invalid(
                "metrics.listen",
                "must not be local_api.bind: guests reach that address",
            ));
        }
        Ok(MetricsSettings { listen })
    }
}

impl RawLocalApi {
    fn settings(&self) -> Result<LocalApiSettings, ConfigError> {
        if self.bind.is_unspecified() {
            return Err(invalid(
                "local_api.bind",
                "must be the guests' bridge address, not a wildcard",
            ));
        }
        let max_body_bytes = self.max_body_bytes.unwrap_or(DEFAULT_LOCAL_API_BODY_BYTES);
        if !(1024..=1024 * 1024).contains(&max_body_bytes) {
            return Err(invalid(
                "local_api.max_body_bytes",
                format!("{max_body_bytes} is outside 1024..=1048576"),
            ));
        }
        let rate_per_s = self.rate_per_s.unwrap_or(DEFAULT_LOCAL_API_RATE);
        if !(1..=10_000).contains(&rate_per_s) {
            return Err(invalid(
                "local_api.rate_per_s",
                format!("{rate_per_s} is outside 1..=10000"),
            ));
        }
        let burst = self
            .burst
            .unwrap_or(DEFAULT_LOCAL_API_BURST.max(rate_per_s));
        if burst < rate_per_s || burst > 100_000 {
            return Err(invalid(
                "local_api.burst",
                format!("{burst} must be at least rate_per_s ({rate_per_s}) and at most 100000"),
            ));
        }
        let grace_ms = self.shutdown_grace_ms.unwrap_or(DEFAULT_LOCAL_API_GRACE_MS);
        if grace_ms > 300_000 {
            return Err(invalid(
                "local_api.shutdown_grace_ms",
                format!("{grace_ms} is above 300000"),
            ));
        }
        Ok(LocalApiSettings {
            bind: self.bind,
            port: self.port,
            max_body_bytes,
            rate_per_s,
            burst,
            shutdown_grace: Duration::from_millis(grace_ms),
            connections: self.connection_limits()?,
        })
    }

    fn connection_limits(&self) -> Result<crate::config::local_api::ConnectionLimits, ConfigError> {
        let defaults = crate::config::local_api::ConnectionLimits::default();
        let max_total = self.max_connections.unwrap_or(defaults.max_total);
        if !(1..=MAX_LOCAL_API_CONNECTIONS).contains(&max_total) {
            return Err(invalid(
                "local_api.max_connections",
                format!("{max_total} is outside 1..={MAX_LOCAL_API_CONNECTIONS}"),
            ));
        }
        let max_per_peer = self
            .max_connections_per_peer
            .unwrap_or(defaults.max_per_peer.min(max_total));
        if !(1..=max_total).contains(&max_per_peer) {
            return Err(invalid(
                "local_api.max_connections_per_peer",
                format!("{max_per_peer} is outside 1..=max_connections ({max_total})"),
            ));
        }
        let within_total = |field: &'static str, value: Option<usize>, default: usize| {
            let value = value.unwrap_or(default.min(max_total));
            if (1..=max_total).contains(&value) {
                Ok(value)
            } else {
                Err(invalid(
                    field,
                    format!("{value} is outside 1..=max_connections ({max_total})"),
                ))
            }
        };
        let max_per_guest = within_total(
            "local_api.max_connections_per_guest",
            self.max_connections_per_guest,
            defaults.max_per_guest,
        )?;
        let max_unattributed = within_total(
            "local_api.max_unattributed_connections",
            self.max_unattributed_connections,
            defaults.max_unattributed,
        )?;
        let timeout = |field: &'static str, value: Option<u64>, default: Duration| {
            let ms = value.unwrap_or(u64::try_from(default.as_millis()).unwrap_or(u64::MAX));
            if (100..=300_000).contains(&ms) {
                Ok(Duration::from_millis(ms))
            } else {
                Err(invalid(field, format!("{ms} is outside 100..=300000")))
            }
        };
        Ok(crate::config::local_api::ConnectionLimits {
            max_per_peer,
            max_per_guest,
            max_unattributed,
            max_total,
            handshake_timeout: timeout(
                "local_api.handshake_timeout_ms",
                self.handshake_timeout_ms,
                defaults.handshake_timeout,
            )?,
            header_read_timeout: timeout(
                "local_api.header_read_timeout_ms",
                self.header_read_timeout_ms,
                defaults.header_read_timeout,
            )?,
            idle_timeout: timeout(
                "local_api.idle_timeout_ms",
                self.idle_timeout_ms,
                defaults.idle_timeout,
            )?,
            body_timeout: timeout(
                "local_api.body_timeout_ms",
                self.body_timeout_ms,
                defaults.body_timeout,
            )?,
        })
    }
}

fn default_enabled() -> bool {
    true
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawBackup {
    #[serde(default)]
    storage: Option<String>,
    #[serde(default)]
    mount_root: Option<PathBuf>,
    #[serde(default)]
    watch_interval_ms: Option<u64>,
    #[serde(default)]
    min_interval_seconds: Option<u32>,
    storage_call_timeout_ms: Option<u64>,
    #[serde(default)]
    restore_test_stay_up_ms: Option<u64>,
    #[serde(default)]
    restore_test_min_free_mib: Option<u64>,
    #[serde(default)]
    restore_test_max_tasks: Option<usize>,
    #[serde(default)]
    restore_test_minute_ms: Option<u64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStorage {
    #[serde(default)]
    local_dir_roots: Vec<PathBuf>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawBootstrap {
    #[serde(default)]
    hub_url: Option<String>,
    #[serde(default)]
    hub_fingerprint: Option<String>,
}

fn default_bind() -> IpAddr {
    IpAddr::from([127, 0, 0, 1])
}

fn default_port() -> u16 {
    8443
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPoll {
    long_poll_seconds: Option<u64>,
    backoff_initial_ms: Option<u64>,
    backoff_max_ms: Option<u64>,
    report_min_interval_ms: Option<u64>,
    pending_interval_ms: Option<u64>,
    host_key_rotation_min_seconds: Option<u64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawReconcile {
    interval_seconds: Option<u64>,
    max_parallel: Option<usize>,
    swap_mib: Option<u64>,
    restart_attempts: Option<u32>,
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.into(),
    }
}

fn read_secret(field: &'static str, path: &Path) -> Result<SecretString, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::SecretFile {
        field,
        path: path.to_owned(),
        source,
    })?;
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(invalid(
            field,
            format!("names an empty file {}", path.display()),
        ));
    }
    Ok(SecretString::from(trimmed.to_owned()))
}

fn https_url(field: &'static str, text: &str) -> Result<Url, ConfigError> {
    let url = Url::parse(text).map_err(|e| invalid(field, format!("is not a url: {e}")))?;
    if url.scheme() != "https" {
        return Err(invalid(field, "must use https"));
    }
    if url.host_str().is_none() {
        return Err(invalid(field, "has no host"));
    }
    Ok(url)
}

fn trimmed(url: &Url) -> String {
    url.as_str().trim_end_matches('/').to_owned()
}

/// What a pin looks like, for errors.
const PIN_TEXT: &str = "must be a certificate's SHA-256 (64 hex digits, colons allowed) or a key pin (spki: and 64 hex digits)";

/// How `[hub]` says the hub is trusted: its pins (`fingerprint`, then `pins`), and a CA when
/// `ca` names one (`system`, or a PEM file).
fn hub_trust(raw: &RawHub) -> Result<(bosun_pin::Trust, Vec<bosun_pin::Pin>), ConfigError> {
    let mut pins = Vec::new();
    if let Some(fingerprint) = &raw.fingerprint {
        pins.push(
            bosun_pin::Pin::parse(fingerprint).map_err(|_| invalid("hub.fingerprint", PIN_TEXT))?,
        );
    }
    for pin in &raw.pins {
        pins.push(bosun_pin::Pin::parse(pin).map_err(|_| invalid("hub.pins", PIN_TEXT))?);
    }
    if pins.len() > bosun_proto::hub_pins::MAX_SIGNED_PINS {
        return Err(invalid("hub.pins", "at most 8 pins in all"));
    }
    let trust = match raw.ca.as_deref() {
        None if pins.is_empty() => {
            return Err(invalid(
                "hub.fingerprint",
                "set hub.fingerprint (or hub.pins), or hub.ca: the hub is trusted by a pin or a CA",
            ));
        }
        None => bosun_pin::Trust::Pins(pins.clone()),
        Some(ca) => {
            let roots = if ca == "system" {
                bosun_pin::CaRoots::System
            } else if Path::new(ca).is_absolute() {
                bosun_pin::CaRoots::File(PathBuf::from(ca))
            } else {
                return Err(invalid(
                    "hub.ca",
                    "must be \"system\" or the absolute path of a CA certificate file (PEM)",
                ));
            };
            bosun_pin::Trust::Ca {
                roots,
                pins: pins.clone(),
            }
        }
    };
    Ok((trust, pins))
}

fn helper_transport(raw: RawHelper) -> Result<HelperTransport, ConfigError> {
    match raw.transport.as_deref().unwrap_or("socket") {
        "socket" => Ok(HelperTransport::Socket {
            path: raw.socket.unwrap_or_else(|| DEFAULT_SOCKET.into()),
        }),
        "sudo" => Ok(HelperTransport::Sudo {
            sudo: raw.sudo.unwrap_or_else(|| DEFAULT_SUDO.into()),
            helper: raw
                .helper
                .unwrap_or_else(|| "/usr/libexec/bosun/bosun-helper".into()),
        }),
        other => Err(invalid(
            "helper.transport",
            format!("is {other:?}; expected \"socket\" or \"sudo\""),
        )),
    }
}

/// Parses `text` into the file's types without checking the values (`agent.toml(5)`'s test
/// holds the page's keys to this).
#[cfg(test)]
pub(crate) fn parse_shape(text: &str) -> Result<(), String> {
    toml::from_str::<RawConfig>(text)
        .map(drop)
        .map_err(|e| e.to_string())
}

impl AgentConfig {
    /// Reads and validates the file at `path`, and the secret files it names.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Validates `text` (read from `path`, for messages).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
        if !raw.state_dir.is_absolute() {
            return Err(invalid("state_dir", "must be an absolute path"));
        }
        if !raw.allowed_signers.is_absolute() {
            return Err(invalid("allowed_signers", "must be an absolute path"));
        }
        let (trust, pins) = hub_trust(&raw.hub)?;
        let hub = HubSettings {
            url: https_url("hub.url", &raw.hub.url)?,
            trust,
            pins,
            enrollment_token: raw
                .hub
                .enrollment_token_file
                .as_deref()
                .map(|p| read_secret("hub.enrollment_token_file", p))
                .transpose()?,
        };
        if raw.pve.fingerprint.is_some() == raw.pve.ca_file.is_some() {
            return Err(invalid(
                "pve.fingerprint",
                "set exactly one of pve.fingerprint and pve.ca_file",
            ));
        }
        if raw.pve.node.is_empty() {
            return Err(invalid("pve.node", "must not be empty"));
        }
        let pve = PveSettings {
            url: https_url("pve.url", &raw.pve.url)?,
            node: raw.pve.node,
            token_id: raw.pve.token_id,
            token_secret: read_secret("pve.token_secret_file", &raw.pve.token_secret_file)?,
            fingerprint: raw.pve.fingerprint,
            ca_file: raw.pve.ca_file,
            fast_retries: raw.pve.fast_retries,
        };
        let helper = raw.helper.map(helper_transport).transpose()?;
        let local_api = raw
            .local_api
            .filter(|l| l.enabled)
            .map(|l| l.settings())
            .transpose()?;
        let metrics = raw
            .metrics
            .filter(|m| m.enabled)
            .map(|m| m.settings(local_api.as_ref()))
            .transpose()?;
        let watch_ms = raw.backup.watch_interval_ms.unwrap_or(1000);
        if !(200..=5000).contains(&watch_ms) {
            return Err(invalid(
                "backup.watch_interval_ms",
                "must be between 200 and 5000",
            ));
        }
        let backup = BackupSettings {
            storage: raw.backup.storage.unwrap_or_else(|| "local".to_owned()),
            mount_root: raw
                .backup
                .mount_root
                .unwrap_or_else(|| PathBuf::from("/var/lib/bosun-helper/mnt")),
            watch_interval: Duration::from_millis(watch_ms),
            min_interval_seconds: within(
                "backup.min_interval_seconds",
                raw.backup.min_interval_seconds.unwrap_or(900),
                bosun_proto::data_plan::MIN_INTERVAL_FLOOR,
                bosun_proto::data_plan::MIN_INTERVAL_CEILING,
            )?,
            storage_call_timeout: Duration::from_millis(within(
                "backup.storage_call_timeout_ms",
                raw.backup.storage_call_timeout_ms.unwrap_or(5_000),
                500,
                30_000,
            )?),
            restore_test_stay_up: Duration::from_millis(within(
                "backup.restore_test_stay_up_ms",
                raw.backup.restore_test_stay_up_ms.unwrap_or(30_000),
                1_000,
                600_000,
            )?),
            restore_test_min_free_mib: within(
                "backup.restore_test_min_free_mib",
                raw.backup.restore_test_min_free_mib.unwrap_or(1024),
                0,
                1 << 20,
            )?,
            restore_test_max_tasks: within(
                "backup.restore_test_max_tasks",
                raw.backup.restore_test_max_tasks.unwrap_or(8),
                1,
                64,
            )?,
            restore_test_minute: Duration::from_millis(within(
                "backup.restore_test_minute_ms",
                raw.backup.restore_test_minute_ms.unwrap_or(60_000),
                100,
                60_000,
            )?),
        };
        if backup.storage.is_empty() {
            return Err(invalid("backup.storage", "must not be empty"));
        }
        if !backup.mount_root.is_absolute() {
            return Err(invalid("backup.mount_root", "must be an absolute path"));
        }
        for root in &raw.storage.local_dir_roots {
            crate::data::storage::local_dir::check_root(root).map_err(|e| {
                invalid(
                    "storage.local_dir_roots",
                    format!("{}: {}", root.display(), bosun_errchain::error_chain(&e)),
                )
            })?;
        }
        let storage = StorageSettings {
            local_dir_roots: raw.storage.local_dir_roots,
        };
        let bootstrap_hub = BootstrapHub {
            url: match raw.bootstrap.hub_url {
                Some(url) => trimmed(&https_url("bootstrap.hub_url", &url)?),
                None => trimmed(&hub.url),
            },
            fingerprint: match (raw.bootstrap.hub_fingerprint, hub.pins.first()) {
                (Some(pin), _) => bosun_pin::Pin::parse(&pin)
                    .map_err(|_| invalid("bootstrap.hub_fingerprint", PIN_TEXT))?
                    .to_string(),
                (None, Some(pin)) => pin.to_string(),
                (None, None) => {
                    return Err(invalid(
                        "bootstrap.hub_fingerprint",
                        "must be set when the hub is trusted by hub.ca alone: guests pin the hub",
                    ));
                }
            },
        };
        let ms = Duration::from_millis;
        let long_poll = raw.poll.long_poll_seconds.unwrap_or(25);
        if long_poll > u64::from(bosun_proto::poll::MAX_WAIT_SECONDS) {
            return Err(invalid("poll.long_poll_seconds", "must be at most 60"));
        }
        let poll = PollSettings {
            long_poll: Duration::from_secs(long_poll),
            backoff_initial: ms(raw.poll.backoff_initial_ms.unwrap_or(1_000).max(1)),
            backoff_max: ms(raw.poll.backoff_max_ms.unwrap_or(60_000).max(1)),
            report_min_interval: raw
                .poll
                .report_min_interval_ms
                .map_or(DEFAULT_REPORT_MIN_INTERVAL, ms),
            pending_interval: raw
                .poll
                .pending_interval_ms
                .map_or(DEFAULT_PENDING_INTERVAL, ms),
            host_key_rotation_min: raw
                .poll
                .host_key_rotation_min_seconds
                .map_or(DEFAULT_HOST_KEY_ROTATION_MIN, Duration::from_secs),
        };
        if poll.host_key_rotation_min < HOST_KEY_ROTATION_MIN_FLOOR {
            return Err(invalid(
                "poll.host_key_rotation_min_seconds",
                "must be at least 10 (ten of the shortest poll interval)",
            ));
        }
        if !PENDING_INTERVAL_RANGE.contains(&poll.pending_interval) {
            return Err(invalid(
                "poll.pending_interval_ms",
                "must be 1000..=300000 (1 s to 5 min)",
            ));
        }
        if poll.backoff_max < poll.backoff_initial {
            return Err(invalid(
                "poll.backoff_max_ms",
                "must not be below poll.backoff_initial_ms",
            ));
        }
        let reconcile = ReconcileSettings {
            interval: Duration::from_secs(raw.reconcile.interval_seconds.unwrap_or(30).max(1)),
            max_parallel: raw.reconcile.max_parallel.unwrap_or(8),
            swap_mib: raw.reconcile.swap_mib.unwrap_or(512),
            restart_attempts: raw.reconcile.restart_attempts.unwrap_or(5),
        };
        if !(1..=64).contains(&reconcile.max_parallel) {
            return Err(invalid("reconcile.max_parallel", "must be 1..=64"));
        }
        let health = raw.health.settings(helper.is_some())?;
        let tunnel = raw.tunnel.map(|t| t.settings()).transpose()?;
        let golden = raw.golden.settings(&raw.pve.storage, &backup.storage)?;
        Ok(Self {
            state_dir: raw.state_dir,
            allowed_signers: raw.allowed_signers,
            hub,
            pve,
            guest_storage: raw.pve.storage,
            helper,
            local_api,
            metrics,
            backup,
            storage,
            bootstrap_hub,
            poll,
            reconcile,
            controller: raw.controller.settings()?,
            health,
            tunnel,
            golden,
            slots_root: raw
                .update
                .slots_root
                .unwrap_or_else(|| PathBuf::from(crate::runtime::update::DEFAULT_SLOTS_ROOT)),
            break_glass_scan_interval: raw.break_glass.scan_interval()?,
            break_glass_spool: raw
                .break_glass
                .spool
                .unwrap_or_else(|| PathBuf::from(crate::trust::break_glass::spool::DEFAULT_SPOOL)),
        })
    }

    /// The journal's database file.
    pub fn journal_path(&self) -> PathBuf {
        self.state_dir.join("journal.sqlite")
    }

    /// What the offline `rotate-local-api-cert` command reads.
    pub fn rotation(&self) -> crate::guests::credentials::rotate::RotateSettings {
        crate::guests::credentials::rotate::RotateSettings {
            state_dir: self.state_dir.clone(),
            journal_path: self.journal_path(),
            local_api: self.local_api.map(|s| (s.bind, s.port)),
            helper: self.helper.clone(),
            pve: self.pve.clone(),
            bootstrap_hub: bosun_proto::bootstrap::PinnedEndpoint {
                url: self.bootstrap_hub.url.clone(),
                fingerprint: self.bootstrap_hub.fingerprint.clone(),
            },
        }
    }
}

#[cfg(test)]
mod tests;

/// `value` if it lies in `min..=max`, else an error naming `field` and the range.
fn within<T: PartialOrd + std::fmt::Display + Copy>(
    field: &'static str,
    value: T,
    min: T,
    max: T,
) -> Result<T, ConfigError> {
    if value < min || value > max {
        return Err(invalid(field, format!("must be between {min} and {max}")));
    }
    Ok(value)
}
