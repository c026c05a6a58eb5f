//! Step 9 of the demo: a second backup tier on an offsite Proxmox Backup Server, from the
//! operator's signed data plan.
//!
//! The simulated node gets a PBS server to reach; the operator seals its password to the host
//! (`bosunctl secret seal`: the hub forwards ciphertext it cannot open), names the datastore in
//! the host's data plan (`bosunctl policy sign-plan`, serial 1: every tier keeps all) and adds
//! it to the storage manifest, with a shorter first-tier retention. The agent verifies the
//! plan, registers the datastore and reports it `mounted`; its scheduler backs guest alpha up
//! on the first tier but prunes nothing, because the plan keeps every backup. The operator
//! signs a second plan making the PBS target the second tier with shorter retention: the next
//! run on each tier applies its retention, and the first tier's prunes down to two archives
//! (the PBS tier's single archive is within its `keep_last 3`). The same desired state names an
//! NFS share as a further tier, as a compromised hub would: the plan does not name it, so the
//! agent refuses it (never registered) and the hub raises `storage_refused`. The simulator's
//! storage listings show the archives written and pruned; `bosunctl status` shows each tier's
//! last good backup.
//!
//! Each generation gives the tiers an hourly schedule whose next time is a few seconds away
//! (`*:MM:SS`): the agent runs on the wall clock, so each tier backs up once within seconds,
//! and only after the agent has planned the tiers of that generation.

use std::collections::BTreeSet;
use std::path::Path;

use bosun_proto::admin::AlertKind;
use bosun_proto::report::{StateReport, TargetStatus};
use bosun_pve::{Pve as _, PveClient};
use serde_json::{Value, json};
use uuid::Uuid;

use super::children::Children;
use super::scenario::{applied, check, converge, desired, show, write_json};
use super::sim::{self, SimEndpoint};
use super::stack;
use super::{DemoError, Narrator};
use bosunctl::client::HubClient;
use bosunctl::status::{self, FleetStatus};

/// The simulated Proxmox Backup Server.
pub(super) const PBS_SERVER: &str = "pbs.demo";
/// Its datastore.
pub(super) const PBS_DATASTORE: &str = "store1";
/// The API token the storage logs in with.
pub(super) const PBS_USER: &str = "backup@pbs!bosun";
/// The SHA-256 of its certificate, as PVE pins it.
pub(super) const PBS_FINGERPRINT: &str = "AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99";
/// How far ahead of generation 4 the first tier's next scheduled time lies, in seconds.
const HELD_LEAD: i64 = 3;
/// How far ahead of generation 5 both tiers' next scheduled time lies: time for the agent to
/// receive it, verify the floor and plan the tiers before the runs start (a run that started
/// earlier would still follow the previous plan).
const FLOOR_LEAD: i64 = 6;
/// The NFS share desired state adds that no plan names.
pub(super) const HOSTILE_NFS: &str = "nas.hub.example:/exfil";
/// The first tier keeps the newest two backups of each guest.
const FIRST_KEEP: u32 = 2;
/// The PBS tier keeps the newest three.
const PBS_KEEP: u32 = 3;

/// What step 9 established.
#[derive(Debug, Clone, Default)]
pub struct TiersOutcome {
    /// The PBS target's status as the hub last showed it (`mounted`).
    pub target_status: String,
    /// The Proxmox storage the agent registered it as.
    pub storage_id: String,
    /// Why the first tier pruned nothing before the floor was signed.
    pub held_before_floor: Option<String>,
    /// Alpha's first-tier archives before and after the run made while retention was held.
    pub held_run: Option<(usize, usize)>,
    /// Each tier's archives of guest alpha, before and after its runs.
    pub tiers: Vec<TierArchives>,
    /// The tiers for which the hub shows a good backup of guest alpha.
    pub good: Vec<u32>,
    /// The `tier …` lines of the last `bosunctl status`.
    pub status_lines: Vec<String>,
    /// The NFS tier no plan names was refused (`storage_refused`, never registered).
    pub nfs_refused: bool,
}

/// One tier's archives of one guest in the simulator's storage listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierArchives {
    /// 0 = the first tier.
    pub tier: u32,
    /// The Proxmox storage it writes to.
    pub storage: String,
    /// Its `keep_last`.
    pub keep_last: u32,
    /// Archives listed before the tier's runs.
    pub before: usize,
    /// Archives the runs wrote (each seen in a listing).
    pub written: usize,
    /// Archives listed before or written that the listing no longer shows.
    pub pruned: usize,
    /// Archives listed at the end.
    pub after: usize,
}

