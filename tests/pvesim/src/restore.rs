//! `POST /nodes/{node}/lxc`: create from a template or restore from a backup archive, in the
//! order PVE checks things (NOTES §4), with the non-root config merge rules.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::json;

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::files::{FileTree, INIT};
use crate::lxc_config::{allocate_volume, bridge_of, check_modify_perm};
use crate::schema::{MP, ROOTFS, format_size, parse_prop_string, parse_size};
use crate::state::{Conf, FLOCK_WAIT_CREATE, Guest, StorageKind, is_volume_key, volume_of};
use crate::tasks;
use crate::unpack::Unpacker;

/// What the synchronous part found out, handed to the task.
struct Plan {
    vmid: u32,
    restore: bool,
    overwrite: bool,
    ostemplate: String,
    archive_conf: Conf,
    /// The archive's (or template's) root filesystem.
    archive_files: FileTree,
    /// How the archive is unpacked, and whether it can be read to its end.
    unpacker: Unpacker,
    unreadable: bool,
    /// The PBS client's complaint when the storage's key is not the one the backup was
    /// made with: the restore fails as it recovers the backup's config.
    wrong_key: Option<String>,
    /// Explicit config keys of the request.
    given: Conf,
    target_storage: String,
    unique: bool,
    start: bool,
}

impl Plan {
    /// Whether the new CT is unprivileged: as given, else as archived; a new CT defaults to
    /// unprivileged, a restore of an archive that does not say to privileged.
    fn unprivileged(&self) -> bool {
        self.given
            .get("unprivileged")
            .or_else(|| self.archive_conf.get("unprivileged"))
            .map(String::as_str)
            .unwrap_or(if self.restore { "0" } else { "1" })
            == "1"
    }
}

/// The explicit config keys of the request; a bare number as `rootfs`/`mpN` means that
/// many GiB on the target storage (`8` → `local-lvm:8`).
fn given_config(ctx: &Ctx, storage: &str) -> Conf {
    const NOT_CONFIG: &[&str] = &[
        "node",
        "vmid",
        "ostemplate",
        "bwlimit",
        "force",
        "ignore-unpack-errors",
        "password",
        "pool",
        "restore",
        "ssh-public-keys",
        "start",
        "storage",
        "unique",
    ];
    ctx.explicit
        .iter()
        .filter(|k| !NOT_CONFIG.contains(&k.as_str()))
        .filter_map(|k| ctx.get(k).map(|v| (k.clone(), v.to_owned())))
        .map(|(k, v)| {
            let bare_size = v.split(',').next().is_some_and(|first| {
                !first.is_empty() && first.parse::<f64>().is_ok() && !first.contains('=')
            });
            if (k == "rootfs" || k.starts_with("mp")) && bare_size {
                (k, format!("{storage}:{v}"))
            } else {
                (k, v)
            }
        })
        .collect()
}

