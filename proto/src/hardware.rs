//! The node's hardware and its guests' usage as the agent judges them, carried in
//! [`HostHealth`](crate::health::HostHealth): each watched guest's gauges against its own
//! thresholds, each disk's health from Proxmox's disk API (health, wear, failing attributes),
//! the LVM-thin and ZFS pools guests live on (data and metadata fill against the agent's pool
//! thresholds), and the node's temperature sensors.
//!
//! Everything here comes from a host, and through it from Proxmox and the kernel: names,
//! models and attribute texts are data, bounded here and escaped wherever they are shown.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::health::{GaugeHealth, SmartState, detail};
use crate::validate::{self, ValidationError};

/// Most watched guests one report may carry gauges for.
pub const MAX_GUEST_GAUGES: usize = crate::desired::MAX_GUESTS;
/// Most disks one report may carry.
pub const MAX_DISKS: usize = 64;
/// Most failing attributes one disk may list.
pub const MAX_FAILING_ATTRIBUTES: usize = 16;
/// Most pools one report may carry.
pub const MAX_POOLS: usize = 32;
/// Most temperature sensors one report may carry.
pub const MAX_SENSORS: usize = 64;
/// Longest name (device, pool, sensor, model, attribute).
pub const MAX_NAME_LEN: usize = 255;

/// One watched guest's gauges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GuestHealth {
    /// The guest.
    pub guest_id: Uuid,
    /// Its vmid on the node.
    pub vmid: u32,
    /// CPU usage (share of its cores), when its thresholds watch it and it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<GaugeHealth>,
    /// Memory in use (share of its limit), likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<GaugeHealth>,
    /// Root disk in use (share of its size), likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<GaugeHealth>,
}

impl GuestHealth {
    /// The gauges with their names (`cpu`, `memory`, `disk`).
    pub fn gauges(&self) -> [(&'static str, Option<&GaugeHealth>); 3] {
        [
            ("cpu", self.cpu.as_ref()),
            ("memory", self.memory.as_ref()),
            ("disk", self.disk.as_ref()),
        ]
    }
}

/// One disk of the node as Proxmox's disk API reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DiskHealth {
    /// The disk (`/dev/sda`).
    pub device: String,
    /// Its model, when Proxmox knows it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// `hdd`, `ssd`, `nvme`, `usb`, … as Proxmox says.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Proxmox's health word (`PASSED`, `OK`, `FAILED`, `UNKNOWN`).
    pub health: String,
    /// The agent's verdict: `failing` when the health says FAILED or an attribute is failing,
    /// `unreadable` when there is no verdict (common for USB and virtual disks; not alerted).
    pub state: SmartState,
    /// Wear used, in percent (100 less Proxmox's `wearout`, the life left), for disks that say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 100))]
    pub wear_used_percent: Option<u8>,
    /// Whether the wear is at or above the agent's threshold.
    #[serde(default)]
    pub worn: bool,
    /// The attributes SMART marks as failing (now or in the past), a few of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing_attributes: Vec<String>,
    /// The drive's temperature from its SMART attributes, in °C.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_c: Option<f64>,
    /// When it was read.
    pub checked_at: Timestamp,
}

/// What kind of pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PoolKind {
    /// An LVM thin pool (`vg/lv`).
    Lvmthin,
    /// A ZFS pool.
    Zfs,
    /// Anything this hub version does not know.
    #[serde(other)]
    Unknown,
}

impl PoolKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lvmthin => "lvmthin",
            Self::Zfs => "zfs",
            Self::Unknown => "unknown",
        }
    }
}

/// One pool guests live on, with its fill against the agent's pool thresholds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PoolHealth {
    /// `vg/lv` for a thin pool, the pool's name for ZFS.
    pub name: String,
    /// Its kind.
    pub kind: PoolKind,
    /// Size in bytes.
    pub size: u64,
    /// Data in use in bytes.
    pub used: u64,
    /// Its metadata's size in bytes (thin pools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_size: Option<u64>,
    /// Metadata in use in bytes (thin pools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_used: Option<u64>,
    /// The data fill against the thresholds.
    pub data: GaugeHealth,
    /// The metadata fill against the thresholds (thin pools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<GaugeHealth>,
    /// The pool's own health word (ZFS: `ONLINE`, `DEGRADED`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

impl PoolHealth {
    /// Whether its data or its metadata gauge is raised.
    pub fn raised(&self) -> bool {
        self.data.raised || self.metadata.is_some_and(|m| m.raised)
    }
}

/// One temperature sensor of the node (`/sys/class/hwmon`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Temperature {
    /// The chip and the sensor's label (`coretemp/Package id 0`).
    pub sensor: String,
    /// The reading in °C.
    pub celsius: f64,
    /// The chip's critical temperature for it, when it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crit: Option<f64>,
    /// The chip's own high limit for it (`temp<N>_max`), when it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// What the agent judges the sensor against, when it has a threshold for it: raised after
    /// the host's `samples` readings at or above `high`, cleared at or below `low`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judged: Option<TemperatureBand>,
}

/// A sensor's thresholds in °C and where its reading stands against them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TemperatureBand {
    /// Raised at or above this.
    pub high: f64,
    /// Cleared at or below this; below `high`.
    pub low: f64,
    /// Whether the sensor is too hot.
    pub raised: bool,
    /// When it was raised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<jiff::Timestamp>,
}

