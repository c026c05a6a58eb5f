//! The tunnel, managed (decisions 0082 and 0084). cloudflared is not installable here, so the
//! tunnel's two replicas are `bosun-cloudflared-sim` (the stand-in the `agent_tunnel` suite
//! runs): each reads cloudflared's configuration file at its start and serves `/ready` and
//! `/metrics` on loopback, and the `systemctl` it writes restarts one replica (on a host: the
//! polkit rule that lets the agent restart `bosun-tunnel@*.service` and nothing else).
//!
//! The agent gains `[tunnel]` (its configuration file, its credentials file, the two replicas,
//! a restart after 3 failed probes) and restarts under the unit stand-in. The operator seals
//! the tunnel's credentials file to the host (`bosunctl secret seal --tunnel-id`) and signs a
//! plan whose `tunnel` routes `alpha.demo.example` to guest alpha, port 80. The agent reads
//! alpha's address on the bridge from Proxmox, writes the ingress (that rule, the catch-all
//! last) and the credentials (0640), and restarts the replicas one at a time. The report,
//! `bosunctl status` and `hosts show` give the tunnel's routes, edge connections and version.
//! Then replica a hangs (its `/ready` answers 503): after 3 failed probes the agent restarts
//! it, and the step prints the time from the failure to the restart. Last, a hostile hub
//! points the hostname at another guest by changing the signed plan's bytes: the agent refuses
//! the plan (`data_plan.refused` in the audit trail), and the tunnel keeps its routes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use bosun_proto::signed::SignedDocument;
use serde_json::{Value, json};
use uuid::Uuid;

mod stand_in;

use super::backup_tiers::{read_json, report, set_desired, sign_plan};
use super::children::{Children, RunAs};
use super::helper::HelperInstall;
use super::scenario::{check, converge, vmid_of, write_json};
use super::sim::{self, SimEndpoint};
use super::stack::{self, AgentFiles};
use super::unit::FakeSystemd;
use super::{DemoError, Narrator};
use bosunctl::client::HubClient;
use bosunctl::status::{self, FleetStatus};
use stand_in::{StandIn, artifact, fails, reconfigure_agent};

/// The public hostname the operator routes to guest alpha.
pub const HOSTNAME: &str = "alpha.demo.example";
/// The tunnel (as `cloudflared tunnel create` printed its id).
const TUNNEL_ID: Uuid = Uuid::from_u128(0x6ff4_2ae2_765d_4adf_8112_31c5_5c15_51ef);
/// Failed readiness probes in a row before the agent restarts a replica.
pub const RESTART_AFTER: u32 = 3;
/// How often the agent probes each replica, milliseconds.
pub const INTERVAL_MS: u64 = 200;

/// What the step established.
#[derive(Debug, Clone, Default)]
pub struct TunnelOutcome {
    /// The ingress the agent wrote, in file order: `(hostname, service)`, `None` the catch-all.
    pub ingress: Vec<(Option<String>, String)>,
    /// Guest alpha's service on the bridge (`http://ADDRESS:80`), from Proxmox.
    pub service: String,
    /// Modes of the configuration and the credentials file the agent wrote.
    pub modes: (u32, u32),
    /// Both replicas ran with the route and the credentials (the tunnel's id they read).
    pub credentials: Vec<Option<String>>,
    /// Moments (20 ms apart) when no replica was ready while the agent restarted them.
    pub all_down_samples: u32,
    /// What the hub's report gave: `(routes, connections, version)`.
    pub reported: (u32, Option<u32>, Option<String>),
    /// The `tunnel` line of `bosunctl status` and of `bosunctl hosts show`.
    pub lines: (String, String),
    /// The restarts the report counted before replica a failed and once it was back.
    pub restarts: (u32, u32),
    /// Milliseconds from replica a's failure to the agent's restart of it.
    pub failure_to_restart_ms: u64,
    /// Milliseconds from the failure to replica a answering `/ready` again.
    pub failure_to_ready_ms: u64,
    /// Restarts of replica b while a failed (none).
    pub other_restarted: usize,
    /// The refusal the audit trail holds for the hub's forged plan.
    pub forged_refused: String,
    /// Whether the routes and the replicas stayed as the operator signed them.
    pub forged_changed_nothing: bool,
    /// Whether the tunnel's secret appeared in `bosunctl status --json`.
    pub secret_in_status: bool,
}

