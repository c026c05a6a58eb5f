//! `bulk_archive` (decision 0090) against the real helper run as root: guests are directory
//! trees behind a recording `pct` whose `exec /usr/bin/tar` tars the guest tree's directory,
//! the target storage a directory beneath a backup root of the install.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use bosun_proto::helper::{Output, Response, VerbName};
use common::*;

/// The other customer's guest id.
const OTHER: &str = "7c1d2e3f-4a5b-4c6d-8e7f-901a2b3c4d5e";
/// The guest: Bosun's, bound to [`DOC_GUEST`], its bulk volume `media` at `/srv/media`.
const VMID: u32 = 120;
const CONFIG: &str = "arch: amd64\nhostname: files\nrootfs: local-lvm:vm-120-disk-0,size=8G\nmp0: bulk:vm-120-disk-1,mp=/srv/media/,backup=0,size=100G\n";

struct Bulk {
    install: Install,
    uid: u32,
    /// The backup root of the install's configuration.
    root: PathBuf,
    /// The target storage's path, beneath it.
    storage: PathBuf,
}

impl Bulk {
    /// An install whose one backup root holds the storage `usb`, and guest [`VMID`] with two
    /// files on its volume (a third outside it); `exec` runs `exec_body`.
    fn new(exec_body: &str) -> Bulk {
        let (uid, _) = test_user();
        let install = Install::new(TEST_USER);
        let root = install.dir.path().join("backup");
        let storage = root.join("usb");
        std::fs::create_dir_all(&storage).unwrap();
        for dir in [&root, &storage] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let extra = serde_json::json!({"backup_roots": [root]});
        install.write_config_with(TEST_USER, "/usr/sbin/blkid", extra);
        install.guest_pct(&format!("case \"$1\" in\n{exec_body}\nesac"));
        install.stamp_guest(VMID, Some(DOC_GUEST));
        install.guest_config(VMID, CONFIG);
        install.write_guest_file(VMID, "/srv/media/films/a.mkv", &[7u8; 5000]);
        install.write_guest_file(VMID, "/srv/media/notes.txt", b"bulk data\n");
        install.write_guest_file(VMID, "/etc/hostname", b"files\n");
        Bulk {
            install,
            uid,
            root,
            storage,
        }
    }

    fn call(&self, args: serde_json::Value) -> Call {
        let request = serde_json::json!({"verb": "bulk_archive", "args": args});
        let bytes = serde_json::to_vec(&request).unwrap();
        self.install
            .run_as_sudo(&["bulk_archive"], self.uid, &bytes)
    }

    /// The volume's directory beneath the storage.
    fn volume_dir(&self) -> PathBuf {
        self.storage
            .join("bosun-bulk")
            .join(DOC_GUEST)
            .join("media")
    }
}

fn args(storage: &Path) -> serde_json::Value {
    serde_json::json!({
        "vmid": VMID,
        "guest_id": DOC_GUEST,
        "volume": "media",
        "path": "/srv/media",
        "storage_dir": storage,
        "keep_last": 2,
        "max_bytes": 1_000_000,
        "timeout_secs": 60,
    })
}

/// `args` with `key` set to `value`.
fn json_with(mut args: serde_json::Value, key: &str, value: &str) -> serde_json::Value {
    args[key] = value.into();
    args
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            let names = entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned());
            names.collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The members `tar -tf` lists in `archive`.
fn members(archive: &Path) -> Vec<String> {
    let out = std::process::Command::new("tar")
        .arg("-tf")
        .arg(archive)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut listed: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    listed.sort();
    listed
}

fn failed(call: &Call) -> String {
    match call.response() {
        Response::Failed { message } => {
            assert_eq!(call.code, Some(1), "{call:?}");
            message
        }
        other => panic!("expected failed, got {other:?}: {call:?}"),
    }
}

