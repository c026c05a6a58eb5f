//! Create/restore: PVE's order of checks, root-only rules and archive-driven results.

use crate::common;

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
    let r = sim.restore("120", &golden, &[]).await;
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
    let file = golden.trim_start_matches("local:backup/");
    assert!(
        log.iter()
            .any(|l| l == &format!("extracting archive '/var/lib/vz/dump/{file}'")),
        "{log:#?}"
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
        .restore_as(
            &sim.root(),
            "105",
            &golden,
            &[("mp0", "/srv/data,mp=/data")],
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.message(),
        "Permission check failed (mount point type bind is only allowed for root@pam)\n"
    );
    // a path as ostemplate
    let r = sim.restore("106", "/tmp/x.tar", &[]).await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "Only root can pass arbitrary filesystem paths.\n"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn explicit_rootfs_and_new_mount_points_are_allocated() {
    let sim = start().await;
    let golden = sim.handle.endpoint().golden_volid.clone();
    let r = sim
        .restore("160", &golden, &[("mp0", "local-lvm:2,mp=/data")])
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "mount points configured, but 'rootfs' not set - aborting\n"
    );
    let r = sim
        .restore(
            "160",
            &golden,
            &[("rootfs", "12"), ("mp0", "local-lvm:2,mp=/data")],
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