/// The newest plan file the operator signed (`operator/plan-N.json`): its serial and content.
pub(super) fn newest_plan(out: &Path) -> Result<(u64, Value), DemoError> {
    let dir = out.join("operator");
    let newest = std::fs::read_dir(&dir)
        .map_err(artifact(&dir))?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("plan-")?
                .strip_suffix(".json")?
                .parse::<u64>()
                .ok()
        })
        .max()
        .ok_or_else(|| DemoError::Check("the operator signed no plan before".to_owned()))?;
    Ok((newest, read_json(&dir.join(format!("plan-{newest}.json")))?))
}

/// Seals the tunnel's credentials to the host and signs the plan routing [`HOSTNAME`] to
/// alpha; gives the desired-state file (set at the hub) and the tunnel's secret.
async fn sign_route(
    n: &mut Narrator,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    (host_id, alpha): (Uuid, Uuid),
) -> Result<(PathBuf, String), DemoError> {
    let host_arg = host_id.to_string();
    let secret = format!("demo-tunnel-secret-{}", Uuid::new_v4().simple());
    let credentials = out.join("operator/tunnel-credentials.json");
    let file = json!({
        "AccountTag": "5ab4e9dfbd435d24068829fda0077963",
        "TunnelSecret": secret,
        "TunnelID": TUNNEL_ID,
    });
    stack::write(&credentials, &file.to_string())?;
    let (tunnel_arg, file_arg) = (TUNNEL_ID.to_string(), credentials.display().to_string());
    let sealed = stack::seal(
        bins,
        out,
        &[
            "--host",
            &host_arg,
            "--tunnel-id",
            &tunnel_arg,
            "--file",
            &file_arg,
        ],
        &secret,
    )
    .await?;
    n.detail(format!(
        "$ bosunctl secret seal --host … --tunnel-id {TUNNEL_ID} --file tunnel-credentials.json   (cloudflared's credentials file, sealed to the host for this tunnel)"
    ));
    let fleet = FleetStatus::fetch(client, 50).await?;
    let mut document = fleet
        .hosts
        .first()
        .and_then(|h| h.desired.as_ref())
        .map(serde_json::to_value)
        .transpose()
        .map_err(|e| DemoError::Check(format!("the host's desired state: {e}")))?
        .ok_or_else(|| DemoError::Check("the host has no desired state".to_owned()))?;
    document["tunnel_credentials"] = json!(sealed);
    let (serial, mut plan) = newest_plan(out)?;
    let serial = serial + 1;
    plan["serial"] = json!(serial);
    plan["tunnel"] = json!({
        "tunnel_id": TUNNEL_ID,
        "routes": [{ "hostname": HOSTNAME, "guest_id": alpha, "port": 80 }],
    });
    let desired = out.join("operator/desired-tunnel.json");
    write_json(&desired, &document)?;
    let plan_name = format!("plan-{serial}.json");
    sign_plan(bins, out, &host_arg, (&plan_name, &plan), &desired).await?;
    n.detail(format!(
        "$ bosunctl policy sign-plan --host … -f id_ed25519 --plan {plan_name} --desired desired-tunnel.json   (serial {serial}: \"tunnel\": {HOSTNAME} → guest alpha, port 80)"
    ));
    set_desired(bins, out, &host_arg, &desired).await?;
    n.detail("$ bosunctl desired set --host … desired-tunnel.json   (the signed plan and \"tunnel_credentials\")");
    Ok((desired, secret))
}

/// Guest alpha's IPv4 address on the bridge, as Proxmox reads it from the running container.
async fn alpha_address(sim: &SimEndpoint, vmid: u32) -> Result<String, DemoError> {
    use bosun_pve::{Pve as _, Vmid};
    let id = Vmid::new(vmid).map_err(|e| DemoError::Check(format!("vmid {vmid}: {e}")))?;
    let interfaces = sim::pve_client(sim)?
        .ct_interfaces(id)
        .await
        .map_err(|source| DemoError::Pve {
            what: "GET interfaces",
            source,
        })?;
    interfaces
        .into_iter()
        .find(|i| i.name == "eth0")
        .and_then(|i| i.inet)
        .and_then(|inet| inet.split('/').next().map(str::to_owned))
        .ok_or_else(|| DemoError::Check(format!("CT {vmid} has no address on eth0")))
}

