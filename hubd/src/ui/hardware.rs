//! The host page's hardware rows, under the health section's gauges: each guest with its own
//! thresholds, each disk of the node (health, wear, failing attributes, temperature), each
//! LVM-thin and ZFS pool (data and metadata fill), each temperature sensor. Every value came
//! from the host: maud escapes it, and the report's bounds keep it short.

use bosun_proto::hardware::{DiskHealth, GuestHealth, PoolHealth, Temperature};
use bosun_proto::health::{GaugeHealth, HostHealth, SmartState};
use bosun_proto::report::StateReport;
use jiff::Timestamp;
use maud::{Markup, html};

use super::layout;

fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

/// Whether `health` has anything for these rows.
pub(crate) fn any(health: &HostHealth) -> bool {
    !(health.guests.is_empty()
        && health.disks.is_empty()
        && health.pools.is_empty()
        && health.temperatures.is_empty())
}

fn gauge_state(g: &GaugeHealth, now: Timestamp) -> Markup {
    html! {
        @if g.raised {
            (layout::badge("high", "danger"))
            @if let Some(since) = g.since { " " (layout::ago(since, now)) }
        } @else {
            (layout::badge("ok", "ok"))
        }
    }
}

fn guest_name(report: &StateReport, guest: &GuestHealth) -> String {
    report
        .guests
        .iter()
        .find(|g| g.guest_id == Some(guest.guest_id) && !g.hostname.is_empty())
        .map_or_else(|| guest.guest_id.to_string(), |g| g.hostname.clone())
}

fn guest_rows(report: &StateReport, guest: &GuestHealth, now: Timestamp) -> Markup {
    let name = guest_name(report, guest);
    html! {
        @for (gauge, g) in guest.gauges() {
            @if let Some(g) = g {
                tr class="guest-gauge" {
                    td data-label="Check" { "Guest " span class="mono" { (name) } " (vmid " (guest.vmid) ") " (gauge) }
                    td data-label="Reading" { (percent(g.usage)) }
                    td data-label="Thresholds" { "raised at " (percent(g.high)) ", clears at " (percent(g.low)) }
                    td data-label="State" { (gauge_state(g, now)) }
                }
            }
        }
    }
}

fn disk_row(d: &DiskHealth, now: Timestamp) -> Markup {
    let (word, class) = match (d.state, d.worn) {
        (SmartState::Failing, _) => ("failing", "danger"),
        (_, true) => ("worn", "warn"),
        (SmartState::Passed, false) => ("ok", "ok"),
        _ => ("no verdict", "warn"),
    };
    html! {
        tr class="disk" {
            td data-label="Check" {
                "Disk " span class="mono" { (d.device) }
                @if !d.model.is_empty() { " " (d.model) }
                @if !d.kind.is_empty() { " (" (d.kind) ")" }
            }
            td data-label="Reading" class="detail" {
                "health " (d.health)
                @if let Some(w) = d.wear_used_percent { ", wear " (w) "% used" }
                @if let Some(t) = d.temperature_c { ", " (format!("{t:.0}")) " °C" }
                @for a in &d.failing_attributes { br; (a) }
            }
            td data-label="Thresholds" { "read " (layout::ago(d.checked_at, now)) }
            td data-label="State" { (layout::badge(word, class)) }
        }
    }
}

fn pool_row(p: &PoolHealth, now: Timestamp) -> Markup {
    html! {
        tr class="pool" {
            td data-label="Check" {
                "Pool " span class="mono" { (p.name) } " (" (p.kind.as_str()) ")"
                @if let Some(state) = &p.state { " " (state) }
            }
            td data-label="Reading" {
                "data " (percent(p.data.usage))
                @if let Some(m) = &p.metadata { ", metadata " (percent(m.usage)) }
            }
            td data-label="Thresholds" { "raised at " (percent(p.data.high)) ", clears at " (percent(p.data.low)) }
            td data-label="State" {
                @if p.raised() {
                    (layout::badge("filling", "danger"))
                    @if let Some(since) = p.data.since.or(p.metadata.and_then(|m| m.since)) { " " (layout::ago(since, now)) }
                } @else {
                    (layout::badge("ok", "ok"))
                }
            }
        }
    }
}

