//! Steps 5–9 of the host-loss walk: the operator hands the lost host to a new box; box b
//! enrolls in restore mode and waits; the operator reseals the PBS password to it; the
//! customer's words bring K back; the guests come back from PBS.

use std::path::Path;
use std::time::{Duration, Instant};

use bosun_agentctl::escrow::code::RecoveryCode;
use bosun_proto::admin::AlertKind;
use serde_json::Value;
use uuid::Uuid;
use zeroize::Zeroizing;

use super::backup_tiers::{PBS_SERVER, read_json, report, set_desired};
use super::children::{Children, Site};
use super::escrow;
use super::host_loss::{HostLossOutcome, MARKER, RestoredGuest};
use super::old_box::OldBox;
use super::scenario::{check, converge, observed, show, vmid_of, write_json};
use super::sim::{self, SimEndpoint};
use super::stack::{self, AgentFiles};
use super::{DemoError, Narrator, helper};
use bosunctl::status::FleetStatus;

/// Box b as the later steps need it.
#[derive(Debug)]
pub(super) struct NewBox {
    /// Node b.
    pub sim: SimEndpoint,
    /// Agent b's files.
    pub files: AgentFiles,
    /// Box b's age recipient.
    pub recipient: String,
}

/// Step 5: a restore token is refused while the host is active; `bosunctl hosts revoke`;
/// then it is made. Gives the hub's refusal and the token.
pub(super) async fn restore_token(
    n: &mut Narrator,
    (bins, out): (&Path, &Path),
    a: &OldBox,
) -> Result<(String, String), DemoError> {
    let host_arg = a.host_id.to_string();
    let args = [
        "enroll-token",
        "create",
        "--ttl",
        "10m",
        "--restore-host",
        &host_arg,
    ];
    let refusal = match stack::ctl(bins, out, &args).await {
        Err(DemoError::Command { stderr, .. }) => stderr,
        Ok(answer) => {
            return Err(DemoError::Check(format!(
                "the hub made a restore token for an active host: {answer}"
            )));
        }
        Err(other) => return Err(other),
    };
    n.detail(format!(
        "$ bosunctl enroll-token create --ttl 10m --restore-host {host_arg}   → refused: {}",
        refusal.lines().last().unwrap_or_default()
    ));
    // What the hub answered, in its one word: the JSON it printed stays in the log.
    let revoked = stack::ctl(bins, out, &["hosts", "revoke", &host_arg]).await?;
    let result = revoked["result"].as_str().unwrap_or_default();
    check(result == "revoked", || {
        format!("`bosunctl hosts revoke` answered {revoked}")
    })?;
    n.detail(format!("$ bosunctl hosts revoke {host_arg}   → {result}"));
    let created = stack::ctl(bins, out, &args).await?;
    let token = created["token"]
        .as_str()
        .ok_or_else(|| DemoError::Check(format!("enroll-token create answered {created}")))?;
    check(
        created["restore_host"].as_str() == Some(host_arg.as_str()),
        || format!("the token does not restore the host: {created}"),
    )?;
    n.detail(format!(
        "$ bosunctl enroll-token create --ttl 10m --restore-host {host_arg}   → a one-time restore-mode token (shown once)"
    ));
    Ok((refusal, token.to_owned()))
}

