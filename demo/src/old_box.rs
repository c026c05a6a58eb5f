//! Steps 1–4 of the host-loss walk: box a enrolls, runs two guests and backs them up to the
//! offsite PBS; the escrow is made with the customer present; then box a dies.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_agentctl::escrow::code::RecoveryCode;
use bosun_proto::admin::AlertKind;
use bosun_proto::report::TargetStatus;
use serde_json::{Value, json};
use uuid::Uuid;

use super::backup_tiers::{
    PBS_DATASTORE, PBS_FINGERPRINT, PBS_SERVER, PBS_USER, offsite_pbs, report, set_desired,
    sign_plan, target,
};
use super::children::{Children, RunAs, Site};
use super::escrow::{self, DEMO_WORK_FACTOR};
use super::host_loss::{HostLossOutcome, LostGuest, MARKER};
use super::scenario::{
    applied, check, converge, converge_job, desired, has_alert, ignore_plain_output, observed,
    show, vmid_of, write_json,
};
use super::sim::{self, SimEndpoint};
use super::stack::{self, AgentFiles, HubInfo};
use super::{DemoError, Narrator, helper};
use bosunctl::client::HubClient;
use bosunctl::config::Settings;

/// What the later steps need of box a and the hub.
#[derive(Debug)]
pub(super) struct OldBox {
    /// Node a.
    pub sim: SimEndpoint,
    /// The hub.
    pub hub: HubInfo,
    /// `bosunctl`'s own client, for reading the fleet.
    pub client: HubClient,
    /// The unprivileged user the agents run as.
    pub user: RunAs,
    /// The operator's `allowed_signers` line.
    pub signer: String,
    /// Agent a's files.
    pub files: AgentFiles,
    /// The host.
    pub host_id: Uuid,
    /// Box a's age recipient (storage credentials were sealed to it).
    pub recipient: String,
    /// The PBS target's `durable_id`.
    pub durable: String,
    /// The desired state box a ran (`operator/desired-1.json`).
    pub desired: PathBuf,
}

/// Step 1: node a, the hub, the helper and agent a, as in the main scenario's first step.
pub(super) async fn enroll(
    n: &mut Narrator,
    children: &mut Children,
    (bins, out): (&Path, &Path),
    time_scale: f64,
    outcome: &mut HostLossOutcome,
) -> Result<OldBox, DemoError> {
    // Box a provisions its guests from the golden archive, which bosun-helper (root) hashes.
    let Some(user) = RunAs::for_agent("bosun-test")? else {
        return Err(DemoError::Check(
            "the demo needs root: the agent provisions a guest only after bosun-helper (root) \
             has hashed its golden archive, and the helper pushes the bootstrap"
                .to_owned(),
        ));
    };
    user.check_reaches(&out.join("agent-a"))?;
    user.check_reaches(&stack::program(bins, "bosun-agentd")?)?;
    outcome.agent_uid = Some(user.uid);
    let sim = sim::start_sim(children, bins, out, Site::A, time_scale).await?;
    n.detail(format!(
        "node a: proxmox ve {} (simulated node {})",
        sim.url, sim.node
    ));
    let hub = stack::start_hub(children, bins, out).await?;
    n.detail(format!(
        "$ bosun-hubd init && bosun-hubd serve   → {}",
        hub.url
    ));
    stack::ctl_hub_init(bins, out, &hub).await?;
    let created = stack::ctl(bins, out, &["enroll-token", "create", "--ttl", "10m"]).await?;
    let token = created["token"]
        .as_str()
        .ok_or_else(|| DemoError::Check(format!("enroll-token create answered {created}")))?;
    n.detail("$ bosunctl hub init && bosunctl enroll-token create --ttl 10m");
    let (_, signer) = stack::operator_key(out).await?;
    let helper = helper::start(children, (bins, out), Site::A, &sim, "bosun-test", user).await?;
    outcome.helper_prefixes.push(helper.prefix.clone());
    n.detail(format!(
        "bosun-helper (root) under {} via systemd-socket-activate",
        helper.prefix.display()
    ));
    let files = stack::write_agent_files(
        out,
        Site::A,
        &sim,
        &hub,
        token,
        &signer,
        Some(user),
        Some(helper.socket.as_path()),
    )?;
    stack::start_agent(children, bins, out, &files, Some(user))?;
    n.detail(format!(
        "bosun-agentd (agent a) started as user bosun-test (uid {}), no root",
        user.uid
    ));
    let client = HubClient::new(Settings {
        url: hub.url.clone(),
        fingerprint: hub.fingerprint.clone(),
        token: hub.admin_token.clone(),
        allowed_signers: None,
    })?;
    let fleet = converge(
        children,
        &client,
        "the host to enroll and report its recipient",
        |f| {
            f.hosts.len() == 1
                && f.hosts[0].summary.liveness.as_str() == "ok"
                && report(f).is_some_and(|r| r.storage_recipient.is_some())
        },
    )
    .await?;
    let host = &fleet.hosts[0].summary;
    let recipient = report(&fleet)
        .and_then(|r| r.storage_recipient.clone())
        .unwrap_or_default();
    n.detail(format!(
        "hub shows host {} ({}) {}; its age recipient {}…",
        host.hostname,
        host.host_id,
        host.liveness.as_str(),
        &recipient[..recipient.len().min(12)]
    ));
    outcome.host_id = Some(host.host_id);
    Ok(OldBox {
        host_id: host.host_id,
        sim,
        hub,
        client,
        user,
        signer,
        files,
        recipient,
        durable: format!("{PBS_USER}@{PBS_SERVER}:{PBS_DATASTORE}#{PBS_FINGERPRINT}"),
        desired: out.join("operator/desired-1.json"),
    })
}

