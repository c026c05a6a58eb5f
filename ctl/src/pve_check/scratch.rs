//! `--scratch`: one whole guest life on the node, with the calls the agent makes: the golden
//! archive restored onto a free vmid (every link down before the start), started,
//! snapshotted and backed up, then destroyed with its backup.
//!
//! Cleanup runs on every way out (a failed step, an error, Ctrl-C): a task still running is
//! waited for first, the guest is destroyed only when its config carries this check's tag and
//! hostname (a vmid claimed by someone else in the meantime is never touched), and only the
//! backups of the scratch vmid that were not there before its vzdump are deleted.

use std::collections::BTreeSet;
use std::future::Future;

use bosun_pve::{
    BackupMode, ConfigUpdate, ContentFilter, ContentType, CtOptions, GuestStatus, Op, Pve,
    PveClient, PveError, RestoreRequest, SnapName, StorageId, Upid, Vmid, VolumeId, VzdumpRequest,
    archive_volid_from_log, net_without_hwaddr, read_log,
};

use super::report::{Check, Report, Status};

/// The tag a scratch guest carries, so cleanup destroys only its own guest.
pub(crate) const SCRATCH_TAG: &str = "bosun-pve-check";

/// What the scratch steps use.
#[derive(Debug)]
pub(super) struct Target {
    pub(super) golden: VolumeId,
    pub(super) rootdir: StorageId,
    pub(super) backup: StorageId,
}

/// What exists on the node because of the scratch steps, for cleanup.
#[derive(Debug, Default)]
struct Leftovers {
    /// The vmid the restore was sent for.
    vmid: Option<Vmid>,
    /// A task started and not yet seen to end.
    task: Option<(Op, Upid)>,
    /// The scratch vmid's backups before its vzdump, once the vzdump is about to start.
    backups_before: Option<BTreeSet<String>>,
}

fn hostname(vmid: Vmid) -> String {
    format!("bosun-pve-check-{vmid}")
}

/// A failed step: its check name and what happened.
struct Failed(&'static str, String);

fn failed(name: &'static str) -> impl FnOnce(PveError) -> Failed {
    move |e| Failed(name, bosun_errchain::error_chain(&e))
}

/// Runs the scratch steps, then the cleanup, adding a check for each.
pub(super) async fn run(
    client: &PveClient,
    target: &Target,
    report: &mut Report,
    cancel: impl Future<Output = ()>,
) {
    let mut left = Leftovers::default();
    let mut done: Vec<Check> = Vec::new();
    let outcome = tokio::select! {
        outcome = steps(client, target, &mut left, &mut done) => outcome,
        () = cancel => Err(Failed("scratch-interrupted", "interrupted (Ctrl-C)".into())),
    };
    report.checks.append(&mut done);
    if let Err(Failed(name, detail)) = outcome {
        let name = if name == "scratch-interrupted" {
            next_step(report)
        } else {
            name
        };
        report.checks.push(Check::fail(
            name,
            detail,
            vec![
                "see the task log on the node: Datacenter → Tasks, or /var/log/pve/tasks"
                    .to_owned(),
            ],
        ));
    }
    report.checks.push(cleanup(client, target, &left).await);
}

/// The first scratch step that has no check yet (for an interruption).
fn next_step(report: &Report) -> &'static str {
    [
        "scratch-restore",
        "scratch-start",
        "scratch-snapshot",
        "scratch-backup",
    ]
    .into_iter()
    .find(|name| report.check(name).is_none())
    .unwrap_or("scratch-backup")
}

async fn task(
    client: &PveClient,
    left: &mut Leftovers,
    name: &'static str,
    op: Op,
    started: Result<Upid, PveError>,
) -> Result<Upid, Failed> {
    let upid = started.map_err(failed(name))?;
    left.task = Some((op, upid.clone()));
    client.wait_task(op, &upid).await.map_err(failed(name))?;
    left.task = None;
    Ok(upid)
}

/// The scratch guest's steps in order: each adds its check to `done`, and the first that
/// fails ends the run with its name.
async fn steps(
    client: &PveClient,
    target: &Target,
    left: &mut Leftovers,
    done: &mut Vec<Check>,
) -> Result<(), Failed> {
    let vmid = restore(client, target, left, done).await?;
    start(client, vmid, left, done).await?;
    snapshot(client, vmid, left, done).await?;
    backup(client, target, vmid, left, done).await
}

const RESTORE: &str = "scratch-restore";
const START: &str = "scratch-start";
const SNAPSHOT: &str = "scratch-snapshot";
const BACKUP: &str = "scratch-backup";

