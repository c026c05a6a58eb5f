//! Snapshots and vzdump.

use crate::common;

use std::time::Duration;

use bosun_pvesim::{SimConfig, TaskDurations};
use common::{Sim, start, start_with};

fn slow_backup() -> SimConfig {
    SimConfig {
        time_scale: 0.01,
        auth_failure_delay: Duration::ZERO,
        durations: TaskDurations {
            vzdump: Duration::from_secs(40),
            vzrestore: Duration::ZERO,
            vzstart: Duration::ZERO,
            ..TaskDurations::default()
        },
        ..SimConfig::default()
    }
}

async fn vzdump(sim: &Sim, params: &[(&str, &str)]) -> (String, String, Vec<String>) {
    let r = sim.call("POST", "/nodes/pve/vzdump", params).await;
    let upid = r.upid();
    let exit = sim.wait(&upid).await;
    let log = sim.handle.task_log(&upid).expect("log");
    (upid, exit, log)
}

#[tokio::test]
async fn snapshot_tree_with_current_entry_delete_and_rollback() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc/101/snapshot",
            &[("snapname", "before"), ("description", "first")],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc/101/snapshot",
            &[("snapname", "second")],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    let list = sim.call("GET", "/nodes/pve/lxc/101/snapshot", &[]).await;
    let items = list.data().as_array().expect("array").clone();
    let current = items
        .iter()
        .find(|i| i["name"] == "current")
        .expect("current entry");
    assert_eq!(current["description"], "You are here!");
    assert_eq!(current["parent"], "second");
    assert_eq!(current["running"], 0);
    let second = items
        .iter()
        .find(|i| i["name"] == "second")
        .expect("second");
    assert_eq!(second["parent"], "before");
    assert_eq!(second["description"], "");
    // duplicate name fails inside the task
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc/101/snapshot",
            &[("snapname", "second")],
        )
        .await;
    assert_eq!(
        sim.wait(&r.upid()).await,
        "snapshot name 'second' already used"
    );
    // reserved name is a sync 500
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc/101/snapshot",
            &[("snapname", "current")],
        )
        .await;
    assert_eq!(
        r.message(),
        "unable to use snapshot name 'current' (reserved name)\n"
    );
    // rollback a running CT: it is stopped; parent becomes the snapshot
    sim.start_ct(101).await;
    sim.call("PUT", "/nodes/pve/lxc/101/config", &[("cores", "6")])
        .await;
    let r = sim
        .call("POST", "/nodes/pve/lxc/101/snapshot/before/rollback", &[])
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    assert_eq!(sim.handle.guest_running(101), Some(false));
    let conf = sim.handle.guest_config(101).expect("ct");
    assert_eq!(conf.get("parent").map(String::as_str), Some("before"));
    assert_eq!(conf.get("cores").map(String::as_str), Some("2"));
    // delete re-parents
    let r = sim
        .call("DELETE", "/nodes/pve/lxc/101/snapshot/before", &[])
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    assert_eq!(sim.handle.snapshot_names(101), vec!["second".to_owned()]);
    assert!(
        !sim.handle
            .guest_config(101)
            .expect("ct")
            .contains_key("parent")
    );
    let r = sim
        .call("DELETE", "/nodes/pve/lxc/101/snapshot/nope", &[])
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "snapshot 'nope' does not exist");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn snapshot_on_dir_storage_is_not_available() {
    let sim = start().await;
    let r = sim
        .call_as(
            &sim.root(),
            "POST",
            "/storage",
            &[
                ("storage", "ctdir"),
                ("type", "dir"),
                ("path", "/srv/ct"),
                ("content", "rootdir,backup"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let golden = sim.handle.endpoint().golden_volid.clone();
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc",
            &[
                ("vmid", "150"),
                ("ostemplate", &golden),
                ("restore", "1"),
                ("storage", "ctdir"),
            ],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    assert!(
        sim.handle.guest_config(150).expect("ct")["rootfs"]
            .starts_with("ctdir:150/vm-150-disk-0.raw")
    );
    let r = sim
        .call("POST", "/nodes/pve/lxc/150/snapshot", &[("snapname", "s1")])
        .await;
    assert_eq!(
        sim.wait(&r.upid()).await,
        "snapshot feature is not available"
    );
    // vzdump in snapshot mode falls back to suspend
    sim.start_ct(150).await;
    let (_, exit, log) = vzdump(
        &sim,
        &[
            ("vmid", "150"),
            ("mode", "snapshot"),
            ("storage", "ctdir"),
            ("compress", "zstd"),
        ],
    )
    .await;
    assert_eq!(exit, "OK", "{log:#?}");
    assert!(log.contains(&"INFO: mode failure - some volumes do not support snapshots".to_owned()));
    assert!(log.contains(&"INFO: trying 'suspend' mode instead".to_owned()));
    assert!(log.contains(&"INFO: backup mode: suspend".to_owned()));
    assert!(!log.iter().any(|l| l.contains("create storage snapshot")));
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn vzdump_snapshot_mode_sets_lock_shows_vzdump_snapshot_and_names_the_archive() {
    let sim = start_with(slow_backup()).await;
    sim.restore_golden(101).await;
    sim.start_ct(101).await;
    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[
                ("vmid", "101"),
                ("mode", "snapshot"),
                ("storage", "local"),
                ("compress", "zstd"),
                ("notes-template", "{{guestname}} ({{vmid}})"),
            ],
        )
        .await;
    let upid = r.upid();
    assert!(upid.contains(":vzdump:101:bosun@pve!agent:"));
    // while it runs: lock backup and the temporary snapshot
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        sim.handle
            .guest_config(101)
            .expect("ct")
            .get("lock")
            .map(String::as_str),
        Some("backup")
    );
    assert_eq!(sim.handle.snapshot_names(101), vec!["vzdump".to_owned()]);
    assert_eq!(sim.wait(&upid).await, "OK");
    assert!(
        !sim.handle
            .guest_config(101)
            .expect("ct")
            .contains_key("lock")
    );
    assert!(sim.handle.snapshot_names(101).is_empty());
    let log = sim.handle.task_log(&upid).expect("log");
    for line in [
        "INFO: Starting Backup of VM 101 (lxc)",
        "INFO: status = running",
        "INFO: CT Name: golden",
        "INFO: including mount point rootfs ('/') in backup",
        "INFO: backup mode: snapshot",
        "INFO: create storage snapshot 'vzdump'",
        "INFO: cleanup temporary 'vzdump' snapshot",
        "INFO: Backup job finished successfully",
        "TASK OK",
    ] {
        assert!(
            log.iter().any(|l| l == line),
            "missing {line:?} in {log:#?}"
        );
    }
    let archive = log
        .iter()
        .find_map(|l| l.strip_prefix("INFO: creating vzdump archive '/var/lib/vz/dump/"))
        .expect("archive line")
        .trim_end_matches('\'')
        .to_owned();
    let re = regex::Regex::new(r"^vzdump-lxc-101-\d{4}_\d{2}_\d{2}-\d{2}_\d{2}_\d{2}\.tar\.zst$")
        .expect("regex");
    assert!(re.is_match(&archive), "{archive}");
    let listing = sim
        .call(
            "GET",
            "/nodes/pve/storage/local/content",
            &[("content", "backup"), ("vmid", "101")],
        )
        .await;
    let items = listing.data().as_array().expect("array").clone();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["volid"], format!("local:backup/{archive}"));
    assert_eq!(items[0]["format"], "tar.zst");
    assert_eq!(items[0]["subtype"], "lxc");
    assert_eq!(items[0]["notes"], "golden (101)");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn one_vzdump_job_per_node_second_waits_for_the_global_lock() {
    let sim = start_with(slow_backup()).await;
    sim.restore_golden(101).await;
    sim.restore_golden(102).await;
    let a = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", "101"), ("storage", "local")],
        )
        .await
        .upid();
    let b = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", "102"), ("storage", "local")],
        )
        .await
        .upid();
    assert_eq!(sim.wait(&a).await, "OK");
    assert_eq!(sim.wait(&b).await, "OK");
    let log_b = sim.handle.task_log(&b).expect("log");
    assert!(
        log_b.contains(&"INFO: trying to get global lock - waiting...".to_owned()),
        "{log_b:#?}"
    );
    assert!(log_b.contains(&"INFO: got global lock".to_owned()));
    // stopped CTs are backed up in stop mode
    assert!(log_b.contains(&"INFO: backup mode: stop".to_owned()));
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn vzdump_errors_locked_guest_unknown_guest_and_missing_backup_privilege() {
    let sim = start().await;
    sim.restore_golden(101).await;
    sim.handle.set_guest_lock(101, Some("snapshot"));
    let (_, exit, log) = vzdump(&sim, &[("vmid", "101,777"), ("storage", "local")]).await;
    assert_eq!(exit, "job errors");
    assert!(
        log.contains(&"ERROR: Backup of VM 101 failed - CT is locked (snapshot)".to_owned()),
        "{log:#?}"
    );
    assert!(log.contains(&"ERROR: Backup of VM 777 failed - unable to find VM '777'".to_owned()));
    assert!(log.contains(&"INFO: Backup job finished with errors".to_owned()));
    assert!(
        !log.iter()
            .any(|l| l == "INFO: Starting Backup of VM 777 (lxc)")
    );
    assert_eq!(
        log.last().map(String::as_str),
        Some("TASK ERROR: job errors")
    );
    // the lock a crashed job would leave stays
    assert_eq!(
        sim.handle.guest_config(101).expect("ct")["lock"],
        "snapshot"
    );
    sim.handle.set_guest_lock(101, None);
    let t = sim.narrow_token(
        "SpaceOnly",
        &["Datastore.AllocateSpace", "Datastore.Audit"],
        "nobackup",
    );
    let r = sim
        .call_as(
            &t,
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", "101"), ("storage", "local")],
        )
        .await;
    assert_eq!(
        sim.wait(&r.upid()).await,
        "Permission check failed (/vms/101, VM.Backup)"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn vzdump_parameter_rules() {
    let sim = start().await;
    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", "101"), ("notes-template", "x")],
        )
        .await;
    assert_eq!(
        r.error("storage"),
        "missing property required by 'notes-template'\n"
    );
    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", "101"), ("dumpdir", "/tmp")],
        )
        .await;
    assert_eq!(r.error("dumpdir"), "Only root may set this option.\n");
    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", "101"), ("all", "1")],
        )
        .await;
    assert_eq!(r.error("all"), "option conflicts with option 'vmid'\n");
    let r = sim
        .call("POST", "/nodes/pve/vzdump", &[("storage", "local")])
        .await;
    assert_eq!(r.error("vmid"), "property is missing\n");
    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", "101"), ("stdout", "1")],
        )
        .await;
    assert_eq!(
        r.error("stdout"),
        "option is only allowed on the command line interface.\n"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn pbs_archives_use_utc_iso_names_and_prune_keeps_last() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let r = sim
        .call(
            "POST",
            "/storage",
            &[
                ("storage", "pbs1"),
                ("type", "pbs"),
                ("server", "10.0.0.5"),
                ("datastore", "store1"),
                ("username", "bosun@pbs"),
                ("password", "hunter2"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        sim.handle
            .requests()
            .iter()
            .all(|l| l.params.iter().all(|(_, v)| v != "hunter2")),
        "secrets are not logged"
    );
    let (_, exit, log) = vzdump(&sim, &[("vmid", "101"), ("storage", "pbs1")]).await;
    assert_eq!(exit, "OK");
    assert!(
        log.iter()
            .any(|l| l.starts_with("INFO: creating Proxmox Backup Server archive 'ct/101/"))
    );
    let vols = sim.handle.storage_volumes("pbs1");
    let re = regex::Regex::new(r"^pbs1:backup/ct/101/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
        .expect("regex");
    assert!(re.is_match(&vols[0]), "{vols:?}");
    let mut last_log = Vec::new();
    for _ in 0..2 {
        let (_, exit, log) = vzdump(
            &sim,
            &[
                ("vmid", "101"),
                ("storage", "local"),
                ("prune-backups", "keep-last=1"),
            ],
        )
        .await;
        assert_eq!(exit, "OK");
        last_log = log;
    }
    assert!(
        last_log.contains(&"INFO: prune older backups with retention: keep-last=1".to_owned()),
        "{last_log:#?}"
    );
    assert!(
        last_log
            .contains(&"INFO: pruned 1 backup(s) not covered by keep-retention policy".to_owned())
    );
    let local: Vec<String> = sim
        .handle
        .storage_volumes("local")
        .into_iter()
        .filter(|v| v.contains("-101-"))
        .collect();
    assert_eq!(local.len(), 1, "{local:?}");
    sim.handle.shutdown().await;
}
