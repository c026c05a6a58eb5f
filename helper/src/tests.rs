//! Unit tests of the helper's pure parts; the integration tests in `helper/tests/`
//! run the binary as root against real devices, sudo and socket activation.

use std::io::Cursor;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use bosun_proto::helper::{MAX_REQUEST_BYTES, MountClass, MountOption, Refusal, VerbName};

use crate::caller::{Transport, read_bounded};
use crate::config::{ConfigError, config_path_for, load_from, lookup_uid};
use crate::error::HelperError;
use crate::fsops::mount_attrs;
use crate::verbs::{BlkidMatch, parse_blkid_export};

#[test]
fn blkid_export_blocks() {
    let text = "DEVNAME=/dev/loop3\nUUID=0b7f8c5e-1d2a-4c3b-9e8f-7a6b5c4d3e2f\nBLOCK_SIZE=1024\nTYPE=ext4\n\nDEVNAME=/dev/sdb1\nUUID=0b7f8c5e-1d2a-4c3b-9e8f-7a6b5c4d3e2f\n";
    assert_eq!(
        parse_blkid_export(text),
        vec![
            BlkidMatch {
                device: "/dev/loop3".into(),
                fstype: Some("ext4".into())
            },
            BlkidMatch {
                device: "/dev/sdb1".into(),
                fstype: None
            },
        ]
    );
    assert!(parse_blkid_export("").is_empty());
    assert!(parse_blkid_export("garbage\n\n").is_empty());
}

#[test]
fn config_lives_under_the_install_prefix() {
    assert_eq!(
        config_path_for(Path::new("/usr/libexec/bosun/bosun-helper")),
        Path::new("/etc/bosun/helper.json")
    );
    assert_eq!(
        config_path_for(Path::new("/tmp/x/usr/libexec/bosun/bosun-helper")),
        Path::new("/tmp/x/etc/bosun/helper.json")
    );
    // Any other location (a build tree) uses the system file.
    for exe in [
        "/work/target/debug/bosun-helper",
        "/tmp/xusr/libexec/bosun/bosun-helper",
    ] {
        assert_eq!(
            config_path_for(Path::new(exe)),
            Path::new("/etc/bosun/helper.json"),
            "{exe}"
        );
    }
}

fn passwd(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("passwd");
    std::fs::write(
        &path,
        "root:x:0:0:root:/root:/bin/bash\nbosun:x:998:998::/nonexistent:/usr/sbin/nologin\n",
    )
    .unwrap();
    path
}

#[test]
fn users_are_looked_up_by_exact_name() {
    let dir = tempfile::tempdir().unwrap();
    let passwd = passwd(dir.path());
    assert_eq!(lookup_uid("bosun", &passwd).unwrap(), 998);
    assert!(matches!(
        lookup_uid("bos", &passwd),
        Err(ConfigError::NoSuchUser { .. })
    ));
}

#[test]
fn config_must_be_root_controlled_and_plain() {
    let dir = tempfile::tempdir().unwrap();
    let passwd = passwd(dir.path());
    let config = dir.path().join("helper.json");

    // Absent: production defaults.
    let loaded = load_from(&config, &passwd).unwrap();
    assert_eq!(loaded.agent_uid, 998);
    assert_eq!(
        loaded.config.mount_root,
        Path::new("/var/lib/bosun-helper/mnt")
    );

    std::fs::write(&config, r#"{"agent_user":"root","mount_root":"/srv/m"}"#).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let loaded = load_from(&config, &passwd).unwrap();
    assert_eq!(loaded.agent_uid, 0);
    assert_eq!(loaded.config.mount_root, Path::new("/srv/m"));

    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o664)).unwrap();
    assert!(matches!(
        load_from(&config, &passwd),
        Err(ConfigError::Insecure { .. })
    ));
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();

    for bad in [
        r#"{"mount_root":"relative"}"#,
        r#"{"mount_root":"/a/../b"}"#,
        r#"{"staging_root":"/a,ro=0"}"#,
        r#"{"programs":{"pct":"pct"}}"#,
    ] {
        std::fs::write(&config, bad).unwrap();
        assert!(
            matches!(
                load_from(&config, &passwd),
                Err(ConfigError::BadPath { .. })
            ),
            "{bad}"
        );
    }
    std::fs::write(&config, r#"{"mount_root":"/m","unknown":1}"#).unwrap();
    assert!(matches!(
        load_from(&config, &passwd),
        Err(ConfigError::Parse { .. })
    ));

    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&config, &link).unwrap();
    assert!(matches!(
        load_from(&link, &passwd),
        Err(ConfigError::Insecure { .. })
    ));
}