/// `POST /nodes/{node}/lxc`.
pub(crate) async fn create(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let restore = ctx.flag("restore");
    let force = ctx.flag("force");
    let ostemplate = ctx.required("ostemplate")?.to_owned();
    let storage = ctx.get("storage").unwrap_or("local").to_owned();
    let given = given_config(ctx, &storage);
    let vm_path = format!("/vms/{vmid}");

    let plan = {
        let st = ctx.shared.state.lock();
        // 2. plain create: privileged needs Sys.Modify on /
        if !restore {
            let unpriv = ctx.get("unprivileged").unwrap_or("1");
            if unpriv == "0" && !st.access.has(&ctx.authid, "/", "Sys.Modify") {
                return Err(ApiError::perm("/", "Sys.Modify"));
            }
        }
        // 3. the vmid must be free in the whole cluster (or an overwrite-restore of a stopped,
        // unprotected CT of this node)
        if let Some(peer) = st.peer_holding(vmid) {
            return Err(ApiError::internal(&format!(
                "CT {vmid} already exists on node '{peer}'"
            )));
        }
        let existing = st.guests.get(&vmid);
        let overwrite = match existing {
            Some(guest) if restore && force => {
                if guest.running() {
                    return Err(ApiError::internal("can't overwrite running container"));
                }
                if guest.conf.get("protection").is_some_and(|p| p == "1") {
                    return Err(ApiError::internal(&format!(
                        "unable to restore CT {vmid} - protection mode enabled"
                    )));
                }
                true
            }
            Some(_) => {
                return Err(ApiError::internal(&format!(
                    "CT {vmid} already exists on node '{}'",
                    ctx.node()
                )));
            }
            None => false,
        };
        // 4. allocation rights
        let may_allocate = match ctx.get("pool") {
            Some(pool) => st
                .access
                .has(&ctx.authid, &format!("/pool/{pool}"), "VM.Allocate"),
            None => st.access.has(&ctx.authid, &vm_path, "VM.Allocate"),
        };
        let may_backup = overwrite && st.access.has(&ctx.authid, &vm_path, "VM.Backup");
        if !may_allocate && !may_backup {
            return Err(ApiError::perm(&vm_path, "VM.Allocate"));
        }
        // 5. per-parameter checks on explicit parameters
        let changes: BTreeMap<String, Option<String>> = given
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        let unpriv_sent = ctx.get("unprivileged") == Some("1");
        check_modify_perm(ctx, &st, vmid, &Conf::new(), &changes, unpriv_sent)?;
        if given.keys().any(|k| k.starts_with("mp")) && !given.contains_key("rootfs") {
            return Err(ApiError::internal(
                "mount points configured, but 'rootfs' not set - aborting",
            ));
        }
        // 6. archive access
        if ostemplate.starts_with('/') {
            if !ctx.is_root() {
                return Err(ApiError::internal(
                    "Only root can pass arbitrary filesystem paths.",
                ));
            }
            return Err(ApiError::internal(&format!(
                "unable to read archive '{ostemplate}'"
            )));
        }
        let (backup_sid, _) = ostemplate.split_once(':').ok_or_else(|| {
            ApiError::param(
                "ostemplate",
                &format!("unable to parse volume ID '{ostemplate}'"),
            )
        })?;
        if !st.storages.contains_key(backup_sid) {
            return Err(ApiError::internal(&format!(
                "storage '{backup_sid}' does not exist"
            )));
        }
        crate::storage_config::activate(&st, backup_sid).map_err(|e| ApiError::internal(&e))?;
        let volume = st
            .find_volume(&ostemplate)
            .ok_or_else(|| ApiError::internal(&format!("volume '{ostemplate}' does not exist")))?;
        let wanted = if restore { "backup" } else { "vztmpl" };
        if volume.content != wanted {
            return Err(ApiError::internal(&format!(
                "unable to use volume {ostemplate} - content type needs to be '{wanted}'"
            )));
        }
        let backup_path = format!("/storage/{backup_sid}");
        if !st
            .access
            .has(&ctx.authid, &backup_path, "Datastore.Allocate")
            && volume.vmid != Some(vmid)
        {
            if !st
                .access
                .has(&ctx.authid, &backup_path, "Datastore.AllocateSpace")
            {
                return Err(ApiError::perm(&backup_path, "Datastore.AllocateSpace"));
            }
            if let Some(owner) = volume.vmid
                && !st
                    .access
                    .has(&ctx.authid, &format!("/vms/{owner}"), "VM.Backup")
            {
                return Err(ApiError::perm(&format!("/vms/{owner}"), "VM.Backup"));
            }
        }
        let archive_conf = volume
            .archive
            .as_ref()
            .map(|a| a.conf.clone())
            .unwrap_or_default();
        let archive_files = volume
            .archive
            .as_ref()
            .map(|a| a.files.clone())
            .unwrap_or_default();
        let unreadable = volume.archive.as_ref().is_some_and(|a| a.unreadable);
        let unpacker = Unpacker::for_volume(&st, &ostemplate);
        let wrong_key = match &unpacker {
            Unpacker::Pbs { .. } => crate::unpack::key_mismatch(
                volume.encrypted.as_deref(),
                st.storages
                    .get(backup_sid)
                    .and_then(|s| s.options.get("encryption-key"))
                    .map(String::as_str),
            ),
            Unpacker::Tar { .. } => None,
        };
        // 7. target storage (the explicit rootfs' storage wins)
        let target_storage = given
            .get("rootfs")
            .and_then(|r| volume_of(r))
            .and_then(|v| v.split_once(':').map(|(s, _)| s.to_owned()))
            .unwrap_or(storage);
        let target = st.storages.get(&target_storage).ok_or_else(|| {
            ApiError::internal(&format!("storage '{target_storage}' does not exist"))
        })?;
        if !target.enabled {
            return Err(ApiError::internal(&format!(
                "storage '{target_storage}' is disabled"
            )));
        }
        if !target.content.contains("rootdir") {
            return Err(ApiError::param(
                "storage",
                &format!("storage '{target_storage}' does not support container directories"),
            ));
        }
        let target_path = format!("/storage/{target_storage}");
        if !st
            .access
            .has(&ctx.authid, &target_path, "Datastore.AllocateSpace")
        {
            return Err(ApiError::perm(&target_path, "Datastore.AllocateSpace"));
        }
        Plan {
            vmid,
            restore,
            overwrite,
            ostemplate,
            archive_conf,
            archive_files,
            unpacker,
            unreadable,
            wrong_key,
            given,
            target_storage,
            unique: ctx.flag("unique"),
            start: ctx.flag("start"),
        }
    };

    // 8. the config exists with `lock: create` while the task runs; the task holds the flock.
    let flock = ctx
        .shared
        .flock(vmid, FLOCK_WAIT_CREATE)
        .await
        .map_err(|m| ApiError::internal(&m))?;
    let old_guest = {
        let mut st = ctx.shared.state.lock();
        let mut conf = Conf::new();
        conf.insert("lock".to_owned(), "create".to_owned());
        match st.guests.get_mut(&vmid) {
            Some(g) if plan.overwrite => {
                let old = g.clone();
                g.conf.insert("lock".to_owned(), "create".to_owned());
                Some(old)
            }
            Some(_) => {
                return Err(ApiError::internal(&format!(
                    "CT {vmid} already exists on node '{}'",
                    ctx.node()
                )));
            }
            None => {
                st.guests.insert(vmid, Guest::new(conf));
                None
            }
        }
    };
    let shared = ctx.shared.clone();
    let task_type = if plan.restore {
        "vzrestore"
    } else {
        "vzcreate"
    };
    let failure = plan
        .unpacker
        .failure(vmid, plan.unprivileged(), plan.restore);
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        task_type,
        &vmid.to_string(),
        failure,
        move |t| async move {
            let mut created = Vec::new();
            let result = run(&t, &plan, old_guest.as_ref(), &mut created).await;
            if result.is_err() {
                let mut st = shared.state.lock();
                for vol in &created {
                    let lvm = matches!(
                        st.storage_of(vol).map(|(_, s)| &s.kind),
                        Some(StorageKind::LvmThin { .. })
                    );
                    if st.remove_volume(vol).is_some() && lvm {
                        let name = vol.split_once(':').map_or(vol.as_str(), |(_, n)| n);
                        t.log(format!("  Logical volume \"{name}\" successfully removed."));
                    }
                }
                match old_guest {
                    // Before any volume was created an overwrite leaves the old CT as it was.
                    Some(mut old) if created.is_empty() => {
                        old.conf.remove("lock");
                        st.guests.insert(plan.vmid, old);
                    }
                    // Afterwards the config goes away, even for an overwrite.
                    _ => {
                        st.guests.remove(&plan.vmid);
                    }
                }
            }
            // `start=1` starts the CT once the create lock is gone; a start that fails is a
            // task of its own, as PVE's `vm_start` after the restore.
            drop(flock);
            if result.as_ref().is_ok_and(|start_task| *start_task) {
                crate::lxc::spawn_start(&shared, &t.authid, plan.vmid, false, false);
            }
            result.map(|_| ())
        },
    );
    data(json!(upid))
}

