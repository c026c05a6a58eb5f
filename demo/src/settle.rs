//! `--keep-running`: before the demo leaves its programs running, the operator puts right
//! what the walk left broken on purpose and could be put right without undoing a step's point,
//! so the kept host settles instead of paging on:
//!
//! - the PBS key of step 9 is escrowed with the customer (`bosun-agentctl escrow create`, as
//!   the host-loss walk does it): `escrow_missing` resolves. `bosun-agentctl` reaches the hub
//!   with the pin of `agent.toml` alone, not the signed set the agent took from its polls, so
//!   after step 21's rotation it runs with a copy whose `[hub] fingerprint` is the served key's
//!   pin, as `docs/hub-key-rotation.md` has the operator change it on the box;
//! - desired state drops the NFS tier no signed plan names (step 9's hostile change): the host
//!   refuses nothing, is in sync again and `storage_refused` resolves;
//! - the rotten chunks of alpha's group are healed on the backup server (the simulator's
//!   `chunks/repair`, as a pull sync from an intact replica rewrites them): the next
//!   verification passes; alpha's local archive changed in step 12 is put back as it was (the
//!   appended lines cut), so the check between restore tests that re-hashes it passes too;
//!   `verify_failed` resolves, and the sped-up verification clock has nothing left to fail on.
//!
//! What stays is each the point of its step and says so: charlie's failed restore test
//! (acknowledged in the triage step), the adopted container `legacy-shop` (orphaned until
//! desired state names it) and delta's restore test (booted, not checked: the guest installs
//! no check). The narration says the host's state and its open alerts as the hub reports them
//! after settling, computed, never assumed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_proto::admin::AlertKind;
use serde_json::json;
use uuid::Uuid;

use super::backup_tiers::{HOSTILE_NFS, PBS_DATASTORE, set_desired};
use super::children::{Children, RunAs};
use super::scenario::{check, converge, write_json};
use super::sim::{self, SimEndpoint};
use super::{DemoError, Narrator, escrow};
use bosunctl::client::HubClient;
use bosunctl::status::FleetStatus;

/// The longest settling may take.
const LIMIT: Duration = Duration::from_secs(90);

/// The alerts settling resolves.
const RESOLVED: [AlertKind; 3] = [
    AlertKind::EscrowMissing,
    AlertKind::StorageRefused,
    AlertKind::VerifyFailed,
];

/// What the full walk hands on for settling.
#[derive(Debug, Clone)]
pub struct Kept {
    pub(super) client: HubClient,
    pub(super) sim: SimEndpoint,
    pub(super) host_id: Uuid,
    pub(super) alpha_vmid: u32,
    pub(super) agent_config: PathBuf,
    pub(super) run_as: Option<RunAs>,
    /// The archive step 12 changed on the storage, and its length before.
    pub(super) altered_archive: Option<(PathBuf, u64)>,
}

/// Settles the kept host; see the module documentation.
pub async fn settle(
    n: &mut Narrator,
    children: &mut Children,
    (bins, out): (&Path, &Path),
    kept: &Kept,
) -> Result<(), DemoError> {
    n.say("");
    n.say("settling the kept host (--keep-running): what the walk left broken on purpose and can be put right");
    tokio::time::timeout(LIMIT, settle_within(n, children, (bins, out), kept))
        .await
        .unwrap_or_else(|_| {
            Err(DemoError::Timeout {
                what: "the kept host to settle".to_owned(),
                after: LIMIT,
            })
        })
}

