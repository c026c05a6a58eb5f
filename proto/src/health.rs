//! Host health as the agent judges it (`host_health` in a [`StateReport`]): CPU, memory and
//! root-disk use from Proxmox's node status against the agent's thresholds, and the SMART
//! reading of each disk it watches.
//!
//! The agent applies the hysteresis (raised after `samples` readings at or above `high`,
//! cleared at or below `low`) and says so in `raised`; the hub holds one alert open per
//! raised gauge and per failing disk and resolves it when the report says it cleared.
//!
//! [`StateReport`]: crate::report::StateReport

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::validate::{self, ValidationError};

/// Most disks one report may carry SMART readings for.
pub const MAX_SMART_DEVICES: usize = 64;
/// Longest device path in a SMART reading.
pub const MAX_DEVICE_LEN: usize = 255;
/// Longest human detail in a SMART reading or tunnel health.
pub const MAX_DETAIL_LEN: usize = 1024;

/// The host's health.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostHealth {
    /// CPU usage (share of all CPUs), when sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<GaugeHealth>,
    /// Memory in use (share of the total), when sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<GaugeHealth>,
    /// Root filesystem in use (share of its size), when sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<GaugeHealth>,
    /// The 1, 5 and 15 minute load averages, when Proxmox gave them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_avg: Option<[f64; 3]>,
    /// Why the last node-status sample failed, if it did (the gauges keep their last values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_error: Option<String>,
    /// The SMART reading of every disk the agent watches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub smart: Vec<SmartReading>,
    /// The gauges of every guest with thresholds ([`crate::hardware::GuestHealth`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guests: Vec<crate::hardware::GuestHealth>,
    /// Every disk of the node as Proxmox's disk API reads it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<crate::hardware::DiskHealth>,
    /// The LVM-thin and ZFS pools of the node with their fill.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<crate::hardware::PoolHealth>,
    /// The node's temperature sensors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub temperatures: Vec<crate::hardware::Temperature>,
}

/// One gauge against its thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GaugeHealth {
    /// The last reading, a share in `0.0..=1.0`.
    pub usage: f64,
    /// The share at or above which readings count toward raising.
    pub high: f64,
    /// The share at or below which a raised gauge clears.
    pub low: f64,
    /// Whether the gauge is raised (the hub holds an alert open while it is).
    pub raised: bool,
    /// When it was raised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
}

/// The SMART reading of one disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SmartReading {
    /// The disk (`/dev/sda`).
    pub device: String,
    /// What the reading says.
    pub state: SmartState,
    /// Short human detail (the failing checks, or why there is no reading).
    #[serde(default)]
    pub detail: String,
    /// When it was read.
    pub checked_at: Timestamp,
}

/// What a SMART reading says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SmartState {
    /// The disk passed its SMART health self-assessment.
    Passed,
    /// The disk says it is failing (or an attribute is at or past its threshold).
    Failing,
    /// No reading: the helper or `smartctl` could not read the disk.
    Unreadable,
    /// Anything this hub version does not know.
    #[serde(other)]
    Unknown,
}

impl SmartState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Failing => "failing",
            Self::Unreadable => "unreadable",
            Self::Unknown => "unknown",
        }
    }
}

impl HostHealth {
    /// Checks the values the hub repeats and computes with.
    pub fn validate(&self) -> Result<(), ValidationError> {
        for (name, gauge) in [
            ("cpu", &self.cpu),
            ("memory", &self.memory),
            ("disk", &self.disk),
        ] {
            if let Some(gauge) = gauge {
                gauge.validate(name)?;
            }
        }
        if let Some(load) = &self.load_avg
            && load.iter().any(|l| !l.is_finite() || *l < 0.0)
        {
            return Err(ValidationError::Invalid {
                field: "host_health.load_avg".into(),
                reason: "load averages are finite and not negative".into(),
            });
        }
        if let Some(error) = &self.sample_error {
            validate::text(|| "host_health.sample_error".into(), error, MAX_DETAIL_LEN)?;
        }
        validate::count("host_health.smart", self.smart.len(), MAX_SMART_DEVICES)?;
        let mut seen = std::collections::BTreeSet::new();
        for (i, reading) in self.smart.iter().enumerate() {
            validate::text(
                || format!("host_health.smart[{i}].device"),
                &reading.device,
                MAX_DEVICE_LEN,
            )?;
            detail(|| format!("host_health.smart[{i}].detail"), &reading.detail)?;
            if !seen.insert(reading.device.as_str()) {
                return Err(ValidationError::Duplicate {
                    field: "host_health.smart".into(),
                    value: reading.device.clone(),
                });
            }
        }
        crate::hardware::validate_guests(&self.guests)?;
        crate::hardware::validate_disks(&self.disks)?;
        crate::hardware::validate_pools(&self.pools)?;
        crate::hardware::validate_temperatures(&self.temperatures)?;
        Ok(())
    }
}