/// Step 9; see the module documentation.
#[expect(
    clippy::too_many_arguments,
    reason = "the demo's running parts, passed as they are"
)]
pub(super) async fn two_tiers(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    bins: &Path,
    out: &Path,
    sim: &SimEndpoint,
    (host_id, state_dir): (Uuid, &Path),
    (alpha, alpha_vmid): (Uuid, u32),
) -> Result<TiersOutcome, DemoError> {
    let host_arg = host_id.to_string();
    let durable = format!("{PBS_USER}@{PBS_SERVER}:{PBS_DATASTORE}#{PBS_FINGERPRINT}");
    let shown = format!(
        "{PBS_USER}@{PBS_SERVER}:{PBS_DATASTORE}#{}…{}",
        &PBS_FINGERPRINT[..5],
        &PBS_FINGERPRINT[PBS_FINGERPRINT.len() - 5..]
    );
    let mut outcome = TiersOutcome::default();
    let sealed = offsite_pbs(n, bins, out, sim, (&host_arg, &durable, state_dir)).await?;
    let pve = sim::pve_client(sim)?;
    let fleet = FleetStatus::fetch(client, 50).await?;
    let first_storage = report(&fleet)
        .and_then(|r| r.tiers.first())
        .map(|t| t.storage_id.clone())
        .ok_or_else(|| DemoError::Check("the agent reports no first backup tier".to_owned()))?;
    let first_before = archives(&pve, &first_storage, alpha_vmid).await?;

    // Generation 4: the target in the manifest; the first tier on a schedule that fires
    // within seconds and a shorter retention, which the agent holds until a floor is signed.
    let mut document = desired(out, &[(alpha, "alpha")])?;
    document["storage"] = json!([{
        "type": "pbs",
        "durable_id": durable,
        "class": "slow",
        "role": "pbs-offsite",
        "policy": { "schedule": "hourly", "retention": { "keep_last": PBS_KEEP } },
        "state": "attached",
        "label": "offsite PBS",
        "credentials": sealed,
    }]);
    let (schedule, at) = hourly_soon(HELD_LEAD)?;
    document["backup_policy"]["schedule"] = json!(schedule);
    document["backup_policy"]["retention"] = json!({ "keep_last": FIRST_KEEP });
    let file = out.join("operator/desired-4.json");
    write_json(&file, &document)?;
    // The operator's data plan names the PBS target with its whole identity; its tiers keep
    // every backup until the operator signs shorter retention.
    let plan = json!({
        "serial": 1,
        "targets": [{
            "type": "pbs", "durable_id": durable, "class": "slow", "role": "pbs-offsite",
            "policy": { "schedule": "daily", "retention": {} }, "state": "attached",
            "label": "offsite PBS",
        }],
        "backup": { "schedule": "daily", "retention": {}, "min_interval_seconds": 10 },
    });
    sign_plan(bins, out, &host_arg, ("plan-1.json", &plan), &file).await?;
    n.detail(
        "$ bosunctl policy sign-plan --host … -f id_ed25519 --plan plan-1.json --desired desired-4.json   (serial 1: the PBS target; every tier keeps all; ssh-keygen -Y sign -n bosun-policy@v1)",
    );
    set_desired(bins, out, &host_arg, &file).await?;
    n.detail(format!(
        "$ bosunctl desired set --host … desired-4.json   (generation 4: pbs target {shown}, role pbs-offsite, class slow; first tier hourly at {schedule}, next at {at}, keep_last {FIRST_KEEP})"
    ));
    let fleet = converge(children, client, "the PBS target mounted", |f| {
        applied(f, 4) && target(f, &durable).is_some_and(|(s, _)| s == TargetStatus::Mounted)
    })
    .await?;
    outcome.target_status = "mounted".to_owned();
    outcome.storage_id = target(&fleet, &durable)
        .and_then(|(_, storage)| storage)
        .ok_or_else(|| {
            DemoError::Check("the PBS target is reported without a storage id".to_owned())
        })?;
    let key = encryption_key(&pve, &outcome.storage_id).await?;
    let reported = report(&fleet)
        .and_then(|r| r.pbs_key_fingerprint.clone())
        .unwrap_or_default();
    check(
        !key.is_empty() && hex_digits(&key) == hex_digits(&reported),
        || format!("the storage's encryption key {key:?} is not the host's key {reported:?}"),
    )?;
    n.detail(format!(
        "agent: registered as proxmox storage {}, mounted: the PBS accepted the unsealed password; encryption-key {}… is the host's key",
        outcome.storage_id,
        &key[..key.len().min(11)]
    ));
    for line in status::render(&fleet)
        .into_iter()
        .filter(|l| l.trim_start().starts_with("storage ") || l.contains("retention held"))
    {
        n.detail(format!("  {line}"));
    }
    let first = report(&fleet)
        .and_then(|r| r.tiers.first())
        .ok_or_else(|| DemoError::Check("the agent reports no backup tier".to_owned()))?;
    outcome.held_before_floor = first.held.clone();
    check(first.held.is_some() && first.applied.keeps_all(), || {
        format!("under a plan that keeps all the first tier must hold keep-all: {first:?}")
    })?;

    // The scheduler runs the first tier; held at keep-all, vzdump prunes nothing.
    let fleet = converge(children, client, "the first tier's scheduled run", |f| {
        last_good_archive(f, alpha, 0).is_some_and(|a| !first_before.contains(a))
    })
    .await?;
    let held_run = last_good_archive(&fleet, alpha, 0)
        .unwrap_or_default()
        .to_owned();
    let first_held = archives(&pve, &first_storage, alpha_vmid).await?;
    check(
        first_held.is_superset(&first_before) && first_held.contains(&held_run),
        || format!("a held tier pruned: {first_before:?} became {first_held:?}"),
    )?;
    outcome.held_run = Some((first_before.len(), first_held.len()));
    n.detail(format!(
        "agent: scheduled first-tier run {held_run}; alpha's archives on {first_storage}: {} → {}, none pruned ({})",
        first_before.len(),
        first_held.len(),
        first.held.as_deref().unwrap_or_default()
    ));

    // Generation 5: the PBS target becomes tier 1 and the operator's signed floor allows
    // both tiers' retention.
    document["backup_policy"]["further_tiers"] = json!([durable]);
    let file = out.join("operator/desired-5.json");
    write_json(&file, &document)?;
    let plan = json!({
        "serial": 2,
        "targets": [{
            "type": "pbs", "durable_id": durable, "class": "slow", "role": "pbs-offsite",
            "policy": { "schedule": "daily", "retention": { "keep_last": PBS_KEEP } },
            "state": "attached", "label": "offsite PBS",
        }],
        "backup": {
            "schedule": "daily", "retention": { "keep_last": FIRST_KEEP },
            "further_tiers": [durable], "min_interval_seconds": 10,
        },
    });
    sign_plan(bins, out, &host_arg, ("plan-2.json", &plan), &file).await?;
    n.detail(format!(
        "$ bosunctl policy sign-plan --host … -f id_ed25519 --plan plan-2.json --desired desired-5.json   (serial 2: the PBS target as tier 1; keep_last {FIRST_KEEP} on tier 0, {PBS_KEEP} on tier 1)"
    ));
    let pbs_before = archives(&pve, &outcome.storage_id, alpha_vmid).await?;
    // The schedule is set last, next to `desired set`, so the agent has the new tiers planned
    // well before their time comes (the floor signs retention, not schedules).
    let mut document = read_json(&file)?;
    let (schedule, at) = hourly_soon(FLOOR_LEAD)?;
    document["backup_policy"]["schedule"] = json!(schedule);
    document["storage"][0]["policy"]["schedule"] = json!(schedule);
    // What a compromised hub would add: an NFS share of its own as a further tier. The plan
    // does not name it, so the agent never registers, mounts or writes it.
    document["storage"]
        .as_array_mut()
        .ok_or_else(|| DemoError::Check("desired-5.json has no storage list".to_owned()))?
        .push(json!({
            "type": "nfs", "durable_id": HOSTILE_NFS, "class": "slow", "role": "vzdump-target",
            "policy": { "schedule": schedule, "retention": {} }, "state": "attached",
        }));
    document["backup_policy"]["further_tiers"] = json!([durable, HOSTILE_NFS]);
    write_json(&file, &document)?;
    set_desired(bins, out, &host_arg, &file).await?;
    n.detail(format!(
        "$ bosunctl desired set --host … desired-5.json   (generation 5: both tiers hourly at {schedule}, next at {at}; the signed plan; and an NFS tier {HOSTILE_NFS} the plan does not name)"
    ));
    let fleet = converge(
        children,
        client,
        "both tiers planned under the floor",
        |f| {
            applied(f, 5)
                && report(f).is_some_and(|r| {
                    r.tiers.len() == 2
                        && r.tiers
                            .iter()
                            .all(|t| t.held.is_none() && t.applied == t.desired)
                })
        },
    )
    .await?;
    for tier in report(&fleet)
        .map(|r| r.tiers.as_slice())
        .unwrap_or_default()
    {
        n.detail(format!(
            "agent: plan verified: tier {} on {} ({}{}) applies keep_last {}",
            tier.tier,
            tier.storage_id,
            tier.schedule,
            tier.extra_schedule
                .as_deref()
                .map(|s| format!(" and {s}"))
                .unwrap_or_default(),
            tier.applied.keep_last
        ));
    }
    let fleet = converge(
        children,
        client,
        "the NFS tier refused (storage_refused)",
        |f| {
            f.alerts
                .iter()
                .any(|a| a.kind == AlertKind::StorageRefused && a.message.contains(HOSTILE_NFS))
                && target(f, HOSTILE_NFS).is_some_and(|(s, _)| s == TargetStatus::Refused)
        },
    )
    .await?;
    let registered = pve
        .list_storage()
        .await
        .map_err(|e| DemoError::Check(format!("listing storages: {e}")))?;
    check(
        !registered
            .iter()
            .filter_map(|s| s.storage.as_deref())
            .any(|s| s.starts_with("bosun-nfs-")),
        || "the refused NFS target was registered in Proxmox".to_owned(),
    )?;
    outcome.nfs_refused = true;
    if let Some(alert) = fleet
        .alerts
        .iter()
        .find(|a| a.kind == AlertKind::StorageRefused)
    {
        n.detail(format!("hub: storage_refused: {}", alert.message));
    }

    // The scheduler runs each tier; vzdump prunes each to the retention it now applies.
    let fleet = converge(children, client, "a scheduled run on each tier", |f| {
        last_good_archive(f, alpha, 0).is_some_and(|a| !first_held.contains(a))
            && last_good_archive(f, alpha, 1).is_some_and(|a| !pbs_before.contains(a))
    })
    .await?;
    let first_after = archives(&pve, &first_storage, alpha_vmid).await?;
    let pbs_after = archives(&pve, &outcome.storage_id, alpha_vmid).await?;
    for (tier, storage, keep, before, written, after) in [
        (
            0,
            &first_storage,
            FIRST_KEEP,
            &first_before,
            &first_held,
            &first_after,
        ),
        (
            1,
            &outcome.storage_id,
            PBS_KEEP,
            &pbs_before,
            &pbs_before,
            &pbs_after,
        ),
    ] {
        let mut seen: BTreeSet<String> = before.union(written).cloned().collect();
        seen.extend(last_good_archive(&fleet, alpha, tier).map(str::to_owned));
        let archived = TierArchives {
            tier,
            storage: storage.clone(),
            keep_last: keep,
            before: before.len(),
            written: seen.len() - before.len(),
            pruned: seen.difference(after).count(),
            after: after.len(),
        };
        n.detail(format!(
            "simulator: alpha's archives on {}: {} before this step, {} written by tier {}, {} pruned (keep_last {}), {} now",
            archived.storage,
            archived.before,
            archived.written,
            archived.tier,
            archived.pruned,
            archived.keep_last,
            archived.after
        ));
        outcome.tiers.push(archived);
    }
    let first_tier = &outcome.tiers[0];
    check(
        first_tier.pruned >= 1 && first_tier.after == FIRST_KEEP as usize,
        || format!("the first tier did not prune to keep_last {FIRST_KEEP}: {first_tier:?}"),
    )?;
    let pbs_tier = &outcome.tiers[1];
    check(
        pbs_tier.written >= 1 && pbs_tier.after <= PBS_KEEP as usize,
        || format!("the PBS tier holds no backup within keep_last {PBS_KEEP}: {pbs_tier:?}"),
    )?;

    outcome.good = good_tiers(&fleet, alpha);
    show(n, &fleet);
    outcome.status_lines = status::render(&fleet)
        .into_iter()
        .filter(|l| l.trim_start().starts_with("tier "))
        .map(|l| l.trim().to_owned())
        .collect();
    Ok(outcome)
}

