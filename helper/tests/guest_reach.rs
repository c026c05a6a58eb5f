//! Decision 0048, the way a compromised agent tries it: the real helper called directly as the
//! agent's user, asked to enter guests that are not Bosun's, another customer's, a restore
//! test's scratch copy, one whose stamp a guest root forged, one with another guest's volume
//! mounted over the stamp's directory. Guests are directory trees behind a recording `pct`;
//! what changed inside each is counted.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use bosun_proto::helper::Response;
use common::*;

/// The other customer's guest id.
const OTHER: &str = "7c1d2e3f-4a5b-4c6d-8e7f-901a2b3c4d5e";

/// Every file of guest `vmid` and its bytes.
fn tree(install: &Install, vmid: u32) -> BTreeMap<String, Vec<u8>> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, out);
            } else {
                let name = path.strip_prefix(root).unwrap().display().to_string();
                out.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    let root = install.guest_root(vmid);
    walk(&root, &root, &mut out);
    out
}

/// How many files differ between two trees.
fn changed(a: &BTreeMap<String, Vec<u8>>, b: &BTreeMap<String, Vec<u8>>) -> usize {
    let names: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    names.into_iter().filter(|n| a.get(*n) != b.get(*n)).count()
}

/// A guest with six SSH host keys, a machine id and (for Bosun's) a bootstrap of its own.
fn populate(install: &Install, vmid: u32, bootstrap: Option<&str>) {
    for kind in ["rsa", "ecdsa", "ed25519"] {
        for ext in ["", ".pub"] {
            let path = format!("/etc/ssh/ssh_host_{kind}_key{ext}");
            install.write_guest_file(vmid, &path, kind.as_bytes());
        }
    }
    install.write_guest_file(
        vmid,
        "/etc/machine-id",
        b"4f1c0b5a9d2e4e7f8a6b3c2d1e0f9a8b\n",
    );
    if let Some(guest) = bootstrap {
        let doc = bootstrap_document().replace(DOC_GUEST, guest);
        install.write_guest_file(vmid, "/etc/bosun-bootstrap/bootstrap.json", doc.as_bytes());
    }
}

/// A `pct exec` that does in the guest's tree what the fixed commands do.
const GUEST_PROGRAMS: &str = r#"case "$1" in
/usr/bin/systemctl) echo restarted >> "$g/$v/var/log/restarts" 2>/dev/null || { mkdir -p "$g/$v/var/log"; echo restarted >> "$g/$v/var/log/restarts"; } ;;
/usr/bin/find) rm -f "$g/$v/etc/ssh/"ssh_host_* ;;
/usr/bin/truncate) : > "$g/$v/etc/machine-id" ;;
/usr/bin/test) [ -f "$g/$v/etc/bosun/restore-check" ] ;;
/etc/bosun/restore-check) echo checked ;;
/usr/bin/tar) echo archived >> "$g/$v/var/log/archives" ;;
esac"#;

fn request(verb: &str, vmid: u32) -> Vec<u8> {
    let args = match verb {
        "push_bootstrap" => serde_json::json!({"vmid": vmid, "document": bootstrap_document()}),
        "restore_check" => serde_json::json!({"vmid": vmid, "timeout_secs": 30}),
        // A's volume: only A's own guest may be archived for A.
        "bulk_archive" => serde_json::json!({
            "vmid": vmid, "guest_id": DOC_GUEST, "volume": "media", "path": "/srv/media",
            "storage_dir": "/var/lib/vz", "keep_last": 1, "max_bytes": 1_000_000, "timeout_secs": 30,
        }),
        _ => serde_json::json!({"vmid": vmid}),
    };
    serde_json::to_vec(&serde_json::json!({"verb": verb, "args": args})).unwrap()
}

const VERBS: [&str; 5] = [
    "push_bootstrap",
    "restart_controller",
    "reset_guest_identity",
    "restore_check",
    "bulk_archive",
];

