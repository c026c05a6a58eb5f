//! Where `bosunctl` finds the hub: flags, then environment (`BOSUN_HUB_URL`,
//! `BOSUN_HUB_FINGERPRINT`, `BOSUN_ADMIN_TOKEN`), then the config file written by
//! `bosunctl hub init` (`$BOSUN_CTL_CONFIG`, else `$XDG_CONFIG_HOME/bosun/ctl.json`, else
//! `~/.config/bosun/ctl.json`, mode 0600).
//!
//! A config file named with `--config` (or `$BOSUN_CTL_CONFIG`) must exist; only the default
//! path may be absent. A file holding the admin token (`--admin-token-file`, or a config file
//! with `admin_token`) that its group or others can read is refused, with the `chmod 600` that
//! fixes it: a token that leaked to another local account is the hub's admin key.

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use secrecy::{ExposeSecret as _, SecretString};
use serde::{Deserialize, Serialize};

use crate::error::CtlError;
use crate::global::GlobalArgs;

/// Resolved connection settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `https://host:port`, no trailing slash.
    pub url: String,
    /// Pinned leaf SHA-256, 64 lowercase hex digits.
    pub fingerprint: String,
    /// The admin token.
    pub token: SecretString,
    /// The operator's OpenSSH `allowed_signers` file, against which `job submit` checks a
    /// signature before queueing (`hub init --allowed-signers`).
    pub allowed_signers: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct FileSettings {
    hub_url: Option<String>,
    fingerprint: Option<String>,
    admin_token: Option<SecretString>,
    #[serde(default)]
    allowed_signers: Option<PathBuf>,
}

#[derive(Serialize)]
struct FileSettingsOut<'a> {
    hub_url: &'a str,
    fingerprint: &'a str,
    admin_token: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    allowed_signers: Option<&'a Path>,
}

/// Largest config file read.
const MAX_CONFIG: u64 = 64 * 1024;
/// Largest admin token file read.
const MAX_TOKEN_FILE: u64 = 4 * 1024;

/// The config file path.
pub fn path(args: &GlobalArgs) -> Option<PathBuf> {
    if let Some(path) = &args.config {
        return Some(path.clone());
    }
    if let Some(xdg) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(xdg).join("bosun/ctl.json"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config/bosun/ctl.json"))
}

/// A file read whole (at most `limit` bytes), with the permission bits it had when read.
struct Read {
    bytes: zeroize::Zeroizing<Vec<u8>>,
    /// `Some(mode)` for a regular file; a pipe (`<(pass show …)`) or device has none.
    mode: Option<u32>,
}

fn read_bounded(path: &Path, limit: u64) -> std::io::Result<Read> {
    let file = std::fs::File::open(path)?;
    // The mode of the file that was opened, not of whatever the path names a moment later.
    let meta = file.metadata()?;
    let mut bytes = zeroize::Zeroizing::new(Vec::new());
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("larger than {limit} bytes"),
        ));
    }
    Ok(Read {
        bytes,
        mode: meta.is_file().then(|| meta.permissions().mode() & 0o7777),
    })
}

/// Refuses a regular file holding an operator token (of any role) that its group or others
/// can read.
fn check_private(path: &Path, what: &'static str, mode: Option<u32>) -> Result<(), CtlError> {
    match mode {
        Some(mode) if mode & 0o077 != 0 => Err(CtlError::InsecureFile {
            what,
            path: path.to_owned(),
            mode,
        }),
        _ => Ok(()),
    }
}

/// Reads the config file. `explicit`: named by `--config`/`$BOSUN_CTL_CONFIG`, so it must
/// exist; the default path may be absent.
fn read_file(path: &Path, explicit: bool) -> Result<Option<FileSettings>, CtlError> {
    let read = match read_bounded(path, MAX_CONFIG) {
        Ok(read) => read,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound && !explicit => return Ok(None),
        Err(source) => {
            return Err(CtlError::ConfigFile {
                path: path.to_owned(),
                source,
            });
        }
    };
    let settings: FileSettings =
        serde_json::from_slice(&read.bytes).map_err(|source| CtlError::ConfigSyntax {
            path: path.to_owned(),
            source,
        })?;
    if settings.admin_token.is_some() {
        check_private(path, "config file", read.mode)?;
    }
    Ok(Some(settings))
}

/// Checks and normalizes a hub URL.
pub fn normalize_url(url: &str) -> Result<String, CtlError> {
    let trimmed = url.trim().trim_end_matches('/');
    if !trimmed.starts_with("https://") || trimmed.len() <= "https://".len() {
        return Err(CtlError::BadUrl {
            url: url.to_owned(),
        });
    }
    Ok(trimmed.to_owned())
}

