//! Writing a key file once: never seen half-written, never replacing one that exists.
//!
//! The bytes go to a temporary file in the same directory (0600), are synced, and the file is
//! hard-linked to its name: the link fails if the name exists, and a crash at any point leaves
//! either no key file or a whole one. A key file written in place instead (create, then
//! write) leaves an empty file when the agent is killed between the two, and the agent then
//! refuses to start on it.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// What [`write_new`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Written {
    /// The file is ours.
    New,
    /// Another process made it first; ours was thrown away.
    AlreadyThere,
}

/// A step of [`write_new`] that failed.
#[derive(Debug)]
pub(super) struct NewFileError {
    /// What was being done.
    pub what: &'static str,
    /// The file it was done to.
    pub path: PathBuf,
    /// Cause.
    pub source: std::io::Error,
}

/// Writes `bytes` as `dir/name`, mode 0600, through the temporary file `dir/tmp_name`
/// (a leftover from a crash is removed first: its key was never handed out), then syncs
/// `dir`.
pub(super) fn write_new(
    dir: &Path,
    tmp_name: &str,
    name: &str,
    bytes: &[u8],
) -> Result<Written, NewFileError> {
    let tmp = dir.join(tmp_name);
    let path = dir.join(name);
    let fail = |what, path: &Path| {
        let path = path.to_owned();
        move |source| NewFileError { what, path, source }
    };
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(fail("removing", &tmp)(e));
        }
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(fail("creating", &tmp))?;
    let synced = file.write_all(bytes).and_then(|()| file.sync_all());
    drop(file);
    if let Err(e) = synced {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail("writing", &tmp)(e));
    }
    let linked = std::fs::hard_link(&tmp, &path);
    std::fs::remove_file(&tmp).map_err(fail("removing", &tmp))?;
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Ok(Written::AlreadyThere);
        }
        Err(e) => return Err(fail("linking", &path)(e)),
    }
    File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(fail("syncing", dir))?;
    Ok(Written::New)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn written_whole_at_0600_and_never_over_another() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".k.tmp"), "left by a crash").unwrap();
        assert_eq!(
            write_new(dir.path(), ".k.tmp", "k", b"first").unwrap(),
            Written::New
        );
        let meta = std::fs::metadata(dir.path().join("k")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(
            write_new(dir.path(), ".k.tmp", "k", b"second").unwrap(),
            Written::AlreadyThere
        );
        assert_eq!(std::fs::read(dir.path().join("k")).unwrap(), b"first");
        assert!(!dir.path().join(".k.tmp").exists());
    }

    #[test]
    fn a_directory_it_cannot_write_names_the_step() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("gone");
        let err = write_new(&missing, ".k.tmp", "k", b"key").unwrap_err();
        assert_eq!(err.what, "creating");
        assert_eq!(err.path, missing.join(".k.tmp"));
    }
}