async fn settle_within(
    n: &mut Narrator,
    children: &mut Children,
    (bins, out): (&Path, &Path),
    kept: &Kept,
) -> Result<(), DemoError> {
    let host_arg = kept.host_id.to_string();
    let user = kept.run_as.ok_or_else(|| {
        DemoError::Check("settling escrows as the agent's user; the demo ran as none".to_owned())
    })?;
    let dir = out.join("escrow-kept");
    super::old_box::private_dir(&dir, user)?;
    let dir_arg = dir.display().to_string();
    let pin = super::backup_tiers::read_json(&out.join("operator/ctl.json"))?["fingerprint"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| DemoError::Check("operator/ctl.json names no hub pin".to_owned()))?;
    let config = repinned(&kept.agent_config, &pin, user)?;
    n.detail(format!(
        "agent.toml's [hub] fingerprint → {pin}, the key the hub serves since step 21 (bosun-agentctl reads only agent.toml): {}",
        config.display()
    ));
    let created = escrow::agentctl(
        bins,
        user,
        &config,
        &[
            "escrow",
            "create",
            "--sheet",
            &dir_arg,
            "--work-factor",
            escrow::DEMO_WORK_FACTOR,
            "--customer",
            escrow::DEMO_CUSTOMER,
            "--operator-name",
            escrow::DEMO_OPERATOR,
            "--operator-contact",
            escrow::DEMO_CONTACT,
        ],
        None,
        &out.join("logs/escrow-kept.log"),
    )
    .await?;
    created.expect_code(0, "bosun-agentctl escrow create")?;
    n.detail(format!(
        "$ bosun-agentctl escrow create --sheet {} …   (as bosun-test; the customer keeps the sheet) → key {}",
        dir.display(),
        created.field("key fingerprint:").unwrap_or("?")
    ));

    let fleet = FleetStatus::fetch(&kept.client, 50).await?;
    let file = without_hostile_nfs(out, &fleet)?;
    set_desired(bins, out, &host_arg, &file).await?;
    n.detail(format!(
        "$ bosunctl desired set --host … {}   (the NFS tier {HOSTILE_NFS} no signed plan names, dropped)",
        file.file_name().map_or_else(String::new, |f| f.to_string_lossy().into_owned())
    ));

    let (server, _) = super::verify::sim_server(&kept.sim)?;
    let answer = sim::sim_post_json(
        &kept.sim,
        "POST /_sim/remotes/{server}/chunks/repair",
        &format!("remotes/{server}/chunks/repair"),
        &json!({ "datastore": PBS_DATASTORE, "vmid": kept.alpha_vmid }),
    )
    .await?;
    let repaired = answer["repaired"].as_u64().unwrap_or_default();
    check(repaired > 0, || {
        format!("the simulator repaired nothing: {answer}")
    })?;
    n.detail(format!(
        "backup server {server}: {repaired} snapshots of ct/{} healed from an intact replica (the simulator's chunks/repair)",
        kept.alpha_vmid
    ));

    if let Some((file, length)) = &kept.altered_archive {
        let artifact = |source| DemoError::Artifact {
            path: file.clone(),
            source,
        };
        let archive = std::fs::OpenOptions::new()
            .write(true)
            .open(file)
            .map_err(artifact)?;
        archive.set_len(*length).map_err(artifact)?;
        n.detail(format!(
            "# truncate -s {length} {}   (alpha's archive changed in step 12 put back as it was: the lines appended cut, so its check between restore tests passes again)",
            file.display()
        ));
    }

    let fleet = converge(children, &kept.client, "the kept host to settle", |f| {
        settled(f)
    })
    .await?;
    let summary = fleet
        .hosts
        .first()
        .map(|h| &h.summary)
        .ok_or_else(|| DemoError::Check("the hub lists no host".to_owned()))?;
    let (word, _) = bosun_proto::host_view::state_word(summary);
    let open: Vec<String> = fleet
        .open_alerts
        .iter()
        .map(|a| {
            let subject = a.subject_name.as_deref().unwrap_or(&a.subject);
            let ack = if a.acknowledged.is_some() {
                ", acknowledged"
            } else {
                ""
            };
            format!("{} {subject}{ack}", a.kind.as_str())
        })
        .collect();
    let sync = bosun_proto::host_view::SyncView::of_summary(summary);
    n.detail(format!(
        "hub: escrow_missing, storage_refused and verify_failed resolved; host {} {word}, {}",
        summary.hostname, sync.word
    ));
    n.detail(format!(
        "still open, each the point of its step: {}",
        if open.is_empty() {
            "nothing".to_owned()
        } else {
            open.join("; ")
        }
    ));
    Ok(())
}

/// Whether none of [`RESOLVED`] is open and the host applied what it was asked.
fn settled(fleet: &FleetStatus) -> bool {
    let open = fleet.open_alerts.iter().any(|a| RESOLVED.contains(&a.kind));
    let in_sync = fleet.hosts.first().is_some_and(|h| {
        bosun_proto::host_view::SyncView::of_summary(&h.summary).state
            == bosun_proto::host_view::SyncState::InSync
    });
    !open && in_sync
}

/// A copy of the agent's `config` beside it, owned by `user`, whose `[hub] fingerprint` is
/// `pin`.
fn repinned(config: &Path, pin: &str, user: RunAs) -> Result<PathBuf, DemoError> {
    use std::os::unix::fs::PermissionsExt as _;
    let text = std::fs::read_to_string(config).map_err(|source| DemoError::Artifact {
        path: config.to_owned(),
        source,
    })?;
    let mut in_hub = false;
    let mut replaced = false;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with('[') {
                in_hub = trimmed.starts_with("[hub]");
            } else if in_hub && !replaced && trimmed.starts_with("fingerprint") {
                replaced = true;
                return format!("fingerprint = \"{pin}\"");
            }
            line.to_owned()
        })
        .collect();
    check(replaced, || {
        format!("{} has no [hub] fingerprint", config.display())
    })?;
    let copy = config.with_file_name("agent-kept.toml");
    let artifact = |source| DemoError::Artifact {
        path: copy.clone(),
        source,
    };
    std::fs::write(&copy, lines.join("\n") + "\n").map_err(artifact)?;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o600)).map_err(artifact)?;
    std::os::unix::fs::chown(&copy, Some(user.uid), Some(user.gid)).map_err(artifact)?;
    Ok(copy)
}

/// The host's desired state without the NFS tier no plan names, written for `desired set`.
fn without_hostile_nfs(out: &Path, fleet: &FleetStatus) -> Result<PathBuf, DemoError> {
    let mut document = fleet
        .hosts
        .first()
        .and_then(|h| h.desired.as_ref())
        .map(serde_json::to_value)
        .transpose()
        .map_err(|e| DemoError::Check(format!("the host's desired state: {e}")))?
        .ok_or_else(|| DemoError::Check("the host has no desired state".to_owned()))?;
    if let Some(storage) = document["storage"].as_array_mut() {
        storage.retain(|t| t["durable_id"] != HOSTILE_NFS);
    }
    if let Some(tiers) = document["backup_policy"]["further_tiers"].as_array_mut() {
        tiers.retain(|t| t.as_str() != Some(HOSTILE_NFS));
    }
    let file = out.join("operator/desired-kept.json");
    write_json(&file, &document)?;
    Ok(file)
}
