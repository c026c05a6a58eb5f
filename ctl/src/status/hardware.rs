//! The hardware lines of `bosunctl status`: each guest's gauges against its own thresholds
//! under the guest, and the node's disks, pools and temperature sensors under the host's
//! health. Every text came from the host; it is escaped where it is printed.

use bosun_proto::admin::HostDetail;
use bosun_proto::health::{GaugeHealth, HostHealth, SmartState};
use uuid::Uuid;

fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

fn health(host: &HostDetail) -> Option<&HostHealth> {
    host.last_report.as_ref()?.host_health.as_ref()
}

fn gauge_text(name: &str, g: &GaugeHealth) -> String {
    format!(
        "{name} {} (raised at {}, clears at {}){}",
        percent(g.usage),
        percent(g.high),
        percent(g.low),
        if g.raised { " RAISED" } else { "" }
    )
}

/// The `usage` line under a guest with thresholds, if it reports any gauge.
pub fn guest_usage_line(host: &HostDetail, guest_id: Uuid) -> Option<String> {
    let guest = health(host)?
        .guests
        .iter()
        .find(|g| g.guest_id == guest_id)?;
    let parts: Vec<String> = guest
        .gauges()
        .into_iter()
        .filter_map(|(name, g)| g.map(|g| gauge_text(name, g)))
        .collect();
    (!parts.is_empty()).then(|| format!("    usage           {}", parts.join("; ")))
}

/// The disk, pool and sensor lines of a host.
pub fn node_lines(host: &HostDetail) -> Vec<String> {
    let Some(h) = health(host) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for d in &h.disks {
        let verdict = match (d.state, d.worn) {
            (SmartState::Failing, _) => "FAILING",
            (_, true) => "WORN",
            (SmartState::Passed, false) => "ok",
            _ => "no verdict",
        };
        let mut text = format!("health {}", d.health);
        if let Some(w) = d.wear_used_percent {
            text.push_str(&format!(", wear {w}% used"));
        }
        if let Some(t) = d.temperature_c {
            text.push_str(&format!(", {t:.0} °C"));
        }
        for a in d.failing_attributes.iter().take(3) {
            text.push_str(&format!("; {a}"));
        }
        out.push(format!(
            "  disk              {} {}  {text}  {verdict}",
            d.device, d.model
        ));
    }
    for p in &h.pools {
        let meta = p
            .metadata
            .map_or_else(String::new, |m| format!(", metadata {}", percent(m.usage)));
        out.push(format!(
            "  pool              {}:{}  data {}{meta} (raised at {}, clears at {})  {}",
            p.kind.as_str(),
            p.name,
            percent(p.data.usage),
            percent(p.data.high),
            percent(p.data.low),
            if p.raised() { "FILLING" } else { "ok" }
        ));
    }
    if !h.temperatures.is_empty() {
        let sensors: Vec<String> = h
            .temperatures
            .iter()
            .take(6)
            .map(|t| format!("{} {:.0} °C", t.sensor, t.celsius))
            .collect();
        out.push(format!("  temperatures      {}", sensors.join(", ")));
    }
    out
}
