//! `bosunctl hosts label` and the parts of `hosts list` and `hosts show` about labels and
//! capabilities (decision 0077). Labels and capability words are checked here with the hub's
//! own rules (`bosun_proto::capabilities`), so a bad one is a usage error before anything is
//! sent; what the hub says a host is, is printed through the table's escaping like every
//! other text a host sent.

use std::collections::BTreeMap;

use bosun_proto::admin::HostDetail;
use bosun_proto::capabilities::{HostLabels, LabelChange, check_capability, parse_label};
use reqwest::Method;

use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::resolve;
use crate::table;

/// `label` as a query value: the few characters labels and capability words may hold that a
/// query would read otherwise, percent-encoded.
fn encode(text: &str) -> String {
    text.replace('=', "%3D")
        .replace('/', "%2F")
        .replace(':', "%3A")
}

/// The query of `hosts list --label … --capability …` (empty without filters); a label that
/// is not `key=value` within its bounds, or a capability word of the wrong shape, is refused.
pub fn list_query(labels: &[String], capabilities: &[String]) -> Result<String, CtlError> {
    let mut terms = Vec::new();
    for label in labels {
        let (key, value) = parse_label("--label", label).map_err(|e| CtlError::BadArgument {
            what: "--label",
            reason: e.to_string(),
        })?;
        terms.push(format!(
            "label={}",
            encode(&format!("{}={}", key.as_str(), value.as_str()))
        ));
    }
    for capability in capabilities {
        check_capability("--capability", capability).map_err(|e| CtlError::BadArgument {
            what: "--capability",
            reason: e.to_string(),
        })?;
        terms.push(format!("capability={}", encode(capability)));
    }
    Ok(if terms.is_empty() {
        String::new()
    } else {
        format!("?{}", terms.join("&"))
    })
}

/// The change `hosts label HOST k=v … --remove k` asks for, checked.
pub fn change(labels: &[String], remove: &[String]) -> Result<LabelChange, CtlError> {
    let mut set = BTreeMap::new();
    for label in labels {
        let (key, value) = parse_label("label", label).map_err(|e| CtlError::BadArgument {
            what: "label",
            reason: e.to_string(),
        })?;
        set.insert(key.as_str().to_owned(), value.as_str().to_owned());
    }
    let change = LabelChange {
        set,
        remove: remove.to_vec(),
    };
    change.validate().map_err(|e| CtlError::BadArgument {
        what: "labels",
        reason: if labels.is_empty() && remove.is_empty() {
            "give labels to set (key=value) or keys to remove (--remove KEY)".to_owned()
        } else {
            e.to_string()
        },
    })?;
    Ok(change)
}

/// `bosunctl hosts label HOST k=v … [--remove k]`: prints the host's labels after the change.
pub async fn label(
    client: &HubClient,
    json: bool,
    host: &resolve::HostArg,
    labels: &[String],
    remove: &[String],
) -> Result<(), CtlError> {
    let change = change(labels, remove)?;
    let host_id = resolve::host_id(client, host.name()).await?;
    let body = serde_json::to_vec(&change).map_err(|source| CtlError::Decode {
        what: "label change".to_owned(),
        source,
    })?;
    let value = client
        .call(
            Method::PUT,
            &format!("/v1/admin/hosts/{host_id}/labels"),
            Some(body),
            &[],
        )
        .await?;
    if json {
        return table::print_json(&value);
    }
    let answer: HostLabels = decode("host labels", value)?;
    crate::outln!("host {host_id} labels: {}", text(&answer.labels))
}

/// Labels as `k=v, k=v` (`-` for none).
pub fn text(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "-".to_owned();
    }
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The lines `hosts show` gives labels and capabilities.
pub fn fields(host: &HostDetail) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        ("labels", text(&host.summary.labels)),
        // What the signed plan names, as the report says it (`status` and the dashboard too).
        (
            "plan targets",
            list(&bosun_proto::host_view::plan_targets(host)),
        ),
    ];
    let Some(caps) = &host.capabilities else {
        fields.push(("capabilities", "not reported yet".to_owned()));
        return fields;
    };
    fields.push((
        "machine",
        format!(
            "{}, {} CPUs{} ({}), Proxmox {}",
            caps.arch,
            caps.cpu_count,
            caps.cpu_sockets
                .map(|s| format!(" in {s} socket(s)"))
                .unwrap_or_default(),
            table::or_dash(caps.cpu_model.as_deref()),
            table::or_dash(caps.pve_version.as_deref()),
        ),
    ));
    let present: Vec<&str> = [
        (caps.helper, "helper"),
        (caps.tunnel, "tunnel"),
        (caps.smart, "smart"),
    ]
    .into_iter()
    .filter_map(|(on, word)| on.then_some(word))
    .collect();
    fields.push((
        "has",
        if present.is_empty() {
            "no helper, no tunnel, no SMART".to_owned()
        } else {
            present.join(", ")
        },
    ));
    fields.push((
        "address pool",
        match (
            caps.address_pool,
            bosun_proto::host_view::address_pool_warning(host),
        ) {
            (_, Some(warning)) => format!("WARNING: {warning}"),
            (Some(true), None) => {
                "yes: each new guest gets a static address of it, under ipfilter".to_owned()
            }
            (_, None) => "not said (an agent from before the pool)".to_owned(),
        },
    ));
    fields.push(("storage kinds", list(&caps.storage_kinds)));
    for nic in &caps.interfaces {
        fields.push((
            "interface",
            format!(
                "{} {} {}{}{}",
                nic.name,
                nic.kind.as_str(),
                nic.state.as_str(),
                nic.mac
                    .as_deref()
                    .map(|m| format!(" {m}"))
                    .unwrap_or_default(),
                nic.speed_mbps
                    .map(|s| format!(" {s} Mbit/s"))
                    .unwrap_or_default(),
            ),
        ));
    }
    if let Some(at) = host.capabilities_at {
        fields.push(("described", table::when(Some(at))));
    }
    fields
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "-".to_owned()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_checked_and_encoded() {
        assert_eq!(list_query(&[], &[]).unwrap(), "");
        assert_eq!(
            list_query(
                &["team/a=x".into()],
                &["bridge=vmbr0".into(), "helper".into()]
            )
            .unwrap(),
            "?label=team%2Fa%3Dx&capability=bridge%3Dvmbr0&capability=helper"
        );
        for bad in ["site", "Site=x", "k=a b", "k=\u{1b}[2J"] {
            let err = list_query(&[bad.into()], &[]).unwrap_err();
            assert!(
                matches!(
                    err,
                    CtlError::BadArgument {
                        what: "--label",
                        ..
                    }
                ),
                "{bad}"
            );
        }
        assert!(list_query(&[], &["x=<b>".into()]).is_err());
    }

    #[test]
    fn a_change_needs_something_and_keeps_to_the_bounds() {
        let err = change(&[], &[]).unwrap_err();
        assert!(err.to_string().contains("--remove"), "{err}");
        let ok = change(&["site=fra".into()], &["rack".into()]).unwrap();
        assert_eq!(ok.set["site"], "fra");
        assert_eq!(ok.remove, ["rack"]);
        assert!(change(&[format!("k={}", "v".repeat(64))], &[]).is_err());
        assert!(change(&["site=a".into()], &["site".into()]).is_err());
    }
}
