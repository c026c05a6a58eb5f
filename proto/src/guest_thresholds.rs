//! A guest's own CPU, memory and root-disk thresholds (`thresholds` of a guest in desired
//! state).
//!
//! Only a guest with thresholds is watched: the agent reads its usage from Proxmox, applies the
//! same hysteresis as the host's gauges (raised after the host's `samples` readings at or above
//! `high_percent`, cleared by one at or below `low_percent`) and reports each gauge; the hub
//! holds one `guest_cpu_high`, `guest_memory_high` or `guest_disk_high` alert open per guest
//! while its gauge is raised.
//!
//! Thresholds only add alerts: they change nothing on the host and widen no permission, so
//! they are plain desired state, without a signature (decision 0076).

use serde::{Deserialize, Serialize};

use crate::validate::{self, ValidationError};

/// Which of a guest's usages are watched, and where each is raised and cleared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GuestThresholds {
    /// CPU usage, a share of the guest's own cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Band>,
    /// Memory in use, a share of its limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Band>,
    /// Root disk in use, a share of its size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<Band>,
}

/// Where a gauge is raised and where it clears, in percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Band {
    /// Raised at or above this (1–100), after the host's `samples` readings in a row.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 100))]
    pub high_percent: u8,
    /// Cleared at or below this (0–99, below `high_percent`).
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 99))]
    pub low_percent: u8,
}

impl Band {
    /// `high_percent` as a share.
    pub fn high(self) -> f64 {
        f64::from(self.high_percent) / 100.0
    }

    /// `low_percent` as a share.
    pub fn low(self) -> f64 {
        f64::from(self.low_percent) / 100.0
    }

    fn validate(self, field: &str) -> Result<(), ValidationError> {
        validate::range(
            || format!("{field}.high_percent"),
            self.high_percent,
            1,
            100,
        )?;
        if self.low_percent >= self.high_percent {
            return Err(ValidationError::Invalid {
                field: format!("{field}.low_percent"),
                reason: format!(
                    "{} must be below high_percent ({})",
                    self.low_percent, self.high_percent
                ),
            });
        }
        Ok(())
    }
}

impl GuestThresholds {
    /// The bands with their gauge names (`cpu`, `memory`, `disk`).
    pub fn bands(&self) -> [(&'static str, Option<Band>); 3] {
        [
            ("cpu", self.cpu),
            ("memory", self.memory),
            ("disk", self.disk),
        ]
    }

    /// Checks every band; errors name `prefix.<gauge>.<field>`. Thresholds that name no gauge
    /// are refused: they would watch nothing, which is likely a typo.
    pub fn validate(&self, prefix: &str) -> Result<(), ValidationError> {
        let mut any = false;
        for (name, band) in self.bands() {
            if let Some(band) = band {
                band.validate(&format!("{prefix}.{name}"))?;
                any = true;
            }
        }
        if !any {
            return Err(ValidationError::Invalid {
                field: prefix.to_owned(),
                reason: "names none of cpu, memory, disk; leave `thresholds` out instead".into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn band(high: u8, low: u8) -> Option<Band> {
        Some(Band {
            high_percent: high,
            low_percent: low,
        })
    }

    #[test]
    fn bands_are_bounded_and_low_is_below_high() {
        let ok = GuestThresholds {
            cpu: band(90, 70),
            memory: band(100, 0),
            disk: None,
        };
        assert!(ok.validate("guests[0].thresholds").is_ok());
        let table: &[(GuestThresholds, &str)] = &[
            (
                GuestThresholds {
                    cpu: band(0, 0),
                    ..GuestThresholds::default()
                },
                "guests[0].thresholds.cpu.high_percent",
            ),
            (
                GuestThresholds {
                    memory: band(101, 50),
                    ..GuestThresholds::default()
                },
                "guests[0].thresholds.memory.high_percent",
            ),
            (
                GuestThresholds {
                    disk: band(80, 80),
                    ..GuestThresholds::default()
                },
                "guests[0].thresholds.disk.low_percent",
            ),
            (GuestThresholds::default(), "guests[0].thresholds"),
        ];
        for (thresholds, field) in table {
            let err = thresholds.validate("guests[0].thresholds").unwrap_err();
            assert_eq!(err.field(), *field, "{thresholds:?}");
        }
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_refused() {
        let typo = serde_json::from_str::<GuestThresholds>(
            r#"{"cpu":{"high_percent":90,"low_percent":70},"mem":{"high_percent":90,"low_percent":70}}"#,
        );
        assert!(typo.is_err(), "a typo must fail loudly");
        let negative = serde_json::from_str::<GuestThresholds>(
            r#"{"cpu":{"high_percent":-1,"low_percent":0}}"#,
        );
        assert!(negative.is_err());
        let ok: GuestThresholds =
            serde_json::from_str(r#"{"disk":{"high_percent":85,"low_percent":75}}"#).unwrap();
        assert!((ok.disk.unwrap().high() - 0.85).abs() < 1e-9);
    }
}
