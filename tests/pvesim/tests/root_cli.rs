//! Root's CLI on the node (`pct create|start|push|exec|shutdown|destroy`, `vzdump`) and the
//! CT file trees it changes: pushed files with PVE's rules, snapshots and rollbacks that
//! carry the files, archives that hold them and restores that bring them back.

use crate::common;

use bosun_pvesim::{CliFault, CliOutput, DEBIAN_TEMPLATE};
use common::{Sim, start};

const CREATE: &[&str] = &[
    "--hostname",
    "builder",
    "--unprivileged",
    "1",
    "--features",
    "nesting=1,keyctl=1",
    "--ostype",
    "debian",
    "--rootfs",
    "local-lvm:8",
    "--net0",
    "name=eth0,bridge=vmbr0,ip=dhcp",
];

async fn pct(sim: &Sim, args: &[&str]) -> CliOutput {
    sim.handle
        .cli("pct", args, None)
        .await
        .expect("valid usage")
}

async fn push(sim: &Sim, args: &[&str], content: &[u8]) -> CliOutput {
    sim.handle
        .cli("pct", args, Some(content))
        .await
        .expect("valid usage")
}

fn ok(out: &CliOutput) {
    assert_eq!(out.exit, 0, "{out:?}");
}

fn failed(out: &CliOutput, stderr: &str) {
    assert_eq!(out.exit, 255, "{out:?}");
    assert_eq!(out.stderr, format!("{stderr}\n"));
}

/// `pct create <vmid>` from the seeded Debian template, then `pct start`.
async fn create_running(sim: &Sim, vmid: u32) {
    let id = vmid.to_string();
    let mut args = vec!["create", id.as_str(), DEBIAN_TEMPLATE];
    args.extend_from_slice(CREATE);
    let out = pct(sim, &args).await;
    ok(&out);
    assert!(
        out.stdout
            .contains("Creating SSH host key 'ssh_host_ed25519_key'"),
        "{out:?}"
    );
    ok(&pct(sim, &["start", &id]).await);
}

#[tokio::test]
async fn create_from_the_template_runs_as_root_with_keyctl_and_is_logged_as_root() {
    let sim = start().await;
    create_running(&sim, 9000).await;
    let config = sim.handle.guest_config(9000).expect("created");
    assert_eq!(config["features"], "nesting=1,keyctl=1");
    assert_eq!(config["hostname"], "builder");
    assert!(config["rootfs"].starts_with("local-lvm:vm-9000-disk-0"));
    assert_eq!(sim.handle.guest_running(9000), Some(true));
    // The template's tree, with host keys of its own.
    assert!(sim.handle.guest_file(9000, "/usr/bin/apt-get").is_some());
    let key = sim
        .handle
        .guest_file(9000, "/etc/ssh/ssh_host_rsa_key")
        .expect("generated");
    assert_eq!((key.mode, key.uid), (0o600, 0));

    let log = sim.handle.requests();
    let create = &log[0];
    assert_eq!(
        (create.method.as_str(), create.path.as_str()),
        ("POST", "/nodes/pve/lxc")
    );
    assert_eq!(create.token_id, None, "root@pam, not a token");
    assert!(
        create
            .params
            .contains(&("ostemplate".into(), DEBIAN_TEMPLATE.into()))
    );
    assert_eq!(log[1].path, "/nodes/pve/lxc/9000/status/start");

    // The same create through a token is refused (keyctl is root@pam's), as through /api2.
    let root_token = sim.root();
    let r = sim
        .call_as(
            &root_token,
            "POST",
            "/nodes/pve/lxc",
            &[
                ("vmid", "9001"),
                ("ostemplate", DEBIAN_TEMPLATE),
                ("features", "nesting=1,keyctl=1"),
                ("rootfs", "local-lvm:8"),
            ],
        )
        .await;
    assert_eq!(r.status, 403, "{r:?}");
    // An unknown template is the route's error, printed by pct.
    let out = pct(&sim, &["create", "9002", "local:vztmpl/nope.tar.zst"]).await;
    failed(&out, "volume 'local:vztmpl/nope.tar.zst' does not exist");
}

