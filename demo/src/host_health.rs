//! Step 16: host health (decision 0021). The simulated node's CPU is driven past the agent's
//! high threshold (`POST /_sim/node/load`); after `samples` readings in a row the agent
//! reports the gauge raised and the hub opens `host_cpu_high`; at or below the low threshold
//! it clears and the hub raises `host_usage_recovered`. The demo's agent samples every
//! [`INTERVAL_MS`] (the `[health]` section [`super::stack::write_agent_files`] writes).

use bosun_proto::admin::AlertKind;
use serde_json::json;

use super::children::Children;
use super::scenario::{check, converge, has_alert};
use super::sim::{self, SimEndpoint};
use super::{DemoError, Narrator};
use bosunctl::client::HubClient;
use bosunctl::status::FleetStatus;

/// How often the demo's agent samples the node (production default: 30 s).
pub const INTERVAL_MS: u64 = 500;
/// Readings at or above the high threshold before the gauge is raised.
pub const SAMPLES: u32 = 3;
/// The demo agent's CPU thresholds, percent.
pub const CPU_HIGH_PERCENT: u8 = 90;
/// Cleared at or below this.
pub const CPU_LOW_PERCENT: u8 = 75;

/// What step 16 established.
#[derive(Debug, Clone, Default)]
pub struct HostHealthOutcome {
    /// The hub's `host_cpu_high` message.
    pub raised: String,
    /// The hub's `host_usage_recovered` message.
    pub recovered: String,
}

fn messages(fleet: &FleetStatus, kind: AlertKind) -> Vec<String> {
    fleet
        .alerts
        .iter()
        .filter(|a| a.kind == kind)
        .map(|a| a.message.clone())
        .collect()
}

/// Step 16.
pub async fn cpu_high(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    sim: &SimEndpoint,
) -> Result<HostHealthOutcome, DemoError> {
    let before = FleetStatus::fetch(client, 50).await?;
    check(
        !has_alert(&before, AlertKind::HostCpuHigh)
            && !has_alert(&before, AlertKind::HostUsageRecovered),
        || "a host usage alert was raised before the load went up".to_owned(),
    )?;
    sim::sim_node_load(sim, &json!({ "cpu": 0.97 })).await?;
    n.detail("$ curl -X POST …/_sim/node/load -d '{\"cpu\": 0.97}'   (the node's CPU at 97%)");
    let fleet = converge(children, client, "the host_cpu_high alert", |f| {
        has_alert(f, AlertKind::HostCpuHigh)
    })
    .await?;
    let raised = messages(&fleet, AlertKind::HostCpuHigh);
    check(raised.len() == 1 && raised[0].contains("97%"), || {
        format!("host_cpu_high alerts: {raised:?}")
    })?;
    n.detail(format!(
        "agent: {SAMPLES} readings in a row at or above {CPU_HIGH_PERCENT}% (one every {INTERVAL_MS} ms) → raised; hub: host_cpu_high — {}",
        raised[0]
    ));

    sim::sim_node_load(sim, &json!({ "cpu": 0.2 })).await?;
    n.detail("$ curl -X POST …/_sim/node/load -d '{\"cpu\": 0.2}'   (back to 20%)");
    let fleet = converge(children, client, "the host_usage_recovered alert", |f| {
        has_alert(f, AlertKind::HostUsageRecovered)
    })
    .await?;
    let recovered = messages(&fleet, AlertKind::HostUsageRecovered);
    let raised_again = messages(&fleet, AlertKind::HostCpuHigh);
    check(recovered.len() == 1 && raised_again.len() == 1, || {
        format!("host_usage_recovered {recovered:?}, host_cpu_high {raised_again:?}")
    })?;
    n.detail(format!(
        "agent: at or below {CPU_LOW_PERCENT}% → cleared; hub: host_usage_recovered — {}",
        recovered[0]
    ));
    // The simulator's own quiet CPU again.
    sim::sim_node_load(sim, &json!({})).await?;
    Ok(HostHealthOutcome {
        raised: raised[0].clone(),
        recovered: recovered[0].clone(),
    })
}
