//! QEMU guests as PVE 9.1 keeps them: restore from a vzdump-qemu archive as a task under
//! `lock: create` and the config file lock, into a pool; the guest agent's checks in
//! qemu-server's order and its own answers (exec bounded and forgotten once read, a frozen
//! guest, files written into the named VM only); and the token's reach inside a VM held on
//! Bosun's pool only.

use crate::common;

use std::time::Duration;

use base64::Engine as _;
use bosun_pvesim::{SimConfig, TaskDurations};
use common::{Sim, start, start_with};

/// Restores the VM golden archive as `vmid` into `pool` (none with `""`) as `token`.
pub(crate) async fn restore_vm(
    sim: &Sim,
    token: &bosun_pvesim::TokenCredential,
    vmid: u32,
    pool: &str,
) {
    let archive = sim.handle.add_vm_golden();
    let id = vmid.to_string();
    let mut params = vec![
        ("vmid", id.as_str()),
        ("archive", archive.as_str()),
        ("storage", "local-lvm"),
        ("unique", "1"),
    ];
    if !pool.is_empty() {
        params.push(("pool", pool));
    }
    let r = sim.call_as(token, "POST", "/nodes/pve/qemu", &params).await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
}

async fn start_vm(sim: &Sim, vmid: u32) {
    let r = sim
        .call_as(
            &sim.root(),
            "POST",
            &format!("/nodes/pve/qemu/{vmid}/status/start"),
            &[],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
}

fn agent_path(vmid: u32, command: &str) -> String {
    format!("/nodes/pve/qemu/{vmid}/agent/{command}")
}

fn slow(durations: TaskDurations) -> SimConfig {
    SimConfig {
        time_scale: 0.01,
        auth_failure_delay: Duration::ZERO,
        durations,
        ..SimConfig::default()
    }
}

#[tokio::test]
async fn a_restore_is_a_task_under_the_create_lock_that_leaves_a_vm_in_its_pool() {
    let sim = start_with(slow(TaskDurations {
        vzrestore: Duration::from_secs(40),
        ..TaskDurations::default()
    }))
    .await;
    let archive = sim.handle.add_vm_golden();
    let params = [
        ("vmid", "301"),
        ("archive", archive.as_str()),
        ("storage", "local-lvm"),
        ("unique", "1"),
        ("pool", "bosun"),
        ("ciuser", "bosun"),
        ("ipconfig0", "ip=10.0.0.7/24,gw=10.0.0.1"),
    ];
    let r = sim.call("POST", "/nodes/pve/qemu", &params).await;
    let upid = r.upid();
    assert!(upid.contains(":qmrestore:301:bosun@pve!agent:"), "{upid}");
    let during = sim.call("GET", "/nodes/pve/qemu/301/config", &[]).await;
    assert_eq!(during.data()["lock"], "create", "{during:?}");
    // The config lock is held for the whole restore: a start waits for it, then gives up.
    let start = sim
        .call("POST", "/nodes/pve/qemu/301/status/start", &[])
        .await;
    assert_eq!(
        sim.wait(&start.upid()).await,
        "can't lock file '/var/lock/qemu-server/lock-301.conf' - got timeout"
    );
    // A second restore waits for the same lock (qemu-server's `create_and_lock_config`)…
    let again = sim.call("POST", "/nodes/pve/qemu", &params).await;
    assert_eq!(again.status, 500, "{again:?}");
    assert_eq!(
        again.message(),
        "unable to restore VM 301 - can't lock file '/var/lock/qemu-server/lock-301.conf' - got timeout\n"
    );
    assert_eq!(sim.wait(&upid).await, "OK");
    // …and, once the first is done, finds the VM.
    let again = sim.call("POST", "/nodes/pve/qemu", &params).await;
    assert_eq!(again.status, 500, "{again:?}");
    assert_eq!(
        again.message(),
        "unable to restore VM 301 - VM 301 already exists on node 'pve'\n"
    );
    let log = sim.handle.task_log(&upid).expect("log");
    assert!(
        log.iter()
            .any(|l| l == "new volume ID is 'local-lvm:vm-301-disk-0'"),
        "{log:?}"
    );
    let conf = sim.handle.vm_config(301).expect("config");
    assert!(!conf.contains_key("lock"), "{conf:?}");
    assert_eq!(conf["scsi0"], "local-lvm:vm-301-disk-0,size=10G");
    assert_eq!(conf["ide2"], "local-lvm:vm-301-cloudinit,media=cdrom");
    assert_eq!(
        conf["ciuser"], "bosun",
        "given options override the archive's"
    );
    assert!(conf["net0"].starts_with("virtio=BC:24:11:"), "{conf:?}");
    assert!(
        !conf["net0"].contains("5E:A1:08"),
        "unique=1 gives a fresh MAC: {conf:?}"
    );
    assert_eq!(
        sim.handle.pool_members("bosun"),
        [301].into_iter().collect(),
        "the pool holds the restored VM"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn restores_are_refused_as_qemu_server_refuses_them() {
    let sim = start().await;
    let archive = sim.handle.add_vm_golden();
    let base = [
        ("vmid", "302"),
        ("archive", archive.as_str()),
        ("storage", "local-lvm"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut p: Vec<(&str, &str)> = base.to_vec();
        p.extend_from_slice(extra);
        p
    };
    let r = sim
        .call("POST", "/nodes/pve/qemu", &with(&[("pool", "nope")]))
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.message(),
        "Permission check failed (pool 'nope' does not exist)\n"
    );
    let r = sim
        .call(
            "POST",
            "/nodes/pve/qemu",
            &with(&[("scsi1", "local-lvm:4")]),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.error("scsi1"), "option conflicts with option 'archive'\n");
    let ct_archive = sim.handle.endpoint().golden_volid.clone();
    let r = sim
        .call(
            "POST",
            "/nodes/pve/qemu",
            &[
                ("vmid", "302"),
                ("archive", ct_archive.as_str()),
                ("storage", "local-lvm"),
            ],
        )
        .await;
    assert_eq!(r.status, 500);
    assert!(r.message().contains("is not a QEMU backup"), "{r:?}");
    // VM.Allocate on the pool only: a restore into the pool passes, one outside it does not.
    let pool_only = {
        sim.handle
            .add_role(
                "PoolAlloc",
                &[
                    "VM.Allocate",
                    "Datastore.AllocateSpace",
                    "Datastore.Allocate",
                    "SDN.Use",
                ],
            )
            .expect("role");
        let token = sim
            .handle
            .create_token("bosun@pve", "pool-only", true)
            .expect("token");
        for path in ["/pool/bosun", "/storage", "/sdn"] {
            sim.handle
                .grant(path, &token.id, "PoolAlloc", true)
                .expect("grant");
        }
        // The user needs it on the pool too: its own ACL there replaces what `/` gave it.
        sim.handle
            .grant("/pool/bosun", "bosun@pve", "PoolAlloc", true)
            .expect("grant");
        token
    };
    let r = sim
        .call_as(&pool_only, "POST", "/nodes/pve/qemu", &base)
        .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.message(), "Permission check failed\n");
    let r = sim
        .call_as(
            &pool_only,
            "POST",
            "/nodes/pve/qemu",
            &with(&[("pool", "bosun")]),
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn the_guest_agent_answers_only_when_configured_running_and_up() {
    let sim = start().await;
    // An image without the agent: no `agent` key in its config.
    let archive = sim.handle.add_vm_archive_without_agent();
    let r = sim
        .call(
            "POST",
            "/nodes/pve/qemu",
            &[
                ("vmid", "310"),
                ("archive", archive.as_str()),
                ("storage", "local-lvm"),
                ("pool", "bosun"),
            ],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    let r = sim.call("POST", &agent_path(310, "ping"), &[]).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "No QEMU guest agent configured\n");

    restore_vm(&sim, &sim.agent(), 311, "bosun").await;
    let r = sim.call("POST", &agent_path(311, "ping"), &[]).await;
    assert_eq!(r.message(), "VM 311 is not running\n");
    start_vm(&sim, 311).await;
    let r = sim.call("POST", &agent_path(311, "ping"), &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.data()["result"], serde_json::json!({}));
    assert!(sim.handle.set_vm_agent(311, false));
    for (method, command) in [("POST", "ping"), ("POST", "exec"), ("POST", "file-write")] {
        let params: &[(&str, &str)] = match command {
            "exec" => &[("command", "/usr/bin/test")],
            "file-write" => &[("file", "/etc/x"), ("content", "x")],
            _ => &[],
        };
        let r = sim.call(method, &agent_path(311, command), params).await;
        assert_eq!(r.status, 500, "{command}: {r:?}");
        assert_eq!(
            r.message(),
            "QEMU guest agent is not running\n",
            "{command}"
        );
    }
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn exec_runs_in_the_guest_reports_while_running_and_forgets_a_read_exit() {
    let sim = start_with(slow(TaskDurations::default())).await;
    restore_vm(&sim, &sim.agent(), 320, "bosun").await;
    start_vm(&sim, 320).await;
    let r = sim
        .call(
            "POST",
            &agent_path(320, "exec"),
            &[("command", "/usr/bin/sleep"), ("command", "30")],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let pid = r.data()["pid"].as_u64().expect("pid").to_string();
    let status = || async {
        sim.call("GET", &agent_path(320, "exec-status"), &[("pid", &pid)])
            .await
    };
    let running = status().await;
    assert_eq!(running.data()["exited"], 0, "{running:?}");
    assert!(running.data().get("exitcode").is_none());
    tokio::time::sleep(Duration::from_millis(400)).await;
    let done = status().await;
    assert_eq!(done.data()["exited"], 1, "{done:?}");
    assert_eq!(done.data()["exitcode"], 0);
    let forgotten = status().await;
    assert_eq!(forgotten.status, 500);
    assert_eq!(
        forgotten.message(),
        "Agent error: Invalid parameter 'pid'\n"
    );

    let r = sim
        .call(
            "POST",
            &agent_path(320, "exec"),
            &[
                ("command", "/usr/bin/test"),
                ("command", "-f"),
                ("command", "/nope"),
            ],
        )
        .await;
    let pid = r.data()["pid"].as_u64().expect("pid").to_string();
    let r = sim
        .call("GET", &agent_path(320, "exec-status"), &[("pid", &pid)])
        .await;
    assert_eq!(r.data()["exitcode"], 1, "test -f of a missing file: {r:?}");
    let r = sim
        .call(
            "POST",
            &agent_path(320, "exec"),
            &[("command", "/opt/none")],
        )
        .await;
    assert_eq!(r.status, 500);
    assert!(
        r.message()
            .starts_with("Agent error: Failed to execute child process"),
        "{r:?}"
    );
    let long = "x".repeat(65_537);
    let r = sim
        .call(
            "POST",
            &agent_path(320, "exec"),
            &[("command", "/usr/bin/test"), ("input-data", &long)],
        )
        .await;
    assert_eq!(r.status, 400, "input-data is bounded by the schema: {r:?}");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn file_write_lands_in_the_named_vm_only_and_file_read_reads_it_back() {
    let sim = start().await;
    for vmid in [330, 331] {
        restore_vm(&sim, &sim.agent(), vmid, "bosun").await;
        start_vm(&sim, vmid).await;
    }
    let b64 = base64::engine::general_purpose::STANDARD.encode(b"secret\x00\xff");
    let r = sim
        .call(
            "POST",
            &agent_path(330, "file-write"),
            &[
                ("file", "/etc/bosun.json"),
                ("content", &b64),
                ("encode", "0"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.data().is_null());
    let written = sim.handle.vm_file(330, "/etc/bosun.json").expect("written");
    assert_eq!(written.content, b"secret\x00\xff");
    // qemu-ga creates a new file 0600 (`safe_open_or_create`, since CVE-2013-2007).
    assert_eq!(written.mode, 0o600);
    assert!(
        sim.handle.vm_file(331, "/etc/bosun.json").is_none(),
        "no other VM's tree changed"
    );
    let r = sim
        .call(
            "POST",
            &agent_path(330, "file-write"),
            &[("file", "/etc/plain"), ("content", "as is")],
        )
        .await;
    assert_eq!(r.status, 200, "encode=1 (the default): PVE encodes: {r:?}");
    assert_eq!(
        sim.handle.vm_file(330, "/etc/plain").expect("file").content,
        b"as is"
    );
    let r = sim
        .call(
            "POST",
            &agent_path(330, "file-write"),
            &[("file", "/no/such/dir/f"), ("content", "x")],
        )
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "Agent error: failed to open file '/no/such/dir/f' (mode: 'wb'): No such file or directory\n"
    );
    let too_long = "A".repeat(61_441);
    let r = sim
        .call(
            "POST",
            &agent_path(330, "file-write"),
            &[("file", "/etc/big"), ("content", &too_long)],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.error("content"),
        "value may only be 61440 characters long\n"
    );

    let r = sim
        .call(
            "GET",
            &agent_path(330, "file-read"),
            &[("file", "/etc/bosun.json")],
        )
        .await;
    assert_eq!(
        r.data()["content"],
        "secret\u{0}\u{ff}",
        "bytes decoded, one character each: {r:?}"
    );
    assert!(r.data().get("truncated").is_none());
    let r = sim
        .call(
            "GET",
            &agent_path(331, "file-read"),
            &[("file", "/etc/bosun.json")],
        )
        .await;
    assert_eq!(r.status, 500, "the other VM has no such file: {r:?}");
    assert_eq!(
        r.message(),
        "Agent error: failed to open file '/etc/bosun.json' (mode: 'r'): No such file or directory\n"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn a_frozen_guest_refuses_all_but_the_freeze_commands_and_ping() {
    let sim = start().await;
    restore_vm(&sim, &sim.agent(), 340, "bosun").await;
    start_vm(&sim, 340).await;
    let r = sim
        .call("POST", &agent_path(340, "fsfreeze-freeze"), &[])
        .await;
    assert_eq!(r.data()["result"], 1);
    assert_eq!(sim.handle.vm_frozen(340), Some(true));
    let r = sim
        .call(
            "POST",
            &agent_path(340, "file-write"),
            &[("file", "/etc/x"), ("content", "x")],
        )
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "Agent error: Command guest-file-open has been disabled: the agent is in frozen state\n"
    );
    let r = sim.call("POST", &agent_path(340, "ping"), &[]).await;
    assert_eq!(r.status, 200);
    let r = sim
        .call("POST", &agent_path(340, "fsfreeze-status"), &[])
        .await;
    assert_eq!(r.data()["result"], "frozen");
    let r = sim
        .call("POST", &agent_path(340, "fsfreeze-thaw"), &[])
        .await;
    assert_eq!(r.data()["result"], 1);
    let r = sim
        .call(
            "POST",
            &agent_path(340, "file-write"),
            &[("file", "/etc/x"), ("content", "x")],
        )
        .await;
    assert_eq!(r.status, 200);
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn a_snapshot_locks_the_config_and_freezes_a_guest_whose_agent_answers() {
    let sim = start_with(slow(TaskDurations {
        vzsnapshot: Duration::from_secs(40),
        ..TaskDurations::default()
    }))
    .await;
    restore_vm(&sim, &sim.agent(), 350, "bosun").await;
    start_vm(&sim, 350).await;
    let r = sim
        .call(
            "POST",
            "/nodes/pve/qemu/350/snapshot",
            &[("snapname", "before")],
        )
        .await;
    let upid = r.upid();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = sim
        .call("PUT", "/nodes/pve/qemu/350/config", &[("cores", "4")])
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "VM is locked (snapshot)\n");
    assert_eq!(sim.wait(&upid).await, "OK");
    let log = sim.handle.task_log(&upid).expect("log");
    assert!(log.iter().any(|l| l == "guest-fsfreeze-freeze"), "{log:?}");
    assert!(log.iter().any(|l| l == "guest-fsfreeze-thaw"), "{log:?}");
    let r = sim
        .call(
            "POST",
            "/nodes/pve/qemu/350/snapshot",
            &[("snapname", "before")],
        )
        .await;
    assert_eq!(
        sim.wait(&r.upid()).await,
        "snapshot name 'before' already used"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn the_agents_token_reaches_inside_a_vm_only_through_bosuns_pool() {
    let sim = start().await;
    // A VM Bosun did not create: restored by root, in no pool.
    restore_vm(&sim, &sim.root(), 360, "").await;
    start_vm(&sim, 360).await;
    let refused = [
        (
            "POST",
            "ping",
            vec![],
            "(/vms/360, VM.GuestAgent.Audit|VM.GuestAgent.Unrestricted)",
        ),
        (
            "POST",
            "exec",
            vec![("command", "/usr/bin/test")],
            "(/vms/360, VM.GuestAgent.Unrestricted)",
        ),
        (
            "POST",
            "file-write",
            vec![
                ("file", "/root/.ssh/authorized_keys"),
                ("content", "ssh-ed25519 x"),
            ],
            "(/vms/360, VM.GuestAgent.FileWrite|VM.GuestAgent.Unrestricted)",
        ),
    ];
    for (method, command, params, text) in &refused {
        let r = sim.call(method, &agent_path(360, command), params).await;
        assert_eq!(r.status, 403, "{command}: {r:?}");
        assert_eq!(r.message(), format!("Permission check failed {text}\n"));
    }
    assert!(
        sim.handle
            .vm_file(360, "/root/.ssh/authorized_keys")
            .is_none()
    );
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/qemu/360/config",
            &[("sshkeys", "ssh-ed25519%20AAAA%20attacker")],
        )
        .await;
    assert_eq!(
        r.status, 403,
        "no cloud-init identity outside the pool: {r:?}"
    );
    assert_eq!(
        r.message(),
        "Permission check failed (/vms/360, VM.Config.Cloudinit)\n"
    );
    let r = sim
        .call("GET", "/access/permissions", &[("path", "/vms")])
        .await;
    assert!(
        r.data()["/vms"].get("VM.GuestAgent.Unrestricted").is_none(),
        "nothing on /vms: {r:?}"
    );
    // The operator adopts it into the pool: the pool's roles reach it, unpropagated.
    assert!(sim.handle.add_vm_to_pool(360, "bosun"));
    let r = sim.call("POST", &agent_path(360, "ping"), &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = sim
        .call("GET", "/access/permissions", &[("path", "/vms/360")])
        .await;
    assert_eq!(
        r.data()["/vms/360"]["VM.GuestAgent.Unrestricted"],
        0,
        "{r:?}"
    );
    let r = sim
        .call("GET", "/cluster/resources", &[("type", "vm")])
        .await;
    let listed = r
        .data()
        .as_array()
        .expect("list")
        .iter()
        .find(|g| g["vmid"] == 360)
        .cloned()
        .expect("listed");
    assert_eq!(listed["type"], "qemu");
    assert_eq!(listed["pool"], "bosun");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn on_pve_8_one_privilege_vm_monitor_guards_the_guest_agent() {
    let sim = start_with(SimConfig {
        time_scale: 0.0,
        auth_failure_delay: Duration::ZERO,
        pve_version: bosun_pvesim::PveVersion::V8_4,
        ..SimConfig::default()
    })
    .await;
    restore_vm(&sim, &sim.root(), 370, "").await;
    start_vm(&sim, 370).await;
    let r = sim.call("POST", &agent_path(370, "ping"), &[]).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.message(),
        "Permission check failed (/vms/370, VM.Monitor)\n"
    );
    assert!(sim.handle.add_vm_to_pool(370, "bosun"));
    let r = sim.call("POST", &agent_path(370, "ping"), &[]).await;
    assert_eq!(
        r.status, 200,
        "the pool's BosunGuest has VM.Monitor on 8.4: {r:?}"
    );
    let r = sim
        .call("GET", "/access/permissions", &[("path", "/pool/bosun")])
        .await;
    assert!(
        r.data()["/pool/bosun"].get("VM.GuestAgent.Audit").is_none(),
        "no PVE 9 names on 8.4: {r:?}"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn a_disk_grows_in_a_resize_task_that_refuses_to_shrink_and_stores_the_size() {
    let sim = start().await;
    restore_vm(&sim, &sim.root(), 310, "").await;
    let path = "/nodes/pve/qemu/310/resize";
    // The schema's disks only; a size in its pattern only.
    let r = sim
        .call("PUT", path, &[("disk", "rootfs"), ("size", "12G")])
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    let r = sim
        .call("PUT", path, &[("disk", "scsi0"), ("size", "-1G")])
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    // A grow: task `resize`, the drive's new size in the config.
    let r = sim
        .call("PUT", path, &[("disk", "scsi0"), ("size", "12G")])
        .await;
    let upid = r.upid();
    assert!(upid.contains(":resize:310:bosun@pve!agent:"), "{upid}");
    assert_eq!(sim.wait(&upid).await, "OK");
    let config = sim.handle.vm_config(310).unwrap();
    assert_eq!(config["scsi0"], "local-lvm:vm-310-disk-0,size=12G");
    // `+` grows from the size held.
    let r = sim
        .call("PUT", path, &[("disk", "scsi0"), ("size", "+1G")])
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    assert_eq!(
        sim.handle.vm_config(310).unwrap()["scsi0"],
        "local-lvm:vm-310-disk-0,size=13G"
    );
    // A shrink, a cdrom, a missing disk, a changed digest: the task fails, nothing changes.
    for (params, error) in [
        (
            vec![("disk", "scsi0"), ("size", "8G")],
            "shrinking disks is not supported",
        ),
        (
            vec![("disk", "ide2"), ("size", "8G")],
            "you can't resize a cdrom",
        ),
        (
            vec![("disk", "scsi1"), ("size", "8G")],
            "disk 'scsi1' does not exist",
        ),
        (
            vec![
                ("disk", "scsi0"),
                ("size", "20G"),
                ("digest", "0000000000000000000000000000000000000000"),
            ],
            "detected modified configuration",
        ),
    ] {
        let r = sim.call("PUT", path, &params).await;
        let exit = sim.wait(&r.upid()).await;
        assert!(exit.contains(error), "{params:?}: {exit}");
    }
    assert_eq!(
        sim.handle.vm_config(310).unwrap()["scsi0"],
        "local-lvm:vm-310-disk-0,size=13G"
    );
    // The same size: a task that changes nothing.
    let r = sim
        .call("PUT", path, &[("disk", "scsi0"), ("size", "13G")])
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    // VM.Config.Disk on the VM: a token without it is refused before any task.
    sim.handle
        .add_role("AuditOnly", &["VM.Audit"])
        .expect("role");
    let token = sim
        .handle
        .create_token("bosun@pve", "audit-only", true)
        .expect("token");
    sim.handle
        .grant("/", &token.id, "AuditOnly", true)
        .expect("grant");
    let r = sim
        .call_as(&token, "PUT", path, &[("disk", "scsi0"), ("size", "20G")])
        .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(
        r.message(),
        "Permission check failed (/vms/310, VM.Config.Disk)\n"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn a_device_named_without_a_mac_gets_one_and_a_new_mac_is_a_new_cloud_init_instance() {
    let sim = start().await;
    restore_vm(&sim, &sim.root(), 320, "").await;
    let mac = |sim: &Sim| {
        let net0 = sim.handle.vm_config(320).unwrap()["net0"].clone();
        let mac = net0
            .split(',')
            .find_map(|p| p.strip_prefix("virtio="))
            .map(str::to_owned);
        (net0, mac)
    };
    assert_eq!(sim.handle.vm_instance_id(320), None, "never started");
    // qemu-server's parse_net: `virtio` without a MAC is given a random one.
    let path = "/nodes/pve/qemu/320/config";
    let r = sim
        .call_as(
            &sim.root(),
            "PUT",
            path,
            &[("net0", "virtio,bridge=vmbr0,firewall=1")],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let (net0, first) = mac(&sim);
    let first = first.unwrap_or_else(|| panic!("no MAC: {net0}"));
    assert!(
        first.starts_with("BC:24:11:") && first.len() == 17,
        "{net0}"
    );
    assert!(net0.ends_with(",bridge=vmbr0,firewall=1"), "{net0}");
    // A MAC that is named is kept, in either form.
    let r = sim
        .call_as(
            &sim.root(),
            "PUT",
            path,
            &[
                ("net0", &format!("virtio={first},bridge=vmbr0,firewall=1")),
                ("ciuser", "bosun"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(mac(&sim).1.as_deref(), Some(first.as_str()));
    start_vm(&sim, 320).await;
    let instance = sim.handle.vm_instance_id(320).unwrap();
    // The same configuration is the same instance; a new MAC is a new one.
    let r = sim
        .call_as(
            &sim.root(),
            "PUT",
            path,
            &[("net0", "virtio,bridge=vmbr0,firewall=1")],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let second = mac(&sim).1.unwrap();
    assert_ne!(second, first);
    assert_ne!(sim.handle.vm_instance_id(320).unwrap(), instance);
    let r = sim
        .call_as(
            &sim.root(),
            "PUT",
            path,
            &[(
                "net0",
                &format!("model=virtio,macaddr={first},bridge=vmbr0,firewall=1"),
            )],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(sim.handle.vm_instance_id(320).unwrap(), instance);
}

#[tokio::test]
async fn a_forced_restore_overwrites_a_stopped_vm_and_only_a_stopped_one() {
    let sim = start().await;
    restore_vm(&sim, &sim.root(), 303, "").await;
    let archive = sim.handle.add_vm_golden();
    let forced = [
        ("vmid", "303"),
        ("archive", archive.as_str()),
        ("storage", "local-lvm"),
        ("force", "1"),
    ];
    // Without force the vmid is taken.
    let r = sim
        .call_as(&sim.root(), "POST", "/nodes/pve/qemu", &forced[..3])
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "unable to restore VM 303 - VM 303 already exists on node 'pve'\n"
    );
    // A running VM is never overwritten.
    start_vm(&sim, 303).await;
    let r = sim
        .call_as(&sim.root(), "POST", "/nodes/pve/qemu", &forced)
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "unable to restore VM 303 - VM 303 is running\n"
    );
    let r = sim
        .call_as(&sim.root(), "POST", "/nodes/pve/qemu/303/status/stop", &[])
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    let before = sim.handle.vm_config(303).unwrap();
    let r = sim
        .call_as(&sim.root(), "POST", "/nodes/pve/qemu", &forced)
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    let after = sim.handle.vm_config(303).unwrap();
    assert!(!after.contains_key("lock"), "{after:?}");
    assert!(after.contains_key("scsi0"), "{after:?}");
    // Without unique=1 the restore keeps the archive's MAC.
    assert!(
        after["net0"].contains("BC:24:11:5E:A1:08"),
        "{after:?} (was {before:?})"
    );
    assert_eq!(sim.handle.vm_running(303), Some(false));
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn files_written_and_removed_inside_a_vm_are_what_its_agent_then_sees() {
    let sim = start().await;
    restore_vm(&sim, &sim.agent(), 330, "bosun").await;
    start_vm(&sim, 330).await;
    let check = "/etc/bosun/restore-check";
    assert!(
        sim.handle
            .write_vm_file(330, check, b"#!/bin/sh\nexit 0\n", 0o755)
    );
    assert_eq!(
        sim.handle.vm_file(330, check).map(|f| f.mode & 0o777),
        Some(0o755)
    );
    let r = sim
        .call(
            "POST",
            &agent_path(330, "exec"),
            &[
                ("command", "/usr/bin/test"),
                ("command", "-x"),
                ("command", check),
            ],
        )
        .await;
    let pid = r.data()["pid"].as_u64().expect("pid").to_string();
    let r = sim
        .call("GET", &agent_path(330, "exec-status"), &[("pid", &pid)])
        .await;
    assert_eq!(
        r.data()["exitcode"],
        0,
        "the written check is executable: {r:?}"
    );
    // The guest agent's program removed inside the VM: the agent no longer answers.
    assert!(sim.handle.remove_vm_file(330, "/usr/sbin/qemu-ga"));
    assert!(!sim.handle.remove_vm_file(330, "/usr/sbin/qemu-ga"));
    let r = sim.call("POST", &agent_path(330, "ping"), &[]).await;
    assert_eq!(r.message(), "QEMU guest agent is not running\n", "{r:?}");
    assert!(
        !sim.handle.write_vm_file(999, check, b"x", 0o644),
        "no such vm"
    );
    sim.handle.shutdown().await;
}

/// A VM's share and order as qemu-server takes them: `cpuunits` 1..=262144 (an integer, given
/// back as a number), `cpulimit` 0..=128 cores (a `number`, given back as the string sent),
/// `startup` in `pve-startup-order`, and a `netN`'s `rate=` (a `number` of at least 0) kept
/// inside the device as sent, its MAC kept. The container's ranges are wider (0..=500000 and
/// 0..=8192): what a container takes, a VM may refuse.
#[tokio::test]
async fn a_vms_share_and_order_are_checked_as_the_qemu_schema_types_them_and_given_back() {
    let sim = start().await;
    restore_vm(&sim, &sim.root(), 340, "").await;
    start_vm(&sim, 340).await;
    let path = "/nodes/pve/qemu/340/config";
    let before = sim.handle.vm_config(340).unwrap()["net0"].clone();
    let mac = before
        .split(',')
        .find_map(|p| p.strip_prefix("virtio="))
        .expect("a mac")
        .to_owned();
    let device = format!("virtio={mac},bridge=vmbr0,firewall=1,rate=12.5");
    let r = sim
        .call_as(
            &sim.root(),
            "PUT",
            path,
            &[
                ("cpuunits", "250"),
                ("cpulimit", "0.5"),
                ("startup", "order=2,up=0,down=60"),
                ("name", "vm-renamed"),
                ("net0", &device),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let d = sim.call_as(&sim.root(), "GET", path, &[]).await;
    let d = d.data();
    assert_eq!(d["cpuunits"], 250, "an integer option is a number");
    assert_eq!(d["cpulimit"], "0.5", "a number option stays a string");
    assert_eq!(d["startup"], "order=2,up=0,down=60");
    assert_eq!(d["name"], "vm-renamed");
    assert_eq!(
        d["net0"],
        device.as_str(),
        "the device as sent, its MAC kept"
    );
    assert_eq!(
        sim.handle.vm_running(340),
        Some(true),
        "applied to a running vm"
    );
    for (key, value) in [
        ("cpuunits", "0"),
        ("cpuunits", "262145"),
        ("cpulimit", "128.5"),
        ("cpulimit", "8192"),
        ("cpulimit", "-1"),
        ("cpulimit", "one"),
        ("startup", "sideways=1"),
        ("startup", "order=x"),
        ("name", "not_a_dns_name"),
        ("net0", "virtio,bridge=vmbr0,rate=-1"),
        ("net0", "virtio,bridge=vmbr0,rate=fast"),
        ("net0", "virtio,bridge=vmbr0,tag=4095"),
        ("net0", "virtio,bridge=vmbr0,speed=10"),
        ("net0", "tulip,bridge=vmbr0"),
        ("net0", "virtio=01:24:11:00:00:01,bridge=vmbr0"),
        ("net0", "virtio,bridge=vmbr0,firewall=maybe"),
    ] {
        let r = sim.call_as(&sim.root(), "PUT", path, &[(key, value)]).await;
        assert_eq!(r.status, 400, "{key}={value}: {r:?}");
        assert!(!r.error(key).is_empty(), "{key}={value}: {r:?}");
    }
    // The bounds themselves, and a rate of 0 (no limit), are taken.
    for (key, value) in [
        ("cpuunits", "1"),
        ("cpuunits", "262144"),
        ("cpulimit", "128"),
        ("cpulimit", "0"),
        ("net0", "virtio,bridge=vmbr0,rate=0"),
    ] {
        let r = sim.call_as(&sim.root(), "PUT", path, &[(key, value)]).await;
        assert_eq!(r.status, 200, "{key}={value}: {r:?}");
    }
    // Unchanged by every refusal: the last accepted values hold.
    let conf = sim.handle.vm_config(340).unwrap();
    assert_eq!(conf["cpulimit"], "0");
    assert_eq!(conf["startup"], "order=2,up=0,down=60");
    sim.handle.shutdown().await;
}