#[tokio::test]
async fn push_follows_pves_rules_for_running_cts_parents_modes_and_owners() {
    let sim = start().await;
    let id = "9010";
    let mut args = vec!["create", id, DEBIAN_TEMPLATE];
    args.extend_from_slice(CREATE);
    ok(&pct(&sim, &args).await);
    let dest = "/etc/bosun-bootstrap/bootstrap.json";
    let file_args = [
        "push",
        id,
        "/staging/b.json",
        dest,
        "--perms",
        "0600",
        "--user",
        "0",
        "--group",
        "0",
    ];

    failed(
        &push(&sim, &file_args, b"{}").await,
        "can only push files to a running CT",
    );
    ok(&pct(&sim, &["start", id]).await);
    failed(
        &push(&sim, &file_args, b"{}").await,
        &format!("failed to create file: {dest}: No such file or directory"),
    );
    ok(&pct(
        &sim,
        &[
            "exec",
            id,
            "--",
            "/usr/bin/mkdir",
            "-p",
            "-m",
            "0700",
            "/etc/bosun-bootstrap",
        ],
    )
    .await);
    ok(&push(&sim, &file_args, b"{\"token\":\"first, long\"}").await);
    let file = sim.handle.guest_file(9010, dest).expect("pushed");
    assert_eq!((file.mode, file.uid, file.gid), (0o600, 0, 0));
    assert_eq!(file.content, b"{\"token\":\"first, long\"}");
    // An existing file is truncated; perms without the leading 0 are octal.
    ok(&push(&sim, &["push", id, "/s", dest, "--perms", "640"], b"{}").await);
    let file = sim.handle.guest_file(9010, dest).expect("still there");
    assert_eq!((file.content.as_slice(), file.mode), (&b"{}"[..], 0o640));
    // A new file without --perms gets 0644; names resolve in the guest's own databases.
    ok(&push(
        &sim,
        &[
            "push",
            id,
            "/s",
            "/etc/motd",
            "--user",
            "root",
            "--group",
            "nogroup",
        ],
        b"hi",
    )
    .await);
    let motd = sim.handle.guest_file(9010, "/etc/motd").expect("pushed");
    assert_eq!((motd.mode, motd.uid, motd.gid), (0o644, 0, 65534));
    failed(
        &push(
            &sim,
            &["push", id, "/s", "/etc/motd", "--user", "bosun"],
            b"x",
        )
        .await,
        "failed to get uid for: bosun",
    );
    failed(
        &push(
            &sim,
            &["push", id, "/s", "/etc/motd", "--perms", "rw"],
            b"x",
        )
        .await,
        "invalid mode: '0rw'",
    );
    failed(
        &push(&sim, &["push", "9999", "/s", "/etc/motd"], b"x").await,
        "Configuration file 'nodes/pve/lxc/9999.conf' does not exist",
    );
    // pct refuses a push without the file's content (the stand-in always sends it).
    assert!(
        sim.handle
            .cli("pct", &["push", id, "/s", "/etc/x"], None)
            .await
            .is_err()
    );

    let pushes: Vec<_> = sim
        .handle
        .requests()
        .into_iter()
        .filter(|r| r.method == "CLI" && r.path == "pct push")
        .collect();
    assert_eq!(pushes.len(), 8, "{pushes:?}");
    assert!(pushes.iter().all(|r| r.token_id.is_none()));
    assert_eq!(pushes.iter().filter(|r| r.status == 200).count(), 3);
}

#[tokio::test]
async fn exec_runs_only_modelled_programs_on_a_running_ct() {
    let sim = start().await;
    create_running(&sim, 9020).await;
    let out = pct(
        &sim,
        &[
            "exec",
            "9020",
            "--",
            "/usr/bin/docker",
            "load",
            "--input",
            "/x",
        ],
    )
    .await;
    assert_eq!(out.exit, 127, "docker is not installed yet: {out:?}");
    let apt = [
        "exec",
        "9020",
        "--",
        "/usr/bin/env",
        "DEBIAN_FRONTEND=noninteractive",
        "/usr/bin/apt-get",
    ];
    let install = [&apt[..], &["install", "-y", "docker.io"]].concat();
    assert_eq!(
        pct(&sim, &install).await.exit,
        100,
        "no package lists before update"
    );
    ok(&pct(&sim, &[&apt[..], &["update"]].concat()).await);
    ok(&pct(&sim, &install).await);
    assert!(sim.handle.guest_file(9020, "/usr/bin/docker").is_some());
    let out = pct(&sim, &["exec", "9020", "--", "/usr/bin/bash", "-c", "true"]).await;
    assert_eq!(out.exit, 127, "{out:?}");
    let out = pct(
        &sim,
        &["exec", "9020", "--", "/usr/bin/systemctl", "reload", "ssh"],
    )
    .await;
    assert!(
        out.exit != 0 && out.stderr.contains("not simulated"),
        "{out:?}"
    );

    ok(&pct(&sim, &["shutdown", "9020", "--timeout", "120"]).await);
    failed(
        &pct(
            &sim,
            &["exec", "9020", "--", "/usr/bin/rm", "-f", "/etc/motd"],
        )
        .await,
        "container '9020' not running!",
    );
    let execs = sim
        .handle
        .requests()
        .into_iter()
        .filter(|r| r.path == "pct exec")
        .count();
    assert_eq!(execs, 7);
}

