//! `POST /nodes/{node}/vzdump`: one job per node (global lock), `lock: backup` per guest,
//! PVE's INFO lines, archives named as PVE names them, notes, protection and pruning.

use std::collections::BTreeMap;

use serde_json::json;

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::archive::{archive_name, format_size, prune_keep, render_notes};
use crate::schema::{PRUNE, parse_prop_string};
use crate::state::{Archive, Snapshot, StorageKind, Volume, now_epoch, volume_of};
use crate::tasks::{self, TaskCtx};

/// Everything the job needs, decided synchronously.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) vmids: Vec<u32>,
    pub(crate) storage: String,
    pub(crate) mode: String,
    pub(crate) compress: String,
    pub(crate) notes_template: Option<String>,
    pub(crate) protected: bool,
    pub(crate) prune: Option<String>,
    pub(crate) lockwait_min: u64,
    pub(crate) cmdline: String,
}

/// The synchronous part: parameter rules, permissions, then the task.
pub(crate) fn start(ctx: &Ctx) -> HandlerResult {
    if ctx.get("stdout").is_some() {
        return Err(ApiError::param(
            "stdout",
            "option is only allowed on the command line interface.",
        ));
    }
    for key in ["tmpdir", "dumpdir", "script", "job-id"] {
        if ctx.get(key).is_some() && !ctx.is_root() {
            return Err(ApiError::param(key, "Only root may set this option."));
        }
    }
    let all = ctx.flag("all");
    if ctx.get("vmid").is_some() {
        for key in ["all", "exclude", "pool"] {
            if ctx.explicit.contains(key) && (key != "all" || all) {
                return Err(ApiError::param(key, "option conflicts with option 'vmid'"));
            }
        }
    }
    let st = ctx.shared.state.lock();
    let mut vmids: Vec<u32> = match ctx.get("vmid") {
        Some(list) => list
            .split([',', ';', ' '])
            .filter_map(|s| s.parse().ok())
            .collect(),
        None if all => {
            let excluded: Vec<u32> = ctx
                .get("exclude")
                .map(|l| {
                    l.split([',', ';', ' '])
                        .filter_map(|s| s.parse().ok())
                        .collect()
                })
                .unwrap_or_default();
            st.guests
                .keys()
                .copied()
                .filter(|id| !excluded.contains(id))
                .collect()
        }
        None => Vec::new(),
    };
    vmids.sort_unstable();
    vmids.dedup();
    if vmids.is_empty() {
        return Err(ApiError::param("vmid", "property is missing"));
    }
    let storage = ctx.get("storage").unwrap_or("local").to_owned();
    if !st.storages.contains_key(&storage) {
        return Err(ApiError::internal(&format!(
            "storage '{storage}' does not exist"
        )));
    }
    let spath = format!("/storage/{storage}");
    if !st
        .access
        .has(&ctx.authid, &spath, "Datastore.AllocateSpace")
    {
        return Err(ApiError::perm(&spath, "Datastore.AllocateSpace"));
    }
    if ctx.get("prune-backups").is_some()
        && !st.access.has(&ctx.authid, &spath, "Datastore.Allocate")
    {
        return Err(ApiError::perm(&spath, "Datastore.Allocate"));
    }
    for key in ["bwlimit", "ionice"] {
        if ctx.get(key).is_some() && !st.access.has(&ctx.authid, "/", "Sys.Modify") {
            return Err(ApiError::perm("/", "Sys.Modify"));
        }
    }
    if let Some(t) = ctx.get("notes-template") {
        render_notes(t, "x", ctx.node(), 100).map_err(|e| ApiError::param("notes-template", &e))?;
    }
    let remove = ctx.get("remove").is_none_or(|r| r == "1");
    let prune = if remove {
        ctx.get("prune-backups").map(str::to_owned).or_else(|| {
            st.storages
                .get(&storage)
                .and_then(|s| s.prune_backups.clone())
        })
    } else {
        None
    };
    let mut cmdline = format!(
        "vzdump {}",
        vmids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    );
    for key in [
        "mode",
        "storage",
        "compress",
        "notes-template",
        "prune-backups",
        "remove",
    ] {
        if let Some(v) = ctx.get(key) {
            cmdline.push_str(&format!(" --{key} '{v}'"));
        }
    }
    cmdline.push_str(&format!(" --node {}", ctx.node()));
    let job = Job {
        vmids: vmids.clone(),
        storage,
        mode: ctx.get("mode").unwrap_or("snapshot").to_owned(),
        compress: ctx.get("compress").unwrap_or("0").to_owned(),
        notes_template: ctx.get("notes-template").map(str::to_owned),
        protected: ctx.flag("protected"),
        prune,
        lockwait_min: ctx
            .get("lockwait")
            .and_then(|l| l.parse().ok())
            .unwrap_or(180),
        cmdline,
    };
    drop(st);
    let id = if vmids.len() == 1 {
        vmids[0].to_string()
    } else {
        String::new()
    };
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "vzdump",
        &id,
        "command 'tar cpf - --totals --one-file-system -p --sparse --numeric-owner --acls --xattrs' failed: exit code 2".to_owned(),
        move |t| async move { run_job(&t, &job).await },
    );
    data(json!(upid))
}