#[test]
fn no_guest_verb_enters_a_guest_that_is_not_this_hosts_bosun_guest_for_it() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    install.guest_pct(GUEST_PROGRAMS);
    // 300: a guest Bosun never created (no stamp). 301: customer A's (bound to A).
    // 302: customer B's. 303: a restore test's scratch copy of B (B's stamp, scratch marks).
    // 304: another host's image (a stamp under another key). 305: B's root rebound its own
    // stamp to A. 306: a guest without a stamp, another Bosun guest's volume over its
    // /etc/bosun-bootstrap (its stamp valid).
    populate(&install, 300, None);
    for (vmid, guest) in [(301, DOC_GUEST), (302, OTHER), (303, OTHER), (305, OTHER)] {
        populate(&install, vmid, Some(guest));
        install.stamp_guest(vmid, Some(guest));
    }
    install.guest_config(
        303,
        "hostname: restore-test-303\nnet0: name=eth0,bridge=vmbr0,link_down=1\nrootfs: local-lvm:vm-303-disk-0\n",
    );
    populate(&install, 304, Some(DOC_GUEST));
    install.stamp_guest_with(304, &[3; 32], Some(DOC_GUEST));
    let forged = String::from_utf8(install.guest_file(305, GUEST_STAMP_PATH).unwrap())
        .unwrap()
        .replace(OTHER, DOC_GUEST);
    install.write_guest_file(305, GUEST_STAMP_PATH, forged.as_bytes());
    populate(&install, 306, None);
    install.stamp_guest(306, Some(DOC_GUEST));
    install.guest_config(
        306,
        "hostname: files\nmp0: local-lvm:vm-301-disk-1,mp=/etc/bosun-bootstrap/\n",
    );

    // (verb, guest, why it is refused); everything else of VERBS × guests is tried below.
    let mut refused = Vec::new();
    for vmid in [300, 302, 303, 304, 305, 306] {
        for verb in VERBS {
            let allowed = match (verb, vmid) {
                // A's bootstrap into B's guest is refused below for its binding; the others
                // enter B's own guest, which is Bosun's.
                // A's bulk archive of B's guest is refused for its binding too.
                (_, 302) => !matches!(verb, "push_bootstrap" | "restore_check" | "bulk_archive"),
                // The scratch guest takes restore_check alone.
                ("restore_check", 303) => true,
                _ => false,
            };
            let before = tree(&install, vmid);
            let call = install.run_as_sudo(&[verb], uid, &request(verb, vmid));
            let after = tree(&install, vmid);
            if allowed {
                assert!(
                    matches!(call.response(), Response::Ok { .. }),
                    "{verb} {vmid}: {call:?}"
                );
                continue;
            }
            let message = expect_refused(&call, "conflict");
            assert_eq!(
                changed(&before, &after),
                0,
                "{verb} {vmid} changed the guest: {message}"
            );
            refused.push(format!("{verb} {vmid}: {message}"));
        }
    }
    eprintln!(
        "refused, nothing changed inside the guest:\n  {}",
        refused.join("\n  ")
    );
    let reason = |verb: &str, vmid: u32| {
        refused
            .iter()
            .find(|r| r.starts_with(&format!("{verb} {vmid}:")))
            .cloned()
            .unwrap_or_default()
    };
    assert!(reason("reset_guest_identity", 300).contains("it has no stamp"));
    assert!(reason("push_bootstrap", 302).contains(&format!("bound to guest {OTHER}")));
    assert!(reason("push_bootstrap", 303).contains("scratch guest"));
    assert!(reason("restart_controller", 303).contains("scratch guest"));
    assert!(reason("restart_controller", 304).contains("stamped with key"));
    assert!(reason("push_bootstrap", 305).contains("MAC does not verify"));
    assert!(reason("bulk_archive", 302).contains(&format!("bound to guest {OTHER}")));
    assert!(reason("bulk_archive", 303).contains("scratch guest"));
    assert!(reason("reset_guest_identity", 306).contains("mount point mp0 covers"));
    assert!(reason("restore_check", 300).contains("hostname is not restore-test-300"));
    // 6 guests × 5 verbs, less B's own guest for restart and reset and the scratch guest's
    // restore check.
    assert_eq!(refused.len(), 27, "{refused:#?}");
    // Nothing but the admission steps ran: no exec, no push anywhere but in 302 and 303.
    let acting: Vec<String> = install
        .acting_calls()
        .into_iter()
        .filter(|c| !c.contains("[302]") && !c.contains("[303]"))
        .collect();
    assert!(acting.is_empty(), "{acting:#?}");

    // A's own guest takes all of them; its bootstrap is written, the others change what
    // each verb changes and nothing else.
    let before = tree(&install, 301);
    for verb in [
        "push_bootstrap",
        "restart_controller",
        "reset_guest_identity",
    ] {
        let call = install.run_as_sudo(&[verb], uid, &request(verb, 301));
        assert!(
            matches!(call.response(), Response::Ok { .. }),
            "{verb}: {call:?}"
        );
    }
    let after = tree(&install, 301);
    // Six host keys gone, the machine id emptied, one restart logged; the bootstrap is byte
    // for byte the one there (A's), the stamp unchanged.
    assert_eq!(changed(&before, &after), 8);
    assert_eq!(
        after["etc/bosun-bootstrap/bootstrap.json"],
        bootstrap_document().as_bytes()
    );
    assert_eq!(
        before["etc/bosun-bootstrap/guest-stamp"],
        after["etc/bosun-bootstrap/guest-stamp"]
    );
}

