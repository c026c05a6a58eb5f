//! Hosts describe themselves; operators group them (decision 0077). The agent has reported
//! its capabilities with its polls since it enrolled (architecture, CPUs, Proxmox version,
//! storage kinds, the plan's targets, bridges and NICs, whether a helper, a tunnel, SMART and
//! an address pool are there); the operator labels the host (`bosunctl hosts label`, audited as a
//! `host_labeled` event), finds it again by label and by capability (`hosts list --label
//! --capability`, filtered by the hub), and a filter it does not match lists nothing.
//! `hosts show` prints the labels and what the host said of itself.

use std::path::Path;

use serde_json::Value;
use uuid::Uuid;

use super::scenario::check;
use super::stack;
use super::{DemoError, Narrator};

/// The labels the operator gives the host.
const LABELS: [&str; 2] = ["site=fra1", "tier=gold"];

/// Runs `bosunctl` with the demo's connection and without `--json`: what the operator reads.
pub(super) async fn ctl_plain(bins: &Path, out: &Path, args: &[&str]) -> Result<String, DemoError> {
    let config = out.join("operator/ctl.json").display().to_string();
    let mut full = vec!["--config", config.as_str()];
    full.extend_from_slice(args);
    stack::run_captured(&stack::program(bins, "bosunctl")?, &full, &[], None).await
}

/// The host ids `bosunctl hosts list FILTERS…` lists.
async fn listed(bins: &Path, out: &Path, filters: &[&str]) -> Result<Vec<String>, DemoError> {
    let mut args = vec!["hosts", "list"];
    args.extend_from_slice(filters);
    let hosts = stack::ctl(bins, out, &args).await?;
    Ok(hosts
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["host_id"].as_str().map(str::to_owned))
        .collect())
}

/// Lists with `filters`, narrates it, and checks the host is listed exactly when `expected`.
async fn list_and_check(
    n: &mut Narrator,
    (bins, out): (&Path, &Path),
    host_id: Uuid,
    filters: &[&str],
    expected: bool,
) -> Result<(), DemoError> {
    let found = listed(bins, out, filters).await?;
    let host = host_id.to_string();
    let matched = found.contains(&host);
    check(
        matched == expected && (expected || found.is_empty()),
        || format!("`hosts list {filters:?}` listed {found:?}; expected the host: {expected}"),
    )?;
    n.detail(format!(
        "$ bosunctl hosts list {}   → {}",
        filters.join(" "),
        if expected {
            format!("{} host: this one", found.len())
        } else {
            "no host".to_owned()
        }
    ));
    Ok(())
}

/// The step; see the module documentation.
pub(super) async fn labels_and_capabilities(
    n: &mut Narrator,
    (bins, out): (&Path, &Path),
    host_id: Uuid,
) -> Result<(), DemoError> {
    let host_arg = host_id.to_string();
    // What the host said of itself, as the hub keeps it.
    let detail = stack::ctl(bins, out, &["hosts", "show", &host_arg]).await?;
    let caps = &detail["capabilities"];
    let arch = caps["arch"].as_str().unwrap_or_default().to_owned();
    check(
        !arch.is_empty() && caps["helper"] == Value::Bool(true),
        || format!("the host reported no architecture or no helper: {caps}"),
    )?;

    let mut args = vec!["hosts", "label", host_arg.as_str()];
    args.extend(LABELS);
    let answer = stack::ctl(bins, out, &args).await?;
    let labels = &answer["labels"];
    check(labels["site"] == "fra1" && labels["tier"] == "gold", || {
        format!("`hosts label` answered {answer}")
    })?;
    n.detail(format!(
        "$ bosunctl hosts label {host_arg} {}   (role operator; keys and values bounded)",
        LABELS.join(" ")
    ));
    let events = stack::ctl(bins, out, &["events", "--host", &host_arg, "--limit", "20"]).await?;
    let labeled = events
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["kind"] == "host_labeled")
        .cloned()
        .ok_or_else(|| DemoError::Check(format!("no host_labeled event: {events}")))?;
    n.detail(format!(
        "hub: event host_labeled, set {}",
        labeled["detail"]["set"]
    ));

    let arch_word = format!("arch={arch}");
    let ms = (bins, out);
    list_and_check(n, ms, host_id, &["--label", "site=fra1"], true).await?;
    list_and_check(n, ms, host_id, &["--label", "site=ams1"], false).await?;
    let by_caps = [
        "--label",
        "tier=gold",
        "--capability",
        "helper",
        "--capability",
        &arch_word,
    ];
    list_and_check(n, ms, host_id, &by_caps, true).await?;
    // The demo's node runs no tunnel: a fleet filter asking for one leaves it out.
    list_and_check(n, ms, host_id, &["--capability", "tunnel"], false).await?;

    let shown = ctl_plain(bins, out, &["hosts", "show", &host_arg]).await?;
    n.detail(format!(
        "$ bosunctl hosts show {host_arg}   (what the host reported of itself)"
    ));
    let wanted = [
        "labels",
        "machine",
        "has",
        "address pool",
        "storage kinds",
        "plan targets",
        "interface",
    ];
    let mut lines = 0;
    for line in shown.lines() {
        let key = line.split(':').next().unwrap_or_default().trim();
        if wanted.contains(&key) {
            n.detail(format!("  {}", line.trim_end()));
            lines += 1;
        }
    }
    let labels_line = shown
        .lines()
        .find(|l| l.trim_start().starts_with("labels"))
        .unwrap_or_default();
    check(
        labels_line.contains("site=fra1") && labels_line.contains("tier=gold") && lines >= 5,
        || format!("`hosts show` printed:\n{shown}"),
    )
}
