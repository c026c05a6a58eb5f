//! The archive round trip and every way a restore refuses an archive, leaving the data
//! directory as it was.
#![allow(clippy::unwrap_used)]

use std::io::Read as _;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use super::{HubBackupError, backup, restore};
use crate::secret::{self, SecretHash, SecretKind};
use crate::store::sqlite::{DB_FILE, SqliteStore};
use crate::store::{
    AccessStore as _, AlertStore as _, ArtifactStore as _, HostStore as _, HubKeyStore as _,
    JobStore as _,
};
use crate::store::{DesiredWrite, Enrollment, NewEnrollToken, StoreError};

const NOW: i64 = 1_790_000_000_000;

/// A hub data directory with `hosts` enrolled hosts (each with a desired state), one artifact
/// and a self-signed certificate, as `init` leaves it.
fn hub(dir: &Path, hosts: usize) -> Vec<Uuid> {
    crate::init_store(
        dir,
        vec!["localhost".into()],
        false,
        &crate::store::StoreLocation::Sqlite,
    )
    .unwrap();
    let store = SqliteStore::open(dir).unwrap();
    let ids = (0..hosts)
        .map(|_| {
            let (token, hash) = secret::mint(SecretKind::Enrollment);
            store
                .create_enroll_token(NewEnrollToken {
                    hash,
                    created_ms: NOW,
                    expires_ms: NOW + 60_000,
                    require_approval: false,
                    note: None,
                    restore_host: None,
                })
                .unwrap();
            let (_, key_hash) = secret::mint(SecretKind::HostKey);
            let host_id = store
                .enroll(Enrollment {
                    token_hash: SecretHash::of(token.expose()),
                    host_id: Uuid::new_v4(),
                    key_hash,
                    hostname: "pve".into(),
                    agent_version: "0.1.0".into(),
                    pve_version: None,
                    poll_interval_s: 30,
                    now_ms: NOW,
                })
                .unwrap()
                .host_id;
            store.put_desired(desired(host_id)).unwrap();
            host_id
        })
        .collect();
    store
        .put_artifact(&sha256(b"agent"), b"agent", NOW)
        .unwrap();
    ids
}

fn desired(host_id: Uuid) -> DesiredWrite {
    DesiredWrite {
        host_id,
        document: include_str!("../../../docs/proto/desired.json").into(),
        idempotency: None,
        correlation_id: None,
        set_by: Some("admin".into()),
        now_ms: NOW,
    }
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// An archive's members, in order, as (path, bytes).
type Members = Vec<(String, Vec<u8>)>;

/// The archive's members.
fn members(archive: &Path) -> Members {
    let mut tar = tar::Archive::new(std::fs::File::open(archive).unwrap());
    tar.entries()
        .unwrap()
        .map(|entry| {
            let mut entry = entry.unwrap();
            let path = String::from_utf8(entry.path_bytes().into_owned()).unwrap();
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).unwrap();
            (path, bytes)
        })
        .collect()
}

/// Writes `members` as a new archive at `path`.
fn repack(path: &Path, members: &[(String, Vec<u8>)]) {
    let mut builder = tar::Builder::new(std::fs::File::create(path).unwrap());
    for (name, bytes) in members {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o600);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, name, bytes.as_slice())
            .unwrap();
    }
    builder.finish().unwrap();
}

/// A hub of two hosts and its backup: (scratch dir, the hub's hosts, the archive).
fn backed_up() -> (tempfile::TempDir, Vec<Uuid>, PathBuf) {
    let scratch = tempfile::tempdir().unwrap();
    let source = scratch.path().join("hub");
    let hosts = hub(&source, 2);
    let archive = scratch.path().join("hub.tar");
    backup(&source, &archive, || NOW + 1).unwrap();
    (scratch, hosts, archive)
}

/// What a refused restore must leave: the data directory without a database or staging.
fn untouched(dir: &Path) {
    assert!(!dir.join(DB_FILE).exists(), "no database appears");
    if dir.exists() {
        let staged: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(".restore-"))
            .collect();
        assert!(staged.is_empty(), "staging left behind: {staged:?}");
    }
}