#[test]
fn the_first_bootstrap_binds_the_stamp_and_the_operator_adopts_an_older_guest() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    install.guest_pct(GUEST_PROGRAMS);
    // Fresh from the golden image: an unbound stamp. A's bootstrap binds it to A; B's is then
    // refused, and A's again accepted.
    populate(&install, 310, None);
    install.stamp_guest(310, None);
    let ok = |call: &Call| matches!(call.response(), Response::Ok { .. });
    assert!(ok(&install.run_as_sudo(
        &["push_bootstrap"],
        uid,
        &request("push_bootstrap", 310)
    )));
    let stamp = install.guest_file(310, GUEST_STAMP_PATH).unwrap();
    assert!(
        String::from_utf8_lossy(&stamp).contains(DOC_GUEST),
        "bound to A"
    );
    let b = serde_json::to_vec(&serde_json::json!({"verb": "push_bootstrap", "args": {
        "vmid": 310, "document": bootstrap_document().replace(DOC_GUEST, OTHER)}}))
    .unwrap();
    let before = tree(&install, 310);
    let message = expect_refused(
        &install.run_as_sudo(&["push_bootstrap"], uid, &b),
        "conflict",
    );
    assert!(
        message.contains(&format!("bound to guest {DOC_GUEST}")),
        "{message}"
    );
    assert_eq!(changed(&before, &tree(&install, 310)), 0);

    // A guest from before stamps (or restored on a new box): refused until the operator lists
    // it; then it gets this host's stamp, keeping the guest an old one was bound to, and
    // leaves the list.
    populate(&install, 311, Some(DOC_GUEST));
    install.stamp_guest_with(311, &[5; 32], Some(DOC_GUEST));
    let restart = request("restart_controller", 311);
    expect_refused(
        &install.run_as_sudo(&["restart_controller"], uid, &restart),
        "conflict",
    );
    std::fs::write(install.adopt_file(), "311\n312\n").unwrap();
    assert!(ok(&install.run_as_sudo(
        &["restart_controller"],
        uid,
        &restart
    )));
    assert_eq!(
        std::fs::read_to_string(install.adopt_file()).unwrap(),
        "312\n"
    );
    let stamp = bosun_proto::helper::stamp::GuestStamp::parse(
        &install.guest_file(311, GUEST_STAMP_PATH).unwrap(),
    )
    .unwrap();
    assert_eq!(stamp.verify(&GUEST_KEY), Ok(()));
    assert_eq!(
        stamp.guest_id.map(|g| g.to_string()).as_deref(),
        Some(DOC_GUEST)
    );
    // Another customer's bootstrap is still refused there.
    let b311 = String::from_utf8(b.clone()).unwrap().replace("310", "311");
    expect_refused(
        &install.run_as_sudo(&["push_bootstrap"], uid, b311.as_bytes()),
        "conflict",
    );
}

#[test]
fn a_box_without_a_key_makes_one_and_adopts_only_what_the_operator_listed() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    install.guest_pct(GUEST_PROGRAMS);
    std::fs::remove_file(install.guest_key()).unwrap();
    // A guest provisioned from an image older than stamps, and one never Bosun's.
    populate(&install, 320, Some(DOC_GUEST));
    populate(&install, 321, None);
    std::fs::write(install.adopt_file(), "320\n").unwrap();
    let before = tree(&install, 321);
    let call = install.run_as_sudo(
        &["reset_guest_identity"],
        uid,
        &request("reset_guest_identity", 321),
    );
    assert!(expect_refused(&call, "conflict").contains("it has no stamp"));
    assert_eq!(changed(&before, &tree(&install, 321)), 0);
    let call = install.run_as_sudo(
        &["restart_controller"],
        uid,
        &request("restart_controller", 320),
    );
    assert!(matches!(call.response(), Response::Ok { .. }), "{call:?}");
    let key = std::fs::metadata(install.guest_key()).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&key.permissions()) & 0o777,
        0o600
    );
    let key: [u8; 32] = std::fs::read(install.guest_key())
        .unwrap()
        .try_into()
        .unwrap();
    let stamp = install.guest_file(320, GUEST_STAMP_PATH).unwrap();
    let stamp = bosun_proto::helper::stamp::GuestStamp::parse(&stamp).unwrap();
    assert_eq!(stamp.verify(&key), Ok(()));
    assert_eq!(
        stamp.guest_id, None,
        "no old stamp: unbound until its next bootstrap"
    );
    assert_eq!(std::fs::read_to_string(install.adopt_file()).unwrap(), "");
}