/// Step 6: node b with the PBS's store, its helper and agent b with the restore token. Agent
/// b takes over the host id, and waits: no K of its own, no container created.
pub(super) async fn takes_over(
    n: &mut Narrator,
    children: &mut Children,
    (bins, out): (&Path, &Path),
    time_scale: f64,
    a: &OldBox,
    (store, token): (&Value, &str),
    outcome: &mut HostLossOutcome,
) -> Result<NewBox, DemoError> {
    let sim = sim::start_sim(children, bins, out, Site::B, time_scale).await?;
    sim::sim_import_store(&sim, PBS_SERVER, store).await?;
    n.detail(format!(
        "node b: proxmox ve {} (a fresh simulated node); it reaches PBS {PBS_SERVER} with the backups of box a (PUT /_sim/remotes/{PBS_SERVER}/store)",
        sim.url
    ));
    let helper = helper::start(children, (bins, out), Site::B, &sim, "bosun-test", a.user).await?;
    outcome.helper_prefixes.push(helper.prefix.clone());
    let files = stack::write_agent_files(
        out,
        Site::B,
        &sim,
        &a.hub,
        token,
        &a.signer,
        Some(a.user),
        Some(helper.socket.as_path()),
    )?;
    stack::start_agent(children, bins, out, &files, Some(a.user))?;
    n.detail("bosun-agentd (agent b) started as bosun-test with the restore token; its own helper, a fresh state directory");
    let fleet = converge(children, &a.client, "box b to take over the host", |f| {
        f.hosts.len() == 1
            && f.hosts[0].replaced_at.is_some()
            && f.hosts[0].summary.liveness.as_str() == "ok"
            && report(f)
                .and_then(|r| r.storage_recipient.as_deref())
                .is_some_and(|r| r != a.recipient)
    })
    .await?;
    let identity = read_json(&files.state_dir.join("host.json"))?;
    let host_id = identity["host_id"]
        .as_str()
        .and_then(|h| Uuid::parse_str(h).ok());
    check(host_id == Some(a.host_id), || {
        format!("box b holds host {host_id:?}, not {}", a.host_id)
    })?;
    outcome.new_box_host_id = host_id;
    let host = &fleet.hosts[0];
    n.detail(format!(
        "agent b enrolled as host {} (the same id; host.json replaces {:?}); the hub: replaced at {}",
        a.host_id,
        identity["replaces"].as_str().unwrap_or_default(),
        host.replaced_at.map(|t| t.to_string()).unwrap_or_default()
    ));
    let log = out.join("logs/agentd-b.log");
    let reason =
        wait_for_log_line(children, &log, "host loss: guests wait", "escrow recover").await?;
    n.detail(format!("agent b (log): host loss: guests wait: {reason}"));
    // Give it time to do what it must not: make a key, create a blank guest.
    tokio::time::sleep(Duration::from_secs(2)).await;
    no_panic(&log)?;
    let creates = creates(&sim).await?;
    let key = files.state_dir.join("pbs-encryption-key.json").exists();
    check(creates.is_empty() && !key, || {
        format!("box b did not wait: containers created {creates:?}, a PBS key of its own: {key}")
    })?;
    n.detail(
        "simulator (node b): no container created or restored; agent b made no PBS key of its own",
    );
    let shown = stack::ctl(bins, out, &["hosts", "show", &a.host_id.to_string()]).await?;
    let since = shown["reseal_required_since"].as_str().map(str::to_owned);
    check(since.is_some(), || {
        format!("the hub shows no reseal_required_since: {shown}")
    })?;
    n.detail(format!(
        "$ bosunctl hosts show …   → reseal REQUIRED since {}: the PBS password is sealed to box a",
        since.as_deref().unwrap_or_default()
    ));
    show(n, &FleetStatus::fetch(&a.client, 50).await?);
    outcome.waiting_reason = Some(reason);
    outcome.creates_while_waiting = Some(creates.len());
    outcome.key_before_recover = Some(key);
    outcome.reseal_required_since = since;
    let recipient = report(&fleet)
        .and_then(|r| r.storage_recipient.clone())
        .unwrap_or_default();
    Ok(NewBox {
        sim,
        files,
        recipient,
    })
}

