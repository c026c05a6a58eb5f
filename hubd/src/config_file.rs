//! The hub's config file (`/etc/bosun-hub/hub.toml`) and how it meets the command line.
//!
//! Every setting can come from the file, from a flag, or from its default; a flag wins over
//! the file. The file is strict: an unknown key is an error (a typo must not silently leave
//! the admin API on a public address), and the values are checked before the hub binds.
//!
//! ```toml
//! data_dir = "/var/lib/bosun-hub"
//!
//! [listen]
//! agent = "0.0.0.0:7443"     # what the boxes call
//! admin = "10.0.0.5:7444"    # admin API, dashboard and /metrics; absent: on `agent`
//!
//! [tls]                      # absent: the self-signed certificate `init` made
//! cert = "/etc/bosun-hub/tls/fullchain.pem"
//! key = "/etc/bosun-hub/tls/privkey.pem"
//!
//! [agents]
//! poll_interval_secs = 30
//! update_window = "02:00+120" # when agents may update themselves; absent: signed override only
//! key_rotation_days = 30     # a host key this old is replaced at the host's next poll
//! key_lifetime_days = 365    # a host key this old is refused (docs/host-key-rotation.md)
//!
//! [alerts]
//! webhook = "https://alerts.example/bosun"
//! silence_window_secs = 30
//! stopped_grace_secs = 1800  # a planned stop (the agent said so) is paged after this
//!
//! [retention]                # how long what only grows is kept (docs/retention.md)
//! audit_days = 365
//! audit_per_host = 500
//! replaced_audit_days = 365
//! events_days = 90
//! events_per_host = 500
//! alerts_days = 90
//! jobs_days = 90
//! idempotency_days = 7
//! enroll_tokens_days = 30
//! history_days = 14          # a host's five-minute history (1 to 14)
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::HubConfig;
use crate::alerts::WebhookConfig;
use crate::store::RetentionConfig;
use crate::store::host_key_rotation::KeyLifetime;
use crate::tls::TlsSource;

/// Where the package puts the config file.
pub const DEFAULT_PATH: &str = "/etc/bosun-hub/hub.toml";
/// The agent listener when neither the file nor a flag names one.
pub const DEFAULT_AGENT_LISTEN: &str = "0.0.0.0:7443";
/// Largest config file read.
const MAX_FILE_BYTES: u64 = 64 * 1024;
/// Longest poll interval or silence window accepted, seconds (a day).
const MAX_INTERVAL_SECS: u64 = 86_400;

/// The file's contents, every key optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HubFile {
    /// Data directory.
    pub data_dir: Option<PathBuf>,
    /// Listen addresses.
    #[serde(default)]
    pub listen: ListenSection,
    /// Operator certificate.
    #[serde(default)]
    pub tls: TlsSection,
    /// What new agents are told.
    #[serde(default)]
    pub agents: AgentsSection,
    /// Alert delivery and the dead-man's switch.
    #[serde(default)]
    pub alerts: AlertsSection,
    /// Retention bounds.
    #[serde(default)]
    pub retention: RetentionSection,
}

/// `[listen]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenSection {
    /// The agent API.
    pub agent: Option<SocketAddr>,
    /// The admin API, dashboard and metrics; absent: served on `agent`.
    pub admin: Option<SocketAddr>,
}

/// `[tls]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// Certificate chain (PEM).
    pub cert: Option<PathBuf>,
    /// Private key (PEM).
    pub key: Option<PathBuf>,
}

/// `[agents]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsSection {
    /// Poll interval given to newly enrolled hosts, seconds.
    pub poll_interval_secs: Option<u64>,
    /// The daily window (host local time) in which agents may update themselves,
    /// `HH:MM+MINUTES` (e.g. `02:00+120`).
    pub update_window: Option<String>,
    /// Age in days at which a host's key is replaced at its next poll.
    pub key_rotation_days: Option<u32>,
    /// Age in days at which a host's key is refused (longer than `key_rotation_days`).
    pub key_lifetime_days: Option<u32>,
}

/// Longest host key lifetime accepted, days (ten years).
const MAX_KEY_DAYS: u32 = 3650;

