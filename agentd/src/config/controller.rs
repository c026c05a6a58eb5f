//! The `[controller]` section of the agent's configuration:
//!
//! ```toml
//! [controller]
//! health_window_ms = 300000      # a rollout's wait for the healthy report (1 s–1 h)
//! report_interval_ms = 30000     # how often controllers report (1 s–10 min)
//! heal_after_ms = 120000         # silence before an in-place restart (≥ 2 reports; ≤ 1 h)
//! max_restarts = 3               # restarts without a healthy report before `broken` (1–20)
//! ```

use std::time::Duration;

use serde::Deserialize;

use super::error::ConfigError;

/// Timings of rollouts and healing (`[controller]` in the agent's configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerSettings {
    /// How long a rollout waits for the new controller's health report (silence past it is
    /// `broken`, never a rollback).
    pub health_window: Duration,
    /// How often controllers are asked to report (served in `GET /v1/controller`).
    pub report_interval: Duration,
    /// Silence after which a running controller is restarted in place.
    pub heal_after: Duration,
    /// In-place restarts without a healthy report in between before it is `broken`.
    pub max_restarts: u32,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        Self {
            health_window: Duration::from_secs(300),
            report_interval: Duration::from_secs(30),
            heal_after: Duration::from_secs(120),
            max_restarts: 3,
        }
    }
}

/// The section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawControllerSettings {
    health_window_ms: Option<u64>,
    report_interval_ms: Option<u64>,
    heal_after_ms: Option<u64>,
    max_restarts: Option<u32>,
}

fn ms_within(
    field: &'static str,
    value: Option<u64>,
    default: Duration,
    min: u64,
    max: u64,
) -> Result<Duration, ConfigError> {
    let ms = value.unwrap_or(u64::try_from(default.as_millis()).unwrap_or(u64::MAX));
    if (min..=max).contains(&ms) {
        Ok(Duration::from_millis(ms))
    } else {
        Err(ConfigError::Invalid {
            field,
            reason: format!("{ms} is outside {min}..={max}"),
        })
    }
}

impl RawControllerSettings {
    /// The validated settings.
    pub(crate) fn settings(&self) -> Result<ControllerSettings, ConfigError> {
        let defaults = ControllerSettings::default();
        let health_window = ms_within(
            "controller.health_window_ms",
            self.health_window_ms,
            defaults.health_window,
            1_000,
            3_600_000,
        )?;
        let report_interval = ms_within(
            "controller.report_interval_ms",
            self.report_interval_ms,
            defaults.report_interval,
            1_000,
            600_000,
        )?;
        let heal_after = ms_within(
            "controller.heal_after_ms",
            self.heal_after_ms,
            defaults.heal_after,
            1_000,
            3_600_000,
        )?;
        if heal_after < report_interval * 2 {
            return Err(ConfigError::Invalid {
                field: "controller.heal_after_ms",
                reason: "must be at least two report intervals: one late report is no crash".into(),
            });
        }
        let max_restarts = self.max_restarts.unwrap_or(defaults.max_restarts);
        if !(1..=20).contains(&max_restarts) {
            return Err(ConfigError::Invalid {
                field: "controller.max_restarts",
                reason: format!("{max_restarts} is outside 1..=20"),
            });
        }
        Ok(ControllerSettings {
            health_window,
            report_interval,
            heal_after,
            max_restarts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ControllerSettings, ConfigError> {
        toml::from_str::<RawControllerSettings>(text)
            .unwrap()
            .settings()
    }

    #[test]
    fn defaults_hold_and_out_of_range_values_name_their_field() {
        assert_eq!(parse("").unwrap(), ControllerSettings::default());
        let short = parse("health_window_ms = 2000\nreport_interval_ms = 1000\nheal_after_ms = 3000\nmax_restarts = 2").unwrap();
        assert_eq!(short.heal_after, Duration::from_secs(3));
        for (text, field) in [
            ("health_window_ms = 10", "controller.health_window_ms"),
            ("report_interval_ms = 0", "controller.report_interval_ms"),
            ("heal_after_ms = 40000", "controller.heal_after_ms"),
            ("max_restarts = 0", "controller.max_restarts"),
            ("max_restarts = 1000", "controller.max_restarts"),
        ] {
            match parse(text) {
                Err(ConfigError::Invalid { field: f, .. }) => assert_eq!(f, field, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        assert!(toml::from_str::<RawControllerSettings>("digest = \"x\"").is_err());
    }
}