/// The sealing recipient of the agent whose state is in `state_dir`: what `bosun-agentctl
/// status` prints on the node's console, where the operator reads it.
pub(super) fn node_recipient(state_dir: &Path) -> Result<String, DemoError> {
    match bosun_agentd::trust::keys::sealing::StorageIdentity::load(state_dir) {
        Ok(Some(identity)) => Ok(identity.recipient()),
        Ok(None) => Err(DemoError::Check(format!(
            "the agent made no sealing recipient in {}",
            state_dir.display()
        ))),
        Err(e) => Err(DemoError::Check(format!(
            "the agent's sealing recipient: {}",
            bosun_errchain::error_chain(&e)
        ))),
    }
}

/// Pins `recipient` for the host in `bosunctl` (`hosts pin-recipient`), as the operator does
/// with what the node's console shows: `secret seal` seals to it, never to the hub's word.
pub(super) async fn pin_recipient(
    n: &mut Narrator,
    (bins, out): (&Path, &Path),
    host_arg: &str,
    recipient: &str,
) -> Result<(), DemoError> {
    stack::ctl_text(
        bins,
        out,
        &["hosts", "pin-recipient", host_arg, "--recipient", recipient],
    )
    .await?;
    n.detail(format!(
        "$ bosunctl hosts pin-recipient … --recipient {}…   (as bosun-agentctl status prints it on the node: secret seal seals to it, never to the hub's word)",
        &recipient[..recipient.len().min(12)]
    ));
    Ok(())
}

