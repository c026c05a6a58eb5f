//! The file's shape: one type per section, as `toml` reads it. Unknown keys and sections
//! are refused here (`deny_unknown_fields`), before any value is checked; the checks of the
//! sections that keep their own rules are beside their types.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::error::{ConfigError, invalid};
use super::settings::{
    DEFAULT_LOCAL_API_BODY_BYTES, DEFAULT_LOCAL_API_BURST, DEFAULT_LOCAL_API_GRACE_MS,
    DEFAULT_LOCAL_API_RATE, DEFAULT_METRICS_LISTEN, LocalApiSettings, MAX_LOCAL_API_CONNECTIONS,
    MetricsSettings,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) state_dir: PathBuf,
    pub(super) allowed_signers: PathBuf,
    pub(super) hub: RawHub,
    pub(super) pve: RawPve,
    #[serde(default)]
    pub(super) helper: Option<RawHelper>,
    #[serde(default)]
    pub(super) local_api: Option<RawLocalApi>,
    #[serde(default)]
    pub(super) metrics: Option<RawMetrics>,
    #[serde(default)]
    pub(super) backup: RawBackup,
    #[serde(default)]
    pub(super) storage: RawStorage,
    #[serde(default)]
    pub(super) bootstrap: RawBootstrap,
    #[serde(default)]
    pub(super) poll: RawPoll,
    #[serde(default)]
    pub(super) reconcile: RawReconcile,
    #[serde(default)]
    pub(super) controller: crate::config::controller::RawControllerSettings,
    #[serde(default)]
    pub(super) health: crate::config::health::RawHealth,
    #[serde(default)]
    pub(super) tunnel: Option<crate::config::health::RawTunnel>,
    #[serde(default)]
    pub(super) golden: crate::config::golden::RawGolden,
    #[serde(default)]
    pub(super) addresses: Option<crate::config::addresses::RawAddresses>,
    #[serde(default)]
    pub(super) update: RawUpdate,
    #[serde(default)]
    pub(super) break_glass: RawBreakGlass,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBreakGlass {
    #[serde(default)]
    pub(super) spool: Option<PathBuf>,
    #[serde(default)]
    pub(super) consent: Option<PathBuf>,
    #[serde(default)]
    pub(super) scan_interval_seconds: Option<u64>,
}

impl RawBreakGlass {
    pub(super) fn scan_interval(&self) -> Result<Duration, ConfigError> {
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
pub(super) struct RawUpdate {
    #[serde(default)]
    pub(super) slots_root: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHub {
    pub(super) url: String,
    #[serde(default)]
    pub(super) fingerprint: Option<String>,
    #[serde(default)]
    pub(super) pins: Vec<String>,
    #[serde(default)]
    pub(super) ca: Option<String>,
    #[serde(default)]
    pub(super) enrollment_token_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPve {
    pub(super) url: String,
    pub(super) node: String,
    pub(super) token_id: String,
    pub(super) token_secret_file: PathBuf,
    #[serde(default)]
    pub(super) fingerprint: Option<String>,
    #[serde(default)]
    pub(super) ca_file: Option<PathBuf>,
    #[serde(default = "default_storage")]
    pub(super) storage: String,
    #[serde(default)]
    pub(super) fast_retries: bool,
}

fn default_storage() -> String {
    "local-lvm".to_owned()
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHelper {
    #[serde(default)]
    pub(super) transport: Option<String>,
    #[serde(default)]
    pub(super) socket: Option<PathBuf>,
    #[serde(default)]
    pub(super) sudo: Option<PathBuf>,
    #[serde(default)]
    pub(super) helper: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLocalApi {
    #[serde(default = "default_enabled")]
    pub(super) enabled: bool,
    #[serde(default = "default_bind")]
    pub(super) bind: IpAddr,
    #[serde(default = "default_port")]
    pub(super) port: u16,
    pub(super) max_body_bytes: Option<usize>,
    pub(super) rate_per_s: Option<u32>,
    pub(super) burst: Option<u32>,
    pub(super) shutdown_grace_ms: Option<u64>,
    pub(super) max_connections: Option<usize>,
    pub(super) max_connections_per_peer: Option<usize>,
    pub(super) max_connections_per_guest: Option<usize>,
    pub(super) max_unattributed_connections: Option<usize>,
    pub(super) handshake_timeout_ms: Option<u64>,
    pub(super) header_read_timeout_ms: Option<u64>,
    pub(super) idle_timeout_ms: Option<u64>,
    pub(super) body_timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    #[serde(default = "default_enabled")]
    pub(super) enabled: bool,
    #[serde(default)]
    pub(super) listen: Option<SocketAddr>,
}

impl RawMetrics {
    /// The settings, refusing an address guests could reach: a wildcard (it includes the
    /// bridge) or the local API's own bridge address (unless that is loopback).
    pub(super) fn settings(
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
    pub(super) fn settings(&self) -> Result<LocalApiSettings, ConfigError> {
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
pub(super) struct RawBackup {
    #[serde(default)]
    pub(super) storage: Option<String>,
    #[serde(default)]
    pub(super) mount_root: Option<PathBuf>,
    #[serde(default)]
    pub(super) watch_interval_ms: Option<u64>,
    #[serde(default)]
    pub(super) min_interval_seconds: Option<u32>,
    pub(super) storage_call_timeout_ms: Option<u64>,
    #[serde(default)]
    pub(super) restore_test_stay_up_ms: Option<u64>,
    #[serde(default)]
    pub(super) restore_test_min_free_mib: Option<u64>,
    #[serde(default)]
    pub(super) restore_test_max_tasks: Option<usize>,
    #[serde(default)]
    pub(super) restore_test_minute_ms: Option<u64>,
    #[serde(default)]
    pub(super) verify_hour_ms: Option<u64>,
    #[serde(default)]
    pub(super) verify_rate_mib_s: Option<u32>,
    #[serde(default)]
    pub(super) bulk_check_ms: Option<u64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStorage {
    #[serde(default)]
    pub(super) local_dir_roots: Vec<PathBuf>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBootstrap {
    #[serde(default)]
    pub(super) hub_url: Option<String>,
    #[serde(default)]
    pub(super) hub_fingerprint: Option<String>,
}

fn default_bind() -> IpAddr {
    IpAddr::from([127, 0, 0, 1])
}

fn default_port() -> u16 {
    8443
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPoll {
    pub(super) long_poll_seconds: Option<u64>,
    pub(super) backoff_initial_ms: Option<u64>,
    pub(super) backoff_max_ms: Option<u64>,
    pub(super) report_min_interval_ms: Option<u64>,
    pub(super) pending_interval_ms: Option<u64>,
    pub(super) host_key_rotation_min_seconds: Option<u64>,
    pub(super) stall_limit_ms: Option<u64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReconcile {
    pub(super) interval_seconds: Option<u64>,
    pub(super) max_parallel: Option<usize>,
    pub(super) swap_mib: Option<u64>,
    pub(super) restart_attempts: Option<u32>,
}
