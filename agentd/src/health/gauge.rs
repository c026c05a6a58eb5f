//! Hysteresis: a gauge is raised after `samples` consecutive readings at or above `high` and
//! cleared by one reading at or below `low`; between the two it stays as it is, so a value
//! wavering around one threshold does not open and close alerts.
//!
//! The tunnel's bound works the same way in time: down for `down_after` before it is raised,
//! cleared by the first good probe.

use std::time::Duration;

use bosun_proto::health::GaugeHealth;
use bosun_proto::report::TunnelHealth;
use jiff::{SignedDuration, Timestamp};

use crate::config::health::Thresholds;

/// What an observation did to a gauge or the tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// It was raised.
    Raised,
    /// It was cleared.
    Cleared,
}

/// One gauge with its hysteresis.
#[derive(Debug, Clone, PartialEq)]
pub struct Gauge {
    thresholds: Thresholds,
    samples: u32,
    /// Consecutive readings at or above `high`.
    streak: u32,
    usage: Option<f64>,
    raised_at: Option<Timestamp>,
}

impl Gauge {
    /// A gauge with nothing read yet.
    pub fn new(thresholds: Thresholds, samples: u32) -> Self {
        Self {
            thresholds,
            samples: samples.max(1),
            streak: 0,
            usage: None,
            raised_at: None,
        }
    }

    /// Takes one reading (a share; clamped into `0..=1`, a non-finite one is ignored).
    pub fn observe(&mut self, usage: f64, now: Timestamp) -> Option<Transition> {
        if !usage.is_finite() {
            return None;
        }
        let usage = usage.clamp(0.0, 1.0);
        self.usage = Some(usage);
        if usage >= self.thresholds.high {
            self.streak = self.streak.saturating_add(1);
            if self.raised_at.is_none() && self.streak >= self.samples {
                self.raised_at = Some(now);
                return Some(Transition::Raised);
            }
            return None;
        }
        self.streak = 0;
        if self.raised_at.is_some() && usage <= self.thresholds.low {
            self.raised_at = None;
            return Some(Transition::Cleared);
        }
        None
    }

    /// Whether it is raised.
    pub fn raised(&self) -> bool {
        self.raised_at.is_some()
    }

    /// Its thresholds.
    pub fn thresholds(&self) -> Thresholds {
        self.thresholds
    }

    /// The report's view, once a reading was taken.
    pub fn report(&self) -> Option<GaugeHealth> {
        Some(GaugeHealth {
            usage: self.usage?,
            high: self.thresholds.high,
            low: self.thresholds.low,
            raised: self.raised(),
            since: self.raised_at,
        })
    }
}

/// The tunnel's readiness with its bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelWatch {
    down_after: SignedDuration,
    last: Option<TunnelHealth>,
}

impl TunnelWatch {
    /// A watch that raises after `down_after` down.
    pub fn new(down_after: Duration) -> Self {
        Self {
            down_after: SignedDuration::try_from(down_after).unwrap_or(SignedDuration::MAX),
            last: None,
        }
    }

    /// Takes one probe's outcome: `Ok(detail)` ready, `Err(detail)` not.
    pub fn observe(
        &mut self,
        outcome: Result<String, String>,
        now: Timestamp,
    ) -> Option<Transition> {
        let was_raised = self.raised();
        let next = match outcome {
            Ok(detail) => TunnelHealth {
                healthy: true,
                detail,
                down_since: None,
                raised: false,
                managed: None,
            },
            Err(detail) => {
                let since = self.last.as_ref().and_then(|t| t.down_since).unwrap_or(now);
                TunnelHealth {
                    healthy: false,
                    detail,
                    down_since: Some(since),
                    raised: now.duration_since(since) >= self.down_after,
                    managed: None,
                }
            }
        };
        let raised = next.raised;
        self.last = Some(next);
        match (was_raised, raised) {
            (false, true) => Some(Transition::Raised),
            (true, false) => Some(Transition::Cleared),
            _ => None,
        }
    }