/// The ingress rules of the configuration the agent wrote, in order.
fn ingress_of(text: &str) -> Vec<(Option<String>, String)> {
    let mut rules = Vec::new();
    let mut hostname = None;
    for line in text.lines() {
        let line = line.trim().trim_start_matches("- ");
        if let Some(h) = line.strip_prefix("hostname:") {
            hostname = Some(h.trim().trim_matches('"').to_owned());
        } else if let Some(s) = line.strip_prefix("service:") {
            rules.push((hostname.take(), s.trim().trim_matches('"').to_owned()));
        }
    }
    rules
}

fn mode(path: &Path) -> Result<u32, DemoError> {
    use std::os::unix::fs::PermissionsExt as _;
    Ok(std::fs::metadata(path)
        .map_err(artifact(path))?
        .permissions()
        .mode()
        & 0o777)
}

/// Waits until both replicas run with alpha's route and the sealed credentials, then reads
/// what the agent wrote.
async fn placed(
    n: &mut Narrator,
    children: &mut Children,
    stand_in: &StandIn,
    service: &str,
    outcome: &mut TunnelOutcome,
) -> Result<(), DemoError> {
    let begun = Instant::now();
    let want = BTreeMap::from([(HOSTNAME.to_owned(), service.to_owned())]);
    let tunnel = Some(TUNNEL_ID.to_string());
    let view = stand_in
        .until(
            children,
            "both replicas running with alpha's route and the credentials",
            |v| {
                v.replicas
                    .iter()
                    .all(|r| r.routes == want && r.credentials == tunnel && r.connections > 0)
            },
        )
        .await?;
    let config = stand_in.dir.join("config.yml");
    let text = std::fs::read_to_string(&config).map_err(artifact(&config))?;
    outcome.ingress = ingress_of(&text);
    outcome.modes = (
        mode(&config)?,
        mode(&stand_in.dir.join("credentials.json"))?,
    );
    outcome.credentials = view
        .replicas
        .iter()
        .map(|r| r.credentials.clone())
        .collect();
    outcome.all_down_samples = view.all_down_samples;
    n.detail(format!(
        "agent → tunnel/config.yml (mode {:04o}, {:.1} s after the desired state):",
        outcome.modes.0,
        begun.elapsed().as_secs_f64()
    ));
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        n.detail(format!("  {line}"));
    }
    let first: Vec<u64> = view
        .replicas
        .iter()
        .filter_map(|r| r.restarts_ms.first().copied())
        .collect();
    let units: Vec<&str> = stand_in
        .described
        .replicas
        .iter()
        .map(|r| r.unit.as_str())
        .collect();
    let gap = match first.as_slice() {
        [a, b] => format!("{} ms", b.saturating_sub(*a)),
        _ => "?".to_owned(),
    };
    n.detail(format!(
        "agent → tunnel/credentials.json (mode {:04o}, TunnelID {TUNNEL_ID}); {} restarted, then {} {gap} later once the first answered /ready again: never both down ({} of the stand-in's 20 ms samples found no replica ready)",
        outcome.modes.1,
        units.first().unwrap_or(&"?"),
        units.get(1).unwrap_or(&"?"),
        outcome.all_down_samples
    ));
    check(
        outcome.ingress
            == [
                (Some(HOSTNAME.to_owned()), service.to_owned()),
                (None, "http_status:404".to_owned()),
            ]
            && outcome.modes == (0o640, 0o640)
            && outcome.all_down_samples == 0,
        || {
            format!(
                "the agent wrote {:?} (modes {:?}); all down in {} samples",
                outcome.ingress, outcome.modes, outcome.all_down_samples
            )
        },
    )
}