/// Step 2: the guests, the PBS tier, a marker in each guest and its signed backup to PBS.
pub(super) async fn guests_backed_up(
    n: &mut Narrator,
    children: &mut Children,
    (bins, out): (&Path, &Path),
    a: &mut OldBox,
    outcome: &mut HostLossOutcome,
) -> Result<(), DemoError> {
    let host_arg = a.host_id.to_string();
    let golden_arg = out.join("operator/golden.json").display().to_string();
    let key_arg = out.join("operator/id_ed25519").display().to_string();
    stack::ctl(
        bins,
        out,
        &[
            "golden",
            "sign",
            "--volid",
            &a.sim.golden_volid,
            "--sha256",
            &a.sim.golden_sha256,
            "-f",
            &key_arg,
            "-o",
            &golden_arg,
        ],
    )
    .await
    .or_else(ignore_plain_output)?;
    n.detail("$ bosunctl golden sign --volid … --sha256 … -f id_ed25519 -o golden.json");
    let sealed = offsite_pbs(
        n,
        bins,
        out,
        &a.sim,
        (&host_arg, &a.durable, &a.files.state_dir),
    )
    .await?;
    let guests = [(Uuid::new_v4(), "alpha"), (Uuid::new_v4(), "bravo")];
    let mut document = desired(out, &guests)?;
    document["storage"] = json!([{
        "type": "pbs",
        "durable_id": a.durable,
        "class": "slow",
        "role": "pbs-offsite",
        "policy": { "schedule": "03:00", "retention": {} },
        "state": "attached",
        "label": "offsite PBS",
        "credentials": sealed,
    }]);
    document["backup_policy"]["further_tiers"] = json!([a.durable]);
    write_json(&a.desired, &document)?;
    let plan = json!({
        "serial": 1,
        "targets": [{
            "type": "pbs", "durable_id": a.durable, "class": "slow", "role": "pbs-offsite",
            "policy": { "schedule": "03:00", "retention": {} }, "state": "attached",
            "label": "offsite PBS",
        }],
        "backup": {
            "schedule": "daily", "retention": {}, "further_tiers": [a.durable],
            "min_interval_seconds": 10,
        },
    });
    sign_plan(bins, out, &host_arg, ("plan-1.json", &plan), &a.desired).await?;
    n.detail("$ bosunctl policy sign-plan --host … -f id_ed25519 --plan plan-1.json --desired desired-1.json   (the host's data plan: the PBS target as the second tier)");
    set_desired(bins, out, &host_arg, &a.desired).await?;
    n.detail("$ bosunctl desired set --host … desired-1.json   (alpha and bravo running; the PBS target as the second backup tier)");
    let fleet = converge(
        children,
        &a.client,
        "both guests running, the PBS target mounted",
        |f| {
            applied(f, 1)
                && guests.iter().all(|(g, _)| observed(f, *g) == "running")
                && target(f, &a.durable).is_some_and(|(s, _)| s == TargetStatus::Mounted)
                && report(f).is_some_and(|r| r.pbs_key_fingerprint.is_some())
        },
    )
    .await?;
    show(n, &fleet);
    if has_alert(&fleet, AlertKind::EscrowMissing) {
        n.detail("hub: escrow_missing: the host backs up to PBS with a key nobody else holds");
    }
    let storage = target(&fleet, &a.durable)
        .and_then(|(_, storage)| storage)
        .ok_or_else(|| DemoError::Check("the PBS target has no storage id".to_owned()))?;
    let k = report(&fleet)
        .and_then(|r| r.pbs_key_fingerprint.clone())
        .unwrap_or_default();
    n.detail(format!(
        "agent a: PBS registered as proxmox storage {storage} with the host's key K ({}…), which never leaves the box",
        &k[..k.len().min(11)]
    ));
    for (guest, name) in guests {
        let vmid = vmid_of(&fleet, guest)?;
        let marker = format!("{name}'s customer data, written before the backup\n");
        let vmid_arg = vmid.to_string();
        sim::sim_pct(
            &a.sim,
            &["push", &vmid_arg, "/tmp/marker", MARKER],
            Some(marker.as_bytes()),
        )
        .await?;
        let archive = force_backup(children, (bins, out), a, (guest, name, vmid), &storage).await?;
        n.detail(format!(
            "{name} (vmid {vmid}): marker {MARKER} written; signed force-backup --param storage={storage} → {archive}"
        ));
        outcome.guests.push(LostGuest {
            guest_id: guest,
            name: name.to_owned(),
            vmid,
            marker,
            archive,
        });
    }
    show_archives(n, &a.sim, &storage, &k, outcome).await
}

