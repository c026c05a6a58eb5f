//! `POST /nodes/{node}/qemu` with `archive=`: restoring a vzdump-qemu archive into a new VM
//! (task `qmrestore`), with qemu-server's checks in its order, and the VM golden archive a
//! test seeds (`SimHandle::add_vm_golden`).

use std::collections::BTreeMap;

use serde_json::json;

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::files::{FileTree, debian_template, elf};
use crate::qemu::{CREATE_WAIT, Vm, check_config_keys, config_values, is_disk_key};
use crate::state::{Archive, Conf, Volume};
use crate::tasks;

/// The route's own parameters; everything else is a config key.
const OWN: &[&str] = &[
    "node", "vmid", "archive", "storage", "force", "unique", "pool", "start",
];

/// Whether a backup volume is a QEMU backup (`vzdump-qemu-…` on a file storage, `vm/…` on PBS).
fn is_qemu_backup(volume: &Volume) -> bool {
    volume.format.starts_with("vma") || volume.format == "pbs-vm"
}

fn plain_perm_failure() -> ApiError {
    ApiError {
        status: 403,
        message: "Permission check failed\n".to_owned(),
        errors: BTreeMap::new(),
    }
}

/// `POST /nodes/{node}/qemu`: only a restore (`archive`) is modelled.
pub(crate) async fn create(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let Some(archive) = ctx.get("archive").map(str::to_owned) else {
        return Err(ApiError::not_implemented(
            "the simulator creates VMs only by restoring an archive (archive=…)".to_owned(),
        ));
    };
    let pool = ctx.get("pool").map(str::to_owned);
    let storage = ctx.get("storage").unwrap_or("local").to_owned();
    let values = config_values(ctx, OWN);
    // `force=1` restores over the stopped VM at `vmid` (qemu-server's `restore_vma_archive`
    // destroys its disks and keeps an empty config, its pool membership kept).
    let force = ctx.flag("force");
    let exists = ctx.shared.state.lock().vms.contains_key(&vmid);
    let (archive_conf, archive_files, unreadable) = {
        let st = ctx.shared.state.lock();
        if let Some(p) = &pool
            && !st.access.pool_exists(p)
        {
            return Err(ApiError::perm_text(&format!("pool '{p}' does not exist")));
        }
        drop(st);
        ctx.require(&format!("/storage/{storage}"), "Datastore.AllocateSpace")?;
        let on_vm = ctx.has(&format!("/vms/{vmid}"), "VM.Allocate");
        let on_pool = pool
            .as_deref()
            .is_some_and(|p| ctx.has(&format!("/pool/{p}"), "VM.Allocate"));
        // qemu-server: "OK: user has VM.Backup permissions, and want to restore an existing VM".
        let may_backup = force && exists && ctx.has(&format!("/vms/{vmid}"), "VM.Backup");
        if !on_vm && !on_pool && !may_backup {
            return Err(plain_perm_failure());
        }
        for key in values.keys() {
            if is_disk_key(key) {
                return Err(ApiError::param(
                    key,
                    "option conflicts with option 'archive'",
                ));
            }
        }
        let st = ctx.shared.state.lock();
        let (backup_sid, _) = archive.split_once(':').ok_or_else(|| {
            ApiError::param("archive", &format!("unable to parse volume ID '{archive}'"))
        })?;
        if !st.storages.contains_key(backup_sid) {
            return Err(ApiError::internal(&format!(
                "storage '{backup_sid}' does not exist"
            )));
        }
        let volume = st
            .find_volume(&archive)
            .ok_or_else(|| ApiError::internal(&format!("volume '{archive}' does not exist")))?;
        let backup_path = format!("/storage/{backup_sid}");
        if !st
            .access
            .has(&ctx.authid, &backup_path, "Datastore.Allocate")
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
        if volume.content != "backup" || !is_qemu_backup(&volume) {
            return Err(ApiError::internal(&format!(
                "unable to restore VM {vmid} - '{archive}' is not a QEMU backup"
            )));
        }
        let target = st
            .storages
            .get(&storage)
            .ok_or_else(|| ApiError::internal(&format!("storage '{storage}' does not exist")))?;
        if !target.content.contains("images") {
            return Err(ApiError::internal(&format!(
                "storage '{storage}' does not support vm images"
            )));
        }
        drop(st);
        check_config_keys(ctx, vmid, pool.as_deref(), &values)?;
        let archive = volume.archive.clone();
        (
            archive.as_ref().map(|a| a.conf.clone()).unwrap_or_default(),
            archive
                .as_ref()
                .map(|a| a.files.clone())
                .unwrap_or_default(),
            archive.is_some_and(|a| a.unreadable),
        )
    };

    let flock = ctx
        .shared
        .flock_qemu(vmid, CREATE_WAIT)
        .await
        .map_err(|m| ApiError::internal(&format!("unable to restore VM {vmid} - {m}")))?;
    let overwritten = {
        let mut st = ctx.shared.state.lock();
        if force && let Some(vm) = st.vms.get_mut(&vmid) {
            let refused = |why: &str| {
                Err(ApiError::internal(&format!(
                    "unable to restore VM {vmid} - {why}"
                )))
            };
            if vm.running() {
                return refused(&format!("VM {vmid} is running"));
            }
            if vm.conf.get("template").is_some_and(|t| t == "1") {
                return refused(&format!("VM {vmid} is a template"));
            }
            if vm.conf.get("protection").is_some_and(|p| p == "1") {
                return refused("protection mode enabled");
            }
            if let Err(m) = vm.check_lock() {
                return refused(&m);
            }
            let old = vm.volumes();
            vm.conf = Conf::new();
            vm.conf.insert("lock".into(), "restore".into());
            vm.snapshots.clear();
            old
        } else if st.vmid_taken(vmid) {
            let kind = if st.guests.contains_key(&vmid) {
                "CT"
            } else {
                "VM"
            };
            return Err(ApiError::internal(&format!(
                "unable to restore VM {vmid} - {kind} {vmid} already exists on node '{}'",
                ctx.node()
            )));
        } else {
            let mut conf = Conf::new();
            conf.insert("lock".into(), "create".into());
            st.vms.insert(vmid, Vm::new(conf));
            Vec::new()
        }
    };
    let shared = ctx.shared.clone();
    let unique = ctx.flag("unique");
    let start = ctx.flag("start");
    let upid = tasks::spawn(
        &ctx.shared,
        &ctx.authid,
        "qmrestore",
        &vmid.to_string(),
        "command 'vma extract' failed: exit code 133".to_owned(),
        move |t| async move {
            let _flock = flock;
            if !overwritten.is_empty() {
                let mut st = shared.state.lock();
                for volid in &overwritten {
                    st.remove_volume(volid);
                    t.log(format!(
                        "  Logical volume \"{volid}\" successfully removed."
                    ));
                }
            }
            t.log(format!(
                "restore vma archive: zstd -q -d -c {archive} | vma extract -v -r /var/tmp/vzdumptmp{vmid}.fifo - /var/tmp/vzdumptmp{vmid}"
            ));
            t.log("CFG: size: 611 name: qemu-server.conf");
            let outcome = async {
                t.work(shared.config.durations.vzrestore).await?;
                t.checkpoint()?;
                if unreadable {
                    return Err("command 'vma extract' failed: exit code 133".to_owned());
                }
                Ok(())
            }
            .await;
            let mut st = shared.state.lock();
            if let Err(e) = outcome {
                // qemu-server leaves the (empty) config: "VM state is NOT cleaned up".
                if let Some(vm) = st.vms.get_mut(&vmid) {
                    vm.conf.remove("lock");
                }
                t.warn(&format!(
                    "error before or during data restore, some or all disks were not completely restored. VM {vmid} state is NOT cleaned up."
                ));
                return Err(e);
            }
            let mut conf = Conf::new();
            let mut disk_index = 0;
            let mut new_volumes = Vec::new();
            for (key, value) in &archive_conf {
                if is_disk_key(key) && value.contains("cloudinit") {
                    conf.insert(
                        key.clone(),
                        format!("{storage}:vm-{vmid}-cloudinit,media=cdrom"),
                    );
                    new_volumes.push((format!("{storage}:vm-{vmid}-cloudinit"), 4 << 20));
                } else if is_disk_key(key) && crate::qemu_disks::excluded_from_backup(value) {
                    // qemu-server's `restore_update_config_line`: a drive the backup left out
                    // (`backup=0`) holds no data in the archive; its line is written back
                    // commented out, which the config reads as part of the description.
                    let line = format!("{key}: {value}\n");
                    conf.entry("description".to_owned())
                        .and_modify(|d| d.push_str(&line))
                        .or_insert(line);
                } else if is_disk_key(key) && !value.contains("media=cdrom") {
                    let size_part = value
                        .split(',')
                        .find(|p| p.starts_with("size="))
                        .unwrap_or("size=8G");
                    let volid = format!("{storage}:vm-{vmid}-disk-{disk_index}");
                    disk_index += 1;
                    t.log(format!("new volume ID is '{volid}'"));
                    let size = size_part
                        .strip_prefix("size=")
                        .and_then(crate::schema::parse_size)
                        .unwrap_or(8 << 30);
                    // The drive's other options (`backup`, `serial`, …) are kept; only its
                    // volume is the new one.
                    let mut drive = vec![volid.clone()];
                    drive.extend(
                        value
                            .split(',')
                            .skip(1)
                            .filter(|p| !p.starts_with("size="))
                            .map(str::to_owned),
                    );
                    drive.push(size_part.to_owned());
                    conf.insert(key.clone(), drive.join(","));
                    new_volumes.push((volid, size));
                } else if key.starts_with("net") && unique {
                    let rest = value.split_once(',').map_or("", |(_, r)| r);
                    let model = value
                        .split(',')
                        .next()
                        .and_then(|m| m.split('=').next())
                        .unwrap_or("virtio");
                    let mac = shared.random_mac();
                    let v = if rest.is_empty() {
                        format!("{model}={mac}")
                    } else {
                        format!("{model}={mac},{rest}")
                    };
                    conf.insert(key.clone(), v);
                } else if key == "smbios1" && unique {
                    // qemu-server's `restore_update_config_line`: a unique restore gets a
                    // fresh SMBIOS uuid.
                    let rest: Vec<&str> = value
                        .split(',')
                        .filter(|p| !p.starts_with("uuid="))
                        .collect();
                    let mut v = format!("uuid={}", uuid::Uuid::new_v4());
                    for p in rest {
                        v.push(',');
                        v.push_str(p);
                    }
                    conf.insert(key.clone(), v);
                } else if key != "lock" {
                    conf.insert(key.clone(), value.clone());
                }
            }
            if unique {
                conf.insert("vmgenid".into(), uuid::Uuid::new_v4().to_string());
            }
            t.log("rescan volumes...");
            for (key, value) in &values {
                conf.insert(key.clone(), value.clone());
            }
            for (volid, size) in new_volumes {
                st.push_volume(Volume {
                    volid,
                    content: "images".to_owned(),
                    format: "raw".to_owned(),
                    size,
                    ctime: shared.clock.epoch(),
                    vmid: Some(vmid),
                    notes: None,
                    protected: false,
                    encrypted: None,
                    archive: None,
                });
            }
            let vm = st
                .vms
                .get_mut(&vmid)
                .ok_or_else(|| crate::qemu::missing_config(shared.node(), vmid))?;
            vm.conf = conf;
            vm.files = archive_files;
            if let Some(p) = &pool {
                st.access.add_vm_to_pool(vmid, p);
            }
            drop(st);
            if start {
                t.log("Execute autostart");
                let mut st = shared.state.lock();
                if let Some(vm) = st.vms.get_mut(&vmid) {
                    vm.cloudinit_drive = vm.cloudinit_values();
                    vm.running_since = Some(std::time::Instant::now());
                }
            }
            Ok(())
        },
    );
    data(json!(upid))
}

