//! The apps file: which apps the controller stops and starts around a backup.
//!
//! Two files may list apps. The one the controller was built with (`--apps`, baked into the
//! controller image or the packaged unit's conffile) is read once at start, and an invalid one
//! is an exit. The guest's own (`--customer-apps`, `/etc/bosun/apps.json` in a golden guest,
//! decision 0107) is the customer's: written in their guest next to the app they deployed,
//! read again at every pass so a new deploy needs no restart, and never a reason to skip a
//! backup — missing is no apps, invalid is a warning and a backup without them.
//!
//! Both are bounded: the file's size, the number of apps, a name's and a command's length.

use std::collections::HashSet;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use crate::hooks::App;

/// The largest apps file read, in bytes.
pub const MAX_APPS_FILE: u64 = 64 * 1024;
/// The most apps one file lists.
pub const MAX_APPS: usize = 32;
/// The longest app name.
pub const MAX_NAME: usize = 64;
/// The most arguments a stop or start command has.
pub const MAX_ARGS: usize = 64;
/// The longest argument.
pub const MAX_ARG: usize = 4096;
/// The most data paths one app names.
pub const MAX_DATA: usize = 32;

/// Why an apps file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AppsError {
    /// The file could not be read.
    #[error("failed to read the apps file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_APPS_FILE`].
    #[error("the apps file {path} is larger than {max} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The bound.
        max: u64,
    },
    /// The file is not a JSON list of apps.
    #[error("the apps file {path} is not a JSON list of apps")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// An app is refused.
    #[error("the apps file {path}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the app.
        reason: String,
    },
}

/// Reads the apps file at `path`: it must exist.
pub fn load(path: &Path) -> Result<Vec<App>, AppsError> {
    match read(path)? {
        Some(apps) => Ok(apps),
        None => Err(AppsError::Read {
            path: path.to_path_buf(),
            source: std::io::ErrorKind::NotFound.into(),
        }),
    }
}

/// Reads the customer's apps file at `path`: a missing file lists no apps.
pub fn load_customer(path: &Path) -> Result<Vec<App>, AppsError> {
    Ok(read(path)?.unwrap_or_default())
}

/// Parses and checks apps from `text`; `path` names it in errors.
pub fn parse(path: &Path, text: &[u8]) -> Result<Vec<App>, AppsError> {
    let apps: Vec<App> = serde_json::from_slice(text).map_err(|source| AppsError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    check(path, &apps)?;
    Ok(apps)
}

/// The apps of `first` then `second`; refused when a name is in both.
pub fn merge(first: &[App], second: Vec<App>, second_path: &Path) -> Result<Vec<App>, AppsError> {
    if let Some(app) = second
        .iter()
        .find(|a| first.iter().any(|b| b.name == a.name))
    {
        return Err(AppsError::Invalid {
            path: second_path.to_path_buf(),
            reason: format!("app {:?} is already the controller's own", app.name),
        });
    }
    Ok(first.iter().cloned().chain(second).collect())
}

fn read(path: &Path) -> Result<Option<Vec<App>>, AppsError> {
    let read_err = |source| AppsError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_err(e)),
    };
    let mut text = Vec::new();
    file.take(MAX_APPS_FILE + 1)
        .read_to_end(&mut text)
        .map_err(read_err)?;
    if u64::try_from(text.len()).unwrap_or(u64::MAX) > MAX_APPS_FILE {
        return Err(AppsError::TooLarge {
            path: path.to_path_buf(),
            max: MAX_APPS_FILE,
        });
    }
    parse(path, &text).map(Some)
}

fn check(path: &Path, apps: &[App]) -> Result<(), AppsError> {
    let bad = |reason: String| AppsError::Invalid {
        path: path.to_path_buf(),
        reason,
    };
    if apps.len() > MAX_APPS {
        return Err(bad(format!("{} apps, at most {MAX_APPS}", apps.len())));
    }
    let mut names = HashSet::new();
    for app in apps {
        let name = &app.name;
        if name.is_empty()
            || name.len() > MAX_NAME
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(bad(format!(
                "app name {name:?} is not 1 to {MAX_NAME} letters, digits, '-', '_' or '.'"
            )));
        }
        if !names.insert(name.as_str()) {
            return Err(bad(format!("app {name:?} is listed twice")));
        }
        for (action, argv) in [("stop", &app.stop), ("start", &app.start)] {
            if argv.is_empty() || argv.len() > MAX_ARGS {
                return Err(bad(format!(
                    "app {name:?}: its {action} command has {} arguments, 1 to {MAX_ARGS} expected",
                    argv.len()
                )));
            }
            if argv.iter().any(|a| a.len() > MAX_ARG || a.contains('\0')) {
                return Err(bad(format!(
                    "app {name:?}: an argument of its {action} command is longer than {MAX_ARG} bytes or holds a NUL"
                )));
            }
        }
        if app.data.len() > MAX_DATA || app.data.iter().any(|p| !p.is_absolute()) {
            return Err(bad(format!(
                "app {name:?}: data must be at most {MAX_DATA} absolute paths"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