/// Creates or restores the CT; `Ok(true)` when `start=1` needs a start task (the CT's init
/// cannot be exec'd, so the start fails on its own).
async fn run(
    t: &tasks::TaskCtx,
    plan: &Plan,
    old: Option<&Guest>,
    created: &mut Vec<String>,
) -> Result<bool, String> {
    let shared = &t.shared;
    let vmid = plan.vmid;
    let is_root = t.authid == "root@pam";
    let archive = &plan.archive_conf;
    if plan.restore {
        t.log(format!(
            "recovering backed-up configuration from '{}'",
            plan.ostemplate
        ));
        // PBS reads a backup only with the key it was made with.
        if let (Some(line), Some(command)) = (&plan.wrong_key, plan.unpacker.config_command()) {
            t.log(line.clone());
            return Err(format!(
                "unable to restore CT {vmid} - command '{command}' failed: exit code 255"
            ));
        }
    }
    // SDN.Use for every archived netN the caller did not override.
    {
        let st = shared.state.lock();
        for (k, v) in archive.iter().filter(|(k, _)| k.starts_with("net")) {
            if plan.given.contains_key(k) {
                continue;
            }
            if let Some(bridge) = bridge_of(v) {
                let path = format!("/sdn/zones/localnetwork/{bridge}");
                if !st.access.has(&t.authid, &path, "SDN.Use") {
                    return Err(format!("Permission check failed ({path}, SDN.Use)"));
                }
            }
        }
    }
    let unprivileged = plan.unprivileged();
    if !unprivileged && !shared.state.lock().access.has(&t.authid, "/", "Sys.Modify") {
        return Err("Permission check failed (/, Sys.Modify)".to_owned());
    }
    let storage_only = !plan.given.contains_key("rootfs");
    if plan.restore && storage_only && !is_root {
        for (k, v) in archive.iter().filter(|(k, _)| k.starts_with("mp")) {
            if volume_of(v).is_some_and(|vol| vol.starts_with('/')) {
                return Err(format!(
                    "restoring '{k}' to bind mount is only possible for root"
                ));
            }
        }
    }
    // Volume sizes: explicit rootfs, else what the backup recorded.
    let rootfs_size = match plan.given.get("rootfs") {
        Some(r) => {
            let parts = parse_prop_string(&ROOTFS, r).map_err(|e| e.clone())?;
            let vol = parts.get("volume").cloned().unwrap_or_default();
            vol.split_once(':')
                .and_then(|(_, n)| n.parse::<u64>().ok())
                .map(|gib| gib << 30)
                .or_else(|| parts.get("size").and_then(|s| parse_size(s)))
        }
        None if plan.restore => archive
            .get("rootfs")
            .and_then(|r| parse_prop_string(&ROOTFS, r).ok())
            .and_then(|p| p.get("size").and_then(|s| parse_size(s))),
        None => Some(4 << 30),
    }
    .ok_or_else(|| "unable to detect disk size - please specify rootfs (size)".to_owned())?;
    let volid = {
        let mut st = shared.state.lock();
        allocate_volume(&mut st, vmid, &plan.target_storage, rootfs_size)?
    };
    created.push(volid.clone());
    let lvm = matches!(
        shared
            .state
            .lock()
            .storages
            .get(&plan.target_storage)
            .map(|s| &s.kind),
        Some(StorageKind::LvmThin { .. })
    );
    let short = volid.split_once(':').map_or(volid.as_str(), |(_, n)| n);
    if lvm {
        t.log(format!("  Logical volume \"{short}\" created."));
    }
    let blocks = rootfs_size / 4096;
    t.log(format!(
        "Creating filesystem with {blocks} 4k blocks and {} inodes",
        blocks / 4
    ));
    // The old volumes are destroyed right after the new ones exist.
    if let Some(old) = old {
        let mut st = shared.state.lock();
        for vol in old.volumes() {
            st.remove_volume(&vol);
        }
    }
    if plan.restore {
        t.log(format!("restoring '{}' now..", plan.ostemplate));
    }
    // File-based archives are unpacked with tar (PBS archives with the PBS client).
    if let Some(line) = plan.unpacker.announcement() {
        t.log(line);
    }
    t.work(shared.config.durations.for_type(if plan.restore {
        "vzrestore"
    } else {
        "vzcreate"
    }))
    .await?;
    if plan.unreadable {
        for line in plan.unpacker.unreadable_output() {
            t.log(line);
        }
        return Err(plan.unpacker.failure(vmid, unprivileged, plan.restore));
    }
    t.checkpoint()?;
    t.log(format!(
        "Total bytes read: {} ({}MiB, 96MiB/s)",
        rootfs_size / 5,
        rootfs_size / 5 / (1 << 20)
    ));

    // Merge the archive's config with the given one.
    let mut conf = Conf::new();
    if plan.restore {
        t.log("merging backed-up and given configuration..");
        let archived_unpriv = archive.get("unprivileged").is_some_and(|v| v == "1");
        let raw: Vec<(&String, &String)> = archive
            .iter()
            .filter(|(k, _)| k.starts_with("lxc."))
            .collect();
        if !raw.is_empty() && !is_root {
            t.warn("skipping custom lxc options, restore manually as root:");
            t.log("--------------------------------");
            for (k, v) in &raw {
                t.log(format!("{k}: {v}"));
            }
            t.log("--------------------------------");
        }
        for (k, v) in archive {
            if plan.given.contains_key(k) || is_volume_key(k) {
                continue;
            }
            if matches!(
                k.as_str(),
                "lock" | "parent" | "snaptime" | "digest" | "template"
            ) {
                continue;
            }
            if k.starts_with("lxc.") && !is_root {
                continue;
            }
            if k == "features" && archived_unpriv && !unprivileged {
                t.log("changing from unprivileged to privileged, skipping features");
                continue;
            }
            conf.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in &plan.given {
        if k != "rootfs" && !k.starts_with("mp") {
            conf.insert(k.clone(), v.clone());
        }
    }
    if plan.unique {
        let keys: Vec<String> = conf
            .keys()
            .filter(|k| k.starts_with("net"))
            .cloned()
            .collect();
        for k in keys {
            if let Some(v) = conf.get(&k) {
                let mac = shared.random_mac();
                let rebuilt: Vec<String> = v
                    .split(',')
                    .map(|p| {
                        if p.starts_with("hwaddr=") {
                            format!("hwaddr={mac}")
                        } else {
                            p.to_owned()
                        }
                    })
                    .collect();
                conf.insert(k, rebuilt.join(","));
            }
        }
    }
    // Explicit new mount points (`STORAGE:N`) are allocated; archived ones are only restored
    // in storage-only mode.
    for (k, v) in plan.given.iter().filter(|(k, _)| k.starts_with("mp")) {
        let parts = parse_prop_string(&MP, v)?;
        let vol = parts.get("volume").cloned().unwrap_or_default();
        let rendered = match vol
            .split_once(':')
            .and_then(|(s, n)| Some((s, n.parse::<u64>().ok()?)))
        {
            Some((sid, gib)) => {
                let mut st = shared.state.lock();
                let new = allocate_volume(&mut st, vmid, sid, gib << 30)?;
                created.push(new.clone());
                let mut s = new;
                for (pk, pv) in parts.iter().filter(|(k, _)| *k != "volume" && *k != "size") {
                    s.push_str(&format!(",{pk}={pv}"));
                }
                format!("{s},size={}", format_size(gib << 30))
            }
            None => v.clone(),
        };
        conf.insert(k.clone(), rendered);
    }
    let mut rootfs = format!("{volid},size={}", format_size(rootfs_size));
    if let Some(r) = plan.given.get("rootfs")
        && let Ok(parts) = parse_prop_string(&ROOTFS, r)
    {
        for (k, v) in parts.iter().filter(|(k, _)| *k != "volume" && *k != "size") {
            rootfs.push_str(&format!(",{k}={v}"));
        }
    }
    conf.insert("rootfs".to_owned(), rootfs);
    conf.entry("hostname".to_owned())
        .or_insert_with(|| format!("CT{vmid}"));
    conf.entry("memory".to_owned())
        .or_insert_with(|| "512".to_owned());
    conf.entry("swap".to_owned())
        .or_insert_with(|| "512".to_owned());
    conf.entry("arch".to_owned())
        .or_insert_with(|| "amd64".to_owned());
    if !plan.restore {
        conf.entry("unprivileged".to_owned())
            .or_insert_with(|| "1".to_owned());
    }
    t.log(format!(
        "Detected container architecture: {}",
        conf.get("arch").map_or("amd64", String::as_str)
    ));
    // The unpacked root filesystem; a new CT from a template gets its own SSH host keys.
    let mut files = plan.archive_files.clone();
    if !plan.restore {
        let mut lines = Vec::new();
        crate::guest_exec::generate_host_keys(&mut files, Some(&mut lines));
        for line in lines {
            t.log(line);
        }
    }

    let mut st = shared.state.lock();
    let stale = st
        .faults
        .stale_locks
        .iter()
        .find(|s| s.vmid == vmid)
        .map(|s| s.lock.clone());
    let guest = st
        .guests
        .get_mut(&vmid)
        .ok_or_else(|| format!("CT {vmid} vanished during restore"))?;
    *guest = Guest::new(conf);
    guest.files = files;
    if let Some(lock) = stale {
        guest.conf.insert("lock".to_owned(), lock);
    }
    let boots = guest.files.executable(INIT);
    if plan.start && boots {
        guest.running_since = Some(Instant::now());
    }
    Ok(plan.start && !boots)
}