/// `bosunctl job new --kind force-backup --param storage=…`, then `job sign` and `job submit`,
/// for one guest; gives the archive it made.
async fn force_backup(
    children: &mut Children,
    (bins, out): (&Path, &Path),
    a: &OldBox,
    (guest, name, vmid): (Uuid, &str, u32),
    storage: &str,
) -> Result<String, DemoError> {
    let doc = out.join(format!("operator/job-backup-{name}.json"));
    let doc_arg = doc.display().to_string();
    let sig_arg = format!("{doc_arg}.sig");
    let key_arg = out.join("operator/id_ed25519").display().to_string();
    let (host_arg, guest_arg, vmid_arg) =
        (a.host_id.to_string(), guest.to_string(), vmid.to_string());
    let param = format!("storage={storage}");
    stack::ctl_text(
        bins,
        out,
        &[
            "job",
            "new",
            "-o",
            &doc_arg,
            "--kind",
            "force-backup",
            "--host",
            &host_arg,
            "--guest",
            &guest_arg,
            "--vmid",
            &vmid_arg,
            "--param",
            &param,
        ],
    )
    .await?;
    stack::ctl_text(bins, out, &["job", "sign", &doc_arg, "-f", &key_arg]).await?;
    let submitted = stack::ctl(bins, out, &["job", "submit", &doc_arg, &sig_arg]).await?;
    let result = converge_job(children, bins, out, &host_arg, &submitted["job_id"]).await?;
    check(result["outcome"] == json!("succeeded"), || {
        format!("the force-backup of {name} ended {result}")
    })?;
    let archive = result["output"]["volid"].as_str().unwrap_or_default();
    check(archive.starts_with(&format!("{storage}:")), || {
        format!("the force-backup of {name} did not land on {storage}: {result}")
    })?;
    Ok(archive.to_owned())
}

/// The PBS storage's listing on node a: each guest's archive names its guest in its notes
/// and is encrypted with K (what lets box b pick it later, and nothing else).
async fn show_archives(
    n: &mut Narrator,
    sim: &SimEndpoint,
    storage: &str,
    k: &str,
    outcome: &HostLossOutcome,
) -> Result<(), DemoError> {
    use bosun_pve::{ContentFilter, ContentType, Pve as _, StorageId};
    let id = StorageId::new(storage.to_owned())
        .map_err(|e| DemoError::Check(format!("storage id {storage:?}: {e}")))?;
    let filter = ContentFilter {
        content: Some(ContentType::Backup),
        vmid: None,
    };
    let items = sim::pve_client(sim)?
        .list_content(&id, filter)
        .await
        .map_err(|source| DemoError::Pve {
            what: "listing the PBS storage",
            source,
        })?;
    for guest in &outcome.guests {
        let item = items.iter().find(|i| i.volid == guest.archive);
        let notes = item.and_then(|i| i.notes.clone()).unwrap_or_default();
        let encrypted = item.and_then(|i| i.encrypted.clone()).unwrap_or_default();
        check(
            notes.contains(&guest.guest_id.to_string()) && same_fingerprint(&encrypted, k),
            || {
                format!(
                    "{}'s archive: notes {notes:?}, encrypted with {encrypted:?} (K is {k})",
                    guest.name
                )
            },
        )?;
        n.detail(format!(
            "proxmox: {} notes \"{notes}\", encrypted with K",
            guest.archive
        ));
    }
    Ok(())
}

