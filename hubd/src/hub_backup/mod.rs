//! The SQLite hub's own backup: `bosun-hubd backup` and `bosun-hubd restore`
//! (`docs/hub-backup.md`).
//!
//! A backup is one tar archive holding everything the hub keeps in its data directory: a
//! consistent copy of `hub.sqlite` made with SQLite's online backup while the hub serves (one
//! read transaction, so polls carry on and the copy is one moment of the database), the
//! self-signed certificate and its key (`tls/`), and the agent artifacts the copy names
//! (`artifacts/<sha256>`). Its first member, `manifest.json`, lists every other member in
//! order with its size and SHA-256; a restore takes nothing the manifest does not list,
//! checks every byte against it, and refuses an archive made by a newer hub.
//!
//! A restore builds the hub in a staging directory inside the data directory, opens it there
//! (the store's migrations run when the backup is older than this hub), records the restore
//! (`Store::mark_restored`: a `hub_restored` event, and no desired state is numbered for a
//! host before it has polled the restored hub), and only then moves it into place, the
//! database last. It never writes over a hub: a data directory that already holds a database
//! is refused, and files of an earlier hub without one are moved aside, not removed.
//!
//! A PostgreSQL hub is backed up with `pg_dump` (the documentation gives the procedure);
//! `bosun-hubd restore --after-pg-restore` records its restore the same way.

mod archive;
mod restore;
mod take;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use restore::{RestoreReport, restore};
pub use take::{BackupReport, backup};

use crate::store::StoreError;

/// What the manifest's `format` says.
pub const FORMAT: &str = "bosun.hub-backup/v1";
/// The manifest's name: the archive's first member.
const MANIFEST: &str = "manifest.json";
/// The database's name in the archive (and in the data directory).
const DATABASE: &str = crate::store::sqlite::DB_FILE;
/// The self-signed certificate and key, as the data directory holds them.
const TLS_FILES: [&str; 2] = ["tls/cert.pem", "tls/key.pem"];
/// Largest manifest a restore reads.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;
/// Most members a manifest may list: the database, the two TLS files and the artifacts (the
/// hub keeps at most `store::MAX_ARTIFACTS`, 8), with room to spare.
const MAX_MEMBERS: usize = 64;

/// The archive's table of contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    /// Always [`FORMAT`].
    format: String,
    /// When the database was copied (Unix ms).
    taken_ms: i64,
    /// The version of the hub that made it.
    hub_version: String,
    /// The database's schema version.
    schema_version: i64,
    /// How many hosts the database holds.
    hosts: u64,
    /// Every member after the manifest, in archive order.
    members: Vec<Member>,
}

/// One file of the archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Member {
    /// Its path in the archive and under the data directory.
    path: String,
    /// Its size in bytes.
    size: u64,
    /// SHA-256 of its bytes, lowercase hex.
    sha256: String,
}

/// Whether `path` names a file a hub backup may hold: the database, a TLS file or an artifact
/// named by its digest (so no member can land outside the data directory).
fn is_member_path(path: &str) -> bool {
    path == DATABASE
        || TLS_FILES.contains(&path)
        || path
            .strip_prefix("artifacts/")
            .is_some_and(bosun_proto::golden::is_sha256)
}

/// Why a backup or a restore failed. Nothing is left half-made: a failed backup leaves no
/// archive, a failed restore leaves the data directory as it was.
#[derive(Debug, thiserror::Error)]
pub enum HubBackupError {
    /// The hub keeps its state in PostgreSQL: `pg_dump` backs it up.
    #[error(
        "this hub keeps its state in PostgreSQL: back it up with pg_dump (docs/hub-backup.md); `bosun-hubd backup` copies a SQLite hub"
    )]
    NotSqlite,
    /// The data directory holds no hub database.
    #[error("{} holds no hub database ({DATABASE})", .path.display())]
    NoDatabase {
        /// The data directory.
        path: PathBuf,
    },
    /// The archive to write exists already.
    #[error("{} exists already; name a new file", .path.display())]
    OutExists {
        /// The path given.
        path: PathBuf,
    },
    /// The data directory to restore into holds a hub already.
    #[error(
        "{} holds a hub database already; restore into an empty data directory (move the old one away first)",
        .path.display()
    )]
    DataDirInUse {
        /// The database found.
        path: PathBuf,
    },
    /// A file operation failed.
    #[error("cannot {op} {}", .path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A database operation failed.
    #[error("cannot {op}")]
    Sqlite {
        /// What was being done.
        op: &'static str,
        /// Why.
        #[source]
        source: rusqlite::Error,
    },
    /// The copy of the database is damaged (SQLite's integrity check).
    #[error("the database copy fails SQLite's integrity check: {report}")]
    Damaged {
        /// The check's first lines.
        report: String,
    },
    /// Artifacts kept disappearing while the backup copied them (a prune ran each time).
    #[error(
        "artifact {sha256} was removed while the backup copied it, {attempts} times; run the backup again"
    )]
    ArtifactVanished {
        /// The artifact.
        sha256: String,
        /// How many copies were tried.
        attempts: u32,
    },
    /// An artifact's file does not hold the bytes its name says.
    #[error(
        "artifact file {sha256} holds other bytes (SHA-256 {found}); the hub's artifacts are damaged"
    )]
    ArtifactDamaged {
        /// The artifact.
        sha256: String,
        /// What its bytes hash to.
        found: String,
    },
    /// A file changed while the backup copied it (a certificate replaced meanwhile).
    #[error("{} changed while the backup copied it; run the backup again", .path.display())]
    Changed {
        /// The file.
        path: PathBuf,
    },
    /// The archive is not a hub backup, or not a whole one.
    #[error("{} is not a usable hub backup: {reason}", .path.display())]
    BadArchive {
        /// The archive.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The backup was made by a newer hub.
    #[error(
        "the backup's database has schema version {found}, newer than this hub understands ({known}); restore it with the hub version that made it ({made_by})"
    )]
    TooNew {
        /// The backup's schema version.
        found: i64,
        /// This hub's newest.
        known: usize,
        /// The version that made the backup.
        made_by: String,
    },
    /// The store refused to open the restored database or to record the restore.
    #[error("the restored hub's store")]
    Store(#[source] StoreError),
}

/// Shorthand for an I/O error on `path` during `op`.
fn io(op: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> HubBackupError {
    let path = path.to_owned();
    move |source| HubBackupError::Io { op, path, source }
}

/// Shorthand for a database error during `op`.
fn sql(op: &'static str) -> impl FnOnce(rusqlite::Error) -> HubBackupError {
    move |source| HubBackupError::Sqlite { op, source }
}

/// SQLite's integrity check of `conn`'s database: `Damaged` unless it says `ok`.
fn check_integrity(conn: &rusqlite::Connection) -> Result<(), HubBackupError> {
    let lines: Vec<String> = conn
        .prepare("PRAGMA integrity_check(8)")
        .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect())
        .map_err(sql("check the database copy"))?;
    if lines.len() == 1 && lines[0] == "ok" {
        Ok(())
    } else {
        Err(HubBackupError::Damaged {
            report: lines.join("; "),
        })
    }
}
