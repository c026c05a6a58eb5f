use super::*;
use crate::files::debian_template;

fn argv(line: &str) -> Vec<String> {
    line.split(' ').map(str::to_owned).collect()
}

#[test]
fn the_recipe_commands_change_the_tree() {
    let mut tree = debian_template();
    let apt = "/usr/bin/env DEBIAN_FRONTEND=noninteractive /usr/bin/apt-get";
    let install = format!("{apt} install -y --no-install-recommends docker.io openssh-server");
    assert_eq!(
        run(&mut tree, &argv(&install)).exit,
        100,
        "no package lists yet"
    );
    assert_eq!(run(&mut tree, &argv(&format!("{apt} update"))).exit, 0);
    assert_eq!(run(&mut tree, &argv(&install)).exit, 0);
    assert!(tree.is_file("/usr/bin/docker"));
    assert!(tree.is_file("/etc/ssh/ssh_host_ed25519_key"));
    let out = run(
        &mut tree,
        &argv("/usr/bin/mkdir -p /var/lib/bosun-golden /etc/bosun-bootstrap"),
    );
    assert_eq!(out, Outcome::ok(""));
    assert_eq!(
        tree.get("/etc/bosun-bootstrap").map(|n| n.mode),
        Some(0o755)
    );
    let out = run(&mut tree, &argv("/usr/bin/systemctl enable docker.service"));
    assert_eq!(out.exit, 0, "{out:?}");
    assert!(matches!(
        tree.get("/etc/systemd/system/multi-user.target.wants/docker.service").map(|n| &n.kind),
        Some(Kind::Symlink(t)) if t == "/usr/lib/systemd/system/docker.service"
    ));
    let out = run(
        &mut tree,
        &argv("/usr/bin/find /etc/ssh -maxdepth 1 -name ssh_host_* -delete"),
    );
    assert_eq!(out.exit, 0, "{out:?}");
    assert!(
        tree.below("/etc/ssh", 1)
            .iter()
            .all(|p| !p.contains("ssh_host_"))
    );
    assert!(tree.is_file("/etc/ssh/sshd_config"));
    assert_eq!(
        run(&mut tree, &argv("/usr/bin/truncate -s 0 /etc/machine-id")).exit,
        0
    );
    assert_eq!(tree.content("/etc/machine-id"), Some(&b""[..]));
}

#[test]
fn failures_carry_the_programs_texts() {
    let mut tree = debian_template();
    let out = run(&mut tree, &argv("/usr/bin/docker load --input /x.tar"));
    assert_eq!(out.exit, 127, "docker is not installed: {out:?}");
    let out = run(&mut tree, &argv("/usr/bin/mkdir /no/such/dir"));
    assert_eq!(
        out.stderr,
        "mkdir: cannot create directory '/no/such/dir': No such file or directory\n"
    );
    let out = run(&mut tree, &argv("/usr/bin/rm /etc/nothing"));
    assert_eq!(out.exit, 1);
    assert_eq!(run(&mut tree, &argv("/usr/bin/rm -f /etc/nothing")).exit, 0);
    let out = run(&mut tree, &argv("/usr/bin/systemctl enable nope.service"));
    assert_eq!(
        out.stderr,
        "Failed to enable unit: Unit file nope.service does not exist.\n"
    );
    let out = run(&mut tree, &argv("/usr/bin/find /nope -delete"));
    assert_eq!(out.stderr, "find: '/nope': No such file or directory\n");
    let out = run(&mut tree, &argv("/usr/bin/systemctl start ssh.service"));
    assert!(
        out.exit != 0 && out.stderr.contains("not simulated"),
        "{out:?}"
    );
    assert_eq!(run(&mut tree, &[]).exit, 255);
}

#[test]
fn glob_matches_like_find_name() {
    assert!(glob(b"ssh_host_*", b"ssh_host_rsa_key.pub"));
    assert!(!glob(b"ssh_host_*", b"sshd_config"));
    assert!(glob(b"a?c", b"abc"));
}