/// Restores the golden archive as a new CT with every link down (isolated before its first
/// start, as the agent's restore tests do); gives its vmid.
async fn restore(
    client: &PveClient,
    target: &Target,
    left: &mut Leftovers,
    done: &mut Vec<Check>,
) -> Result<Vmid, Failed> {
    let vmid = client.next_id().await.map_err(failed(RESTORE))?;
    let mut request = RestoreRequest::new(vmid, target.golden.clone(), target.rootdir.clone());
    request.options = CtOptions {
        hostname: Some(hostname(vmid)),
        onboot: Some(false),
        tags: vec![SCRATCH_TAG.to_owned()],
        ..CtOptions::default()
    };
    left.vmid = Some(vmid);
    task(
        client,
        left,
        RESTORE,
        Op::RestoreCt,
        client.restore_ct(&request).await,
    )
    .await?;
    // Isolate before the first start: every link down.
    let config = client.ct_config(vmid).await.map_err(failed(RESTORE))?;
    let mut set = CtOptions::default();
    for (key, value) in &config.values {
        if let Some(index) = key.strip_prefix("net").and_then(|i| i.parse::<u8>().ok())
            && let Some(value) = value.as_str()
        {
            let mut net = net_without_hwaddr(value).map_err(|r| Failed(RESTORE, r))?;
            net.link_down = Some(true);
            set.net.insert(index, net);
        }
    }
    let links = set.net.len();
    if links > 0 {
        let update = ConfigUpdate {
            set,
            delete: Vec::new(),
            digest: Some(config.digest.clone()),
        };
        client
            .update_ct_config(vmid, &update)
            .await
            .map_err(failed(RESTORE))?;
    }
    done.push(Check::ok(
        RESTORE,
        format!(
            "{} restored as CT {vmid} on {} ({links} link(s) down)",
            target.golden, target.rootdir
        ),
    ));

    Ok(vmid)
}

/// Starts the CT and checks that it runs.
async fn start(
    client: &PveClient,
    vmid: Vmid,
    left: &mut Leftovers,
    done: &mut Vec<Check>,
) -> Result<(), Failed> {
    task(
        client,
        left,
        START,
        Op::StartCt,
        client.start_ct(vmid).await,
    )
    .await?;
    let status = client.ct_status(vmid).await.map_err(failed(START))?;
    if status.status != GuestStatus::Running {
        return Err(Failed(
            START,
            format!("CT {vmid} is {:?} after its start", status.status),
        ));
    }
    done.push(Check::ok(START, format!("CT {vmid} is running")));
    Ok(())
}

/// Takes a snapshot and checks that it is listed.
async fn snapshot(
    client: &PveClient,
    vmid: Vmid,
    left: &mut Leftovers,
    done: &mut Vec<Check>,
) -> Result<(), Failed> {
    let name = SnapName::new("bosun-check").map_err(|e| Failed(SNAPSHOT, e.to_string()))?;
    task(
        client,
        left,
        SNAPSHOT,
        Op::CreateSnapshot,
        client
            .create_snapshot(vmid, &name, Some("bosunctl pve check"))
            .await,
    )
    .await?;
    let snapshots = client
        .list_snapshots(vmid)
        .await
        .map_err(failed(SNAPSHOT))?;
    if !snapshots.iter().any(|s| s.name == name.as_str()) {
        return Err(Failed(
            SNAPSHOT,
            format!("snapshot {name} is not listed after its task"),
        ));
    }
    done.push(Check::ok(
        SNAPSHOT,
        format!("snapshot {name} of CT {vmid} taken"),
    ));
    Ok(())
}

/// Backs the CT up in snapshot mode and checks that an archive was written.
async fn backup(
    client: &PveClient,
    target: &Target,
    vmid: Vmid,
    left: &mut Leftovers,
    done: &mut Vec<Check>,
) -> Result<(), Failed> {
    left.backups_before = Some(
        backups_of(client, &target.backup, vmid)
            .await
            .map_err(failed(BACKUP))?,
    );
    let mut dump = VzdumpRequest::new(vmid, target.backup.clone());
    dump.mode = BackupMode::Snapshot;
    let upid = task(client, left, BACKUP, Op::Vzdump, client.vzdump(&dump).await).await?;
    let volid = created_backups(client, target, vmid, left, Some(&upid))
        .await
        .map_err(failed(BACKUP))?;
    match volid.first() {
        Some(volid) => done.push(Check::ok(
            BACKUP,
            format!("vzdump wrote {volid} (snapshot mode) to {}", target.backup),
        )),
        None => {
            return Err(Failed(
                BACKUP,
                format!("vzdump of CT {vmid} left no archive on {}", target.backup),
            ));
        }
    }
    Ok(())
}

async fn backups_of(
    client: &PveClient,
    storage: &StorageId,
    vmid: Vmid,
) -> Result<BTreeSet<String>, PveError> {
    let filter = ContentFilter {
        content: Some(ContentType::Backup),
        vmid: Some(vmid),
    };
    Ok(client
        .list_content(storage, filter)
        .await?
        .into_iter()
        .map(|i| i.volid)
        .collect())
}

