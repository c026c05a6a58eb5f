//! `bosun-hubd backup`: a live SQLite hub into one archive.

use std::io::{BufWriter, Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::archive::{Hashing, digest_file, header, sync_parent};
use super::{
    DATABASE, FORMAT, HubBackupError, MANIFEST, Manifest, Member, TLS_FILES, check_integrity, io,
    sql,
};
use crate::store::ARTIFACTS_DIR;

/// How often the database is copied again when an artifact it names was pruned meanwhile.
const ATTEMPTS: u32 = 3;
/// How long the copy waits for a lock the hub holds (it needs none in WAL mode but for a
/// checkpoint's moment).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// What a backup wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    /// The archive.
    pub path: PathBuf,
    /// When the database was copied (Unix ms).
    pub taken_ms: i64,
    /// The database's schema version.
    pub schema_version: i64,
    /// Hosts in the copy.
    pub hosts: u64,
    /// Artifacts in the archive.
    pub artifacts: usize,
    /// The archive's size in bytes.
    pub bytes: u64,
}

/// A copy of the database and what it names.
#[derive(Debug)]
struct Snapshot {
    taken_ms: i64,
    schema_version: i64,
    hosts: u64,
    /// Artifacts held as files: digest and size.
    artifacts: Vec<(String, u64)>,
}

/// The backup's files beside the archive until it is whole: removed unless it is.
#[derive(Debug)]
struct Scratch {
    archive: PathBuf,
    database: PathBuf,
}

impl Scratch {
    fn beside(out: &Path) -> Self {
        let name = out
            .file_name()
            .map_or_else(|| "hub-backup".into(), |n| n.to_string_lossy().into_owned());
        let tag = uuid::Uuid::new_v4().simple();
        let dir = out.parent().unwrap_or(Path::new(""));
        Self {
            archive: dir.join(format!(".{name}.partial-{tag}")),
            database: dir.join(format!(".{name}.db-{tag}")),
        }
    }

    fn remove_database(&self) {
        for suffix in ["", "-journal", "-wal", "-shm"] {
            let mut path = self.database.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.remove_database();
        let _ = std::fs::remove_file(&self.archive);
    }
}

/// Backs up the SQLite hub in `data_dir` into a new archive `out` (mode 0600; an existing file
/// is refused). The hub may be serving meanwhile. `now_ms` gives the time the copy is taken.
pub fn backup(
    data_dir: &Path,
    out: &Path,
    now_ms: impl Fn() -> i64,
) -> Result<BackupReport, HubBackupError> {
    let db = data_dir.join(DATABASE);
    if !db.is_file() {
        return Err(HubBackupError::NoDatabase {
            path: data_dir.to_owned(),
        });
    }
    if out.symlink_metadata().is_ok() {
        return Err(HubBackupError::OutExists {
            path: out.to_owned(),
        });
    }
    let scratch = Scratch::beside(out);
    let artifacts_dir = data_dir.join(ARTIFACTS_DIR);
    let mut attempt = 0;
    let snapshot = loop {
        attempt += 1;
        let snapshot = copy_database(&db, &scratch.database, now_ms())?;
        let vanished = snapshot
            .artifacts
            .iter()
            .find(|(sha256, _)| !artifacts_dir.join(sha256).is_file());
        match vanished {
            None => break snapshot,
            Some((sha256, _)) if attempt >= ATTEMPTS => {
                return Err(HubBackupError::ArtifactVanished {
                    sha256: sha256.clone(),
                    attempts: attempt,
                });
            }
            Some((sha256, _)) => {
                tracing::info!(%sha256, attempt, "an artifact was pruned while the backup ran; copying the database again");
                scratch.remove_database();
            }
        }
    };

    let mut members = Vec::new();
    let (size, sha256) = digest_file(&scratch.database)?;
    members.push((
        Member {
            path: DATABASE.to_owned(),
            size,
            sha256,
        },
        scratch.database.clone(),
    ));
    for tls in TLS_FILES {
        let path = data_dir.join(tls);
        if path.is_file() {
            let (size, sha256) = digest_file(&path)?;
            members.push((
                Member {
                    path: tls.to_owned(),
                    size,
                    sha256,
                },
                path,
            ));
        }
    }
    for (sha256, size) in &snapshot.artifacts {
        members.push((
            Member {
                path: format!("{ARTIFACTS_DIR}/{sha256}"),
                size: *size,
                sha256: sha256.clone(),
            },
            artifacts_dir.join(sha256),
        ));
    }
    let manifest = Manifest {
        format: FORMAT.to_owned(),
        taken_ms: snapshot.taken_ms,
        hub_version: env!("CARGO_PKG_VERSION").to_owned(),
        schema_version: snapshot.schema_version,
        hosts: snapshot.hosts,
        members: members.iter().map(|(member, _)| member.clone()).collect(),
    };
    write_archive(&scratch.archive, &manifest, &members)?;

    // A hard link names the whole archive at once and never replaces a file made meanwhile.
    match std::fs::hard_link(&scratch.archive, out) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(HubBackupError::OutExists {
                path: out.to_owned(),
            });
        }
        Err(err) => return Err(io("name the archive", out)(err)),
    }
    sync_parent(out)?;
    let bytes = out.metadata().map_err(io("read", out))?.len();
    drop(scratch);
    Ok(BackupReport {
        path: out.to_owned(),
        taken_ms: snapshot.taken_ms,
        schema_version: snapshot.schema_version,
        hosts: snapshot.hosts,
        artifacts: snapshot.artifacts.len(),
        bytes,
    })
}

