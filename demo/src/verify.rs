//! PBS verification between restore tests (decision 0079). The agent has the backup server
//! itself verify each guest's backup group (`POST /api2/json/admin/datastore/{store}/verify`,
//! straight to PBS with the tier's sealed token over a connection pinned to the plan's
//! fingerprint) on the cadence of the operator's signed plan (`backup.verify_hours`).
//!
//! Step 9's offsite PBS is reached only through the simulated node's storage layer (its name
//! resolves nowhere), so this step gives the host a PBS the agent can reach: the simulator's
//! own listener answers the PBS API at its address, with its certificate. The operator seals
//! its token, the signed plan (serial 3) names it as a further tier and asks for a verification
//! every hour (a second here: the demo's agent runs with `verify_hour_ms = 1000`); one
//! scheduled run backs guest alpha up to it, and the hub shows a verify result per guest and
//! tier. Step 9's tier cannot be verified from here: its result is `error`, as for any server
//! the agent cannot reach. Then chunks of alpha's group rot on the server (`POST
//! /_sim/remotes/{server}/chunks/damage`): the next verification fails and the hub opens
//! `verify_failed`, naming the guest and the tier.

use std::path::Path;
use std::time::Instant;

use bosun_proto::admin::AlertKind;
use bosun_proto::verify::VerifyOutcome;
use serde_json::{Value, json};
use uuid::Uuid;

use super::backup_tiers::{PBS_DATASTORE, PBS_USER, read_json, report, set_desired, sign_plan};
use super::children::Children;
use super::scenario::{check, converge, write_json};
use super::sim::{self, SimEndpoint};
use super::stack;
use super::{DemoError, Narrator};
use bosunctl::client::HubClient;
use bosunctl::status::{self, FleetStatus};

/// Seconds ahead of the new desired state the verify tier's one run is scheduled.
const LEAD: i64 = 4;

/// What the step established.
#[derive(Debug, Clone, Default)]
pub struct VerifyStepOutcome {
    /// The reachable PBS tier's `durable_id`.
    pub tier: String,
    /// The first verification's time on the server, in milliseconds.
    pub ok_ms: u64,
    /// The snapshots the simulator damaged.
    pub damaged: u64,
    /// Milliseconds from the damage to the hub's `verify_failed`.
    pub damage_to_alert_ms: u128,
    /// The `verify_failed` alert's message.
    pub alert: String,
}

/// The verification of `guest` on `tier` the hub shows, if any.
fn verification(
    fleet: &FleetStatus,
    guest: Uuid,
    tier: &str,
) -> Option<bosun_proto::verify::VerifyReport> {
    report(fleet)?
        .verifications
        .iter()
        .find(|v| v.guest_id == guest && v.tier == tier)
        .cloned()
}

/// The simulator's address as a PBS server: host, port.
pub(super) fn sim_server(sim: &SimEndpoint) -> Result<(String, u16), DemoError> {
    let url = reqwest::Url::parse(&sim.url)
        .map_err(|e| DemoError::Check(format!("the simulator's url {}: {e}", sim.url)))?;
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => Ok((host.to_owned(), port)),
        _ => Err(DemoError::Check(format!("no host and port in {}", sim.url))),
    }
}

/// Declares the PBS at the simulator's address and seals its token for `durable`.
async fn reachable_pbs(
    n: &mut Narrator,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    (host_arg, server, durable): (&str, &str, &str),
) -> Result<String, DemoError> {
    let password = format!("pbs-{}", Uuid::new_v4().simple());
    sim::sim_declare_remote(
        sim,
        server,
        &json!({
            "type": "pbs", "fingerprint": sim.fingerprint, "datastores": [PBS_DATASTORE],
            "username": PBS_USER, "password": password, "reachable": true,
        }),
    )
    .await?;
    let secret_file = out.join("operator/pbs-verify-password");
    stack::write(&secret_file, &format!("{password}\n"))?;
    let secret_arg = secret_file.display().to_string();
    let sealed = stack::seal(
        bins,
        out,
        &[
            "--host",
            host_arg,
            "--type",
            "pbs",
            "--durable-id",
            durable,
            "--file",
            &secret_arg,
        ],
        &password,
    )
    .await?;
    n.detail(format!(
        "simulator: a PBS at its own address {server} (datastore {PBS_DATASTORE}, its certificate); $ bosunctl secret seal --host … --type pbs --durable-id … --file pbs-verify-password"
    ));
    Ok(sealed)
}

