//! `[tunnel]`'s managed part (decision 0082): where the agent writes the tunnel's
//! configuration, which units run the tunnel's replicas and how they are restarted.
//!
//! ```toml
//! [tunnel]
//! readiness_url = "http://127.0.0.1:20241/ready"      # watched (tunnel_down)
//! config_file = "/var/lib/bosun/tunnel/config.yml"     # the agent writes the ingress here
//! credentials_file = "/var/lib/bosun/tunnel/credentials.json"
//! restart_after = 3                                    # failed probes in a row, then restart
//! restart_timeout_ms = 30000                           # a restarted replica's time to be ready
//! systemctl = "/usr/bin/systemctl"
//!
//! [[tunnel.replica]]                                   # one per cloudflared unit
//! unit = "bosun-tunnel@20241.service"                 # the instance is its metrics port
//! metrics = "http://127.0.0.1:20241"                   # its --metrics address
//! ```
//!
//! Without `config_file` the tunnel is only watched, as before.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use url::{Host, Url};

use super::error::{ConfigError, invalid};

/// Most replicas.
pub const MAX_REPLICAS: usize = 4;

/// One cloudflared replica: its unit and its metrics server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    /// The systemd unit (`bosun-tunnel@20241.service`: the packaged unit's instance is the
    /// port of its `--metrics` address on loopback).
    pub unit: String,
    /// Its metrics server's base URL (loopback): `/ready` and `/metrics` below it.
    pub metrics: Url,
}

/// What the agent manages of the tunnel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedTunnel {
    /// The configuration file the agent owns.
    pub config_file: PathBuf,
    /// The credentials file the configuration names.
    pub credentials_file: PathBuf,
    /// The replicas, restarted one at a time.
    pub replicas: Vec<Replica>,
    /// Failed readiness probes in a row after which a replica is restarted.
    pub restart_after: u32,
    /// How long a restarted replica has to be ready again.
    pub restart_timeout: Duration,
    /// The `systemctl` program.
    pub systemctl: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReplica {
    unit: String,
    metrics: String,
}

/// The managed fields of `[tunnel]`.
#[derive(Debug, Deserialize, Default)]
pub(crate) struct RawManaged {
    pub(crate) config_file: Option<PathBuf>,
    pub(crate) credentials_file: Option<PathBuf>,
    pub(crate) restart_after: Option<u32>,
    pub(crate) restart_timeout_ms: Option<u64>,
    pub(crate) systemctl: Option<PathBuf>,
    #[serde(default)]
    pub(crate) replica: Vec<RawReplica>,
}

/// Whether `name` is a systemd service unit name Bosun may restart.
pub fn is_unit(name: &str) -> bool {
    name.len() <= 128
        && name.strip_suffix(".service").is_some_and(|stem| {
            !stem.is_empty()
                && !stem.starts_with('-')
                && stem
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "@._-".contains(c))
        })
}

