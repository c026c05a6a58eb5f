//! `bulk_restore` (decision 0108) against the real helper run as root: guests are directory
//! trees behind a recording `pct` whose `exec /usr/bin/tar` tars the guest tree's directory
//! and whose `exec /bin/sh -c <script>` runs the helper's fixed script itself on the guest
//! tree's copy of the volume's path, so what is tested is the script the guest would run.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use bosun_proto::helper::{Output, Refusal, Response, VerbName};
use common::*;

/// The other customer's guest id.
const OTHER: &str = "7c1d2e3f-4a5b-4c6d-8e7f-901a2b3c4d5e";
const VMID: u32 = 120;
const CONFIG: &str = "arch: amd64\nhostname: files\nrootfs: local-lvm:vm-120-disk-0,size=8G\nmp0: bulk:vm-120-disk-1,mp=/srv/media/,backup=0,size=100G\n";
/// `pct exec`: the guest's tar ([`GUEST_TAR`]) and its shell running the restore script on the
/// guest tree's copy of the volume (`$6` is the volume's path in the guest).
const GUEST_SH: &str = r#"/bin/sh) exec /bin/sh -c "$3" "$4" "$5" "$g/$v$6" ;;"#;

struct Bulk {
    install: Install,
    uid: u32,
    storage: PathBuf,
}

/// The archive `bulk_archive` wrote: its name, SHA-256 and size.
struct Written {
    name: String,
    sha256: String,
    size: u64,
}

impl Bulk {
    /// An install whose backup root holds the storage `usb`, and guest [`VMID`] with two files
    /// on its volume; `exec` runs `exec_body`.
    fn new(exec_body: &str) -> Bulk {
        let (uid, _) = test_user();
        let install = Install::new(TEST_USER);
        let root = install.dir.path().join("backup");
        let storage = root.join("usb");
        std::fs::create_dir_all(&storage).unwrap();
        let extra = serde_json::json!({"backup_roots": [root]});
        install.write_config_with(TEST_USER, "/usr/sbin/blkid", extra);
        install.guest_pct(&format!("case \"$1\" in\n{exec_body}\nesac"));
        install.stamp_guest(VMID, Some(DOC_GUEST));
        install.guest_config(VMID, CONFIG);
        install.write_guest_file(VMID, "/srv/media/films/a.mkv", &[7u8; 5000]);
        install.write_guest_file(VMID, "/srv/media/notes.txt", b"bulk data\n");
        Bulk {
            install,
            uid,
            storage,
        }
    }

    fn call(&self, verb: &str, args: serde_json::Value) -> Call {
        let request = serde_json::json!({"verb": verb, "args": args});
        let bytes = serde_json::to_vec(&request).unwrap();
        self.install.run_as_sudo(&[verb], self.uid, &bytes)
    }

    /// Archives the volume with `bulk_archive`.
    fn archive(&self) -> Written {
        let call = self.call(
            "bulk_archive",
            serde_json::json!({
                "vmid": VMID, "guest_id": DOC_GUEST, "volume": "media", "path": "/srv/media",
                "storage_dir": self.storage, "keep_last": 2, "max_bytes": 1_000_000,
                "timeout_secs": 60,
            }),
        );
        let Response::Ok {
            output:
                Output::BulkArchived {
                    archive,
                    sha256,
                    size,
                    ..
                },
        } = call.response()
        else {
            panic!("{call:?}");
        };
        let name = Path::new(&archive).file_name().unwrap();
        Written {
            name: name.to_str().unwrap().to_owned(),
            sha256,
            size,
        }
    }

    /// The `bulk_restore` request for `written`.
    fn restore_args(&self, written: &Written) -> serde_json::Value {
        serde_json::json!({
            "vmid": VMID, "guest_id": DOC_GUEST, "volume": "media", "path": "/srv/media",
            "storage_dir": self.storage, "archive": written.name, "sha256": written.sha256,
            "size": written.size, "timeout_secs": 60,
        })
    }

    fn restore(&self, args: serde_json::Value) -> Call {
        self.call("bulk_restore", args)
    }

    /// The archive's path on the storage.
    fn archive_path(&self, written: &Written) -> PathBuf {
        self.storage
            .join("bosun-bulk")
            .join(DOC_GUEST)
            .join("media")
            .join(&written.name)
    }

    /// The volume's tree in the guest: every path below it, with a file's bytes.
    fn volume(&self) -> Vec<(String, Option<Vec<u8>>)> {
        let root = self.install.guest_root(VMID).join("srv/media");
        let mut out = Vec::new();
        walk(&root, &root, &mut out);
        out.sort();
        out
    }

