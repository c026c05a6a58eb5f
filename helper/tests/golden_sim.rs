//! `build_golden` end to end against the simulated node: the real `bosun-helper` runs the
//! recipe with `programs.pct` and `programs.vzdump` pointing at recording wrappers around
//! the simulator's stand-ins (`bosun-pvesim-pct`, `bosun-pvesim-vzdump`), so the exact
//! command lines are asserted and every one of them reaches the simulator, which runs them
//! as root@pam: the archive appears on the golden storage with the recipe's tree, the
//! builder is gone, and a failed step leaves no builder behind.
//!
//! The stand-ins come from the same target directory as this test (`cargo build -p
//! bosun-pvesim --bins`; `cargo nextest run --workspace` and `make test` build them).
// Test harness code: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

mod common;

use bosun_proto::helper::{Output, Response, VerbName};
use bosun_pvesim::{CliFault, SimHandle};
use common::sim::{Node, wire};
use common::*;

const VMID: u32 = 9000;

fn golden_archives(sim: &SimHandle) -> Vec<String> {
    sim.storage_volumes("local")
        .into_iter()
        .filter(|v| {
            v.starts_with(&format!("local:backup/vzdump-lxc-{VMID}-")) && v.ends_with(".tar.zst")
        })
        .collect()
}

#[test]
fn build_golden_builds_an_archive_on_the_simulated_node() {
    let (uid, _) = test_user();
    let node = Node::start();
    let install = Install::new(TEST_USER);
    wire(&install, &node, "pct");
    wire(&install, &node, "vzdump");
    let seeded_archives = golden_archives(&node.sim);

    let call = install.run_as_sudo(&["build_golden"], uid, &golden_request());
    let Response::Ok { output } = call.response() else {
        panic!("build_golden failed: {call:?}");
    };
    // The simulated storage holds no file under this install's dump root, so there is
    // nothing the helper could hash.
    let Output::GoldenBuilt {
        vmid,
        archive,
        sha256: None,
        size: None,
    } = output
    else {
        panic!("{output:?}");
    };
    assert_eq!(vmid.get(), VMID);
    assert_eq!(install.calls(), expected_golden_calls(&install));
    assert_eq!(call.audit()["verb"], VerbName::BuildGolden.as_str());

    // One new archive on the golden storage; the path the helper read from vzdump's log
    // is that archive's file.
    let built: Vec<String> = golden_archives(&node.sim)
        .into_iter()
        .filter(|v| !seeded_archives.contains(v))
        .collect();
    assert_eq!(built.len(), 1, "{built:?}");
    let volid = &built[0];
    let file = volid.strip_prefix("local:backup/").unwrap();
    assert_eq!(
        archive.as_deref(),
        Some(format!("/var/lib/vz/dump/{file}").as_str())
    );

    // The archive holds the recipe's tree.
    let sim = &node.sim;
    for unit in bosun_proto::helper::recipe::GOLDEN_UNITS {
        let installed = sim
            .archive_file(volid, &format!("/etc/systemd/system/{unit}"))
            .unwrap_or_else(|| panic!("{unit} missing from {volid}"));
        let shipped = std::fs::read(install.golden_dir.join(unit)).unwrap();
        assert_eq!((installed.content, installed.mode), (shipped, 0o644));
    }
    // Keys only, and the keys file the controller writes from the bootstrap (decision 0107).
    let (drop_in, destination) = bosun_proto::helper::recipe::GOLDEN_SSHD_DROP_IN;
    let installed = sim
        .archive_file(volid, destination)
        .unwrap_or_else(|| panic!("{destination} missing from {volid}"));
    let shipped = std::fs::read(install.golden_dir.join(drop_in)).unwrap();
    assert_eq!((&installed.content, installed.mode), (&shipped, 0o644));
    let text = String::from_utf8(shipped).unwrap();
    assert!(text.contains("\nPasswordAuthentication no\n"), "{text}");
    assert!(
        text.contains("\nAuthorizedKeysFile .ssh/authorized_keys /etc/bosun/authorized_keys/%u\n"),
        "{text}"
    );
    for unit in bosun_proto::helper::recipe::GOLDEN_ENABLED {
        let target = if unit.ends_with(".path") {
            "paths.target"
        } else {
            "multi-user.target"
        };
        let wanted = format!("/etc/systemd/system/{target}.wants/{unit}");
        let link = sim.archive_file(volid, &wanted);
        assert_eq!(link.map(|l| l.kind), Some("symlink".into()), "{wanted}");
    }
    let bootstrap = sim
        .archive_file(volid, "/etc/bosun-bootstrap")
        .expect("bootstrap dir");
    assert_eq!(bootstrap.kind, "dir");
    assert!(
        sim.archive_file(volid, "/etc/ssh/ssh_host_ed25519_key")
            .is_none(),
        "host keys removed"
    );
    assert!(sim.archive_file(volid, "/etc/ssh/sshd_config").is_some());
    assert_eq!(
        sim.archive_file(volid, "/etc/machine-id").unwrap().content,
        b""
    );
    // The signed archive stays beside the stamp, where restarts measure it (decision 0102).
    assert_eq!(
        sim.archive_file(volid, "/etc/bosun-bootstrap/controller-image.tar")
            .unwrap()
            .content,
        IMAGE_ARCHIVE_BYTES
    );
    let images = sim
        .archive_file(volid, "/var/lib/docker/bosun-sim-images")
        .expect("docker state");
    assert!(
        String::from_utf8_lossy(&images.content)
            .contains("tag bosun/controller:golden registry.example/bosun/controller:1.4.2")
    );

    // The builder is gone, and every step reached the node as root@pam.
    assert!(!sim.guest_ids().contains(&VMID), "builder left behind");
    let log = sim.requests();
    assert!(log.iter().all(|r| r.token_id.is_none()), "{log:?}");
    let seen: Vec<(&str, &str)> = log
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str()))
        .collect();
    for expected in [
        ("POST", "/nodes/pve/lxc"),
        ("POST", "/nodes/pve/lxc/9000/status/start"),
        ("CLI", "pct exec"),
        ("CLI", "pct push"),
        ("POST", "/nodes/pve/lxc/9000/status/shutdown"),
        ("POST", "/nodes/pve/vzdump"),
        ("DELETE", "/nodes/pve/lxc/9000"),
    ] {
        assert!(seen.contains(&expected), "{expected:?} not in {seen:?}");
    }
    assert_eq!(
        log.len(),
        expected_golden_calls(&install).len(),
        "one request per command: {seen:?}"
    );
    assert!(log.iter().all(|r| r.status == 200), "{log:?}");

    // The built archive restores into a CT with that tree.
    let restore = node
        .runtime
        .block_on(sim.cli(
            "pct",
            &[
                "restore",
                "120",
                volid,
                "--storage",
                "local-lvm",
                "--unique",
                "1",
            ],
            None,
        ))
        .unwrap();
    assert_eq!(restore.exit, 0, "{restore:?}");
    assert!(
        sim.guest_file(120, "/etc/systemd/system/bosun-bootstrap.service")
            .is_some()
    );
    assert_eq!(
        sim.guest_file(120, "/etc/bosun-bootstrap").unwrap().kind,
        "dir"
    );
}