#[tokio::test]
async fn snapshots_capture_the_files_and_rollback_brings_the_old_file_back() {
    let sim = start().await;
    create_running(&sim, 9030).await;
    let path = "/etc/bosun-note";
    ok(&push(&sim, &["push", "9030", "/s", path], b"before").await);
    let root = sim.root();
    let r = sim
        .call_as(
            &root,
            "POST",
            "/nodes/pve/lxc/9030/snapshot",
            &[("snapname", "s1")],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    ok(&push(&sim, &["push", "9030", "/s", path], b"after").await);
    ok(&push(&sim, &["push", "9030", "/s", "/etc/new-file"], b"new").await);
    assert_eq!(sim.handle.guest_file(9030, path).unwrap().content, b"after");

    let r = sim
        .call_as(
            &root,
            "POST",
            "/nodes/pve/lxc/9030/snapshot/s1/rollback",
            &[],
        )
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    assert_eq!(
        sim.handle.guest_file(9030, path).unwrap().content,
        b"before"
    );
    assert!(sim.handle.guest_file(9030, "/etc/new-file").is_none());
}

#[tokio::test]
async fn vzdump_archives_the_tree_and_a_restore_brings_it_back_then_destroy_drops_it() {
    let sim = start().await;
    create_running(&sim, 9040).await;
    ok(&pct(
        &sim,
        &[
            "exec",
            "9040",
            "--",
            "/usr/bin/mkdir",
            "-p",
            "/etc/bosun-bootstrap",
        ],
    )
    .await);
    ok(&push(
        &sim,
        &[
            "push",
            "9040",
            "/s",
            "/etc/systemd/system/x.service",
            "--perms",
            "0644",
        ],
        b"[Unit]\n",
    )
    .await);
    ok(&pct(&sim, &["shutdown", "9040"]).await);

    let out = sim
        .handle
        .cli(
            "vzdump",
            &[
                "9040",
                "--storage",
                "local",
                "--mode",
                "stop",
                "--compress",
                "zstd",
            ],
            None,
        )
        .await
        .expect("valid usage");
    ok(&out);
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("INFO: creating vzdump archive '/var/lib/vz/dump/vzdump-lxc-9040-"))
        .unwrap_or_else(|| panic!("no archive line: {out:?}"));
    assert!(line.ends_with(".tar.zst'"), "{line}");
    let volid = sim
        .handle
        .storage_volumes("local")
        .into_iter()
        .find(|v| v.starts_with("local:backup/vzdump-lxc-9040-"))
        .expect("archive on local");
    let unit = sim
        .handle
        .archive_file(&volid, "/etc/systemd/system/x.service")
        .expect("in the archive");
    assert_eq!(
        (unit.content.as_slice(), unit.mode),
        (&b"[Unit]\n"[..], 0o644)
    );
    let logged = sim
        .handle
        .requests()
        .into_iter()
        .find(|r| r.path == "/nodes/pve/vzdump")
        .expect("logged");
    assert_eq!(logged.token_id, None);

    ok(&pct(&sim, &["destroy", "9040", "--purge", "1"]).await);
    assert!(sim.handle.guest_config(9040).is_none());
    assert!(
        sim.handle.guest_file(9040, "/").is_none(),
        "destroy drops the tree"
    );

    // The agent restores it with its token; the CT has the archived tree.
    let r = sim.restore("120", &volid, &[("unique", "1")]).await;
    assert_eq!(
        sim.wait(&r.upid()).await,
        "OK",
        "{:?}",
        sim.handle.task_log(&r.upid())
    );
    assert!(
        sim.handle
            .guest_file(120, "/etc/systemd/system/x.service")
            .is_some()
    );
    assert!(sim.handle.guest_file(120, "/etc/bosun-bootstrap").is_some());
    assert!(
        sim.handle
            .guest_file(120, "/etc/ssh/ssh_host_rsa_key")
            .is_some(),
        "a restore keeps the archive's keys"
    );
}