    /// Whether the guest's shell ran (anything was done inside the guest beyond reading).
    fn shell_ran(&self) -> bool {
        self.install.calls().iter().any(|c| c.contains("[/bin/sh]"))
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Option<Vec<u8>>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let rel = path.strip_prefix(root).unwrap().display().to_string();
        if path.is_dir() {
            out.push((rel, None));
            walk(root, &path, out);
        } else {
            out.push((rel, Some(std::fs::read(&path).unwrap())));
        }
    }
}

fn exec_body() -> String {
    format!("{GUEST_TAR}\n{GUEST_SH}")
}

#[test]
fn the_recorded_archive_replaces_the_volume_and_leaves_nothing_of_the_restore_behind() {
    let bulk = Bulk::new(&exec_body());
    let before = bulk.volume();
    let written = bulk.archive();
    // The customer changes the volume: a file altered, one removed, one added, a directory.
    let root = bulk.install.guest_root(VMID).join("srv/media");
    std::fs::write(root.join("notes.txt"), b"overwritten by mistake\n").unwrap();
    std::fs::remove_file(root.join("films/a.mkv")).unwrap();
    std::fs::create_dir_all(root.join("new/deep")).unwrap();
    std::fs::write(root.join("new/deep/x.bin"), b"not in the archive").unwrap();
    // A killed earlier restore's unapproved extraction lies on the volume.
    std::fs::create_dir_all(root.join(".bosun-restore-ready/junk")).unwrap();
    assert_ne!(bulk.volume(), before);

    let call = bulk.restore(bulk.restore_args(&written));
    let Response::Ok { output } = call.response() else {
        panic!("{call:?}");
    };
    let Output::BulkRestored {
        archive,
        sha256,
        size,
    } = output
    else {
        panic!("{output:?}");
    };
    assert_eq!(PathBuf::from(archive), bulk.archive_path(&written));
    assert_eq!((sha256, size), (written.sha256.clone(), written.size));
    // Exactly what was archived: no file of the archive missing, none it lacks kept, and no
    // directory of the restore left.
    assert_eq!(bulk.volume(), before);
    let audit = call.audit();
    assert_eq!(audit["verb"], "bulk_restore");
    let effective: Vec<String> =
        serde_json::from_value(audit["caps"]["effective"].clone()).unwrap();
    assert_eq!(effective, expected_caps(VerbName::BulkRestore), "{audit}");

    // Asked once more (a lost answer), it converges on the same volume.
    let again = bulk.restore(bulk.restore_args(&written));
    assert!(matches!(again.response(), Response::Ok { .. }), "{again:?}");
    assert_eq!(bulk.volume(), before);
}

#[test]
fn an_archive_altered_after_it_was_recorded_is_refused_before_the_guest_is_entered() {
    let bulk = Bulk::new(&exec_body());
    let written = bulk.archive();
    std::fs::write(
        bulk.install.guest_root(VMID).join("srv/media/notes.txt"),
        b"today's notes\n",
    )
    .unwrap();
    let changed = bulk.volume();
    let path = bulk.archive_path(&written);
    let mut bytes = std::fs::read(&path).unwrap();
    // The same size, one byte of a file's content changed.
    let at = bytes.iter().position(|b| *b == 7).unwrap();
    bytes[at] = 8;
    std::fs::write(&path, &bytes).unwrap();
    let call = bulk.restore(bulk.restore_args(&written));
    match call.response() {
        Response::Refused {
            reason: Refusal::Conflict,
            message,
        } => assert!(message.contains("hashes to"), "{message}"),
        other => panic!("{other:?}"),
    }
    // A longer file is refused too (its size read bounded).
    bytes[at] = 7;
    bytes.extend_from_slice(&[0u8; 512]);
    std::fs::write(&path, &bytes).unwrap();
    let call = bulk.restore(bulk.restore_args(&written));
    assert!(
        matches!(
            call.response(),
            Response::Refused {
                reason: Refusal::Conflict,
                ..
            }
        ),
        "{call:?}"
    );
    assert!(!bulk.shell_ran(), "{:?}", bulk.install.calls());
    assert_eq!(bulk.volume(), changed);
}

