//! The host page's health section: CPU, memory and root disk against the agent's thresholds,
//! each watched disk's SMART reading, the hardware rows ([`super::hardware`]: guests with
//! thresholds, the node's disks, pools and sensors), and the tunnel.

use bosun_proto::admin::HostDetail;
use bosun_proto::health::{GaugeHealth, SmartState};
use jiff::Timestamp;
use maud::{Markup, html};

use super::layout;

fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

/// The section, or a line saying the host reports no health.
pub(crate) fn section(host: &HostDetail, now: Timestamp) -> Markup {
    let report = host.last_report.as_ref();
    let health = report.and_then(|r| r.host_health.as_ref());
    let tunnel = report.and_then(|r| r.tunnel.as_ref());
    let gauges: Vec<(&str, &GaugeHealth)> = health
        .map(|h| {
            [
                ("CPU", &h.cpu),
                ("Memory", &h.memory),
                ("Root disk", &h.disk),
            ]
            .into_iter()
            .filter_map(|(name, g)| g.as_ref().map(|g| (name, g)))
            .collect()
        })
        .unwrap_or_default();
    let smart = health.map_or(&[][..], |h| h.smart.as_slice());
    html! {
        @if gauges.is_empty() && smart.is_empty() && tunnel.is_none() && !health.is_some_and(super::hardware::any) {
            p class="empty" id="health" { "No host health reported." }
        } @else {
            div class="scroll" {
                table class="stack" id="health" {
                    thead { tr {
                        th { "Check" } th { "Reading" } th { "Thresholds" } th { "State" }
                    } }
                    tbody {
                        @for (name, g) in &gauges {
                            tr {
                                td data-label="Check" { (name) }
                                td data-label="Reading" { (percent(g.usage)) }
                                td data-label="Thresholds" {
                                    "raised at " (percent(g.high)) ", clears at " (percent(g.low))
                                }
                                td data-label="State" {
                                    @if g.raised {
                                        (layout::badge("high", "danger"))
                                        @if let Some(since) = g.since { " " (layout::ago(since, now)) }
                                    } @else {
                                        (layout::badge("ok", "ok"))
                                    }
                                }
                            }
                        }
                        @for r in smart {
                            @let class = match r.state {
                                SmartState::Passed => "ok",
                                _ => "danger",
                            };
                            tr {
                                td data-label="Check" { "SMART " span class="mono" { (r.device) } }
                                td data-label="Reading" class="detail" { (r.detail) }
                                td data-label="Thresholds" { "read " (layout::ago(r.checked_at, now)) }
                                td data-label="State" { (layout::badge(r.state.as_str(), class)) }
                            }
                        }
                        @if let (Some(r), Some(h)) = (report, health) {
                            (super::hardware::rows(r, h, now))
                        }
                        @if let Some(t) = tunnel {
                            tr {
                                td data-label="Check" { "Tunnel" }
                                td data-label="Reading" class="detail" {
                                    (t.detail)
                                    @if let Some(m) = &t.managed {
                                        " · " (m.routes) " route(s) · "
                                        @if let Some(n) = m.connections { (n) " edge connection(s) · " }
                                        @if let Some(v) = &m.version { "cloudflared " (v) " · " }
                                        (m.restarts) " restart(s)"
                                        @if let Some(e) = &m.credentials_error { " · credentials not written: " (e) }
                                    }
                                }
                                td data-label="Thresholds" {
                                    @if let Some(since) = t.down_since { "down " (layout::ago(since, now)) } @else { "-" }
                                }
                                td data-label="State" {
                                    @if t.raised {
                                        (layout::badge("down", "danger"))
                                    } @else if t.healthy {
                                        (layout::badge("ready", "ok"))
                                    } @else {
                                        (layout::badge("not ready", "warn"))
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