impl Temperature {
    /// Whether the agent judges it too hot.
    pub fn raised(&self) -> bool {
        self.judged.is_some_and(|b| b.raised)
    }
}

/// Checks a name: not blank, at most [`MAX_NAME_LEN`] bytes, no control characters.
fn name(field: impl Fn() -> String, value: &str) -> Result<(), ValidationError> {
    validate::text(field, value, MAX_NAME_LEN)
}

/// Checks the guests' gauges: bounded, unique, shares in range.
pub(crate) fn validate_guests(guests: &[GuestHealth]) -> Result<(), ValidationError> {
    validate::count("host_health.guests", guests.len(), MAX_GUEST_GAUGES)?;
    let mut seen = std::collections::BTreeSet::new();
    for (i, guest) in guests.iter().enumerate() {
        for (gauge, value) in guest.gauges() {
            if let Some(g) = value {
                g.validate(&format!("guests[{i}].{gauge}"))?;
            }
        }
        if !seen.insert(guest.guest_id) {
            return Err(ValidationError::Duplicate {
                field: "host_health.guests".into(),
                value: guest.guest_id.to_string(),
            });
        }
    }
    Ok(())
}

/// Checks the disks: bounded, unique, texts clean.
pub(crate) fn validate_disks(disks: &[DiskHealth]) -> Result<(), ValidationError> {
    validate::count("host_health.disks", disks.len(), MAX_DISKS)?;
    let mut seen = std::collections::BTreeSet::new();
    for (i, disk) in disks.iter().enumerate() {
        let at = |f: &str| format!("host_health.disks[{i}].{f}");
        name(|| at("device"), &disk.device)?;
        name(|| at("health"), &disk.health)?;
        for (field, text) in [("model", &disk.model), ("kind", &disk.kind)] {
            if !text.is_empty() {
                name(|| at(field), text)?;
            }
        }
        if let Some(wear) = disk.wear_used_percent {
            validate::range(|| at("wear_used_percent"), wear, 0, 100)?;
        }
        validate::count(
            &at("failing_attributes"),
            disk.failing_attributes.len(),
            MAX_FAILING_ATTRIBUTES,
        )?;
        for (j, attribute) in disk.failing_attributes.iter().enumerate() {
            detail(|| at(&format!("failing_attributes[{j}]")), attribute)?;
        }
        if let Some(t) = disk.temperature_c {
            celsius(&at("temperature_c"), t)?;
        }
        if !seen.insert(disk.device.as_str()) {
            return Err(ValidationError::Duplicate {
                field: "host_health.disks".into(),
                value: disk.device.clone(),
            });
        }
    }
    Ok(())
}

/// Checks the pools: bounded, unique, used within size, gauges in range.
pub(crate) fn validate_pools(pools: &[PoolHealth]) -> Result<(), ValidationError> {
    validate::count("host_health.pools", pools.len(), MAX_POOLS)?;
    let mut seen = std::collections::BTreeSet::new();
    for (i, pool) in pools.iter().enumerate() {
        let at = |f: &str| format!("host_health.pools[{i}].{f}");
        name(|| at("name"), &pool.name)?;
        if let Some(state) = &pool.state {
            name(|| at("state"), state)?;
        }
        pool.data.validate(&format!("pools[{i}].data"))?;
        if let Some(m) = &pool.metadata {
            m.validate(&format!("pools[{i}].metadata"))?;
        }
        if !seen.insert((pool.kind.as_str(), pool.name.as_str())) {
            return Err(ValidationError::Duplicate {
                field: "host_health.pools".into(),
                value: pool.name.clone(),
            });
        }
    }
    Ok(())
}

/// Checks the sensors: bounded, names clean, readings plausible.
pub(crate) fn validate_temperatures(sensors: &[Temperature]) -> Result<(), ValidationError> {
    validate::count("host_health.temperatures", sensors.len(), MAX_SENSORS)?;
    for (i, t) in sensors.iter().enumerate() {
        let at = |f: &str| format!("host_health.temperatures[{i}].{f}");
        name(|| at("sensor"), &t.sensor)?;
        celsius(&at("celsius"), t.celsius)?;
        for (field, value) in [("crit", t.crit), ("max", t.max)] {
            if let Some(value) = value {
                celsius(&at(field), value)?;
            }
        }
        if let Some(band) = t.judged {
            celsius(&at("judged.high"), band.high)?;
            celsius(&at("judged.low"), band.low)?;
            if band.low >= band.high {
                return Err(ValidationError::Invalid {
                    field: at("judged.low"),
                    reason: format!("{} is not below high ({})", band.low, band.high),
                });
            }
        }
        if sensors[..i].iter().any(|other| other.sensor == t.sensor) {
            return Err(ValidationError::Duplicate {
                field: "host_health.temperatures".into(),
                value: t.sensor.clone(),
            });
        }
    }
    Ok(())
}

/// A temperature a sensor can read: finite, between -100 and 1000 °C.
fn celsius(field: &str, value: f64) -> Result<(), ValidationError> {
    if value.is_finite() && (-100.0..=1000.0).contains(&value) {
        Ok(())
    } else {
        Err(ValidationError::Invalid {
            field: field.to_owned(),
            reason: format!("{value} is not a temperature in °C"),
        })
    }
}

#[cfg(test)]
#[path = "hardware_tests.rs"]
mod tests;
