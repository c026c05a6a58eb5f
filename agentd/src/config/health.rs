//! The `[health]` and `[tunnel]` sections of the agent's config file.
//!
//! ```toml
//! [health]                                  # absent: these defaults
//! interval_ms = 30000                       # node status sampled this often (100–3600000)
//! samples = 3                               # readings at or above high before raising (1–100)
//! cpu_high_percent = 90                     # raised at or above (1–100) …
//! cpu_low_percent = 75                      # … cleared at or below (0–99, below high)
//! memory_high_percent = 90
//! memory_low_percent = 80
//! disk_high_percent = 90
//! disk_low_percent = 80
//! smart_devices = ["/dev/sda", "/dev/nvme0n1"]  # read through the helper (needs [helper])
//! smart_interval_ms = 3600000               # SMART read this often (100–604800000), the
//!                                           # node's disks through Proxmox's disk API too
//! pool_high_percent = 90                    # an LVM-thin or ZFS pool's data or metadata fill
//! pool_low_percent = 80                     # raised at or above, cleared at or below
//! wear_percent = 80                         # a disk with this much wear used is worn (1–100)
//! hwmon_dir = "/sys/class/hwmon"            # the node's temperature sensors (read as is)
//! temperature_high_c = 85                   # a sensor with no limit of its own is too hot at
//!                                           # or above this (20–150; absent: not judged)
//! temperature_hysteresis_c = 5              # cleared this far below its high (1–30)
//!
//! [tunnel]                                  # absent: no tunnel watched
//! readiness_url = "http://127.0.0.1:20241/ready"  # cloudflared's --metrics address; loopback
//! interval_ms = 5000                        # probed this often (100–600000)
//! timeout_ms = 2000                         # one probe, answer included (100–30000)
//! down_after_ms = 60000                     # down this long before it is raised (0–86400000)
//! ```

use std::path::PathBuf;
use std::time::Duration;

use bosun_proto::helper::BlockDevice;
use serde::Deserialize;
use url::Url;

use super::error::ConfigError;

/// Host-health sampling and thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthSettings {
    /// How often the node status is sampled.
    pub interval: Duration,
    /// Consecutive readings at or above `high` before a gauge is raised.
    pub samples: u32,
    /// CPU usage thresholds.
    pub cpu: Thresholds,
    /// Memory thresholds.
    pub memory: Thresholds,
    /// Root-disk thresholds.
    pub disk: Thresholds,
    /// Disks whose SMART status is read through the helper.
    pub smart_devices: Vec<BlockDevice>,
    /// How often they are read, and the node's disks through Proxmox's disk API.
    pub smart_interval: Duration,
    /// LVM-thin and ZFS pool fill thresholds (data and metadata alike).
    pub pool: Thresholds,
    /// Wear used, in percent, at or above which a disk is worn.
    pub wear_percent: u8,
    /// Where the kernel lists its hardware monitors (temperatures).
    pub hwmon_dir: std::path::PathBuf,
    /// The high of a sensor whose chip gives neither a `max` nor a `crit`, in °C; such a
    /// sensor is not judged without it.
    pub temperature_high_c: Option<u16>,
    /// How far below its high a hot sensor clears, in °C.
    pub temperature_hysteresis_c: u16,
}

/// A gauge's thresholds, as shares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Raised at or above this share (after `samples` readings).
    pub high: f64,
    /// Cleared at or below this share.
    pub low: f64,
}

/// The tunnel's readiness endpoint and its bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelSettings {
    /// `http://` on loopback.
    pub readiness_url: Url,
    /// How often it is probed.
    pub interval: Duration,
    /// Longest one probe may take.
    pub timeout: Duration,
    /// How long it must be down before it is raised.
    pub down_after: Duration,
    /// What the agent manages of it (configuration, restarts); `None`: only watched.
    pub managed: Option<super::tunnel::ManagedTunnel>,
}

/// Most disks `smart_devices` may name.
pub const MAX_SMART_DEVICES: usize = bosun_proto::health::MAX_SMART_DEVICES;

