//! The SQLite hub's artifact files (decision 0041): `artifacts/<sha256>` beside the database,
//! each written to a temporary file in the same directory, flushed to disk and renamed, so a
//! name only ever holds whole bytes. The `artifacts` table holds their metadata; a file is
//! written before its row and removed after its row is gone, so a crash leaves at most a file
//! no row names, which the next open removes.

use std::io::{Seek as _, Write as _};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use rusqlite::Connection;

use super::artifacts::{ArtifactBytes, check, sha256_of};
use super::{StoreError, StoreResult};

/// The directory beside the database that holds the files.
pub const ARTIFACTS_DIR: &str = "artifacts";

/// Where a temporary file's name starts (never a digest's).
const TEMP_PREFIX: &str = ".upload-";

/// The artifact directory of one SQLite store.
#[derive(Debug)]
pub(super) struct ArtifactFiles {
    dir: PathBuf,
    /// Held by an upload from writing its file to removing the files it pruned, so a prune
    /// never removes a file another upload just wrote for a row it is about to store.
    uploads: Mutex<()>,
}

fn io_err<'p>(op: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> StoreError + 'p {
    move |source| StoreError::ArtifactFile {
        op,
        path: path.to_owned(),
        source,
    }
}

impl ArtifactFiles {
    /// The directory beside `data_dir`'s database, created if missing.
    pub(super) fn open(data_dir: &Path) -> StoreResult<Self> {
        let dir = data_dir.join(ARTIFACTS_DIR);
        std::fs::create_dir_all(&dir).map_err(io_err("create artifact directory", &dir))?;
        Ok(Self {
            dir,
            uploads: Mutex::new(()),
        })
    }

    fn path(&self, sha256: &str) -> PathBuf {
        self.dir.join(sha256)
    }

    /// Takes the upload lock (held from writing a file to removing what the upload pruned).
    pub(super) fn upload_lock(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.uploads.lock()
    }

    /// Writes `data` as `sha256`'s file: a temporary file, flushed, renamed, the directory
    /// flushed. Bytes already there under that name are kept.
    pub(super) fn write(&self, sha256: &str, data: &[u8]) -> StoreResult<()> {
        let path = self.path(sha256);
        let temp = self
            .dir
            .join(format!("{TEMP_PREFIX}{}", uuid::Uuid::new_v4().simple()));
        let written = (|| {
            let mut file = std::fs::File::create_new(&temp)?;
            file.write_all(data)?;
            file.sync_all()
        })();
        if let Err(source) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(io_err("write artifact file", &temp)(source));
        }
        if let Err(source) = std::fs::rename(&temp, &path) {
            let _ = std::fs::remove_file(&temp);
            return Err(io_err("rename artifact file", &path)(source));
        }
        std::fs::File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .map_err(io_err("flush artifact directory", &self.dir))
    }

    /// `sha256`'s file, open at its start, once its bytes are checked against the name.
    pub(super) fn open_checked(&self, sha256: &str) -> StoreResult<ArtifactBytes> {
        let path = self.path(sha256);
        let mut file = std::fs::File::open(&path).map_err(io_err("open artifact file", &path))?;
        let found = sha256_of(&mut file).map_err(io_err("read artifact file", &path))?;
        check(sha256, &found)?;
        let size = file
            .seek(std::io::SeekFrom::Start(0))
            .and_then(|_| file.metadata())
            .map_err(io_err("read artifact file", &path))?
            .len();
        Ok(ArtifactBytes::File { file, size })
    }

    /// Removes the files of pruned artifacts; a file that will not go is logged (it only
    /// takes space; the next open tries again).
    pub(super) fn remove(&self, pruned: &[String]) {
        for sha256 in pruned {
            let path = self.path(sha256);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => tracing::warn!(
                    path = %path.display(), error = %err,
                    "could not remove a pruned artifact's file"
                ),
            }
        }
    }

    /// At open: moves bytes rows still hold out to files (file first, then the column
    /// emptied, so a crash between leaves the row readable and the move is done again), and
    /// removes files and temporary files no row names.
    pub(super) fn tidy(&self, conn: &Connection) -> StoreResult<()> {
        let err = |op| move |source| StoreError::Sqlite { op, source };
        let held: Vec<String> = conn
            .prepare("SELECT sha256 FROM artifacts WHERE data IS NOT NULL")
            .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect())
            .map_err(err("move artifacts to files"))?;
        for sha256 in held {
            let data: Vec<u8> = conn
                .query_row(
                    "SELECT data FROM artifacts WHERE sha256 = ?1",
                    [&sha256],
                    |r| r.get(0),
                )
                .map_err(err("move artifacts to files"))?;
            self.write(&sha256, &data)?;
            conn.execute(
                "UPDATE artifacts SET data = NULL WHERE sha256 = ?1",
                [&sha256],
            )
            .map_err(err("move artifacts to files"))?;
            tracing::info!(%sha256, "moved an artifact out of the database to its file");
        }
        let named: Vec<String> = conn
            .prepare("SELECT sha256 FROM artifacts")
            .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect())
            .map_err(err("list artifacts"))?;
        let entries =
            std::fs::read_dir(&self.dir).map_err(io_err("list artifact directory", &self.dir))?;
        let strays: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| !named.contains(name))
            .collect();
        self.remove(&strays);
        Ok(())
    }
}