    /// Whether it is raised.
    pub fn raised(&self) -> bool {
        self.last.as_ref().is_some_and(|t| t.raised)
    }

    /// The report's view, once probed.
    pub fn report(&self) -> Option<TunnelHealth> {
        self.last.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn gauge(samples: u32) -> Gauge {
        Gauge::new(
            Thresholds {
                high: 0.9,
                low: 0.7,
            },
            samples,
        )
    }

    #[test]
    fn raised_after_n_readings_at_or_above_high_cleared_at_or_below_low() {
        use Transition::{Cleared, Raised};
        // (reading, expected transition, raised afterwards)
        let table: &[(f64, Option<Transition>, bool)] = &[
            (0.5, None, false),
            (0.9, None, false),  // 1 of 3 (at high counts)
            (0.95, None, false), // 2 of 3
            (0.89, None, false), // the streak breaks
            (0.91, None, false),
            (0.92, None, false),
            (0.93, Some(Raised), true), // 3 in a row
            (1.0, None, true),          // once only
            (0.8, None, true),          // between: stays raised
            (0.71, None, true),
            (0.7, Some(Cleared), false), // at low clears
            (0.8, None, false),          // between: stays cleared
            (0.95, None, false),         // a new streak starts from one
        ];
        let mut g = gauge(3);
        for (i, (reading, transition, raised)) in table.iter().enumerate() {
            let secs = i64::try_from(i).unwrap();
            assert_eq!(
                g.observe(*reading, t(secs)),
                *transition,
                "reading {i}: {reading}"
            );
            assert_eq!(g.raised(), *raised, "reading {i}: {reading}");
        }
    }

    #[test]
    fn the_report_carries_the_reading_thresholds_and_since() {
        let mut g = gauge(1);
        assert_eq!(g.report(), None, "nothing read yet");
        g.observe(0.95, t(5));
        let r = g.report().unwrap();
        assert!(r.raised);
        assert_eq!(r.since, Some(t(5)));
        assert!((r.usage - 0.95).abs() < 1e-9 && (r.high - 0.9).abs() < 1e-9);
        // Out-of-range readings are clamped; a NaN is ignored.
        assert_eq!(g.observe(f64::NAN, t(6)), None);
        assert!((g.report().unwrap().usage - 0.95).abs() < 1e-9);
        g.observe(-3.0, t(7));
        assert_eq!(g.report().unwrap().usage, 0.0);
        assert!(!g.raised());
    }

    #[test]
    fn the_tunnel_is_raised_only_after_the_bound_and_cleared_by_one_good_probe() {
        let mut w = TunnelWatch::new(Duration::from_secs(60));
        assert_eq!(w.report(), None);
        assert_eq!(w.observe(Ok("ready".into()), t(0)), None);
        assert!(w.report().unwrap().healthy);
        assert_eq!(w.observe(Err("refused".into()), t(10)), None);
        assert_eq!(w.report().unwrap().down_since, Some(t(10)));
        assert_eq!(w.observe(Err("503".into()), t(69)), None, "59 s down");
        assert_eq!(
            w.observe(Err("503".into()), t(70)),
            Some(Transition::Raised),
            "60 s down"
        );
        let r = w.report().unwrap();
        assert!(r.raised && !r.healthy);
        assert_eq!(r.down_since, Some(t(10)), "since the first failure");
        assert_eq!(r.detail, "503");
        assert_eq!(w.observe(Err("503".into()), t(80)), None, "once only");
        assert_eq!(
            w.observe(Ok("ready".into()), t(90)),
            Some(Transition::Cleared)
        );
        assert_eq!(w.report().unwrap().down_since, None);
        // A new outage counts from its own start.
        w.observe(Err("refused".into()), t(100));
        assert_eq!(w.observe(Err("refused".into()), t(150)), None);
        // No bound: raised at the first failure.
        let mut at_once = TunnelWatch::new(Duration::ZERO);
        assert_eq!(
            at_once.observe(Err("refused".into()), t(0)),
            Some(Transition::Raised)
        );
    }
}