#[test]
fn the_volume_is_archived_beneath_its_storage_and_older_archives_past_keep_last_go() {
    let bulk = Bulk::new(GUEST_TAR);
    // Two older archives of the volume, a killed run's partial file, another volume's archive
    // whose name starts the same, and a file of the operator's.
    let dir = bulk.volume_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let older = [
        "bulk-media-2020_01_01-00_00_00.tar",
        "bulk-media-2021_06_30-12_00_00.tar",
    ];
    let keep = [
        "bulk-media-old-2019_01_01-00_00_00.tar",
        "bulk-media-2021_06_30-12_00_00.tar.copy",
        "notes.txt",
    ];
    for name in older
        .iter()
        .chain(&keep)
        .chain(&["bulk-media.partial-4242"])
    {
        std::fs::write(dir.join(name), name.as_bytes()).unwrap();
    }

    let call = bulk.call(args(&bulk.storage));
    let Response::Ok { output } = call.response() else {
        panic!("{call:?}");
    };
    let Output::BulkArchived {
        archive,
        sha256,
        size,
        removed,
    } = output
    else {
        panic!("{output:?}");
    };
    let archive = PathBuf::from(archive);
    assert_eq!(archive.parent(), Some(dir.as_path()));
    let name = archive.file_name().unwrap().to_str().unwrap().to_owned();
    assert!(
        bosun_proto::helper::is_bulk_archive_name("media", &name),
        "{name}"
    );
    let bytes = std::fs::read(&archive).unwrap();
    assert_eq!(
        (sha256_hex(&bytes), size),
        (sha256.clone(), bytes.len() as u64)
    );
    assert_eq!(
        members(&archive),
        ["./", "./films/", "./films/a.mkv", "./notes.txt"]
    );
    // Root's own: the archive 0600.
    let meta = std::fs::metadata(&archive).unwrap();
    assert_eq!((meta.mode() & 0o777, meta.uid()), (0o600, 0));
    // keep_last 2: the new one and the newest older one stay; the partial file goes; the other
    // volume's archive and the files not named as archives stay.
    assert_eq!(removed, 1);
    let mut expected: Vec<String> = keep.iter().map(|n| n.to_string()).collect();
    expected.extend([older[1].to_owned(), name.clone()]);
    expected.sort();
    assert_eq!(names(&dir), expected);
    // The guest's own tar, every argument fixed but the vmid and the path.
    let execs: Vec<String> = bulk.install.acting_calls();
    assert_eq!(
        execs,
        [format!(
            "pct [exec] [{VMID}] [--] [/usr/bin/tar] [--create] [--file=-] [--one-file-system] [--numeric-owner] [--exclude=./.bosun-restore-*] [--directory=/srv/media] [.]"
        )]
    );
    let audit = call.audit();
    assert_eq!(audit["verb"], "bulk_archive");
    let effective: Vec<String> =
        serde_json::from_value(audit["caps"]["effective"].clone()).unwrap();
    assert_eq!(effective, expected_caps(VerbName::BulkArchive), "{audit}");

    // The storage may be the backup root itself.
    let call = bulk.call(args(&bulk.root));
    assert!(matches!(call.response(), Response::Ok { .. }), "{call:?}");
    let at_root = bulk.root.join("bosun-bulk").join(DOC_GUEST).join("media");
    assert_eq!(names(&at_root).len(), 1);
    // Each directory the helper made is root's 0700.
    for made in [
        bulk.root.join("bosun-bulk"),
        bulk.root.join("bosun-bulk").join(DOC_GUEST),
        at_root,
    ] {
        let meta = std::fs::metadata(&made).unwrap();
        assert_eq!(
            (meta.mode() & 0o777, meta.uid()),
            (0o700, 0),
            "{}",
            made.display()
        );
    }
}

#[test]
fn a_guest_path_or_storage_it_may_not_take_is_refused_and_nothing_is_written() {
    let bulk = Bulk::new(GUEST_TAR);
    // 121: Bosun's guest of another customer; 122: Bosun's guest not bound to any.
    for (vmid, guest) in [(121, Some(OTHER)), (122, None)] {
        bulk.install.stamp_guest(vmid, guest);
        bulk.install
            .guest_config(vmid, &CONFIG.replace("120", &vmid.to_string()));
    }
    let outside = bulk.install.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, bulk.root.join("link")).unwrap();
    let with = |key: &str, value: serde_json::Value| {
        let mut args = args(&bulk.storage);
        args[key] = value;
        args
    };
    let cases = [
        (
            with("vmid", 121.into()),
            "conflict",
            format!("bound to guest {OTHER}, not {DOC_GUEST}"),
        ),
        (
            json_with(with("vmid", 122.into()), "path", "/srv"),
            "not_found",
            "mount point of the guest /srv".to_owned(),
        ),
        (
            with("path", "/srv".into()),
            "not_found",
            "mount point of the guest /srv".to_owned(),
        ),
        (
            with("path", "/etc".into()),
            "not_found",
            "mount point of the guest /etc".to_owned(),
        ),
        (
            with("storage_dir", "/var/tmp".into()),
            "not_found",
            "beneath a backup root".to_owned(),
        ),
        (
            with(
                "storage_dir",
                bulk.install
                    .dir
                    .path()
                    .join("backupx")
                    .to_str()
                    .unwrap()
                    .into(),
            ),
            "not_found",
            "beneath a backup root".to_owned(),
        ),
        (
            with(
                "storage_dir",
                bulk.root.join("link").to_str().unwrap().into(),
            ),
            "unsafe_path",
            "unsafe path".to_owned(),
        ),
        (
            with(
                "storage_dir",
                bulk.root.join("link/deeper").to_str().unwrap().into(),
            ),
            "unsafe_path",
            "unsafe path".to_owned(),
        ),
        (
            with(
                "storage_dir",
                bulk.root.join("missing").to_str().unwrap().into(),
            ),
            "not_found",
            "missing".to_owned(),
        ),
    ];
    for (args, reason, words) in cases {
        let call = bulk.call(args.clone());
        let message = expect_refused(&call, reason);
        assert!(message.contains(&words), "{args}: {message}");
    }
    // Nothing ran in any guest, nothing was written anywhere, the unbound guest stays unbound
    // (its request was refused for its path before anything was bound).
    assert!(
        bulk.install.acting_calls().is_empty(),
        "{:?}",
        bulk.install.calls()
    );
    assert_eq!(names(&bulk.root), ["link", "usb"]);
    assert!(names(&bulk.storage).is_empty());
    assert!(names(&outside).is_empty());
    let stamp = bulk.install.guest_file(122, GUEST_STAMP_PATH).unwrap();
    let stamp = bosun_proto::helper::stamp::GuestStamp::parse(&stamp).unwrap();
    assert_eq!(stamp.guest_id, None);
    // A request outside the verb's bounds never reaches the guest.
    for (key, value) in [
        ("keep_last", serde_json::json!(0)),
        ("timeout_secs", serde_json::json!(86_401)),
        ("path", serde_json::json!("/srv/../etc")),
        ("volume", serde_json::json!("Media Files")),
        ("storage_dir", serde_json::json!("relative/dir")),
    ] {
        expect_refused(&bulk.call(with(key, value)), "malformed");
    }
    // The unbound guest asked for rightly (a host without the local API pushes no bootstrap):
    // bound to the guest id first, as push_bootstrap binds it, then archived.
    bulk.install
        .write_guest_file(122, "/srv/media/notes.txt", b"bulk data\n");
    let call = bulk.call(with("vmid", 122.into()));
    assert!(matches!(call.response(), Response::Ok { .. }), "{call:?}");
    let stamp = bulk.install.guest_file(122, GUEST_STAMP_PATH).unwrap();
    let stamp = bosun_proto::helper::stamp::GuestStamp::parse(&stamp).unwrap();
    assert_eq!(
        stamp.guest_id.map(|g| g.to_string()).as_deref(),
        Some(DOC_GUEST)
    );
}