impl AgentsSection {
    /// The host key lifetime: each key absent keeps its default ([`KeyLifetime::default`]).
    fn key_lifetime(&self) -> Result<KeyLifetime, ConfigError> {
        const DAY_MS: i64 = 86_400_000;
        let defaults = KeyLifetime::default();
        let days = |key: &str, value: Option<u32>, default_ms: i64| match value {
            None => Ok(default_ms),
            Some(days @ 1..=MAX_KEY_DAYS) => Ok(i64::from(days) * DAY_MS),
            Some(days) => Err(ConfigError::Invalid(format!(
                "[agents] {key} must be 1 to {MAX_KEY_DAYS} days, not {days}"
            ))),
        };
        let lifetime = KeyLifetime {
            rotate_after_ms: days(
                "key_rotation_days",
                self.key_rotation_days,
                defaults.rotate_after_ms,
            )?,
            expire_after_ms: days(
                "key_lifetime_days",
                self.key_lifetime_days,
                defaults.expire_after_ms,
            )?,
        };
        // A key must be rotated well before it is refused: a host that polls at all gets a
        // new key in time.
        if lifetime.expire_after_ms < 2 * lifetime.rotate_after_ms {
            return Err(ConfigError::Invalid(format!(
                "[agents] key_lifetime_days ({}) must be at least twice key_rotation_days ({})",
                lifetime.expire_after_ms / DAY_MS,
                lifetime.rotate_after_ms / DAY_MS
            )));
        }
        Ok(lifetime)
    }
}

/// `[alerts]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsSection {
    /// POST alerts to this URL.
    pub webhook: Option<String>,
    /// How long an overdue alert is held to tell one silent host from a mass silence.
    pub silence_window_secs: Option<u64>,
    /// How long a host that announced a planned stop may stay silent before it is paged
    /// (default [`crate::deadman::DEFAULT_STOPPED_GRACE`], 30 minutes).
    pub stopped_grace_secs: Option<u64>,
}

/// `[retention]`: each key absent keeps its default ([`RetentionConfig::default`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSection {
    /// Days an audit entry is kept.
    pub audit_days: Option<u32>,
    /// Newest audit entries kept per host.
    pub audit_per_host: Option<u32>,
    /// Days a replaced box's audit trail is kept after the replacement.
    pub replaced_audit_days: Option<u32>,
    /// Days an event is kept.
    pub events_days: Option<u32>,
    /// Newest events kept per host.
    pub events_per_host: Option<u32>,
    /// Days an alert stays in the alert history.
    pub alerts_days: Option<u32>,
    /// Days a finished job is kept.
    pub jobs_days: Option<u32>,
    /// Days an `Idempotency-Key` is remembered.
    pub idempotency_days: Option<u32>,
    /// Days a spent enrollment token is kept.
    pub enroll_tokens_days: Option<u32>,
    /// Days a host's history is kept.
    pub history_days: Option<u32>,
}

/// Longest retention accepted, days (ten years).
const MAX_RETENTION_DAYS: u32 = 3_650;
/// Longest a host's history is kept, days: as far back as the history API reads
/// ([`bosun_proto::history::MAX_HOURS`]).
const MAX_HISTORY_DAYS: u32 = bosun_proto::history::MAX_HOURS / 24;
/// Most rows per host a per-host cap accepts.
const MAX_PER_HOST: u32 = 1_000_000;
/// Fewest rows per host a per-host cap accepts (a host's last few actions are always there).
const MIN_PER_HOST: u32 = 10;
/// Fewest days a finished job is kept: longer than any job's validity window
/// ([`bosun_proto::job::MAX_VALIDITY_HOURS`]), so a job replayed while still valid is
/// recognised by its id instead of queued again.
const MIN_JOBS_DAYS: u32 = 8;

