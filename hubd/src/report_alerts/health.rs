//! Host health: `host_cpu_high`, `host_memory_high` and `host_disk_high` (subject: `cpu`,
//! `memory`, `disk`) while the report's gauge is `raised`; `smart_failing` (subject: the disk)
//! while a watched disk's SMART reading is not `passed`; `tunnel_down` (subject: `tunnel`)
//! while the report's tunnel is `raised`.
//!
//! The agent applies the hysteresis and the tunnel's bound (it holds the samples and its
//! thresholds); the hub only follows what it says, so a gauge between its thresholds keeps its
//! one alert open. Each resolves as recovered when the report shows the gauge, disk or tunnel
//! healthy again, and as `<kind>_cleared` when it stops being reported (the agent no longer
//! watches it).

use bosun_proto::health::{GaugeHealth, HostHealth, SmartState};
use bosun_proto::report::{BulkVolumeReport, StateReport, TunnelHealth};

use super::{Condition, OpenWatch, WatchKind, bounded};

/// Most characters of the agent's text an alert repeats.
const MAX_TEXT: usize = 255;

/// The subject of `tunnel_down`.
pub const TUNNEL_SUBJECT: &str = "tunnel";

/// The gauges, their alert kinds and their subjects.
fn gauges(report: &StateReport) -> [(WatchKind, &'static str, Option<&GaugeHealth>); 3] {
    gauges_of(report.host_health.as_ref())
}

/// The gauges of `health`, their alert kinds and their subjects.
fn gauges_of(health: Option<&HostHealth>) -> [(WatchKind, &'static str, Option<&GaugeHealth>); 3] {
    [
        (
            WatchKind::HostCpuHigh,
            "cpu",
            health.and_then(|h| h.cpu.as_ref()),
        ),
        (
            WatchKind::HostMemoryHigh,
            "memory",
            health.and_then(|h| h.memory.as_ref()),
        ),
        (
            WatchKind::HostDiskHigh,
            "disk",
            health.and_then(|h| h.disk.as_ref()),
        ),
    ]
}

/// What of a report's live part (host health, tunnel, bulk volumes) the alerts follow: for
/// each gauge whether it is reported and raised, each watched disk's SMART state, whether the
/// tunnel is reported and raised, and each bulk volume's [`super::bulk::verdict_of`]. Readings
/// that change none of these (a gauge's usage, load averages, when a disk was read, the
/// tunnel's detail, a bulk volume's newest good archive) cannot open or resolve an alert.
#[derive(Debug, PartialEq, Eq)]
pub struct Verdict<'a> {
    gauges: [Option<bool>; 3],
    smart: Vec<(&'a str, SmartState)>,
    tunnel: Option<bool>,
    hardware: super::hardware::HardwareVerdict,
    bulk: Vec<(uuid::Uuid, &'a str, bool, bool)>,
}

/// The [`Verdict`] of `report`.
pub fn verdict(report: &StateReport) -> Verdict<'_> {
    verdict_of(
        report.host_health.as_ref(),
        report.tunnel.as_ref(),
        &report.bulk_volumes,
    )
}

/// The [`Verdict`] of a report's host health, tunnel and bulk volumes.
pub fn verdict_of<'a>(
    health: Option<&'a HostHealth>,
    tunnel: Option<&TunnelHealth>,
    bulk: &'a [BulkVolumeReport],
) -> Verdict<'a> {
    Verdict {
        gauges: gauges_of(health).map(|(_, _, gauge)| gauge.map(|g| g.raised)),
        smart: health
            .iter()
            .flat_map(|h| &h.smart)
            .map(|r| (r.device.as_str(), r.state))
            .collect(),
        tunnel: tunnel.map(|t| t.raised),
        hardware: super::hardware::verdict_of(health),
        bulk: super::bulk::verdict_of(bulk),
    }
}

/// A share as a percentage.
fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

/// What a gauge is called in a message.
fn gauge_name(subject: &str) -> &str {
    match subject {
        "cpu" => "CPU usage",
        "memory" => "memory use",
        "disk" => "root disk use",
        other => other,
    }
}

