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
//! [controller]                              # rollouts and healing: crate::controller::settings
//! health_window_ms = 300000
//!
//! [health]                                  # thresholds, SMART disks (see crate::health::settings)
//! cpu_high_percent = 90
//! smart_devices = ["/dev/sda"]
//!
//! [tunnel]                                  # absent: no tunnel watched
//! readiness_url = "http://127.0.0.1:20241/ready"
//!
//! [golden]                                  # see crate::golden_build::settings
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

pub mod error;
mod raw;
mod sections;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_pve::PveSettings;
use secrecy::SecretString;
use url::Url;

pub use error::ConfigError;

use crate::helper_client::HelperTransport;
use raw::RawConfig;

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
    pub controller: crate::controller::ControllerSettings,
    /// Host-health sampling and thresholds.
    pub health: crate::health::HealthSettings,
    /// The tunnel's readiness endpoint, when one is watched.
    pub tunnel: Option<crate::health::TunnelSettings>,
    /// How the helper builds golden images for signed recipes (`[golden]`).
    pub golden: crate::golden_build::settings::GoldenSettings,
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
    pub connections: crate::localapi::ConnectionLimits,
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
    /// ([`crate::storage::local_dir`]).
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

impl AgentConfig {
    /// Reads and validates the file at `path`, and the secret files it names.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Validates `text` (read from `path`, for messages): the file's shape first (an unknown
    /// key or section is refused there), then each section by its own function in the file's
    /// order, the first refusal winning.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
        sections::top(&raw)?;
        let hub = sections::hub(&raw.hub)?;
        let pve = sections::pve(&raw.pve)?;
        let helper = raw.helper.map(sections::helper).transpose()?;
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
        let backup = sections::backup(&raw.backup)?;
        let storage = sections::storage(raw.storage)?;
        let bootstrap_hub = sections::bootstrap(raw.bootstrap, &hub)?;
        let poll = sections::poll(&raw.poll)?;
        let reconcile = sections::reconcile(&raw.reconcile)?;
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
                .unwrap_or_else(|| PathBuf::from(crate::update::DEFAULT_SLOTS_ROOT)),
            break_glass_scan_interval: raw.break_glass.scan_interval()?,
            break_glass_spool: raw
                .break_glass
                .spool
                .unwrap_or_else(|| PathBuf::from(crate::break_glass::spool::DEFAULT_SPOOL)),
        })
    }

    /// The journal's database file.
    pub fn journal_path(&self) -> PathBuf {
        self.state_dir.join("journal.sqlite")
    }

    /// What the offline `rotate-local-api-cert` command reads.
    pub fn rotation(&self) -> crate::credentials::rotate::RotateSettings {
        crate::credentials::rotate::RotateSettings {
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

/// Parses `text` into the file's types without checking the values (`agent.toml(5)`'s test
/// holds the page's keys to this).
#[cfg(test)]
pub(crate) fn parse_shape(text: &str) -> Result<(), String> {
    toml::from_str::<RawConfig>(text)
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
