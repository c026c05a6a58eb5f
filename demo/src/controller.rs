//! The controller in every guest is managed (decision 0074). The operator signs a golden
//! recipe (`bosunctl golden sign-recipe`: a golden version and the SHA-256 of the controller
//! image archive the helper bakes); the host builds that golden image through its helper,
//! boots it once in a scratch guest, and provisions guest delta from its own build. The
//! provisioning journals the recipe's signed digest as delta's controller record, so the hub
//! shows which controller delta should run (`controller_expected`) beside what it says it runs
//! (`controller_digest`).
//!
//! Delta's controller is `bosun-guest run`, the controller image's entry point (decision 0088),
//! started by the demo as the guest's systemd would start it: one process that quiesces
//! delta's apps around a due backup and, having no switch command, adopts the signed digest its
//! record names at its first start and reports it healthy every second. Then it crashes
//! (SIGKILL). The agent's heal task restarts it in place
//! after `heal_after` (2.5 s here) through the helper's `restart_controller` (`pct exec …
//! systemctl restart bosun-bootstrap.service`, counted by the simulated guest); the demo, as
//! the guest's systemd, starts it again, it reports healthy, and the hub's audit trail holds
//! `controller.restarted`. Nothing is destroyed or rolled back. The step prints the time from
//! the crash to the restart and to the first healthy report after it.

use std::path::Path;
use std::time::{Duration, Instant};

use bosun_proto::admin::AuditRecord;
use bosun_proto::helper::{GUEST_BOOTSTRAP_PATH, GUEST_CONTROLLER_DIGEST};
use bosun_proto::report::GuestReport;
use serde_json::json;
use sha2::Digest as _;
use uuid::Uuid;

use super::backup_tiers::{report, set_desired};
use super::children::Children;
use super::guest_steps;
use super::scenario::{CONVERGE, check, converge, observed, vmid_of, write_json};
use super::sim::{self, SimEndpoint};
use super::stack;
use super::{DemoError, Narrator};
use bosunctl::client::HubClient;
use bosunctl::status::FleetStatus;

/// The golden version the operator's recipe names.
const VERSION: &str = "demo-1";
/// The controller image inside the archive.
const IMAGE: &str = "bosun/controller:demo";
/// The child running delta's controller.
const CHILD: &str = "bosun-guest-delta-controller";
/// Where the simulated guest counts `systemctl restart` of the controller's unit.
const RESTARTS: &str = "/run/bosun-pvesim/restarts/bosun-bootstrap.service";

/// What the step established.
#[derive(Debug, Clone, Default)]
pub struct ControllerOutcome {
    /// The recipe's signed controller digest.
    pub signed: String,
    /// Guest delta's vmid.
    pub vmid: u32,
    /// Guest delta.
    pub guest: Uuid,
    /// What the hub showed of delta before the crash: `(controller_digest, controller_expected)`.
    pub reported: (Option<String>, Option<String>),
    /// Milliseconds from the crash to the agent's in-place restart.
    pub crash_to_restart_ms: u128,
    /// Milliseconds from the crash to the first healthy report after the restart.
    pub crash_to_healed_ms: u128,
    /// Destroy calls of delta the simulator saw after the crash (none).
    pub destroyed_after_crash: usize,
}

/// Delta's entry in the host's last report.
pub(super) fn delta_report(fleet: &FleetStatus, guest: Uuid) -> Option<&GuestReport> {
    report(fleet)?
        .guests
        .iter()
        .find(|g| g.guest_id == Some(guest))
}