fn same_fingerprint(a: &str, b: &str) -> bool {
    let digits = |s: &str| -> String {
        s.chars()
            .filter(char::is_ascii_hexdigit)
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    !a.is_empty() && digits(a) == digits(b)
}

/// Step 3: `bosun-agentctl escrow create` as the agent's user; the sheet read back; the hub's
/// verified escrow; a second `create` refused. Gives the code read off the sheet.
pub(super) async fn escrow(
    n: &mut Narrator,
    children: &mut Children,
    (bins, out): (&Path, &Path),
    a: &OldBox,
    outcome: &mut HostLossOutcome,
) -> Result<RecoveryCode, DemoError> {
    let dir = out.join("escrow");
    private_dir(&dir, a.user)?;
    let dir_arg = dir.display().to_string();
    let log = out.join("logs/escrow-a.log");
    let args = [
        "escrow",
        "create",
        "--sheet",
        &dir_arg,
        "--work-factor",
        DEMO_WORK_FACTOR,
        "--customer",
        escrow::DEMO_CUSTOMER,
        "--operator-name",
        escrow::DEMO_OPERATOR,
        "--operator-contact",
        escrow::DEMO_CONTACT,
    ];
    let created = escrow::agentctl(bins, a.user, &a.files.config, &args, None, &log).await?;
    created.expect_code(0, "bosun-agentctl escrow create")?;
    let pdf = PathBuf::from(created.field("recovery sheet:").unwrap_or_default());
    let fingerprint = created
        .field("key fingerprint:")
        .unwrap_or_default()
        .to_owned();
    n.detail(format!(
        "$ bosun-agentctl escrow create --sheet {} --work-factor {DEMO_WORK_FACTOR} --customer {:?} --operator-name {:?} --operator-contact {:?}   (as bosun-test, the agent's user)",
        dir.display(),
        escrow::DEMO_CUSTOMER,
        escrow::DEMO_OPERATOR,
        escrow::DEMO_CONTACT,
    ));
    n.detail(format!(
        "  (the demo wraps K with scrypt work factor {DEMO_WORK_FACTOR} to stay fast; production uses 18)"
    ));
    let fleet = bosunctl::status::FleetStatus::fetch(&a.client, 50).await?;
    let reported = report(&fleet)
        .and_then(|r| r.pbs_key_fingerprint.clone())
        .unwrap_or_default();
    check(same_fingerprint(&fingerprint, &reported), || {
        format!("escrow create wrapped key {fingerprint:?}; the host reports {reported:?}")
    })?;
    n.detail(format!(
        "agent a: 12-word code made, K wrapped under it (age/scrypt) and unwrapped again to check, sheet rendered by the agent itself (no browser), wrapped K stored at the hub; key fingerprint {fingerprint}"
    ));
    let info = escrow::pdf_info(&pdf).await?;
    check(info.pages == 1 && info.page_size.contains("A4"), || {
        format!("the sheet is not one A4 page: {info:?}")
    })?;
    let png = escrow::render_first_page(&pdf, &dir.join("recovery-sheet-page1")).await?;
    n.detail(format!(
        "sheet: {} ({} page, {}); page 1 as {}",
        pdf.display(),
        info.pages,
        info.page_size,
        png.display()
    ));
    escrow::sheet_shows(
        &pdf,
        &[
            escrow::DEMO_CUSTOMER,
            &format!(
                "Who to call {}, {}",
                escrow::DEMO_OPERATOR,
                escrow::DEMO_CONTACT
            ),
            &format!("1. Call {}", escrow::DEMO_OPERATOR),
            "The hub keeps only the locked key, never these words.",
            "Handover (filled in by hand)",
        ],
    )
    .await?;
    n.detail(format!(
        "the sheet names the customer ({}) and whom to call ({}, {}), lists the day-of-loss steps and has a handover box; it says the hub keeps only the locked key, never the words",
        escrow::DEMO_CUSTOMER,
        escrow::DEMO_OPERATOR,
        escrow::DEMO_CONTACT
    ));
    let code = escrow::words_on_sheet(&pdf).await?;
    n.detail("the customer reads the sheet (pdftotext -layout): the numbered grid 1 … 12 gives 12 words whose BIP39 checksum holds; they are not shown here");
    let host_arg = a.host_id.to_string();
    let fleet = converge(children, &a.client, "a verified escrow at the hub", |f| {
        f.hosts
            .first()
            .is_some_and(|h| h.summary.escrow.as_str() == "verified")
    })
    .await?;
    let shown = stack::ctl(bins, out, &["hosts", "show", &host_arg]).await?;
    let escrow_state = shown["escrow"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    check(
        escrow_state == "verified"
            && same_fingerprint(
                shown["escrow"]["key_fingerprint"]
                    .as_str()
                    .unwrap_or_default(),
                &fingerprint,
            ),
        || format!("`bosunctl hosts show` shows the escrow {}", shown["escrow"]),
    )?;
    n.detail(format!(
        "$ bosunctl hosts show {host_arg}   → escrow: verified: wraps the host's key {} (stored {})",
        shown["escrow"]["key_fingerprint"].as_str().unwrap_or_default(),
        shown["escrow"]["updated_at"].as_str().unwrap_or_default()
    ));
    if has_alert(&fleet, AlertKind::EscrowVerified) {
        n.detail("hub: escrow_verified");
    }
    let sheet_bytes = read(&pdf)?;
    let again = escrow::agentctl(bins, a.user, &a.files.config, &args, None, &log).await?;
    again.expect_code(75, "the second escrow create")?;
    let after = stack::ctl(bins, out, &["hosts", "show", &host_arg]).await?;
    check(
        after["escrow"] == shown["escrow"] && read(&pdf)? == sheet_bytes,
        || "the refused escrow create changed the hub's escrow or the sheet".to_owned(),
    )?;
    n.detail(format!(
        "$ bosun-agentctl escrow create …   → exit 75: {}",
        again.complaint()
    ));
    n.detail("the hub's escrow and the sheet are unchanged");
    outcome.sheet = Some(pdf);
    outcome.sheet_png = Some(png);
    outcome.sheet_pages = Some((info.pages, info.page_size));
    outcome.escrow_state = Some(escrow_state);
    outcome.second_create_exit = again.code;
    outcome.fingerprint_old = Some(fingerprint);
    Ok(code)
}

/// Step 4: agent a stops, the PBS's store is exported from node a (it is offsite: it outlives
/// the box), node a and its helper stop for good. Gives the store.
pub(super) async fn host_dies(
    n: &mut Narrator,
    children: &mut Children,
    (_, out): (&Path, &Path),
    a: &OldBox,
    outcome: &HostLossOutcome,
) -> Result<Value, DemoError> {
    let status = children
        .stop("bosun-agentd-a", Duration::from_secs(10))
        .await?;
    n.detail(format!("agent a stopped ({status})"));
    let store = sim::sim_export_store(&a.sim, PBS_SERVER).await?;
    let volids: Vec<&str> = store["namespaces"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|ns| ns["backups"].as_array().into_iter().flatten())
        .filter_map(|b| b["volid"].as_str())
        .collect();
    for guest in &outcome.guests {
        let (_, volid) = guest.archive.split_once(':').unwrap_or_default();
        check(volids.contains(&volid), || {
            format!("the PBS store has no {volid}: {volids:?}")
        })?;
    }
    let file = out.join("pbs-store.json");
    write_json(&file, &store)?;
    n.detail(format!(
        "PBS {PBS_SERVER} (offsite): {} backups kept in {} (GET /_sim/remotes/{PBS_SERVER}/store)",
        volids.len(),
        file.display()
    ));
    for name in [
        "bosun-pvesim-a",
        "bosun-helper-a",
        "bosun-helper-guest-a",
        "bosun-helper-golden-a",
    ] {
        children.stop(name, Duration::from_secs(5)).await?;
    }
    n.detail("node a and its helper stopped for good: box a is lost with K on it");
    converge(children, &a.client, "the host_overdue alert", |f| {
        has_alert(f, AlertKind::HostOverdue)
    })
    .await?;
    n.detail("hub: host_overdue");
    Ok(store)
}

/// A directory only `user` may enter (the sheet holds the words).
pub(super) fn private_dir(path: &Path, user: RunAs) -> Result<(), DemoError> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let artifact = |source| DemoError::Artifact {
        path: path.to_owned(),
        source,
    };
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(artifact)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(artifact)?;
    std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid)).map_err(artifact)
}

fn read(path: &Path) -> Result<Vec<u8>, DemoError> {
    std::fs::read(path).map_err(|source| DemoError::Artifact {
        path: path.to_owned(),
        source,
    })
}