#[test]
fn systemctl_restart_counts_an_existing_unit_and_refuses_an_unknown_one() {
    let mut tree = debian_template();
    tree.write(
        "/etc/systemd/system/bosun-bootstrap.service",
        b"[Service]\nExecStart=/bin/true\n".to_vec(),
        0o644,
    )
    .unwrap();
    let count = |tree: &FileTree| {
        tree.content("/run/bosun-pvesim/restarts/bosun-bootstrap.service")
            .map(|c| String::from_utf8_lossy(c).trim().to_owned())
    };
    assert_eq!(count(&tree), None);
    let restart = argv("/usr/bin/systemctl restart bosun-bootstrap.service");
    assert_eq!(run(&mut tree, &restart), Outcome::ok(""));
    assert_eq!(run(&mut tree, &restart), Outcome::ok(""));
    assert_eq!(count(&tree).as_deref(), Some("2"));
    let out = run(&mut tree, &argv("/usr/bin/systemctl restart nope.service"));
    assert_eq!(out.exit, 5, "{out:?}");
    assert!(
        out.stderr.contains("Unit nope.service not found"),
        "{out:?}"
    );
    assert_eq!(run(&mut tree, &argv("/usr/bin/systemctl restart")).exit, 1);
}

/// A data file, its checksum list and a restore check that verifies it, as bosun-guest
/// writes them at quiesce time.
fn with_restore_check(tree: &mut FileTree) {
    tree.mkdir_all("/srv/shop", 0o755).unwrap();
    tree.write("/srv/shop/orders.db", b"order 1\norder 2\n".to_vec(), 0o600)
        .unwrap();
    let sum = hex::encode(Sha256::digest(b"order 1\norder 2\n"));
    tree.mkdir_all("/var/lib/bosun-guest", 0o755).unwrap();
    tree.write(
        "/var/lib/bosun-guest/restore-check.sha256",
        format!("{sum}  /srv/shop/orders.db\n").into_bytes(),
        0o600,
    )
    .unwrap();
    tree.mkdir_all("/etc/bosun", 0o755).unwrap();
    tree.write(
        "/etc/bosun/restore-check",
        b"#!/bin/sh -e\n# the guest's own check\n\n/usr/bin/sha256sum --check --strict --quiet /var/lib/bosun-guest/restore-check.sha256\n".to_vec(),
        0o755,
    )
    .unwrap();
}

