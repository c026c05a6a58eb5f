use super::*;

fn roots(list: &[&str]) -> Vec<PathBuf> {
    list.iter().map(PathBuf::from).collect()
}

#[test]
fn system_and_guest_paths_are_refused_whatever_the_roots() {
    // Even a root of `/var/lib` (or one that would allow anything) lets none of these in.
    let wide = roots(&["/var/lib", "/srv", "/etc", "/mnt"]);
    let cases: &[(&str, &str)] = &[
        ("/", "root directory"),
        ("/etc/pve", "system path"),
        ("/etc/pve/nodes/pve", "system path"),
        ("/boot", "system path"),
        ("/boot/efi/backups", "system path"),
        ("/proc/1", "system path"),
        ("/sys/kernel", "system path"),
        ("/dev/shm/x", "system path"),
        ("/run/backups", "system path"),
        ("/var/lib/lxc/101/rootfs/x", "guest"),
        ("/var/lib/lxc", "guest"),
        ("/var/lib/vz/images/101", "guest"),
        ("/var/lib/vz/private/101/x", "guest"),
        ("/srv/pool/subvol-101-disk-0/backups", "guest"),
        ("/mnt/tank/vm-9000-disk-12", "guest"),
        ("/srv/base-100-disk-0", "guest"),
        ("relative/path", "absolute and normal"),
        ("/srv/../etc/pve", "absolute and normal"),
        ("/srv/./x", "absolute and normal"),
        ("/srv//x", "absolute and normal"),
        ("/srv/x/", "absolute and normal"),
        ("", "absolute and normal"),
    ];
    for (path, why) in cases {
        let err = check_target(path, &wide).expect_err(path);
        assert!(err.to_string().contains(why), "{path}: {err}");
    }
}

#[test]
fn a_path_must_lie_beneath_a_configured_root() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("backups");
    std::fs::create_dir(&root).unwrap();
    let root_text = root.to_str().unwrap();
    let allowed = roots(&[root_text]);
    // The root itself, an existing child and one still to be made are allowed.
    std::fs::create_dir(root.join("nightly")).unwrap();
    for ok in [
        root_text.to_owned(),
        format!("{root_text}/nightly"),
        format!("{root_text}/new/deeper"),
        // Names that merely look like volumes are fine.
        format!("{root_text}/subvol-101-disk-x"),
        format!("{root_text}/vm-disk-0"),
    ] {
        check_target(&ok, &allowed).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    // A sibling that shares the root's name as a prefix is not beneath it.
    let sibling = format!("{root_text}-evil/x");
    assert!(matches!(
        check_target(&sibling, &allowed),
        Err(LocalDirError::OutsideRoots)
    ));
    // No roots configured: no local-dir target at all.
    assert!(matches!(
        check_target(&format!("{root_text}/nightly"), &[]),
        Err(LocalDirError::OutsideRoots)
    ));
}

#[test]
fn a_symlink_leading_out_of_the_root_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("backups");
    let outside = dir.path().join("customer-b");
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
    std::os::unix::fs::symlink("/sys", root.join("sys")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("nowhere"), root.join("dangling")).unwrap();
    let allowed = roots(&[root.to_str().unwrap()]);
    let at = |name: &str| format!("{}/{name}", root.display());
    assert!(matches!(
        check_target(&at("escape"), &allowed),
        Err(LocalDirError::OutsideRoots)
    ));
    assert!(matches!(
        check_target(&at("escape/deeper/dump"), &allowed),
        Err(LocalDirError::OutsideRoots)
    ));
    assert!(matches!(
        check_target(&at("sys/x"), &allowed),
        Err(LocalDirError::SystemArea { area: "/sys" })
    ));
    assert!(matches!(
        check_target(&at("dangling/x"), &allowed),
        Err(LocalDirError::Resolve { .. })
    ));
    // A symlink that stays beneath the root is followed and allowed.
    std::fs::create_dir(root.join("real")).unwrap();
    std::os::unix::fs::symlink(root.join("real"), root.join("alias")).unwrap();
    check_target(&at("alias/x"), &allowed).unwrap();
    // A root reached through a symlink is resolved too.
    let linked_root = dir.path().join("linked");
    std::os::unix::fs::symlink(&root, &linked_root).unwrap();
    check_target(&at("real"), &roots(&[linked_root.to_str().unwrap()])).unwrap();
}

#[test]
fn a_root_in_a_system_or_guest_area_is_refused() {
    for root in [
        "/",
        "/etc/pve",
        "/boot/backups",
        "/run/bosun",
        "/var/lib/lxc/101/rootfs",
        "/var/lib/vz/images",
        "/tank/subvol-101-disk-0",
        "relative",
        "/srv/../boot",
    ] {
        assert!(check_root(Path::new(root)).is_err(), "{root}");
    }
    for root in ["/srv/backups", "/var/lib/vz/dump", "/mnt/usb-archive"] {
        check_root(Path::new(root)).unwrap_or_else(|e| panic!("{root}: {e}"));
    }
}