fn sensor_row(t: &Temperature) -> Markup {
    let critical = t.crit.is_some_and(|c| t.celsius >= c);
    html! {
        tr class="sensor" {
            td data-label="Check" { "Sensor " span class="mono" { (t.sensor) } }
            td data-label="Reading" { (format!("{:.0}", t.celsius)) " °C" }
            td data-label="Thresholds" {
                @if let Some(band) = t.judged {
                    "hot at " (format!("{:.0}", band.high)) " °C, clears at " (format!("{:.0}", band.low)) " °C"
                    @if let Some(c) = t.crit { "; critical at " (format!("{c:.0}")) " °C" }
                } @else if let Some(c) = t.crit {
                    "critical at " (format!("{c:.0}")) " °C"
                } @else { "- (not judged)" }
            }
            td data-label="State" {
                @if critical { (layout::badge("critical", "danger")) }
                @else if t.raised() { (layout::badge("hot", "danger")) }
                @else { (layout::badge("ok", "ok")) }
            }
        }
    }
}

/// The rows.
pub(crate) fn rows(report: &StateReport, health: &HostHealth, now: Timestamp) -> Markup {
    html! {
        @for g in &health.guests { (guest_rows(report, g, now)) }
        @for d in &health.disks { (disk_row(d, now)) }
        @for p in &health.pools { (pool_row(p, now)) }
        @for t in &health.temperatures { (sensor_row(t)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hosts_hardware_texts_are_shown_escaped() {
        let report: StateReport =
            serde_json::from_str(include_str!("../../../docs/proto/report.json")).unwrap();
        let health: HostHealth = serde_json::from_value(serde_json::json!({
            "disks": [{
                "device": "/dev/sda", "model": "<script>alert(1)</script>", "health": "FAILED",
                "state": "failing", "wear_used_percent": 91, "worn": true,
                "failing_attributes": ["5 <b>Reallocated</b>: FAILING_NOW"],
                "checked_at": "2026-03-01T10:00:00Z"
            }],
            "pools": [{
                "name": "pve/<i>data</i>", "kind": "lvmthin", "size": 100, "used": 95,
                "data": {"usage": 0.95, "high": 0.9, "low": 0.8, "raised": true}
            }],
            "guests": [{
                "guest_id": "00000000-0000-0000-0000-000000000007", "vmid": 107,
                "memory": {"usage": 0.97, "high": 0.9, "low": 0.7, "raised": true}
            }],
            "temperatures": [
                {"sensor": "coretemp/&amp;", "celsius": 101.0, "crit": 100.0},
                {"sensor": "nvme/Composite", "celsius": 83.0, "crit": 85.0,
                 "judged": {"high": 80.0, "low": 75.0, "raised": true}}
            ]
        }))
        .unwrap();
        assert!(any(&health));
        let now: Timestamp = "2026-03-01T10:05:00Z".parse().unwrap();
        let html = rows(&report, &health, now).into_string();
        assert!(
            !html.contains("<script>") && html.contains("&lt;script&gt;"),
            "{html}"
        );
        assert!(!html.contains("<b>") && !html.contains("<i>"), "{html}");
        assert!(html.contains("coretemp/&amp;amp;"), "{html}");
        for expected in [
            "failing",
            "wear 91% used",
            "filling",
            "data 95%",
            "vmid 107",
            "97%",
            "critical",
            "hot at 80 °C, clears at 75 °C; critical at 85 °C",
            "hot",
        ] {
            assert!(html.contains(expected), "{expected} in {html}");
        }
    }
}
