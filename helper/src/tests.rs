//! Unit tests of the helper's pure parts; the integration tests in `helper/tests/`
//! run the binary as root against real devices, sudo and socket activation.

use std::io::Cursor;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use bosun_proto::helper::{
    DiskSerial, HelperUnit, MAX_REQUEST_BYTES, MountClass, MountOption, Refusal, VerbName,
};

use crate::caller::{Transport, read_bounded};
use bosun_rootconf::RootConfError;

use crate::config::{ConfigError, config_path_for, load_from, lookup_uid};
use crate::error::HelperError;
use crate::fsops::mount_attrs;
use crate::verbs::{BlkidMatch, check_mountable, parse_blkid_export};

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

    // The file's own checks are bosun-rootconf's (and tested there); the helper applies them.
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o664)).unwrap();
    assert!(matches!(
        load_from(&config, &passwd),
        Err(ConfigError::File(RootConfError::Insecure { .. }))
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
        Err(ConfigError::File(RootConfError::Parse { .. }))
    ));

    // So are the roots it names.
    std::fs::write(&config, r#"{"mount_root":"/m","golden_dir":"/tmp"}"#).unwrap();
    load_from(&config, &passwd).unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(&config, format!(r#"{{"golden_dir":"{}"}}"#, open.display())).unwrap();
    assert!(matches!(
        load_from(&config, &passwd),
        Err(ConfigError::File(RootConfError::Insecure { .. }))
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
    for unit in HelperUnit::ALL {
        assert_eq!(
            Transport::from_args(&args(&[unit.socket_arg()])).unwrap(),
            Transport::Socket { unit }
        );
    }
    assert_eq!(
        Transport::from_args(&args(&["--socket"])).unwrap(),
        Transport::Socket {
            unit: HelperUnit::Host
        }
    );
    assert_eq!(
        Transport::from_args(&args(&["unmount"])).unwrap(),
        Transport::Sudo {
            verb: VerbName::Unmount
        }
    );
    for bad in [
        &[][..],
        &["unmount", "extra"],
        &["--help"],
        &["Unmount"],
        &["--socket=x"],
    ] {
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
        Err(HelperError::ConflictingOptions(..))
    ));
}

#[test]
fn reset_guest_identity_runs_two_fixed_commands_in_the_guest() {
    assert_eq!(
        crate::verbs::reset_guest_identity_argvs("105"),
        vec![
            vec![
                "exec",
                "105",
                "--",
                "/usr/bin/find",
                "/etc/ssh",
                "-maxdepth",
                "1",
                "-name",
                "ssh_host_*",
                "-delete"
            ],
            vec![
                "exec",
                "105",
                "--",
                "/usr/bin/truncate",
                "-s",
                "0",
                "/etc/machine-id"
            ],
        ]
    );
}

#[test]
fn restore_check_runs_only_in_an_isolated_scratch_guest() {
    let scratch = "arch: amd64\nhostname: restore-test-105\nmemory: 512\n\
net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,link_down=1,type=veth\n\
net1: name=eth1,bridge=vmbr1,link_down=1\nrootfs: local-lvm:vm-105-disk-0,size=8G\n";
    assert_eq!(
        crate::verbs::unsafe_config(scratch, "105", crate::verbs::Scratch::Require),
        Ok(())
    );
    // A guest without a network is isolated too.
    assert_eq!(
        crate::verbs::unsafe_config(
            "hostname: restore-test-105\n",
            "105",
            crate::verbs::Scratch::Require
        ),
        Ok(())
    );
    for (config, why) in [
        // The customer's guest: its own name, its link up.
        (
            "hostname: shop\nnet0: name=eth0,bridge=vmbr0,ip=dhcp\n".to_owned(),
            "net0 has its link up",
        ),
        (
            scratch.replace("link_down=1,type", "type"),
            "net0 has its link up",
        ),
        (
            scratch.replace("bridge=vmbr1,link_down=1", "bridge=vmbr1,link_down=0"),
            "net1 has its link up",
        ),
        (
            format!("{scratch}mp0: /srv/data,mp=/data\n"),
            "it has mount point mp0",
        ),
        // Another guest's scratch name, or none at all.
        (
            scratch.replace("restore-test-105", "restore-test-106"),
            "its hostname is not restore-test-105",
        ),
        (
            scratch.replace("restore-test-105", "restore-test-1050"),
            "its hostname is not restore-test-105",
        ),
        (
            "#hostname: restore-test-105\nnet0: name=eth0,link_down=1\n".to_owned(),
            "its hostname is not restore-test-105",
        ),
        (String::new(), "its hostname is not restore-test-105"),
    ] {
        assert_eq!(
            crate::verbs::unsafe_config(&config, "105", crate::verbs::Scratch::Require),
            Err(why.to_owned()),
            "{config}"
        );
    }
    // A snapshot's section after the current config is not the current config.
    let with_snapshot = format!("{scratch}\n[before-upgrade]\nhostname: shop\nmp0: /a,mp=/b\n");
    assert_eq!(
        crate::verbs::unsafe_config(&with_snapshot, "105", crate::verbs::Scratch::Require),
        Ok(())
    );
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
        bosun_errchain::error_chain(&io).starts_with("open /x: "),
        "{}",
        bosun_errchain::error_chain(&io)
    );
}

/// A sysfs tree of our own with one block device node (major 7, minor `minor`) beside it.
struct FakeDisk {
    dir: tempfile::TempDir,
    node: std::path::PathBuf,
    number: String,
}

impl FakeDisk {
    /// None unless root (only root makes device nodes).
    fn new(minor: u32) -> Option<Self> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipping: making a device node needs root");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("blk");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &node,
            rustix::fs::FileType::BlockDevice,
            rustix::fs::Mode::from_raw_mode(0o600),
            rustix::fs::makedev(7, minor),
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("sys/dev/block")).unwrap();
        Some(Self {
            dir,
            node,
            number: format!("7:{minor}"),
        })
    }

    fn sysfs(&self) -> std::path::PathBuf {
        self.dir.path().join("sys")
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.sysfs().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Points `dev/block/<number>` at `rel` (a directory made under the tree).
    fn link_entry(&self, rel: &str) {
        std::fs::create_dir_all(self.sysfs().join(rel)).unwrap();
        std::os::unix::fs::symlink(
            self.sysfs().join(rel),
            self.sysfs().join("dev/block").join(&self.number),
        )
        .unwrap();
    }

    fn check(&self, serial: &str) -> Result<(), HelperError> {
        check_mountable(
            self.node.to_str().unwrap(),
            &DiskSerial::new(serial).unwrap(),
            &self.sysfs(),
        )
    }
}

fn refused_because(result: Result<(), HelperError>, needle: &str) {
    let err = result.expect_err("refused");
    assert_eq!(err.refusal(), Some(Refusal::DeviceNotAllowed), "{err}");
    let text = bosun_errchain::error_chain(&err);
    assert!(text.contains(needle), "{text}");
}

#[test]
fn a_removable_disk_with_the_named_serial_is_allowed_and_nothing_else() {
    // Removable, serial on the disk's device.
    let Some(disk) = FakeDisk::new(240) else {
        return;
    };
    disk.link_entry("devices/virtual/block/sdx");
    disk.write("devices/virtual/block/sdx/removable", "1\n");
    disk.write("devices/virtual/block/sdx/device/serial", "SER-1\n");
    disk.check("SER-1").unwrap();
    refused_because(disk.check("SER-2"), "not \"SER-2\"");
    disk.write("devices/virtual/block/sdx/removable", "0\n");
    refused_because(disk.check("SER-1"), "neither removable nor USB-attached");
    disk.write("devices/virtual/block/sdx/removable", "1\n");
    std::fs::remove_file(disk.sysfs().join("devices/virtual/block/sdx/device/serial")).unwrap();
    refused_because(disk.check("SER-1"), "reports serial \"\", not");
}

#[test]
fn a_usb_partition_takes_its_disk_and_the_usb_devices_serial() {
    let Some(disk) = FakeDisk::new(241) else {
        return;
    };
    // /sys/dev/block/8:17 -> devices/.../usb2/2-1/2-1:1.0/host6/.../block/sdb/sdb1
    let usb = "devices/pci0000:00/0000:00:14.0/usb2/2-1";
    let scsi = format!("{usb}/2-1:1.0/host6/target6:0:0/6:0:0:0");
    disk.link_entry(&format!("{scsi}/block/sdb/sdb1"));
    disk.write(&format!("{scsi}/block/sdb/sdb1/partition"), "1\n");
    disk.write(&format!("{scsi}/block/sdb/removable"), "0\n");
    disk.write(&format!("{usb}/serial"), "0401f2a9c3\n");
    std::os::unix::fs::symlink(
        disk.sysfs().join(&scsi),
        disk.sysfs().join(format!("{scsi}/block/sdb/device")),
    )
    .unwrap();
    disk.check("0401f2a9c3").unwrap();
    refused_because(disk.check("0401f2a9c4"), "reports serial \"0401f2a9c3\"");
}

#[test]
fn the_systems_own_disks_and_odd_nodes_are_refused() {
    let Some(disk) = FakeDisk::new(242) else {
        return;
    };
    // No sysfs entry at all.
    refused_because(disk.check("S"), "sysfs knows no block device 7:242");
    // A SATA disk: not removable, not on USB, even with a serial.
    let sata = "devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0";
    disk.link_entry("devices/virtual/block/sda");
    disk.write("devices/virtual/block/sda/removable", "0\n");
    disk.write(&format!("{sata}/serial"), "S\n");
    std::os::unix::fs::symlink(
        disk.sysfs().join(sata),
        disk.sysfs().join("devices/virtual/block/sda/device"),
    )
    .unwrap();
    refused_because(disk.check("S"), "neither removable nor USB-attached");
    // A regular file is no block device.
    let file = disk.dir.path().join("file");
    std::fs::write(&file, b"").unwrap();
    refused_because(
        check_mountable(
            file.to_str().unwrap(),
            &DiskSerial::new("S").unwrap(),
            &disk.sysfs(),
        ),
        "not a block device",
    );
}

#[test]
fn archive_bytes_are_due_at_the_rate() {
    use crate::verbs::archive::due_at;
    use std::num::NonZeroU32;
    use std::time::Duration;
    let rate = NonZeroU32::new(4).unwrap();
    assert_eq!(due_at(4 << 20, rate), Duration::from_secs(1));
    assert_eq!(due_at(1 << 20, rate), Duration::from_millis(250));
    assert_eq!(due_at(0, rate), Duration::ZERO);
    assert!(due_at(u64::MAX, NonZeroU32::MIN) > Duration::from_secs(1 << 40));
}

#[test]
fn a_paced_archive_read_takes_its_time_and_hashes_the_same() {
    use crate::verbs::archive::sha256;
    use std::num::NonZeroU32;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tar");
    std::fs::write(&path, vec![7u8; 3 << 20]).unwrap();
    let open = || std::fs::File::open(&path).unwrap();
    let fast = sha256(open(), &path, None).unwrap();
    let started = Instant::now();
    let paced = sha256(open(), &path, NonZeroU32::new(6)).unwrap();
    assert_eq!(paced, fast);
    assert_eq!(paced.1, 3 << 20);
    // 3 MiB at 6 MiB/s: half a second at least.
    assert!(
        started.elapsed() >= Duration::from_millis(450),
        "{:?}",
        started.elapsed()
    );
}