/// The scratch vmid's backups the check made: the archive its vzdump task logged, plus any
/// backup of the vmid that was not there before.
async fn created_backups(
    client: &PveClient,
    target: &Target,
    vmid: Vmid,
    left: &Leftovers,
    upid: Option<&Upid>,
) -> Result<Vec<String>, PveError> {
    let Some(before) = &left.backups_before else {
        return Ok(Vec::new());
    };
    let mut found: BTreeSet<String> = backups_of(client, &target.backup, vmid)
        .await?
        .difference(before)
        .cloned()
        .collect();
    if let Some(upid) = upid
        && let Ok(log) = read_log(client, upid).await
        && let Some(volid) =
            archive_volid_from_log(log.iter().map(|l| l.t.as_str()), target.backup.as_str())
        && !before.contains(&volid)
    {
        found.insert(volid);
    }
    Ok(found.into_iter().collect())
}

/// Destroys the scratch guest and deletes its backups; the `scratch-cleanup` check.
async fn cleanup(client: &PveClient, target: &Target, left: &Leftovers) -> Check {
    const NAME: &str = "scratch-cleanup";
    let Some(vmid) = left.vmid else {
        return Check::ok(NAME, "nothing was created");
    };
    let mut problems: Vec<String> = Vec::new();
    let mut fix: Vec<String> = Vec::new();
    let mut done: Vec<String> = Vec::new();
    // A task cut off by an interruption still runs on the node: let it end first.
    let mut vzdump_upid = None;
    if let Some((op, upid)) = &left.task {
        if let Err(e) = client.wait_task(*op, upid).await {
            tracing::debug!(error = %bosun_errchain::error_chain(&e), "the interrupted task failed");
        }
        if *op == Op::Vzdump {
            vzdump_upid = Some(upid.clone());
        }
    }
    match created_backups(client, target, vmid, left, vzdump_upid.as_ref()).await {
        Ok(volids) => {
            for volid in volids {
                match delete_backup(client, &volid).await {
                    Ok(()) => done.push(format!("backup {volid} deleted")),
                    Err(e) => {
                        problems.push(format!(
                            "backup {volid} left: {}",
                            bosun_errchain::error_chain(&e)
                        ));
                        fix.push(format!("pvesm free {volid}"));
                    }
                }
            }
        }
        Err(e) => {
            problems.push(format!(
                "could not list the backups of CT {vmid}: {}",
                bosun_errchain::error_chain(&e)
            ));
            fix.push(format!(
                "pvesm list {} --vmid {vmid}  # delete what the check left: pvesm free VOLID",
                target.backup
            ));
        }
    }
    match destroy_if_ours(client, vmid).await {
        Ok(Some(what)) => done.push(what),
        Ok(None) => {}
        Err(e) => {
            problems.push(format!(
                "CT {vmid} left: {}",
                bosun_errchain::error_chain(&e)
            ));
            fix.push(format!("pct stop {vmid}; pct destroy {vmid} --purge"));
        }
    }
    if problems.is_empty() {
        Check::ok(
            NAME,
            if done.is_empty() {
                "nothing was left on the node".to_owned()
            } else {
                done.join(", ")
            },
        )
    } else {
        Check {
            name: NAME,
            status: Status::Fail,
            detail: problems.join("; "),
            fix,
        }
    }
}

async fn delete_backup(client: &PveClient, volid: &str) -> Result<(), PveError> {
    let volume = VolumeId::new(volid).map_err(|e| PveError::Setup {
        what: format!("volid {volid}: {e}"),
        source: None,
    })?;
    if let Some(upid) = client.delete_volume(&volume).await? {
        client.wait_task(Op::DeleteVolume, &upid).await?;
    }
    Ok(())
}

/// Stops and destroys `vmid` when it is the check's scratch guest; `None` when it does not
/// exist (the restore never made it) or is not ours.
async fn destroy_if_ours(client: &PveClient, vmid: Vmid) -> Result<Option<String>, PveError> {
    if !client.list_cts().await?.iter().any(|ct| ct.vmid == vmid) {
        return Ok(None);
    }
    let config = client.ct_config(vmid).await?;
    let tagged = config
        .get_str("tags")
        .is_some_and(|t| t.split([';', ',', ' ']).any(|t| t == SCRATCH_TAG));
    if !tagged || config.hostname().as_deref() != Some(hostname(vmid).as_str()) {
        tracing::warn!(
            vmid = vmid.get(),
            "the scratch vmid holds another guest; left alone"
        );
        return Ok(None);
    }
    if client.ct_status(vmid).await?.status == GuestStatus::Running {
        let upid = client.stop_ct(vmid).await?;
        client.wait_task(Op::StopCt, &upid).await?;
    }
    let upid = client.destroy_ct(vmid, true).await?;
    client.wait_task(Op::DestroyCt, &upid).await?;
    Ok(Some(format!("CT {vmid} destroyed")))
}
