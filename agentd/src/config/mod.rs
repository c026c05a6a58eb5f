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
//! watch_interval_ms = 1000                  # how often storage targets are looked at (200–5000);
//!                                           # four times that, at most 4 s, while all are mounted
//! min_interval_seconds = 900                # before a signed data plan: the least time between
//!                                           # two scheduled backups of a guest (10–604800)
//! storage_call_timeout_ms = 5000            # the longest one Proxmox call of the storage watcher may take (500–30000)
//! restore_test_stay_up_ms = 30000           # a scratch guest must stay running this long (1 s–10 min)
//! restore_test_min_free_mib = 1024          # memory kept free beyond a scratch guest's own
//! restore_test_max_tasks = 8                # no restore test while the node runs this many tasks (1–64)
//! restore_test_minute_ms = 60000            # one minute of the policy's timeout, and the restore tester's
//!                                           # longest wait between looks, at least 1 s (100–60000; tests shorten it)
//! verify_hour_ms = 3600000                  # one hour of the verification interval (1000–3600000; tests shorten it)
//! verify_rate_mib_s = 64                    # the most MiB/s a file tier's archive is re-hashed at (1–4096)
//! bulk_check_ms = 60000                     # how often bulk volumes' archives are looked at (1000–60000);
//!                                           # a failed one is tried again after five times that
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
//! stall_limit_ms = 900000                   # the hub loop stalled this long: no watchdog ping (2 s–1 h)
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
//! config_file = "/var/lib/bosun/tunnel/config.yml"  # absent: watched only (crate::config::tunnel)
//!
//! [golden]                                  # see crate::config::golden
//! builder_vmid = 9000
//! storage = "local"                         # default: backup.storage
//!
//! [addresses]                               # the pool of guest addresses (crate::config::addresses)
//! ipv4_first = "192.0.2.100"                # absent section: new guests keep DHCP
//! ipv4_last = "192.0.2.199"
//! ipv4_prefix = 24
//! ipv4_gateway = "192.0.2.1"
//!
//! [update]                                  # agent self-update (needs [helper])
//! slots_root = "/var/lib/bosun-helper/slots" # the helper's slots_root; the gate's record is read here
//!
//! [break_glass]                             # what break-glass sessions ran (decision 0035)
//! spool = "/var/lib/bosun-breakglass/commands.jsonl"
//! consent = "/var/lib/bosun-consent/consent.json" # guests' consents, for the support shell
//! scan_interval_seconds = 10                # 1 s to 5 min, where the spool's directory
//!                                           # cannot be watched (read when it changes otherwise)
//! ```
//!
//! Secrets are read from files named here, never written in the file itself,
//! and are held as [`SecretString`](secrecy::SecretString).

pub mod addresses;
pub mod controller;
pub mod error;
pub mod golden;
pub mod health;
pub mod local_api;
mod raw;
mod sections;
mod settings;
pub mod tunnel;

use std::path::{Path, PathBuf};

pub use error::ConfigError;
pub use settings::*;

use raw::RawConfig;

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
        let addresses = raw.addresses.map(|a| a.settings()).transpose()?;
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
            addresses,
            slots_root: raw
                .update
                .slots_root
                .unwrap_or_else(|| PathBuf::from(crate::runtime::update::DEFAULT_SLOTS_ROOT)),
            break_glass_scan_interval: raw.break_glass.scan_interval()?,
            break_glass_spool: raw
                .break_glass
                .spool
                .unwrap_or_else(|| PathBuf::from(crate::trust::break_glass::spool::DEFAULT_SPOOL)),
            break_glass_consent: raw
                .break_glass
                .consent
                .unwrap_or_else(|| PathBuf::from(bosun_support::consent::DEFAULT_CONSENT_FILE)),
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