/// The hub's report, `bosunctl status` and `hosts show`: routes, edge connections, version.
async fn shown(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    (host_id, secret): (Uuid, &str),
    outcome: &mut TunnelOutcome,
) -> Result<(), DemoError> {
    let managed = |f: &FleetStatus| {
        report(f)
            .and_then(|r| r.tunnel.as_ref())
            .and_then(|t| t.managed.clone().filter(|_| t.healthy))
    };
    let fleet = converge(
        children,
        client,
        "the report's tunnel: one route, both replicas' connections and the version",
        |f| {
            managed(f)
                .is_some_and(|m| m.routes == 1 && m.connections == Some(8) && m.version.is_some())
        },
    )
    .await?;
    let m = managed(&fleet).unwrap_or_default();
    outcome.reported = (m.routes, m.connections, m.version.clone());
    outcome.restarts.0 = m.restarts;
    let line = status::render(&fleet)
        .into_iter()
        .find(|l| l.trim_start().starts_with("tunnel"))
        .unwrap_or_default();
    n.detail("$ bosunctl status");
    n.detail(format!("  {}", line.trim()));
    let host_arg = host_id.to_string();
    let detail = super::labels::ctl_plain(bins, out, &["hosts", "show", &host_arg]).await?;
    let show_line = detail
        .lines()
        .find(|l| l.starts_with("tunnel:"))
        .unwrap_or_default()
        .to_owned();
    n.detail(format!("$ bosunctl hosts show {host_arg}"));
    n.detail(format!("  {show_line}"));
    let printed = stack::ctl(bins, out, &["status"]).await?.to_string();
    outcome.secret_in_status = printed.contains(secret);
    check(!outcome.secret_in_status, || {
        "the tunnel's secret is in `bosunctl status --json`".to_owned()
    })?;
    outcome.lines = (line.trim().to_owned(), show_line);
    Ok(())
}

/// A hostile hub points [`HOSTNAME`] at another guest by changing the signed plan's bytes:
/// the agent refuses the plan (audited), the routes and the replicas stay; then the
/// operator's desired state again.
async fn hostile_hub(
    n: &mut Narrator,
    children: &mut Children,
    (client, stand_in): (&HubClient, &StandIn),
    (bins, out): (&Path, &Path),
    (host_id, alpha, signed): (Uuid, Uuid, &Path),
    outcome: &mut TunnelOutcome,
) -> Result<(), DemoError> {
    let host_arg = host_id.to_string();
    let before = stand_in.view().await?;
    let fleet = FleetStatus::fetch(client, 50).await?;
    let other = status::guest_lines(
        fleet
            .hosts
            .first()
            .ok_or_else(|| DemoError::Check("the hub lists no host".to_owned()))?,
    )
    .into_iter()
    .filter_map(|g| g.guest_id.filter(|id| *id != alpha).zip(Some(g.hostname)))
    .next()
    .ok_or_else(|| DemoError::Check("no other guest to point the hostname at".to_owned()))?;
    let mut forged = read_json(signed)?;
    let plan: SignedDocument = serde_json::from_value(forged["data_plan"].clone())
        .map_err(|e| DemoError::Check(format!("the desired state's signed plan: {e}")))?;
    let text = plan
        .bytes_within("data_plan", 1 << 20)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(|| DemoError::Check("the signed plan is not base64 text".to_owned()))?;
    // The hub re-points the route and raises the serial past the operator's (a plan of a
    // serial already in force is refused for that alone): only the signature is left to stop it.
    let mut document: Value = serde_json::from_str(&text)
        .map_err(|e| DemoError::Check(format!("the signed plan is not JSON: {e}")))?;
    let serial = document["serial"].as_u64().unwrap_or_default() + 1;
    document["serial"] = json!(serial);
    document["tunnel"]["routes"][0]["guest_id"] = json!(other.0);
    let altered = document.to_string();
    forged["data_plan"] =
        serde_json::to_value(SignedDocument::new(altered.as_bytes(), &plan.signature))
            .map_err(|e| DemoError::Check(format!("encoding the forged plan: {e}")))?;
    let file = out.join("hostile/desired-tunnel.json");
    stack::create_dir(&out.join("hostile"))?;
    write_json(&file, &forged)?;
    // A second of slack for the audit trail's time stamps (nothing refused a plan before).
    let now = jiff::Timestamp::now();
    let since = now
        .checked_sub(jiff::SignedDuration::from_secs(1))
        .unwrap_or(now);
    set_desired(bins, out, &host_arg, &file).await?;
    n.detail(format!(
        "hostile hub: $ bosunctl desired set --host … hostile/desired-tunnel.json   (the signed plan's bytes changed: {HOSTNAME} → guest {}, serial {serial}, the operator's signature kept)",
        other.1
    ));
    let refused = super::controller::audited(
        children,
        (bins, out),
        host_id,
        since,
        ("data_plan.refused in the audit trail", |e| {
            e.action == "data_plan.refused"
        }),
    )
    .await?;
    outcome.forged_refused = super::controller::audit_line(&refused);
    n.detail(format!(
        "$ bosunctl audit --host …   {}",
        outcome.forged_refused
    ));
    let after = stand_in.view().await?;
    let unchanged = before
        .replicas
        .iter()
        .zip(&after.replicas)
        .all(|(b, a)| b.routes == a.routes && b.restarts_ms == a.restarts_ms);
    let config = stand_in.dir.join("config.yml");
    let text = std::fs::read_to_string(&config).map_err(artifact(&config))?;
    outcome.forged_changed_nothing = unchanged && ingress_of(&text) == outcome.ingress;
    check(outcome.forged_changed_nothing, || {
        format!(
            "the forged plan changed the tunnel: {:?} → {:?}",
            before.replicas.first().map(|r| &r.routes),
            after.replicas.first().map(|r| &r.routes)
        )
    })?;
    n.detail(format!(
        "agent: the operator's plan stays; {HOSTNAME} still reaches alpha ({}), no replica restarted",
        outcome.service
    ));
    set_desired(bins, out, &host_arg, signed).await?;
    n.detail("$ bosunctl desired set --host … desired-tunnel.json   (the operator's, again)");
    Ok(())
}