impl RetentionSection {
    /// The bounds, each checked, over the defaults.
    fn resolve(&self) -> Result<RetentionConfig, ConfigError> {
        let default = RetentionConfig::default();
        let days = |key: &str, value: Option<u32>, least: u32, fallback: u32| match value {
            None => Ok(fallback),
            Some(days) if (least..=MAX_RETENTION_DAYS).contains(&days) => Ok(days),
            Some(days) => Err(ConfigError::Invalid(format!(
                "[retention] {key} must be {least} to {MAX_RETENTION_DAYS} days, not {days}"
            ))),
        };
        let rows = |key: &str, value: Option<u32>, fallback: u32| match value {
            None => Ok(fallback),
            Some(rows) if (MIN_PER_HOST..=MAX_PER_HOST).contains(&rows) => Ok(rows),
            Some(rows) => Err(ConfigError::Invalid(format!(
                "[retention] {key} must be {MIN_PER_HOST} to {MAX_PER_HOST} rows, not {rows}"
            ))),
        };
        Ok(RetentionConfig {
            audit_days: days("audit_days", self.audit_days, 1, default.audit_days)?,
            audit_per_host: rows(
                "audit_per_host",
                self.audit_per_host,
                default.audit_per_host,
            )?,
            replaced_audit_days: days(
                "replaced_audit_days",
                self.replaced_audit_days,
                1,
                default.replaced_audit_days,
            )?,
            events_days: days("events_days", self.events_days, 1, default.events_days)?,
            events_per_host: rows(
                "events_per_host",
                self.events_per_host,
                default.events_per_host,
            )?,
            alerts_days: days("alerts_days", self.alerts_days, 1, default.alerts_days)?,
            jobs_days: days(
                "jobs_days",
                self.jobs_days,
                MIN_JOBS_DAYS,
                default.jobs_days,
            )?,
            idempotency_days: days(
                "idempotency_days",
                self.idempotency_days,
                1,
                default.idempotency_days,
            )?,
            enroll_tokens_days: days(
                "enroll_tokens_days",
                self.enroll_tokens_days,
                1,
                default.enroll_tokens_days,
            )?,
            history_days: match self.history_days {
                None => default.history_days,
                Some(days) if (1..=MAX_HISTORY_DAYS).contains(&days) => days,
                Some(days) => {
                    return Err(ConfigError::Invalid(format!(
                        "[retention] history_days must be 1 to {MAX_HISTORY_DAYS} days, not {days}"
                    )));
                }
            },
        })
    }
}

