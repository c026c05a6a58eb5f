//! `bulk_archive` end to end against the simulated node: the real `bosun-helper` runs `pct`
//! through a recording wrapper around the simulator's stand-in, so admission (`pct config
//! --current`, the stamp `pct pull`s) and the guest's own tar (`pct exec`) all reach the
//! simulated CT, whose files below the volume's mount point come back as the archive's bytes.
// Test harness code: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use bosun_proto::helper::{Output, Response};
use common::sim::{Node, wire};
use common::*;

const VMID: &str = "130";

/// Runs the simulator's `pct` stand-in (root@pam on the node) for the test's own setup.
fn pct(install: &Install, args: &[&str]) {
    let out = Command::new(install.bin.join("sim-pct"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "pct {args:?}: {out:?}");
}

/// Writes `bytes` to `dest` in the CT through `pct push`.
fn push(install: &Install, bytes: &[u8], dest: &str) {
    let host = install.dir.path().join("push.tmp");
    std::fs::write(&host, bytes).unwrap();
    pct(install, &["push", VMID, host.to_str().unwrap(), dest]);
}

#[test]
fn bulk_archive_tars_the_simulated_guests_volume_into_the_storage() {
    let (uid, _) = test_user();
    let node = Node::start();
    let install = Install::new(TEST_USER);
    wire(&install, &node, "pct");
    let root = install.dir.path().join("backup");
    let storage = root.join("usb");
    std::fs::create_dir_all(&storage).unwrap();
    for dir in [&root, &storage] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let extra = serde_json::json!({"backup_roots": [root]});
    install.write_config_with(TEST_USER, "/usr/sbin/blkid", extra);

    // A Bosun guest restored from the golden image, bound to DOC_GUEST, its bulk volume a
    // mount point at /srv/media holding two files (a third file lies outside it).
    let golden = node.sim.endpoint().golden_volid.clone();
    pct(
        &install,
        &["restore", VMID, &golden, "--storage", "local-lvm"],
    );
    pct(
        &install,
        &[
            "set",
            VMID,
            "-mp0",
            "/mnt/bulk/media,mp=/srv/media,backup=0",
        ],
    );
    pct(&install, &["start", VMID]);
    let dirs = ["/srv/media/films", "/etc/bosun-bootstrap"];
    pct(
        &install,
        &[&["exec", VMID, "--", "/usr/bin/mkdir", "-p"][..], &dirs].concat(),
    );
    let film: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    push(&install, &film, "/srv/media/films/a.mkv");
    push(&install, b"bulk data\n", "/srv/media/notes.txt");
    push(&install, b"not on the volume\n", "/srv/other.txt");
    let guest = uuid::Uuid::parse_str(DOC_GUEST).unwrap();
    let stamp = bosun_proto::helper::stamp::GuestStamp::sign(&GUEST_KEY, Some(guest), [9; 16]);
    push(&install, stamp.line().as_bytes(), GUEST_STAMP_PATH);

    let request = serde_json::json!({"verb": "bulk_archive", "args": {
        "vmid": 130, "guest_id": DOC_GUEST, "volume": "media", "path": "/srv/media",
        "storage_dir": storage, "keep_last": 3, "max_bytes": 10_000_000, "timeout_secs": 60,
    }});
    let call = install.run_as_sudo(
        &["bulk_archive"],
        uid,
        &serde_json::to_vec(&request).unwrap(),
    );
    let Response::Ok { output } = call.response() else {
        panic!("bulk_archive failed: {call:?}");
    };
    let Output::BulkArchived {
        archive,
        sha256,
        size,
        removed: 0,
    } = output
    else {
        panic!("{output:?}");
    };
    let archive = Path::new(&archive);
    let dir = storage.join("bosun-bulk").join(DOC_GUEST).join("media");
    assert_eq!(archive.parent(), Some(dir.as_path()));
    let bytes = std::fs::read(archive).unwrap();
    assert_eq!((sha256_hex(&bytes), bytes.len() as u64), (sha256, size));
    let listed = Command::new("tar")
        .arg("-tf")
        .arg(archive)
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        "./\n./films/\n./films/a.mkv\n./notes.txt\n"
    );
    let out = Command::new("tar")
        .args(["-xOf"])
        .arg(archive)
        .arg("./films/a.mkv")
        .output()
        .unwrap();
    assert_eq!(out.stdout, film);
    assert!(
        install
            .calls()
            .contains(&"pct [exec] [130] [--] [/usr/bin/tar] [--create] [--file=-] [--one-file-system] [--numeric-owner] [--exclude=./.bosun-restore-*] [--directory=/srv/media] [.]".to_owned()),
        "{:?}",
        install.calls()
    );
}
