//! `bosun-hubd restore`: a hub back from its archive.

use std::collections::HashSet;
use std::io::{BufReader, Read as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use super::archive::{Hashing, sync_parent};
use super::{
    DATABASE, FORMAT, HubBackupError, MANIFEST, MAX_MANIFEST_BYTES, MAX_MEMBERS, Manifest,
    check_integrity, io, is_member_path, sql,
};
use crate::store::HubKeyStore as _;
use crate::store::sqlite::SqliteStore;
use crate::store::{ARTIFACTS_DIR, RestoredHub};

/// What a restore brought back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// When the backup was taken (Unix ms).
    pub taken_ms: i64,
    /// The hub version that made it.
    pub made_by: String,
    /// Its schema version (the store migrated it to this hub's when older).
    pub schema_version: i64,
    /// Hosts restored.
    pub hosts: u64,
    /// Artifacts restored.
    pub artifacts: usize,
    /// Where the files of an earlier hub found in the data directory were moved.
    pub moved_aside: Option<PathBuf>,
}

/// The staging directory inside the data directory: removed unless the restore completes.
#[derive(Debug)]
struct Staging {
    dir: PathBuf,
    done: bool,
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// What an earlier hub may have left in a data directory without its database.
const LEFTOVERS: [&str; 4] = ["hub.sqlite-wal", "hub.sqlite-shm", "tls", ARTIFACTS_DIR];

/// Restores the archive at `archive` into `data_dir`, which must hold no hub database. The
/// hub must not be running. `now_ms` is recorded as the restore's time.
pub fn restore(
    archive: &Path,
    data_dir: &Path,
    now_ms: i64,
) -> Result<RestoreReport, HubBackupError> {
    let db = data_dir.join(DATABASE);
    if db.symlink_metadata().is_ok() {
        return Err(HubBackupError::DataDirInUse { path: db });
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(data_dir)
        .map_err(io("create", data_dir))?;
    let mut staging = Staging {
        dir: data_dir.join(format!(".restore-{}", uuid::Uuid::new_v4().simple())),
        done: false,
    };
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging.dir)
        .map_err(io("create", &staging.dir))?;

    let manifest = unpack(archive, &staging.dir)?;
    {
        let conn = Connection::open_with_flags(
            staging.dir.join(DATABASE),
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql("open the restored database"))?;
        check_integrity(&conn)?;
        let found: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(sql("read the restored database's schema version"))?;
        let known = crate::store::sqlite::schema::MIGRATIONS.len();
        if usize::try_from(found).map_or(true, |found| found > known) {
            return Err(HubBackupError::TooNew {
                found,
                known,
                made_by: manifest.hub_version,
            });
        }
    }
    // Opened where it stands: the migrations run when the backup is older than this hub, and
    // the restore is recorded before the hub can serve it.
    {
        let store = SqliteStore::open(&staging.dir).map_err(HubBackupError::Store)?;
        let source = archive.file_name().map_or_else(
            || archive.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        store
            .mark_restored(&RestoredHub {
                now_ms,
                backup_taken_ms: Some(manifest.taken_ms),
                source,
            })
            .map_err(HubBackupError::Store)?;
    }

    hand_over(&staging.dir, data_dir)?;

    let found: Vec<&str> = LEFTOVERS
        .into_iter()
        .filter(|name| data_dir.join(name).symlink_metadata().is_ok())
        .collect();
    let moved_aside = if found.is_empty() {
        None
    } else {
        let aside = data_dir.join(format!(".before-restore-{now_ms}"));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&aside)
            .map_err(io("create", &aside))?;
        for name in found {
            let from = data_dir.join(name);
            std::fs::rename(&from, aside.join(name)).map_err(io("move aside", &from))?;
        }
        Some(aside)
    };
    // The database last: until it is in place the data directory holds no hub.
    for name in [
        "tls",
        ARTIFACTS_DIR,
        "hub.sqlite-wal",
        "hub.sqlite-shm",
        DATABASE,
    ] {
        let from = staging.dir.join(name);
        if from.symlink_metadata().is_ok() {
            let to = data_dir.join(name);
            std::fs::rename(&from, &to).map_err(io("move into place", &to))?;
        }
    }
    sync_parent(&db)?;
    staging.done = true;
    let _ = std::fs::remove_dir_all(&staging.dir);
    Ok(RestoreReport {
        taken_ms: manifest.taken_ms,
        made_by: manifest.hub_version,
        schema_version: manifest.schema_version,
        hosts: manifest.hosts,
        artifacts: manifest
            .members
            .iter()
            .filter(|m| m.path.starts_with(ARTIFACTS_DIR))
            .count(),
        moved_aside,
    })
}

/// Gives what was staged to the data directory's owner when they differ (a restore run as
/// root into the package's directory, which the hub's own user owns), so the hub can open it.
fn hand_over(staged: &Path, data_dir: &Path) -> Result<(), HubBackupError> {
    use std::os::unix::fs::MetadataExt as _;
    let owner = data_dir.metadata().map_err(io("read", data_dir))?;
    let ours = staged.metadata().map_err(io("read", staged))?;
    if (ours.uid(), ours.gid()) == (owner.uid(), owner.gid()) {
        return Ok(());
    }
    let mut pending = vec![staged.to_owned()];
    while let Some(path) = pending.pop() {
        std::os::unix::fs::chown(&path, Some(owner.uid()), Some(owner.gid()))
            .map_err(io("give the data directory's owner", &path))?;
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(io("list", &path))? {
                pending.push(entry.map_err(io("list", &path))?.path());
            }
        }
    }
    Ok(())
}