/// Copies the database at `db` into a new file `copy` with SQLite's online backup, all pages
/// in one step: one read transaction, so the copy is one moment of the database and the
/// hub's writes carry on beside it (WAL).
fn copy_database(db: &Path, copy: &Path, taken_ms: i64) -> Result<Snapshot, HubBackupError> {
    let src = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql("open the hub's database"))?;
    src.busy_timeout(BUSY_TIMEOUT)
        .map_err(sql("open the hub's database"))?;
    let mut dst = Connection::open(copy).map_err(sql("create the database copy"))?;
    {
        use rusqlite::backup::{Backup, StepResult};
        let backup = Backup::new(&src, &mut dst).map_err(sql("copy the hub's database"))?;
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        // All pages in one step (-1), not a few per step: a step that sees the database change
        // starts over, which under the hub's polls would never end.
        loop {
            match backup.step(-1).map_err(sql("copy the hub's database"))? {
                StepResult::Done => break,
                StepResult::More | StepResult::Busy | StepResult::Locked
                    if std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    return Err(HubBackupError::Sqlite {
                        op: "copy the hub's database",
                        source: rusqlite::Error::SqliteFailure(
                            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                            Some(format!("still locked after {BUSY_TIMEOUT:?}")),
                        ),
                    });
                }
            }
        }
    }
    drop(src);
    // One self-contained file: no write-ahead log beside it.
    dst.pragma_update(None, "journal_mode", "DELETE")
        .map_err(sql("finish the database copy"))?;
    check_integrity(&dst)?;
    let schema_version: i64 = dst
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(sql("read the copy's schema version"))?;
    let hosts: i64 = dst
        .query_row("SELECT COUNT(*) FROM hosts", [], |r| r.get(0))
        .map_err(sql("count the copy's hosts"))?;
    let artifacts = dst
        .prepare("SELECT sha256, size FROM artifacts WHERE data IS NULL ORDER BY sha256")
        .and_then(|mut stmt| {
            stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                ))
            })?
            .collect::<Result<Vec<_>, _>>()
        })
        .map_err(sql("list the copy's artifacts"))?;
    Ok(Snapshot {
        taken_ms,
        schema_version,
        hosts: u64::try_from(hosts).unwrap_or(0),
        artifacts,
    })
}

/// Writes the archive: the manifest, then each member from its file, each checked against
/// what the manifest says while it is copied.
fn write_archive(
    path: &Path,
    manifest: &Manifest,
    members: &[(Member, PathBuf)],
) -> Result<(), HubBackupError> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io("create", path))?;
    let mut builder = tar::Builder::new(BufWriter::new(file));
    let json = serde_json::to_vec_pretty(manifest)
        .map_err(|e| io("write the manifest of", path)(std::io::Error::other(e.to_string())))?;
    builder
        .append_data(
            &mut header(json.len() as u64, manifest.taken_ms),
            MANIFEST,
            json.as_slice(),
        )
        .map_err(io("write", path))?;
    for (member, source) in members {
        let file = match std::fs::File::open(source) {
            Ok(file) => file,
            Err(err)
                if err.kind() == std::io::ErrorKind::NotFound
                    && member.path.starts_with(ARTIFACTS_DIR) =>
            {
                return Err(HubBackupError::ArtifactVanished {
                    sha256: member.sha256.clone(),
                    attempts: ATTEMPTS,
                });
            }
            Err(err) => return Err(io("open", source)(err)),
        };
        let mut hashing = Hashing::new(file);
        builder
            .append_data(
                &mut header(member.size, manifest.taken_ms),
                &member.path,
                (&mut hashing).take(member.size),
            )
            .map_err(io("write", path))?;
        let (read, sha256) = hashing.finish();
        if read != member.size || sha256 != member.sha256 {
            return Err(if member.path.starts_with(ARTIFACTS_DIR) {
                HubBackupError::ArtifactDamaged {
                    sha256: member.sha256.clone(),
                    found: sha256,
                }
            } else {
                HubBackupError::Changed {
                    path: source.clone(),
                }
            });
        }
    }
    let mut out = builder
        .into_inner()
        .and_then(|buffered| buffered.into_inner().map_err(|e| e.into_error()))
        .map_err(io("write", path))?;
    out.flush()
        .and_then(|()| out.sync_all())
        .map_err(io("flush", path))
}