/// Declares the simulated PBS and seals its password to the host for the PBS target
/// `durable` (`bosunctl secret seal`, to the recipient pinned from the agent's state in
/// `state_dir`); gives the armored ciphertext.
pub(super) async fn offsite_pbs(
    n: &mut Narrator,
    bins: &Path,
    out: &Path,
    sim: &SimEndpoint,
    (host_arg, durable, state_dir): (&str, &str, &Path),
) -> Result<String, DemoError> {
    pin_recipient(n, (bins, out), host_arg, &node_recipient(state_dir)?).await?;
    let password = format!("pbs-{}", Uuid::new_v4().simple());
    sim::sim_declare_remote(
        sim,
        PBS_SERVER,
        &json!({
            "type": "pbs",
            "fingerprint": PBS_FINGERPRINT,
            "datastores": [PBS_DATASTORE],
            "username": PBS_USER,
            "password": password,
            "reachable": true,
        }),
    )
    .await?;
    n.detail(format!(
        "simulator: Proxmox Backup Server {PBS_SERVER}, datastore {PBS_DATASTORE}, token {PBS_USER}, certificate {}…",
        &PBS_FINGERPRINT[..14]
    ));
    let secret_file = out.join("operator/pbs-password");
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
    n.detail("$ bosunctl secret seal --host … --type pbs --durable-id … --file pbs-password   (age, to the host's recipient, bound to this target: the hub forwards what it cannot open or move)");
    Ok(sealed)
}