/// The `serve` settings given on the command line; `None` means "not given".
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--data`.
    pub data_dir: Option<PathBuf>,
    /// `--listen`.
    pub listen: Option<SocketAddr>,
    /// `--admin-listen`.
    pub admin_listen: Option<SocketAddr>,
    /// `--tls-cert` (clap makes it come with `--tls-key`).
    pub tls_cert: Option<PathBuf>,
    /// `--tls-key`.
    pub tls_key: Option<PathBuf>,
    /// `--poll-interval`.
    pub poll_interval_secs: Option<u64>,
    /// `--webhook`.
    pub webhook: Option<String>,
    /// `--silence-window`.
    pub silence_window_secs: Option<u64>,
    /// `--stopped-grace`.
    pub stopped_grace_secs: Option<u64>,
}

/// A config file that cannot be used, or settings that do not fit together.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Reading the file failed (it is missing, unreadable or too large).
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML for the hub.
    #[error("parsing {path}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why (names the line and key).
        #[source]
        source: Box<toml::de::Error>,
    },
    /// A value is out of range or settings contradict each other.
    #[error("{0}")]
    Invalid(String),
}

impl HubFile {
    /// Reads and parses a config file (at most 64 KiB).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let read = |source| ConfigError::Read {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read)?;
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(file, MAX_FILE_BYTES + 1),
            &mut text,
        )
        .map_err(read)?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(read(std::io::Error::other(format!(
                "larger than {MAX_FILE_BYTES} bytes"
            ))));
        }
        Self::parse(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source: Box::new(source),
        })
    }

    /// Parses a config file's text.
    pub fn parse(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }

    /// The data directory, from the flag or the file (`init` needs nothing else).
    pub fn data_dir(&self, flag: Option<PathBuf>) -> Result<PathBuf, ConfigError> {
        flag.or_else(|| self.data_dir.clone()).ok_or_else(|| {
            ConfigError::Invalid(
                "no data directory: pass --data or set data_dir in the config file".to_owned(),
            )
        })
    }

    /// The hub's settings: the flags over the file over the defaults, checked.
    pub fn resolve(self, flags: Overrides) -> Result<HubConfig, ConfigError> {
        let data_dir = self.data_dir(flags.data_dir)?;
        let listen = match flags.listen.or(self.listen.agent) {
            Some(listen) => listen,
            None => DEFAULT_AGENT_LISTEN
                .parse()
                .map_err(|_| ConfigError::Invalid("bad built-in listen address".to_owned()))?,
        };
        let admin_listen = flags.admin_listen.or(self.listen.admin);
        // Port 0 twice is two ephemeral ports, not one address.
        if admin_listen.is_some_and(|admin| admin == listen && listen.port() != 0) {
            return Err(ConfigError::Invalid(format!(
                "the admin listener {listen} is the agent listener: give it another address, \
                 or leave it out to serve both on one"
            )));
        }
        let (cert, key) = match (flags.tls_cert, flags.tls_key) {
            (Some(cert), Some(key)) => (Some(cert), Some(key)),
            _ => (self.tls.cert, self.tls.key),
        };
        let tls = match (cert, key) {
            (Some(cert), Some(key)) => TlsSource::Files { cert, key },
            (None, None) => TlsSource::SelfSigned,
            _ => {
                return Err(ConfigError::Invalid(
                    "[tls] needs both cert and key, or neither".to_owned(),
                ));
            }
        };
        let poll_interval = interval(
            "poll interval",
            flags.poll_interval_secs.or(self.agents.poll_interval_secs),
        )?;
        let silence_window = interval(
            "silence window",
            flags
                .silence_window_secs
                .or(self.alerts.silence_window_secs),
        )?;
        let stopped_grace = interval(
            "stop bound",
            flags.stopped_grace_secs.or(self.alerts.stopped_grace_secs),
        )?;
        let webhook = flags
            .webhook
            .or(self.alerts.webhook)
            .map(|url| checked_webhook(&url).map(|()| WebhookConfig::new(url)))
            .transpose()?;

        let retention = self.retention.resolve()?;
        let host_keys = self.agents.key_lifetime()?;
        let update_window = self
            .agents
            .update_window
            .as_deref()
            .map(parse_update_window)
            .transpose()?;
        let mut config = HubConfig::new(data_dir, listen);
        config.update_window = update_window;
        config.retention = retention;
        config.host_keys = host_keys;
        config.admin_listen = admin_listen;
        config.tls = tls;
        config.webhook = webhook;
        if let Some(poll_interval) = poll_interval {
            config.poll_interval = poll_interval;
        }
        if let Some(grace) = stopped_grace {
            config.dead_man.stopped_grace = grace;
        }
        if let Some(window) = silence_window {
            config.dead_man.silence_window = window;
            config.dead_man.sweep_interval = config
                .dead_man
                .sweep_interval
                .map(|sweep| sweep.min(window));
        }
        Ok(config)
    }
}

/// `HH:MM+MINUTES`, checked as the agent checks it.
fn parse_update_window(text: &str) -> Result<bosun_proto::poll::UpdateWindow, ConfigError> {
    let invalid = || {
        ConfigError::Invalid(format!(
            "[agents] update_window must be HH:MM+MINUTES (1 to 1440 minutes), not {text:?}"
        ))
    };
    let (start, minutes) = text.split_once('+').ok_or_else(invalid)?;
    let window = bosun_proto::poll::UpdateWindow {
        start: start.trim().to_owned(),
        duration_minutes: minutes.trim().parse().map_err(|_| invalid())?,
    };
    let probe = bosun_proto::poll::AgentConfig {
        poll_interval_seconds: bosun_proto::poll::MIN_POLL_INTERVAL_SECONDS,
        long_poll_seconds: 0,
        update_window: Some(window.clone()),
    };
    probe.validate().map_err(|_| invalid())?;
    Ok(window)
}

/// A number of seconds between 1 and a day.
fn interval(what: &str, secs: Option<u64>) -> Result<Option<Duration>, ConfigError> {
    match secs {
        None => Ok(None),
        Some(secs @ 1..=MAX_INTERVAL_SECS) => Ok(Some(Duration::from_secs(secs))),
        Some(secs) => Err(ConfigError::Invalid(format!(
            "the {what} must be 1 to {MAX_INTERVAL_SECS} seconds, not {secs}"
        ))),
    }
}

/// A webhook must be an absolute http(s) URL. The message never repeats the URL: webhook
/// URLs often carry a secret.
fn checked_webhook(url: &str) -> Result<(), ConfigError> {
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.has_host() => Ok(()),
        _ => Err(ConfigError::Invalid(
            "the alert webhook must be an absolute http:// or https:// URL".to_owned(),
        )),
    }
}

#[cfg(test)]
mod tests;