impl GaugeHealth {
    /// Checks the shares; errors name `host_health.<name>.<field>`.
    pub(crate) fn validate(&self, name: &str) -> Result<(), ValidationError> {
        for (what, value) in [
            ("usage", self.usage),
            ("high", self.high),
            ("low", self.low),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(ValidationError::Invalid {
                    field: format!("host_health.{name}.{what}"),
                    reason: format!("{value} is not a share between 0 and 1"),
                });
            }
        }
        if self.low > self.high {
            return Err(ValidationError::Invalid {
                field: format!("host_health.{name}.low"),
                reason: "must not be above high".into(),
            });
        }
        Ok(())
    }
}

/// Checks a human detail that may be empty: at most [`MAX_DETAIL_LEN`] bytes, no control
/// characters.
pub(crate) fn detail(field: impl Fn() -> String, value: &str) -> Result<(), ValidationError> {
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > MAX_DETAIL_LEN {
        return Err(ValidationError::TooLong {
            field: field(),
            len: value.len(),
            max: MAX_DETAIL_LEN,
        });
    }
    if value.chars().any(crate::inert::is_control) {
        return Err(ValidationError::Invalid {
            field: field(),
            reason: "contains control characters".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauge(usage: f64) -> GaugeHealth {
        GaugeHealth {
            usage,
            high: 0.9,
            low: 0.8,
            raised: false,
            since: None,
        }
    }

    fn reading(device: &str, detail: &str) -> SmartReading {
        SmartReading {
            device: device.into(),
            state: SmartState::Passed,
            detail: detail.into(),
            checked_at: Timestamp::UNIX_EPOCH,
        }
    }

    #[test]
    fn shares_outside_zero_to_one_and_nan_are_refused() {
        let ok = HostHealth {
            cpu: Some(gauge(0.5)),
            ..HostHealth::default()
        };
        assert!(ok.validate().is_ok());
        for bad in [f64::NAN, -0.1, 1.5, f64::INFINITY] {
            let health = HostHealth {
                memory: Some(gauge(bad)),
                ..HostHealth::default()
            };
            let err = health.validate().unwrap_err();
            assert_eq!(err.field(), "host_health.memory.usage", "{bad}");
        }
        let inverted = HostHealth {
            disk: Some(GaugeHealth {
                low: 0.95,
                ..gauge(0.5)
            }),
            ..HostHealth::default()
        };
        assert_eq!(
            inverted.validate().unwrap_err().field(),
            "host_health.disk.low"
        );
        let load = HostHealth {
            load_avg: Some([0.1, f64::NAN, 0.0]),
            ..HostHealth::default()
        };
        assert!(load.validate().is_err());
    }

    #[test]
    fn smart_readings_are_bounded_and_unique() {
        let many = HostHealth {
            smart: (0..=MAX_SMART_DEVICES)
                .map(|i| reading(&format!("/dev/sd{i}"), ""))
                .collect(),
            ..HostHealth::default()
        };
        assert!(matches!(
            many.validate(),
            Err(ValidationError::TooLong { .. })
        ));
        let twice = HostHealth {
            smart: vec![reading("/dev/sda", ""), reading("/dev/sda", "")],
            ..HostHealth::default()
        };
        assert!(matches!(
            twice.validate(),
            Err(ValidationError::Duplicate { .. })
        ));
        let long = HostHealth {
            smart: vec![reading("/dev/sda", &"x".repeat(MAX_DETAIL_LEN + 1))],
            ..HostHealth::default()
        };
        assert!(long.validate().is_err());
        let control = HostHealth {
            smart: vec![reading("/dev/sda", "bad\u{1b}[31m")],
            ..HostHealth::default()
        };
        assert!(control.validate().is_err());
    }

    #[test]
    fn an_unknown_smart_state_decodes_as_unknown() {
        let r: SmartReading = serde_json::from_str(
            r#"{"device":"/dev/sda","state":"melting","checked_at":"2026-01-01T00:00:00Z"}"#,
        )
        .unwrap();
        assert_eq!(r.state, SmartState::Unknown);
    }
}
