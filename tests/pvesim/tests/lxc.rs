//! Create/restore, config, power and destroy behaviour.

mod common;

use std::time::Duration;

use bosun_pvesim::{SimConfig, TaskDurations};
use common::start;

#[tokio::test]
async fn restore_by_token_keeps_keyctl_from_the_archive_and_sets_defaults() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let conf = sim.handle.guest_config(101).expect("ct exists");
    assert_eq!(
        conf.get("features").map(String::as_str),
        Some("keyctl=1,nesting=1")
    );
    assert_eq!(conf.get("unprivileged").map(String::as_str), Some("1"));
    assert!(
        conf.get("rootfs")
            .is_some_and(|r| r.starts_with("local-lvm:vm-101-disk-0") && r.contains("size=8G"))
    );
    assert!(!conf.contains_key("lock"));
    // unique=1 gave a new MAC
    assert!(
        !conf
            .get("net0")
            .is_some_and(|n| n.contains("BC:24:11:5E:A1:07"))
    );
    assert!(
        sim.handle
            .storage_volumes("local-lvm")
            .contains(&"local-lvm:vm-101-disk-0".to_owned())
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn restore_log_has_the_real_lines() {
    let sim = start().await;
    let golden = sim.handle.endpoint().golden_volid.clone();
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc",
            &[
                ("vmid", "120"),
                ("ostemplate", &golden),
                ("restore", "1"),
                ("storage", "local-lvm"),
            ],
        )
        .await;
    let upid = r.upid();
    assert!(upid.starts_with("UPID:pve:"));
    assert!(upid.contains(":vzrestore:120:bosun@pve!agent:"));
    assert_eq!(sim.wait(&upid).await, "OK");
    let log = sim.handle.task_log(&upid).expect("log");
    assert_eq!(
        log[0],
        format!("recovering backed-up configuration from '{golden}'")
    );
    assert!(
        log.iter()
            .any(|l| l == &format!("restoring '{golden}' now.."))
    );
    assert!(
        log.iter()
            .any(|l| l == "merging backed-up and given configuration..")
    );
    assert_eq!(log.last().map(String::as_str), Some("TASK OK"));
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn restore_to_dir_storage_local_is_refused() {
    let sim = start().await;
    let golden = sim.handle.endpoint().golden_volid.clone();
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc",
            &[("vmid", "102"), ("ostemplate", &golden), ("restore", "1")],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.error("storage"),
        "storage 'local' does not support container directories\n"
    );
    assert!(sim.handle.guest_config(102).is_none());
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn existing_vmid_is_500_and_force_overwrites_a_stopped_ct() {
    let sim = start().await;
    sim.restore_golden(103).await;
    let golden = sim.handle.endpoint().golden_volid.clone();
    let params = [
        ("vmid", "103"),
        ("ostemplate", golden.as_str()),
        ("restore", "1"),
        ("storage", "local-lvm"),
    ];
    let r = sim.call("POST", "/nodes/pve/lxc", &params).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "CT 103 already exists on node 'pve'\n");
    let mut forced = params.to_vec();
    forced.push(("force", "1"));
    let r = sim.call("POST", "/nodes/pve/lxc", &forced).await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    sim.start_ct(103).await;
    let r = sim.call("POST", "/nodes/pve/lxc", &forced).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "can't overwrite running container\n");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn root_only_rules_on_restore_parameters() {
    let sim = start().await;
    let golden = sim.handle.endpoint().golden_volid.clone();
    let base = vec![
        ("vmid", "104"),
        ("ostemplate", golden.as_str()),
        ("restore", "1"),
        ("storage", "local-lvm"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut p = base.clone();
        p.extend_from_slice(extra);
        p
    };
    // features without unprivileged=1 counts as privileged
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc",
            &with(&[("features", "nesting=1")]),
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.message(),
        "Permission check failed (changing feature flags for privileged container is only allowed for root@pam)\n"
    );
    // keyctl on an unprivileged CT is root-only
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc",
            &with(&[("unprivileged", "1"), ("features", "keyctl=1,nesting=1")]),
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.message(),
        "Permission check failed (changing feature flags (except nesting) is only allowed for root@pam)\n"
    );
    // nesting alone is fine
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc",
            &with(&[("unprivileged", "1"), ("features", "nesting=1")]),
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    // bind mount points: 403, also for the root@pam token (no token is root)
    let r = sim
        .call_as(
            &sim.root(),
            "POST",
            "/nodes/pve/lxc",
            &[
                ("vmid", "105"),
                ("ostemplate", &golden),
                ("restore", "1"),
                ("storage", "local-lvm"),
                ("mp0", "/srv/data,mp=/data"),
            ],
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.message(),
        "Permission check failed (mount point type bind is only allowed for root@pam)\n"
    );
    // a path as ostemplate
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc",
            &[
                ("vmid", "106"),
                ("ostemplate", "/tmp/x.tar"),
                ("restore", "1"),
                ("storage", "local-lvm"),
            ],
        )
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "Only root can pass arbitrary filesystem paths.\n"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn config_get_has_digest_perl_types_and_put_checks_digest() {
    let sim = start().await;
    sim.restore_golden(110).await;
    let r = sim.call("GET", "/nodes/pve/lxc/110/config", &[]).await;
    assert_eq!(r.status, 200);
    let d = r.data();
    assert_eq!(d["cores"], 2);
    assert_eq!(d["unprivileged"], 1);
    assert_eq!(d["hostname"], "golden");
    let digest = d["digest"].as_str().expect("digest").to_owned();
    assert_eq!(digest.len(), 40);
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/lxc/110/config",
            &[("cpulimit", "1.5"), ("digest", &digest)],
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(r.data().is_null());
    let r = sim.call("GET", "/nodes/pve/lxc/110/config", &[]).await;
    assert_eq!(r.data()["cpulimit"], "1.5", "number options stay strings");
    assert_ne!(r.data()["digest"], digest.as_str());
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/lxc/110/config",
            &[("cores", "4"), ("digest", &digest)],
        )
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "detected modified configuration - file changed by other user? Try again.\n"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn running_ct_keeps_non_hotplug_changes_pending() {
    let sim = start().await;
    sim.restore_golden(111).await;
    sim.start_ct(111).await;
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/lxc/111/config",
            &[("memory", "2048"), ("ostype", "ubuntu")],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let conf = sim.handle.guest_config(111).expect("ct");
    assert_eq!(conf.get("memory").map(String::as_str), Some("2048"));
    assert_eq!(conf.get("ostype").map(String::as_str), Some("debian"));
    assert_eq!(
        sim.handle
            .guest_pending(111)
            .expect("ct")
            .get("ostype")
            .map(String::as_str),
        Some("ubuntu")
    );
    let merged = sim.call("GET", "/nodes/pve/lxc/111/config", &[]).await;
    assert_eq!(merged.data()["ostype"], "ubuntu");
    let current = sim
        .call("GET", "/nodes/pve/lxc/111/config", &[("current", "1")])
        .await;
    assert_eq!(current.data()["ostype"], "debian");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn put_config_rules() {
    let sim = start().await;
    sim.restore_golden(112).await;
    let r = sim
        .call("PUT", "/nodes/pve/lxc/112/config", &[("unprivileged", "0")])
        .await;
    assert_eq!(
        r.message(),
        "unable to modify read-only option: 'unprivileged'\n"
    );
    let r = sim
        .call("PUT", "/nodes/pve/lxc/112/config", &[("delete", "rootfs")])
        .await;
    assert_eq!(r.message(), "unable to delete required option 'rootfs'\n");
    // re-sending the unchanged features string is allowed; adding fuse is not
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/lxc/112/config",
            &[("features", "keyctl=1,nesting=1")],
        )
        .await;
    assert_eq!(r.status, 200);
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/lxc/112/config",
            &[("features", "keyctl=1,nesting=1,fuse=1")],
        )
        .await;
    assert_eq!(r.status, 403);
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/lxc/112/config",
            &[("delete", "features")],
        )
        .await;
    assert_eq!(r.status, 403, "deleting features changes keyctl");
    let r = sim
        .call("PUT", "/nodes/pve/lxc/112/config", &[("dev0", "/dev/fuse")])
        .await;
    assert_eq!(
        r.message(),
        "Permission check failed (configuring device passthrough is only allowed for root@pam)\n"
    );
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/lxc/112/config",
            &[("delete", "description")],
        )
        .await;
    assert_eq!(r.status, 200);
    sim.handle.set_guest_lock(112, Some("backup"));
    let r = sim
        .call("PUT", "/nodes/pve/lxc/112/config", &[("delete", "lock")])
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "CT is locked (backup)\n");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn power_tasks_and_early_failures() {
    let sim = start().await;
    sim.restore_golden(113).await;
    let r = sim
        .call("POST", "/nodes/pve/lxc/113/status/stop", &[])
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "CT 113 not running\n");
    sim.start_ct(113).await;
    assert_eq!(sim.handle.guest_running(113), Some(true));
    let r = sim
        .call("POST", "/nodes/pve/lxc/113/status/start", &[])
        .await;
    assert_eq!(r.message(), "CT 113 already running\n");
    let status = sim
        .call("GET", "/nodes/pve/lxc/113/status/current", &[])
        .await;
    assert_eq!(status.data()["status"], "running");
    assert_eq!(status.data()["ha"]["managed"], 0);
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc/113/status/shutdown",
            &[("timeout", "30")],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    assert_eq!(sim.handle.guest_running(113), Some(false));
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc/113/status/start",
            &[("skiplock", "1")],
        )
        .await;
    assert_eq!(r.error("skiplock"), "Only root may use this option.\n");
    // a missing CT still gets a UPID; the task fails
    let r = sim
        .call("POST", "/nodes/pve/lxc/999/status/start", &[])
        .await;
    assert_eq!(
        sim.wait(&r.upid()).await,
        "Configuration file 'nodes/pve/lxc/999.conf' does not exist"
    );
    // a locked CT fails inside the task
    sim.handle.set_guest_lock(113, Some("backup"));
    let r = sim
        .call("POST", "/nodes/pve/lxc/113/status/start", &[])
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "CT is locked (backup)");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn destroy_checks_and_removes_volumes() {
    let sim = start().await;
    sim.restore_golden(114).await;
    sim.start_ct(114).await;
    let r = sim
        .call("DELETE", "/nodes/pve/lxc/114", &[("purge", "1")])
        .await;
    assert_eq!(
        r.message(),
        "unable to destroy CT 114 - container is running\n"
    );
    sim.call("PUT", "/nodes/pve/lxc/114/config", &[("protection", "1")])
        .await;
    let r = sim
        .call("DELETE", "/nodes/pve/lxc/114", &[("force", "1")])
        .await;
    assert_eq!(
        r.message(),
        "can't remove CT 114 - protection mode enabled\n"
    );
    sim.call("PUT", "/nodes/pve/lxc/114/config", &[("protection", "0")])
        .await;
    let r = sim
        .call(
            "DELETE",
            "/nodes/pve/lxc/114",
            &[
                ("force", "1"),
                ("purge", "1"),
                ("destroy-unreferenced-disks", "1"),
            ],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    assert!(sim.handle.guest_config(114).is_none());
    assert!(
        !sim.handle
            .storage_volumes("local-lvm")
            .iter()
            .any(|v| v.contains("vm-114-"))
    );
    let r = sim
        .call("GET", "/nodes/pve/lxc/114/status/current", &[])
        .await;
    assert_eq!(
        r.message(),
        "Configuration file 'nodes/pve/lxc/114.conf' does not exist\n"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn resize_grows_only() {
    let sim = start().await;
    sim.restore_golden(115).await;
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/lxc/115/resize",
            &[("disk", "rootfs"), ("size", "4G")],
        )
        .await;
    assert_eq!(r.message(), "unable to shrink disk size\n");
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/lxc/115/resize",
            &[("disk", "rootfs"), ("size", "8G")],
        )
        .await;
    assert_eq!(r.message(), "disk is already at specified size\n");
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/lxc/115/resize",
            &[("disk", "rootfs"), ("size", "+2G")],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    let conf = sim.handle.guest_config(115).expect("ct");
    assert!(
        conf.get("rootfs").is_some_and(|r| r.contains("size=10G")),
        "{conf:?}"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn nextid_skips_used_ids_and_reports_taken_ones() {
    let sim = start().await;
    let r = sim.call("GET", "/cluster/nextid", &[]).await;
    assert_eq!(r.data(), "100");
    sim.restore_golden(100).await;
    let r = sim.call("GET", "/cluster/nextid", &[]).await;
    assert_eq!(r.data(), "101");
    let r = sim.call("GET", "/cluster/nextid", &[("vmid", "100")]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.error("vmid"), "VM 100 already exists\n");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn lock_create_is_visible_during_restore_and_the_file_lock_times_out() {
    let sim = common::start_with(SimConfig {
        time_scale: 0.01,
        auth_failure_delay: Duration::ZERO,
        durations: TaskDurations {
            vzrestore: Duration::from_secs(60),
            ..TaskDurations::default()
        },
        ..SimConfig::default()
    })
    .await;
    let golden = sim.handle.endpoint().golden_volid.clone();
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc",
            &[
                ("vmid", "130"),
                ("ostemplate", &golden),
                ("restore", "1"),
                ("storage", "local-lvm"),
            ],
        )
        .await;
    let upid = r.upid();
    let conf = sim.call("GET", "/nodes/pve/lxc/130/config", &[]).await;
    assert_eq!(conf.data()["lock"], "create");
    let list = sim.call("GET", "/nodes/pve/lxc", &[]).await;
    assert_eq!(list.data()[0]["lock"], "create");
    // the restore holds the flock for its whole run (600 ms); PUT waits 10 s x 0.01 = 100 ms
    let r = sim
        .call("PUT", "/nodes/pve/lxc/130/config", &[("cores", "1")])
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "can't lock file '/run/lock/lxc/pve-config-130.lock' - got timeout\n"
    );
    let task = sim
        .call("GET", &format!("/nodes/pve/tasks/{upid}/status"), &[])
        .await;
    assert_eq!(task.data()["status"], "running");
    assert!(task.data().get("exitstatus").is_none());
    assert_eq!(sim.wait(&upid).await, "OK");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn explicit_rootfs_and_new_mount_points_are_allocated() {
    let sim = start().await;
    let golden = sim.handle.endpoint().golden_volid.clone();
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc",
            &[
                ("vmid", "160"),
                ("ostemplate", &golden),
                ("restore", "1"),
                ("storage", "local-lvm"),
                ("mp0", "local-lvm:2,mp=/data"),
            ],
        )
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "mount points configured, but 'rootfs' not set - aborting\n"
    );
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc",
            &[
                ("vmid", "160"),
                ("ostemplate", &golden),
                ("restore", "1"),
                ("storage", "local-lvm"),
                ("rootfs", "12"),
                ("mp0", "local-lvm:2,mp=/data"),
            ],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    let conf = sim.handle.guest_config(160).expect("ct");
    assert_eq!(conf["rootfs"], "local-lvm:vm-160-disk-0,size=12G");
    assert_eq!(conf["mp0"], "local-lvm:vm-160-disk-1,mp=/data,size=2G");
    sim.handle.shutdown().await;
}

fn archived(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test]
async fn archive_contents_drive_the_restore_result() {
    let sim = start().await;
    let base = [
        ("hostname", "old"),
        ("memory", "512"),
        ("ostype", "debian"),
        ("rootfs", "local-lvm:vm-7000-disk-0,size=4G"),
        (
            "net0",
            "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,type=veth",
        ),
    ];
    let restore = |vmid: &'static str, volid: String, extra: Vec<(&'static str, &'static str)>| {
        let sim = &sim;
        async move {
            let mut p = vec![
                ("vmid", vmid.to_owned()),
                ("ostemplate", volid),
                ("restore", "1".to_owned()),
                ("storage", "local-lvm".to_owned()),
            ];
            p.extend(extra.into_iter().map(|(k, v)| (k, v.to_owned())));
            let params: Vec<(&str, &str)> = p.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let r = sim.call("POST", "/nodes/pve/lxc", &params).await;
            let upid = r.upid();
            let exit = sim.wait(&upid).await;
            (exit, sim.handle.task_log(&upid).expect("log"))
        }
    };

    // raw lxc.* keys are skipped for a token with a counted WARN line
    let mut conf = archived(&base);
    conf.insert("unprivileged".into(), "1".into());
    conf.insert("lxc.apparmor.profile".into(), "unconfined".into());
    let volid = sim.handle.add_backup("local", 7000, conf).expect("archive");
    let (exit, log) = restore("171", volid.clone(), vec![]).await;
    assert_eq!(exit, "WARNINGS: 1", "{log:#?}");
    assert!(
        log.contains(&"WARN: skipping custom lxc options, restore manually as root:".to_owned())
    );
    assert_eq!(log.last().map(String::as_str), Some("TASK WARNINGS: 1"));
    assert!(
        !sim.handle
            .guest_config(171)
            .expect("ct")
            .contains_key("lxc.apparmor.profile")
    );
    let status = sim
        .call(
            "GET",
            &format!(
                "/nodes/pve/tasks/{}/status",
                sim.call("GET", "/nodes/pve/tasks", &[("typefilter", "vzrestore")])
                    .await
                    .data()[0]["upid"]
                    .as_str()
                    .expect("upid")
            ),
            &[],
        )
        .await;
    assert_eq!(status.data()["exitstatus"], "WARNINGS: 1");

    // bind mount points in the archive need root in storage-only mode
    let mut conf = archived(&base);
    conf.insert("unprivileged".into(), "1".into());
    conf.insert("mp0".into(), "/srv/data,mp=/data".into());
    let volid = sim.handle.add_backup("local", 7001, conf).expect("archive");
    let (exit, _) = restore("172", volid, vec![]).await;
    assert_eq!(
        exit,
        "restoring 'mp0' to bind mount is only possible for root"
    );
    assert!(
        sim.handle.guest_config(172).is_none(),
        "the config is removed on failure"
    );
    assert!(
        !sim.handle
            .storage_volumes("local-lvm")
            .iter()
            .any(|v| v.contains("vm-172-"))
    );

    // a privileged result needs Sys.Modify on /, which BosunAgent lacks
    let mut conf = archived(&base);
    conf.insert("features".into(), "keyctl=1,nesting=1".into());
    let volid = sim.handle.add_backup("local", 7002, conf).expect("archive");
    let (exit, _) = restore("173", volid, vec![]).await;
    assert_eq!(exit, "Permission check failed (/, Sys.Modify)");

    // restoring an unprivileged backup as privileged drops its features
    let mut conf = archived(&base);
    conf.insert("unprivileged".into(), "1".into());
    conf.insert("features".into(), "keyctl=1,nesting=1".into());
    let volid = sim.handle.add_backup("local", 7003, conf).expect("archive");
    let golden_params = [
        ("vmid", "174"),
        ("ostemplate", volid.as_str()),
        ("restore", "1"),
        ("storage", "local-lvm"),
        ("unprivileged", "0"),
    ];
    let r = sim
        .call_as(&sim.root(), "POST", "/nodes/pve/lxc", &golden_params)
        .await;
    let upid = r.upid();
    assert_eq!(sim.wait(&upid).await, "OK");
    let log = sim.handle.task_log(&upid).expect("log");
    assert!(
        log.contains(&"changing from unprivileged to privileged, skipping features".to_owned())
    );
    let conf = sim.handle.guest_config(174).expect("ct");
    assert!(!conf.contains_key("features"));
    assert_eq!(conf["unprivileged"], "0");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn failed_overwrite_before_volume_creation_keeps_the_old_ct() {
    let sim = start().await;
    sim.restore_golden(180).await;
    let before = sim.handle.guest_config(180).expect("ct");
    // An archive whose bind mount point a token may not restore fails before any volume exists.
    let mut conf = before.clone();
    conf.insert("mp0".into(), "/srv/data,mp=/data".into());
    let volid = sim.handle.add_backup("local", 180, conf).expect("archive");
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc",
            &[
                ("vmid", "180"),
                ("ostemplate", &volid),
                ("restore", "1"),
                ("force", "1"),
                ("storage", "local-lvm"),
            ],
        )
        .await;
    assert_eq!(
        sim.wait(&r.upid()).await,
        "restoring 'mp0' to bind mount is only possible for root"
    );
    assert_eq!(sim.handle.guest_config(180), Some(before));
    assert!(
        sim.handle
            .storage_volumes("local-lvm")
            .contains(&"local-lvm:vm-180-disk-0".to_owned())
    );
    sim.handle.shutdown().await;
}
