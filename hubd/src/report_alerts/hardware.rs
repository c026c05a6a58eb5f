//! The node's hardware and its guests' usage: `guest_cpu_high`, `guest_memory_high`,
//! `guest_disk_high` (subject: the guest id) while a guest's gauge against its own thresholds
//! is `raised`; `disk_failing` and `disk_worn` (subject: the device) while a disk of Proxmox's
//! disk list is `failing` or `worn`; `pool_fill_high` (subject: `<kind>:<name>`, e.g.
//! `lvmthin:pve/data`) while a pool's data or metadata fill is `raised`; `temperature_high`
//! (subject: the sensor) while a judged temperature sensor is `raised`.
//!
//! As for the host's gauges, the agent applies the hysteresis and the hub follows what it says.
//! Each resolves as recovered when the report shows the gauge, disk or pool healthy again, and
//! as `<kind>_cleared` when it stops being reported (thresholds removed, a guest gone, a disk
//! or pool no longer listed). Every text here came from a host: it is cut short here and
//! escaped wherever it is shown.

use bosun_proto::hardware::{DiskHealth, GuestHealth, PoolHealth, Temperature};
use bosun_proto::health::{GaugeHealth, SmartState};
use bosun_proto::report::StateReport;
use uuid::Uuid;

use super::{Condition, OpenWatch, WatchKind, bounded, guest_name};

/// Most characters of the agent's text an alert repeats.
const MAX_TEXT: usize = 255;

fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

/// The guest kinds with their gauge names.
const GUEST_GAUGES: [(WatchKind, &str, &str); 3] = [
    (WatchKind::GuestCpuHigh, "cpu", "CPU usage"),
    (WatchKind::GuestMemoryHigh, "memory", "memory use"),
    (WatchKind::GuestDiskHigh, "disk", "root disk use"),
];

fn guests(report: &StateReport) -> impl Iterator<Item = &GuestHealth> {
    report.host_health.iter().flat_map(|h| &h.guests)
}

fn disks(report: &StateReport) -> impl Iterator<Item = &DiskHealth> {
    report.host_health.iter().flat_map(|h| &h.disks)
}

fn pools(report: &StateReport) -> impl Iterator<Item = &PoolHealth> {
    report.host_health.iter().flat_map(|h| &h.pools)
}

fn sensors(report: &StateReport) -> impl Iterator<Item = &Temperature> {
    report.host_health.iter().flat_map(|h| &h.temperatures)
}

/// °C as an alert says it.
fn degrees(celsius: f64) -> String {
    format!("{celsius:.0} °C")
}

/// A pool's subject.
pub fn pool_subject(pool: &PoolHealth) -> String {
    bounded(&format!("{}:{}", pool.kind.as_str(), pool.name), MAX_TEXT)
}

fn gauge_of<'a>(guest: &'a GuestHealth, gauge: &str) -> Option<&'a GaugeHealth> {
    guest
        .gauges()
        .into_iter()
        .find(|(name, _)| *name == gauge)
        .and_then(|(_, g)| g)
}

/// What raises or clears a hardware alert in a report: each guest's raised gauges, each
/// disk's verdict and wear, each pool's fill, each judged sensor's heat. Part of
/// [`super::health::Verdict`].
pub type HardwareVerdict = (
    Vec<(Uuid, [bool; 3])>,
    Vec<(String, bool, bool)>,
    Vec<(String, bool)>,
    Vec<(String, bool)>,
);

/// The [`HardwareVerdict`] of a report's host health.
pub fn verdict_of(health: Option<&bosun_proto::health::HostHealth>) -> HardwareVerdict {
    let raised = |g: Option<&GaugeHealth>| g.is_some_and(|g| g.raised);
    let h = health.into_iter();
    (
        h.clone()
            .flat_map(|h| &h.guests)
            .map(|g| (g.guest_id, g.gauges().map(|(_, g)| raised(g))))
            .collect(),
        h.clone()
            .flat_map(|h| &h.disks)
            .map(|d| (d.device.clone(), d.state == SmartState::Failing, d.worn))
            .collect(),
        h.clone()
            .flat_map(|h| &h.pools)
            .map(|p| (pool_subject(p), p.raised()))
            .collect(),
        h.flat_map(|h| &h.temperatures)
            .filter(|t| t.judged.is_some())
            .map(|t| (bounded(&t.sensor, MAX_TEXT), t.raised()))
            .collect(),
    )
}