impl Default for HealthSettings {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(30),
            samples: 3,
            cpu: Thresholds {
                high: 0.90,
                low: 0.75,
            },
            memory: Thresholds {
                high: 0.90,
                low: 0.80,
            },
            disk: Thresholds {
                high: 0.90,
                low: 0.80,
            },
            smart_devices: Vec::new(),
            smart_interval: Duration::from_secs(3600),
            pool: Thresholds {
                high: 0.90,
                low: 0.80,
            },
            wear_percent: 80,
            hwmon_dir: std::path::PathBuf::from("/sys/class/hwmon"),
            temperature_high_c: None,
            temperature_hysteresis_c: 5,
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHealth {
    interval_ms: Option<u64>,
    samples: Option<u32>,
    cpu_high_percent: Option<u8>,
    cpu_low_percent: Option<u8>,
    memory_high_percent: Option<u8>,
    memory_low_percent: Option<u8>,
    disk_high_percent: Option<u8>,
    disk_low_percent: Option<u8>,
    #[serde(default)]
    smart_devices: Vec<String>,
    smart_interval_ms: Option<u64>,
    pool_high_percent: Option<u8>,
    pool_low_percent: Option<u8>,
    wear_percent: Option<u8>,
    hwmon_dir: Option<std::path::PathBuf>,
    temperature_high_c: Option<u16>,
    temperature_hysteresis_c: Option<u16>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTunnel {
    readiness_url: String,
    interval_ms: Option<u64>,
    timeout_ms: Option<u64>,
    down_after_ms: Option<u64>,
    config_file: Option<PathBuf>,
    credentials_file: Option<PathBuf>,
    restart_after: Option<u32>,
    restart_timeout_ms: Option<u64>,
    systemctl: Option<PathBuf>,
    #[serde(default)]
    replica: Vec<super::tunnel::RawReplica>,
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.into(),
    }
}

fn millis(
    field: &'static str,
    value: Option<u64>,
    default: Duration,
    min: u64,
    max: u64,
) -> Result<Duration, ConfigError> {
    let ms = value.unwrap_or(u64::try_from(default.as_millis()).unwrap_or(u64::MAX));
    if !(min..=max).contains(&ms) {
        return Err(invalid(field, format!("{ms} is outside {min}..={max}")));
    }
    Ok(Duration::from_millis(ms))
}

fn thresholds(
    high_field: &'static str,
    low_field: &'static str,
    high: Option<u8>,
    low: Option<u8>,
    default: Thresholds,
) -> Result<Thresholds, ConfigError> {
    let percent = |share: f64| (share * 100.0).round();
    let high = high.map_or(percent(default.high), f64::from);
    let low = low.map_or(percent(default.low), f64::from);
    if !(1.0..=100.0).contains(&high) {
        return Err(invalid(high_field, format!("{high} is outside 1..=100")));
    }
    if low >= high {
        return Err(invalid(
            low_field,
            format!("{low} must be below the high threshold ({high})"),
        ));
    }
    Ok(Thresholds {
        high: high / 100.0,
        low: low / 100.0,
    })
}

impl RawHealth {
    /// The settings; `has_helper` says whether SMART can be read at all.
    pub(crate) fn settings(&self, has_helper: bool) -> Result<HealthSettings, ConfigError> {
        let d = HealthSettings::default();
        let samples = self.samples.unwrap_or(d.samples);
        if !(1..=100).contains(&samples) {
            return Err(invalid(
                "health.samples",
                format!("{samples} is outside 1..=100"),
            ));
        }
        if self.smart_devices.len() > MAX_SMART_DEVICES {
            return Err(invalid(
                "health.smart_devices",
                format!(
                    "names {} disks; at most {MAX_SMART_DEVICES}",
                    self.smart_devices.len()
                ),
            ));
        }
        let mut smart_devices: Vec<BlockDevice> = Vec::with_capacity(self.smart_devices.len());
        for device in &self.smart_devices {
            let device = BlockDevice::new(device.clone())
                .map_err(|e| invalid("health.smart_devices", e.to_string()))?;
            if smart_devices.contains(&device) {
                return Err(invalid(
                    "health.smart_devices",
                    format!("names {} twice", device.as_str()),
                ));
            }
            smart_devices.push(device);
        }
        if !smart_devices.is_empty() && !has_helper {
            return Err(invalid(
                "health.smart_devices",
                "SMART is read through the helper: configure [helper] too",
            ));
        }
        Ok(HealthSettings {
            interval: millis(
                "health.interval_ms",
                self.interval_ms,
                d.interval,
                100,
                3_600_000,
            )?,
            samples,
            cpu: thresholds(
                "health.cpu_high_percent",
                "health.cpu_low_percent",
                self.cpu_high_percent,
                self.cpu_low_percent,
                d.cpu,
            )?,
            memory: thresholds(
                "health.memory_high_percent",
                "health.memory_low_percent",
                self.memory_high_percent,
                self.memory_low_percent,
                d.memory,
            )?,
            disk: thresholds(
                "health.disk_high_percent",
                "health.disk_low_percent",
                self.disk_high_percent,
                self.disk_low_percent,
                d.disk,
            )?,
            smart_devices,
            smart_interval: millis(
                "health.smart_interval_ms",
                self.smart_interval_ms,
                d.smart_interval,
                100,
                604_800_000,
            )?,
            pool: thresholds(
                "health.pool_high_percent",
                "health.pool_low_percent",
                self.pool_high_percent,
                self.pool_low_percent,
                d.pool,
            )?,
            wear_percent: self.wear_percent(d.wear_percent)?,
            hwmon_dir: self.hwmon_dir(d.hwmon_dir)?,
            temperature_high_c: self.temperature_high_c()?,
            temperature_hysteresis_c: self.temperature_hysteresis_c(d.temperature_hysteresis_c)?,
        })
    }