#[test]
fn a_hub_comes_back_whole_from_its_archive() {
    let (scratch, hosts, archive) = backed_up();
    let source = scratch.path().join("hub");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        archive.metadata().unwrap().permissions().mode() & 0o777,
        0o600,
        "the archive holds the TLS key"
    );
    let names: Vec<String> = members(&archive).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names[0], "manifest.json");
    assert!(names.contains(&"hub.sqlite".to_owned()));
    assert!(names.contains(&"tls/key.pem".to_owned()));
    assert!(names.contains(&format!("artifacts/{}", sha256(b"agent"))));

    let target = scratch.path().join("restored");
    let report = restore(&archive, &target, NOW + 2).unwrap();
    assert_eq!(report.hosts, 2);
    assert_eq!(report.artifacts, 1);
    assert_eq!(report.taken_ms, NOW + 1);
    assert_eq!(report.moved_aside, None);
    untouched_staging(&target);
    for tls in super::TLS_FILES {
        assert_eq!(
            std::fs::read(source.join(tls)).unwrap(),
            std::fs::read(target.join(tls)).unwrap(),
            "{tls} restored byte for byte"
        );
    }

    let store = SqliteStore::open(&target).unwrap();
    assert_eq!(store.list_hosts().unwrap().len(), 2);
    for host in &hosts {
        assert_eq!(store.desired_current(*host).unwrap().unwrap().generation, 1);
    }
    let mut bytes = Vec::new();
    match store.artifact(&sha256(b"agent")).unwrap().unwrap() {
        crate::store::ArtifactBytes::File { mut file, .. } => {
            file.read_to_end(&mut bytes).unwrap();
        }
        crate::store::ArtifactBytes::Inline(data) => bytes = data,
    }
    assert_eq!(bytes, b"agent");
    assert_eq!(store.restored_ms().unwrap(), Some(NOW + 2));
    let events: Vec<_> = store
        .list_events(crate::store::EventQuery {
            host_id: None,
            after: None,
            limit: 1000,
        })
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "hub_restored")
        .collect();
    assert_eq!(events.len(), 1, "the restore is in the audit trail");
    assert_eq!(events[0].detail["backup_taken_ms"], NOW + 1);
}

fn untouched_staging(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "nothing hidden left: {left:?}");
}

#[test]
fn a_restored_hub_numbers_no_generation_before_the_host_polls() {
    let (scratch, hosts, archive) = backed_up();
    let target = scratch.path().join("restored");
    restore(&archive, &target, NOW + 2).unwrap();
    let store = SqliteStore::open(&target).unwrap();
    let err = store.put_desired(desired(hosts[0])).unwrap_err();
    assert!(
        matches!(err, StoreError::NotSeenSinceRestore { host_id, restored_ms } if host_id == hosts[0] && restored_ms == NOW + 2),
        "{err:?}"
    );
}

#[test]
fn a_data_directory_holding_a_hub_is_refused() {
    let (scratch, _, archive) = backed_up();
    let source = scratch.path().join("hub");
    let before = std::fs::read(source.join(DB_FILE)).unwrap();
    let err = restore(&archive, &source, NOW + 2).unwrap_err();
    assert!(matches!(err, HubBackupError::DataDirInUse { .. }), "{err}");
    assert_eq!(std::fs::read(source.join(DB_FILE)).unwrap(), before);
}

#[test]
fn an_existing_archive_is_never_overwritten() {
    let (scratch, _, archive) = backed_up();
    let before = std::fs::read(&archive).unwrap();
    let err = backup(&scratch.path().join("hub"), &archive, || NOW + 3).unwrap_err();
    assert!(matches!(err, HubBackupError::OutExists { .. }), "{err}");
    assert_eq!(std::fs::read(&archive).unwrap(), before);
    let hidden: Vec<_> = std::fs::read_dir(scratch.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "no scratch files left: {hidden:?}");
}

#[test]
fn a_directory_without_a_hub_has_nothing_to_back_up() {
    let scratch = tempfile::tempdir().unwrap();
    let err = backup(scratch.path(), &scratch.path().join("x.tar"), || NOW).unwrap_err();
    assert!(matches!(err, HubBackupError::NoDatabase { .. }), "{err}");
    assert!(!scratch.path().join("x.tar").exists());
}