/// Every hardware condition that holds in `report`.
pub(super) fn conditions(hostname: &str, report: &StateReport) -> Vec<Condition> {
    let mut out = Vec::new();
    for guest in guests(report) {
        let name = bounded(&guest_name(report, guest.guest_id), MAX_TEXT);
        for (kind, gauge, what) in GUEST_GAUGES {
            let Some(g) = gauge_of(guest, gauge).filter(|g| g.raised) else {
                continue;
            };
            out.push(Condition {
                kind,
                subject: guest.guest_id.to_string(),
                message: format!(
                    "{what} of guest {name} (vmid {}) on host {hostname} is {} (raised at {} or more, clears at {} or less)",
                    guest.vmid,
                    percent(g.usage),
                    percent(g.high),
                    percent(g.low)
                ),
                detail: serde_json::json!({
                    "guest_id": guest.guest_id,
                    "vmid": guest.vmid,
                    "gauge": gauge,
                    "usage": g.usage,
                    "high": g.high,
                    "low": g.low,
                    "since": g.since,
                }),
            });
        }
    }
    out.extend(disks(report).flat_map(|d| disk_conditions(hostname, d)));
    for pool in pools(report).filter(|p| p.raised()) {
        let subject = pool_subject(pool);
        let meta = pool
            .metadata
            .map_or_else(String::new, |m| format!(", metadata {}", percent(m.usage)));
        out.push(Condition {
            kind: WatchKind::PoolFillHigh,
            subject: subject.clone(),
            message: format!(
                "pool {subject} on host {hostname} fills: data {}{meta} (raised at {} or more, clears at {} or less)",
                percent(pool.data.usage),
                percent(pool.data.high),
                percent(pool.data.low)
            ),
            detail: serde_json::json!({
                "pool": subject,
                "size": pool.size,
                "used": pool.used,
                "metadata_size": pool.metadata_size,
                "metadata_used": pool.metadata_used,
                "data_usage": pool.data.usage,
                "metadata_usage": pool.metadata.map(|m| m.usage),
                "high": pool.data.high,
                "low": pool.data.low,
            }),
        });
    }
    for sensor in sensors(report) {
        let Some(band) = sensor.judged.filter(|b| b.raised) else {
            continue;
        };
        let subject = bounded(&sensor.sensor, MAX_TEXT);
        out.push(Condition {
            kind: WatchKind::TemperatureHigh,
            subject: subject.clone(),
            message: format!(
                "temperature sensor {subject} on host {hostname} reads {} (raised at {} or more, clears at {} or less{})",
                degrees(sensor.celsius),
                degrees(band.high),
                degrees(band.low),
                sensor
                    .crit
                    .map_or_else(String::new, |c| format!("; the chip's critical point is {}", degrees(c)))
            ),
            detail: serde_json::json!({
                "sensor": subject,
                "celsius": sensor.celsius,
                "high": band.high,
                "low": band.low,
                "crit": sensor.crit,
                "max": sensor.max,
                "since": band.since,
            }),
        });
    }
    out
}