/// Every host-health condition that holds in `report`.
pub(super) fn conditions(hostname: &str, report: &StateReport) -> Vec<Condition> {
    let mut out = Vec::new();
    for (kind, subject, gauge) in gauges(report) {
        let Some(gauge) = gauge.filter(|g| g.raised) else {
            continue;
        };
        out.push(Condition {
            kind,
            subject: subject.to_owned(),
            message: format!(
                "{} on host {hostname} is {} (raised at {} or more, clears at {} or less)",
                gauge_name(subject),
                percent(gauge.usage),
                percent(gauge.high),
                percent(gauge.low)
            ),
            detail: serde_json::json!({
                "gauge": subject,
                "usage": gauge.usage,
                "high": gauge.high,
                "low": gauge.low,
                "since": gauge.since,
            }),
        });
    }
    for reading in report.host_health.iter().flat_map(|h| &h.smart) {
        if reading.state == SmartState::Passed {
            continue;
        }
        let device = bounded(&reading.device, MAX_TEXT);
        let detail = if reading.detail.trim().is_empty() {
            "no detail given".to_owned()
        } else {
            bounded(&reading.detail, MAX_TEXT)
        };
        let says = match reading.state {
            SmartState::Unreadable => "has no SMART reading",
            _ => "fails its SMART check",
        };
        out.push(Condition {
            kind: WatchKind::SmartFailing,
            subject: device.clone(),
            message: format!("disk {device} on host {hostname} {says}: {detail}"),
            detail: serde_json::json!({
                "device": device,
                "state": reading.state.as_str(),
                "detail": detail,
                "checked_at": reading.checked_at,
            }),
        });
    }
    if let Some(tunnel) = report.tunnel.as_ref().filter(|t| t.raised) {
        let detail = if tunnel.detail.trim().is_empty() {
            "no detail given".to_owned()
        } else {
            bounded(&tunnel.detail, MAX_TEXT)
        };
        let since = tunnel
            .down_since
            .map_or_else(String::new, |at| format!(" since {at}"));
        out.push(Condition {
            kind: WatchKind::TunnelDown,
            subject: TUNNEL_SUBJECT.to_owned(),
            message: format!("the tunnel of host {hostname} is down{since}: {detail}"),
            detail: serde_json::json!({
                "detail": detail,
                "down_since": tunnel.down_since,
            }),
        });
    }
    out
}

/// Whether an open host-health alert recovered (else it stopped being reported), and the
/// message saying which.
pub(super) fn resolution(hostname: &str, open: &OpenWatch, report: &StateReport) -> (bool, String) {
    match open.kind {
        WatchKind::SmartFailing => {
            let reading = report
                .host_health
                .iter()
                .flat_map(|h| &h.smart)
                .find(|r| bounded(&r.device, MAX_TEXT) == open.subject);
            match reading {
                Some(r) if r.state == SmartState::Passed => (
                    true,
                    format!(
                        "disk {} on host {hostname} passes its SMART check again",
                        open.subject
                    ),
                ),
                _ => (
                    false,
                    format!(
                        "disk {} is no longer watched by host {hostname}",
                        open.subject
                    ),
                ),
            }
        }
        WatchKind::TunnelDown => match &report.tunnel {
            Some(t) if !t.raised => (
                true,
                format!("the tunnel of host {hostname} is ready again"),
            ),
            _ => (
                false,
                format!("host {hostname} no longer reports its tunnel"),
            ),
        },
        _ => {
            let gauge = gauges(report)
                .into_iter()
                .find(|(kind, _, _)| *kind == open.kind)
                .and_then(|(_, _, gauge)| gauge);
            match gauge {
                Some(g) if !g.raised => (
                    true,
                    format!(
                        "{} on host {hostname} is down to {} (clears at {} or less)",
                        gauge_name(&open.subject),
                        percent(g.usage),
                        percent(g.low)
                    ),
                ),
                _ => (
                    false,
                    format!(
                        "{} of host {hostname} is no longer reported",
                        gauge_name(&open.subject)
                    ),
                ),
            }
        }
    }
}

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