/// `bosun-guest`'s arguments for delta: `run` as the controller image runs it (its state in
/// `state`'s directory), or one `controller --once` pass with the same digest file.
fn controller_args(boot: &Path, state: &Path, once: bool) -> Vec<String> {
    let dir = state.parent().unwrap_or(state);
    let mut args = vec!["--bootstrap".to_owned(), boot.display().to_string()];
    for (flag, file) in [
        ("--marker", "quiesce.marker"),
        ("--checksums", "restore-check.sha256"),
        ("--restore-check", "restore-check"),
    ] {
        args.push(flag.to_owned());
        args.push(dir.join(file).display().to_string());
    }
    if once {
        args.extend(["controller", "--once", "--activate", r#"["true"]"#].map(str::to_owned));
    } else {
        args.push("run".to_owned());
    }
    args.push("--state".to_owned());
    args.push(state.display().to_string());
    args
}

/// Starts delta's controller as a child, as the guest's systemd does.
fn start_controller(
    children: &mut Children,
    (bins, out): (&Path, &Path),
    boot: &Path,
    state: &Path,
) -> Result<(), DemoError> {
    let args = controller_args(boot, state, false);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    children.spawn(
        CHILD,
        &stack::program(bins, "bosun-guest")?,
        &args,
        &out.join("logs/controller-delta.log"),
        None,
    )
}

/// Delta's systemd restarting its controller unit after the helper placed a new image: the
/// controller stops, the container's view of `/etc/bosun-bootstrap` (beside the demo's copy of
/// delta's bootstrap) gets the digest the helper wrote there, `placed`, and it starts again.
pub(super) async fn restart_on(
    children: &mut Children,
    (bins, out): (&Path, &Path),
    vmid: u32,
    placed: &[u8],
) -> Result<(), DemoError> {
    children.kill(CHILD).await?;
    let guest = out.join(format!("guests/{vmid}"));
    let boot = guest.join(GUEST_BOOTSTRAP_PATH.trim_start_matches('/'));
    let file = guest.join(GUEST_CONTROLLER_DIGEST.trim_start_matches('/'));
    std::fs::write(&file, placed).map_err(|source| DemoError::Artifact {
        path: file.clone(),
        source,
    })?;
    start_controller(
        children,
        (bins, out),
        &boot,
        &guest.join("controller.digest"),
    )
}

/// The operator signs the recipe (`operator/golden-recipe.json`); gives the signed digest.
async fn sign_recipe(n: &mut Narrator, (bins, out): (&Path, &Path)) -> Result<String, DemoError> {
    let signed = format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(super::helper::CONTROLLER_IMAGE_BYTES))
    );
    let recipe_arg = out
        .join("operator/golden-recipe.json")
        .display()
        .to_string();
    let key_arg = out.join("operator/id_ed25519").display().to_string();
    stack::ctl_text(
        bins,
        out,
        &[
            "golden",
            "sign-recipe",
            "--golden-version",
            VERSION,
            "--controller-image",
            IMAGE,
            "--controller-digest",
            &signed,
            "-f",
            &key_arg,
            "-o",
            &recipe_arg,
        ],
    )
    .await?;
    n.detail(format!(
        "$ bosunctl golden sign-recipe --golden-version {VERSION} --controller-image {IMAGE} --controller-digest {}… -f id_ed25519 -o golden-recipe.json   (sha256sum of the controller image archive the helper bakes)",
        &signed[..19]
    ));
    Ok(signed)
}

/// Sets the host's desired state with the signed recipe and, with `delta`, guest delta
/// naming the recipe's version, as `operator/<name>`.
async fn publish(
    client: &HubClient,
    (bins, out): (&Path, &Path),
    host_id: Uuid,
    delta: Option<Uuid>,
    name: &str,
) -> Result<(), DemoError> {
    let fleet = FleetStatus::fetch(client, 50).await?;
    let mut document = fleet
        .hosts
        .first()
        .and_then(|h| h.desired.as_ref())
        .map(serde_json::to_value)
        .transpose()
        .map_err(|e| DemoError::Check(format!("the host's desired state: {e}")))?
        .ok_or_else(|| DemoError::Check("the host has no desired state".to_owned()))?;
    document["golden_recipe"] =
        super::backup_tiers::read_json(&out.join("operator/golden-recipe.json"))?;
    if let Some(delta) = delta {
        document["guests"]
            .as_array_mut()
            .ok_or_else(|| DemoError::Check("desired state has no guest list".to_owned()))?
            .push(json!({
                "guest_id": delta,
                "hostname": "delta",
                "customer": { "customer_id": "cust-delta", "display_name": "Customer delta" },
                "resources": { "cores": 1, "memory_mib": 512, "rootfs_gib": 8 },
                "power": "running",
                "golden": { "version": VERSION },
            }));
    }
    let file = out.join("operator").join(name);
    write_json(&file, &document)?;
    set_desired(bins, out, &host_id.to_string(), &file).await
}

