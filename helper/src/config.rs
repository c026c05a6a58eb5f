//! The helper's configuration: fixed at install time, never taken from the caller.
//!
//! The file is `<prefix>/etc/bosun/helper.json`, where `<prefix>` is what precedes
//! `/usr/libexec/bosun/bosun-helper` in the helper's own resolved path (`/proc/self/exe`).
//! Installed normally that is `/etc/bosun/helper.json`; a test installs a copy of the
//! binary under a temporary prefix with its own file. Sudoers and the socket unit name
//! the one production path, so a caller cannot pick another prefix. The file is
//! optional (the defaults are the production layout) but, when present, it and every
//! directory above it must be owned by root and not writable by group or others
//! (a sticky root-owned directory such as `/tmp` is accepted). The same holds for
//! every root and program it names: the fixed roots live outside the agent's own
//! state directory (`/var/lib/bosun`, owned by `bosun`), in `/var/lib/bosun-helper`.
//! See `docs/decisions/0006-helper-fixed-roots.md`.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Installed location of the helper, relative to the prefix.
pub const INSTALLED_SUFFIX: &str = "usr/libexec/bosun/bosun-helper";
/// Location of the configuration file, relative to the prefix.
pub const CONFIG_SUFFIX: &str = "etc/bosun/helper.json";
/// Largest configuration file read.
const MAX_CONFIG_BYTES: u64 = 16 * 1024;

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Reading the file or an ancestor's metadata failed.
    #[error("reading {path}")]
    Read {
        /// The path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// A file or directory that decides our behaviour is not root-controlled.
    #[error(
        "{path} must be owned by root and not writable by group or others (uid {uid}, mode {mode:o})"
    )]
    Insecure {
        /// The path.
        path: PathBuf,
        /// Its owner.
        uid: u32,
        /// Its mode.
        mode: u32,
    },
    /// The file is not valid JSON for [`Config`].
    #[error("parsing {path}")]
    Parse {
        /// The path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
    /// A configured path is not absolute or has characters we refuse to pass on.
    #[error("{key} = {value:?} must be an absolute path of [A-Za-z0-9/._-]")]
    BadPath {
        /// The setting.
        key: &'static str,
        /// Its value.
        value: PathBuf,
    },
    /// The agent user does not exist.
    #[error("agent user {user:?} not found in {passwd}")]
    NoSuchUser {
        /// Configured name.
        user: String,
        /// Searched file.
        passwd: PathBuf,
    },
}

/// Absolute paths of the programs the helper runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Programs {
    /// `blkid`
    pub blkid: PathBuf,
    /// `pct`
    pub pct: PathBuf,
    /// `vzdump`
    pub vzdump: PathBuf,
    /// `smartctl`
    pub smartctl: PathBuf,
}

impl Default for Programs {
    fn default() -> Self {
        Self {
            blkid: "/usr/sbin/blkid".into(),
            pct: "/usr/sbin/pct".into(),
            vzdump: "/usr/bin/vzdump".into(),
            smartctl: "/usr/sbin/smartctl".into(),
        }
    }
}

/// The helper's fixed roots and programs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The only user allowed to call the helper.
    pub agent_user: String,
    /// Storage targets are mounted at `<mount_root>/<target_id>`.
    pub mount_root: PathBuf,
    /// Where sysfs is mounted; `mount_by_uuid` reads a disk's removable flag, bus and
    /// serial beneath it (tests point it at a tree of their own).
    pub sysfs_root: PathBuf,
    /// Root-only directory on tmpfs where `push_bootstrap` stages a document for
    /// `pct push` (created 0700 when missing).
    pub staging_root: PathBuf,
    /// Holds the units baked into the golden image.
    pub golden_dir: PathBuf,
    /// The controller image (`docker save` archive) baked into the golden image.
    pub controller_image_archive: PathBuf,
    /// The dump directory of the golden storage, where vzdump writes archives;
    /// `hash_archive` reads only files directly beneath it.
    pub dump_root: PathBuf,
    /// Where backup storages keep their dump directories (PVE's `local`, its `/mnt/pve`
    /// mounts, the helper's own USB mounts, local directory targets): `hash_archive` reads
    /// archives only in a dump directory beneath one of these.
    pub backup_roots: Vec<PathBuf>,
    /// Programs run by absolute path.
    pub programs: Programs,
    /// Holds the break-glass account's `authorized_keys` (created 0755 when missing);
    /// sshd reads it through the package's drop-in for `bosun-breakglass`.
    pub break_glass_root: PathBuf,
    /// Holds the agent's A/B slots (`a/`, `b/`), the `current` link and the update record.
    pub slots_root: PathBuf,
    /// The file the agent downloads an update into. It lives in the agent's own state
    /// directory, so it is not root-controlled: the helper opens it without following
    /// symlinks, takes it only as a regular file of the agent user with one link, and
    /// checks the SHA-256 of the very bytes it copies.
    pub update_inbox: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            agent_user: "bosun".into(),
            mount_root: "/var/lib/bosun-helper/mnt".into(),
            sysfs_root: "/sys".into(),
            staging_root: "/run/bosun-helper".into(),
            golden_dir: "/usr/share/bosun/golden".into(),
            controller_image_archive: "/var/lib/bosun-helper/golden/controller-image.tar".into(),
            dump_root: "/var/lib/vz/dump".into(),
            backup_roots: vec![
                "/var/lib/vz".into(),
                "/mnt/pve".into(),
                "/var/lib/bosun-helper/mnt".into(),
            ],
            programs: Programs::default(),
            break_glass_root: "/etc/bosun/break-glass".into(),
            slots_root: bosun_proto::update::DEFAULT_SLOTS_ROOT.into(),
            update_inbox: "/var/lib/bosun/update/incoming/bosun-agentd".into(),
        }
    }
}