#[test]
fn requests_are_bounded_and_single() {
    let ok = read_bounded(&mut Cursor::new(b"{\"a\":1}\n  \n".to_vec())).unwrap();
    assert_eq!(ok, b"{\"a\":1}");
    let eof = read_bounded(&mut Cursor::new(b"{\"a\":1}".to_vec())).unwrap();
    assert_eq!(eof, b"{\"a\":1}");
    assert!(matches!(
        read_bounded(&mut Cursor::new(b"{}\n{}\n".to_vec())),
        Err(HelperError::TrailingData)
    ));
    let exact = vec![b'a'; MAX_REQUEST_BYTES];
    assert_eq!(
        read_bounded(&mut Cursor::new(exact)).unwrap().len(),
        MAX_REQUEST_BYTES
    );
    let over = vec![b'a'; MAX_REQUEST_BYTES + 1];
    let err = read_bounded(&mut Cursor::new(over)).unwrap_err();
    assert_eq!(err.refusal(), Some(Refusal::Oversized));
}

#[test]
fn transport_comes_from_exactly_one_argument() {
    let args = |a: &[&str]| {
        a.iter()
            .map(Into::into)
            .collect::<Vec<std::ffi::OsString>>()
    };
    assert_eq!(
        Transport::from_args(&args(&["--socket"])).unwrap(),
        Transport::Socket
    );
    assert_eq!(
        Transport::from_args(&args(&["unmount"])).unwrap(),
        Transport::Sudo {
            verb: VerbName::Unmount
        }
    );
    for bad in [&[][..], &["unmount", "extra"], &["--help"], &["Unmount"]] {
        let err = Transport::from_args(&args(bad)).unwrap_err();
        assert_eq!(err.refusal(), Some(Refusal::Malformed), "{bad:?}");
    }
}

#[test]
fn mount_flags_follow_the_class() {
    let (_, data) = mount_attrs(MountClass::Data, &[]).unwrap();
    assert_eq!(data, "nosuid,nodev,noexec");
    let (_, exec) = mount_attrs(MountClass::Executable, &[MountOption::Ro]).unwrap();
    assert_eq!(exec, "nosuid,nodev,ro");
    let (_, dup) = mount_attrs(
        MountClass::Data,
        &[MountOption::Noatime, MountOption::Noatime],
    )
    .unwrap();
    assert_eq!(dup, "nosuid,nodev,noexec,noatime");
    assert!(matches!(
        mount_attrs(
            MountClass::Data,
            &[MountOption::Relatime, MountOption::Noatime]
        ),
        Err(HelperError::ConflictingOptions { .. })
    ));
}

#[test]
fn every_verb_declares_a_small_capability_set() {
    for verb in VerbName::ALL {
        let caps = crate::privs::declared(verb);
        // The break-glass verbs act as root on root's own files and need none.
        let none_needed = matches!(verb, VerbName::BreakGlassOpen | VerbName::BreakGlassClose);
        assert_eq!(caps.is_empty(), none_needed, "{verb}");
        assert!(
            !caps.contains(&caps::Capability::CAP_SYS_MODULE),
            "{verb} never loads modules"
        );
    }
    assert_eq!(
        crate::privs::declared(VerbName::MountByUuid),
        &[caps::Capability::CAP_SYS_ADMIN]
    );
}

#[test]
fn errors_map_to_refusals_or_failures() {
    let unsafe_path =
        HelperError::resolve("open", "/x", std::io::Error::from_raw_os_error(libc::ELOOP));
    assert_eq!(unsafe_path.refusal(), Some(Refusal::UnsafePath));
    let missing = HelperError::resolve(
        "open",
        "/x",
        std::io::Error::from_raw_os_error(libc::ENOENT),
    );
    assert_eq!(missing.refusal(), Some(Refusal::NotFound));
    let io = HelperError::resolve("open", "/x", std::io::Error::from_raw_os_error(libc::EIO));
    assert_eq!(io.refusal(), None);
    assert!(
        bosun_proto::error_chain(&io).starts_with("open /x: "),
        "{}",
        bosun_proto::error_chain(&io)
    );
}