async fn run_job(t: &TaskCtx, job: &Job) -> Result<(), String> {
    let shared = &t.shared;
    t.log(format!("INFO: starting new backup job: {}", job.cmdline));
    let lock = shared.vzdump_lock.clone();
    let _global = match lock.clone().try_lock_owned() {
        Ok(g) => g,
        Err(_) => {
            t.log("INFO: trying to get global lock - waiting...");
            let wait = shared.config.scaled(std::time::Duration::from_secs(
                job.lockwait_min.saturating_mul(60),
            ));
            let g = tokio::time::timeout(wait, lock.lock_owned())
                .await
                .map_err(|_| {
                    "can't acquire lock '/var/run/vzdump.lock' - got timeout".to_owned()
                })?;
            t.log("INFO: got global lock");
            g
        }
    };
    {
        let st = shared.state.lock();
        let storage = st
            .storages
            .get(&job.storage)
            .ok_or_else(|| format!("storage '{}' does not exist", job.storage))?;
        crate::storage_config::activate(&st, &job.storage)
            .map_err(|e| format!("could not activate storage '{}': {e}", job.storage))?;
        if !storage.content.contains("backup") {
            return Err(format!(
                "can't use storage '{}' for backups - wrong content type",
                job.storage
            ));
        }
        for vmid in job
            .vmids
            .iter()
            .filter(|id| st.guests.contains_key(id) || st.vms.contains_key(id))
        {
            let path = format!("/vms/{vmid}");
            if !st.access.has(&t.authid, &path, "VM.Backup") {
                return Err(format!("Permission check failed ({path}, VM.Backup)"));
            }
        }
    }
    let mut errors = 0;
    for vmid in &job.vmids {
        let (ct, vm) = {
            let st = shared.state.lock();
            (st.guests.contains_key(vmid), st.vms.contains_key(vmid))
        };
        if !ct && !vm {
            errors += 1;
            t.log(format!(
                "ERROR: Backup of VM {vmid} failed - unable to find VM '{vmid}'"
            ));
            continue;
        }
        let kind = if vm { "qemu" } else { "lxc" };
        t.log(format!("INFO: Starting Backup of VM {vmid} ({kind})"));
        let started = shared.clock.now();
        t.log(format!(
            "INFO: Backup started at {}",
            started.strftime("%Y-%m-%d %H:%M:%S")
        ));
        let result = if vm {
            crate::vzdump_qemu::backup_vm(t, job, *vmid, &started).await
        } else {
            backup_guest(t, job, *vmid, &started).await
        };
        if let Err(msg) = result {
            errors += 1;
            t.log(format!("ERROR: Backup of VM {vmid} failed - {msg}"));
            t.log(format!(
                "INFO: Failed at {}",
                shared.clock.now().strftime("%Y-%m-%d %H:%M:%S")
            ));
        }
    }
    if errors > 0 {
        t.log("INFO: Backup job finished with errors");
        return Err("job errors".to_owned());
    }
    t.log("INFO: Backup job finished successfully");
    Ok(())
}

