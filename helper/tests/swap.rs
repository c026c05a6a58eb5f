//! A symlink swapped in between the check and the mount cannot redirect the mount:
//! the mount goes through the descriptor that was checked. Drives the helper's own
//! path code (`fsops`) directly so the swap happens exactly between the two steps.
// Test harness code: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

mod common;

use bosun_helper::fsops;
use bosun_proto::helper::{FsType, MountClass};
use common::*;

#[test]
fn swap_between_check_and_mount_lands_on_the_checked_directory() {
    let root_dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let loopdev = LoopDevice::ext4(&new_uuid());
    let checked = root_dir.path().join("target");
    let moved = root_dir.path().join("moved-away");
    let _guard_checked = MountGuard(checked.clone());
    let _guard_moved = MountGuard(moved.clone());
    let _guard_elsewhere = MountGuard(elsewhere.path().to_path_buf());

    let root = fsops::open_root(root_dir.path()).unwrap();
    let (target, created) = root.ensure_child("target", 0o755, true).unwrap();
    assert!(created);

    // The attacker's move: the checked directory goes away, a symlink takes its name.
    std::fs::rename(&checked, &moved).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), &checked).unwrap();

    let (attrs, _) = fsops::mount_attrs(MountClass::Data, &[]).unwrap();
    fsops::mount_device(&loopdev.device, FsType::Ext4, attrs, &target).unwrap();
    drop(target);

    let mounts = mountinfo();
    let at = |p: &std::path::Path| {
        mounts
            .iter()
            .any(|(t, _)| t.as_str() == p.to_str().unwrap())
    };
    assert!(at(&moved), "mounted on the checked inode: {mounts:?}");
    assert!(!at(elsewhere.path()), "never through the symlink");
    assert!(moved.join("lost+found").is_dir());
    assert!(
        std::fs::read_dir(elsewhere.path())
            .unwrap()
            .next()
            .is_none()
    );
    let status = std::process::Command::new("umount")
        .arg(&moved)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_symlink_in_place_before_the_check_is_refused() {
    let root_dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), root_dir.path().join("t")).unwrap();
    let root = fsops::open_root(root_dir.path()).unwrap();
    let err = root.child("t", true).unwrap_err();
    assert!(
        matches!(err, bosun_helper::error::HelperError::UnsafePath { .. }),
        "{err:?}"
    );
    let err = root.ensure_child("t", 0o755, true).unwrap_err();
    assert!(
        matches!(err, bosun_helper::error::HelperError::UnsafePath { .. }),
        "{err:?}"
    );
    // And a root reached through a symlink.
    let link = root_dir.path().join("link");
    std::os::unix::fs::symlink(root_dir.path(), &link).unwrap();
    assert!(matches!(
        fsops::open_root(&link.join("t")),
        Err(bosun_helper::error::HelperError::UnsafePath { .. })
    ));
}
