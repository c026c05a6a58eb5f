//! A fair share for every guest (decision 0100). The operator signs bounds into the host's plan
//! (`guest_share`: CPU weight 20 to 400, CPU time a quarter core to 2 cores, network 2 to
//! 100 MB/s); desired state puts the shop's web in class `front` and app and db in `backend`.
//! Each guest's share reaches Proxmox as Proxmox stores it (`cpuunits` a number, `cpulimit` a
//! string, `rate=` inside `net0`), read back from the simulator. A hub then loosens `front` past
//! the plan, unsigned: web gets the plan's ceilings, not what was asked, each refusal is in the
//! report and the audit trail, and the operator's classes are put back.

use std::path::Path;
use std::time::{Duration, Instant};

use bosun_pve::{Pve as _, Vmid};
use serde_json::{Value, json};
use uuid::Uuid;

use super::boot_order::{OrderOutcome, current_desired};
use super::children::Children;
use super::scenario::{CONVERGE, applied, check, converge, write_json};
use super::sim::{self, SimEndpoint};
use super::{DemoError, Narrator, backup_tiers};
use bosunctl::client::HubClient;
use bosunctl::status::FleetStatus;

/// The operator's classes: web's and the back end's.
fn classes() -> Value {
    json!([
        { "name": "front", "cpu_weight": 200, "cpu_limit_millicores": 1000, "net_rate_mbytes_per_s": 20 },
        { "name": "backend", "cpu_weight": 300, "net_rate_mbytes_per_s": 50 },
    ])
}

/// A hub's `front`: the most of everything validation takes.
fn loosened() -> Value {
    json!([
        { "name": "front", "cpu_weight": 10000, "cpu_limit_millicores": 8_192_000, "net_rate_mbytes_per_s": 100_000 },
        { "name": "backend", "cpu_weight": 300, "net_rate_mbytes_per_s": 50 },
    ])
}

/// A guest's share as Proxmox stores it: `cpuunits`, `cpulimit`, `net0`'s `rate=`.
pub type Stored = (Option<String>, Option<String>, Option<String>);

/// What the step established.
#[derive(Debug, Clone, Default)]
pub struct ShareOutcome {
    /// Each shop guest's share under the operator's classes, as Proxmox stores it.
    pub applied: Vec<(String, Stored)>,
    /// Web's share while a hub asked past the plan.
    pub loosened: Stored,
    /// The report's refusals of the loosening, each as every view prints it.
    pub refused: Vec<String>,
    /// The audit trail's line for it.
    pub audited: String,
    /// Web's share once the operator's classes were put back.
    pub restored: Stored,
}

