//! The node's temperature sensors judged against their own limits (DESIGN §10, decision
//! 0076's amendment): a sensor is too hot after the host's `samples` readings at or above its
//! high, and cools again at or below `health.temperature_hysteresis_c` under it. Its high is
//! the chip's own, in this order:
//!
//! | the chip gives | high |
//! |---|---|
//! | `temp<N>_max` | that limit |
//! | `temp<N>_crit` only | [`CRIT_MARGIN`] below it: a kernel throttles or stops the node at `crit` |
//! | neither | `health.temperature_high_c`, when set; otherwise the sensor is reported, not judged |
//!
//! A sensor whose high changes (a chip that changed its limit) starts over; a sensor no longer
//! read is forgotten, and the hub clears its alert.

use std::collections::BTreeMap;

use bosun_proto::hardware::{Temperature, TemperatureBand};
use jiff::Timestamp;

/// How far below a chip's `crit` a sensor with no `max` counts as too hot, in °C.
pub const CRIT_MARGIN: f64 = 5.0;

/// The coldest a threshold may be: what a report carries.
const COLDEST: f64 = -100.0;

/// One sensor's hysteresis.
#[derive(Debug, Clone, PartialEq)]
struct Watch {
    high: f64,
    /// Consecutive readings at or above `high`.
    streak: u32,
    raised_at: Option<Timestamp>,
}

/// Every sensor's hysteresis, kept between samples.
#[derive(Debug)]
pub struct TemperatureGauges {
    samples: u32,
    fallback_high: Option<f64>,
    hysteresis: f64,
    sensors: BTreeMap<String, Watch>,
}

impl TemperatureGauges {
    /// Gauges raised after `samples` readings, with the configured high for sensors whose chip
    /// gives none and the hysteresis, in °C.
    pub fn new(samples: u32, fallback_high: Option<u16>, hysteresis: u16) -> Self {
        Self {
            samples: samples.max(1),
            fallback_high: fallback_high.map(f64::from),
            hysteresis: f64::from(hysteresis),
            sensors: BTreeMap::new(),
        }
    }

    /// The high `sensor` is judged against, when it has one.
    fn high_of(&self, sensor: &Temperature) -> Option<f64> {
        sensor
            .max
            .or(sensor.crit.map(|crit| crit - CRIT_MARGIN))
            .or(self.fallback_high)
            .filter(|high| high - self.hysteresis >= COLDEST)
    }

    /// Judges one reading of every sensor: the sensors as read, each with its band.
    pub fn observe(&mut self, sensors: Vec<Temperature>, now: Timestamp) -> Vec<Temperature> {
        let mut kept = BTreeMap::new();
        let judged = sensors
            .into_iter()
            .map(|mut sensor| {
                let Some(high) = self.high_of(&sensor) else {
                    return sensor;
                };
                let low = high - self.hysteresis;
                let mut watch = self
                    .sensors
                    .remove(&sensor.sensor)
                    .filter(|w| w.high.to_bits() == high.to_bits())
                    .unwrap_or(Watch {
                        high,
                        streak: 0,
                        raised_at: None,
                    });
                if sensor.celsius >= high {
                    watch.streak = watch.streak.saturating_add(1);
                    if watch.raised_at.is_none() && watch.streak >= self.samples {
                        watch.raised_at = Some(now);
                        tracing::warn!(sensor = %sensor.sensor, celsius = sensor.celsius, high, "temperature sensor too hot");
                    }
                } else {
                    watch.streak = 0;
                    if watch.raised_at.is_some() && sensor.celsius <= low {
                        watch.raised_at = None;
                        tracing::info!(sensor = %sensor.sensor, celsius = sensor.celsius, low, "temperature sensor cooled");
                    }
                }
                sensor.judged = Some(TemperatureBand {
                    high,
                    low,
                    raised: watch.raised_at.is_some(),
                    since: watch.raised_at,
                });
                kept.insert(sensor.sensor.clone(), watch);
                sensor
            })
            .collect();
        self.sensors = kept;
        judged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sensor(name: &str, celsius: f64, crit: Option<f64>, max: Option<f64>) -> Temperature {
        Temperature {
            sensor: name.to_owned(),
            celsius,
            crit,
            max,
            judged: None,
        }
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    #[test]
    fn a_sensor_is_judged_against_its_chips_own_limit_with_hysteresis() {
        let mut gauges = TemperatureGauges::new(2, None, 5);
        let read = |g: &mut TemperatureGauges, c: f64, t: i64| {
            g.observe(
                vec![
                    sensor("coretemp/Package id 0", c, Some(100.0), Some(90.0)),
                    sensor("nvme/Composite", c, Some(85.0), None),
                    sensor("acpitz/temp1", c, None, None),
                ],
                at(t),
            )
        };
        let first = read(&mut gauges, 91.0, 0);
        let bands: Vec<_> = first.iter().map(|s| s.judged).collect();
        assert_eq!(
            bands[0].map(|b| (b.high, b.low, b.raised)),
            Some((90.0, 85.0, false))
        );
        assert_eq!(
            bands[1].map(|b| (b.high, b.low)),
            Some((80.0, 75.0)),
            "crit less 5"
        );
        assert_eq!(bands[2], None, "no limit and none configured: not judged");
        // The second reading at or above high raises; since is when it did.
        let second = read(&mut gauges, 90.0, 30);
        assert!(second[0].raised() && second[1].raised());
        assert_eq!(second[0].judged.unwrap().since, Some(at(30)));
        // Between low and high it stays raised; at low it clears.
        assert!(read(&mut gauges, 86.0, 60)[0].raised());
        let cooled = read(&mut gauges, 85.0, 90);
        assert!(!cooled[0].raised());
        assert!(cooled[1].raised(), "85 is past the NVMe's own high of 80");
    }

    #[test]
    fn the_configured_high_judges_sensors_without_a_limit_and_a_gone_sensor_is_forgotten() {
        let mut gauges = TemperatureGauges::new(1, Some(70), 10);
        let read = gauges.observe(vec![sensor("acpitz/temp1", 71.0, None, None)], at(0));
        assert_eq!(
            read[0].judged.map(|b| (b.high, b.low, b.raised)),
            Some((70.0, 60.0, true))
        );
        assert!(gauges.observe(Vec::new(), at(1)).is_empty());
        let again = gauges.observe(vec![sensor("acpitz/temp1", 65.0, None, None)], at(2));
        assert!(!again[0].raised(), "forgotten, so judged afresh: {again:?}");
    }
}
