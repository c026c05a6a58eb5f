//! The host page's labels and what the host says it is and has (decision 0077). Everything in
//! it came from a host or an operator: maud escapes it as text, never markup.

use bosun_proto::admin::HostDetail;
use maud::{Markup, html};

/// The labels and capabilities section.
pub(super) fn section(host: &HostDetail) -> Markup {
    let labels = &host.summary.labels;
    html! {
        p id="labels" {
            "Labels: "
            @if labels.is_empty() {
                "none (" code { "bosunctl hosts label HOST key=value" } ")"
            } @else {
                @for (key, value) in labels {
                    a class="badge" href={ "/ui/?label=" (key) "%3D" (value) } { (key) "=" (value) } " "
                }
            }
        }
        @match &host.capabilities {
            None => p class="empty" { "The host has not described itself yet." },
            Some(caps) => {
                table class="stack" id="capabilities" { tbody {
                    tr { th { "Machine" } td {
                        (caps.arch) ", " (caps.cpu_count) " CPUs"
                        @if let Some(sockets) = caps.cpu_sockets { " in " (sockets) " socket(s)" }
                        @if let Some(model) = &caps.cpu_model { " (" (model) ")" }
                    } }
                    tr { th { "Proxmox" } td { (caps.pve_version.as_deref().unwrap_or("-")) } }
                    tr { th { "Has" } td {
                        (if caps.helper { "helper" } else { "no helper" }) ", "
                        (if caps.tunnel { "tunnel" } else { "no tunnel" }) ", "
                        (if caps.smart { "SMART" } else { "no SMART" })
                    } }
                    tr { th { "Storage kinds" } td { (join(&caps.storage_kinds)) } }
                    tr { th { "Plan targets" } td { (join(&bosun_proto::host_view::plan_targets(host))) } }
                    @for nic in &caps.interfaces {
                        tr { th { "Interface" } td {
                            (nic.name) " " (nic.kind.as_str()) " " (nic.state.as_str())
                            @if let Some(mac) = &nic.mac { " " (mac) }
                            @if let Some(speed) = nic.speed_mbps { " " (speed) " Mbit/s" }
                        } }
                    }
                } }
            }
        }
    }
}

fn join(items: &[String]) -> String {
    if items.is_empty() {
        "-".to_owned()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn what_a_host_says_is_text_not_markup() {
        let mut host: HostDetail = serde_json::from_value(serde_json::json!({
            "host_id": "6f1c2a8e-0000-4000-8000-000000000001", "hostname": "pve1",
            "status": "active", "liveness": "ok", "last_seen": null, "agent_version": null,
            "controller_version": null, "desired_generation": 0, "known_generation": 0,
            "applied_generation": 0, "pending_jobs": 0,
            "enrolled_at": "2026-11-20T00:00:00Z", "poll_interval_seconds": 30,
            "desired": null, "last_report": null, "escrow_updated_at": null,
            "capabilities": {
                "arch": "x86_64", "cpu_model": "<script>alert(1)</script>", "cpu_count": 4,
                "interfaces": [{ "name": "vmbr0", "kind": "bridge", "state": "up" }]
            }
        }))
        .unwrap();
        host.summary.labels.insert("site".into(), "fra-1".into());
        let page = section(&host).into_string();
        assert!(!page.contains("<script>"), "{page}");
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{page}"
        );
        assert!(page.contains("vmbr0 bridge up"), "{page}");
        assert!(page.contains("href=\"/ui/?label=site%3Dfra-1\""), "{page}");
    }
}