/// Checks and normalizes a pin of the hub: its certificate's SHA-256, or its key pin
/// (`spki:…`), which a renewal of the same key keeps.
pub fn normalize_fingerprint(value: &str) -> Result<String, CtlError> {
    bosun_pin::Pin::parse(value)
        .map(|pin| pin.to_string())
        .map_err(|_| CtlError::BadFingerprint {
            value: value.to_owned(),
        })
}

/// Reads the admin token from `--admin-token-file`, or takes it from flag/env.
fn token_from_args(args: &GlobalArgs) -> Result<Option<SecretString>, CtlError> {
    if let Some(file) = &args.admin_token_file {
        let read = read_bounded(file, MAX_TOKEN_FILE).map_err(|source| CtlError::ReadInput {
            path: file.clone(),
            source,
        })?;
        check_private(file, "token file", read.mode)?;
        let text = std::str::from_utf8(&read.bytes).map_err(|_| CtlError::BadArgument {
            what: "--admin-token-file",
            reason: format!("{} is not text", file.display()),
        })?;
        return Ok(Some(SecretString::from(text.trim().to_owned())));
    }
    Ok(args.admin_token.clone().map(SecretString::from))
}

/// Resolves settings from flags/env, falling back to the config file.
pub fn resolve(args: &GlobalArgs) -> Result<Settings, CtlError> {
    let file = match path(args) {
        Some(path) => read_file(&path, args.config.is_some())?,
        None => None,
    };
    let (file_url, file_fp, file_token, file_signers) = match file {
        Some(f) => (f.hub_url, f.fingerprint, f.admin_token, f.allowed_signers),
        None => (None, None, None, None),
    };
    let url = args
        .hub_url
        .clone()
        .or(file_url)
        .ok_or(CtlError::MissingSetting {
            setting: "hub URL",
            flag: "--hub-url",
            env: "BOSUN_HUB_URL",
        })?;
    let fingerprint = args
        .fingerprint
        .clone()
        .or(file_fp)
        .ok_or(CtlError::MissingSetting {
            setting: "hub fingerprint",
            flag: "--fingerprint",
            env: "BOSUN_HUB_FINGERPRINT",
        })?;
    let token = token_from_args(args)?
        .or(file_token)
        .ok_or(CtlError::MissingSetting {
            setting: "admin token",
            flag: "--admin-token-file",
            env: "BOSUN_ADMIN_TOKEN",
        })?;
    Ok(Settings {
        url: normalize_url(&url)?,
        fingerprint: normalize_fingerprint(&fingerprint)?,
        token,
        allowed_signers: file_signers,
    })
}

/// Resolves settings for `hub init`: only flags and environment count.
pub fn resolve_for_init(args: &GlobalArgs) -> Result<Settings, CtlError> {
    let url = args.hub_url.as_deref().ok_or(CtlError::MissingSetting {
        setting: "hub URL",
        flag: "--hub-url",
        env: "BOSUN_HUB_URL",
    })?;
    let fingerprint = args
        .fingerprint
        .as_deref()
        .ok_or(CtlError::MissingSetting {
            setting: "hub fingerprint",
            flag: "--fingerprint",
            env: "BOSUN_HUB_FINGERPRINT",
        })?;
    let token = token_from_args(args)?.ok_or(CtlError::MissingSetting {
        setting: "admin token",
        flag: "--admin-token-file",
        env: "BOSUN_ADMIN_TOKEN",
    })?;
    Ok(Settings {
        url: normalize_url(url)?,
        fingerprint: normalize_fingerprint(fingerprint)?,
        token,
        allowed_signers: None,
    })
}