/// A loopback `http://` URL, or why not.
pub(crate) fn loopback_url(field: &'static str, text: &str) -> Result<Url, ConfigError> {
    let url = Url::parse(text).map_err(|e| invalid(field, format!("is not a url: {e}")))?;
    if url.scheme() != "http" {
        return Err(invalid(
            field,
            "must be http:// (cloudflared's metrics server on loopback)",
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(field, "must not carry credentials"));
    }
    let loopback = match url.host() {
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        Some(Host::Domain(name)) => name == "localhost",
        None => false,
    };
    if !loopback {
        return Err(invalid(
            field,
            "must name a loopback address (127.0.0.1, ::1 or localhost)",
        ));
    }
    Ok(url)
}

impl RawManaged {
    pub(crate) fn settings(&self) -> Result<Option<ManagedTunnel>, ConfigError> {
        let Some(config_file) = self.config_file.clone() else {
            if !self.replica.is_empty() || self.credentials_file.is_some() {
                return Err(invalid(
                    "tunnel.config_file",
                    "replicas and a credentials file need the configuration file they serve",
                ));
            }
            return Ok(None);
        };
        let absolute = |field, path: &PathBuf| {
            if path.is_absolute() && path.file_name().is_some() {
                Ok(())
            } else {
                Err(invalid(field, "must be an absolute file path"))
            }
        };
        absolute("tunnel.config_file", &config_file)?;
        let credentials_file = self
            .credentials_file
            .clone()
            .ok_or_else(|| invalid("tunnel.credentials_file", "is required with config_file"))?;
        absolute("tunnel.credentials_file", &credentials_file)?;
        if self.replica.is_empty() || self.replica.len() > MAX_REPLICAS {
            return Err(invalid(
                "tunnel.replica",
                format!("name 1..={MAX_REPLICAS} replicas (unit and metrics)"),
            ));
        }
        let mut replicas = Vec::new();
        for raw in &self.replica {
            if !is_unit(&raw.unit) {
                return Err(invalid(
                    "tunnel.replica.unit",
                    "must be a service unit name (letters, digits, @ . _ -, ending .service)",
                ));
            }
            replicas.push(Replica {
                unit: raw.unit.clone(),
                metrics: loopback_url("tunnel.replica.metrics", &raw.metrics)?,
            });
        }
        let restart_after = self.restart_after.unwrap_or(3);
        if !(1..=100).contains(&restart_after) {
            return Err(invalid("tunnel.restart_after", "must be 1..=100"));
        }
        let ms = self.restart_timeout_ms.unwrap_or(30_000);
        if !(100..=600_000).contains(&ms) {
            return Err(invalid("tunnel.restart_timeout_ms", "must be 100..=600000"));
        }
        let systemctl = self
            .systemctl
            .clone()
            .unwrap_or_else(|| PathBuf::from("/usr/bin/systemctl"));
        absolute("tunnel.systemctl", &systemctl)?;
        Ok(Some(ManagedTunnel {
            config_file,
            credentials_file,
            replicas,
            restart_after,
            restart_timeout: Duration::from_millis(ms),
            systemctl,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn managed(text: &str) -> Result<Option<ManagedTunnel>, ConfigError> {
        toml::from_str::<RawManaged>(text).unwrap().settings()
    }

    fn field(err: ConfigError) -> &'static str {
        match err {
            ConfigError::Invalid { field, .. } => field,
            other => panic!("{other}"),
        }
    }

    #[test]
    fn the_managed_part_is_read_and_bounded() {
        assert_eq!(managed("").unwrap(), None);
        let full = r#"
            config_file = "/var/lib/bosun/tunnel/config.yml"
            credentials_file = "/var/lib/bosun/tunnel/credentials.json"
            [[replica]]
            unit = "bosun-tunnel@a.service"
            metrics = "http://127.0.0.1:20241"
        "#;
        let m = managed(full).unwrap().unwrap();
        assert_eq!(m.restart_after, 3);
        assert_eq!(m.replicas[0].unit, "bosun-tunnel@a.service");
        for (text, f) in [
            (
                full.replace("bosun-tunnel@a.service", "sshd; reboot"),
                "tunnel.replica.unit",
            ),
            (
                full.replace("bosun-tunnel@a.service", "bosun.socket"),
                "tunnel.replica.unit",
            ),
            (
                full.replace("127.0.0.1:20241", "10.0.0.1:20241"),
                "tunnel.replica.metrics",
            ),
            (
                full.replace("/var/lib/bosun/tunnel/config.yml", "config.yml"),
                "tunnel.config_file",
            ),
            (format!("restart_after = 0\n{full}"), "tunnel.restart_after"),
            (
                full.replace("credentials_file", "#"),
                "tunnel.credentials_file",
            ),
            (full.replace("config_file", "#"), "tunnel.config_file"),
        ] {
            assert_eq!(field(managed(&text).unwrap_err()), f, "{text}");
        }
    }
}