/// A loaded configuration and the agent's uid.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The settings.
    pub config: Config,
    /// uid of [`Config::agent_user`].
    pub agent_uid: u32,
}

/// Where the configuration of a helper installed at `exe` lives.
pub fn config_path_for(exe: &Path) -> PathBuf {
    let text = exe.to_string_lossy();
    let prefix = text
        .strip_suffix(INSTALLED_SUFFIX)
        .filter(|p| p.ends_with('/'))
        .unwrap_or("/");
    PathBuf::from(format!("{prefix}{CONFIG_SUFFIX}"))
}

/// Loads the configuration of the running helper.
pub fn load() -> Result<Loaded, ConfigError> {
    let exe = std::fs::read_link("/proc/self/exe").map_err(|source| ConfigError::Read {
        path: "/proc/self/exe".into(),
        source,
    })?;
    load_from(&config_path_for(&exe), Path::new("/etc/passwd"))
}

/// Loads the configuration at `path` (defaults when it is absent).
pub fn load_from(path: &Path, passwd: &Path) -> Result<Loaded, ConfigError> {
    let config = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Config::default(),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.into(),
                source,
            });
        }
        Ok(_) => read_checked(path)?,
    };
    for (key, value) in [
        ("mount_root", &config.mount_root),
        ("sysfs_root", &config.sysfs_root),
        ("staging_root", &config.staging_root),
        ("golden_dir", &config.golden_dir),
        ("controller_image_archive", &config.controller_image_archive),
        ("dump_root", &config.dump_root),
        ("programs.blkid", &config.programs.blkid),
        ("programs.pct", &config.programs.pct),
        ("programs.vzdump", &config.programs.vzdump),
        ("programs.smartctl", &config.programs.smartctl),
        ("break_glass_root", &config.break_glass_root),
        ("slots_root", &config.slots_root),
    ] {
        check_plain_absolute(key, value)?;
        // Root acts in and runs what these name: nobody else may be able to change
        // them. A missing one is reported when a verb needs it.
        if std::fs::symlink_metadata(value).is_ok() {
            check_root_controlled(value)?;
        }
    }
    for root in &config.backup_roots {
        check_plain_absolute("backup_roots", root)?;
        if std::fs::symlink_metadata(root).is_ok() {
            check_root_controlled(root)?;
        }
    }
    // The agent writes the inbox; what the helper copies from it is checked by hash.
    check_plain_absolute("update_inbox", &config.update_inbox)?;
    let agent_uid = lookup_uid(&config.agent_user, passwd)?;
    Ok(Loaded { config, agent_uid })
}

fn read_checked(path: &Path) -> Result<Config, ConfigError> {
    let read_err = |source| ConfigError::Read {
        path: path.into(),
        source,
    };
    check_root_controlled(path)?;
    let meta = std::fs::metadata(path).map_err(read_err)?;
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(read_err(io::Error::new(
            io::ErrorKind::InvalidData,
            "larger than 16 KiB",
        )));
    }
    let text = std::fs::read(path).map_err(read_err)?;
    serde_json::from_slice(&text).map_err(|source| ConfigError::Parse {
        path: path.into(),
        source,
    })
}

/// Refuses `path` unless it and every directory above it are owned by root, are not
/// symlinks, and are not writable by group or others (a sticky directory excepted).
pub(crate) fn check_root_controlled(path: &Path) -> Result<(), ConfigError> {
    let mut ancestor = Some(path);
    while let Some(p) = ancestor {
        let meta = std::fs::symlink_metadata(p).map_err(|source| ConfigError::Read {
            path: p.into(),
            source,
        })?;
        let sticky_dir = meta.is_dir() && meta.mode() & 0o1000 != 0;
        let writable = meta.mode() & 0o022 != 0;
        if meta.uid() != 0 || meta.file_type().is_symlink() || (writable && !sticky_dir) {
            return Err(ConfigError::Insecure {
                path: p.into(),
                uid: meta.uid(),
                mode: meta.mode(),
            });
        }
        ancestor = p.parent();
    }
    Ok(())
}

fn check_plain_absolute(key: &'static str, value: &Path) -> Result<(), ConfigError> {
    let text = value.to_string_lossy();
    let ok = text.starts_with('/')
        && !text.split('/').any(|c| c == "..")
        && text
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'/' | b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::BadPath {
            key,
            value: value.into(),
        })
    }
}

/// Finds `user`'s uid in a passwd file.
pub fn lookup_uid(user: &str, passwd: &Path) -> Result<u32, ConfigError> {
    let text = std::fs::read_to_string(passwd).map_err(|source| ConfigError::Read {
        path: passwd.into(),
        source,
    })?;
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let uid = fields.nth(1)?.parse::<u32>().ok()?;
            (name == user).then_some(uid)
        })
        .next()
        .ok_or_else(|| ConfigError::NoSuchUser {
            user: user.into(),
            passwd: passwd.into(),
        })
}