async fn backup_guest(
    t: &TaskCtx,
    job: &Job,
    vmid: u32,
    started: &jiff::Zoned,
) -> Result<(), String> {
    let shared = &t.shared;
    // lock: backup, and decide the mode.
    let (conf, running, capable, kind, data) = {
        let mut st = shared.state.lock();
        let kind = st
            .storages
            .get(&job.storage)
            .map(|s| s.kind.clone())
            .ok_or_else(|| format!("storage '{}' does not exist", job.storage))?;
        let capable = st.guests.get(&vmid).is_some_and(|g| {
            g.conf
                .iter()
                .filter(|(k, _)| *k == "rootfs" || k.starts_with("mp"))
                .filter_map(|(_, v)| volume_of(v))
                .all(|vol| {
                    vol.split_once(':')
                        .and_then(|(sid, _)| st.storages.get(sid))
                        .is_some_and(|s| s.kind.snapshots())
                })
        });
        let guest = st
            .guests
            .get_mut(&vmid)
            .ok_or_else(|| format!("unable to find VM '{vmid}'"))?;
        t.log(format!(
            "INFO: status = {}",
            if guest.running() {
                "running"
            } else {
                "stopped"
            }
        ));
        guest.check_lock(&[])?;
        guest.conf.insert("lock".to_owned(), "backup".to_owned());
        let mut conf = guest.conf.clone();
        conf.remove("lock");
        let data = guest.data_bytes();
        (conf, guest.running(), capable, kind, data)
    };
    let result = backup_locked(t, job, vmid, started, &conf, running, capable, &kind, data).await;
    let mut st = shared.state.lock();
    if let Some(g) = st.guests.get_mut(&vmid) {
        g.conf.remove("lock");
        g.snapshots.remove("vzdump");
    }
    result
}

#[expect(clippy::too_many_arguments, reason = "the facts of one guest's backup")]
async fn backup_locked(
    t: &TaskCtx,
    job: &Job,
    vmid: u32,
    started: &jiff::Zoned,
    conf: &crate::state::Conf,
    running: bool,
    capable: bool,
    kind: &StorageKind,
    data: u64,
) -> Result<(), String> {
    let shared = &t.shared;
    let hostname = conf
        .get("hostname")
        .cloned()
        .unwrap_or_else(|| format!("CT{vmid}"));
    let prepare = || {
        t.log(format!("INFO: CT Name: {hostname}"));
        t.log("INFO: including mount point rootfs ('/') in backup");
    };
    let mut mode = if running { job.mode.as_str() } else { "stop" };
    // Snapshot mode prepares before the mode line; the others after it.
    if mode == "snapshot" {
        prepare();
        if !capable {
            t.log("INFO: mode failure - some volumes do not support snapshots");
            t.log("INFO: trying 'suspend' mode instead");
            mode = "suspend";
        }
    }
    t.log(format!("INFO: backup mode: {mode}"));
    t.log("INFO: ionice priority: 7");
    if mode != "snapshot" {
        prepare();
    }
    match mode {
        "snapshot" => {
            t.log("INFO: create storage snapshot 'vzdump'");
            let mut st = shared.state.lock();
            if let Some(g) = st.guests.get_mut(&vmid) {
                let files = g.files.clone();
                g.snapshots.insert(
                    "vzdump".to_owned(),
                    Snapshot {
                        conf: conf.clone(),
                        snaptime: now_epoch(),
                        description: "vzdump backup snapshot".to_owned(),
                        snapstate: None,
                        files,
                    },
                );
            }
        }
        "suspend" => {
            let pid = 100_000 + vmid;
            t.log(format!(
                "INFO: starting first sync /proc/{pid}/root/ to /var/tmp/vzdumptmp{pid}_{vmid}/"
            ));
            t.log("INFO: first sync finished (1 seconds)");
            t.log("INFO: suspending guest");
            t.log(format!(
                "INFO: starting final sync /proc/{pid}/root/ to /var/tmp/vzdumptmp{pid}_{vmid}/"
            ));
            t.log("INFO: final sync finished (0 seconds)");
            t.log("INFO: resuming guest");
            t.log("INFO: guest is online again after 1 seconds");
        }
        _ => {}
    }
    let (volid, format, shown) = archive_name(
        &shared.state.lock(),
        &job.storage,
        &job.compress,
        vmid,
        started,
        false,
    )
    .ok_or_else(|| format!("unable to name an archive on storage '{}'", job.storage))?;
    match kind {
        StorageKind::Pbs { .. } => t.log(format!(
            "INFO: creating Proxmox Backup Server archive '{shown}'"
        )),
        _ => t.log(format!("INFO: creating vzdump archive '{shown}'")),
    }
    // Writing the archive to an NFS or CIFS server that hangs: a hard mount blocks (the
    // task runs on and the guest stays locked), a soft one fails the write.
    if let Err(e) = crate::hung_mounts::io(shared, &job.storage).await {
        t.log(format!("INFO: tar: {shown}.dat: Cannot write: {e}"));
        return Err(format!(
            "command 'tar cpf - --totals --one-file-system -p --sparse --numeric-owner --acls --xattrs' failed: exit code 2 ({shown}: {e})"
        ));
    }
    t.work(shared.config.durations.vzdump).await?;
    t.checkpoint()?;
    // The archive holds the guest's files, compressed to about a quarter.
    let size = data / 4 + u64::from(vmid);
    t.log(format!(
        "INFO: Total bytes written: {} ({}MiB, 120MiB/s)",
        size * 2,
        size * 2 / (1 << 20)
    ));
    if !matches!(kind, StorageKind::Pbs { .. }) {
        t.log(format!("INFO: archive file size: {}", format_size(size)));
    }
    let notes = match &job.notes_template {
        Some(tpl) => {
            t.log("INFO: adding notes to backup");
            Some(render_notes(tpl, &hostname, shared.node(), vmid)?)
        }
        None => None,
    };
    if job.protected {
        t.log("INFO: marking backup as protected");
    }
    {
        let mut st = shared.state.lock();
        // The archive holds the CT's files as the backup read them.
        let files = st
            .guests
            .get(&vmid)
            .map(|g| {
                g.snapshots
                    .get("vzdump")
                    .filter(|_| mode == "snapshot")
                    .map_or_else(|| g.files.clone(), |s| s.files.clone())
            })
            .unwrap_or_default();
        let storage = st
            .storages
            .get(&job.storage)
            .ok_or_else(|| format!("storage '{}' does not exist", job.storage))?;
        let encrypted = match storage.kind {
            StorageKind::Pbs { .. } => storage
                .options
                .get("encryption-key")
                .filter(|fp| fp.as_str() != "1")
                .cloned(),
            _ => None,
        };
        st.push_volume(Volume {
            volid,
            content: "backup".to_owned(),
            format,
            size,
            ctime: started.timestamp().as_second(),
            vmid: Some(vmid),
            notes,
            protected: job.protected,
            encrypted,
            archive: Some(Archive::new(conf.clone(), files)),
        });
    }
    if let Some(prune) = &job.prune {
        prune_backups(t, job, vmid, prune);
    }
    if mode == "snapshot" {
        t.log("INFO: cleanup temporary 'vzdump' snapshot");
    }
    let elapsed = (shared.clock.epoch() - started.timestamp().as_second()).max(0);
    t.log(format!(
        "INFO: Finished Backup of VM {vmid} ({:02}:{:02}:{:02})",
        elapsed / 3600,
        (elapsed / 60) % 60,
        elapsed % 60
    ));
    t.log(format!(
        "INFO: Backup finished at {}",
        shared.clock.now().strftime("%Y-%m-%d %H:%M:%S")
    ));
    Ok(())
}