/// Reads the hub's audit trail of the host until an entry at or after `since` matches
/// `wanted`, a child dies, or [`CONVERGE`] passes; gives the entry.
pub(super) async fn audited(
    children: &mut Children,
    (bins, out): (&Path, &Path),
    host_id: Uuid,
    since: jiff::Timestamp,
    (what, wanted): (&str, impl Fn(&AuditRecord) -> bool),
) -> Result<AuditRecord, DemoError> {
    let host_arg = host_id.to_string();
    let deadline = Instant::now() + CONVERGE;
    loop {
        let trail = stack::ctl(bins, out, &["audit", "--host", &host_arg, "--limit", "50"]).await?;
        let page: bosun_proto::admin::AuditPage = serde_json::from_value(trail)
            .map_err(|err| DemoError::Check(format!("`bosunctl audit` printed no page: {err}")))?;
        if let Some(entry) = page
            .entries
            .into_iter()
            .find(|e| e.last_at.unwrap_or(e.at) >= since && wanted(e))
        {
            return Ok(entry);
        }
        children.check_alive()?;
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: what.to_owned(),
                after: CONVERGE,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub(super) fn audit_line(entry: &AuditRecord) -> String {
    format!(
        "{}  {}  {}",
        entry.at.strftime("%H:%M:%S"),
        entry.action,
        bosun_proto::audit_text::one_line(&entry.detail)
    )
}

/// Publishes the recipe and waits for the host's verified build of it, then adds guest
/// delta and waits for it to run with the signed digest as its controller record; gives
/// delta's vmid.
async fn build_then_provision(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    (host_id, delta, signed): (Uuid, Uuid, &str),
) -> Result<u32, DemoError> {
    let begun = Instant::now();
    let since = jiff::Timestamp::now();
    publish(client, (bins, out), host_id, None, "desired-recipe.json").await?;
    n.detail("$ bosunctl desired set --host … desired-recipe.json   (\"golden_recipe\": the signed recipe)");
    let verified = audited(
        children,
        (bins, out),
        host_id,
        since,
        ("the host's verified golden build", |e| {
            e.action == "golden.verified"
        }),
    )
    .await?;
    n.detail(format!(
        "agent → helper build_golden (a builder from the Debian template; the controller image baked only because it hashes to the signed digest; vzdump; the helper hashes the archive), then a boot in a scratch guest: {:.1} s",
        begun.elapsed().as_secs_f64()
    ));
    n.detail(format!(
        "$ bosunctl audit --host …   {}",
        audit_line(&verified)
    ));
    let begun = Instant::now();
    publish(
        client,
        (bins, out),
        host_id,
        Some(delta),
        "desired-delta.json",
    )
    .await?;
    n.detail(format!("$ bosunctl desired set --host … desired-delta.json   (guest delta: \"golden\": {{\"version\": \"{VERSION}\"}})"));
    let fleet = converge(
        children,
        client,
        "guest delta provisioned from the host's build",
        |f| {
            observed(f, delta) == "running"
                && delta_report(f, delta)
                    .is_some_and(|g| g.controller_expected.as_deref() == Some(signed))
        },
    )
    .await?;
    let vmid = vmid_of(&fleet, delta)?;
    n.detail(format!(
        "agent: delta restored from the host's own build as CT {vmid} in {:.1} s; its controller record is the recipe's signed digest (provisioning step manage_controller)",
        begun.elapsed().as_secs_f64()
    ));
    Ok(vmid)
}

/// How often the simulated guest restarted the controller's unit.
pub(super) async fn restarts(sim: &SimEndpoint, vmid: u32) -> Result<u64, DemoError> {
    let Some(file) = sim::sim_guest_file(sim, vmid, RESTARTS).await? else {
        return Ok(0);
    };
    let content = file.content()?;
    Ok(String::from_utf8_lossy(&content)
        .trim()
        .parse()
        .unwrap_or_default())
}

/// The step; see the module documentation.
pub(super) async fn managed_controller(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    host_id: Uuid,
) -> Result<ControllerOutcome, DemoError> {
    let delta = Uuid::new_v4();
    let signed = sign_recipe(n, (bins, out)).await?;
    let vmid =
        build_then_provision(n, children, client, (bins, out), (host_id, delta, &signed)).await?;
    let boot = guest_steps::bootstrap(sim, out, vmid).await?;
    let state = out.join(format!("guests/{vmid}/controller.digest"));
    start_controller(children, (bins, out), &boot.path, &state)?;
    n.detail("delta's systemd starts bosun-guest run (the controller image's entry point): the local API names the signed digest; it adopts it and reports healthy every second, and quiesces delta around a due backup");
    let fleet = converge(
        children,
        client,
        "delta's controller reporting the signed digest",
        |f| {
            delta_report(f, delta)
                .is_some_and(|g| g.controller_digest.as_deref() == Some(signed.as_str()))
        },
    )
    .await?;
    let entry = delta_report(&fleet, delta)
        .ok_or_else(|| DemoError::Check("the host no longer reports delta".to_owned()))?;
    let mut outcome = ControllerOutcome {
        signed: signed.clone(),
        vmid,
        guest: delta,
        reported: (
            entry.controller_digest.clone(),
            entry.controller_expected.clone(),
        ),
        ..ControllerOutcome::default()
    };
    n.detail(format!(
        "$ bosunctl status --json   → delta: \"controller_digest\": \"{}\", \"controller_expected\": \"{}\"",
        entry.controller_digest.as_deref().unwrap_or("-"),
        entry.controller_expected.as_deref().unwrap_or("-")
    ));

    let before = restarts(sim, vmid).await?;
    let logged = sim::sim_requests(sim).await?.len();
    children.kill(CHILD).await?;
    let crashed = Instant::now();
    let crashed_at = jiff::Timestamp::now();
    n.detail("delta's controller crashes (SIGKILL): no more health reports");
    let deadline = crashed + CONVERGE;
    while restarts(sim, vmid).await? <= before {
        children.check_alive()?;
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: "the agent's in-place restart of delta's controller".to_owned(),
                after: CONVERGE,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    outcome.crash_to_restart_ms = crashed.elapsed().as_millis();
    n.detail(format!(
        "agent (heal task, silent past heal_after 2.5 s) → helper restart_controller → pct exec {vmid} -- systemctl restart bosun-bootstrap.service   ({} ms after the crash)",
        outcome.crash_to_restart_ms
    ));
    // The guest's systemd runs the controller again: its first pass (one `controller --once`
    // pass with the same digest file, timed) reports healthy, then `run` goes on.
    let args = controller_args(&boot.path, &state, true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    stack::run_captured(&stack::program(bins, "bosun-guest")?, &args, &[], None).await?;
    outcome.crash_to_healed_ms = crashed.elapsed().as_millis();
    start_controller(children, (bins, out), &boot.path, &state)?;
    n.detail(format!(
        "delta's controller runs again and reports healthy: healed in place {} ms after the crash",
        outcome.crash_to_healed_ms
    ));
    let since = (crashed_at, logged);
    healed_checks(
        n,
        children,
        (bins, out),
        sim,
        (host_id, delta, since),
        &mut outcome,
    )
    .await?;
    Ok(outcome)
}

/// The hub's audit trail holds the restart of delta's controller after the crash (at
/// `since.0`); the simulator saw no destroy of delta and no rollback after it (its request
/// log from entry `since.1` on).
async fn healed_checks(
    n: &mut Narrator,
    children: &mut Children,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    (host_id, delta, since): (Uuid, Uuid, (jiff::Timestamp, usize)),
    outcome: &mut ControllerOutcome,
) -> Result<(), DemoError> {
    let guest = delta.to_string();
    let restarted = audited(
        children,
        (bins, out),
        host_id,
        since.0,
        ("controller.restarted in the hub's audit trail", |e| {
            e.action == "controller.restarted" && e.detail["guest_id"].as_str() == Some(&guest)
        }),
    )
    .await?;
    n.detail(format!(
        "$ bosunctl audit --host …   {}",
        audit_line(&restarted)
    ));
    let vmid = outcome.vmid;
    let requests = sim::sim_requests(sim).await?;
    let guest_path = format!("/lxc/{vmid}");
    let harmful: Vec<String> = requests
        .iter()
        .skip(since.1)
        .filter(|r| {
            (r.method == "DELETE" && r.path.ends_with(&guest_path))
                || (r.method == "POST"
                    && r.path.contains(&format!("{guest_path}/snapshot/"))
                    && r.path.ends_with("/rollback"))
        })
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    outcome.destroyed_after_crash = harmful.len();
    check(harmful.is_empty(), || {
        format!("delta was destroyed or rolled back after the crash: {harmful:?}")
    })?;
    n.detail(format!(
        "simulator log: CT {vmid} never destroyed or rolled back; the controller was healed in place"
    ));
    Ok(())
}