/// The host's desired state with `target` as a further tier scheduled `schedule`, and the
/// operator's plan serial 3 (step 9's plan-2 with the target and `verify_hours: 1`), signed
/// into it; gives the desired-state file.
async fn plan_with_verify(
    (bins, out): (&Path, &Path),
    fleet: &FleetStatus,
    host_arg: &str,
    mut target: Value,
) -> Result<std::path::PathBuf, DemoError> {
    let durable = target["durable_id"].clone();
    let mut document = fleet
        .hosts
        .first()
        .and_then(|h| h.desired.as_ref())
        .map(serde_json::to_value)
        .transpose()
        .map_err(|e| DemoError::Check(format!("the host's desired state: {e}")))?
        .ok_or_else(|| DemoError::Check("the host has no desired state".to_owned()))?;
    let mut plan = read_json(&out.join("operator/plan-2.json"))?;
    plan["serial"] = json!(3);
    let plan_target = json!({
        "type": "pbs", "durable_id": durable, "class": "slow", "role": "pbs-offsite",
        "policy": { "schedule": "daily", "retention": { "keep_last": 3 } },
        "state": "attached", "label": "verified PBS",
    });
    push(&mut plan["targets"], plan_target)?;
    push(&mut plan["backup"]["further_tiers"], durable.clone())?;
    push(&mut document["storage"], target.take())?;
    plan["backup"]["verify_hours"] = json!(1);
    // Step 9's PBS tier first, this one next (the NFS tier no plan names stays refused).
    let tiers = document["backup_policy"]["further_tiers"]
        .as_array_mut()
        .ok_or_else(|| DemoError::Check("desired state has no further tiers".to_owned()))?;
    tiers.insert(1.min(tiers.len()), durable);
    let file = out.join("operator/desired-verify.json");
    write_json(&file, &document)?;
    sign_plan(bins, out, host_arg, ("plan-3.json", &plan), &file).await?;
    Ok(file)
}

/// Appends `item` to the JSON list `list`.
fn push(list: &mut Value, item: Value) -> Result<(), DemoError> {
    list.as_array_mut()
        .ok_or_else(|| DemoError::Check(format!("no list to add {item} to")))?
        .push(item);
    Ok(())
}