/// Applies the retention options to this guest's unprotected backups on the job's storage.
pub(crate) fn prune_backups(t: &TaskCtx, job: &Job, vmid: u32, prune: &str) {
    let opts: BTreeMap<String, String> = parse_prop_string(&PRUNE, prune).unwrap_or_default();
    // keep-all turns removal off entirely (no prune line).
    if opts.get("keep-all").is_some_and(|v| v == "1") {
        return;
    }
    let keepstr: Vec<String> = opts.iter().map(|(k, v)| format!("{k}={v}")).collect();
    t.log(format!(
        "INFO: prune older backups with retention: {}",
        keepstr.join(", ")
    ));
    let keep: Vec<(&str, usize)> = opts
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), v.parse::<usize>().ok()?)))
        .collect();
    let mut st = t.shared.state.lock();
    let mine: Vec<(i64, String)> = st
        .volumes(&job.storage)
        .iter()
        .filter(|v| v.content == "backup" && v.vmid == Some(vmid) && !v.protected)
        .map(|v| (v.ctime, v.volid.clone()))
        .collect();
    let ctimes: Vec<i64> = mine.iter().map(|(c, _)| *c).collect();
    let kept = prune_keep(&ctimes, &keep);
    let doomed: Vec<String> = mine
        .into_iter()
        .zip(kept)
        .filter(|(_, keep)| !keep)
        .map(|((_, v), _)| v)
        .collect();
    for volid in &doomed {
        t.log(format!("INFO: removing backup '{volid}'"));
    }
    for volid in &doomed {
        st.remove_volume(volid);
    }
    let extra = if doomed.is_empty() {
        ""
    } else {
        " not covered by keep-retention policy"
    };
    t.log(format!("INFO: pruned {} backup(s){extra}", doomed.len()));
}
