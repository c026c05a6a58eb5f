//! The loader's checks against real files (run as root, like the helper's tests: a file
//! only counts as root-controlled when root owns it).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde::Deserialize;

use crate::{Layout, RootConfError, check_root_controlled, listed, load_or_default, root_secret};

const LAYOUT: Layout = Layout {
    installed: "usr/libexec/bosun/bosun-helper",
    config: "etc/bosun/helper.json",
};

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
struct Settings {
    root: String,
    count: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            root: "/var/lib/x".into(),
            count: 1,
        }
    }
}

#[test]
fn config_lives_under_the_install_prefix() {
    assert_eq!(
        LAYOUT.config_path_for(Path::new("/usr/libexec/bosun/bosun-helper")),
        Path::new("/etc/bosun/helper.json")
    );
    assert_eq!(
        LAYOUT.config_path_for(Path::new("/tmp/x/usr/libexec/bosun/bosun-helper")),
        Path::new("/tmp/x/etc/bosun/helper.json")
    );
    // Any other location (a build tree) uses the system file.
    for exe in [
        "/work/target/debug/bosun-helper",
        "/tmp/xusr/libexec/bosun/bosun-helper",
    ] {
        assert_eq!(
            LAYOUT.config_path_for(Path::new(exe)),
            Path::new("/etc/bosun/helper.json"),
            "{exe}"
        );
    }
}

#[test]
fn config_must_be_root_controlled_bounded_and_valid() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("settings.json");

    // Absent: the defaults.
    assert_eq!(
        load_or_default::<Settings>(&config).unwrap(),
        Settings::default()
    );

    std::fs::write(&config, r#"{"root":"/srv/m"}"#).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let loaded: Settings = load_or_default(&config).unwrap();
    assert_eq!(loaded.root, "/srv/m");
    assert_eq!(loaded.count, 1);

    for mode in [0o664, 0o646] {
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(mode)).unwrap();
        assert!(
            matches!(
                load_or_default::<Settings>(&config),
                Err(RootConfError::Insecure { .. })
            ),
            "{mode:o}"
        );
    }
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();

    std::fs::write(&config, r#"{"root":"/m","unknown":1}"#).unwrap();
    assert!(matches!(
        load_or_default::<Settings>(&config),
        Err(RootConfError::Parse { .. })
    ));

    std::fs::write(&config, vec![b' '; 16 * 1024 + 1]).unwrap();
    let err = load_or_default::<Settings>(&config).unwrap_err();
    assert!(matches!(err, RootConfError::Read { .. }), "{err}");

    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&config, &link).unwrap();
    assert!(matches!(
        load_or_default::<Settings>(&link),
        Err(RootConfError::Insecure { .. })
    ));
}

#[test]
fn every_ancestor_must_be_root_controlled() {
    let dir = tempfile::tempdir().unwrap();
    let inner = dir.path().join("inner");
    std::fs::create_dir(&inner).unwrap();
    let file = inner.join("file");
    std::fs::write(&file, "{}").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o755)).unwrap();
    check_root_controlled(&file).unwrap();

    // A group-writable directory above the file, unless it is sticky (like `/tmp`).
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o775)).unwrap();
    let err = check_root_controlled(&file).unwrap_err();
    assert!(
        matches!(&err, RootConfError::Insecure { path, .. } if *path == inner),
        "{err}"
    );
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o1777)).unwrap();
    check_root_controlled(&file).unwrap();

    // A missing path cannot be checked.
    assert!(matches!(
        check_root_controlled(&inner.join("missing")),
        Err(RootConfError::Read { .. })
    ));
}

#[test]
fn a_root_secret_is_made_once_and_read_back_only_while_root_alone_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().join("key");
    assert!(root_secret::<32>(&path, false).is_err(), "missing");
    let made = root_secret::<32>(&path, true).unwrap();
    assert_eq!(
        root_secret::<32>(&path, true).unwrap(),
        made,
        "not made again"
    );
    assert_eq!(std::fs::read(&path).unwrap(), made);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(matches!(
        root_secret::<32>(&path, false),
        Err(RootConfError::Secret { .. })
    ));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(matches!(
        root_secret::<16>(&path, false),
        Err(RootConfError::Secret { .. })
    ));
}

#[test]
fn a_listed_entry_is_taken_off_the_list_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().join("adopt");
    assert!(
        !listed(&path, "105", true).unwrap(),
        "no list: nothing listed"
    );
    std::fs::write(&path, "104\n105\n 106 \n").unwrap();
    assert!(listed(&path, "105", false).unwrap());
    assert!(listed(&path, "105", true).unwrap());
    assert!(!listed(&path, "105", true).unwrap());
    assert!(listed(&path, "106", false).unwrap());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "104\n 106 \n");
}
