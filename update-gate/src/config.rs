//! The gate's configuration: fixed at install time, like the helper's (decision 0006).
//!
//! The file is `<prefix>/etc/bosun/update-gate.json`, where `<prefix>` is what precedes
//! `usr/libexec/bosun/bosun-update-gate` in the gate's own resolved path; installed
//! normally that is `/etc/bosun/update-gate.json`. It is optional (the defaults are the
//! production layout), but when present it and every directory above it must be owned by
//! root and not writable by group or others, and so must the slots root and `systemctl`
//! (checked by [`bosun_rootconf`], the loader the helper uses too).

use std::path::{Path, PathBuf};

use bosun_rootconf::{Layout, RootConfError};
use serde::Deserialize;

/// Installed location of the gate, relative to the prefix.
pub const INSTALLED_SUFFIX: &str = "usr/libexec/bosun/bosun-update-gate";
/// Location of the configuration file, relative to the prefix.
pub const CONFIG_SUFFIX: &str = "etc/bosun/update-gate.json";
/// Both, for the shared loader.
const LAYOUT: Layout = Layout {
    installed: INSTALLED_SUFFIX,
    config: CONFIG_SUFFIX,
};

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file, the slots root or `systemctl` could not be read or is not
    /// root-controlled, or the file is not valid JSON for [`Config`].
    #[error(transparent)]
    File(#[from] RootConfError),
    /// A setting is out of range.
    #[error("{key}: {reason}")]
    Invalid {
        /// The setting.
        key: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
}

/// The gate's settings. Times are in milliseconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The agent's slots, `current` link and update record.
    pub slots_root: PathBuf,
    /// The agent's unit.
    pub agent_unit: String,
    /// `systemctl`, run by absolute path.
    pub systemctl: PathBuf,
    /// The agent's mark of its last successful hub poll.
    pub poll_mark: PathBuf,
    /// How long the new agent must stay healthy before it is committed.
    pub health_window_ms: u64,
    /// The new agent must be ready (systemd saw `READY=1`) within this.
    pub ready_timeout_ms: u64,
    /// The new agent must complete a hub poll within this.
    pub poll_timeout_ms: u64,
    /// More restarts than this within the window is a crash loop.
    pub max_restarts: u64,
    /// How often the gate looks.
    pub check_interval_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            slots_root: bosun_proto::update::DEFAULT_SLOTS_ROOT.into(),
            agent_unit: "bosun-agentd.service".into(),
            systemctl: "/usr/bin/systemctl".into(),
            poll_mark: "/var/lib/bosun/update/poll-ok.json".into(),
            health_window_ms: 120_000,
            ready_timeout_ms: 60_000,
            poll_timeout_ms: 90_000,
            max_restarts: 2,
            check_interval_ms: 1_000,
        }
    }
}

impl Config {
    fn check(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason| Err(ConfigError::Invalid { key, reason });
        if !self.slots_root.is_absolute() || !self.systemctl.is_absolute() {
            return invalid("slots_root, systemctl", "must be absolute paths");
        }
        if !self.poll_mark.is_absolute() {
            return invalid("poll_mark", "must be an absolute path");
        }
        let unit_ok = self.agent_unit.ends_with(".service")
            && self
                .agent_unit
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'@'));
        if !unit_ok {
            return invalid("agent_unit", "must be a service unit name");
        }
        if !(1_000..=86_400_000).contains(&self.health_window_ms) {
            return invalid("health_window_ms", "must be 1 s to 24 h");
        }
        if self.ready_timeout_ms > self.health_window_ms
            || self.poll_timeout_ms > self.health_window_ms
        {
            return invalid(
                "ready_timeout_ms, poll_timeout_ms",
                "must not exceed the health window",
            );
        }
        if !(10..=60_000).contains(&self.check_interval_ms) {
            return invalid("check_interval_ms", "must be 10 ms to 60 s");
        }
        Ok(())
    }
}

/// Where the configuration of a gate installed at `exe` lives.
pub fn config_path_for(exe: &Path) -> PathBuf {
    LAYOUT.config_path_for(exe)
}

/// Loads the configuration of the running gate.
pub fn load() -> Result<Config, ConfigError> {
    load_from(&LAYOUT.own_config_path()?)
}

/// Loads the configuration at `path` (defaults when it is absent).
pub fn load_from(path: &Path) -> Result<Config, ConfigError> {
    let config: Config = bosun_rootconf::load_or_default(path)?;
    config.check()?;
    for decisive in [&config.slots_root, &config.systemctl] {
        if std::fs::symlink_metadata(decisive).is_ok() {
            bosun_rootconf::check_root_controlled(decisive)?;
        }
    }
    Ok(config)
}