/// Writes the config file with mode 0600.
pub fn save(path: &Path, settings: &Settings) -> Result<(), CtlError> {
    let err = |source| CtlError::ConfigFile {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let body = serde_json::to_vec_pretty(&FileSettingsOut {
        hub_url: &settings.url,
        fingerprint: &settings.fingerprint,
        admin_token: settings.token.expose_secret(),
        allowed_signers: settings.allowed_signers.as_deref(),
    })
    .map_err(|source| CtlError::ConfigSyntax {
        path: path.to_owned(),
        source,
    })?;
    write_private(path, &body).map_err(err)
}

/// Writes `bytes` to `path` with mode 0600, through a sibling `.json.tmp` file, synced and
/// renamed over it. A leftover temporary file keeps its old mode through `open`, so the mode
/// is set again before anything is written.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("json.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(config: &Path) -> GlobalArgs {
        GlobalArgs {
            hub_url: None,
            fingerprint: None,
            admin_token: None,
            admin_token_file: None,
            config: Some(config.to_owned()),
            output: crate::global::OutputFormat::Text,
            json_flag: false,
            wide: false,
        }
    }

    #[test]
    fn flags_win_over_the_config_file_and_values_are_normalized() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.json");
        let saved = Settings {
            url: "https://file.example:7443".into(),
            fingerprint: "ab".repeat(32),
            token: SecretString::from("bsa_from_file".to_owned()),
            allowed_signers: None,
        };
        save(&path, &saved).unwrap();

        let from_file = resolve(&args(&path)).unwrap();
        assert_eq!(from_file.url, "https://file.example:7443");
        assert_eq!(from_file.token.expose_secret(), "bsa_from_file");

        let mut flags = args(&path);
        flags.hub_url = Some("https://flag.example/".into());
        flags.fingerprint = Some(format!("SHA256:{}", "CD".repeat(32)));
        let resolved = resolve(&flags).unwrap();
        assert_eq!(resolved.url, "https://flag.example");
        assert_eq!(resolved.fingerprint, "cd".repeat(32));
        assert_eq!(resolved.token.expose_secret(), "bsa_from_file");
    }

    #[test]
    fn bad_settings_are_config_errors() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.json");
        std::fs::write(&empty, "{}").unwrap();
        let missing = resolve(&args(&empty)).unwrap_err();
        assert!(matches!(
            missing,
            CtlError::MissingSetting {
                setting: "hub URL",
                ..
            }
        ));
        assert_eq!(missing.exit_code(), crate::error::exit::CONFIG);
        assert!(matches!(
            normalize_url("http://hub"),
            Err(CtlError::BadUrl { .. })
        ));
        assert!(matches!(
            normalize_fingerprint("abc"),
            Err(CtlError::BadFingerprint { .. })
        ));
        let garbage = dir.path().join("garbage.json");
        std::fs::write(&garbage, "{not json").unwrap();
        let err = resolve(&args(&garbage)).unwrap_err();
        assert!(matches!(err, CtlError::ConfigSyntax { .. }));
        // The error text never carries the token.
        assert!(!format!("{err:?}").contains("bsa_"));
    }

    #[test]
    fn a_named_config_file_must_exist_but_the_default_may_be_absent() {
        let dir = tempfile::tempdir().unwrap();
        let named = dir.path().join("none.json");
        let err = resolve(&args(&named)).unwrap_err();
        assert!(
            matches!(&err, CtlError::ConfigFile { path, source }
                if path == &named && source.kind() == std::io::ErrorKind::NotFound),
            "{err:?}"
        );
        assert_eq!(err.exit_code(), crate::error::exit::CONFIG);
        assert!(read_file(&named, false).unwrap().is_none());
    }

    #[test]
    fn token_files_others_can_read_are_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("admin-token");
        std::fs::write(&token, "bsa_secret\n").unwrap();
        let mut flags = args(&dir.path().join("absent.json"));
        flags.config = None;
        flags.admin_token_file = Some(token.clone());
        for mode in [0o644, 0o640, 0o604] {
            std::fs::set_permissions(&token, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = token_from_args(&flags).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains(&format!("chmod 600 {}", token.display())),
                "{text}"
            );
            assert!(!text.contains("bsa_secret"), "{text}");
            assert_eq!(err.exit_code(), crate::error::exit::CONFIG);
        }
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        let read = token_from_args(&flags).unwrap().unwrap();
        assert_eq!(read.expose_secret(), "bsa_secret");
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(token_from_args(&flags).is_ok());
    }

    #[test]
    fn a_config_file_others_can_read_is_refused_only_when_it_holds_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.json");
        let saved = Settings {
            url: "https://file.example:7443".into(),
            fingerprint: "ab".repeat(32),
            token: SecretString::from("bsa_from_file".to_owned()),
            allowed_signers: None,
        };
        save(&path, &saved).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = resolve(&args(&path)).unwrap_err();
        assert!(
            matches!(err, CtlError::InsecureFile { mode: 0o644, .. }),
            "{err:?}"
        );
        // Whose token it is, the file does not say: any operator's, not the admin's.
        let said = err.to_string();
        assert!(said.contains("holds an operator token"), "{said}");
        assert!(!said.contains("admin"), "{said}");
        // Without the token in it, a readable config file is fine.
        std::fs::write(&path, r#"{"hub_url": "https://file.example"}"#).unwrap();
        let mut flags = args(&path);
        flags.fingerprint = Some("ab".repeat(32));
        flags.admin_token = Some("bsa_flag".into());
        assert_eq!(resolve(&flags).unwrap().url, "https://file.example");
    }

    #[test]
    fn oversized_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.json");
        std::fs::write(&path, vec![b' '; usize::try_from(MAX_CONFIG).unwrap() + 1]).unwrap();
        assert!(matches!(
            resolve(&args(&path)),
            Err(CtlError::ConfigFile { .. })
        ));
    }
}