#[tokio::test]
async fn the_seeded_golden_archive_has_the_recipes_tree() {
    let sim = start().await;
    sim.restore_golden(130).await;
    let dir = sim
        .handle
        .guest_file(130, "/etc/bosun-bootstrap")
        .expect("bootstrap dir");
    assert_eq!((dir.kind.as_str(), dir.mode, dir.uid), ("dir", 0o700, 0));
    for unit in ["bosun-ssh-hostkeys.service", "bosun-bootstrap.service"] {
        let file = sim
            .handle
            .guest_file(130, &format!("/etc/systemd/system/{unit}"))
            .unwrap_or_else(|| panic!("{unit}"));
        assert_eq!(file.mode, 0o644);
        assert!(String::from_utf8_lossy(&file.content).contains("[Install]"));
        let wanted = format!("/etc/systemd/system/multi-user.target.wants/{unit}");
        assert_eq!(
            sim.handle.guest_file(130, &wanted).expect("enabled").kind,
            "symlink"
        );
    }
    assert!(
        sim.handle
            .guest_paths(130, "/etc/ssh")
            .iter()
            .all(|p| !p.contains("ssh_host_"))
    );
    assert_eq!(
        sim.handle
            .guest_file(130, "/etc/machine-id")
            .unwrap()
            .content,
        b""
    );
    let images = sim
        .handle
        .guest_file(130, "/var/lib/docker/bosun-sim-images")
        .expect("docker state");
    assert!(String::from_utf8_lossy(&images.content).contains("tag bosun/controller:golden"));
}

#[tokio::test]
async fn injected_cli_failures_change_nothing_and_are_logged() {
    let sim = start().await;
    create_running(&sim, 9050).await;
    sim.handle.set_cli_faults(vec![CliFault {
        program: "pct".into(),
        args: vec![
            "exec".into(),
            "*".into(),
            "--".into(),
            "/usr/bin/mkdir".into(),
        ],
        exit: 1,
        message: "mkdir: cannot create directory: Read-only file system".into(),
    }]);
    let out = pct(&sim, &["exec", "9050", "--", "/usr/bin/mkdir", "/etc/x"]).await;
    assert_eq!(out.exit, 1);
    assert_eq!(
        out.stderr,
        "mkdir: cannot create directory: Read-only file system\n"
    );
    assert!(sim.handle.guest_file(9050, "/etc/x").is_none());
    let last = sim.handle.requests().pop().expect("logged");
    assert_eq!((last.path.as_str(), last.status), ("pct exec", 500));
    sim.handle.set_cli_faults(Vec::new());
    ok(&pct(&sim, &["exec", "9050", "--", "/usr/bin/mkdir", "/etc/x"]).await);
}

#[tokio::test]
async fn config_prints_the_current_config_as_key_value_lines() {
    let sim = start().await;
    create_running(&sim, 9002).await;
    ok(&pct(&sim, &["set", "9002", "--description", "shop\nline two"]).await);
    let out = pct(&sim, &["config", "9002", "--current"]).await;
    ok(&out);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[..2], ["#shop", "#line two"], "{out:?}");
    assert!(lines.contains(&"hostname: builder"), "{out:?}");
    assert!(lines.contains(&"features: nesting=1,keyctl=1"), "{out:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("net0: name=eth0,bridge=vmbr0,") && l.contains("ip=dhcp")),
        "{out:?}"
    );
    assert!(!out.stdout.contains("digest"), "{out:?}");
    let keys: Vec<&str> = lines[2..]
        .iter()
        .filter_map(|l| l.split_once(": ").map(|(k, _)| k))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(keys, sorted, "in key order");
    // Logged as root's read of the config.
    assert!(sim.handle.requests().iter().any(|r| r.method == "GET"
        && r.path == "/nodes/pve/lxc/9002/config"
        && r.params == [("current".to_owned(), "1".to_owned())]
        && r.token_id.is_none()));
    // A missing CT fails like pct, and an unknown option is a usage error.
    let out = pct(&sim, &["config", "9999"]).await;
    assert_eq!(out.exit, 255, "{out:?}");
    assert!(out.stderr.contains("does not exist"), "{out:?}");
    assert!(
        sim.handle
            .cli("pct", &["config", "9002", "--snapshot", "s"], None)
            .await
            .is_err()
    );
    sim.handle.shutdown().await;
}