    fn temperature_high_c(&self) -> Result<Option<u16>, ConfigError> {
        match self.temperature_high_c {
            Some(high) if !(20..=150).contains(&high) => Err(invalid(
                "health.temperature_high_c",
                format!("{high} is outside 20..=150"),
            )),
            high => Ok(high),
        }
    }

    fn temperature_hysteresis_c(&self, default: u16) -> Result<u16, ConfigError> {
        let hysteresis = self.temperature_hysteresis_c.unwrap_or(default);
        if !(1..=30).contains(&hysteresis) {
            return Err(invalid(
                "health.temperature_hysteresis_c",
                format!("{hysteresis} is outside 1..=30"),
            ));
        }
        Ok(hysteresis)
    }

    fn wear_percent(&self, default: u8) -> Result<u8, ConfigError> {
        let wear = self.wear_percent.unwrap_or(default);
        if !(1..=100).contains(&wear) {
            return Err(invalid(
                "health.wear_percent",
                format!("{wear} is outside 1..=100"),
            ));
        }
        Ok(wear)
    }

    fn hwmon_dir(&self, default: std::path::PathBuf) -> Result<std::path::PathBuf, ConfigError> {
        let dir = self.hwmon_dir.clone().unwrap_or(default);
        if !dir.is_absolute() {
            return Err(invalid("health.hwmon_dir", "must be an absolute path"));
        }
        Ok(dir)
    }
}

impl RawTunnel {
    pub(crate) fn settings(mut self) -> Result<TunnelSettings, ConfigError> {
        let url = super::tunnel::loopback_url("tunnel.readiness_url", &self.readiness_url)?;
        let managed = super::tunnel::RawManaged {
            config_file: self.config_file.clone(),
            credentials_file: self.credentials_file.clone(),
            restart_after: self.restart_after,
            restart_timeout_ms: self.restart_timeout_ms,
            systemctl: self.systemctl.clone(),
            replica: std::mem::take(&mut self.replica),
        }
        .settings()?;
        Ok(TunnelSettings {
            managed,
            readiness_url: url,
            interval: millis(
                "tunnel.interval_ms",
                self.interval_ms,
                Duration::from_secs(5),
                100,
                600_000,
            )?,
            timeout: millis(
                "tunnel.timeout_ms",
                self.timeout_ms,
                Duration::from_secs(2),
                100,
                30_000,
            )?,
            down_after: millis(
                "tunnel.down_after_ms",
                self.down_after_ms,
                Duration::from_secs(60),
                0,
                86_400_000,
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(text: &str) -> Result<HealthSettings, ConfigError> {
        toml::from_str::<RawHealth>(text).unwrap().settings(true)
    }

    fn tunnel(text: &str) -> Result<TunnelSettings, ConfigError> {
        toml::from_str::<RawTunnel>(text).unwrap().settings()
    }

    fn field(e: ConfigError) -> &'static str {
        match e {
            ConfigError::Invalid { field, .. } => field,
            other => panic!("not an invalid value: {other:?}"),
        }
    }

    #[test]
    fn defaults_and_percentages_as_shares() {
        assert_eq!(health("").unwrap(), HealthSettings::default());
        let s = health("cpu_high_percent = 80\ncpu_low_percent = 50\nsamples = 1\n").unwrap();
        assert_eq!(
            s.cpu,
            Thresholds {
                high: 0.8,
                low: 0.5
            }
        );
        assert_eq!(s.samples, 1);
    }

    #[test]
    fn out_of_range_values_are_refused_by_name() {
        let cases = [
            ("samples = 0", "health.samples"),
            ("samples = 101", "health.samples"),
            ("cpu_high_percent = 0", "health.cpu_high_percent"),
            ("cpu_high_percent = 101", "health.cpu_high_percent"),
            ("memory_low_percent = 90", "health.memory_low_percent"),
            ("disk_high_percent = 70", "health.disk_low_percent"),
            ("interval_ms = 50", "health.interval_ms"),
            (
                "smart_interval_ms = 999999999999",
                "health.smart_interval_ms",
            ),
            (
                "smart_devices = [\"/dev/../etc/shadow\"]",
                "health.smart_devices",
            ),
            (
                "smart_devices = [\"/dev/sda\", \"/dev/sda\"]",
                "health.smart_devices",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(field(health(text).unwrap_err()), expected, "{text}");
        }
        let many: Vec<String> = (0..=MAX_SMART_DEVICES)
            .map(|i| format!("\"/dev/sd{i}\""))
            .collect();
        let text = format!("smart_devices = [{}]", many.join(","));
        assert_eq!(field(health(&text).unwrap_err()), "health.smart_devices");
        assert!(
            toml::from_str::<RawHealth>("cpu_high_percent = 300").is_err(),
            "a u8"
        );
        assert!(toml::from_str::<RawHealth>("bogus = 1").is_err(), "strict");
    }

    #[test]
    fn smart_needs_the_helper() {
        let raw: RawHealth = toml::from_str("smart_devices = [\"/dev/sda\"]").unwrap();
        assert_eq!(
            field(raw.settings(false).unwrap_err()),
            "health.smart_devices"
        );
        assert_eq!(raw.settings(true).unwrap().smart_devices.len(), 1);
    }

    #[test]
    fn the_readiness_url_is_plain_http_on_loopback() {
        let ok = tunnel("readiness_url = \"http://127.0.0.1:20241/ready\"").unwrap();
        assert_eq!(ok.down_after, Duration::from_secs(60));
        assert!(tunnel("readiness_url = \"http://[::1]:1/ready\"").is_ok());
        assert!(tunnel("readiness_url = \"http://localhost:1/ready\"").is_ok());
        for bad in [
            "http://10.0.0.1:20241/ready",
            "http://example.com/ready",
            "https://127.0.0.1:20241/ready",
            "http://user:pw@127.0.0.1:1/ready",
            "file:///etc/shadow",
            "not a url",
        ] {
            let text = format!("readiness_url = {bad:?}");
            assert_eq!(
                field(tunnel(&text).unwrap_err()),
                "tunnel.readiness_url",
                "{bad}"
            );
        }
        let text = "readiness_url = \"http://127.0.0.1:1/\"\ntimeout_ms = 60000";
        assert_eq!(field(tunnel(text).unwrap_err()), "tunnel.timeout_ms");
        assert!(
            toml::from_str::<RawTunnel>("interval_ms = 100").is_err(),
            "the url is required"
        );
    }
}