/// The shop's guest ids by name, from the desired state.
fn shop_ids(document: &Value) -> Vec<(String, Uuid)> {
    document["guests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["customer"]["customer_id"] == "cust-shop")
        .filter_map(|g| {
            let id = serde_json::from_value(g["guest_id"].clone()).ok()?;
            Some((g["hostname"].as_str()?.to_owned(), id))
        })
        .collect()
}

/// `document` with the shop's guests in their classes and `classes` as its share classes.
fn with_classes(mut document: Value, classes: Value) -> Value {
    document["share_classes"] = classes;
    if let Some(guests) = document["guests"].as_array_mut() {
        for guest in guests
            .iter_mut()
            .filter(|g| g["customer"]["customer_id"] == "cust-shop")
        {
            let class = if guest["hostname"] == "web" {
                "front"
            } else {
                "backend"
            };
            guest["share_class"] = json!(class);
        }
    }
    document
}

async fn stored(sim: &SimEndpoint, vmid: u32) -> Result<Stored, DemoError> {
    let id = Vmid::new(vmid).map_err(|e| DemoError::Check(format!("vmid {vmid}: {e}")))?;
    let config = sim::pve_client(sim)?
        .ct_config(id)
        .await
        .map_err(|source| DemoError::Pve {
            what: "GET config",
            source,
        })?;
    let rate = config.get_str("net0").and_then(|net| {
        net.split(',')
            .find_map(|p| p.strip_prefix("rate="))
            .map(str::to_owned)
    });
    Ok((
        config.get_u64("cpuunits").map(|u| u.to_string()),
        config.get_str("cpulimit"),
        rate,
    ))
}

/// Waits until `vmid` stores `want`.
async fn until_stored(
    sim: &SimEndpoint,
    (name, vmid): (&str, u32),
    want: (&str, &str, &str),
) -> Result<Stored, DemoError> {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let got = stored(sim, vmid).await?;
        if (got.0.as_deref(), got.1.as_deref(), got.2.as_deref())
            == (Some(want.0), Some(want.1), Some(want.2))
        {
            return Ok(got);
        }
        if Instant::now() >= deadline {
            return Err(DemoError::Check(format!(
                "{name} (CT {vmid}) stores {got:?}, not {want:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn said((units, limit, rate): &Stored) -> String {
    let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
    format!(
        "cpuunits: {}, cpulimit: \"{}\", net0 …,rate={}",
        show(units),
        show(limit),
        show(rate)
    )
}

/// The step; see the module documentation.
pub(super) async fn fair_share(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    (host_id, order): (Uuid, &OrderOutcome),
) -> Result<ShareOutcome, DemoError> {
    let host_arg = host_id.to_string();
    let document = with_classes(
        current_desired(&FleetStatus::fetch(client, 50).await?)?,
        classes(),
    );
    let shop = shop_ids(&document);
    check(shop.len() == 3, || format!("the shop's guests: {shop:?}"))?;
    let (serial, mut plan) = super::tunnel::newest_plan(out)?;
    let serial = serial + 1;
    plan["serial"] = json!(serial);
    plan["guest_share"] = json!({
        "cpu_weight_min": 20, "cpu_weight_max": 400,
        "cpu_limit_min_millicores": 250, "cpu_limit_max_millicores": 2000,
        "net_rate_min_mbytes_per_s": 2, "net_rate_max_mbytes_per_s": 100,
    });
    let file = out.join("operator/desired-share.json");
    write_json(&file, &document)?;
    let plan_name = format!("plan-{serial}.json");
    backup_tiers::sign_plan(bins, out, &host_arg, (&plan_name, &plan), &file).await?;
    n.detail(format!(
        "$ bosunctl policy sign-plan --host … -f id_ed25519 --plan {plan_name} --desired desired-share.json   (serial {serial}: \"guest_share\": CPU weight 20..400, CPU time 250..2000 millicores, network 2..100 MB/s)"
    ));
    backup_tiers::set_desired(bins, out, &host_arg, &file).await?;
    n.detail("$ bosunctl desired set --host … desired-share.json   (\"share_classes\": front = weight 200, 1000 millicores, 20 MB/s for web; backend = weight 300, 50 MB/s and no CPU limit for app and db)");

    let vmid = |name: &str| order.vmids.get(name).copied().unwrap_or_default();
    let mut shares = Vec::new();
    for (name, want) in [
        ("web", ("200", "1", "20")),
        ("app", ("300", "2", "50")),
        ("db", ("300", "2", "50")),
    ] {
        let got = until_stored(sim, (name, vmid(name)), want).await?;
        n.detail(format!(
            "proxmox: CT {} ({name}) {}",
            vmid(name),
            said(&got)
        ));
        shares.push((name.to_owned(), got));
    }
    n.detail("backend names no CPU limit: under the plan's ceiling app and db get 2 cores' time, not none");

    let since = jiff::Timestamp::now();
    let hostile = with_classes(document.clone(), loosened());
    let file = out.join("operator/desired-share-loosened.json");
    write_json(&file, &hostile)?;
    backup_tiers::set_desired(bins, out, &host_arg, &file).await?;
    n.detail("$ bosunctl desired set --host … desired-share-loosened.json   (unsigned: front = weight 10000, 8192000 millicores, 100000 MB/s)");
    let web = ("web", vmid("web"));
    let loosened = until_stored(sim, web, ("400", "2", "100")).await?;
    n.detail(format!(
        "proxmox: CT {} (web) {}   (the plan's ceilings, not what was asked)",
        web.1,
        said(&loosened)
    ));
    let share_refusals = |f: &FleetStatus| -> Vec<String> {
        backup_tiers::report(f)
            .map(|r| r.refused.as_slice())
            .unwrap_or_default()
            .iter()
            .filter(|r| {
                r.field
                    .as_deref()
                    .is_some_and(|x| x.starts_with("share_class."))
            })
            .map(bosun_proto::refused::Refused::line)
            .collect()
    };
    let fleet = converge(children, client, "the loosening's refusals reported", |f| {
        share_refusals(f).len() == 3
    })
    .await?;
    let refused = share_refusals(&fleet);
    for line in &refused {
        n.detail(format!("agent refuses: {line}"));
    }
    check(
        refused
            .iter()
            .all(|l| l.starts_with("guest web share_class.") && l.contains("ceiling")),
        || format!("the refusals: {refused:?}"),
    )?;
    let entry = super::controller::audited(
        children,
        (bins, out),
        host_id,
        since,
        ("guest.share_refused in the audit trail", |e| {
            e.action == "guest.share_refused"
        }),
    )
    .await?;
    let audited = super::controller::audit_line(&entry);
    n.detail(format!("$ bosunctl audit --host …   {audited}"));

    let file = out.join("operator/desired-share-fixed.json");
    write_json(&file, &document)?;
    backup_tiers::set_desired(bins, out, &host_arg, &file).await?;
    n.detail(
        "$ bosunctl desired set --host … desired-share-fixed.json   (the operator's classes again)",
    );
    let restored = until_stored(sim, web, ("200", "1", "20")).await?;
    converge(children, client, "the share applied again", |f| {
        let generation = f.hosts.first().map_or(0, |h| h.summary.desired_generation);
        applied(f, generation) && share_refusals(f).is_empty()
    })
    .await?;
    n.detail(format!(
        "proxmox: CT {} (web) {}; the host refuses none of it",
        web.1,
        said(&restored)
    ));
    n.conclude(format!(
        "web at {}, held at the plan's ceilings while a hub asked more ({} refusals)",
        said(&restored),
        refused.len()
    ));
    Ok(ShareOutcome {
        applied: shares,
        loosened,
        refused,
        audited,
        restored,
    })
}