#[test]
fn another_guests_archive_a_path_outside_and_a_link_are_refused_and_nothing_runs() {
    let bulk = Bulk::new(&exec_body());
    let written = bulk.archive();
    let before = bulk.volume();
    let args = bulk.restore_args(&written);
    let with = |key: &str, value: serde_json::Value| {
        let mut args = args.clone();
        args[key] = value;
        args
    };
    let refused = |call: &Call, want: Refusal| match call.response() {
        Response::Refused { reason, .. } if reason == want => {}
        other => panic!("expected {want:?}, got {other:?}: {call:?}"),
    };
    // Another guest's id: the stamp is bound to this one.
    refused(
        &bulk.restore(with("guest_id", OTHER.into())),
        Refusal::Conflict,
    );
    // A path that is no mount point of the guest.
    refused(
        &bulk.restore(with("path", "/etc".into())),
        Refusal::NotFound,
    );
    // A name that is not one of the volume's archives, and one leaving the directory.
    refused(
        &bulk.restore(with("archive", "bulk-media.partial-42".into())),
        Refusal::NotFound,
    );
    let bad = bulk.call("bulk_restore", with("archive", "../../x.tar".into()));
    assert!(!matches!(bad.response(), Response::Ok { .. }), "{bad:?}");
    // A storage outside every backup root.
    refused(
        &bulk.restore(with("storage_dir", "/tmp".into())),
        Refusal::NotFound,
    );
    // The archive swapped for a link to another file with the same bytes.
    let path = bulk.archive_path(&written);
    let elsewhere = bulk.install.dir.path().join("elsewhere.tar");
    std::fs::rename(&path, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
    refused(&bulk.restore(args.clone()), Refusal::UnsafePath);
    assert!(!bulk.shell_ran(), "{:?}", bulk.install.calls());
    assert_eq!(bulk.volume(), before);
}

#[test]
fn a_failed_extraction_leaves_the_volume_as_it_was() {
    // The guest's tar fails (a full volume): the script stops before anything is swapped.
    let failing = format!(
        r#"{GUEST_TAR}
/bin/sh) if [ "$5" = extract ]; then cat > /dev/null; mkdir -p "$g/$v$6/.bosun-restore-partial/x"; echo 'tar: ./films/a.mkv: Cannot write: No space left on device' >&2; exit 2; fi
exec /bin/sh -c "$3" "$4" "$5" "$g/$v$6" ;;"#
    );
    let bulk = Bulk::new(&failing);
    let written = bulk.archive();
    std::fs::write(
        bulk.install.guest_root(VMID).join("srv/media/notes.txt"),
        b"today's notes\n",
    )
    .unwrap();
    let call = bulk.restore(bulk.restore_args(&written));
    match call.response() {
        Response::Failed { message } => assert!(message.contains("No space left"), "{message}"),
        other => panic!("{other:?}"),
    }
    let root = bulk.install.guest_root(VMID).join("srv/media");
    assert_eq!(
        std::fs::read(root.join("notes.txt")).unwrap(),
        b"today's notes\n"
    );
    // What the failed extraction left is in its own directory, cleared by the next restore.
    assert!(root.join(".bosun-restore-partial").exists());
    assert!(!root.join(".bosun-restore-moving").exists());
}

#[test]
fn a_swap_a_killed_run_approved_is_finished_before_anything_else() {
    let bulk = Bulk::new(&exec_body());
    let before = bulk.volume();
    let written = bulk.archive();
    // A run killed halfway through its swap: some old entries moved out, the approved tree
    // still holding the rest of the new one.
    let root = bulk.install.guest_root(VMID).join("srv/media");
    std::fs::create_dir_all(root.join(".bosun-restore-old")).unwrap();
    std::fs::rename(root.join("films"), root.join(".bosun-restore-old/films")).unwrap();
    std::fs::create_dir_all(root.join(".bosun-restore-moving")).unwrap();
    std::fs::write(root.join(".bosun-restore-moving/fresh.txt"), b"new\n").unwrap();
    // The guest's shell finishes it when asked to swap (no extraction to approve).
    let swap = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(bosun_proto::helper::BULK_RESTORE_SCRIPT)
        .args(["bosun-bulk-restore", "swap"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(swap.status.success(), "{swap:?}");
    let names: Vec<String> = bulk.volume().into_iter().map(|(p, _)| p).collect();
    assert_eq!(names, ["fresh.txt"]);
    // And a restore converges on the archive.
    let call = bulk.restore(bulk.restore_args(&written));
    assert!(matches!(call.response(), Response::Ok { .. }), "{call:?}");
    assert_eq!(bulk.volume(), before);
}