/// An hourly calendar event (`*:MM:SS`) whose next time is `lead` seconds from now, and that
/// time (`HH:MM:SS`), in the time zone the agent evaluates schedules in (this machine's).
pub(super) fn hourly_soon(lead: i64) -> Result<(String, String), DemoError> {
    let at = jiff::Zoned::now()
        .checked_add(jiff::SignedDuration::from_secs(lead))
        .map_err(|e| DemoError::Check(format!("the time {lead} s from now: {e}")))?;
    Ok((
        format!("*:{:02}:{:02}", at.minute(), at.second()),
        at.strftime("%H:%M:%S").to_string(),
    ))
}

pub(super) fn read_json(path: &Path) -> Result<serde_json::Value, DemoError> {
    let text = std::fs::read_to_string(path).map_err(|source| DemoError::Artifact {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_str(&text)
        .map_err(|err| DemoError::Check(format!("{}: {err}", path.display())))
}

/// Writes the data plan `plan` (a plan file: serial, targets, backup) as `operator/<name>`
/// and signs it into the desired-state file `desired` with the operator's key
/// (`bosunctl policy sign-plan`).
pub(super) async fn sign_plan(
    bins: &Path,
    out: &Path,
    host_arg: &str,
    (name, plan): (&str, &Value),
    desired: &Path,
) -> Result<(), DemoError> {
    let plan_file = out.join("operator").join(name);
    write_json(&plan_file, plan)?;
    let plan_arg = plan_file.display().to_string();
    let desired_arg = desired.display().to_string();
    let key_arg = out.join("operator/id_ed25519").display().to_string();
    stack::ctl_text(
        bins,
        out,
        &[
            "policy",
            "sign-plan",
            "--host",
            host_arg,
            "-f",
            &key_arg,
            "--plan",
            &plan_arg,
            "--desired",
            &desired_arg,
        ],
    )
    .await?;
    Ok(())
}

/// Sets `file` as the host's desired state.
pub(super) async fn set_desired(
    bins: &Path,
    out: &Path,
    host_arg: &str,
    file: &Path,
) -> Result<(), DemoError> {
    let file_arg = file.display().to_string();
    stack::ctl(
        bins,
        out,
        &["desired", "set", "--host", host_arg, &file_arg],
    )
    .await?;
    Ok(())
}

/// The host's last report.
pub(super) fn report(fleet: &FleetStatus) -> Option<&StateReport> {
    fleet.hosts.first().and_then(|h| h.last_report.as_ref())
}

/// The reported status and Proxmox storage of the target `durable_id`.
pub(super) fn target(
    fleet: &FleetStatus,
    durable_id: &str,
) -> Option<(TargetStatus, Option<String>)> {
    report(fleet)?
        .storage
        .iter()
        .find(|t| t.durable_id == durable_id)
        .map(|t| (t.status, t.storage_id.clone()))
}

/// The archive of the newest good backup of `guest` on `tier` the hub shows.
fn last_good_archive(fleet: &FleetStatus, guest: Uuid, tier: u32) -> Option<&str> {
    report(fleet)?
        .last_backups
        .iter()
        .find(|b| b.guest_id == guest && b.tier == Some(tier) && b.ok)
        .and_then(|b| b.archive.as_deref())
}

/// The tiers for which the hub shows a good backup of `guest`.
fn good_tiers(fleet: &FleetStatus, guest: Uuid) -> Vec<u32> {
    report(fleet)
        .map(|r| r.tiers.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|t| t.tier)
        .filter(|tier| last_good_archive(fleet, guest, *tier).is_some())
        .collect()
}

/// The fingerprint of the client-side encryption key Proxmox holds for `storage`.
async fn encryption_key(pve: &PveClient, storage: &str) -> Result<String, DemoError> {
    use bosun_pve::StorageId;
    let id = StorageId::new(storage.to_owned())
        .map_err(|e| DemoError::Check(format!("storage id {storage:?}: {e}")))?;
    let config = pve
        .storage_config(&id)
        .await
        .map_err(|source| DemoError::Pve {
            what: "reading the PBS storage's settings",
            source,
        })?;
    Ok(config
        .get("encryption-key")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned())
}

/// The hex digits of a fingerprint, lowercase (`AA:bb` and `aabb` compare equal).
fn hex_digits(fingerprint: &str) -> String {
    fingerprint
        .chars()
        .filter(char::is_ascii_hexdigit)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The backup archives of `vmid` in `storage`, as Proxmox lists them.
async fn archives(
    pve: &PveClient,
    storage: &str,
    vmid: u32,
) -> Result<BTreeSet<String>, DemoError> {
    use bosun_pve::{ContentFilter, ContentType, Pve as _, StorageId, Vmid};
    let id = StorageId::new(storage.to_owned())
        .map_err(|e| DemoError::Check(format!("storage id {storage:?}: {e}")))?;
    let filter = ContentFilter {
        content: Some(ContentType::Backup),
        vmid: Vmid::new(vmid).ok(),
    };
    let items = pve
        .list_content(&id, filter)
        .await
        .map_err(|source| DemoError::Pve {
            what: "listing a tier's backups",
            source,
        })?;
    Ok(items.into_iter().map(|item| item.volid).collect())
}