#[test]
fn an_archive_past_its_bytes_or_time_or_onto_an_existing_name_fails_and_leaves_no_file() {
    // Past max_bytes: the tar is cut off, the group killed, the partial file removed.
    let bulk = Bulk::new(GUEST_TAR);
    let mut small = args(&bulk.storage);
    small["max_bytes"] = 4096.into();
    let message = failed(&bulk.call(small));
    assert!(message.contains("more than 4096 bytes"), "{message}");
    // The directories the failed run made are gone too: the storage is as it was.
    assert!(names(&bulk.storage).is_empty());

    // Past its time: a tar that writes a little, then hangs.
    let hanging = r#"/usr/bin/tar) printf 'partial tar bytes'; sleep 300 ;;"#;
    let bulk = Bulk::new(hanging);
    let mut quick = args(&bulk.storage);
    quick["timeout_secs"] = 2.into();
    let started = std::time::Instant::now();
    // The guest's directory of another volume stays; the failed one's own is removed.
    let other = bulk
        .storage
        .join("bosun-bulk")
        .join(DOC_GUEST)
        .join("music");
    std::fs::create_dir_all(&other).unwrap();
    let message = failed(&bulk.call(quick));
    assert!(message.contains("no end within 2s"), "{message}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    assert_eq!(
        names(&bulk.storage.join("bosun-bulk").join(DOC_GUEST)),
        ["music"]
    );

    // A tar that fails inside the guest (its directory is gone).
    let bulk = Bulk::new(GUEST_TAR);
    std::fs::remove_dir_all(bulk.install.guest_root(VMID).join("srv/media")).unwrap();
    let message = failed(&bulk.call(args(&bulk.storage)));
    assert!(message.contains("exited with"), "{message}");
    assert!(names(&bulk.volume_dir()).is_empty());

    // Every name the archive could take in the next seconds is taken: it fails, the files
    // already there stay as they were and no older archive is pruned.
    let bulk = Bulk::new(GUEST_TAR);
    let dir = bulk.volume_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let now = std::time::SystemTime::now();
    let taken: Vec<String> = (0..20)
        .map(|s| {
            let at = now + std::time::Duration::from_secs(s);
            bosun_proto::helper::bulk_archive_name("media", at)
        })
        .chain(["bulk-media-2020_01_01-00_00_00.tar".to_owned()])
        .collect();
    for name in &taken {
        std::fs::write(dir.join(name), b"kept").unwrap();
    }
    let message = failed(&bulk.call(args(&bulk.storage)));
    assert!(message.contains("rename"), "{message}");
    let mut expected = taken.clone();
    expected.sort();
    assert_eq!(names(&dir), expected);
    assert!(
        taken
            .iter()
            .all(|n| std::fs::read(dir.join(n)).unwrap() == b"kept")
    );
}