/// The step; see the module documentation.
pub(super) async fn managed_tunnel(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    (helper, agent, unit, run_as): (&HelperInstall, &AgentFiles, &FakeSystemd, Option<RunAs>),
    (host_id, alpha): (Uuid, Uuid),
) -> Result<TunnelOutcome, DemoError> {
    let mut outcome = TunnelOutcome::default();
    let stand_in = StandIn::start(children, (bins, out), run_as).await?;
    let units: Vec<&str> = stand_in
        .described
        .replicas
        .iter()
        .map(|r| r.unit.as_str())
        .collect();
    n.detail(format!(
        "bosun-cloudflared-sim: tunnel {TUNNEL_ID} as two replicas ({}), each reading tunnel/config.yml at its start (only the catch-all yet) and serving /ready and /metrics; its systemctl restarts one (on a host: the polkit rule for bosun-tunnel@*.service)",
        units.join(", ")
    ));
    reconfigure_agent(&stand_in, (helper, agent, unit)).await?;
    n.detail(format!(
        "agent.toml gains [tunnel] (config_file, credentials_file, the two replicas, restart_after = {RESTART_AFTER}, probes every {INTERVAL_MS} ms); $ systemctl restart bosun-agent"
    ));
    let (signed, secret) = Box::pin(sign_route(n, client, (bins, out), (host_id, alpha))).await?;
    let fleet = FleetStatus::fetch(client, 50).await?;
    let vmid = vmid_of(&fleet, alpha)?;
    let address = alpha_address(sim, vmid).await?;
    outcome.service = format!("http://{address}:80");
    n.detail(format!(
        "proxmox: CT {vmid} (alpha) eth0 {address} on the bridge: the agent reads it itself, the plan names only alpha's guest id"
    ));
    Box::pin(placed(
        n,
        children,
        &stand_in,
        &outcome.service.clone(),
        &mut outcome,
    ))
    .await?;
    Box::pin(shown(
        n,
        children,
        client,
        (bins, out),
        (host_id, &secret),
        &mut outcome,
    ))
    .await?;
    Box::pin(fails(n, children, client, &stand_in, &mut outcome)).await?;
    Box::pin(hostile_hub(
        n,
        children,
        (client, &stand_in),
        (bins, out),
        (host_id, alpha, &signed),
        &mut outcome,
    ))
    .await?;
    Ok(outcome)
}