/// Step 7: `bosunctl secret seal` to box b's recipient, the desired state put again; the
/// reseal mark clears, and the guests still wait (K is not back).
pub(super) async fn reseal(
    n: &mut Narrator,
    children: &mut Children,
    (bins, out): (&Path, &Path),
    a: &OldBox,
    b: &NewBox,
    outcome: &mut HostLossOutcome,
) -> Result<(), DemoError> {
    let host_arg = a.host_id.to_string();
    let before = FleetStatus::fetch(&a.client, 50).await?;
    let generation = before
        .hosts
        .first()
        .map_or(0, |h| h.summary.desired_generation);
    // Box b has a recipient of its own: the operator confirms it from b's console first.
    let recipient = super::backup_tiers::node_recipient(&b.files.state_dir)?;
    check(recipient == b.recipient, || {
        format!(
            "box b's console shows {recipient}, the hub reports {}",
            b.recipient
        )
    })?;
    super::backup_tiers::pin_recipient(n, (bins, out), &host_arg, &recipient).await?;
    let secret_arg = out.join("operator/pbs-password").display().to_string();
    let sealed = stack::ctl_text(
        bins,
        out,
        &[
            "secret",
            "seal",
            "--host",
            &host_arg,
            "--type",
            "pbs",
            "--durable-id",
            &a.durable,
            "--file",
            &secret_arg,
            "--key",
            &stack::operator_key_path(out).display().to_string(),
        ],
    )
    .await?;
    n.detail(format!(
        "$ bosunctl secret seal --host {host_arg} --type pbs --durable-id … --file pbs-password --key id_ed25519   (age, to box b's recipient {}…, bound to the PBS target, signed by the operator)",
        &b.recipient[..b.recipient.len().min(12)]
    ));
    let mut document = read_json(&a.desired)?;
    document["storage"][0]["credentials"] = Value::from(sealed.trim());
    let file = out.join("operator/desired-2.json");
    write_json(&file, &document)?;
    set_desired(bins, out, &host_arg, &file).await?;
    let next = generation + 1;
    n.detail(format!(
        "$ bosunctl desired set --host … desired-2.json   (generation {next}: the PBS password sealed to box b)"
    ));
    converge(
        children,
        &a.client,
        "box b to take the resealed state",
        |f| {
            f.hosts.first().is_some_and(|h| {
                h.summary.known_generation == next && h.reseal_required_since.is_none()
            })
        },
    )
    .await?;
    outcome.reseal_cleared = true;
    n.detail("hub: reseal mark cleared");
    tokio::time::sleep(Duration::from_secs(1)).await;
    no_panic(&out.join("logs/agentd-b.log"))?;
    let creates = creates(&b.sim).await?;
    check(creates.is_empty(), || {
        format!("box b restored before K was back: {creates:?}")
    })?;
    n.detail(format!(
        "agent b holds generation {next}; no container created or restored on node b: the guests still wait for K"
    ));
    Ok(())
}

/// Step 8: `bosun-agentctl escrow recover` on box b with the words on its standard input. Gives
/// when the words were typed.
pub(super) async fn recover(
    n: &mut Narrator,
    (bins, out): (&Path, &Path),
    a: &OldBox,
    b: &NewBox,
    code: &RecoveryCode,
    outcome: &mut HostLossOutcome,
) -> Result<Instant, DemoError> {
    let typed = Zeroizing::new(format!("{}\n", code.phrase().as_str()));
    let typed_at = Instant::now();
    let log = out.join("logs/escrow-b.log");
    let recovered = escrow::agentctl(
        bins,
        a.user,
        &b.files.config,
        &["escrow", "recover"],
        Some(typed.as_bytes()),
        &log,
    )
    .await?;
    drop(typed);
    recovered.expect_code(0, "bosun-agentctl escrow recover")?;
    let fingerprint = recovered
        .field("key fingerprint:")
        .unwrap_or_default()
        .to_owned();
    n.detail("$ bosun-agentctl escrow recover   (as bosun-test; the customer's 12 words on its standard input, never on a command line)");
    let said = recovered
        .stdout
        .lines()
        .find(|l| l.starts_with("pbs encryption key"))
        .unwrap_or_default();
    n.detail(format!("agent b: {said}; key fingerprint {fingerprint}"));
    let old = outcome.fingerprint_old.clone().unwrap_or_default();
    check(!fingerprint.is_empty() && fingerprint == old, || {
        format!("box b recovered key {fingerprint:?}; box a's was {old:?}")
    })?;
    n.detail("the same fingerprint as on box a: K is back, and only on the box");
    outcome.fingerprint_recovered = Some(fingerprint);
    Ok(typed_at)
}

