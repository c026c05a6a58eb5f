//! Config, power (a start needs the CT's `/sbin/init`), resize, nextid and destroy behaviour.

use crate::common;

use std::time::Duration;

use bosun_pvesim::{DEBIAN_TEMPLATE, SimConfig, TaskDurations};
use common::{Sim, start};

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
async fn a_running_cts_share_applies_at_once_stored_as_sent_and_checked_as_the_schema_types_it() {
    let sim = start().await;
    sim.restore_golden(113).await;
    sim.start_ct(113).await;
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/lxc/113/config",
            &[
                ("cpuunits", "250"),
                ("cpulimit", "0.25"),
                ("net0", "name=eth0,bridge=vmbr0,firewall=1,rate=12.5"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    // cpuunits, cpulimit and netN apply to a running CT at once, nothing pending.
    assert!(sim.handle.guest_pending(113).expect("ct").is_empty());
    let d = sim.call("GET", "/nodes/pve/lxc/113/config", &[]).await;
    let d = d.data();
    assert_eq!(d["cpuunits"], 250, "an integer option is a number");
    assert_eq!(d["cpulimit"], "0.25", "a number option stays a string");
    // Proxmox generates a MAC for an interface sent without one; the rate is kept as sent.
    let net0 = d["net0"].as_str().expect("net0");
    assert!(net0.ends_with(",firewall=1,rate=12.5"), "{net0}");
    for (key, value, field) in [
        ("cpuunits", "500001", "cpuunits"),
        ("cpulimit", "8193", "cpulimit"),
        ("cpulimit", "-1", "cpulimit"),
        ("cpulimit", "one", "cpulimit"),
        ("net0", "name=eth0,bridge=vmbr0,rate=fast", "net0"),
        ("net0", "name=eth0,bridge=vmbr0,tag=4095", "net0"),
        ("net0", "name=eth0,bridge=vmbr0,mtu=63", "net0"),
    ] {
        let r = sim
            .call("PUT", "/nodes/pve/lxc/113/config", &[(key, value)])
            .await;
        assert_eq!(r.status, 400, "{key}={value}: {r:?}");
        assert!(!r.error(field).is_empty(), "{key}={value}: {r:?}");
    }
    // Zero is a value Proxmox takes, and reads as no limit.
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/lxc/113/config",
            &[("net0", "name=eth0,bridge=vmbr0,rate=0")],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
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
    // Growing the volume adds no files: the backup archives what the CT held before (a fifth
    // of its 8G rootfs, compressed to a quarter), and grows only with what the CT writes.
    let archived = |log: Vec<String>| {
        log.iter()
            .find_map(|l| {
                l.strip_prefix("INFO: archive file size: ")
                    .map(str::to_owned)
            })
            .expect("an archive size line")
    };
    assert_eq!(archived(backup_log(&sim, 115).await), "409MB");
    assert!(sim.handle.set_guest_data(115, 40 << 30));
    assert_eq!(archived(backup_log(&sim, 115).await), "10.00GB");
    sim.handle.shutdown().await;
}

/// The task log of a backup of CT `vmid` to `local`.
async fn backup_log(sim: &Sim, vmid: u32) -> Vec<String> {
    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", &vmid.to_string()), ("storage", "local")],
        )
        .await;
    let upid = r.upid();
    assert_eq!(sim.wait(&upid).await, "OK");
    let log = sim
        .call(
            "GET",
            &format!("/nodes/pve/tasks/{upid}/log"),
            &[("limit", "500")],
        )
        .await;
    log.data()
        .as_array()
        .expect("log lines")
        .iter()
        .filter_map(|l| l["t"].as_str().map(str::to_owned))
        .collect()
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
    let r = sim.restore("130", &golden, &[]).await;
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
async fn stop_task_and_bridge_access_check() {
    let sim = start().await;
    sim.restore_golden(190).await;
    sim.start_ct(190).await;
    let r = sim
        .call("POST", "/nodes/pve/lxc/190/status/stop", &[])
        .await;
    let upid = r.upid();
    assert!(upid.contains(":vzstop:190:"));
    assert_eq!(sim.wait(&upid).await, "OK");
    assert_eq!(sim.handle.guest_running(190), Some(false));
    // A token that may configure networks but not use the bridge.
    let t = sim.narrow_token("NetNoSdn", &["VM.Config.Network", "VM.Audit"], "net");
    let r = sim
        .call_as(
            &t,
            "PUT",
            "/nodes/pve/lxc/190/config",
            &[("net1", "name=eth1,bridge=vmbr1,tag=20")],
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.message(),
        "Permission check failed (/sdn/zones/localnetwork/vmbr1/20, SDN.Use)\n"
    );
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/lxc/190/config",
            &[("net1", "name=eth1,bridge=vmbr1,tag=20")],
        )
        .await;
    assert_eq!(r.status, 200);
    sim.handle.shutdown().await;
}

/// `POST …/status/start` with `extra` parameters; the task's exit status and log.
async fn start_task(sim: &Sim, vmid: u32, extra: &[(&str, &str)]) -> (String, Vec<String>) {
    let upid = sim
        .call(
            "POST",
            &format!("/nodes/pve/lxc/{vmid}/status/start"),
            extra,
        )
        .await
        .upid();
    let exit = sim.wait(&upid).await;
    (exit, sim.handle.task_log(&upid).expect("log"))
}

async fn status(sim: &Sim, vmid: u32) -> String {
    let r = sim
        .call("GET", &format!("/nodes/pve/lxc/{vmid}/status/current"), &[])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    r.data()["status"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn the_seeded_template_and_golden_archive_and_their_backups_start() {
    let sim = start().await;
    let golden = sim.handle.endpoint().golden_volid.clone();
    for volid in [DEBIAN_TEMPLATE, golden.as_str()] {
        let init = sim
            .handle
            .archive_file(volid, "/sbin/init")
            .unwrap_or_else(|| panic!("{volid} has /sbin/init"));
        assert_eq!(
            (init.kind.as_str(), init.content.as_slice()),
            ("symlink", &b"/lib/systemd/systemd"[..])
        );
        let systemd = sim
            .handle
            .archive_file(volid, "/lib/systemd/systemd")
            .expect("the link's target");
        assert_eq!((systemd.kind.as_str(), systemd.mode), ("file", 0o755));
    }

    let upid = sim
        .call(
            "POST",
            "/nodes/pve/lxc",
            &[
                ("vmid", "106"),
                ("ostemplate", DEBIAN_TEMPLATE),
                ("storage", "local-lvm"),
            ],
        )
        .await
        .upid();
    assert_eq!(sim.wait(&upid).await, "OK");
    assert_eq!(start_task(&sim, 106, &[]).await.0, "OK");
    assert_eq!(status(&sim, 106).await, "running");

    sim.restore_golden(107).await;
    assert_eq!(start_task(&sim, 107, &[]).await.0, "OK");
    assert_eq!(status(&sim, 107).await, "running");

    // A backup of the running CT carries its init, so its restore starts too.
    let upid = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", "107"), ("storage", "local")],
        )
        .await
        .upid();
    assert_eq!(sim.wait(&upid).await, "OK");
    let backup = sim
        .handle
        .storage_volumes("local")
        .into_iter()
        .find(|v| v.contains("vzdump-lxc-107-"))
        .expect("the new backup");
    let upid = sim.restore("108", &backup, &[("start", "1")]).await.upid();
    assert_eq!(sim.wait(&upid).await, "OK");
    assert_eq!(status(&sim, 108).await, "running");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn a_ct_whose_init_is_gone_does_not_start() {
    let sim = start().await;
    sim.restore_golden(112).await;
    sim.start_ct(112).await;
    let out = sim
        .handle
        .cli(
            "pct",
            &["exec", "112", "--", "/usr/bin/rm", "-f", "/sbin/init"],
            None,
        )
        .await
        .expect("usage is fine");
    assert_eq!(out.exit, 0, "{out:?}");
    let upid = sim
        .call("POST", "/nodes/pve/lxc/112/status/stop", &[])
        .await
        .upid();
    assert_eq!(sim.wait(&upid).await, "OK");

    let (exit, log) = start_task(&sim, 112, &[]).await;
    assert_eq!(exit, "startup for container '112' failed");
    assert_eq!(
        log,
        [
            "sync_wait: 34 An error occurred in another process (expected sequence number 7)",
            "__lxc_start: 2119 Failed to spawn container \"112\"",
            "TASK ERROR: startup for container '112' failed",
        ]
    );
    assert_eq!(status(&sim, 112).await, "stopped");
    assert_eq!(sim.handle.guest_running(112), Some(false));

    // With debug, lxc-start's own log names the init it could not exec.
    let (exit, log) = start_task(&sim, 112, &[("debug", "1")]).await;
    assert_eq!(exit, "startup for container '112' failed");
    assert!(
        log.iter().any(|l| l
            == "ERROR    start - ../src/lxc/start.c:start:2209 - No such file or directory - \
                Failed to exec \"/sbin/init\""),
        "{log:#?}"
    );

    // `pct start` as root prints the lines and the error, and exits 255.
    let out = sim
        .handle
        .cli("pct", &["start", "112"], None)
        .await
        .expect("usage is fine");
    assert_eq!(out.exit, 255, "{out:?}");
    assert!(
        out.stdout
            .contains("__lxc_start: 2119 Failed to spawn container \"112\"\n"),
        "{out:?}"
    );
    assert_eq!(out.stderr, "startup for container '112' failed\n");

    // A rollback with start=1 to a snapshot without init ends OK and leaves a failed start.
    let upid = sim
        .call(
            "POST",
            "/nodes/pve/lxc/112/snapshot",
            &[("snapname", "broken")],
        )
        .await
        .upid();
    assert_eq!(sim.wait(&upid).await, "OK");
    let upid = sim
        .call(
            "POST",
            "/nodes/pve/lxc/112/snapshot/broken/rollback",
            &[("start", "1")],
        )
        .await
        .upid();
    assert_eq!(sim.wait(&upid).await, "OK");
    let tasks = sim
        .call(
            "GET",
            "/nodes/pve/tasks",
            &[
                ("vmid", "112"),
                ("typefilter", "vzstart"),
                ("source", "all"),
            ],
        )
        .await;
    let newest = tasks.data()[0]["upid"]
        .as_str()
        .expect("a start task")
        .to_owned();
    assert_ne!(newest, upid);
    assert_eq!(
        sim.wait(&newest).await,
        "startup for container '112' failed"
    );
    assert_eq!(status(&sim, 112).await, "stopped");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn a_ct_whose_init_exits_is_stopped() {
    let sim = start().await;
    sim.restore_golden(113).await;
    sim.start_ct(113).await;
    assert_eq!(status(&sim, 113).await, "running");
    assert!(sim.handle.stop_guest(113));
    let r = sim
        .call("GET", "/nodes/pve/lxc/113/status/current", &[])
        .await;
    assert_eq!(r.data()["status"], "stopped", "{r:?}");
    assert_eq!(r.data()["uptime"], 0);
    assert!(r.data().get("pid").is_none(), "{r:?}");
    assert!(
        sim.handle
            .guest_config(113)
            .is_some_and(|c| !c.contains_key("lock"))
    );
    // It starts again; stopping a stopped CT changes nothing, an unknown one is refused.
    sim.start_ct(113).await;
    assert_eq!(status(&sim, 113).await, "running");
    assert!(sim.handle.stop_guest(113));
    assert!(sim.handle.stop_guest(113));
    assert_eq!(sim.handle.guest_running(113), Some(false));
    assert!(!sim.handle.stop_guest(999));
    sim.handle.shutdown().await;
}
