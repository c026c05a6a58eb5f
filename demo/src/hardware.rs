//! Per-guest thresholds and the node's hardware (decision 0076). Guest alpha gets its own CPU
//! thresholds in desired state (unsigned: they only add alerts); the simulator drives alpha's
//! CPU past them (`POST /_sim/lxc/{vmid}/load`) and the hub opens `guest_cpu_high`, then
//! `guest_usage_recovered` when it falls back. A disk of the simulated node is degraded
//! (`POST /_sim/node/disks/degrade`: an attribute failing now, most of its life used); the
//! agent, which reads every disk through Proxmox's disk API with no configuration, reports it
//! and the hub opens `disk_failing` and `disk_worn`, resolved as `disk_recovered` once the
//! disk is replaced.

use std::path::Path;

use bosun_proto::admin::AlertKind;
use serde_json::json;
use uuid::Uuid;

use super::backup_tiers::set_desired;
use super::children::Children;
use super::scenario::{check, converge, has_alert, write_json};
use super::sim::{self, SimEndpoint};
use super::{DemoError, Narrator};
use bosunctl::client::HubClient;
use bosunctl::status::FleetStatus;

fn messages(fleet: &FleetStatus, kind: AlertKind) -> Vec<String> {
    fleet
        .alerts
        .iter()
        .filter(|a| a.kind == kind)
        .map(|a| a.message.clone())
        .collect()
}

/// Guest `alpha`'s id and vmid from the fleet.
fn alpha(fleet: &FleetStatus) -> Result<(Uuid, u32), DemoError> {
    fleet
        .hosts
        .first()
        .and_then(|h| h.last_report.as_ref())
        .and_then(|r| r.guests.iter().find(|g| g.hostname == "alpha"))
        .and_then(|g| Some((g.guest_id?, g.vmid)))
        .ok_or_else(|| DemoError::Check("the host reports no guest alpha".to_owned()))
}

/// A step: guest alpha past its own CPU threshold, and back.
pub async fn guest_threshold(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    host_id: Uuid,
) -> Result<(), DemoError> {
    let fleet = FleetStatus::fetch(client, 50).await?;
    let (guest, vmid) = alpha(&fleet)?;
    let mut document = fleet
        .hosts
        .first()
        .and_then(|h| h.desired.as_ref())
        .map(serde_json::to_value)
        .transpose()
        .map_err(|e| DemoError::Check(format!("the host's desired state: {e}")))?
        .ok_or_else(|| DemoError::Check("the host has no desired state".to_owned()))?;
    for g in document["guests"].as_array_mut().into_iter().flatten() {
        if g["guest_id"] == json!(guest) {
            g["thresholds"] = json!({ "cpu": { "high_percent": 80, "low_percent": 50 } });
        }
    }
    let file = out.join("operator/desired-thresholds.json");
    write_json(&file, &document)?;
    set_desired(bins, out, &host_id.to_string(), &file).await?;
    n.detail("$ bosunctl desired set --host … desired-thresholds.json   (alpha: \"thresholds\": {\"cpu\": {\"high_percent\": 80, \"low_percent\": 50}}, unsigned: it only adds alerts)");
    sim::sim_post(
        sim,
        "POST /_sim/lxc/{vmid}/load",
        &format!("lxc/{vmid}/load"),
        &json!({ "cpu": 0.93 }),
    )
    .await?;
    n.detail(format!("$ curl -X POST …/_sim/lxc/{vmid}/load -d '{{\"cpu\": 0.93}}'   (alpha's CPU at 93% of its cores)"));
    let fleet = converge(children, client, "the guest_cpu_high alert", |f| {
        has_alert(f, AlertKind::GuestCpuHigh)
    })
    .await?;
    let raised = messages(&fleet, AlertKind::GuestCpuHigh);
    check(raised.len() == 1 && raised[0].contains("93%"), || {
        format!("guest_cpu_high alerts: {raised:?}")
    })?;
    n.detail(format!("hub: guest_cpu_high — {}", raised[0]));
    sim::sim_post(
        sim,
        "POST /_sim/lxc/{vmid}/load",
        &format!("lxc/{vmid}/load"),
        &json!({ "cpu": 0.1 }),
    )
    .await?;
    let fleet = converge(children, client, "the guest_usage_recovered alert", |f| {
        has_alert(f, AlertKind::GuestUsageRecovered)
    })
    .await?;
    let recovered = messages(&fleet, AlertKind::GuestUsageRecovered);
    n.detail(format!(
        "alpha back at 10% → hub: guest_usage_recovered — {}",
        recovered.first().map_or("", String::as_str)
    ));
    Ok(())
}

/// A step: a disk of the node degrades in the simulator; the agent's disk reads raise it.
pub async fn smart_warning(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    sim: &SimEndpoint,
) -> Result<(), DemoError> {
    let degrade = json!({
        "devpath": "/dev/sda",
        "wearout": 9,
        "failing_attribute": "Reallocated_Sector_Ct",
    });
    sim::sim_post(
        sim,
        "POST /_sim/node/disks/degrade",
        "node/disks/degrade",
        &degrade,
    )
    .await?;
    n.detail("$ curl -X POST …/_sim/node/disks/degrade -d '{\"devpath\": \"/dev/sda\", \"wearout\": 9, \"failing_attribute\": \"Reallocated_Sector_Ct\"}'");
    let fleet = converge(
        children,
        client,
        "the disk_failing and disk_worn alerts",
        |f| has_alert(f, AlertKind::DiskFailing) && has_alert(f, AlertKind::DiskWorn),
    )
    .await?;
    for kind in [AlertKind::DiskFailing, AlertKind::DiskWorn] {
        let m = messages(&fleet, kind);
        check(m.len() == 1, || format!("{} alerts: {m:?}", kind.as_str()))?;
        n.detail(format!(
            "agent: GET /nodes/{{node}}/disks/list + disks/smart (no configuration) → hub: {} — {}",
            kind.as_str(),
            m[0]
        ));
    }
    // The disk is replaced: the simulator's own healthy hardware again.
    sim::sim_post(sim, "POST /_sim/node/hardware", "node/hardware", &json!({})).await?;
    n.detail("$ curl -X POST …/_sim/node/hardware -d '{}'   (the disk replaced)");
    let fleet = converge(children, client, "the disk_recovered alerts", |f| {
        f.alerts
            .iter()
            .filter(|a| a.kind == AlertKind::DiskRecovered)
            .count()
            >= 2
    })
    .await?;
    n.detail(format!(
        "disk replaced → hub: disk_recovered — {}",
        messages(&fleet, AlertKind::DiskRecovered)
            .first()
            .map_or("", String::as_str)
    ));
    Ok(())
}