#[test]
fn a_failed_step_on_the_node_leaves_no_builder_behind() {
    let (uid, _) = test_user();
    let node = Node::start();
    let install = Install::new(TEST_USER);
    wire(&install, &node, "pct");
    wire(&install, &node, "vzdump");
    node.sim.set_cli_faults(vec![CliFault {
        program: "pct".into(),
        args: ["exec", "*", "--", "/usr/bin/docker", "load"]
            .map(String::from)
            .to_vec(),
        exit: 1,
        message: "Error response from daemon: unexpected EOF".into(),
    }]);
    let seeded_archives = golden_archives(&node.sim);

    let call = install.run_as_sudo(&["build_golden"], uid, &golden_request());
    assert_failed_at_docker_load(&install, &call, "unexpected EOF");
    assert!(!node.sim.guest_ids().contains(&VMID), "builder left behind");
    assert_eq!(
        golden_archives(&node.sim),
        seeded_archives,
        "no archive from a failed build"
    );
    let log = node.sim.requests();
    let last: Vec<(&str, &str, u16)> = log
        .iter()
        .rev()
        .take(3)
        .map(|r| (r.method.as_str(), r.path.as_str(), r.status))
        .collect();
    assert_eq!(
        last,
        vec![
            ("DELETE", "/nodes/pve/lxc/9000", 200),
            ("POST", "/nodes/pve/lxc/9000/status/stop", 200),
            ("CLI", "pct exec", 500),
        ]
    );
}