#[test]
fn a_restore_check_script_runs_its_lines_and_fails_on_damaged_data() {
    let mut tree = debian_template();
    assert_eq!(
        run(
            &mut tree,
            &argv("/usr/bin/test -x /etc/bosun/restore-check")
        )
        .exit,
        1,
        "not installed yet"
    );
    with_restore_check(&mut tree);
    assert_eq!(
        run(
            &mut tree,
            &argv("/usr/bin/test -x /etc/bosun/restore-check")
        )
        .exit,
        0
    );
    let out = run(&mut tree, &argv("/etc/bosun/restore-check"));
    assert_eq!(out, Outcome::ok(""), "whole data passes quietly");

    tree.write(
        "/srv/shop/orders.db",
        b"order 1\n\0\0\0\0\0\0\0\0".to_vec(),
        0o600,
    )
    .unwrap();
    let out = run(&mut tree, &argv("/etc/bosun/restore-check"));
    assert_eq!(out.exit, 1, "{out:?}");
    assert_eq!(out.stdout, "/srv/shop/orders.db: FAILED\n");
    assert_eq!(
        out.stderr,
        "sha256sum: WARNING: 1 computed checksum did NOT match\n"
    );

    tree.remove_file("/srv/shop/orders.db").unwrap();
    let out = run(&mut tree, &argv("/etc/bosun/restore-check"));
    assert_eq!(out.exit, 1, "{out:?}");
    assert_eq!(out.stdout, "/srv/shop/orders.db: FAILED open or read\n");
    assert!(
        out.stderr
            .contains("sha256sum: WARNING: 1 listed file could not be read"),
        "{out:?}"
    );

    // sh -e stops at the first failing line; without -e the last line's status counts.
    let script = |tree: &mut FileTree, text: &str, mode: u32| {
        tree.write("/etc/bosun/restore-check", text.as_bytes().to_vec(), 0o755)
            .unwrap();
        tree.set_attrs("/etc/bosun/restore-check", Some(mode), None, None);
        run(tree, &argv("/etc/bosun/restore-check"))
    };
    let out = script(
        &mut tree,
        "#!/bin/sh -e\n/usr/bin/test -e /nowhere\n/usr/bin/mkdir /tmp/after\n",
        0o755,
    );
    assert_eq!(out.exit, 1);
    assert!(!tree.is_dir("/tmp/after"));
    let out = script(
        &mut tree,
        "#!/bin/sh\n/usr/bin/test -e /nowhere\n/usr/bin/mkdir /tmp/after\n",
        0o755,
    );
    assert_eq!(out.exit, 0);
    assert!(tree.is_dir("/tmp/after"));
    let out = script(
        &mut tree,
        "#!/bin/sh\nset -e\nexit 3\n/usr/bin/mkdir /tmp/x\n",
        0o755,
    );
    assert_eq!(out.exit, 3);
    assert!(!tree.is_dir("/tmp/x"));
    // Shell syntax the simulator does not model fails and says so; so does a script that
    // cannot be executed or names a missing interpreter.
    let out = script(&mut tree, "#!/bin/sh\necho $HOME | cat\n", 0o755);
    assert_eq!(out.exit, 2);
    assert!(
        out.stderr.contains("shell syntax is not simulated"),
        "{out:?}"
    );
    assert_eq!(script(&mut tree, "#!/bin/sh\nexit 0\n", 0o644).exit, 126);
    assert_eq!(script(&mut tree, "#!/bin/bash\nexit 0\n", 0o755).exit, 127);
    // A script running itself stops at a bounded depth.
    let out = script(&mut tree, "#!/bin/sh -e\n/etc/bosun/restore-check\n", 0o755);
    assert_eq!(out.exit, 2, "{out:?}");
}

#[test]
fn sha256sum_checks_like_coreutils() {
    let mut tree = debian_template();
    with_restore_check(&mut tree);
    let out = run(
        &mut tree,
        &argv("/usr/bin/sha256sum --check /var/lib/bosun-guest/restore-check.sha256"),
    );
    assert_eq!(out, Outcome::ok("/srv/shop/orders.db: OK\n"));
    tree.write("/tmp/list", b"not a checksum line\n".to_vec(), 0o644)
        .unwrap();
    let out = run(&mut tree, &argv("/usr/bin/sha256sum -c /tmp/list"));
    assert_eq!(out.exit, 1);
    assert_eq!(
        out.stderr,
        "sha256sum: /tmp/list: no properly formatted checksum lines found\n"
    );
    let good = String::from_utf8(
        tree.content("/var/lib/bosun-guest/restore-check.sha256")
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    tree.write("/tmp/list", format!("{good}junk\n").into_bytes(), 0o644)
        .unwrap();
    let lenient = run(
        &mut tree,
        &argv("/usr/bin/sha256sum --check --quiet /tmp/list"),
    );
    assert_eq!(lenient.exit, 0, "{lenient:?}");
    assert!(lenient.stderr.contains("1 line is improperly formatted"));
    let strict = run(
        &mut tree,
        &argv("/usr/bin/sha256sum --check --strict /tmp/list"),
    );
    assert_eq!(strict.exit, 1, "{strict:?}");
    assert_eq!(
        run(&mut tree, &argv("/usr/bin/sha256sum -c /nowhere")).stderr,
        "sha256sum: /nowhere: No such file or directory\n"
    );
    assert_eq!(
        run(&mut tree, &argv("/usr/bin/sha256sum /tmp/list")).exit,
        1
    );
}