/// Reads the manifest and writes every member it lists into `dir`, each checked against it;
/// anything the manifest does not list, or lists otherwise, refuses the archive.
fn unpack(archive: &Path, dir: &Path) -> Result<Manifest, HubBackupError> {
    let bad = |reason: String| HubBackupError::BadArchive {
        path: archive.to_owned(),
        reason,
    };
    let file = std::fs::File::open(archive).map_err(io("open", archive))?;
    let mut tar = tar::Archive::new(BufReader::new(file));
    let mut entries = tar.entries().map_err(|e| bad(e.to_string()))?;

    let mut first = entries
        .next()
        .ok_or_else(|| bad("it is empty".to_owned()))?
        .map_err(|e| bad(e.to_string()))?;
    if first.path_bytes().as_ref() != MANIFEST.as_bytes()
        || first.header().entry_type() != tar::EntryType::Regular
    {
        return Err(bad(format!("its first member is not {MANIFEST}")));
    }
    if first.size() > MAX_MANIFEST_BYTES {
        return Err(bad(format!(
            "its manifest is larger than {MAX_MANIFEST_BYTES} bytes"
        )));
    }
    let mut json = Vec::new();
    (&mut first)
        .take(MAX_MANIFEST_BYTES)
        .read_to_end(&mut json)
        .map_err(|e| bad(e.to_string()))?;
    drop(first);
    let manifest: Manifest =
        serde_json::from_slice(&json).map_err(|e| bad(format!("its manifest: {e}")))?;
    check_manifest(&manifest).map_err(bad)?;

    for member in &manifest.members {
        let mut entry = entries
            .next()
            .ok_or_else(|| bad(format!("it ends before {}", member.path)))?
            .map_err(|e| bad(e.to_string()))?;
        if entry.path_bytes().as_ref() != member.path.as_bytes() {
            return Err(bad(format!(
                "it holds `{}` where its manifest lists {}",
                String::from_utf8_lossy(&entry.path_bytes()),
                member.path
            )));
        }
        if entry.header().entry_type() != tar::EntryType::Regular || entry.size() != member.size {
            return Err(bad(format!(
                "{} is not a file of {} bytes",
                member.path, member.size
            )));
        }
        let dest = dir.join(&member.path);
        if let Some(parent) = dest.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(io("create", parent))?;
        }
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&dest)
            .map_err(io("create", &dest))?;
        let mut hashing = Hashing::new(&mut entry);
        std::io::copy(&mut hashing, &mut out).map_err(|e| bad(e.to_string()))?;
        let (size, sha256) = hashing.finish();
        if size != member.size || sha256 != member.sha256 {
            return Err(bad(format!(
                "{} does not hold the bytes its manifest names",
                member.path
            )));
        }
        out.sync_all().map_err(io("flush", &dest))?;
    }
    if let Some(extra) = entries.next() {
        let name = extra
            .map(|e| String::from_utf8_lossy(&e.path_bytes()).into_owned())
            .unwrap_or_default();
        return Err(bad(format!(
            "it holds `{name}`, which its manifest does not list"
        )));
    }
    Ok(manifest)
}

/// What a manifest must be before any member is read.
fn check_manifest(manifest: &Manifest) -> Result<(), String> {
    if manifest.format != FORMAT {
        return Err(format!(
            "its manifest's format is `{}`, not {FORMAT}",
            manifest.format
        ));
    }
    if manifest.members.len() > MAX_MEMBERS {
        return Err(format!(
            "its manifest lists {} members, more than {MAX_MEMBERS}",
            manifest.members.len()
        ));
    }
    let mut seen = HashSet::new();
    for member in &manifest.members {
        if !is_member_path(&member.path) {
            return Err(format!(
                "its manifest lists `{}`, which no hub backup holds",
                member.path
            ));
        }
        if !seen.insert(member.path.as_str()) {
            return Err(format!("its manifest lists {} twice", member.path));
        }
        if !bosun_proto::golden::is_sha256(&member.sha256) {
            return Err(format!(
                "its manifest's digest of {} is malformed",
                member.path
            ));
        }
        if let Some(name) = member.path.strip_prefix("artifacts/")
            && name != member.sha256
        {
            return Err(format!("its manifest gives artifact {name} another digest"));
        }
    }
    if !seen.contains(DATABASE) {
        return Err(format!("its manifest lists no {DATABASE}"));
    }
    Ok(())
}