fn disk_conditions(hostname: &str, disk: &DiskHealth) -> Vec<Condition> {
    let device = bounded(&disk.device, MAX_TEXT);
    let model = if disk.model.is_empty() {
        String::new()
    } else {
        format!(" ({})", bounded(&disk.model, MAX_TEXT))
    };
    let mut out = Vec::new();
    if disk.state == SmartState::Failing {
        let attributes: Vec<String> = disk
            .failing_attributes
            .iter()
            .take(4)
            .map(|a| bounded(a, MAX_TEXT))
            .collect();
        let why = if attributes.is_empty() {
            format!("health {}", bounded(&disk.health, MAX_TEXT))
        } else {
            attributes.join("; ")
        };
        out.push(Condition {
            kind: WatchKind::DiskFailing,
            subject: device.clone(),
            message: format!("disk {device}{model} on host {hostname} is failing: {why}"),
            detail: serde_json::json!({
                "device": device,
                "health": bounded(&disk.health, MAX_TEXT),
                "failing_attributes": attributes,
                "checked_at": disk.checked_at,
            }),
        });
    }
    if disk.worn {
        let used = disk
            .wear_used_percent
            .map_or_else(|| "?".to_owned(), |w| format!("{w}%"));
        out.push(Condition {
            kind: WatchKind::DiskWorn,
            subject: device.clone(),
            message: format!(
                "disk {device}{model} on host {hostname} is worn: {used} of its life used"
            ),
            detail: serde_json::json!({
                "device": device,
                "wear_used_percent": disk.wear_used_percent,
                "checked_at": disk.checked_at,
            }),
        });
    }
    out
}

/// Whether an open hardware alert recovered (else it stopped being reported), and the
/// message saying which.
pub(super) fn resolution(hostname: &str, open: &OpenWatch, report: &StateReport) -> (bool, String) {
    match open.kind {
        WatchKind::DiskFailing | WatchKind::DiskWorn => {
            match disks(report).find(|d| bounded(&d.device, MAX_TEXT) == open.subject) {
                Some(_) => (
                    true,
                    format!(
                        "disk {} on host {hostname} is {} again",
                        open.subject,
                        if open.kind == WatchKind::DiskWorn {
                            "below its wear threshold"
                        } else {
                            "healthy"
                        }
                    ),
                ),
                None => (
                    false,
                    format!(
                        "disk {} is no longer listed by host {hostname}",
                        open.subject
                    ),
                ),
            }
        }
        WatchKind::PoolFillHigh => match pools(report).find(|p| pool_subject(p) == open.subject) {
            Some(p) => (
                true,
                format!(
                    "pool {} on host {hostname} is down to {} (clears at {} or less)",
                    open.subject,
                    percent(p.data.usage),
                    percent(p.data.low)
                ),
            ),
            None => (
                false,
                format!(
                    "pool {} is no longer reported by host {hostname}",
                    open.subject
                ),
            ),
        },
        WatchKind::TemperatureHigh => {
            match sensors(report)
                .filter(|t| t.judged.is_some())
                .find(|t| bounded(&t.sensor, MAX_TEXT) == open.subject)
            {
                Some(t) => (
                    true,
                    format!(
                        "temperature sensor {} on host {hostname} is down to {}",
                        open.subject,
                        degrees(t.celsius)
                    ),
                ),
                None => (
                    false,
                    format!(
                        "temperature sensor {} is no longer judged by host {hostname}",
                        open.subject
                    ),
                ),
            }
        }
        _ => guest_resolution(hostname, open, report),
    }
}

fn guest_resolution(hostname: &str, open: &OpenWatch, report: &StateReport) -> (bool, String) {
    let (gauge, what) = GUEST_GAUGES
        .iter()
        .find(|(kind, _, _)| *kind == open.kind)
        .map_or(("", "usage"), |(_, g, w)| (*g, *w));
    let guest = guests(report).find(|g| g.guest_id.to_string() == open.subject);
    let name = Uuid::parse_str(&open.subject).map_or_else(
        |_| open.subject.clone(),
        |id| bounded(&guest_name(report, id), MAX_TEXT),
    );
    match guest.and_then(|g| gauge_of(g, gauge)) {
        Some(g) => (
            true,
            format!(
                "{what} of guest {name} on host {hostname} is down to {} (clears at {} or less)",
                percent(g.usage),
                percent(g.low)
            ),
        ),
        None => (
            false,
            format!("{what} of guest {name} is no longer watched on host {hostname}"),
        ),
    }
}

#[cfg(test)]
#[path = "hardware_tests.rs"]
mod tests;