/// The step; see the module documentation.
pub(super) async fn verify_between_restore_tests(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    (host_id, alpha, alpha_vmid): (Uuid, Uuid, u32),
) -> Result<VerifyStepOutcome, DemoError> {
    let host_arg = host_id.to_string();
    let (server, port) = sim_server(sim)?;
    let durable = format!(
        "{PBS_USER}@{server}:{port}:{PBS_DATASTORE}#{}",
        sim.fingerprint
    );
    let sealed = reachable_pbs(n, (bins, out), sim, (&host_arg, &server, &durable)).await?;
    let (schedule, at) = super::backup_tiers::hourly_soon(LEAD)?;
    let target = json!({
        "type": "pbs", "durable_id": durable, "class": "slow", "role": "pbs-offsite",
        "policy": { "schedule": schedule, "retention": { "keep_last": 3 } },
        "state": "attached", "label": "verified PBS", "credentials": sealed,
    });
    let fleet = FleetStatus::fetch(client, 50).await?;
    let file = plan_with_verify((bins, out), &fleet, &host_arg, target).await?;
    n.detail("$ bosunctl policy sign-plan --host … -f id_ed25519 --plan plan-3.json --desired desired-verify.json   (serial 3: this PBS as a further tier; \"verify_hours\": 1)");
    set_desired(bins, out, &host_arg, &file).await?;
    n.detail(format!(
        "$ bosunctl desired set --host … desired-verify.json   (the new tier hourly at {schedule}, next at {at}; an hour of the verify interval lasts a second here)"
    ));
    let fleet = converge(
        children,
        client,
        "an ok verification of alpha's group",
        |f| verification(f, alpha, &durable).is_some_and(|v| v.outcome == VerifyOutcome::Ok),
    )
    .await?;
    let ok = verification(&fleet, alpha, &durable)
        .ok_or_else(|| DemoError::Check("the verification went away".to_owned()))?;
    let mut outcome = VerifyStepOutcome {
        tier: durable.clone(),
        ok_ms: ok.duration_ms,
        ..VerifyStepOutcome::default()
    };
    let requests = sim::sim_requests(sim).await?;
    let verify_path = format!("/admin/datastore/{PBS_DATASTORE}/verify");
    let group = alpha_vmid.to_string();
    check(
        requests.iter().any(|r| {
            r.method == "POST"
                && r.path.ends_with(&verify_path)
                && r.param("backup-type") == Some("ct")
                && r.param("backup-id") == Some(group.as_str())
        }),
        || format!("PBS saw no verify of ct/{group}"),
    )?;
    n.detail(format!(
        "agent → PBS {server}:{port}: POST /api2/json/admin/datastore/{PBS_DATASTORE}/verify backup-type=ct backup-id={group} → ok in {} ms",
        ok.duration_ms
    ));
    n.detail("$ bosunctl status   (the host's verify summary, a verify line per guest and tier; alpha's:)");
    for line in status::render(&fleet)
        .into_iter()
        .filter(|l| l.trim_start().starts_with("verification"))
    {
        n.detail(format!("  {}", line.trim()));
    }
    for v in report(&fleet)
        .map(|r| r.verifications.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|v| v.guest_id == alpha)
    {
        let shown = v.tier.split('#').next().unwrap_or_default();
        let outcome = match v.outcome {
            VerifyOutcome::Ok => "ok",
            VerifyOutcome::Failed => "FAILED",
            VerifyOutcome::Error | VerifyOutcome::Unknown => "could not run",
        };
        n.detail(format!(
            "    alpha on {shown}: {outcome} in {} ms ({})",
            v.duration_ms, v.detail
        ));
    }
    n.detail("    (step 9's server pbs.demo resolves nowhere outside the simulated node: its verify cannot run, `error`, judged nothing and tried again)");
    outcome.damaged = damage(sim, &server, alpha_vmid).await?;
    let damaged_at = Instant::now();
    n.detail(format!(
        "$ curl -X POST …/_sim/remotes/{server}/chunks/damage -d '{{\"datastore\": \"{PBS_DATASTORE}\", \"vmid\": {alpha_vmid}}}'   ({} snapshots of ct/{alpha_vmid} lose chunks)",
        outcome.damaged
    ));
    // The alert and the report it came from: the status reads the host's report and the
    // alerts one after the other, so a report that lands between them shows the alert beside
    // the report before it.
    let fleet = converge(children, client, "the verify_failed alert", |f| {
        f.alerts
            .iter()
            .any(|a| a.kind == AlertKind::VerifyFailed && a.message.contains(&durable))
            && verification(f, alpha, &durable).is_some_and(|v| v.outcome == VerifyOutcome::Failed)
    })
    .await?;
    outcome.damage_to_alert_ms = damaged_at.elapsed().as_millis();
    let failed = verification(&fleet, alpha, &durable)
        .ok_or_else(|| DemoError::Check("the failed verification went away".to_owned()))?;
    check(
        failed.outcome == VerifyOutcome::Failed && failed.last_ok_at.is_some(),
        || format!("alpha's verification on the tier: {failed:?}"),
    )?;
    outcome.alert = fleet
        .alerts
        .iter()
        .find(|a| a.kind == AlertKind::VerifyFailed && a.message.contains(&durable))
        .map(|a| a.message.clone())
        .unwrap_or_default();
    check(outcome.alert.contains(&alpha.to_string()), || {
        format!("verify_failed does not name guest alpha: {}", outcome.alert)
    })?;
    n.detail(format!(
        "agent: verification failed ({}), the last ok kept → hub: verify_failed — {} ({} ms after the damage)",
        failed.detail, outcome.alert, outcome.damage_to_alert_ms
    ));
    Ok(outcome)
}

/// Damages the chunks of `vmid`'s group on the PBS at `server`; gives the snapshots damaged.
async fn damage(sim: &SimEndpoint, server: &str, vmid: u32) -> Result<u64, DemoError> {
    let answer = sim::sim_post_json(
        sim,
        "POST /_sim/remotes/{server}/chunks/damage",
        &format!("remotes/{server}/chunks/damage"),
        &json!({ "datastore": PBS_DATASTORE, "vmid": vmid }),
    )
    .await?;
    let damaged = answer["damaged"].as_u64().unwrap_or_default();
    check(damaged > 0, || {
        format!("the simulator damaged nothing: {answer}")
    })?;
    Ok(damaged)
}
