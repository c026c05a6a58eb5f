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
