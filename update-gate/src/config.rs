//! The gate's configuration: fixed at install time, like the helper's (decision 0006).
//!
//! The file is `<prefix>/etc/bosun/update-gate.json`, where `<prefix>` is what precedes
//! `usr/libexec/bosun/bosun-update-gate` in the gate's own resolved path; installed
//! normally that is `/etc/bosun/update-gate.json`. It is optional (the defaults are the
//! production layout), but when present it and every directory above it must be owned by
//! root and not writable by group or others, and so must the slots root and `systemctl`.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Installed location of the gate, relative to the prefix.
pub const INSTALLED_SUFFIX: &str = "usr/libexec/bosun/bosun-update-gate";
/// Location of the configuration file, relative to the prefix.
pub const CONFIG_SUFFIX: &str = "etc/bosun/update-gate.json";
const MAX_CONFIG_BYTES: u64 = 16 * 1024;

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Reading the file or an ancestor's metadata failed.
    #[error("reading {path}")]
    Read {
        /// The path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// A file or directory that decides what root does is not root-controlled.
    #[error(
        "{path} must be owned by root and not writable by group or others (uid {uid}, mode {mode:o})"
    )]
    Insecure {
        /// The path.
        path: PathBuf,
        /// Its owner.
        uid: u32,
        /// Its mode.
        mode: u32,
    },
    /// The file is not valid JSON for [`Config`].
    #[error("parsing {path}")]
    Parse {
        /// The path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
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
    let text = exe.to_string_lossy();
    let prefix = text
        .strip_suffix(INSTALLED_SUFFIX)
        .filter(|p| p.ends_with('/'))
        .unwrap_or("/");
    PathBuf::from(format!("{prefix}{CONFIG_SUFFIX}"))
}

/// Loads the configuration of the running gate.
pub fn load() -> Result<Config, ConfigError> {
    let exe = std::fs::read_link("/proc/self/exe").map_err(|source| ConfigError::Read {
        path: "/proc/self/exe".into(),
        source,
    })?;
    load_from(&config_path_for(&exe))
}

/// Loads the configuration at `path` (defaults when it is absent).
pub fn load_from(path: &Path) -> Result<Config, ConfigError> {
    let config = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Config::default(),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.into(),
                source,
            });
        }
        Ok(_) => {
            check_root_controlled(path)?;
            let read_err = |source| ConfigError::Read {
                path: path.into(),
                source,
            };
            let meta = std::fs::metadata(path).map_err(read_err)?;
            if meta.len() > MAX_CONFIG_BYTES {
                return Err(read_err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "larger than 16 KiB",
                )));
            }
            let text = std::fs::read(path).map_err(read_err)?;
            serde_json::from_slice(&text).map_err(|source| ConfigError::Parse {
                path: path.into(),
                source,
            })?
        }
    };
    config.check()?;
    for decisive in [&config.slots_root, &config.systemctl] {
        if std::fs::symlink_metadata(decisive).is_ok() {
            check_root_controlled(decisive)?;
        }
    }
    Ok(config)
}

/// Refuses `path` unless it and every directory above it are owned by root, are not
/// symlinks, and are not writable by group or others (a sticky directory excepted).
fn check_root_controlled(path: &Path) -> Result<(), ConfigError> {
    let mut ancestor = Some(path);
    while let Some(p) = ancestor {
        let meta = std::fs::symlink_metadata(p).map_err(|source| ConfigError::Read {
            path: p.into(),
            source,
        })?;
        let sticky_dir = meta.is_dir() && meta.mode() & 0o1000 != 0;
        let writable = meta.mode() & 0o022 != 0;
        if meta.uid() != 0 || meta.file_type().is_symlink() || (writable && !sticky_dir) {
            return Err(ConfigError::Insecure {
                path: p.into(),
                uid: meta.uid(),
                mode: meta.mode(),
            });
        }
        ancestor = p.parent();
    }
    Ok(())
}