#[test]
fn an_earlier_hubs_files_are_moved_aside_not_removed() {
    let (scratch, _, archive) = backed_up();
    let target = scratch.path().join("restored");
    std::fs::create_dir_all(target.join("tls")).unwrap();
    std::fs::write(target.join("tls/cert.pem"), b"an older certificate").unwrap();
    let report = restore(&archive, &target, NOW + 2).unwrap();
    let aside = report.moved_aside.unwrap();
    assert_eq!(
        std::fs::read(aside.join("tls/cert.pem")).unwrap(),
        b"an older certificate"
    );
    assert_ne!(
        std::fs::read(target.join("tls/cert.pem")).unwrap(),
        b"an older certificate"
    );
}

/// Every damaged archive is refused with what is wrong, and the restore leaves nothing.
#[test]
fn damaged_or_foreign_archives_are_refused_and_leave_nothing() {
    let (scratch, _, archive) = backed_up();
    let good = members(&archive);
    let manifest: serde_json::Value = serde_json::from_slice(&good[0].1).unwrap();
    let with_manifest = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut m = manifest.clone();
        edit(&mut m);
        let mut all = good.clone();
        all[0].1 = serde_json::to_vec(&m).unwrap();
        all
    };
    let flipped = {
        let mut all = good.clone();
        let db = all.iter_mut().find(|(n, _)| n == "hub.sqlite").unwrap();
        let last = db.1.len() - 1;
        db.1[last] ^= 0xff;
        all
    };
    let extra = {
        let mut all = good.clone();
        all.push(("tls/extra.pem".into(), b"x".to_vec()));
        all
    };
    let truncated = good[..good.len() - 1].to_vec();
    let manifest_last = {
        let mut all = good.clone();
        let m = all.remove(0);
        all.push(m);
        all
    };
    let traversal = with_manifest(&|m| {
        m["members"][0]["path"] = "../escape".into();
    });
    let other_format = with_manifest(&|m| m["format"] = "bosun.hub-backup/v0".into());
    let unknown_field = with_manifest(&|m| m["extra"] = true.into());
    let cases: Vec<(&str, Members, &str)> = vec![
        ("a flipped byte", flipped, "does not hold the bytes"),
        ("an unlisted member", extra, "does not list"),
        ("a missing member", truncated, "ends before"),
        ("the manifest last", manifest_last, "first member"),
        (
            "a path outside the data directory",
            traversal,
            "no hub backup holds",
        ),
        ("another format", other_format, "format"),
        ("an unknown manifest field", unknown_field, "manifest"),
        ("nothing", Vec::new(), "empty"),
    ];
    for (what, members, says) in cases {
        let bad = scratch.path().join("bad.tar");
        repack(&bad, &members);
        let target = scratch.path().join("target");
        let err = restore(&bad, &target, NOW + 2).unwrap_err();
        assert!(
            matches!(&err, HubBackupError::BadArchive { reason, .. } if reason.contains(says)),
            "{what}: {err}"
        );
        untouched(&target);
        assert!(!scratch.path().join("escape").exists());
    }
}

#[test]
fn a_backup_from_a_newer_hub_is_refused() {
    let (scratch, _, archive) = backed_up();
    let mut all = members(&archive);
    let db_path = scratch.path().join("newer.sqlite");
    let db = all.iter_mut().find(|(n, _)| n == "hub.sqlite").unwrap();
    std::fs::write(&db_path, &db.1).unwrap();
    let conn = rusqlite::Connection::open(&db_path).unwrap();
    let newer = i64::try_from(crate::store::sqlite::schema::MIGRATIONS.len()).unwrap() + 1;
    conn.pragma_update(None, "user_version", newer).unwrap();
    drop(conn);
    db.1 = std::fs::read(&db_path).unwrap();
    let (size, digest) = (db.1.len(), sha256(&db.1));
    let mut manifest: serde_json::Value = serde_json::from_slice(&all[0].1).unwrap();
    for member in manifest["members"].as_array_mut().unwrap() {
        if member["path"] == "hub.sqlite" {
            member["size"] = size.into();
            member["sha256"] = digest.clone().into();
        }
    }
    all[0].1 = serde_json::to_vec(&manifest).unwrap();
    let bad = scratch.path().join("newer.tar");
    repack(&bad, &all);
    let target = scratch.path().join("target");
    let err = restore(&bad, &target, NOW + 2).unwrap_err();
    assert!(matches!(err, HubBackupError::TooNew { .. }), "{err}");
    untouched(&target);
}
