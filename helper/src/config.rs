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
//! See `docs/decisions/0006-helper-fixed-roots.md`. Reading the file and the ownership
//! checks are [`bosun_rootconf`]'s, shared with the update gate; what the settings must
//! satisfy is here.

use std::io;
use std::path::{Path, PathBuf};

use bosun_rootconf::{Layout, RootConfError};
use serde::Deserialize;

/// Installed location of the helper, relative to the prefix.
pub const INSTALLED_SUFFIX: &str = "usr/libexec/bosun/bosun-helper";
/// Location of the configuration file, relative to the prefix.
pub const CONFIG_SUFFIX: &str = "etc/bosun/helper.json";
/// Both, for the shared loader.
const LAYOUT: Layout = Layout {
    installed: INSTALLED_SUFFIX,
    config: CONFIG_SUFFIX,
};

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file, or a file or directory it names, could not be read or is not
    /// root-controlled, or the file is not valid JSON for [`Config`].
    #[error(transparent)]
    File(#[from] RootConfError),
    /// A configured path is not absolute or has characters we refuse to pass on.
    /// (`.0`: the setting; `.1`: its value)
    #[error("{0} = {1:?} must be an absolute path of [A-Za-z0-9/._-]")]
    BadPath(&'static str, PathBuf),
    /// The passwd file could not be read.
    /// (`.0`: its path; `.1`: cause)
    #[error("reading {0}")]
    ReadPasswd(PathBuf, #[source] io::Error),
    /// The agent user does not exist.
    /// (`.0`: the configured name; `.1`: the passwd file searched)
    #[error("agent user {0:?} not found in {1}")]
    NoSuchUser(String, PathBuf),
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

/// How many seconds each kind of program may run before its process group is killed, sized to
/// what it really does (decision 0048).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimeLimits {
    /// `pct config`, `pct push`/`pull` of a small file, `blkid`, one fixed command in a guest.
    pub quick: u64,
    /// `systemctl restart` of the controller's unit in a guest (its stop may take its timeout);
    /// a container's start and shutdown.
    pub restart: u64,
    /// `smartctl`, which may wake a sleeping disk.
    pub smart: u64,
    /// A golden build's package steps and image load.
    pub packages: u64,
    /// A golden build's vzdump of the builder.
    pub vzdump: u64,
}

impl Default for TimeLimits {
    fn default() -> Self {
        Self {
            quick: 60,
            restart: 180,
            smart: 120,
            packages: 1800,
            vzdump: 3600,
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
    /// The guest stamp key (root-only, 32 bytes), made by the first `build_golden`; the guest
    /// verbs enter only guests whose stamp verifies under it (decision 0048).
    pub guest_key: PathBuf,
    /// The operator's list of guests to adopt (one vmid a line): a listed guest without a valid
    /// stamp gets one at its next guest verb and leaves the list.
    pub adopt_file: PathBuf,
    /// Programs run by absolute path.
    pub programs: Programs,
    /// Time limits of the programs.
    pub limits: TimeLimits,
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
            guest_key: "/var/lib/bosun-helper/guest-stamp.key".into(),
            adopt_file: "/etc/bosun/adopt-guests".into(),
            programs: Programs::default(),
            limits: TimeLimits::default(),
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
#[cfg(test)]
pub(crate) fn config_path_for(exe: &Path) -> PathBuf {
    LAYOUT.config_path_for(exe)
}

/// Loads the configuration of the running helper.
pub fn load() -> Result<Loaded, ConfigError> {
    load_from(&LAYOUT.own_config_path()?, Path::new("/etc/passwd"))
}

/// Loads the configuration at `path` (defaults when it is absent).
pub fn load_from(path: &Path, passwd: &Path) -> Result<Loaded, ConfigError> {
    let config: Config = bosun_rootconf::load_or_default(path)?;
    let roots = config
        .backup_roots
        .iter()
        .map(|root| ("backup_roots", root));
    for (key, value) in [
        ("mount_root", &config.mount_root),
        ("sysfs_root", &config.sysfs_root),
        ("staging_root", &config.staging_root),
        ("golden_dir", &config.golden_dir),
        ("controller_image_archive", &config.controller_image_archive),
        ("dump_root", &config.dump_root),
        ("guest_key", &config.guest_key),
        ("adopt_file", &config.adopt_file),
        ("programs.blkid", &config.programs.blkid),
        ("programs.pct", &config.programs.pct),
        ("programs.vzdump", &config.programs.vzdump),
        ("programs.smartctl", &config.programs.smartctl),
        ("break_glass_root", &config.break_glass_root),
        ("slots_root", &config.slots_root),
    ]
    .into_iter()
    .chain(roots)
    {
        check_plain_absolute(key, value)?;
        // Root acts in and runs what these name: nobody else may be able to change
        // them. A missing one is reported when a verb needs it.
        if std::fs::symlink_metadata(value).is_ok() {
            bosun_rootconf::check_root_controlled(value)?;
        }
    }
    // The agent writes the inbox; what the helper copies from it is checked by hash.
    check_plain_absolute("update_inbox", &config.update_inbox)?;
    let agent_uid = lookup_uid(&config.agent_user, passwd)?;
    Ok(Loaded { config, agent_uid })
}

fn check_plain_absolute(key: &'static str, value: &Path) -> Result<(), ConfigError> {
    let text = value.to_string_lossy();
    let ok = text.starts_with('/')
        && !text.split('/').any(|c| c == "..")
        && text
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'/' | b'.' | b'_' | b'-'));
    ok.then_some(())
        .ok_or_else(|| ConfigError::BadPath(key, value.into()))
}

/// Finds `user`'s uid in a passwd file.
pub fn lookup_uid(user: &str, passwd: &Path) -> Result<u32, ConfigError> {
    let text = std::fs::read_to_string(passwd);
    let text = text.map_err(|source| ConfigError::ReadPasswd(passwd.into(), source))?;
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let uid = fields.nth(1)?.parse::<u32>().ok()?;
            (name == user).then_some(uid)
        })
        .next()
        .ok_or_else(|| ConfigError::NoSuchUser(user.into(), passwd.into()))
}
