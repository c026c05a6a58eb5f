//! The validated settings the file gives, section by section, and their defaults and bounds.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use bosun_pve::PveSettings;
use secrecy::SecretString;
use url::Url;

use crate::links::helper::HelperTransport;

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
    /// The pool new guests' static addresses come from (`[addresses]`); `None`: new guests
    /// keep the golden image's DHCP (decision 0101).
    pub addresses: Option<crate::config::addresses::AddressPool>,
    /// Where the A/B slots and the update record are (the helper's `slots_root`).
    pub slots_root: PathBuf,
    /// The break-glass support shell's spool, read into the audit trail.
    pub break_glass_spool: PathBuf,
    /// Where the guests' break-glass consents are written for the support shell (decision 0080).
    pub break_glass_consent: PathBuf,
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
    /// How long one hour of the verification interval lasts.
    pub verify_hour: Duration,
    /// The most MiB per second the helper re-hashes a file tier's archive at (decision 0103).
    pub verify_rate_mib_s: std::num::NonZeroU32,
    /// How often bulk volumes' archives are looked at (decision 0090); a failed one is tried
    /// again after five times that.
    pub bulk_check: Duration,
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
    /// The longest the hub loop may go without progress (a round begun, or a wait for the hub
    /// or a pause going on) before the systemd watchdog stops its pings and systemd restarts
    /// the agent.
    pub stall_limit: Duration,
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