/// Step 9: both guests running on node b, restored from their PBS archives at the archives'
/// vmids, markers back; `guest_restored` with RPO and RTO per guest.
pub(super) async fn guests_back(
    n: &mut Narrator,
    children: &mut Children,
    out: &Path,
    a: &OldBox,
    b: &NewBox,
    typed_at: Instant,
    outcome: &mut HostLossOutcome,
) -> Result<(), DemoError> {
    let guests = outcome.guests.clone();
    let fleet = converge(children, &a.client, "both guests restored on box b", |f| {
        guests.iter().all(|g| {
            observed(f, g.guest_id) == "running" && restored_alert(f, &g.archive).is_some()
        }) && f
            .hosts
            .first()
            .is_some_and(|h| h.summary.escrow.as_str() == "verified")
    })
    .await?;
    n.detail(format!(
        "agent b: K installed, PBS storage added, both guests restored {} after the words were typed",
        super::narrate::seconds(typed_at.elapsed())
    ));
    show(n, &fleet);
    let requests = sim::sim_requests(&b.sim).await?;
    let pve = sim::pve_client(&b.sim)?;
    for guest in &guests {
        use bosun_pve::{GuestStatus, Pve as _, Vmid};
        let vmid = vmid_of(&fleet, guest.guest_id)?;
        let vmid_arg = vmid.to_string();
        let restore = requests.iter().find(|r| {
            r.creates_container()
                && r.param("vmid") == Some(vmid_arg.as_str())
                && r.param("ostemplate") == Some(guest.archive.as_str())
        });
        let id = Vmid::new(vmid).map_err(|e| DemoError::Check(format!("vmid {vmid}: {e}")))?;
        let status = pve.ct_status(id).await.map_err(|source| DemoError::Pve {
            what: "GET status",
            source,
        })?;
        let file = sim::sim_guest_file(&b.sim, vmid, MARKER).await?;
        let marker_back =
            file.is_some_and(|f| f.content().is_ok_and(|c| c == guest.marker.as_bytes()));
        let running = status.status == GuestStatus::Running;
        check(
            vmid == guest.vmid && restore.is_some() && marker_back && running,
            || {
                format!(
                    "{} came back at vmid {vmid} (was {}), restored from its archive: {}, marker back: {marker_back}, running: {running}",
                    guest.name,
                    guest.vmid,
                    restore.is_some()
                )
            },
        )?;
        n.detail(format!(
            "node b: {} restored from {} at vmid {vmid} (the archive's), running; {MARKER} is back, byte for byte",
            guest.name, guest.archive
        ));
        outcome.restored.push(RestoredGuest {
            guest_id: guest.guest_id,
            vmid,
            archive: guest.archive.clone(),
            marker_back,
            running,
        });
    }
    for guest in &guests {
        let alert = restored_alert(&fleet, &guest.archive).unwrap_or_default();
        check(alert.contains("RPO") && alert.contains("RTO"), || {
            format!("guest_restored without RPO and RTO: {alert}")
        })?;
        n.detail(format!("hub: guest_restored: {alert}"));
        outcome.restored_alerts.push(alert);
    }
    n.detail("hub: escrow verified again: box b reports the key the escrow wraps");
    for site in [Site::A, Site::B] {
        no_panic(&out.join(format!("logs/{}.log", site.name("agentd"))))?;
    }
    Ok(())
}

/// The `guest_restored` alert of the restore from `archive`.
fn restored_alert(fleet: &FleetStatus, archive: &str) -> Option<String> {
    fleet
        .alerts
        .iter()
        .filter(|a| a.kind == AlertKind::GuestRestored && a.message.contains(archive))
        .max_by_key(|a| a.id)
        .map(|a| a.message.clone())
}

/// Containers created or restored on the node (`POST /nodes/{node}/lxc`), as `vmid`s.
async fn creates(sim: &SimEndpoint) -> Result<Vec<String>, DemoError> {
    Ok(sim::sim_requests(sim)
        .await?
        .iter()
        .filter(|r| r.creates_container())
        .map(|r| r.param("vmid").unwrap_or("?").to_owned())
        .collect())
}

/// Waits for a line of `log` holding `marker` and `also`; gives what follows `reason=` in it.
async fn wait_for_log_line(
    children: &mut Children,
    log: &Path,
    marker: &str,
    also: &str,
) -> Result<String, DemoError> {
    let limit = Duration::from_secs(30);
    let deadline = Instant::now() + limit;
    loop {
        let text = super::stack::without_colours(&std::fs::read_to_string(log).unwrap_or_default());
        if let Some(line) = text
            .lines()
            .find(|l| l.contains(marker) && l.contains(also))
        {
            let reason = line.split_once("reason=").map_or(line, |(_, r)| r);
            return Ok(reason.trim().to_owned());
        }
        children.check_alive()?;
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: format!("`{marker}` in {}", log.display()),
                after: limit,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Fails when the agent's `log` shows a panic: one of its tasks died, and the walk would
/// otherwise only time out later.
fn no_panic(log: &Path) -> Result<(), DemoError> {
    let text = super::stack::without_colours(&std::fs::read_to_string(log).unwrap_or_default());
    let mut lines = text.lines();
    match lines.find(|l| l.contains("panicked at")) {
        Some(line) => Err(DemoError::Check(format!(
            "a task of the agent panicked ({}): {line} {}",
            log.display(),
            lines.next().unwrap_or_default()
        ))),
        None => Ok(()),
    }
}