/// The config inside the VM golden archive (`qemu-server.conf` in the vma).
pub(crate) fn golden_vm_conf() -> Conf {
    [
        ("agent", "1"),
        ("boot", "order=scsi0"),
        ("cores", "2"),
        ("ide2", "local-lvm:vm-9001-cloudinit,media=cdrom"),
        ("memory", "2048"),
        ("name", "golden-vm"),
        ("net0", "virtio=BC:24:11:5E:A1:08,bridge=vmbr0,firewall=1"),
        ("ostype", "l26"),
        ("scsi0", "local-lvm:vm-9001-disk-0,size=10G"),
        ("scsihw", "virtio-scsi-single"),
        ("serial0", "socket"),
        ("smbios1", "uuid=5d0c7c6e-2b1f-4f0e-8a51-90a1c3e2b9d4"),
        ("vga", "serial0"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect()
}

/// The VM golden image's filesystem: a Debian cloud image with cloud-init and the QEMU guest
/// agent (enabled), machine-id emptied for first boot.
pub(crate) fn golden_vm_files() -> FileTree {
    let mut tree = debian_template();
    for (path, program) in [
        (crate::qemu::QGA_BIN, "qemu-ga"),
        ("/usr/bin/cloud-init", "cloud-init"),
        ("/usr/bin/sleep", "sleep"),
    ] {
        let _ = tree.write(path, elf(program), 0o755);
    }
    let _ = tree.mkdir_all("/etc/systemd/system/multi-user.target.wants", 0o755);
    let _ = tree.write(
        "/etc/systemd/system/multi-user.target.wants/qemu-guest-agent.service",
        b"[Service]\nExecStart=/usr/sbin/qemu-ga\n".to_vec(),
        0o644,
    );
    let _ = tree.write("/etc/machine-id", Vec::new(), 0o444);
    // Where the image's controller unit reads its bootstrap (written through the guest
    // agent's file-write at provisioning).
    let _ = tree.mkdir_all("/etc/bosun-bootstrap", 0o700);
    tree
}

/// A vzdump-qemu archive of `conf` and `files` on `local`, as a test seeds it.
pub(crate) fn golden_vm_volume(now: &jiff::Zoned, conf: Conf, files: FileTree) -> Volume {
    let name = format!(
        "vzdump-qemu-9001-{}.vma.zst",
        now.strftime("%Y_%m_%d-%H_%M_%S")
    );
    Volume {
        volid: format!("local:backup/{name}"),
        content: "backup".to_owned(),
        format: "vma.zst".to_owned(),
        size: 612_345_678,
        ctime: now.timestamp().as_second(),
        vmid: Some(9001),
        notes: Some("bosun golden VM image".to_owned()),
        protected: false,
        encrypted: None,
        archive: Some(Archive::new(conf, files)),
    }
}
