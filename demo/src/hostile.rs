//! Step 8 of the demo: a hostile hub names a customer's backup as a new guest's golden
//! archive. The agent restores only golden archives of known provenance (DESIGN §5), so no
//! restore reaches Proxmox and the hub raises `golden_refused`.

use std::path::Path;

use bosun_proto::admin::AlertKind;
use serde_json::json;
use uuid::Uuid;

use super::children::Children;
use super::scenario::{check, converge, desired, has_alert, write_json};
use super::sim::{self, SimEndpoint};
use super::stack;
use super::{DemoError, Narrator};
use bosunctl::client::HubClient;

/// Step 8: desired state names alpha's vzdump archive as a new guest's golden archive (with
/// a hash the hub made up). The agent finds no journal record and no operator signature for
/// it, sends no restore, and the hub raises `golden_refused`.
#[expect(
    clippy::too_many_arguments,
    reason = "the demo's running parts, passed as they are"
)]
pub(super) async fn hostile_golden(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    bins: &Path,
    out: &Path,
    sim: &SimEndpoint,
    host_arg: &str,
    (alpha, alpha_vmid): (Uuid, u32),
) -> Result<(usize, bool), DemoError> {
    use bosun_pve::{ContentFilter, ContentType, Pve, StorageId, Vmid};
    let pve = sim::pve_client(sim)?;
    let filter = ContentFilter {
        content: Some(ContentType::Backup),
        vmid: Vmid::new(alpha_vmid).ok(),
    };
    let local = StorageId::new("local".to_owned())
        .map_err(|e| DemoError::Check(format!("storage id: {e}")))?;
    let victim = pve
        .list_content(&local, filter)
        .await
        .map_err(|source| DemoError::Pve {
            what: "listing alpha's backups",
            source,
        })?
        .into_iter()
        .map(|item| item.volid)
        .next_back()
        .ok_or_else(|| DemoError::Check("guest alpha has no backup to point at".to_owned()))?;
    let restores_before = restores(sim).await?;
    let mut document = desired(out, &[(alpha, "alpha"), (Uuid::new_v4(), "mallory")])?;
    document["guests"][1]["golden"] = json!({ "volid": victim, "sha256": "ab".repeat(32) });
    let file = out.join("operator/desired-3.json");
    write_json(&file, &document)?;
    let file_arg = file.display().to_string();
    stack::ctl(
        bins,
        out,
        &["desired", "set", "--host", host_arg, &file_arg],
    )
    .await?;
    n.detail(format!(
        "$ bosunctl desired set --host … desired-3.json   (guest mallory from {victim})"
    ));
    let fleet = converge(children, client, "the golden_refused alert", |f| {
        has_alert(f, AlertKind::GoldenRefused)
    })
    .await?;
    if let Some(alert) = fleet
        .alerts
        .iter()
        .find(|a| a.kind == AlertKind::GoldenRefused)
    {
        n.detail(format!("hub: golden_refused: {}", alert.message));
    }
    let after = restores(sim).await?;
    check(after == restores_before, || {
        format!(
            "the simulator saw {} restores after the hostile change",
            after - restores_before
        )
    })?;
    n.detail("simulator log: no restore was sent");
    Ok((after - restores_before, true))
}

/// Restores (`POST /nodes/{node}/lxc`) the simulator has seen.
async fn restores(sim: &SimEndpoint) -> Result<usize, DemoError> {
    Ok(sim::sim_requests(sim)
        .await?
        .iter()
        .filter(|r| r.method == "POST" && r.path == format!("/nodes/{}/lxc", sim.node))
        .count())
}
